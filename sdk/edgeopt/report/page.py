"""The report page: one self-contained HTML file (inline CSS and SVG, no script, no network)."""
from __future__ import annotations

from importlib import metadata, resources
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from edgeopt_converters.cost.host_timing import speedup_text

from .analysis_sections import profile_section, roofline_section
from .charts import INVALID_MARK, LatencyRow, Point, Series, latency_chart, legend, scatter_chart, time_chart
from .compare import ArtifactView, ResultView, artifact_views, colors, format_marker, result_views
from .data import ReportData
from .history import history_section, models_with_history
from .provenance import PREDICTION_METHOD, HostEvidence, board_label, host_evidence, predicted_label
from .text import count, esc, fixed, number, short, signed, size, text, when, whole

# Nothing may load from anywhere, and nothing may run, even if a value slipped past escaping.
CSP = "default-src 'none'; style-src 'unsafe-inline'"
HOST_COLOR = "#52606d"
PREDICTED_COLOR = "#7B3FA0"
TELEMETRY_METRICS = (  # (row key, name, unit, axis starts at zero)
    ("temperature_c", "Temperature", "°C", False),
    ("cpu_percent", "CPU load", "%", True),
    ("power_w", "Power", "W", True),
)


def render_report(data: ReportData, title: str = "edgeopt report") -> str:
    """The whole page as a string."""
    results = result_views(data.results, data.manifest)
    # One colour per board for the whole page, so a board looks the same in every chart.
    palette = colors([r.device for r in results] + [_device(t) for t in data.telemetry] + [_device(d) for d in data.devices]
                     + [b.device_id for h in data.history for b in h.boards])
    sections: List[Tuple[str, str, str]] = []  # (anchor, heading, html)
    if data.empty:
        sections.append(("nothing", "Nothing to report yet", _nothing_yet(data)))
    else:
        if results:
            sections.append(("results", "Benchmark results", _results_section(results)))
            sections.append(("latency", "Latency distribution", _latency_section(results, palette)))
            sections.append(("energy", "Energy vs latency", _energy_section(results, palette, power_reasons(data.telemetry))))
        if models_with_history(data.history):
            sections.append(("history", "Release history", history_section(data.history, palette)))
        if results or data.manifest:
            sections.append(("accuracy", "Accuracy drop vs speed-up", _accuracy_section(results, data.manifest, palette)))
        if data.manifest:
            sections.append(("conversion", "Conversion", _conversion_section(data.manifest)))
        if data.profile:
            sections.append(("profile", "Where the time goes (host profile)", profile_section(data.profile)))
        if data.analysis:
            sections.append(("roofline", f"Roofline on {data.analysis['device']}", roofline_section(data.analysis)))
        if data.telemetry:
            sections.append(("telemetry", "Telemetry over time", _telemetry_section(data.telemetry, palette)))
        if data.devices:
            sections.append(("devices", "Devices", _devices_section(data.devices)))
        if data.gaps or data.stats:
            sections.append(("ingest", "Message loss and rejects", _ingest_section(data.gaps, data.stats)))
    body = "".join(f'<section id="{a}"><h2>{esc(h)}</h2>{html}</section>' for a, h, html in sections)
    nav = "".join(f'<a href="#{a}">{esc(h)}</a>' for a, h, _ in sections) if len(sections) > 1 else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_css()}</style></head><body>"
        f"<header><h1>{esc(title)}</h1>{_sources(data)}{_summary(data, results)}"
        f'{f"<nav>{nav}</nav>" if nav else ""}</header>'
        f"<main>{body}</main>"
        f"<footer>edgeopt {esc(_version())} · generated {esc(when(data.generated_at))} · "
        "a single file: no scripts, nothing loaded from the network</footer>"
        "</body></html>\n"
    )


# --- header ------------------------------------------------------------------------------------


def _sources(data: ReportData) -> str:
    if not data.sources:
        return ""
    return '<p class="sources">From ' + " and ".join(f"<code>{esc(s)}</code>" for s in data.sources) + "</p>"


def _summary(data: ReportData, results: Sequence[ResultView]) -> str:
    if data.empty:
        return ""
    cards = []
    if data.devices:
        online = sum(1 for d in data.devices if d.get("state") == "online")
        cards.append(("boards", str(len(data.devices)), f"{online} online"))
    if results:
        failed = sum(1 for r in results if not r.ok)
        invalid = sum(1 for r in results if r.ok and r.valid is False)
        detail = ", ".join(p for p in (f"{failed} failed" if failed else "", f"{invalid} invalid" if invalid else "") if p)
        cards.append(("results", str(len(results)), detail or "all measured"))
        cards.append(("models", str(len({r.model for r in results})), count(len({r.artifact for r in results}), "artifact")))
    elif data.manifest:
        cards.append(("artifacts", str(len(artifact_views(data.manifest))), "converted, not yet on a board"))
    if data.manifest:
        cards.append(_recommended_card(data.manifest))
    if data.telemetry:
        cards.append(("telemetry samples", str(len(data.telemetry)), count(len({_device(t) for t in data.telemetry}), "device")))
    if data.devices or data.gaps or data.stats:
        missing = sum(_gap_size(g) or 0 for g in data.gaps if not _filled(g))
        rejected = _total(data.stats.get("rejected")) if isinstance(data.stats, Mapping) else 0
        cards.append(("messages missing", whole(missing), f"{rejected} rejected"))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="value{"" if v.isdigit() else " word"}">{esc(v)}</div>'
        f'<div class="name">{esc(n)}</div><div class="detail">{esc(d)}</div></div>' for n, v, d in cards) + "</div>"


def _recommended_card(manifest: Mapping[str, Any]) -> Tuple[str, str, str]:
    """(name, value, detail): the detail says whether the choice was measured on the host or predicted for the board."""
    rec = manifest.get("recommendation") if isinstance(manifest.get("recommendation"), Mapping) else {}
    key, basis, evidence = rec.get("key"), rec.get("basis"), host_evidence(manifest)
    if basis == "measured":
        detail = evidence.measured_briefly
    elif basis == "predicted":
        chosen = next((a for a in artifact_views(manifest) if a.key == key), None)
        roofline = (chosen is not None and chosen.predicted_p50 is not None) or "roofline" in text(rec.get("reason"))
        detail = predicted_label(evidence.target, PREDICTION_METHOD if roofline else "its profile's peak figures")
    else:
        detail = "by the conversion"
    return "recommended", text(key, "none"), detail


def _nothing_yet(data: ReportData) -> str:
    where = " and ".join(esc(s) for s in data.sources) or "the given sources"
    return (
        f'<div class="empty"><p>There are no results, devices, telemetry or converted artifacts in {where} yet.</p>'
        "<p>Convert a model with <code>edgeopt convert MODEL --device PROFILE -o OUTDIR</code>, collect with "
        "<code>edgeopt fleet serve --db URL</code>, send it to boards with <code>edgeopt deploy OUTDIR --all</code>, "
        "then build this report again.</p></div>"
    )


# --- results -----------------------------------------------------------------------------------

RESULT_HEADERS = ("board", "artifact", "runtime", "p50 ms", "p90 ms", "p99 ms", "inf/s", "peak MB", "mJ/inf",
                  "acc. drop", "speed-up", "valid")


def _results_section(results: Sequence[ResultView]) -> str:
    rows = []
    for model, group in _by_model(results).items():
        rows.append(f'<tr class="group"><th colspan="{len(RESULT_HEADERS)}">{esc(model)}</th></tr>')
        fastest = _fastest_per_board(group)
        rows += [_result_row(r, r in fastest) for r in group]
    note = (
        '<p class="note">Latest result per board, model and artifact. Speed-up is against FP32 of the same model on '
        "the same board (same format when measured). Accuracy drop is in percentage points against FP32, from the "
        "conversion manifest. Every latency and speed-up here is measured on the named board by the fleet. "
        "<b>Bold</b>: fastest valid artifact on that board.</p>"
    )
    return note + _table(RESULT_HEADERS, rows)


def _result_row(r: ResultView, fastest: bool) -> str:
    board = f'{esc(r.device)}<div class="sub">{esc(r.profile)}</div>'
    kind = "-".join(p for p in (r.format, r.precision) if p)
    artifact = f'<span class="key">{esc(r.artifact)}</span>'
    if kind and kind != r.artifact:
        artifact += f'<div class="sub">{esc(kind.replace("-", " "))}</div>'
    cells = [board, artifact, esc(r.runtime)]
    if not r.ok:
        cells.append(f'<span class="bad">failed</span> {esc(r.error or "no error given")}')
        return "<tr>" + "".join(f"<td>{c}</td>" for c in cells[:-1]) + \
            f'<td colspan="{len(RESULT_HEADERS) - 3}">{cells[-1]}</td></tr>'
    p50 = short(r.latency["p50"])
    speedup_tip = f' title="vs {esc(r.speedup_basis)}"' if r.speedup_basis else ""
    drop_tip = ' title="from the conversion manifest"' if r.accuracy_from == "manifest" else ""
    numbers = [
        f"<b>{esc(p50)}</b>" if fastest else esc(p50),
        esc(short(r.latency["p90"])),
        esc(short(r.latency["p99"])),
        esc(short(r.throughput_ips)),
        esc(short(r.peak_rss_mb)),
        esc(short(r.energy_mj)) if r.energy_mj is not None else f'<span class="muted" title="{esc(r.power_source or "no power sensor")}">-</span>',
        f"<span{drop_tip}>{esc(signed(r.accuracy_drop))}</span>",
        f"<span{speedup_tip}>{esc(short(r.speedup, '×'))}</span>" if r.speedup is not None else
        f'<span class="muted" title="{esc(r.speedup_missing)}">-</span><div class="sub">{esc(r.speedup_missing)}</div>',
    ]
    row = "".join(f"<td>{c}</td>" for c in cells) + "".join(f'<td class="num">{c}</td>' for c in numbers)
    return f"<tr>{row}<td>{_validity(r)}</td></tr>"


def _validity(r: ResultView) -> str:
    if r.valid is False:
        reasons = "; ".join(r.invalid_reasons) or "no reason given"
        return f'<span class="bad">invalid</span><div class="sub">{esc(reasons)}</div>'
    if r.valid is None:
        return '<span class="muted">unknown</span>'
    return '<span class="good">valid</span>'


def _fastest_per_board(rows: Sequence[ResultView]) -> List[ResultView]:
    best: Dict[str, ResultView] = {}
    for r in rows:
        if r.measured and r.valid is not False and (r.device not in best or r.p50 < best[r.device].p50):
            best[r.device] = r
    return list(best.values())


# --- plots -------------------------------------------------------------------------------------


def _latency_section(results: Sequence[ResultView], palette: Mapping[str, str]) -> str:
    measured = [r for r in results if r.measured]
    if not measured:
        return _missing("No successful measurements to plot.")
    charts = []
    for model, group in _by_model(measured).items():
        group = sorted(group, key=lambda r: (r.device, r.p50))
        rows = [LatencyRow(
            label=f"{r.device} · {r.artifact}" + (INVALID_MARK if r.valid is False else ""), color=palette[r.device],
            min=r.latency["min"], p50=r.p50, p90=r.latency["p90"], p99=r.latency["p99"], max=r.latency["max"],
            tip=_latency_tip(r),
        ) for r in group]
        charts.append(f"<h3>{esc(model)}</h3>" + latency_chart(rows, f"Latency of {model} per board and artifact"))
    key = _board_legend(palette, {r.device for r in measured})
    note = ('<p class="note">Thin line: min to max · box: p50 to p90 · black bar: p50 · ◆: p99. '
            "Hover a row for the numbers.</p>")
    return note + key + "".join(charts)


def _latency_tip(r: ResultView) -> str:
    lat = r.latency
    return (f"{r.device} ({r.profile}) · {r.model} · {r.artifact}: min {short(lat['min'])}, p50 {short(lat['p50'])}, "
            f"p90 {short(lat['p90'])}, p99 {short(lat['p99'])}, max {short(lat['max'])} ms") + _invalid_tip(r)


def _invalid_tip(r: ResultView) -> str:
    if r.valid is not False:
        return ""
    return " — INVALID: " + ("; ".join(r.invalid_reasons) or "no reason given")


def power_reasons(telemetry: Sequence[Mapping[str, Any]]) -> Dict[str, str]:
    """Why each board measures no power, as its newest telemetry says (its sensor's own words: none
    found, or found and unreadable, such as RAPL on a virtual machine); boards that measure are left out."""
    reasons: Dict[str, str] = {}
    for row in telemetry:  # oldest first: the newest wins
        body = row.get("body") if isinstance(row.get("body"), Mapping) else {}
        power = body.get("power") if isinstance(body.get("power"), Mapping) else {}
        device = _device(row)
        if power.get("watts") is None and text(power.get("reason")):
            reasons[device] = text(power.get("reason"))
        else:
            reasons.pop(device, None)
    return reasons


def _energy_section(results: Sequence[ResultView], palette: Mapping[str, str],
                    reasons: Mapping[str, str] = {}) -> str:
    with_energy = [r for r in results if r.measured and r.energy_mj is not None]
    if not with_energy:
        boards = sorted({r.device for r in results})
        said = [f"{board}: {reasons[board]}" for board in boards if board in reasons]
        unsaid = [board for board in boards if board not in reasons]
        why = " ".join(f"{line}." for line in said)
        if unsaid:
            why += (f" {', '.join(unsaid)}: no power sensor reported (boards measure power with the RPi 5 PMIC, "
                    "Jetson INA3221, x86 RAPL or NVML).")
        return _missing(f"No energy figures yet: no board reported a power measurement with its results. {why.strip()}")
    several = len({r.model for r in with_energy}) > 1
    points = [Point(
        x=r.p50, y=r.energy_mj, color=palette[r.device], shape=format_marker(r.format),
        label=(f"{r.model} · {r.artifact}" if several else r.artifact) + (INVALID_MARK if r.valid is False else ""),
        tip=f"{r.device} · {r.model} · {r.artifact}: p50 {short(r.p50)} ms, {short(r.energy_mj)} mJ/inference "
            f"({r.power_source or 'power source not given'})" + _invalid_tip(r), invalid=r.valid is False,
    ) for r in with_energy]
    chart = scatter_chart(points, "Energy per inference against median latency", "p50 latency (ms)",
                          "energy per inference (mJ)", zero=True)
    note = ('<p class="note">Lower left is better: faster and cheaper. Colour: board · marker: format'
            + (" · a red ✗: invalid (outputs did not match the FP32 reference)" if any(r.valid is False for r in with_energy)
               else "") + ".</p>")
    key = legend(_board_keys(palette, {r.device for r in with_energy}) + _format_keys({r.format for r in with_energy}))
    return note + key + chart


def _accuracy_section(results: Sequence[ResultView], manifest: Optional[Mapping[str, Any]],
                      palette: Mapping[str, str]) -> str:
    fleet = [r for r in results if r.measured and r.speedup is not None and r.accuracy_drop is not None]
    several = len({r.model for r in fleet}) > 1
    evidence = host_evidence(manifest)
    conversion, source, color, not_charted, formats = _conversion_points(manifest, evidence, labelled=not fleet)
    # Conversion points first, so the boards' markers are drawn over them.
    points = conversion + [Point(
        x=r.speedup, y=r.accuracy_drop, color=palette[r.device], shape=format_marker(r.format),
        label=(f"{r.model} · {r.artifact}" if several else r.artifact) + (INVALID_MARK if r.valid is False else ""),
        tip=f"{board_label(r.device)} · {r.model} · {r.artifact}: {short(r.speedup)}× vs {r.speedup_basis}, "
            f"accuracy drop {signed(r.accuracy_drop)} points" + _invalid_tip(r), invalid=r.valid is False,
    ) for r in fleet]
    if not points:
        return _missing(f"Nothing to plot: {_why_no_points(results, evidence, not_charted)}.")
    chart = scatter_chart(points, "Accuracy drop against speed-up over FP32", "speed-up over FP32 (×)",
                          "accuracy drop (points)", x_ref=1.0, y_ref=0.0)
    keys = [(board_label(board), palette[board], "circle", False) for board in sorted({r.device for r in fleet})]
    if conversion:
        keys.append((source, color, "circle", True))
    keys += _format_keys({r.format for r in fleet} | formats)
    basis = []
    if fleet:
        basis.append("a filled marker is measured on that board by the fleet, its speed-up against FP32 on that same board")
    if conversion:
        kind = "grey" if color == HOST_COLOR else "purple"
        basis.append(f"a hollow {kind} marker is {source}, from the conversion manifest"
                     + ("" if color == HOST_COLOR else ", not a measurement"))
    if not_charted:
        basis.append(not_charted)
    if any(r.valid is False for r in fleet):
        basis.append("a red ✗ marks a result whose outputs did not match the FP32 reference (invalid)")
    note = ('<p class="note">Lower right is better: faster than FP32 (right of the dashed line at 1×) and losing '
            f"little accuracy (near the dashed line at 0); {esc('; '.join(basis))}.</p>")
    return note + legend(keys) + chart


def _conversion_points(manifest: Optional[Mapping[str, Any]], evidence: Optional[HostEvidence], labelled: bool
                       ) -> Tuple[List[Point], str, str, str, set]:
    """(points, their source in words, colour, why host speed-ups are left out or "", their formats).

    Host speed-ups are charted only where the host stands for the target; otherwise the board's
    predicted speed-ups are, labelled as predictions.
    """
    if evidence is None:
        return [], "", "", "", set()
    artifacts = [a for a in artifact_views(manifest) if a.drop is not None]
    if evidence.stands_for_target:
        source, color, chosen, not_charted = evidence.measured, HOST_COLOR, [(a, a.speedup) for a in artifacts], ""
    else:
        source, color = evidence.predicted, PREDICTED_COLOR
        chosen = [(a, a.predicted_speedup) for a in artifacts]
        timed = any(a.speedup is not None for a in artifacts)
        not_charted = f"host speed-ups are not charted: {evidence.not_standing_for}" if timed else ""
    chosen = [(a, speedup) for a, speedup in chosen if speedup is not None]
    points = [Point(
        x=speedup, y=a.drop, color=color, shape=format_marker(a.format), hollow=True, label=a.key if labelled else "",
        tip=f"{source} · {a.key}: {short(speedup)}× vs FP32 {a.format}, accuracy drop {signed(a.drop)} points",
    ) for a, speedup in chosen]
    return points, source, color, not_charted, {a.format for a, _ in chosen}


def _why_no_points(results: Sequence[ResultView], evidence: Optional[HostEvidence], not_charted: str) -> str:
    if results:
        why = "no artifact has both a speed-up (an FP32 result on the same board) and an accuracy figure"
        return why + (f"; {not_charted}" if not_charted else "")
    if evidence is not None and not evidence.stands_for_target:
        return (f"{evidence.not_standing_for}, so its speed-ups are not charted, and the manifest holds no prediction "
                f"for {evidence.target}; measure it there: edgeopt deploy OUTDIR --wait")
    return "the manifest has no host timing (converted with --no-timing?)"


def _telemetry_section(rows: Sequence[Mapping[str, Any]], palette: Mapping[str, str]) -> str:
    stamps = [t for t in (number(r.get("ts")) for r in rows) if t is not None]
    if not stamps:
        return _missing("Telemetry rows carry no timestamps.")
    charts = []
    for key, name, unit, zero in TELEMETRY_METRICS:
        series: Dict[str, Series] = {}
        for r in rows:
            ts, value = number(r.get("ts")), number(r.get(key))
            if ts is not None and value is not None:
                device = _device(r)
                series.setdefault(device, Series(device, palette[device])).points.append((ts, value))
        if series:
            charts.append(f"<h3>{esc(name)} ({esc(unit)})</h3>" +
                          time_chart(list(series.values()), f"{name} per device over time", unit, (min(stamps), max(stamps)),
                                     zero=zero))
        else:
            charts.append(f"<h3>{esc(name)} ({esc(unit)})</h3>" + _missing(f"No device reported {name.lower()}."))
    span = f"{when(min(stamps))} to {when(max(stamps))}"
    return f'<p class="note">{len(rows)} samples from {esc(span)}. Gaps in a line: the device sent nothing.</p>' + \
        _board_legend(palette, {_device(r) for r in rows}) + "".join(charts)


# --- conversion, devices, ingest ------------------------------------------------------------------


def _conversion_section(manifest: Mapping[str, Any]) -> str:
    model = manifest.get("model") if isinstance(manifest.get("model"), Mapping) else {}
    rec = manifest.get("recommendation") if isinstance(manifest.get("recommendation"), Mapping) else {}
    evidence = host_evidence(manifest)
    artifacts = artifact_views(manifest)
    predicted = any(a.predicted_p50 is not None for a in artifacts)
    intro = (f"<p><b>{esc(text(model.get('source'), '?'))}</b> for <b>{esc(text(manifest.get('device'), '?'))}</b>, "
             f"converted {esc(text(manifest.get('created'), '?'))}.</p>" + _timing_sources(evidence, predicted))
    if rec:
        intro += (f'<p>Recommended: <b>{esc(text(rec.get("key"), "none"))}</b> ({esc(text(rec.get("basis")))}) — '
                  f"{esc(text(rec.get('reason')))}</p>")
    # With predictions, host p90 makes room for them (the host latency chart still shows it).
    headers = ("artifact", "format", "precision", "scheme", "size", "verdict", "top-1 %", "agree %", "acc. drop",
               "host p50 ms") + (("host vs FP32", "pred. ms", "pred. vs FP32") if predicted else ("host p90 ms", "host vs FP32"))
    notes = "".join(f'<p class="note">note: {esc(n)}</p>' for n in _strings(manifest.get("notes")))
    notes += "".join(f'<p class="warn">warning: {esc(w)}</p>' for w in _strings(manifest.get("warnings")))
    table = _table(headers, [_artifact_row(a, predicted) for a in artifacts], "wrap-head")
    return (intro + table + _failed_artifacts(manifest)
            + _output_verdicts(artifacts) + _host_latency(artifacts, evidence) + notes)


def _timing_sources(evidence: HostEvidence, predicted: bool) -> str:
    """What the host and predicted columns are, and whether the host's figures say anything about the target."""
    if evidence.stands_for_target:
        said = f"Host columns: {evidence.measured}, which stands for {evidence.target}."
    else:
        said = (f"Host columns: {evidence.measured}; {evidence.not_standing_for}, so they say nothing about "
                f"{evidence.target}'s speed.")
        if predicted:
            said += f" Pred. columns: {evidence.predicted}, uncalibrated: confirm on the board."
    return f'<p class="note">{esc(said)}</p>'


def _failed_artifacts(manifest: Mapping[str, Any]) -> str:
    """Artifacts the conversion could not build or run: each with its cause (none was published)."""
    failed = [f for f in manifest.get("failed_artifacts") or [] if isinstance(f, Mapping)]
    if not failed:
        return ""
    rows = [f'<tr><td>{esc(text(f.get("key")))}</td><td><span class="bad">failed</span></td>'
            f'<td>{esc(text(f.get("cause")))}</td></tr>' for f in failed]
    return ("<h3>Artifacts that failed</h3><p class=\"note\">Built or run, these failed; the conversion went on "
            "without them.</p>" + _table(("artifact", "verdict", "cause"), rows))


_VERDICT_PILL = {"ok": "good", "failed": "bad"}


def _verdict_pill(verdict: str, reason: str) -> str:
    return f'<span class="{_VERDICT_PILL.get(verdict, "muted")}" title="{esc(reason)}">{esc(verdict or "-")}</span>'


def _output_verdicts(artifacts: Sequence[ArtifactView]) -> str:
    rows = [f"<tr><td>{esc(a.key)}</td><td>{esc(o.name)}</td><td>{esc(o.kind)}</td>"
            f"<td>{_verdict_pill(o.verdict, o.reason)}</td><td>{esc(o.reason)}</td></tr>"
            for a in artifacts for o in a.outputs]
    if not rows:
        return ""
    return ("<h3>Per-output verdicts</h3><p class=\"note\">Each output is judged by what it means (class scores by "
            "top-1, detections by the detections they yield, embeddings by cosine, stateful models streamed); "
            "an artifact's verdict is its worst output's.</p>"
            + _table(("artifact", "output", "kind", "verdict", "why"), rows))


def _host_latency(artifacts: Sequence[ArtifactView], evidence: HostEvidence) -> str:
    timed = sorted((a for a in artifacts if a.host_p50 is not None), key=lambda a: a.host_p50)
    if not timed:
        return ""
    by_format = colors(a.format for a in timed)
    rows = [LatencyRow(label=a.key, color=by_format[a.format], p50=a.host_p50, p90=a.host_p90,
                       tip=f"{a.key} {evidence.measured}: p50 {short(a.host_p50)} ms, p90 {short(a.host_p90)} ms")
            for a in timed]
    caveat = "" if evidence.stands_for_target else f", not {evidence.target}'s latency"
    heading = "Host latency" + ("" if evidence.stands_for_target else f" (not {evidence.target})")
    return (f'<h3>{esc(heading)}</h3><p class="note">{esc(f"Box: p50 to p90 {evidence.measured}{caveat}")}; boards are '
            "measured by deploying.</p>" + legend([(f, c, "square", False) for f, c in by_format.items()])
            + latency_chart(rows, f"Latency per artifact {evidence.measured}"))


def _artifact_row(a: ArtifactView, predicted: bool) -> str:
    key = f"★ {a.key}" if a.recommended else a.key
    cells = [f'<td><span class="key">{esc(key)}</span></td>', f"<td>{esc(a.format)}</td>", f"<td>{esc(a.precision)}</td>",
             f"<td>{esc(a.scheme or '-')}</td>"]
    cells.append(f'<td class="num">{esc(size(a.size_bytes))}</td>')
    cells.append(f"<td>{_verdict_pill(a.verdict, a.verdict_reason)}</td>")
    speedup = "-" if a.speedup is None else speedup_text(a.speedup, *(a.speedup_interval or (None, None)), times="×")
    host = (short(a.host_p50), speedup) if predicted else (short(a.host_p50), short(a.host_p90), speedup)
    cells += [f'<td class="num">{esc(v)}</td>' for v in (
        short(a.top1_accuracy), short(a.top1_agreement), signed(a.drop)) + host]
    if predicted:
        tip = f' title="from the {esc(a.predicted_graph)} graph"' if a.predicted_graph and a.predicted_graph != a.key else ""
        cells += [f'<td class="num"{tip}>{esc(v)}</td>' for v in (short(a.predicted_p50), short(a.predicted_speedup, "×"))]
    opening = '<tr class="recommended">' if a.recommended else "<tr>"
    return f"{opening}{''.join(cells)}</tr>"


def _devices_section(devices: Sequence[Mapping[str, Any]]) -> str:
    headers = ("device", "profile", "state", "last seen", "agent", "runtimes", "temperature", "lost messages")
    rows = []
    for d in sorted(devices, key=lambda d: text(d.get("device_id"))):
        state = text(d.get("state"), "unknown")
        pill = {"online": "good", "offline": "bad"}.get(state, "muted")
        rows.append("<tr>" + "".join([
            f"<td>{esc(text(d.get('device_id'), '?'))}</td>",
            f"<td>{esc(text(d.get('profile'), '-'))}</td>",
            f'<td><span class="{pill}" title="{esc(text(d.get("state_reason")))}">{esc(state)}</span></td>',
            f"<td>{esc(when(d.get('last_seen')))}</td>",
            f"<td>{esc(text(d.get('agent_version'), '-'))}</td>",
            f"<td>{esc(_runtimes(d.get('runtimes')))}</td>",
            f'<td class="num">{esc(fixed(d.get("temperature_c"), 1, " °C"))}</td>',
            f'<td class="num">{esc(whole(d.get("missing_messages")))}</td>',
        ]) + "</tr>")
    return _table(headers, rows)


def _ingest_section(gaps: Sequence[Mapping[str, Any]], stats: Mapping[str, Any]) -> str:
    parts = []
    if gaps:
        rows = []
        for g in sorted(gaps, key=lambda g: (text(g.get("device_id")), text(g.get("kind")),
                                             number(g.get("first_missing_seq")) or 0)):
            first, last = whole(g.get("first_missing_seq")), whole(g.get("last_missing_seq"))
            status = '<span class="good">arrived later</span>' if _filled(g) else '<span class="bad">missing</span>'
            rows.append("<tr>" + "".join([
                f"<td>{esc(text(g.get('device_id'), '?'))}</td>",
                f"<td>{esc(text(g.get('kind'), '-'))}</td>",
                f'<td class="num">{esc(first if first == last else f"{first}–{last}")}</td>',
                f'<td class="num">{esc(whole(_gap_size(g)))}</td>',
                f"<td>{esc(when(g.get('detected_at')))}</td>",
                f"<td>{status}</td>",
            ]) + "</tr>")
        parts.append('<p class="note">Gaps in a device\'s message sequence numbers, as the collector saw them.</p>'
                     + _table(("device", "messages of", "sequence numbers", "count", "detected", "status"), rows))
    else:
        parts.append('<p class="note">No gaps in any device\'s message sequence numbers: nothing was lost.</p>')
    stored, duplicate, rejected = (_counts(stats.get(k)) for k in ("stored", "duplicate", "rejected"))
    if stored or duplicate:
        rows = [f'<tr><td>{esc(kind)}</td><td class="num">{esc(whole(stored.get(kind, 0)))}</td>'
                f'<td class="num">{esc(whole(duplicate.get(kind, 0)))}</td></tr>'
                for kind in sorted(set(stored) | set(duplicate))]
        parts.append("<h3>Messages received</h3>" + _table(("kind", "stored", "duplicates dropped"), rows, "compact"))
    if rejected:
        rows = [f'<tr><td>{esc(reason)}</td><td class="num">{esc(whole(n))}</td></tr>'
                for reason, n in sorted(rejected.items())]
        parts.append('<h3>Rejected messages</h3><p class="note">Malformed, oversized, from the wrong device or of an '
                     "unknown schema: counted, never stored as data.</p>" + _table(("reason", "count"), rows, "compact"))
    return "".join(parts)


def _counts(value: Any) -> Dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): number(v) for k, v in value.items() if number(v) is not None}


def _table(headers: Sequence[str], rows: Sequence[str], extra_class: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    classes = " ".join(c for c in ("data", extra_class) if c)
    return (f'<div class="scroll"><table class="{classes}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


# --- helpers -----------------------------------------------------------------------------------


def _missing(message: str) -> str:
    return f'<p class="missing">{esc(message)}</p>'


def _by_model(rows: Iterable[ResultView]) -> Dict[str, List[ResultView]]:
    groups: Dict[str, List[ResultView]] = {}
    for r in rows:
        groups.setdefault(r.model, []).append(r)
    return groups


def _board_keys(palette: Mapping[str, str], boards: Iterable[str]) -> List[Tuple[str, str, str, bool]]:
    return [(board, palette[board], "circle", False) for board in sorted(boards)]


def _board_legend(palette: Mapping[str, str], boards: Iterable[str]) -> str:
    return legend(_board_keys(palette, boards))


def _format_keys(formats: Iterable[str]) -> List[Tuple[str, str, str, bool]]:
    return [(f or "format not given", "#9aa5b1", format_marker(f), False) for f in sorted(formats)]


def _device(row: Mapping[str, Any]) -> str:
    return text(row.get("device_id"), "?")


def _filled(gap: Mapping[str, Any]) -> bool:
    return gap.get("filled") is True or gap.get("filled") == 1


def _gap_size(gap: Mapping[str, Any]) -> Optional[float]:
    first, last = number(gap.get("first_missing_seq")), number(gap.get("last_missing_seq"))
    return None if first is None or last is None else last - first + 1


def _runtimes(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" if v else str(k) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "-"
    return text(value, "-")


def _strings(value: Any) -> List[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _total(value: Any) -> int:
    if isinstance(value, Mapping):
        return sum(_total(v) for v in value.values())
    x = number(value)
    return int(x) if x is not None else 0


def _version() -> str:
    try:
        return metadata.version("edgeopt")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _css() -> str:
    return resources.files(__package__).joinpath("report.css").read_text(encoding="utf-8")
