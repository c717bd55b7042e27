"""Path inequalities (remat_core.formulation.cuts): valid for every schedule, separated exactly."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import dags, valid_schedules

from remat_core import Schedule, SolveStatus, solve
from remat_core.formulation import build_milp, canonical_schedule
from remat_core.formulation.cuts import path_inequalities, with_rows
from remat_core.solvers.backends import available_backends, lp_sequence, solve_arrays
from remat_core.zoo import linear_graph, random_training_graph


def _lp(sf):
    return solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi,
                        np.zeros_like(sf.integrality))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_schedule_satisfies_every_path_inequality(data):
    """No path inequality is violated at an integer point of the strong formulation (any budget)."""
    g = data.draw(dags(max_nodes=9))
    sched = Schedule(*canonical_schedule(g, data.draw(valid_schedules(g)).S))
    sf = build_milp(g, 10 ** 9, "strong")
    rows, viol = path_inequalities(sf, sf.encode(sched), max_cuts=10 ** 6, tol=1e-9)
    assert rows.shape[0] == 0, viol


@pytest.mark.parametrize("graph, budget", [(linear_graph(8), 4), (random_training_graph(10, 2, seed=2), 60),
                                           (random_training_graph(5, 2, seed=1), 39)])
def test_optimal_schedules_satisfy_the_rows_the_lp_point_violates(graph, budget):
    sf = build_milp(graph, budget, "strong")
    x_lp = _lp(sf).x
    rows, viol = path_inequalities(sf, x_lp)
    assert rows.shape[0] > 0 and np.all(viol > 0) and np.all(np.diff(viol) <= 1e-12)   # most violated first
    np.testing.assert_allclose(rows @ x_lp, 1 - viol, atol=1e-9)
    best = solve(graph, budget, method="ilp", cuts=False)
    assert best.status is SolveStatus.OPTIMAL
    assert np.all(rows @ sf.encode(best.schedule) >= 1 - 1e-9)


def _brute_force_lhs(sf, x):
    """Per (stage, a, v): the least left-hand side at ``x`` over all paths a -> v, by enumerating paths."""
    g, n = sf.graph, sf.graph.n
    R, S = sf.fractional(x)
    has_s = np.zeros((n, n), bool)
    has_s[sf.s_t, sf.s_i] = True
    succ = {i: [int(k) for j, k in g.edges if j == i] for i in range(n)}
    best = {}
    for stage in range(1, n):
        for a in range(stage):
            stack = [(a, (a,))]
            while stack:
                y, path = stack.pop()
                if not all(has_s[stage, b] for b in path):
                    continue
                readers = [int(k) for j, k in g.edges if j == y and k >= stage]
                if readers:
                    t = min(readers)
                    lhs = R[stage:t + 1, a].sum() + sum(S[stage, b] for b in path)
                    best[stage, a, y] = min(best.get((stage, a, y), np.inf), lhs)
                stack.extend((k, path + (k,)) for k in succ[y] if k < stage)
    return best


@pytest.mark.parametrize("graph, budget", [(random_training_graph(5, 2, seed=1), 39), (linear_graph(6), 4),
                                           (random_training_graph(7, 2, seed=5), 40)])
def test_separation_is_exact(graph, budget):
    """One row per (stage, a, v), with the least left-hand side over all paths: as enumerated path by path."""
    sf = build_milp(graph, budget, "strong")
    lp = _lp(sf)
    brute = _brute_force_lhs(sf, lp.x)
    assert min(brute.values()) < 1 - 1e-6                       # the LP point violates some row
    rows, viol = path_inequalities(sf, lp.x, max_cuts=10 ** 6, tol=-np.inf)   # every row, violated or not
    np.testing.assert_allclose(np.sort(1 - viol), np.sort(list(brute.values())), atol=1e-9)
    violated, _ = path_inequalities(sf, lp.x, max_cuts=10 ** 6)
    assert violated.shape[0] == sum(v < 1 - 1e-6 for v in brute.values())


def test_cuts_raise_the_lp_bound_and_keep_the_optimum():
    g = linear_graph(8)
    sf = build_milp(g, 4, "strong")
    lp = _lp(sf)
    assert lp.objective + sf.objective_offset == pytest.approx(23.0)
    rows, _ = path_inequalities(sf, lp.x)
    cut = with_rows(sf, rows, np.ones(rows.shape[0]), np.full(rows.shape[0], np.inf), "path_inequalities")
    assert cut.row_families["path_inequalities"] == rows.shape[0] and cut.n_rows == sf.n_rows + rows.shape[0]
    assert _lp(cut).objective + sf.objective_offset > 24.9    # the 8-layer chain's optimum is 26
    milp = solve_arrays("highs", cut.c, cut.A, cut.row_lo, cut.row_hi, cut.col_lo, cut.col_hi, cut.integrality)
    assert milp.objective + sf.objective_offset == pytest.approx(26.0)


def test_bad_arguments_are_named():
    sf = build_milp(linear_graph(3), 4, "strong")
    x = np.zeros(sf.n_cols)
    with pytest.raises(ValueError, match="max_cuts"):
        path_inequalities(sf, x, max_cuts=0)
    with pytest.raises(ValueError, match="`x`"):
        path_inequalities(sf, x[:-1])
    with pytest.raises(ValueError, match="strong"):
        path_inequalities(build_milp(linear_graph(3), 4, "paper"), np.zeros(1))


@pytest.mark.parametrize("backend", available_backends())
def test_add_rows_matches_a_cold_solve_of_the_stacked_program(backend):
    g = random_training_graph(10, 2, seed=2)
    sf = build_milp(g, 60, "strong")
    seq = lp_sequence(backend)
    out = seq.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi)
    for _ in range(2):
        rows, _ = path_inequalities(sf, out.x)
        out = seq.add_rows(rows, np.ones(rows.shape[0]), np.full(rows.shape[0], np.inf))
        sf = with_rows(sf, rows, np.ones(rows.shape[0]), np.full(rows.shape[0], np.inf), "path_inequalities")
        cold = _lp(sf)
        assert out.status is cold.status is SolveStatus.OPTIMAL
        assert out.objective == pytest.approx(cold.objective, rel=1e-9, abs=1e-9)
    if backend == "highs":
        assert seq.warm_solves == 2
    with pytest.raises(RuntimeError, match="solve"):
        lp_sequence(backend).add_rows(sp.csr_array((1, 3)), [1.0], [np.inf])


def test_ilp_with_cuts_proves_the_same_optima_and_reports_them():
    for graph, budget in [(linear_graph(8), 4), (random_training_graph(10, 2, seed=2), 60),
                          (random_training_graph(5, 2, seed=1), 39)]:
        with_cuts = solve(graph, budget, method="ilp")
        without = solve(graph, budget, method="ilp", cuts=False)
        assert with_cuts.status is without.status is SolveStatus.OPTIMAL
        assert with_cuts.objective == without.objective
        assert with_cuts.peak_memory_bytes <= budget
        c = with_cuts.stats["cuts"]
        assert c["rows"] > 0 and c["lp_bound_after"] > c["lp_bound_before"]
        assert "cuts" not in without.stats
    with pytest.raises(TypeError, match="cuts"):
        solve(linear_graph(3), 4, method="ilp", cuts="yes")


def test_the_cut_bound_alone_can_prove_the_warm_start_optimal(monkeypatch):
    """Where the cut LP bound meets the warm start's cost, no MILP runs."""
    from remat_core.solvers import ilp

    g = linear_graph(8)
    calls = []
    real = ilp._strengthen

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out[1])
        return out[0], 26.0, out[2]   # pretend the rows closed the gap

    monkeypatch.setattr(ilp, "_strengthen", spy)
    res = solve(g, 4, method="ilp")
    assert calls and res.status is SolveStatus.OPTIMAL and res.objective == 26.0
    assert res.stats["milp_skipped"] and res.lower_bound == 26.0


def test_separation_rounds_keep_their_time_limit():
    import time

    from remat_core.solvers.ilp import _strengthen

    g = random_training_graph(16, 2, seed=3)
    sf = build_milp(g, 87, "strong")
    t0 = time.perf_counter()
    out, bound, stats = _strengthen(sf, "highs", 1, 0.02)
    assert time.perf_counter() - t0 < 10.0   # a hang guard (load-proof): 500 times the limit
    assert bound is None or stats["rounds"] <= 1
    full, full_bound, full_stats = _strengthen(sf, "highs", 1, None)
    assert full_stats["rounds"] >= 2 and full_bound > full_stats["lp_bound_before"] + 1
    assert full.n_rows == sf.n_rows + full_stats["rows"]


# ---------------------------------------------------------------- lifted cover inequalities

@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_schedule_within_budget_satisfies_every_cover_inequality(data):
    """Covers of the knapsack rows hold at every schedule that fits the budget, at any separation point."""
    from remat_core import simulate
    from remat_core.formulation.cuts import cover_inequalities

    g = data.draw(dags(min_nodes=4, max_nodes=10))
    sched = Schedule(*canonical_schedule(g, data.draw(valid_schedules(g, extra=False)).S))
    budget = simulate(g, sched).peak_memory_bytes               # the tightest budget this schedule fits
    sf = build_milp(g, budget, "strong")
    if sf.n_cols == 0:                                          # nothing is ever kept: no rows to separate
        return
    x_sched = sf.encode(sched)
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    for x in (_lp(sf).x, np.random.default_rng(seed).random(sf.n_cols)):
        if x is None:
            continue
        rows, rhs, viol = cover_inequalities(sf, x, max_cuts=10 ** 6, tol=-np.inf)
        assert np.all(rows @ x_sched <= rhs + 1e-9), (rows @ x_sched, rhs)
        np.testing.assert_allclose(rows @ x - rhs, viol, atol=1e-9)


def test_lifting_is_exact_and_valid():
    """Each lifted coefficient is the largest valid one given the earlier items (brute force), with real sizes,
    and the lifted row holds at every 0/1 point of the knapsack."""
    import itertools

    from remat_core.formulation.cuts import _lift

    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(3, 9))
        w = np.round(rng.uniform(0.5, 6.0, n), 3)
        cap = float(np.round(rng.uniform(0.3, 0.8) * w.sum(), 3))
        order = rng.permutation(n).tolist()
        cover, total = [], 0.0
        for j in order:
            cover.append(j)
            total += w[j]
            if total > cap:
                break
        if total <= cap or len(cover) < 2:
            continue
        rest = [j for j in order if j not in cover]
        alpha, rhs = _lift(w, cap, cover, rest, 1e-9)
        assert rhs == len(cover) - 1 and np.all(alpha[cover] == 1)
        for pos, k in enumerate(rest):
            done = cover + rest[:pos]
            best = max(sum(alpha[j] for j in sub) for r in range(len(done) + 1)
                       for sub in itertools.combinations(done, r)
                       if sum(w[j] for j in sub) <= cap - w[k] + 1e-9) if w[k] <= cap + 1e-9 else -np.inf
            assert alpha[k] == (rhs if best == -np.inf else rhs - best), (k, alpha, w, cap)
        for y in itertools.product((0, 1), repeat=n):
            if np.dot(w, y) <= cap + 1e-9:
                assert np.dot(alpha, y) <= rhs


def test_covers_raise_the_root_bound_and_keep_the_optimum():
    """random(10 layers, seed 4) at 54 units: the path inequalities alone leave 202.2, the covers lift the root
    LP above 204 (the optimum is 206); no row cuts off an optimal schedule."""
    from remat_core.formulation.cuts import cover_inequalities

    g, budget = random_training_graph(10, 2, seed=4), 54
    sf = build_milp(g, budget, "strong")
    seq = lp_sequence("highs")
    out = seq.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi)
    for _ in range(5):
        rows, _ = path_inequalities(sf, out.x)
        if rows.shape[0] == 0:
            break
        out = seq.add_rows(rows, np.ones(rows.shape[0]), np.full(rows.shape[0], np.inf))
        sf = with_rows(sf, rows, np.ones(rows.shape[0]), np.full(rows.shape[0], np.inf), "path_inequalities")
    paths_only = out.objective + sf.objective_offset
    rows, rhs, viol = cover_inequalities(sf, out.x)
    assert rows.shape[0] > 0 and np.all(viol > 0) and np.all(np.diff(viol) <= 1e-12)
    assert np.all(rows.data == np.round(rows.data)) and np.all(rows.data >= 1)
    covered = _lp(with_rows(sf, rows, np.full(rows.shape[0], -np.inf), rhs, "cover_inequalities"))
    assert paths_only < 202.5 and covered.objective + sf.objective_offset > 204.0
    best = solve(g, budget, method="ilp", search="milp")
    assert best.status is SolveStatus.OPTIMAL and best.objective == 206
    assert np.all(rows @ sf.encode(best.schedule) <= rhs + 1e-9)


def test_cover_separation_without_knapsack_rows_and_bad_arguments():
    from remat_core.formulation.cuts import cover_inequalities

    sf = build_milp(linear_graph(6), 4, "strong")        # equal sizes: no knapsack rows, nothing to separate
    assert "knapsack" not in sf.row_families or sf.row_families["knapsack"] == 0
    rows, rhs, viol = cover_inequalities(sf, np.full(sf.n_cols, 0.5))
    assert rows.shape == (0, sf.n_cols) and len(rhs) == len(viol) == 0
    with pytest.raises(ValueError, match="max_cuts"):
        cover_inequalities(sf, np.zeros(sf.n_cols), max_cuts=0)
    with pytest.raises(ValueError, match="`x`"):
        cover_inequalities(sf, np.zeros(3))
    with pytest.raises(ValueError, match="strong"):
        cover_inequalities(build_milp(linear_graph(3), 4, "paper"), np.zeros(1))


def test_cover_separation_reads_each_programs_own_capacities():
    """The knapsack rows are kept per program: after one program's separation, the same program at another
    budget (``with_budget``, which shares the matrix) separates with its own capacities, exactly as a fresh
    build does; and a point that is integral on a row's values gives no row there."""
    from remat_core.formulation.cuts import cover_inequalities

    g = random_training_graph(10, 2, seed=4)
    sf = build_milp(g, 54)
    lp = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, np.zeros(sf.n_cols))
    first = cover_inequalities(sf, lp.x)
    assert first[0].shape[0] > 0
    for budget in (50, 60):
        moved = sf.with_budget(budget)
        fresh = build_milp(g, budget)
        a, b = cover_inequalities(moved, lp.x), cover_inequalities(fresh, lp.x)
        assert (a[0] != b[0]).nnz == 0 and np.array_equal(a[1], b[1]) and np.allclose(a[2], b[2]), budget
    other = cover_inequalities(sf.with_budget(50), lp.x)   # the capacities matter for this point
    assert other[0].shape != first[0].shape or not np.array_equal(other[1], first[1])
    schedule = solve(g, 54, method="ilp").schedule
    assert cover_inequalities(sf, sf.encode(schedule))[0].shape[0] == 0
