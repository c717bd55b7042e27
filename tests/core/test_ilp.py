"""The ``ilp`` method: one conformance table run on every backend, statuses, options, properties."""

from __future__ import annotations

import importlib
import os
import time

import numpy as np
import pytest
from canonical import CASES, GRAPHS, exhaustive_optimum, exhaustive_profile, graph
from hypothesis import given, settings
from shared_data import SHARED_DATA
from hypothesis import strategies as st

from remat_core import (Schedule, SolveStatus, UnknownMethodError, checkpoint_all_peak_bytes, load_dtr_dag, simulate,
                        solve)
from remat_core.formulation import available_formulations, build_milp
from remat_core.solvers.backends import BACKENDS, available_backends, solve_arrays
from remat_core.zoo import linear_graph, random_training_graph

ilp_module = importlib.import_module("remat_core.solvers.ilp")


def _backend_param(name):
    marks = [] if name in available_backends() else [pytest.mark.skip(reason=f"{BACKENDS[name][1]} not installed")]
    return pytest.param(name, marks=marks, id=name)


ALL_BACKENDS = [_backend_param(b) for b in BACKENDS]


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_canonical_table_matches_exhaustive_search(name):
    profile = exhaustive_profile(graph(name))
    for case in (c for c in CASES if c.graph == name):
        assert exhaustive_optimum(profile, case.budget_bytes) == case.optimum, case


@pytest.mark.parametrize("formulation", available_formulations())
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_conformance_canonical_optima(backend, formulation):
    """Every backend and formulation proves the exhaustive-search optimum of every canonical case."""
    for case in CASES:
        g = graph(case.graph)
        res = solve(g, case.budget_bytes, method="ilp", backend=backend, formulation=formulation, warm_start=False)
        if case.optimum is None:
            assert res.status is SolveStatus.INFEASIBLE, case
            assert res.schedule is None and "min_budget_lower_bound_bytes" in res.stats
            continue
        assert res.status is SolveStatus.OPTIMAL, (case, res)
        assert res.objective == pytest.approx(case.optimum), case
        assert res.peak_memory_bytes <= case.budget_bytes
        assert res.lower_bound == pytest.approx(case.optimum, rel=1e-4)
        assert res.backend == backend


@pytest.mark.parametrize("formulation", available_formulations())
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_backend_proves_infeasibility(backend, formulation):
    """Below every node's need the program itself is infeasible (the method checks this first)."""
    g = graph("fanout6")
    sf = build_milp(g, g.min_budget_lower_bound_bytes() - 1, formulation)
    out = solve_arrays(backend, sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality)
    assert out.status is SolveStatus.INFEASIBLE and out.x is None


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_backend_lp_relaxation(backend):
    g = linear_graph(4)
    sf = build_milp(g, 4).relax()
    out = solve_arrays(backend, sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality)
    assert out.status is SolveStatus.OPTIMAL and out.bound == pytest.approx(out.objective)
    milp = solve(g, 4, method="ilp", backend=backend, warm_start=False)
    assert out.objective + sf.objective_offset <= milp.objective + 1e-6


def test_infeasible_budget_is_a_status():
    g = linear_graph(4)
    res = solve(g, 2, method="ilp")
    assert res.status is SolveStatus.INFEASIBLE and res.schedule is None
    assert res.stats["min_budget_lower_bound_bytes"] == 3


def test_checkpoint_all_budget_needs_no_solver():
    g = random_training_graph(3, seed=1)
    res = solve(g, checkpoint_all_peak_bytes(g), method="ilp")
    assert res.status is SolveStatus.OPTIMAL and res.objective == pytest.approx(g.cost.sum())
    assert res.lower_bound == pytest.approx(g.cost.sum()) and res.schedule.compute_counts().max() == 1


def test_warm_start_and_stats():
    g = linear_graph(6)
    res = solve(g, 4, method="ilp")
    assert res.status is SolveStatus.OPTIMAL
    keys = ("gap", "warm_start_time_s", "lp_bound")
    if not res.stats.get("milp_skipped"):
        keys += ("nodes", "backend_status", "size", "build_time_s", "solve_time_s")
        assert res.stats["size"]["formulation"] == "strong"
    for key in keys:
        assert key in res.stats, key
    assert res.stats["warm_start_method"] in __import__("remat_core").available_methods() + ["rens"]
    assert res.stats["warm_start_cost"] >= res.objective and res.stats["gap"] == pytest.approx(0.0, abs=1e-4)
    # a given schedule is used as it is
    given_ = solve(g, 4, method="lp-rounding").schedule
    res2 = solve(g, 4, method="ilp", warm_start=given_)
    assert res2.stats["warm_start_method"] == "given" and res2.objective == res.objective


def test_never_worse_than_lp_rounding_under_a_time_limit():
    # the registered heuristics are worse than lp-rounding here (most find nothing at this budget), and the
    # limit is ample for lp-rounding's share: ilp must return at least lp-rounding's schedule
    g, budget = random_training_graph(10, 2, seed=2), 60
    from remat_core.solvers.ilp import warm_start_schedule

    heuristics = warm_start_schedule(g, budget, include_lp_rounding=False)[2]
    lp = solve(g, budget, method="lp-rounding", time_limit_s=60)
    assert lp.success and (heuristics is None or heuristics > lp.objective)
    res = solve(g, budget, method="ilp", time_limit_s=60)
    # below 120 nodes the warm start's local search is short (the MILP goes on from it)
    short = solve(g, budget, method="lp-rounding", time_limit_s=60,
                  polish_evals=ilp_module._WARM_START_POLISH_EVALS)
    # the start is lp-rounding's, unless the rounded root point or RENS (both tried first) found one at least
    # as cheap; lp-rounding then runs only if the bound does not prove that start
    assert res.stats["warm_start_cost"] <= short.objective
    assert res.stats["warm_start_method"] in ("lp-rounding", "root rounding", "rens")
    assert res.success and res.objective <= min(lp.objective, short.objective)
    # a tiny limit is kept: the warm start is returned if lp-rounding's LP finished within its share,
    # otherwise (a slow or loaded machine) there is honestly no schedule, since no heuristic fits here
    t0 = time.perf_counter()
    quick = solve(g, budget, method="ilp", time_limit_s=0.5)
    assert time.perf_counter() - t0 < 20.0   # a hang guard that load cannot reach; overruns: bench_time_limits.py
    if quick.success:
        assert quick.peak_memory_bytes <= budget
        assert heuristics is None or quick.objective <= heuristics
    else:
        assert heuristics is None and quick.status is SolveStatus.NO_SOLUTION


def test_lp_bound_proves_the_warm_start_optimal_without_the_milp():
    # REVOLVE is optimal on this chain and the strong LP bound meets it: no MILP is solved
    g = linear_graph(24)
    res = solve(g, 8, method="ilp")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 67
    assert res.stats.get("milp_skipped") and res.lower_bound == 67
    paper = solve(g, 8, method="ilp", formulation="paper", warm_start=False, time_limit_s=0.5)
    assert paper.lower_bound is None or paper.lower_bound <= 67   # None: the root LP did not finish in 0.5 s


def test_time_limit_returns_incumbent_or_no_solution():
    g = linear_graph(16)
    res = solve(g, 6, method="ilp", time_limit_s=0.3, warm_start=False)
    assert res.status in (SolveStatus.FEASIBLE, SolveStatus.NO_SOLUTION)
    if res.status is SolveStatus.FEASIBLE:
        assert res.peak_memory_bytes <= 6 and res.lower_bound <= res.objective
    warm = solve(g, 6, method="ilp", time_limit_s=0.3)
    assert warm.status is SolveStatus.FEASIBLE and warm.schedule is not None
    assert warm.lower_bound is None or warm.lower_bound <= warm.objective


def test_threads_can_change_between_solves_and_options_reach_the_solver():
    g = linear_graph(5)
    costs = {solve(g, 4, method="ilp", warm_start=False, **kw).objective
             for kw in ({}, {"threads": 2}, {"threads": 1}, {}, {"solver_options": {"mip_pscost_minreliable": 0}})}
    assert len(costs) == 1
    with pytest.raises(ValueError, match="nope"):
        solve(g, 4, method="ilp", warm_start=False, solver_options={"nope": 1})


def test_options_are_validated():
    g = linear_graph(2)
    for bad in ({"time_limit_s": -1}, {"time_limit_s": float("inf")}, {"mip_rel_gap": 2}, {"threads": 0}):
        with pytest.raises(ValueError, match=f"`{next(iter(bad))}`"):
            solve(g, 3, method="ilp", **bad)
    with pytest.raises(UnknownMethodError, match="highs"):
        solve(g, 3, method="ilp", backend="nope")
    with pytest.raises(UnknownMethodError, match="paper"):
        solve(g, 3, method="ilp", formulation="nope")
    with pytest.raises(TypeError, match="unknown options"):
        solve(g, 3, method="ilp", budget=3)


# ------------------------------------------------------------------ properties
_small = st.builds(lambda layers, seed: random_training_graph(layers, 2, seed=seed),
                   st.integers(1, 2), st.integers(0, 10_000))


@settings(max_examples=8)
@given(g=_small, frac=st.floats(0.0, 1.0))
def test_lp_bound_le_milp_le_rounding(g, frac):
    lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
    budget = int(lo + frac * (hi - lo))
    milp = solve(g, budget, method="ilp", warm_start=False)
    approx = solve(g, budget, method="lp-rounding")
    assert milp.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE)
    if milp.status is SolveStatus.INFEASIBLE:
        assert not approx.success
        return
    assert milp.peak_memory_bytes <= budget
    assert approx.lower_bound is not None and approx.lower_bound <= milp.objective + 1e-6
    if approx.success:   # rounding may find nothing at the tightest budgets: a status, not an error
        assert milp.objective <= approx.objective + 1e-6 and approx.peak_memory_bytes <= budget
    else:
        assert approx.status is SolveStatus.NO_SOLUTION


@settings(max_examples=6)
@given(g=_small)
def test_optimum_is_monotone_in_budget_and_agrees_across_formulations(g):
    lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
    budgets = sorted({lo, (2 * lo + hi) // 3, (lo + 2 * hi) // 3, hi - 1, hi})
    costs = []
    for b in budgets:
        res = solve(g, b, method="ilp", warm_start=False)
        paper = solve(g, b, method="ilp", formulation="paper", warm_start=False)
        assert res.status is paper.status
        if res.success:
            assert res.objective == pytest.approx(paper.objective)
            costs.append(res.objective)
        else:
            assert res.status is SolveStatus.INFEASIBLE
            costs.append(np.inf)
    assert all(a >= b - 1e-9 for a, b in zip(costs, costs[1:]))


@settings(max_examples=6)
@given(g=_small)
def test_milp_at_checkpoint_all_peak_computes_each_node_once(g):
    """Without the method's shortcut: the program itself finds no recomputation worth paying for."""
    peak = checkpoint_all_peak_bytes(g)
    for formulation in available_formulations():
        sf = build_milp(g, peak, formulation)
        out = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality)
        assert out.status is SolveStatus.OPTIMAL
        sched = sf.decode(out.x)
        sim = simulate(g, sched)
        assert sim.peak_memory_bytes <= peak
        assert np.all(sched.compute_counts()[g.cost > 0] == 1)
        assert out.objective + sf.objective_offset == pytest.approx(g.cost.sum())


def test_decoded_schedule_is_a_schedule():
    g = linear_graph(5)
    res = solve(g, 4, method="ilp")
    assert isinstance(res.schedule, Schedule) and simulate(g, res.schedule).total_cost == res.objective


@pytest.mark.parametrize("formulation", available_formulations())
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_budget_below_fixed_bytes_is_infeasible_in_the_program(backend, formulation):
    from remat_core import Graph

    g = Graph.from_arrays([[], [0]], memory_bytes=0, fixed_bytes=2)
    sf = build_milp(g, 1, formulation)
    out = solve_arrays(backend, sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality)
    assert out.status is SolveStatus.INFEASIBLE


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared/data not present")
def test_time_limit_is_kept_on_a_graph_whose_lp_is_slow():
    # U-Net_6 (201 nodes, about 7 M nonzeros): building its program and its strong LP relaxation alone take
    # longer than these limits, with a presolve HiGHS does not interrupt; the solve runs in a child killed at
    # the limit. ResNet-32, once used here, is no longer built at all (over the model-size limit).
    # The issue's requirement: within the limit, 10% slack on a 2-core machine.
    g = load_dtr_dag(os.path.join(SHARED_DATA, "U-Net_6.json"))
    budget = int(0.6 * checkpoint_all_peak_bytes(g))
    t0 = time.perf_counter()
    res = solve(g, budget, method="ilp", time_limit_s=4.0, threads=1)
    elapsed = time.perf_counter() - t0
    assert res.status is SolveStatus.FEASIBLE and res.peak_memory_bytes <= budget
    # the 10% slack is a wall-clock figure that load changes (issue 36: tests assert only what load cannot);
    # benchmarks/bench_time_limits.py measures it. Here: the call ends near its limit, not after the solve
    assert elapsed < 4.0 + 10.0, elapsed
    t0 = time.perf_counter()
    res = solve(g, budget, method="lp-rounding", time_limit_s=2.0)
    elapsed = time.perf_counter() - t0
    assert res.status in (SolveStatus.NO_SOLUTION, SolveStatus.FEASIBLE, SolveStatus.OPTIMAL)
    if res.status is SolveStatus.NO_SOLUTION:
        assert "time limit" in res.message
    assert elapsed < 2.0 + 10.0, elapsed


def _no_start_but_lp_rounding(monkeypatch):
    """Switch off every source of a start in ``ilp`` except lp-rounding (heuristics, rounded root point, RENS), so
    that lp-rounding, which runs only when none found a schedule, runs on a graph the root rounds apply to."""
    from remat_core import available_methods

    monkeypatch.setattr(ilp_module, "_NOT_FOR_WARM_START", frozenset(available_methods()))
    monkeypatch.setattr(ilp_module, "_rounded", lambda *a: (None, None))
    monkeypatch.setattr(ilp_module, "_rens", lambda *a, **k: (None, None, {"cost": None}))


@pytest.mark.parametrize("other_starts", [True, False])
def test_the_program_is_built_once(monkeypatch, other_starts):
    # the LP bound step, the cut rounds, lp-rounding (its allowance 0 and, re-budgeted, the others) and the
    # MILP share one program: one build in all. lp-rounding runs only when neither a heuristic, the rounded
    # root point nor RENS found a schedule; here they are switched off to make it run
    import remat_core.formulation as formulation

    g, budget = random_training_graph(5, 2, seed=4), 44
    built = []
    real = formulation.build_milp

    def counting(graph, budget_bytes, *args, **kwargs):
        built.append((budget_bytes, args, tuple(sorted(kwargs))))
        return real(graph, budget_bytes, *args, **kwargs)

    monkeypatch.setattr(formulation, "build_milp", counting)
    if not other_starts:
        _no_start_but_lp_rounding(monkeypatch)
    res = solve(g, budget, method="ilp")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 169 and not res.stats.get("milp_skipped")
    assert [b for b, _, _ in built] == [budget], built
    if other_starts:   # the rounded root point found the start: lp-rounding is left out
        assert res.stats["warm_start_method"] == "root rounding"
        assert "skipped" in res.stats["lp_rounding"] and res.stats["lp_rounding"]["cost"] is None
        return
    assert res.stats["lp_rounding"]["after"] == "rens" and res.stats["warm_start_method"] == "lp-rounding"
    assert res.stats["cuts"]["first_lp_warm"]                  # the root rounds restart from the root LP's basis
    # lp-rounding on its own builds a program per allowance and rounds to the same schedule
    built.clear()
    alone = solve(g, budget, method="lp-rounding", polish_evals=ilp_module._WARM_START_POLISH_EVALS)
    assert alone.objective == res.stats["lp_rounding"]["cost"]
    assert len(built) == 1 and alone.stats["lp_warm_solves"] >= 1   # the rest re-budgeted and re-solved warm


@pytest.mark.parametrize("root_lp_max_nodes", [120, 10])
def test_warm_start_local_search_is_short_when_the_milp_follows(monkeypatch, root_lp_max_nodes):
    # up to _ROOT_LP_MAX_NODES nodes the MILP improves the incumbent itself: lp-rounding's local search is
    # cut to _WARM_START_POLISH_EVALS evaluations; above, lp-rounding keeps its own default
    import remat_core.solvers as solvers

    monkeypatch.setattr(ilp_module, "_ROOT_LP_MAX_NODES", root_lp_max_nodes)
    _no_start_but_lp_rounding(monkeypatch)   # with 120, lp-rounding then runs after the root rounds
    g, budget = random_training_graph(5, 2, seed=4), 44    # 19 nodes
    seen = []
    real = solvers.solve

    def spying(graph, budget_bytes, method="ilp", **options):
        if method == "lp-rounding":
            seen.append(options.get("polish_evals"))
        return real(graph, budget_bytes, method=method, **options)

    monkeypatch.setattr(solvers, "solve", spying)
    res = real(g, budget, method="ilp")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 169
    assert seen == [ilp_module._WARM_START_POLISH_EVALS if root_lp_max_nodes >= g.n else None]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_lp_sequence_matches_cold_solves(backend):
    from remat_core.solvers.backends import lp_sequence

    g = random_training_graph(5, 2, seed=1)
    unit = build_milp(g, 39, "strong").memory_unit
    seq = lp_sequence(backend)
    expected_warm = 0
    for i, (graph_, budget) in enumerate([(g, 39), (g, 36), (g, 45), (linear_graph(6), 5), (g, 33)]):
        sf = build_milp(graph_, budget, "strong", memory_unit=unit if graph_ is g else None)
        out = seq.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi)
        cold = solve_arrays(backend, sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi,
                            np.zeros_like(sf.integrality))
        assert out.status is cold.status is SolveStatus.OPTIMAL
        assert out.objective == pytest.approx(cold.objective, rel=1e-9, abs=1e-9), (budget, graph_.name)
        expected_warm += backend == "highs" and i in (1, 2)   # same matrix as the previous LP; not after the swap
    assert seq.warm_solves == expected_warm
    with pytest.raises(UnknownMethodError, match="nope"):
        lp_sequence("nope")


def test_lp_sequence_time_limit_is_per_solve():
    # HiGHS's run clock keeps counting across runs of one model: a limit shorter than the first solve
    # but far longer than the warm re-solve must still let the re-solve finish
    from remat_core.solvers.backends import lp_sequence

    g = random_training_graph(16, 2, seed=3)
    seq = lp_sequence("highs")
    first_sf = build_milp(g, 87, "strong")
    first = seq.solve(first_sf.c, first_sf.A, first_sf.row_lo, first_sf.row_hi, first_sf.col_lo, first_sf.col_hi)
    sf = build_milp(g, 80, "strong", memory_unit=first_sf.memory_unit)
    again = seq.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi,
                      time_limit_s=0.9 * first.stats["time_s"])
    assert seq.warm_solves == 1
    assert first.status is again.status is SolveStatus.OPTIMAL


def test_lp_sequence_abandons_a_slow_warm_resolve(monkeypatch):
    # a warm re-solve that takes longer than a solve from scratch is given up for one
    from remat_core.solvers.backends import highs, lp_sequence

    g = random_training_graph(16, 2, seed=3)
    seq = lp_sequence("highs")
    first_sf = build_milp(g, 87, "strong")
    seq.solve(first_sf.c, first_sf.A, first_sf.row_lo, first_sf.row_hi, first_sf.col_lo, first_sf.col_hi)
    monkeypatch.setattr(highs.LPSequence, "MIN_WARM_ALLOWANCE_S", 0.0)
    seq._cold_s = 0.0    # as if the solve from scratch had been instantaneous: no time for the warm one
    sf = build_milp(g, 80, "strong", memory_unit=first_sf.memory_unit)
    out = seq.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi)
    cold = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, np.zeros_like(sf.integrality))
    assert (seq.warm_solves, seq.warm_abandoned) == (0, 1)
    assert out.status is SolveStatus.OPTIMAL and out.objective == pytest.approx(cold.objective, rel=1e-9)


@pytest.mark.skipif("cbc" not in available_backends(), reason="python-mip not installed")
def test_cbc_lp_solves_print_nothing_unless_verbose(capfd):
    # CLP writes its LP log to file descriptor 1 whatever python-mip's `verbose` says
    sf = build_milp(linear_graph(6), 4)
    lp = np.zeros_like(sf.integrality)
    out = solve_arrays("cbc", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, lp)
    assert out.status is SolveStatus.OPTIMAL
    assert capfd.readouterr().out == ""
    solve_arrays("cbc", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, lp, verbose=True)
    assert capfd.readouterr().out != ""
    print("still printing")   # file descriptor 1 is restored
    assert capfd.readouterr().out == "still printing\n"


def test_rens_improves_the_start_within_budget_and_time():
    """RENS around the strengthened root LP point: a schedule within budget, costed by the simulator, no worse
    than lp-rounding's without local search; a short limit is kept."""
    ilp = importlib.import_module("remat_core.solvers.ilp")
    for g, budget in [(random_training_graph(10, 2, seed=4), 54), (random_training_graph(10, 2, seed=7), 59)]:
        sf, _bound, stats = ilp._strengthen(build_milp(g, budget, "strong"), "highs", 1, None)
        x = stats["x"]
        start = solve(g, budget, method="lp-rounding", polish_evals=0)
        found, cost, info = ilp._rens(g, sf, x, budget, 5.0, 1)
        assert found is not None and info["tries"][0]["free_keeps"] > 0
        sim = simulate(g, found)
        assert sim.peak_memory_bytes <= budget and sim.total_cost == cost == info["cost"]
        assert cost <= start.objective
        t0 = time.perf_counter()
        ilp._rens(g, sf, x, budget, 0.01, 1)
        assert time.perf_counter() - t0 < 10.0   # a hang guard that load cannot reach


def test_the_root_bound_proves_the_rounded_root_point_without_a_search():
    """random(16 layers, seed 8) at 69: the root rounds bound the cost at 251 and their LP point rounds to a
    schedule of 251, so neither RENS, lp-rounding nor a MILP runs; with ``warm_start=False`` the search proves
    the same optimum."""
    ilp = importlib.import_module("remat_core.solvers.ilp")
    g, budget = random_training_graph(16, 2, seed=8), 69
    res = solve(g, budget, method="ilp")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 251 and res.lower_bound == 251
    assert res.stats["milp_skipped"] and res.stats["warm_start_method"] == "root rounding"
    assert res.stats["root_rounding"]["cost"] == 251 and res.stats["cuts"]["cover_rows"] > 0
    assert "rens" not in res.stats and "lp_rounding" not in res.stats
    sim = simulate(g, res.schedule)
    assert sim.peak_memory_bytes <= budget and sim.total_cost == 251
    plain = solve(g, budget, method="ilp", warm_start=False)
    assert plain.status is SolveStatus.OPTIMAL and plain.objective == 251 and "root_rounding" not in plain.stats
    # the rounding itself: within budget and simulated, and None where no rounding fits (the LP point of the
    # root LP at a budget below the one it was solved for)
    sf, _bound, stats = ilp._strengthen(build_milp(g, budget, "strong"), "highs", 1, None)
    found, cost = ilp._rounded(g, sf, stats["x"], budget)
    assert found is not None and cost == simulate(g, found).total_cost and cost >= 251
    lo = g.min_budget_lower_bound_bytes()
    assert ilp._rounded(g, sf, stats["x"], lo - 1) == (None, None)


def test_rens_widens_to_the_whole_program_at_its_root_on_a_small_program(monkeypatch):
    """random(5 layers, seed 6) at 37 (272 integer columns: small): no rounding of the root point fits, the keeps
    the LP holds at 0 or 1 admit no schedule, and the widened try is the whole program at HiGHS's root, whose
    bound proves its schedule, the optimum 154: no search runs. Treated as a large program, the widened try is the
    keeps at 0 (164), and a search proves 154."""
    ilp = importlib.import_module("remat_core.solvers.ilp")
    g, budget = random_training_graph(5, 2, seed=6), 37
    assert ilp._small_program(build_milp(g, budget, "strong"))
    res = solve(g, budget, method="ilp", search="portfolio")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 154 and res.lower_bound == 154
    tries = res.stats["rens"]["tries"]
    assert [t["status"] for t in tries][0] == "Infeasible" and tries[1]["fixed"].startswith("nothing")
    assert res.stats["rens"]["bound"] == pytest.approx(154) and res.stats["lp_bound"] == 154
    assert res.stats["bound_source"].startswith("whole program") and res.stats["milp_skipped"]
    assert "portfolio" not in res.stats and res.stats["rens"]["child_beside"] is False
    sim = simulate(g, res.schedule)
    assert sim.peak_memory_bytes <= budget and sim.total_cost == 154
    monkeypatch.setattr(ilp, "_SMALL_PROGRAM_INTEGER", 0)
    large = solve(g, budget, method="ilp", search="portfolio")
    assert large.status is SolveStatus.OPTIMAL and large.objective == 154
    assert large.stats["rens"]["tries"][1]["fixed"] == "keeps at 0" and large.stats["rens"]["cost"] == 164
    assert "bound" not in large.stats["rens"] and "bound_source" not in large.stats
    assert large.stats["rens"]["child_beside"] is True and large.stats["portfolio"]["winner"] is not None


def test_rens_is_skipped_one_unit_above_the_bound():
    """linear(8) at 4: the root rounds bound the cost at 25 and the heuristics' start costs 26; only a schedule
    at the bound could beat it, which the search looks for with a proof, so RENS does not run. With a
    fractional cost (no rounding of the bound) it runs."""
    g = linear_graph(8)
    res = solve(g, 4, method="ilp")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 26
    assert res.stats["lp_bound"] == 25 and "skipped" in res.stats["rens"] and res.stats["rens"]["cost"] is None
    assert "skipped" in res.stats["lp_rounding"] and res.stats["lp_rounding"]["cost"] is None   # same rule
    frac = solve(g.replace(cost=g.cost + 0.5), 4, method="ilp")
    assert frac.status is SolveStatus.OPTIMAL and "tries" in frac.stats["rens"]


def test_rens_cap_is_the_constant_without_a_limit_and_a_tenth_of_what_is_left_with_one(monkeypatch):
    """RENS gets ``_RENS_TIME_S`` (3 s: the 1.3-2.0 s neighbourhoods of random(10 layers, seed 6) at 57 and
    random(16 layers, seed 3) at 87 fit) without ``time_limit_s``, and a tenth of what is left of it with one."""
    ilp = importlib.import_module("remat_core.solvers.ilp")
    caps = []

    def recorded(graph, sf, x, budget_bytes, time_limit_s, threads, **kw):
        caps.append(time_limit_s)
        return real(graph, sf, x, budget_bytes, time_limit_s, threads, **kw)

    real = ilp._rens
    monkeypatch.setattr(ilp, "_rens", recorded)
    g = linear_graph(8)
    g = g.replace(cost=g.cost + 0.5)   # fractional costs: RENS is not skipped one unit above the bound
    assert solve(g, 4, method="ilp", search="milp").status is SolveStatus.OPTIMAL
    assert caps == [ilp._RENS_TIME_S] and ilp._RENS_TIME_S >= 2.5
    assert solve(g, 4, method="ilp", search="milp", time_limit_s=5).status is SolveStatus.OPTIMAL
    assert len(caps) == 2 and 0.3 < caps[1] <= 0.5
