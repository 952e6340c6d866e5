"""Package discovery only; all metadata lives in pyproject.toml.

The fixed top-level layout (sdk/, agent/, converters/, device_profiles/) holds four import
packages side by side, which pyproject's declarative find cannot map in one go.
"""
from setuptools import find_packages, setup

ROOTS = {
    "edgeopt": "sdk/edgeopt",
    "edgeopt_agent": "agent/edgeopt_agent",
    "edgeopt_converters": "converters/edgeopt_converters",
    "edgeopt_device_profiles": "device_profiles",
}


def _packages():
    found = []
    for name, path in ROOTS.items():
        found.append(name)
        found.extend(f"{name}.{sub}" for sub in find_packages(path))
    return found


setup(packages=_packages(), package_dir=ROOTS)
