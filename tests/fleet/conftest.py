import os
import shutil
import tempfile
import uuid
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


PG_URL = os.environ.get("EDGEOPT_TEST_POSTGRES", "postgresql://root@127.0.0.1:5432/test")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/fleet.db"
        return
    with postgres_schema() as url:
        yield url


class postgres_schema:
    """A fresh schema on the test PostgreSQL server, dropped afterwards (skips when there is none)."""

    def __enter__(self):
        try:
            import psycopg
        except ImportError:
            pytest.skip("psycopg is not installed (pip install 'edgeopt[fleet]')")
        try:
            self._admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
        except psycopg.OperationalError as exc:
            pytest.skip(f"no PostgreSQL server at {PG_URL}: {str(exc).strip().splitlines()[0]}")
        self.schema = f"edgeopt_test_{uuid.uuid4().hex[:12]}"
        self._admin.execute(f"CREATE SCHEMA {self.schema}")
        return f"{PG_URL}?options=-csearch_path%3D{self.schema}"

    def __exit__(self, *exc):
        self._admin.execute(f"DROP SCHEMA {self.schema} CASCADE")
        self._admin.close()
