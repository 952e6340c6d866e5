"""A starting TOML file for a custom board, copied from a known profile, every field explained.

`edgeopt devices --template NAME -o mybox.toml` writes it; `--device ./mybox.toml` (convert),
`--profile ./mybox.toml` (analyze, edgeopt-agent) then use the edited file. The schema is
`edgeopt_agent.profiles.parse_profile`'s; docs/BOARDS.md says what each field is for.
"""
from __future__ import annotations

import json
from typing import Any, List

from edgeopt_agent.profiles import POWER_SENSORS, DeviceProfile
from edgeopt_agent.runtimes import FORMATS, PRECISIONS, PROFILE_RUNTIMES


def _value(value: Any) -> str:
    """One TOML value: strings as basic strings, numbers, booleans, lists of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _field(lines: List[str], comment: str, key: str, value: Any) -> None:
    lines.extend(f"# {line}" for line in comment.splitlines())
    lines.append(f"{key} = {_value(value)}")


def profile_template(source: DeviceProfile, name: str) -> str:
    """The TOML text of `source` renamed to `name`, with a comment on every field."""
    lines = [
        f"# A custom board, copied from the '{source.name}' profile: edit what differs on your board.",
        f"# Use it by path: `edgeopt convert MODEL --device ./{name}.toml`, `edgeopt analyze OUTDIR --profile",
        f"# ./{name}.toml`, and on the board `edgeopt-agent --profile ./{name}.toml` (or profile = \"...\" in",
        "# its agent.toml). Check it with `edgeopt devices ./FILE.toml`. Fields: docs/BOARDS.md.",
        "",
    ]
    _field(lines, "Name reported in the fleet (`edgeopt fleet devices`, `edgeopt deploy --profile NAME`).", "name", name)
    _field(lines, "One line for people.", "description", source.description)
    _field(lines, f"Runtimes the board has, first preferred: {', '.join(PROFILE_RUNTIMES)}.", "runtimes",
           source.runtimes)
    _field(lines, "Threads a benchmark uses unless the job says otherwise: 1 to [cpu] cores.", "default_threads",
           source.default_threads)
    _field(lines, f"Where power figures come from: {', '.join(POWER_SENSORS)} (none: no energy figures).",
           "power_sensor", source.power_sensor)
    _field(lines, "Free text shown with the profile.", "notes", source.notes)
    lines += ["", "[cpu]"]
    _field(lines, "aarch64 or x86_64; the agent warns when the board's differs.", "arch", source.cpu.arch)
    _field(lines, "CPU core name, e.g. Cortex-A76.", "model", source.cpu.model)
    _field(lines, "Cores the agent may use; checked against the board at start.", "cores", source.cpu.cores)
    _field(lines, "Highest core clock in MHz.", "max_freq_mhz", source.cpu.max_freq_mhz)
    _field(lines, "ISA features as /proc/cpuinfo names them (neon, dotprod and fp16 stand for arm64's asimd,\n"
                  "asimddp and asimdhp); convert reads fp16 (FP16 artifacts) and avx512_vnni / avx_vnni\n"
                  "(the INT8 scheme on x86_64).", "isa_features",
           list(source.cpu.isa_features))
    _field(lines, "true for a generic profile whose boards have different core counts.", "cores_vary",
           source.cpu.cores_vary)
    lines += ["", "[memory]"]
    _field(lines, "RAM in GB.", "size_gb", source.memory.size_gb)
    if source.memory.bandwidth_gbps is None:
        lines.append("# Memory bandwidth in GB/s, for the roofline of `edgeopt analyze` (unknown: left out).")
        lines.append("# bandwidth_gbps = 17.1")
    else:
        _field(lines, "Memory bandwidth in GB/s, for the roofline of `edgeopt analyze` (unknown: delete the line).",
               "bandwidth_gbps", source.memory.bandwidth_gbps)
    lines += ["", "# Temperatures in degrees C where the board slows down and where it shuts down (unknown: delete).",
              "[thermal]"]
    for key in ("throttle_c", "critical_c"):
        value = getattr(source.thermal, key)
        lines.append(f"{key} = {_value(value)}" if value is not None else f"# {key} = 85.0")
    lines += ["", f"# Peak TOPS per precision ({', '.join(PRECISIONS)}) for the roofline; leave out what you do "
                  "not know.", "[peak_tops]"]
    lines += [f"{precision} = {_value(value)}" for precision, value in source.peak_tops.items()]
    if source.cpu_peak_tops:
        lines += ["", "# The CPU's own peak TOPS where [peak_tops] are an accelerator's: CPU runtimes are timed with them.",
                  "[cpu_peak_tops]"]
        lines += [f"{precision} = {_value(value)}" for precision, value in source.cpu_peak_tops.items()]
    for accelerator in source.accelerators:
        lines += ["", "# A GPU, DLA or NPU: the precisions it runs.", "[[accelerators]]"]
        _field(lines, "Its name.", "name", accelerator.name)
        _field(lines, "gpu, dla or npu.", "kind", accelerator.kind)
        _field(lines, f"Of {', '.join(PRECISIONS)}.", "precisions", list(accelerator.precisions))
        _field(lines, "Free text.", "notes", accelerator.notes)
        if accelerator.max_freq_mhz is not None:
            _field(lines, "The clock in MHz its [peak_tops] assume.", "max_freq_mhz", accelerator.max_freq_mhz)
    if not source.accelerators:
        lines += ["", "# A GPU, DLA or NPU, one [[accelerators]] table each (none here):",
                  "# [[accelerators]]", '# name = "..."', '# kind = "gpu"', '# precisions = ["fp32", "fp16", "int8"]']
    if source.priors:
        lines += ["", f"# Efficiency priors fitted on published measurements of {source.name} (docs/BOARDS.md): they",
                  "# describe that board; delete them unless your board is one, and fit your own from its measurements."]
    for prior in source.priors:
        lines += ["[[priors]]"]
        for key in ("runtime", "precision", "factor", "rows", "heldout_rows", "median_error_pct", "parallel_fraction"):
            value = getattr(prior, key)
            if value is not None:
                lines.append(f"{key} = {_value(value)}")
        lines.append(f"sources = {_value(list(prior.sources))}")
        if prior.kinds:
            lines.append("[priors.kinds]")
            lines += [f"{_value(kind)} = {_value(value)}" for kind, value in prior.kinds.items()]
        lines.append("")
    for check in source.transfers:
        lines += ["[[transfers]]"] + [f"{key} = {_value(getattr(check, key))}" for key in
                                      ("precision", "base", "rows", "heldout_rows", "median_error_pct")
                                      if getattr(check, key) is not None]
        lines += [f"runtimes = {_value(list(check.runtimes))}", ""]
    lines += ["", f"# What `edgeopt convert` builds for this board, one [[recipe]] per artifact: format "
                  f"({', '.join(FORMATS)}) and precision ({', '.join(PRECISIONS)})."]
    for artifact in source.recipe:
        lines += ["[[recipe]]", f"format = {_value(artifact.format)}", f"precision = {_value(artifact.precision)}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"
