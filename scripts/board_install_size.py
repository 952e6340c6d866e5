"""Installed size of each board extra on aarch64, measured on any host without emulation.

    python scripts/board_install_size.py                       # this checkout: agent-onnx, agent-tflite, agent
    python scripts/board_install_size.py --ref main            # the same for a git ref (git archive of it)
    python scripts/board_install_size.py --requirement pynacl --requirement cryptography   # single packages

Builds the edgeopt wheel from the source (`pip wheel --no-deps`), installs it with each extra into
its own folder with `pip install --target --platform manylinux_2_*_aarch64 --only-binary=:all:`
(the real aarch64 wheels from the index, nothing run), compiles the bytecode a board's pip would
(`compileall`; bytecode depends on the Python version only), and sums the sizes of the files each
distribution installed (its RECORD, plus the .pyc of each of its .py files). MB = 10**6 bytes,
apparent file sizes (not disk blocks).

pip evaluates environment markers (`python_version < '3.11'`, `platform_system == 'Linux'`)
with the interpreter running it, not the target: run it with the Python the board has (default
target version: this interpreter's), on Linux.
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
BOARD_EXTRAS = ("agent-onnx", "agent-tflite", "agent")
BOOKWORM_GLIBC = 36  # Debian / Raspberry Pi OS bookworm: glibc 2.36


def aarch64_platforms(glibc_minor: int) -> List[str]:
    """Every manylinux tag a board with glibc 2.<glibc_minor> installs; pip takes --platform
    literally (a wheel tagged manylinux_2_27 is skipped unless that very tag is listed)."""
    return ["manylinux2014_aarch64"] + [f"manylinux_2_{minor}_aarch64" for minor in range(17, glibc_minor + 1)]

MB = 1e6


def _run(args: List[str]) -> None:
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(args)}\n{result.stdout[-2000:]}{result.stderr[-4000:]}")


def source_tree(ref: str, scratch: Path) -> Path:
    """A copy under scratch of the working tree's files (tracked and new, not ignored) or of `ref`'s
    (git archive): building there leaves no build/ in the checkout, nor stale files in the wheel."""
    tree = scratch / "source"
    tree.mkdir()
    if not ref:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, check=True).stdout.decode().split("\0")
        for name in filter(None, listed):
            if (ROOT / name).is_file():
                (tree / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, tree / name)
        return tree
    archive = scratch / "source.tar"
    _run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref])
    with tarfile.open(archive) as tar:
        tar.extractall(tree)
    return tree


def _commit(ref: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True).stdout.strip()


def build_wheel(source: Path, scratch: Path) -> Path:
    out = scratch / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(source), "-w", str(out)])
    return next(out.glob("edgeopt-*.whl"))


def install(requirement: str, target: Path, python_version: str, platforms) -> None:
    args = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
            "--python-version", python_version, "--implementation", "cp", "--only-binary=:all:"]
    for platform in platforms:
        args += ["--platform", platform]
    _run(args + [requirement])
    _run([sys.executable, "-m", "compileall", "-q", str(target)])


def _pycs(path: Path) -> List[Path]:
    cache = path.parent / "__pycache__"
    return sorted(cache.glob(f"{path.stem}.*.pyc")) if cache.is_dir() else []


def sizes_by_distribution(target: Path) -> Dict[str, dict]:
    """{distribution: {"version", "bytes"}} from each dist-info's RECORD and the bytecode beside it."""
    found = {}
    for info in sorted(target.glob("*.dist-info")):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        files = set()
        with open(info / "RECORD", newline="", encoding="utf-8") as record:
            for row in csv.reader(record):
                if row:
                    files.add((target / row[0]).resolve())
        files |= {pyc.resolve() for path in list(files) if path.suffix == ".py" for pyc in _pycs(path)}
        found[name] = {"version": version, "bytes": sum(p.stat().st_size for p in files if p.is_file())}
    return found


def total_bytes(target: Path) -> int:
    return sum(p.stat().st_size for p in target.rglob("*") if p.is_file() and not p.is_symlink())


def measure(requirement: str, target: Path, python_version: str, platforms) -> dict:
    install(requirement, target, python_version, platforms)
    distributions = sizes_by_distribution(target)
    return {"total_bytes": total_bytes(target), "distributions": distributions}


def table_row(label: str, result: dict, largest: int) -> str:
    ranked = sorted(result["distributions"].items(), key=lambda item: -item[1]["bytes"])
    parts = ", ".join(f"{name} {d['version']} {d['bytes'] / MB:.1f}" for name, d in ranked[:largest])
    return f"| `{label}` | {result['total_bytes'] / MB:.1f} | {parts} |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default="", help="measure this git ref instead of the working tree")
    parser.add_argument("--extra", action="append", dest="extras", help=f"extras to measure (default {BOARD_EXTRAS})")
    parser.add_argument("--requirement", action="append", default=[],
                        help="measure this requirement alone instead of edgeopt's extras (repeatable)")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    parser.add_argument("--glibc-minor", type=int, default=BOOKWORM_GLIBC,
                        help="the board's glibc 2.N (default %(default)s, bookworm); sets the manylinux tags")
    parser.add_argument("--largest", type=int, default=6, help="distributions listed per row")
    parser.add_argument("--json", type=Path, help="also write every distribution's size here")
    args = parser.parse_args(argv)
    platforms = aarch64_platforms(args.glibc_minor)
    if args.python_version != f"{sys.version_info[0]}.{sys.version_info[1]}":
        print("warning: markers are evaluated with this interpreter, not the target Python", file=sys.stderr)

    results = {}
    with tempfile.TemporaryDirectory(prefix="board-size-") as tmp:
        scratch = Path(tmp)
        if args.requirement:
            wanted = {req: req for req in args.requirement}
        else:
            wheel = build_wheel(source_tree(args.ref, scratch), scratch)
            wanted = {extra: f"{wheel}[{extra}]" for extra in (args.extras or BOARD_EXTRAS)}
        for label, requirement in wanted.items():
            results[label] = measure(requirement, scratch / f"site-{len(results)}", args.python_version, platforms)

    if args.requirement:
        source = "requirements alone"
    else:
        source = f"{args.ref} ({_commit(args.ref)})" if args.ref else "working tree"
    print(f"source: {source}; python {args.python_version}; manylinux_2_17..2_{args.glibc_minor} aarch64")
    print("| install | MB | largest distributions (MB) |")
    print("|---|---:|---|")
    for label, result in results.items():
        print(table_row(label, result, args.largest))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
