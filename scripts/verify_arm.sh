#!/usr/bin/env bash
# Board truth without a board: run the agent's real code path on aarch64 under qemu-user.
#
#   sudo bash scripts/verify_arm.sh [--suite bookworm|trixie|bullseye] [--skip-tests] [--profiles "rpi4 rpi5 jetson-orin-nano"]
#
# 1. builds an arm64 Debian userland (debootstrap + qemu-user-static, Debian's own packages) under
#    $ARM_CACHE (default /work/arm-cache), with an ARM-style /proc/cpuinfo bind-mounted in and the
#    emulated CPU pinned (cortex-a72 for rpi4, cortex-a76 for rpi5 and Orin): under qemu 7.2,
#    onnxruntime and LiteRT crash in their CPU detection on the emulator's own /proc/cpuinfo, and the
#    default `max` CPU (with SME) makes XNNPACK's INT8 TFLite output wrong;
# 2. installs the agent wheel built from this checkout with `edgeopt[agent]` (real aarch64 wheels)
#    and records the installed size of `agent-onnx`, `agent-tflite`, `agent-ncnn`, `agent-executorch`
#    and `agent`; then adds the ncnn and ExecuTorch runtimes to the `agent` venv, which runs the rest.
#    ExecuTorch needs Python 3.12+ on a board (executorch-numpy-runtime): bookworm's Python 3.11 gets
#    none, and its .pte artifacts are listed as not run, with that reason; `--suite trixie` (Python
#    3.13) runs them;
# 3. runs the agent test suite (tests/agent) in the emulated userland;
# 4. converts a small CNN on this (x86) host for every profile's recipe and compares every artifact's
#    outputs (ONNX, TFLite, ncnn, ExecuTorch) on aarch64 with x86's: cosine, max error, argmax
#    agreement (scripts/arm_compare.py);
# 5. deploys signed jobs to an emulated rpi5 agent (TFLite INT8, ncnn FP16 and, on Python 3.12+,
#    ExecuTorch INT8) and checks each answer (scripts/arm_deploy.py).
# Writes its figures to $ARM_CACHE/results/<suite>/ and prints them. Needs root, network to a
# Debian mirror (the host's apt source) and the package index, ~3 GB of disk. Slow: 30-60 min on
# 2 cores, most of it emulated pip and tests; run before a release, not in CI.
set -euo pipefail

SUITE=bookworm
SKIP_TESTS=0
PROFILES="rpi4 rpi5 jetson-orin-nano"
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) SUITE=$2; shift 2 ;;
        --skip-tests) SKIP_TESTS=1; shift ;;
        --profiles) PROFILES=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${ARM_CACHE:-/work/arm-cache}
ROOT=$CACHE/rootfs-$SUITE
RESULTS=$CACHE/results/$SUITE
HOST_PY=${HOST_PY:-$REPO/.venv/bin/python}
mkdir -p "$CACHE" "$RESULTS"
log() { echo "[verify_arm $(date -u +%H:%M:%S)] $*"; }

[ "$(id -u)" = 0 ] || { echo "run as root (debootstrap, chroot, mounts)" >&2; exit 1; }
for tool in debootstrap qemu-aarch64-static; do
    command -v $tool >/dev/null || { echo "install Debian's debootstrap and qemu-user-static first" >&2; exit 1; }
done

# -- binfmt: the kernel hands aarch64 programs to qemu (F: the interpreter is opened now, so it works in the chroot)
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    log "registering qemu-aarch64 with binfmt_misc"
    tr -d '\n' < /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register
fi

# -- the userland, once per suite
MIRROR=${MIRROR:-$(grep -h -m1 -oE '(URIs:|deb) +https?://[^ ]+/debian( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}' || true)}
[ -n "$MIRROR" ] || { echo "no Debian mirror in the host's apt sources: set MIRROR=" >&2; exit 1; }
if [ ! -x "$ROOT/usr/bin/python3" ]; then
    log "debootstrap $SUITE arm64 from $MIRROR into $ROOT"
    rm -rf "$ROOT"
    debootstrap --arch=arm64 --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates,mosquitto,procps \
        "$SUITE" "$ROOT" "$MIRROR" > "$CACHE/debootstrap-$SUITE.log" 2>&1 \
        || { tail -20 "$CACHE/debootstrap-$SUITE.log"; exit 1; }
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
fi

# -- mounts: /proc with an ARM board's cpuinfo over it, /dev, /tmp, the checkout
CPUINFO=$CACHE/cpuinfo-arm
cat > "$CPUINFO" <<'EOF'
processor	: 0
BogoMIPS	: 108.00
Features	: fp asimd evtstrm crc32 cpuid
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x0
CPU part	: 0xd08
CPU revision	: 3

processor	: 1
BogoMIPS	: 108.00
Features	: fp asimd evtstrm crc32 cpuid
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x0
CPU part	: 0xd08
CPU revision	: 3

Hardware	: BCM2835
Model		: Raspberry Pi 4 Model B Rev 1.4
EOF
cleanup() {
    for m in "$ROOT/repo" "$ROOT/proc/cpuinfo" "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" "$ROOT/tmp"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m" || true
    done
}
trap cleanup EXIT
mkdir -p "$ROOT/repo"
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mount --bind "$CPUINFO" "$ROOT/proc/cpuinfo"
mountpoint -q "$ROOT/sys" || mount -o ro --rbind /sys "$ROOT/sys"  # cpuinfo libraries read the CPU lists here
mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
mountpoint -q "$ROOT/tmp" || mount -t tmpfs tmpfs "$ROOT/tmp"
mount --bind "$REPO" "$ROOT/repo"

# The host's CA bundle, so pip in the userland trusts what pip on the host trusts (a proxy's CA).
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/opt/host-ca.crt"

# Run a command in the userland on a pinned CPU model (qemu-user reads QEMU_CPU).
arm() {
    local cpu=$1; shift
    chroot "$ROOT" /usr/bin/env -i QEMU_CPU="$cpu" HOME=/root PATH=/usr/local/bin:/usr/bin:/bin \
        LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/opt/host-ca.crt PIP_DEFAULT_TIMEOUT=180 \
        EDGEOPT_EMULATED=qemu-user "$@"
}
PYVER=$(arm cortex-a72 /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
log "userland ready: Debian $SUITE, Python $PYVER, $(arm cortex-a72 /usr/bin/uname -m)"

# -- the wheel from this checkout (built on the host: the build backend needs Python 3.9+)
WHEELS=$CACHE/wheels-$SUITE
rm -rf "$WHEELS" "$REPO/build" && mkdir -p "$WHEELS"  # no stale build/lib in the wheel
"$HOST_PY" -m pip wheel -q --no-deps "$REPO" -w "$WHEELS" > "$CACHE/wheel.log" 2>&1
WHEEL=$(ls "$WHEELS"/edgeopt-*.whl)
mkdir -p "$ROOT/opt/wheels" && cp "$WHEEL" "$ROOT/opt/wheels/"
WHEEL_IN=/opt/wheels/$(basename "$WHEEL")

# -- one venv per extra: its installed size; the `agent` one runs everything below
: > "$RESULTS/sizes.txt"
for extra in agent-onnx agent-tflite agent-ncnn agent-executorch agent; do
    venv=/opt/venv-$extra
    if [ ! -x "$ROOT$venv/bin/edgeopt-agent" ] || ! arm cortex-a72 $venv/bin/pip install -q --no-deps --force-reinstall "$WHEEL_IN" >/dev/null 2>&1; then
        log "installing edgeopt[$extra] (real aarch64 wheels)"
        rm -rf "$ROOT$venv"
        arm cortex-a72 /usr/bin/python3 -m venv $venv
        arm cortex-a72 $venv/bin/pip install -q "$WHEEL_IN[$extra]" > "$RESULTS/pip-$extra.log" 2>&1 \
            || { tail -20 "$RESULTS/pip-$extra.log"; exit 1; }
    fi
    base=$(du -sm "$ROOT$venv" | cut -f1)
    echo "$extra $base MB (venv on aarch64, Python $PYVER, pip's own files included)" | tee -a "$RESULTS/sizes.txt"
    arm cortex-a72 $venv/bin/python -c "
import importlib.metadata as m, pathlib
rows = []
for d in m.distributions():
    size = sum((pathlib.Path(d.locate_file(f)).stat().st_size for f in d.files or [] if pathlib.Path(d.locate_file(f)).is_file()), 0)
    rows.append((size, d.metadata['Name'], d.version))
tooling = ('pip', 'setuptools', 'wheel')
print('   packages without the venv tooling (pip, setuptools): %.1f MB' % (sum(s for s, n, _ in rows if n.lower() not in tooling) / 1e6))
for size, name, version in sorted(rows, reverse=True)[:10]:
    print('   %-22s %-10s %6.1f MB' % (name, version, size / 1e6))
" | tee -a "$RESULTS/sizes.txt"
done
VENV=/opt/venv-agent
# The runtimes beyond the `agent` extra (after its size is taken): ncnn, and ExecuTorch where Python is 3.12+.
arm cortex-a72 $VENV/bin/pip install -q "$WHEEL_IN[agent,agent-ncnn,agent-executorch]" > "$RESULTS/pip-runtimes.log" 2>&1 \
    || { tail -20 "$RESULTS/pip-runtimes.log"; exit 1; }
# Test tooling beside the venv, not in it (its size stays the agent's): the tests build their
# small models with the onnx package.
if [ ! -d "$ROOT/opt/test-tools/onnx" ]; then
    arm cortex-a72 $VENV/bin/pip install -q --target /opt/test-tools pytest onnx > "$RESULTS/pip-test-tools.log" 2>&1
fi
versions=$(arm cortex-a72 $VENV/bin/python -c "
import importlib.metadata as m
names = ('onnxruntime', 'ai-edge-litert', 'ncnn', 'executorch-numpy-runtime', 'numpy')
print(' '.join('%s %s' % (n, m.version(n)) for n in names if any(d.metadata['Name'] == n for d in m.distributions())))")
log "runtimes: $versions"

# -- every runtime imports on each CPU model without crashing
for cpu in cortex-a72 cortex-a76; do
    arm $cpu $VENV/bin/python -c "import onnxruntime, ai_edge_litert.interpreter, ncnn; print('imports ok on $cpu')"
    arm $cpu $VENV/bin/python -c "
from edgeopt_agent.runners.availability import unavailable_reason
print('executorch on $cpu:', unavailable_reason('executorch') or 'available')"
done

# -- the agent test suite, on aarch64 (tests that count benchmark processes see the whole machine's
#    /proc: run nothing else that benchmarks meanwhile)
if [ "$SKIP_TESTS" = 0 ]; then
    log "agent test suite on aarch64 (cortex-a72)"
    set +e
    arm cortex-a72 /usr/bin/env -C /repo PYTHONPATH=/opt/test-tools $VENV/bin/python -m pytest -q -p no:cacheprovider tests/agent \
        -o addopts="-ra" --ignore=tests/agent/trt > "$RESULTS/agent-tests.txt" 2>&1
    status=$?
    set -e
    grep -E "^(FAILED|ERROR)" "$RESULTS/agent-tests.txt" || true
    tail -1 "$RESULTS/agent-tests.txt"
    [ $status = 0 ] || { echo "the agent test suite failed on aarch64 (see $RESULTS/agent-tests.txt)" >&2; exit 1; }
fi

# -- artifacts converted on x86 for every profile, compared with their x86 outputs
log "converting for $PROFILES on the host"
ART=$CACHE/artifacts-$SUITE
rm -rf "$ART" && mkdir -p "$ART"
"$HOST_PY" "$REPO/scripts/arm_compare.py" convert --out "$ART" --profiles $PROFILES > "$RESULTS/convert.txt" 2>&1 \
    || { tail -20 "$RESULTS/convert.txt"; exit 1; }
rm -rf "$ROOT/opt/artifacts" && cp -r "$ART" "$ROOT/opt/artifacts"
: > "$RESULTS/compare.txt"
for profile in $PROFILES; do
    cpu=cortex-a76; [ "$profile" = rpi4 ] && cpu=cortex-a72
    arm $cpu $VENV/bin/python /repo/scripts/arm_compare.py run --out /opt/artifacts/$profile --cpu $cpu \
        >> "$RESULTS/compare.txt"
done
"$HOST_PY" "$REPO/scripts/arm_compare.py" judge --out "$ART" --arm "$ROOT/opt/artifacts" --profiles $PROFILES \
    --label "Debian $SUITE arm64, Python $PYVER, $versions" | tee "$RESULTS/compare.md"

# -- control: on qemu's default `max` CPU (SME) XNNPACK's INT8 TFLite output was wrong; the agent
#    must now say so itself (recorded, not required: a later qemu or LiteRT may compute it right)
if [ -e "$ROOT/opt/artifacts/rpi5" ]; then
    log "control run on QEMU_CPU=max"
    arm max $VENV/bin/python /repo/scripts/arm_compare.py run --out /opt/artifacts/rpi5 --cpu max \
        | tee "$RESULTS/control-max.txt" || true
fi

# -- signed deploys to an emulated rpi5 agent: the TFLite INT8 artifact, the ncnn FP16 bundle and,
#    where the board's Python runs ExecuTorch (3.12+), the ExecuTorch INT8 program
if [ -e "$ART/rpi5" ]; then
    : > "$RESULTS/deploy.txt"
    deployed="tflite-int8 ncnn-fp16"
    arm cortex-a76 $VENV/bin/python -c "import sys; sys.exit(sys.version_info < (3, 12))" && deployed="$deployed pte-int8"
    for artifact in $deployed; do
        log "signed deploy of $artifact to an emulated rpi5 agent"
        "$HOST_PY" "$REPO/scripts/arm_deploy.py" --root "$ROOT" --venv $VENV --cpu cortex-a76 \
            --outdir "$ART/rpi5" --artifact $artifact | tee -a "$RESULTS/deploy.txt"
    done
fi
log "done: $RESULTS"
