"""scripts/bench_release_gate.py runs through the real store and comparison and reports what it counted
(its figures are recorded in docs/BENCHMARKS.md; here a few trials only, seeded)."""
from __future__ import annotations

import bench_release_gate


def test_a_short_run_counts_the_slowed_candidate_and_the_redeploys(capsys):
    assert bench_release_gate.main(["--boards", "3", "--trials", "2", "--redeploy-trials", "1", "--shifts", "0",
                                    "--runs-per-build", "1", "--samples", "200"]) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("| 0% |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "1"  # one benchmark a build
    assert cells[2] == "100.0% (6/6)" and cells[3] == "100.0%" and cells[4] == "100.0%"  # 10 % slower: every board
    assert cells[5].endswith("(0/30)") and cells[7] == "0.0% (0/10)" and cells[8] == "0"  # re-deploys: none slower
