"""A native crash in the benchmark child is summarised by the frame that crashed, not importlib's."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap

from edgeopt_agent.bench.isolation import _tail

# A native module whose initialisation segfaults, like onnxruntime's or LiteRT's CPU detection under
# qemu: the crash happens in C called straight from importlib, so importlib's frames are innermost.
CRASHING_IMPORT = textwrap.dedent("""
    import ctypes
    import faulthandler
    import importlib.machinery
    import sys

    class CrashingLoader:
        create_module = staticmethod(lambda spec: None)
        # A C function pointer to address 1, called with the module: native code, no Python frame
        exec_module = ctypes.CFUNCTYPE(None, ctypes.py_object)(1)

    class Finder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "fake_runtime._native":
                return importlib.machinery.ModuleSpec(name, CrashingLoader())
            return None

    sys.meta_path.insert(0, Finder)
    faulthandler.enable()
    import fake_runtime
""")


def test_a_crash_during_an_import_is_summarised_by_the_librarys_frame(tmp_path):
    package = tmp_path / "fake_runtime"
    package.mkdir()
    (package / "__init__.py").write_text("import os\nfrom . import _native\n")
    log = tempfile.TemporaryFile()
    proc = subprocess.run([sys.executable, "-c", CRASHING_IMPORT], cwd=tmp_path, stderr=log, timeout=60)
    assert proc.returncode != 0
    log.seek(0)
    frames = [line.strip() for line in log.read().decode().splitlines() if line.strip().startswith("File ")]
    assert "importlib._bootstrap" in frames[0]  # what the summary used to show

    summary = _tail(log)

    assert summary.startswith("Fatal Python error: Segmentation fault")
    assert "fake_runtime" in summary and "__init__.py" in summary and "line 2" in summary
    assert "importlib" not in summary
