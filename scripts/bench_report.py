"""The real-model benchmark's summary tables from its results files (scripts/bench_real_models.py --json):
printed, or written into docs/BENCHMARKS.md between a section's markers (`<!-- realbench:NAME -->` and
`<!-- /realbench:NAME -->`), so the document says what the results hold and nothing else; printed, each
device's done-when per model follows the table. Files of the
same device (one run per model, say) make one table block, their done-when computed over all of them.

    .venv/bin/python scripts/bench_report.py docs/benchmarks/untuned/*-x86-64.json docs/benchmarks/untuned/*-rpi4.json \\
        [--update docs/BENCHMARKS.md --section untuned]
"""
import argparse
import sys
from pathlib import Path

from realbench import results
from realbench.done_when import done_when_lines
from realbench.report import by_device, replace_section, summary_table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="results files, one run (device) each, in table order")
    parser.add_argument("--update", type=Path, help="the Markdown file whose section to rewrite")
    parser.add_argument("--section", help="the section's NAME in its markers")
    args = parser.parse_args(argv)
    if bool(args.update) != bool(args.section):
        parser.error("--update and --section go together")
    try:
        runs = by_device([results.load(path) for path in args.results])
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = summary_table(runs)
    if not args.update:
        print(table)
        for run in runs:
            print("\n" + "\n".join(done_when_lines(run["done_when"])))
        return 0
    try:
        args.update.write_text(replace_section(args.update.read_text(), args.section, table))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.update}: section '{args.section}' rewritten from {len(args.results)} results files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
