"""Time limits hold on small programs too (issue 26: within the limit, 10% slack on a 2-core machine).

The fast tests check the mechanisms: lp-rounding's loops stop at its deadline, ``ilp`` hands a program
whose limit is short for its size to a child killed at the limit. The sweep (slow) times whole ``solve``
calls over graphs, budgets and limits, in this process (imports already done: a fresh process pays
0.3-0.7 s more for its first call's imports on an idle machine).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from remat_core import solve
from remat_core.formulation import canonical_schedule
from remat_core.formulation.size import estimate_milp_size
from remat_core.graph import load_dtr_dag
from remat_core.solvers import _deadline
from remat_core.solvers.lp_rounding import _Evaluator, polish, repair
from remat_core.units import resolve_budget
from remat_core.zoo import linear_graph, random_training_graph

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "dtr_dags")


def test_polish_and_repair_stop_at_the_deadline():
    g = random_training_graph(8, 3, seed=1)
    budget = resolve_budget(g, 0.7)
    keep_all = np.tril(np.ones((g.n, g.n), dtype=bool), -1)
    evaluate = _Evaluator(g, deadline=time.perf_counter())   # already passed
    S, _cost = polish(evaluate, canonical_schedule(g, keep_all)[1], resolve_budget(g, 1.0), 10**6)
    assert evaluate.calls == 1   # the start's own evaluation, no move
    evaluate = _Evaluator(g, deadline=time.perf_counter())
    assert repair(evaluate, keep_all, budget, 10**6) is None and evaluate.calls == 1
    assert not _Evaluator(g).expired()


def test_lp_rounding_stops_its_local_search_at_the_time_limit(monkeypatch):
    # without a limit the search runs 11,740 evaluations here; a fake clock whose deadline passes at the
    # 200th evaluation makes the test independent of the machine's speed and load (issue 36: a bound on the
    # seconds failed beside two busy loops, and a real 0.5 s limit was not reached on an idle machine; the
    # overrun itself is measured in benchmarks/bench_time_limits.py)
    g = random_training_graph(8, 3, seed=1)
    budget = resolve_budget(g, 0.7)
    monkeypatch.setattr(_Evaluator, "expired", lambda self: self.deadline is not None and self.calls >= 200)
    res = solve(g, budget, method="lp-rounding", time_limit_s=600)
    assert res.stats["stopped"] == "time limit", res.stats
    assert 200 <= res.stats["evaluations"] < 11740, res.stats


def test_ilp_hands_a_short_limit_to_a_child():
    """linear(12) at 5 units (about 25 k nonzeros): with 1 s, under MILP_LIMIT_S_PER_NONZERO per nonzero, it is
    solved in a child killed at the limit (HiGHS in this process overran short limits by up to 1.3 s)."""
    g = linear_graph(12)
    assert 1.0 < _deadline.MILP_LIMIT_S_PER_NONZERO * estimate_milp_size(g).nonzeros < 300
    t0 = time.perf_counter()
    res = solve(g, 5, method="ilp", time_limit_s=1.0)
    elapsed = time.perf_counter() - t0
    assert res.stats.get("deadline_child") is True and res.success
    # a hang guard only: the 10% slack is a wall-clock figure that load changes (issue 36), measured in
    # benchmarks/bench_time_limits.py
    assert elapsed < 30.0, elapsed
    res = solve(g, 5, method="ilp", time_limit_s=300)   # a long limit: in this process (it proves in seconds)
    assert "deadline_child" not in res.stats and res.status.value == "optimal"


def _graphs():
    out = [("random-8", random_training_graph(8, 3, seed=1)), ("linear-20", linear_graph(20)),
           ("random-20", random_training_graph(20, 3, seed=1))]
    path = os.path.join(SHARED_DATA, "U-Net_6.json")
    if os.path.exists(path):
        out.append(("U-Net_6", load_dtr_dag(path)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("method,limit", [("ilp", 2.0), ("lp-rounding", 1.0), ("lp-rounding", 2.0),
                                          ("lp-rounding", 5.0)])
def test_time_limits_hold_across_graphs_and_budgets(method, limit):
    solve(linear_graph(4), 4, method=method, time_limit_s=1.0)   # the first call's imports out of the timing
    over = []
    for name, g in _graphs():
        for fraction in (0.9, 0.7, 0.5):
            t0 = time.perf_counter()
            solve(g, resolve_budget(g, fraction), method=method, time_limit_s=limit)
            elapsed = time.perf_counter() - t0
            if elapsed > 1.1 * limit:
                over.append((name, fraction, round(elapsed, 3)))
    assert not over, over
