"""The report's release history: per model, each board's p50 latency across its builds (a chart and a
table), each build against the board's previous one (ratio, interval, verdict: edgeopt fleet compare's),
regressions marked, and a new runtime or agent version shown beside the change it may explain."""
from __future__ import annotations

from typing import List, Mapping, Sequence

from ..fleet.release_history import Cell, ModelHistory
from ..fleet.releases import DEFAULT_THRESHOLD, FASTER, NO_CHANGE, NOT_COMPARED, SLOWER, UNKNOWN
from .charts import BuildSeries, build_chart, legend
from .text import esc, short, when

TABLE_BUILDS = 8  # the table shows the newest; the chart shows every build


def history_section(histories: Sequence[ModelHistory], palette: Mapping[str, str]) -> str:
    shown = models_with_history(histories)
    single = [h.model for h in histories if len(h.builds) == 1]
    note = ('<p class="note">Each board\'s p50 latency on each build of a model, oldest first, and how it changed '
            "from the board's previous build: the ratio with its 95 % interval, from the two latency distributions "
            "the boards sent (as <code>edgeopt fleet compare</code>). <span class=\"bad\">▲ slower</span>: the "
            f"interval lies above 1 and the ratio above {1 + DEFAULT_THRESHOLD:g}. Throttled, invalid and failed runs never count. A new "
            "runtime or agent version is shown beside the change it may explain.</p>")
    if single:
        note += f'<p class="note">One build so far: {esc(", ".join(single))}.</p>'
    return note + "".join(_model(h, palette) for h in shown)


def _model(history: ModelHistory, palette: Mapping[str, str]) -> str:
    labels = [b.label for b in history.builds]
    series = []
    for board in history.boards:
        points = []
        for i, build in enumerate(history.builds):
            cell = board.cells.get(build.key)
            if cell is not None and cell.p50_ms is not None:
                points.append((i, cell.p50_ms, cell.verdict == SLOWER, f"{board.device_id} · {build.label}: "
                               f"p50 {short(cell.p50_ms)} ms" + _change_text(cell)))
        series.append(BuildSeries(board.device_id, palette.get(board.device_id, "#7F7F7F"), points))
    regressions = history.regressions
    heading = f"<h3>{esc(history.model)}</h3>"
    summary = (f'<p class="note">{len(history.builds)} builds on {len(history.boards)} board(s); '
               + (f'<span class="bad">{regressions} regression(s)</span>' if regressions else "no regression")
               + ".</p>")
    keys = legend([(b.device_id, palette.get(b.device_id, "#7F7F7F"), "circle", False) for b in history.boards] +
                  [("slower than the build before", "#C0392B", "triangle", False)])
    chart = build_chart(series, labels, f"p50 latency of {history.model} across its builds")
    return heading + summary + keys + chart + _table(history)


def _table(history: ModelHistory) -> str:
    builds = history.builds[-TABLE_BUILDS:]
    older = len(history.builds) - len(builds)
    head = "<th>board</th>" + "".join(
        f'<th>{esc(b.label)}<div class="sub">{esc(when(b.first_ts))}</div></th>' for b in builds)
    rows = []
    for board in history.boards:
        cells = [f'<td>{esc(board.device_id)}<div class="sub">{esc(board.profile or "-")}</div></td>']
        for build in builds:
            cell = board.cells.get(build.key)
            cells.append(f'<td class="num">{_cell(cell)}</td>' if cell else '<td class="num"><span class="muted">'
                         "not run</span></td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    caption = f'<p class="note">The newest {len(builds)} builds; {older} older in the chart.</p>' if older else ""
    return (caption + f'<div class="scroll"><table class="data wrap-head"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _cell(cell: Cell) -> str:
    if cell.p50_ms is None:
        return f'<span class="muted">no valid run</span><div class="sub">{cell.left_out} left out</div>'
    parts = [f"{esc(short(cell.p50_ms))} ms"]
    change = _change_text(cell).lstrip(" ·")
    if cell.verdict == SLOWER:
        parts.append(f'<div class="bad">▲ {esc(change)}</div>')
    elif cell.verdict == FASTER:
        parts.append(f'<div class="good">▼ {esc(change)}</div>')
    elif cell.verdict in (NO_CHANGE, UNKNOWN):
        parts.append(f'<div class="sub">{esc(change)}</div>')
    runs = f"{cell.counted} run{'s' if cell.counted != 1 else ''}" + (f", {cell.left_out} left out" if cell.left_out else "")
    parts.append(f'<div class="sub">{esc(runs)}</div>')
    parts += [f'<div class="warn">{esc(change)}</div>' for change in cell.changes]
    return "".join(parts)


def _change_text(cell: Cell) -> str:
    """' · +10.2 % [+8.1 – +12.9 %] slower', or '' where the cell has no previous build."""
    if cell.verdict in (None, NOT_COMPARED) or cell.ratio is None:
        return ""
    change = f"{_percent(cell.ratio)} %"
    if cell.low is not None and cell.high is not None:
        change += f" [{_percent(cell.low)} – {_percent(cell.high)} %]"
    elif cell.verdict == UNKNOWN:
        change += " (percentiles only: no histogram)"
    return f" · {change} {cell.verdict}"


def _percent(ratio: float) -> str:
    """+10.2 for a ratio of 1.102; a change that rounds to nothing is +0.0, never -0.0."""
    change = round((ratio - 1) * 100, 1)
    return f"{change + 0.0:+.1f}"


def models_with_history(histories: Sequence[ModelHistory]) -> List[ModelHistory]:
    return [h for h in histories if len(h.builds) > 1]
