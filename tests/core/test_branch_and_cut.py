"""``search="branch-and-cut"``: our own search over the strong formulation proves the MILP's optima."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
from canonical import CASES, graph
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_core import SolveStatus, checkpoint_all_peak_bytes, simulate, solve
from remat_core.formulation import build_milp
from remat_core.solvers.branch_and_cut import branch_and_cut
from remat_core.zoo import linear_graph, random_training_graph

ilp_module = importlib.import_module("remat_core.solvers.ilp")


def test_canonical_optima():
    """The exhaustive-search optimum of every canonical case: through ``solve`` (from the warm start)
    and by the search alone from nothing."""
    for case in CASES:
        g = graph(case.graph)
        res = solve(g, case.budget_bytes, method="ilp", search="branch-and-cut")
        if case.optimum is None:
            assert res.status is SolveStatus.INFEASIBLE, case
            continue
        assert res.status is SolveStatus.OPTIMAL, (case, res)
        assert res.objective == pytest.approx(case.optimum), case
        assert res.lower_bound == pytest.approx(case.optimum, rel=1e-4)
        assert res.peak_memory_bytes <= case.budget_bytes
        sf = build_milp(g, case.budget_bytes, "strong")
        out = branch_and_cut(sf)
        assert out.status is SolveStatus.OPTIMAL, (case, out.stats)
        assert out.objective + sf.objective_offset == pytest.approx(case.optimum), case
        assert simulate(g, sf.decode(out.x)).peak_memory_bytes <= case.budget_bytes


def test_without_a_schedule_to_start_from_the_milp_runs():
    """A budget whose LP is feasible but that holds no schedule: the MILP solver proves it."""
    base = random_training_graph(4, 2, seed=5)
    g = base.replace(cost=base.cost * 1.37 + 0.11)
    budget = (2 * g.min_budget_lower_bound_bytes() + checkpoint_all_peak_bytes(g)) // 3
    res = solve(g, budget, method="ilp", search="branch-and-cut")
    assert res.status is SolveStatus.INFEASIBLE
    assert res.stats["search"].startswith("milp")
    with_start = solve(linear_graph(8), 4, method="ilp", search="branch-and-cut")
    assert with_start.stats["search"] == "branch-and-cut"
    assert with_start.stats["backend_status"].startswith("branch-and-cut")


_small = st.builds(lambda layers, seed: random_training_graph(layers, 2, seed=seed),
                   st.integers(2, 4), st.integers(0, 10_000))


@settings(max_examples=10, deadline=None)
@given(g=_small, frac=st.floats(0.0, 0.6))
def test_same_optimum_as_the_milp(g, frac):
    lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
    budget = int(lo + frac * (hi - lo))
    milp = solve(g, budget, method="ilp", warm_start=False)
    ours = solve(g, budget, method="ilp", search="branch-and-cut")
    assert ours.status is milp.status
    if milp.success:
        assert ours.objective == pytest.approx(milp.objective)
        assert simulate(g, ours.schedule).peak_memory_bytes <= budget


def test_fractional_costs_within_the_gap():
    """Costs that are not integers: no rounding of the bound; the optimum agrees with the MILP's."""
    base = random_training_graph(4, 2, seed=5)
    g = base.replace(cost=base.cost * 1.37 + 0.11)
    budget = (g.min_budget_lower_bound_bytes() + 2 * checkpoint_all_peak_bytes(g)) // 3
    milp = solve(g, budget, method="ilp", warm_start=False, mip_rel_gap=1e-6)
    assert milp.status is SolveStatus.OPTIMAL
    # through ilp the root rounds and RENS prove it before any search: the search runs on the plain program
    sf = build_milp(g, budget, "strong")
    out = branch_and_cut(sf, mip_rel_gap=1e-6)
    assert out.status is SolveStatus.OPTIMAL and out.stats["nodes"] > 1
    objective, bound = out.objective + sf.objective_offset, out.bound + sf.objective_offset
    assert objective == pytest.approx(milp.objective, rel=2e-6)
    assert milp.objective * (1 - 1e-6) - 1e-9 <= bound <= objective + 1e-9


def test_a_loose_gap_stops_early_and_says_so():
    g, budget = linear_graph(10), 5
    exact = solve(g, budget, method="ilp", search="branch-and-cut")
    loose = solve(g, budget, method="ilp", search="branch-and-cut", mip_rel_gap=0.3, cuts=False)
    assert exact.status is loose.status is SolveStatus.OPTIMAL
    assert loose.objective * (1 - 0.3) <= exact.objective + 1e-9
    assert loose.lower_bound <= exact.objective + 1e-9


def test_path_inequalities_are_separated_below_the_root():
    """From the plain strong program (no root rounds), the search itself adds rows; off, it adds none."""
    g = linear_graph(8)
    sf = build_milp(g, 4, "strong")
    on = branch_and_cut(sf)
    off = branch_and_cut(sf, cut_rounds=0)
    assert on.status is off.status is SolveStatus.OPTIMAL
    assert on.objective + sf.objective_offset == pytest.approx(26, abs=1e-6)
    assert off.objective + sf.objective_offset == pytest.approx(26, abs=1e-6)
    assert on.stats["cut_rows"] > 0 and off.stats["cut_rows"] == 0
    assert on.stats["nodes"] < off.stats["nodes"]


def test_infeasible_program_is_a_status():
    g = graph("fanout6")
    sf = build_milp(g, g.min_budget_lower_bound_bytes() - 1, "strong")
    out = branch_and_cut(sf)
    assert out.status is SolveStatus.INFEASIBLE and out.x is None


@pytest.fixture(scope="module")
def chain12():
    """linear(12) at 5 units, strengthened as ``ilp`` does: the root LP does not prove the heuristic
    schedule, so the search takes tens of nodes. ``(program, start, its cost, optimum)``."""
    g, budget = linear_graph(12), 5
    sf = ilp_module._strengthen(build_milp(g, budget, "strong"), "highs", 1, None)[0]
    start, _method, start_cost = ilp_module.warm_start_schedule(g, budget, include_lp_rounding=False)
    full = branch_and_cut(sf, start=sf.encode(start))
    assert full.status is SolveStatus.OPTIMAL and full.stats["nodes"] > 3
    return sf, start, start_cost, full.objective + sf.objective_offset


@pytest.mark.parametrize("limit", [{"node_limit": 3}, {"time_limit_s": 0.3}])
def test_a_limit_returns_the_incumbent_and_a_valid_bound(chain12, limit):
    sf, start, start_cost, optimum = chain12
    out = branch_and_cut(sf, start=sf.encode(start), **limit)
    assert out.status is SolveStatus.FEASIBLE, out.stats
    assert "limit" in out.stats["backend_status"]
    assert out.objective + sf.objective_offset <= start_cost + 1e-9
    assert out.bound is not None and out.bound + sf.objective_offset <= optimum + 1e-6
    without = branch_and_cut(sf, node_limit=1)
    assert without.status in (SolveStatus.FEASIBLE, SolveStatus.NO_SOLUTION)


def test_on_node_sees_the_node_count_and_a_true_return_stops_the_search(chain12):
    sf, start, start_cost, optimum = chain12
    seen = []

    def on_node(nodes):
        seen.append(nodes)
        return nodes >= 4

    out = branch_and_cut(sf, start=sf.encode(start), on_node=on_node)
    assert seen == [0, 1, 2, 3, 4] and out.stats["nodes"] == 4
    assert out.status is SolveStatus.FEASIBLE and out.stats["backend_status"] == "branch-and-cut: stopped by the caller"
    assert out.objective + sf.objective_offset <= start_cost + 1e-9
    assert out.bound is not None and out.bound + sf.objective_offset <= optimum + 1e-6
    full = branch_and_cut(sf, start=sf.encode(start), on_node=lambda nodes: None)   # a None return goes on
    assert full.status is SolveStatus.OPTIMAL and full.objective + sf.objective_offset == pytest.approx(optimum)


def test_a_given_optimal_start_is_proven_not_replaced():
    g, budget = linear_graph(8), 4
    found = solve(g, budget, method="ilp")
    sf = build_milp(g, budget, "strong")
    out = branch_and_cut(sf, start=sf.encode(found.schedule))
    assert out.status is SolveStatus.OPTIMAL
    assert out.objective + sf.objective_offset == pytest.approx(found.objective)
    np.testing.assert_allclose(simulate(g, sf.decode(out.x)).total_cost, found.objective)


def test_options_are_validated():
    g = linear_graph(4)
    with pytest.raises(ValueError, match="`search`"):
        solve(g, 4, method="ilp", search="bogus")
    with pytest.raises(ValueError, match="backend='highs' and formulation='strong'"):
        solve(g, 4, method="ilp", search="branch-and-cut", formulation="paper")
    with pytest.raises(ValueError, match="backend='highs' and formulation='strong'"):
        solve(g, 4, method="ilp", search="branch-and-cut", backend="cbc")
    with pytest.raises(ValueError, match="`solver_options`"):
        solve(g, 4, method="ilp", search="branch-and-cut", solver_options={"mip_heuristic_effort": 0.0})
    sf = build_milp(g, 4, "strong")
    with pytest.raises(ValueError, match="strong"):
        branch_and_cut(build_milp(g, 4, "paper"))
    for name, bad in (("cut_rounds", -1), ("cuts_per_round", 0), ("node_limit", 0), ("node_limit", True)):
        with pytest.raises(ValueError, match=f"`{name}`"):
            branch_and_cut(sf, **{name: bad})
    with pytest.raises(ValueError, match="`start`"):
        branch_and_cut(sf, start=np.zeros(3))
    res = solve(linear_graph(8), 4, method="ilp", search="branch-and-cut",
                solver_options={"node_limit": 50, "cut_rounds": 2})
    assert res.status is SolveStatus.OPTIMAL and res.stats["solver_options"] == {"node_limit": 50, "cut_rounds": 2}


def test_a_point_the_schedule_check_refuses_is_not_proven(monkeypatch):
    """If simulation refused an integral LP point (the LP's tolerance), its subtree is dropped unsearched:
    the search must not claim a proof, and its bound must cover the dropped subtree."""
    g = linear_graph(8)
    start = solve(g, 4, method="rotor")          # a schedule costing 44; the optimum is 26
    sim_module = importlib.import_module("remat_core.simulate")
    real = sim_module.simulate

    def refuse_the_optima(graph, schedule, **kw):
        out = real(graph, schedule, **kw)
        return dataclasses.replace(out, peak_memory_bytes=10**9) if out.total_cost <= 26 + 1e-9 else out

    monkeypatch.setattr(sim_module, "simulate", refuse_the_optima)
    sf = build_milp(g, 4, "strong")
    out = branch_and_cut(sf, start=sf.encode(start.schedule))
    assert out.status is SolveStatus.FEASIBLE, out.stats
    assert "refused" in out.stats["backend_status"] and out.stats["rejected_points"] >= 1
    assert 26 < out.objective + sf.objective_offset <= start.objective
    assert out.bound is not None and out.bound + sf.objective_offset <= 26 + 1e-9


def test_the_time_limit_is_used_not_cut_short(chain12):
    """HiGHS's clock counts all the LPs of the search: the limit must be measured from now, not from zero.

    With a limit shorter than the full search, the search stops near the limit, not after about half of it."""
    sf, start, _cost, _optimum = chain12
    full = branch_and_cut(sf, start=sf.encode(start))
    limit = 0.6 * full.stats["time_s"]
    out = branch_and_cut(sf, start=sf.encode(start), time_limit_s=limit)
    assert out.status is SolveStatus.FEASIBLE
    assert out.stats["time_s"] >= 0.8 * limit, (out.stats["time_s"], limit)


def test_threads_can_change_between_searches():
    """HiGHS keeps one thread pool per process: the search sets its threads through the backend's own
    configuration, which resets the pool when another size is asked for."""
    sf = build_milp(linear_graph(8), 4, "strong")
    for threads in (1, 2, None, 1):
        out = branch_and_cut(sf, threads=threads)
        assert out.status is SolveStatus.OPTIMAL and out.objective + sf.objective_offset == pytest.approx(26, abs=1e-6)


def test_the_knapsack_and_cover_rows_stay_out_of_the_search_lps():
    """They feed a MILP solver's cover cuts and the root bound; in this search's LPs they moved the optima to
    other vertices: random(10) at 60 took 305 nodes instead of 20 with the knapsack rows, random(16, seed 3)
    at 87 969 instead of 583 with the cover rows (benchmarks/experiments/README.md)."""
    from remat_core.formulation.cuts import without_family

    g, budget = random_training_graph(10, 2, seed=2), 60
    sf = build_milp(g, budget, "strong")
    plain = without_family(sf, "knapsack")
    k = sf.row_families["knapsack"]
    assert k > 0 and plain.n_rows == sf.n_rows - k and "knapsack" not in plain.row_families
    assert without_family(plain, "knapsack") is plain
    # the rows removed are exactly the family's: the rest of the program is unchanged, row for row
    off = build_milp(g, budget, "strong", disable=("knapsack",))
    assert (plain.A != off.A).nnz == 0 and np.array_equal(plain.row_hi, off.row_hi)
    # ilp's root rounds add path and lifted cover rows; the search's LP holds all rows but those two families
    strong = ilp_module._strengthen(sf, "highs", 1, None)[0]
    n_cover, n_knap = strong.row_families["cover_inequalities"], strong.row_families["knapsack"]
    assert n_cover > 0 and strong.row_families["path_inequalities"] > 0
    start = solve(g, budget, method="lp-rounding", polish_evals=0).schedule
    out = branch_and_cut(strong, start=strong.encode(start))
    assert out.status is SolveStatus.OPTIMAL and out.objective + strong.objective_offset == pytest.approx(230, abs=1e-6)
    assert out.stats["lp_rows"] == strong.n_rows - n_cover - n_knap


def test_cover_cuts_at_every_node_close_a_small_gap_in_fewer_nodes():
    """``cover_cuts=True`` (the portfolio's short search) separates lifted cover rows below the root as well:
    random(5 layers, seed 4) at 44 from ilp's root (bound 160, start 169 = the optimum) is proven in fewer
    nodes, every separated cover row is valid (the optimum stays), and off, none is separated."""
    g, budget = random_training_graph(5, 2, seed=4), 44
    strong = ilp_module._strengthen(build_milp(g, budget, "strong"), "highs", 1, None)[0]
    start = strong.encode(solve(g, budget, method="ilp").schedule)
    off = branch_and_cut(strong, start=start, cover_rows=True)
    on = branch_and_cut(strong, start=start, cover_rows=True, cover_cuts=True)
    for out in (off, on):
        assert out.status is SolveStatus.OPTIMAL
        assert out.objective + strong.objective_offset == pytest.approx(169, abs=1e-6)
    assert off.stats["cover_cut_rows"] == 0 and on.stats["cover_cut_rows"] > 0
    assert on.stats["nodes"] < off.stats["nodes"] / 2, (on.stats["nodes"], off.stats["nodes"])
    # from nothing, on the canonical cases, the rows cut off no schedule
    for case in CASES:
        if case.optimum is None:
            continue
        sf = build_milp(graph(case.graph), case.budget_bytes, "strong")
        out = branch_and_cut(sf, cover_cuts=True)
        assert out.status is SolveStatus.OPTIMAL, case
        assert out.objective + sf.objective_offset == pytest.approx(case.optimum), case


def test_node_rounding_finds_incumbents_that_cut_the_tree():
    """``node_rounding=True`` (the portfolio's short search) rounds each fractional node's LP point: random(10
    layers, seed 5) at 48 from ilp's root and the rounded root point (213; the optimum is 212) is proven in
    fewer nodes, with an incumbent found by rounding; ``rounding_samples`` is checked; on the canonical cases,
    from nothing, the optima stay."""
    g, budget = random_training_graph(10, 2, seed=5), 48
    strong, _bound, stats = ilp_module._strengthen(build_milp(g, budget, "strong"), "highs", 1, None)
    schedule, cost = ilp_module._rounded(g, strong, stats["x"], budget)
    assert cost == 213
    start = strong.encode(schedule)
    off = branch_and_cut(strong, start=start, cover_rows=True, cover_cuts=True)
    on = branch_and_cut(strong, start=start, cover_rows=True, cover_cuts=True, node_rounding=True)
    for out in (off, on):
        assert out.status is SolveStatus.OPTIMAL
        assert out.objective + strong.objective_offset == pytest.approx(212, abs=1e-6)
    assert off.stats["rounded_incumbents"] == 0 and on.stats["rounded_incumbents"] >= 1
    assert on.stats["nodes"] < off.stats["nodes"] / 2, (on.stats["nodes"], off.stats["nodes"])
    with pytest.raises(ValueError, match="rounding_samples"):
        branch_and_cut(strong, node_rounding=True, rounding_samples=-1)
    for case in CASES:
        if case.optimum is None:
            continue
        sf = build_milp(graph(case.graph), case.budget_bytes, "strong")
        out = branch_and_cut(sf, node_rounding=True, rounding_samples=3)
        assert out.status is SolveStatus.OPTIMAL, case
        assert out.objective + sf.objective_offset == pytest.approx(case.optimum), case
