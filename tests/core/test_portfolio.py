"""``search="portfolio"`` (and ``"auto"``): HiGHS's MILP and branch-and-cut race; the first proof wins."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from canonical import CASES, graph

from remat_core import SolveStatus, simulate, solve
from remat_core.formulation import build_milp
from remat_core.solvers import portfolio
from remat_core.solvers.backends import BackendResult
from remat_core.solvers.ilp import _strengthen, warm_start_schedule
from remat_core.zoo import linear_graph, random_training_graph


def test_canonical_optima():
    for case in CASES:
        g = graph(case.graph)
        res = solve(g, case.budget_bytes, method="ilp", search="portfolio")
        if case.optimum is None:
            assert res.status is SolveStatus.INFEASIBLE, case
            continue
        assert res.status is SolveStatus.OPTIMAL, (case, res)
        assert res.objective == pytest.approx(case.optimum), case
        assert res.peak_memory_bytes <= case.budget_bytes


def test_branch_and_cut_wins_and_interrupts_highs_from_a_script_without_main_guard(tmp_path):
    """linear(12) at 5 units: branch-and-cut proves it several times faster than HiGHS (about 3 s vs 12 s
    here), so it wins and HiGHS is interrupted. Run as a plain script with no ``__main__`` guard, which a
    child started by multiprocessing's spawn method would re-execute."""
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent("""
        import json, time
        from remat_core import solve
        from remat_core.zoo import linear_graph
        t0 = time.perf_counter()
        res = solve(linear_graph(12), 5, method="ilp", search="portfolio", time_limit_s=120)
        print(json.dumps({"status": res.status.value, "objective": res.objective, "peak": res.peak_memory_bytes,
                          "portfolio": res.stats["portfolio"], "s": time.perf_counter() - t0}))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "optimal" and got["objective"] == 37.0 and got["peak"] <= 5
    assert got["portfolio"]["winner"] == "branch-and-cut", got
    assert got["portfolio"]["milp"]["status"] == "Interrupted by user"
    assert got["portfolio"]["branch_and_cut"]["status"] == "branch-and-cut: optimal"


@pytest.fixture(scope="module")
def hard():
    """random(12 layers, seed 5) at 50: neither search proves it within a few seconds."""
    g, budget = random_training_graph(12, 2, seed=5), 50
    sf = _strengthen(build_milp(g, budget, "strong"), "highs", 1, None)[0]
    start, _method, cost = warm_start_schedule(g, budget)
    return g, budget, sf, sf.encode(start), cost


def test_at_the_time_limit_both_searches_report_and_combine(hard):
    g, budget, sf, x0, cost = hard
    t0 = time.perf_counter()
    out, details = portfolio.race(sf, x0, time_limit_s=4.0, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options={"mip_pscost_minreliable": 0})
    elapsed = time.perf_counter() - t0
    assert elapsed < 4.0 + 6.0, elapsed            # the child is waited for no longer than its deadline + grace
    assert details["winner"] is None and "branch_and_cut" in details and "error" not in details, details
    assert out.status is SolveStatus.FEASIBLE
    assert out.objective + sf.objective_offset <= cost + 1e-9
    assert simulate(g, sf.decode(out.x)).peak_memory_bytes <= budget
    assert out.bound is not None and out.bound <= out.objective + 1e-9


def test_a_failing_child_leaves_the_milp_alone(hard, monkeypatch):
    _g, _budget, sf, x0, _cost = hard
    # the child raises (bad option): reported, and the MILP's own result returned
    out, details = portfolio.race(sf, x0, time_limit_s=2.0, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options=None, bc_options={"node_limit": 0})
    assert "node_limit" in details["error"] and out.status in (SolveStatus.FEASIBLE, SolveStatus.OPTIMAL)
    # no interpreter to start: the MILP runs alone
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    out, details = portfolio.race(sf, x0, time_limit_s=1.0, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options=None)
    assert "error" in details and "milp" in details and out.x is not None


def test_combine_takes_the_cheaper_schedule_and_the_higher_bound():
    x1, x2 = np.zeros(3), np.ones(3)
    a = BackendResult(status=SolveStatus.FEASIBLE, x=x1, objective=10.0, bound=7.0, stats={"nodes": 5})
    b = BackendResult(status=SolveStatus.FEASIBLE, x=x2, objective=9.0, bound=6.0, stats={})
    out = portfolio._combine(a, b)
    assert out.objective == 9.0 and out.x is x2 and out.bound == 7.0 and out.status is SolveStatus.FEASIBLE
    none = BackendResult(status=SolveStatus.NO_SOLUTION, x=None, objective=None, bound=8.5, stats={})
    out = portfolio._combine(none, b)
    assert out.objective == 9.0 and out.bound == 8.5
    infeasible = BackendResult(status=SolveStatus.INFEASIBLE, stats={})
    assert portfolio._combine(infeasible, b) is infeasible


def test_auto_picks_the_portfolio_only_with_two_cores(monkeypatch):
    g = linear_graph(8)                    # the LP bound does not prove the warm start: a search runs
    assert solve(g, 4, method="ilp", threads=1).stats["search"] == "milp"
    assert solve(g, 4, method="ilp", threads=2).stats["search"] == "portfolio"
    assert solve(g, 4, method="ilp", backend="cbc").stats["search"] == "milp"
    monkeypatch.setattr(portfolio, "cpu_count", lambda: 1)
    assert solve(g, 4, method="ilp").stats["search"] == "milp"
    monkeypatch.setattr(portfolio, "cpu_count", lambda: 2)
    res = solve(g, 4, method="ilp")
    assert res.stats["search"] == "portfolio" and res.status is SolveStatus.OPTIMAL and res.objective == 26
    assert res.stats["portfolio"]["winner"] in ("milp", "branch-and-cut")
    with pytest.raises(ValueError, match="backend='highs' and formulation='strong'"):
        solve(g, 4, method="ilp", search="portfolio", formulation="paper")
