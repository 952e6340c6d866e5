import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def open_dir():
    """A folder any user may enter (pytest's own tmp_path is root's alone), as /srv/... would be."""
    folder = Path(tempfile.mkdtemp(prefix="edgeopt-broker-test-"))
    folder.chmod(0o755)
    if any(not parent.stat().st_mode & 0o001 for parent in folder.parents):
        shutil.rmtree(folder)
        pytest.skip(f"{tempfile.gettempdir()} is closed to other users")
    yield folder
    shutil.rmtree(folder)
