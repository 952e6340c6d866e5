"""The agent checks its profile against the CPU it runs on (fake /proc and /sys trees): an x86 box
started as an rpi4 warns once and says what differs in its retained status."""
from __future__ import annotations

import json
import logging

import pytest
from harness import NoSensors

from edgeopt_agent import wire
from edgeopt_agent.cpu_check import CpuFacts, check_profile, read_cpu, warning
from edgeopt_agent.daemon.agent import Agent
from edgeopt_agent.daemon.config import build_config
from edgeopt_agent.profiles import load_profile

# An x86-64 desktop (16 CPUs) and a Raspberry Pi 4 on a 64-bit kernel, as their kernels list them.
X86_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
             "syscall nx lm constant_tsc pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c "
             "rdrand hypervisor lahf_lm abm avx2 bmi1 bmi2 adx")
PI4_FEATURES = "fp asimd evtstrm crc32 cpuid"
PI5_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"


def x86_cpuinfo(cpus: int = 16) -> str:
    return "".join(f"processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Some Core i7\nflags\t\t: {X86_FLAGS}\n\n"
                   for n in range(cpus))


def arm_cpuinfo(features: str, cpus: int = 4) -> str:
    return "".join(f"processor\t: {n}\nBogoMIPS\t: 108.00\nFeatures\t: {features}\nCPU part\t: 0xd08\n\n"
                   for n in range(cpus)) + "Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"


def fake_root(tmp_path, cpuinfo=None, present=None):
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "sys" / "devices" / "system" / "cpu").mkdir(parents=True)
    if cpuinfo is not None:
        (root / "proc" / "cpuinfo").write_text(cpuinfo)
    if present is not None:
        (root / "sys" / "devices" / "system" / "cpu" / "present").write_text(present)
    return root


def test_an_x86_box_is_not_an_rpi4(tmp_path):
    cpu = read_cpu(fake_root(tmp_path, x86_cpuinfo(), "0-15\n"), machine="x86_64")
    assert (cpu.machine, cpu.cores, cpu.cores_from) == ("x86_64", 16, "/sys/devices/system/cpu/present")
    assert {"avx2", "fma", "sse4_2"} <= cpu.features
    check = check_profile(load_profile("rpi4"), cpu)
    assert check["ok"] is False and (check["machine"], check["cores"]) == ("x86_64", 16)
    assert check["mismatch"] == ["arch: profile rpi4 is aarch64, this CPU is x86_64",
                                 "cores: profile rpi4 has 4, this CPU has 16"]
    assert check["unchecked"] == ["isa_features: not compared across architectures"]
    line = warning(load_profile("rpi4"), check)
    assert line.startswith("PROFILE MISMATCH: profile rpi4 does not describe this CPU (arch: profile rpi4 is aarch64")
    assert "\n" not in line and "--profile" in line


def test_a_pi4_is_an_rpi4_but_not_an_rpi5(tmp_path):
    cpu = read_cpu(fake_root(tmp_path, arm_cpuinfo(PI4_FEATURES), "0-3"), machine="aarch64")
    rpi4 = check_profile(load_profile("rpi4"), cpu)
    # The arm64 kernel calls NEON "asimd": the profile's "neon" is there.
    assert rpi4 == {"ok": True, "machine": "aarch64", "cores": 4, "mismatch": [], "unchecked": []}
    assert warning(load_profile("rpi4"), rpi4) is None
    rpi5 = check_profile(load_profile("rpi5"), cpu)
    assert rpi5["ok"] is False
    assert rpi5["mismatch"] == ["isa_features: profile rpi5 relies on dotprod, fp16, atomics, which this CPU does not list"]


def test_a_pi5_has_what_the_rpi5_profile_relies_on(tmp_path):
    cpu = read_cpu(fake_root(tmp_path, arm_cpuinfo(PI5_FEATURES), "0-3"), machine="aarch64")
    assert check_profile(load_profile("rpi5"), cpu)["ok"] is True


def test_cores_taken_offline_by_a_power_mode_still_count(tmp_path):
    """/proc/cpuinfo lists online CPUs only; `present` lists every core of the board."""
    cpu = read_cpu(fake_root(tmp_path, arm_cpuinfo(PI5_FEATURES, cpus=4), "0-5"), machine="aarch64")
    assert cpu.cores == 6 and check_profile(load_profile("jetson-orin-nano"), cpu)["ok"] is True
    without_present = read_cpu(fake_root(tmp_path / "b", arm_cpuinfo(PI5_FEATURES, cpus=4)), machine="aarch64")
    assert (without_present.cores, without_present.cores_from) == (4, "/proc/cpuinfo")


@pytest.mark.parametrize("present", ["", "garbage", "3-1"])
def test_an_unreadable_cpu_is_unchecked_not_a_mismatch(tmp_path, present):
    cpu = read_cpu(fake_root(tmp_path, None, present), machine="arm64")
    assert cpu.cores is None and cpu.features is None
    check = check_profile(load_profile("rpi4"), cpu)
    assert check["ok"] is True and check["mismatch"] == []
    assert [u.split(":")[0] for u in check["unchecked"]] == ["cores", "isa_features"]


def make_agent(tmp_path, profile, cpu):
    config = build_config({"device_id": "lab-01", "data_dir": str(tmp_path / "data"), "profile": profile})
    return Agent(config, sensors=NoSensors(), cpu=cpu)


def status_body(agent):
    return json.loads(agent._status(wire.ONLINE, "connected", 1).payload)["body"]


def test_the_agent_warns_once_and_reports_the_mismatch_in_its_status(tmp_path, caplog):
    cpu = read_cpu(fake_root(tmp_path, x86_cpuinfo(), "0-15"), machine="x86_64")
    with caplog.at_level(logging.WARNING, logger="edgeopt_agent"):
        agent = make_agent(tmp_path, "rpi4", cpu)
        online, will = status_body(agent), json.loads(agent._before_connect().payload)["body"]
    [line] = [r.getMessage() for r in caplog.records if "PROFILE MISMATCH" in r.getMessage()]
    assert "arch: profile rpi4 is aarch64, this CPU is x86_64" in line and "cores" in line
    for body in (online, will):  # the Last Will says it too: the status stays retained
        assert body["profile"] == "rpi4" and body["profile_check"]["ok"] is False
        assert body["profile_check"]["mismatch"][0].startswith("arch:")
    assert wire.Envelope.decode(agent._status(wire.ONLINE, "connected", 3).payload).body == online


def test_an_agent_on_its_own_board_says_so_without_a_warning(tmp_path, caplog):
    cpu = read_cpu(fake_root(tmp_path, arm_cpuinfo(PI4_FEATURES), "0-3"), machine="aarch64")
    with caplog.at_level(logging.WARNING, logger="edgeopt_agent"):
        agent = make_agent(tmp_path, "rpi4", cpu)
    assert not [r for r in caplog.records if "PROFILE MISMATCH" in r.getMessage()]
    assert status_body(agent)["profile_check"]["ok"] is True


def test_without_a_profile_there_is_nothing_to_check(tmp_path):
    config = build_config({"device_id": "lab-02", "data_dir": str(tmp_path / "data")})
    agent = Agent(config, sensors=NoSensors(), cpu=CpuFacts("x86_64", 16, frozenset()))
    assert status_body(agent)["profile_check"] is None


def test_the_generic_x86_profile_takes_any_core_count(tmp_path):
    """x86-64 describes every x86 machine that uses it: 16 cores are no mismatch, and it says why not checked."""
    cpu = read_cpu(fake_root(tmp_path, x86_cpuinfo(16), "0-15"), "x86_64")
    check = check_profile(load_profile("x86-64"), cpu)
    assert check["ok"] is True and check["mismatch"] == []
    assert any("generic" in line for line in check["unchecked"])


def test_a_cpuinfo_without_flags_leaves_the_features_unchecked(tmp_path):
    """Some virtual and emulated kernels list no flags: that is not a CPU lacking every feature."""
    bare = "".join(f"processor\t: {n}\nmodel name\t: vCPU\n\n" for n in range(2))
    check = check_profile(load_profile("x86-64"), read_cpu(fake_root(tmp_path, bare, "0-1"), "x86_64"))
    assert check["ok"] is True and any(u.startswith("isa_features:") for u in check["unchecked"])
