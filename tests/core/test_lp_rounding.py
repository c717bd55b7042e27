"""The ``lp-rounding`` method: bounds, rounding modes, allowance search, statuses, options."""

from __future__ import annotations

import numpy as np
import pytest
from canonical import CASES, graph

from remat_core import SolveStatus, checkpoint_all_peak_bytes, solve
from remat_core.solvers.lp_rounding import polish, rounding_candidates
from remat_core.zoo import linear_graph, random_training_graph


def test_canonical_cases_never_beat_the_optimum():
    for case in CASES:
        res = solve(graph(case.graph), case.budget_bytes, method="lp-rounding")
        if case.optimum is None:
            assert res.status is SolveStatus.INFEASIBLE, case
            continue
        assert res.success and res.peak_memory_bytes <= case.budget_bytes, case
        assert res.lower_bound <= case.optimum + 1e-6 <= res.objective + 2e-6, case


@pytest.mark.parametrize("rounding", ["deterministic", "randomized", "both"])
def test_rounding_modes_fit_the_budget(rounding):
    g = random_training_graph(4, seed=3)
    budget = (g.min_budget_lower_bound_bytes() + checkpoint_all_peak_bytes(g)) // 2
    res = solve(g, budget, method="lp-rounding", rounding=rounding, n_samples=8)
    assert res.success and res.peak_memory_bytes <= budget
    assert res.lower_bound <= res.objective
    for key in ("lp_objective", "allowance", "candidate", "lp_time_s", "rounding_time_s", "polish_time_s",
                "rounded_cost", "lp_lower_bound"):
        assert key in res.stats, key
    assert res.objective <= res.stats["rounded_cost"]
    if rounding == "deterministic":
        assert res.stats["candidate"].startswith("threshold")
    if rounding == "randomized":
        assert res.stats["candidate"].startswith("sample")


def test_seeded_results_are_reproducible():
    g = linear_graph(10)
    a = solve(g, 5, method="lp-rounding", seed=7)
    b = solve(g, 5, method="lp-rounding", seed=7)
    assert a.schedule == b.schedule and a.stats["candidate"] == b.stats["candidate"]


def test_plain_two_phase_rounding_and_explicit_allowances():
    g = linear_graph(8)
    plain = solve(g, 5, method="lp-rounding", polish_evals=0, allowances=[0.1])
    assert plain.success and plain.stats["allowance"] == 0.1
    # the LP at the full budget was not solved: the bound is remat_core.bounds' relaxation, not the LP's
    assert "lp_lower_bound" not in plain.stats and plain.stats["bound_method"] in ("lp-closure", "lp-cuts", "knapsack", "sum")
    assert np.sum(g.cost) <= plain.lower_bound <= plain.objective
    assert plain.objective == plain.stats["rounded_cost"]
    full = solve(g, 5, method="lp-rounding")
    assert full.lower_bound is not None and full.objective <= plain.objective


def test_lp_bound_is_the_relaxation_at_the_full_budget():
    g = linear_graph(8)
    res = solve(g, 4, method="lp-rounding")
    milp = solve(g, 4, method="ilp")
    assert res.lower_bound == pytest.approx(res.stats["lp_objective"][0.0])
    assert res.lower_bound <= milp.objective <= res.objective


def test_infeasible_and_roomy_budgets():
    g = linear_graph(4)
    assert solve(g, 2, method="lp-rounding").status is SolveStatus.INFEASIBLE
    res = solve(g, checkpoint_all_peak_bytes(g), method="lp-rounding")
    assert res.status is SolveStatus.OPTIMAL and res.objective == g.cost.sum()


def test_options_are_validated():
    g = linear_graph(2)
    for bad, name in (({"rounding": "nope"}, "rounding"), ({"n_samples": 0}, "n_samples"),
                      ({"allowances": []}, "allowances"), ({"allowances": [1.5]}, "allowances"),
                      ({"polish_evals": -1}, "polish_evals"), ({"time_limit_s": 0}, "time_limit_s")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            solve(g, 3, method="lp-rounding", **bad)


def test_rounding_candidates_keep_marginals_and_structure():
    rng = np.random.default_rng(0)
    S = np.tril(rng.random((6, 6)), -1)
    cands = rounding_candidates(S, "both", n_samples=4, seed=1)
    assert all(c.dtype == bool and not np.triu(c).any() for _, c in cands)
    labels = [label for label, _ in cands]
    assert any(lab.startswith("threshold") for lab in labels) and sum(lab.startswith("sample") for lab in labels) == 4
    # thresholds sweep from keeping least to keeping most
    kept = [c.sum() for label, c in cands if label.startswith("threshold")]
    assert kept == sorted(kept)


def test_polish_and_repair_stay_within_budget():
    from remat_core.solvers.lp_rounding import _Evaluator, repair

    g = linear_graph(10)
    ev = _Evaluator(g)
    plain = solve(g, 5, method="lp-rounding", polish_evals=0)
    S = plain.schedule.S
    S2, cost = polish(ev, S, 5, max_evals=3000)
    c, p = ev(S2)
    assert p <= 5 and c == cost <= plain.objective
    # repair: from keeping everything (too much memory) down to a schedule that fits
    full = np.tril(np.ones((g.n, g.n), dtype=bool), -1)
    assert ev(full)[1] > 5
    fixed = repair(ev, full, 5, max_evals=20000)
    assert fixed is not None and ev(fixed)[1] <= 5


def test_allowance_lps_restart_from_the_last_basis_and_match_cold_solves():
    from remat_core.formulation import build_milp
    from remat_core.solvers.backends import solve_arrays

    g = random_training_graph(10, 2, seed=2)
    res = solve(g, 60, method="lp-rounding", allowances=[0.0, 0.05, 0.1, 0.2])
    lp = res.stats["lp_objective"]
    assert res.stats["lp_warm_solves"] == len(lp) - 1 >= 3
    free = 60 - g.fixed_bytes
    for a, value in lp.items():
        sf = build_milp(g, g.fixed_bytes + int(np.floor(free * (1 - a))), "strong")
        cold = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi,
                            np.zeros_like(sf.integrality))
        assert value == pytest.approx(cold.objective + sf.objective_offset, rel=1e-9), a


def test_repair_finds_a_schedule_at_a_tight_budget_without_the_local_search():
    """random(16 layers, seed 6) at 77 units: no rounding fits; the repair needs several thousand evaluations
    (it gave up after the 1000 it had when ``polish_evals=0`` before), whether or not the local search runs."""
    g, budget = random_training_graph(16, 2, seed=6), 77
    for evals in (0, 50000):
        res = solve(g, budget, method="lp-rounding", polish_evals=evals)
        assert res.success and res.peak_memory_bytes <= budget, (evals, res.message)
        assert res.stats["candidate"].startswith("repaired rounding")


def test_a_stopped_lp_still_gives_a_bound_from_the_cheap_relaxation(monkeypatch):
    """The LP stopped at the limit: the result carries remat_core.bounds' bound, above the sum of the costs where
    memory forces recomputation, and never above the cost."""
    from remat_core.solvers import backends
    from remat_core.solvers.backends import BackendResult

    class Stopped:
        warm_solves = warm_abandoned = 0

        def solve(self, *args, **kwargs):
            return BackendResult(status=SolveStatus.NO_SOLUTION, x=None, objective=None)

    monkeypatch.setattr(backends, "lp_sequence", lambda *a, **k: Stopped())
    g = linear_graph(16)
    budget = 7
    res = solve(g, budget, method="lp-rounding", time_limit_s=30)
    assert res.success and res.peak_memory_bytes <= budget
    assert res.lower_bound is not None and float(np.sum(g.cost)) < res.lower_bound <= res.objective
