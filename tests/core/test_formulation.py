"""The MILP in standard form: shapes, exact memory accounting, encode/decode, canonical schedules."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import dags, valid_schedules

from remat_core import Schedule, UnknownMethodError, optimal_r_given_s, simulate
from remat_core.formulation import (
    STRONG_OPTIONS, available_formulations, build_milp, build_strong, canonical_schedule, exact_memory,
)
from remat_core.zoo import linear_graph, random_training_graph

FORMULATIONS = available_formulations()


def _row_ok(sf, x, tol=1e-7):
    ax = sf.A @ x
    scale = 1.0 + np.abs(ax)
    return bool(np.all(ax >= sf.row_lo - tol * scale) and np.all(ax <= sf.row_hi + tol * scale)
                and np.all(x >= sf.col_lo - tol) and np.all(x <= sf.col_hi + tol))


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_standard_form_arrays(formulation):
    g = random_training_graph(3, seed=2)
    sf = build_milp(g, 40, formulation)
    assert isinstance(sf.A, sp.csr_array) and sf.A.shape == (sf.n_rows, sf.n_cols)
    for a in (sf.c, sf.col_lo, sf.col_hi, sf.integrality):
        assert a.shape == (sf.n_cols,)
    assert sf.row_lo.shape == sf.row_hi.shape == (sf.n_rows,)
    assert sf.integrality.dtype == np.uint8 and set(np.unique(sf.integrality)) <= {0, 1}
    assert np.all(sf.row_lo <= sf.row_hi) and np.all(sf.col_lo <= sf.col_hi)
    assert np.isfinite(sf.A.data).all() and np.isfinite(sf.c).all()
    size = sf.size()
    assert size["rows"] == sf.n_rows and size["nonzeros"] == sf.A.nnz and sum(size["row_families"].values()) == sf.n_rows
    assert sf.relax().integrality.sum() == 0 and sf.integrality.sum() > 0


def test_strong_is_smaller_than_paper():
    g = linear_graph(8)
    paper, strong = build_milp(g, 4, "paper"), build_milp(g, 4, "strong")
    assert strong.n_cols < paper.n_cols / 2
    assert strong.integrality.sum() < paper.integrality.sum() / 2


def test_memory_is_scaled_to_small_coefficients():
    g = linear_graph(3, memory_bytes=2**30, fixed_bytes=2**32)
    sf = build_milp(g, 2**32 + 5 * 2**30)
    assert sf.memory_unit == 2**30
    assert np.abs(sf.A.data).max() <= 10


def test_unknown_names_are_errors():
    with pytest.raises(UnknownMethodError, match="strong"):
        build_milp(linear_graph(2), 4, "nope")
    with pytest.raises(ValueError, match="disable"):
        build_strong(linear_graph(2), 4, disable=("nope",))
    with pytest.raises(ValueError, match="memory_rows"):
        build_strong(linear_graph(2), 4, memory_rows="nope")


@settings(max_examples=25)
@given(data=st.data())
def test_exact_memory_is_the_simulators(data):
    """U[t, k] + fixed + workspace equals the simulator's memory at every computation."""
    g = data.draw(dags(max_nodes=7))
    sched = data.draw(valid_schedules(g))
    R, S = sched.dense()
    U = exact_memory(g, R, S)
    sim = simulate(g, sched)
    got = U[sim.step_stage, sim.step_node] + g.fixed_bytes + g.workspace_bytes[sim.step_node]
    np.testing.assert_array_equal(got, sim.step_memory_bytes)


@settings(max_examples=25)
@given(data=st.data())
def test_canonical_schedule_never_costs_or_needs_more(data):
    g = data.draw(dags(max_nodes=7))
    sched = data.draw(valid_schedules(g))
    R, S = canonical_schedule(g, sched.S)
    canon = Schedule(R, S)
    a, b = simulate(g, sched), simulate(g, canon)
    assert b.total_cost <= a.total_cost + 1e-9
    assert b.peak_memory_bytes <= a.peak_memory_bytes
    # canonical: R is the minimal R of its S, and canonicalization is idempotent
    assert canon == optimal_r_given_s(g, S)
    R2, S2 = canonical_schedule(g, S)
    assert np.array_equal(S2, S) and np.array_equal(R2, R)


@pytest.mark.parametrize("formulation", FORMULATIONS)
@settings(max_examples=20)
@given(data=st.data())
def test_encoded_schedule_is_feasible_exactly_when_it_fits(formulation, data):
    """The formulation's memory rows are the simulator's accounting, step for step.

    For the strong formulation the schedule is made canonical first (its rows admit only
    canonical schedules); the canonical form fits whenever the original does.
    """
    g = data.draw(dags(max_nodes=6))
    sched = data.draw(valid_schedules(g, extra=formulation == "paper"))
    if formulation == "strong":
        sched = Schedule(*canonical_schedule(g, sched.S))
    peak = simulate(g, sched).peak_memory_bytes
    delta = data.draw(st.integers(-2, 2))
    budget = max(peak + delta, 1)
    sf = build_milp(g, budget, formulation)
    x = sf.encode(sched)
    assert _row_ok(sf, x) == (peak <= budget)
    assert sf.decode(x) == sched
    if peak <= budget:
        assert sf.c @ x + sf.objective_offset == pytest.approx(sched.cost(g))


@pytest.mark.parametrize("disabled", STRONG_OPTIONS)
def test_every_strong_switch_keeps_the_checkpoint_all_schedule_feasible(disabled):
    g = random_training_graph(3, seed=5)
    sched = Schedule.checkpoint_all(g)
    peak = simulate(g, sched).peak_memory_bytes
    sf = build_strong(g, peak, disable=(disabled,))
    assert _row_ok(sf, sf.encode(sched))
    sf = build_strong(g, peak - 1, disable=(disabled,))
    assert not _row_ok(sf, sf.encode(sched))


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_a_shared_memory_unit_leaves_only_the_bounds_budget_dependent(formulation):
    g = random_training_graph(3, seed=2)
    full = build_milp(g, 40, formulation)
    low = build_milp(g, 31, formulation, memory_unit=full.memory_unit)
    own = build_milp(g, 31, formulation)
    assert low.memory_unit == full.memory_unit
    assert (low.A != full.A).nnz == 0 and np.array_equal(low.c, full.c)
    assert not (np.array_equal(low.row_hi, full.row_hi) and np.array_equal(low.col_hi, full.col_hi))
    # the same program as the one built with its own unit: every schedule fits both or neither
    for S in (np.tril(np.ones((g.n, g.n), dtype=bool), -1), np.eye(g.n, k=-1, dtype=bool)):
        R, S = canonical_schedule(g, S)
        sched = Schedule(R, S)
        assert _row_ok(low, low.encode(sched)) == _row_ok(own, own.encode(sched))
    assert build_milp(g, 31, formulation, memory_unit=np.int64(full.memory_unit)).memory_unit == full.memory_unit
    for bad in (0, True, float("nan")):
        with pytest.raises(ValueError, match="`memory_unit`"):
            build_milp(g, 31, formulation, memory_unit=bad)


@settings(max_examples=30)
@given(data=st.data())
def test_knapsack_rows_are_the_memory_when_the_frontier_value_is_computed(data):
    """Each knapsack row, plus its constant, is a canonical schedule's memory at stage t's compute instant.

    At that instant exactly the inputs of t, t itself and the values kept into stage t + 1 are
    resident, so the row's left side is that memory less the constant part, for every schedule.
    """
    g = data.draw(dags(min_nodes=4, max_nodes=9))
    sched = Schedule(*canonical_schedule(g, data.draw(valid_schedules(g, extra=False)).S))
    sim = simulate(g, sched)
    sf = build_strong(g, sim.peak_memory_bytes)
    off = build_strong(g, sim.peak_memory_bytes, disable=("knapsack",))
    rows = np.arange(off.n_rows, sf.n_rows)        # the knapsack family comes after the others
    assert sf.size()["row_families"].get("knapsack", 0) == len(rows)
    x = sf.encode(sched)
    assert _row_ok(sf, x)
    lhs = (sf.A @ x)[rows] * sf.memory_unit
    kept_cols = sf.A.tocsr()[rows]
    assert np.all(np.isin(kept_cols.indices, sf.s_col))     # over S columns only
    step = {(int(t), int(k)): int(b) for t, k, b in zip(sim.step_stage, sim.step_node, sim.step_memory_bytes)}
    inputs = [set() for _ in range(g.n)]
    for i, k in g.edges:
        inputs[int(k)].add(int(i))
    stage_of_row = sf.s_t[np.searchsorted(sf.s_col, kept_cols.indices[kept_cols.indptr[:-1]])] - 1
    for r, t in enumerate(stage_of_row):
        const = g.fixed_bytes + g.memory_bytes[t] + g.workspace_bytes[t] + sum(int(g.memory_bytes[i]) for i in inputs[t])
        assert lhs[r] + const == pytest.approx(step[(t, t)])
        assert sf.row_hi[rows[r]] * sf.memory_unit + const == pytest.approx(sim.peak_memory_bytes)


def test_knapsack_rows_only_where_sizes_differ_and_leave_the_lp_bound():
    from remat_core.solvers.backends import solve_arrays

    assert build_strong(linear_graph(8), 4).size()["row_families"].get("knapsack", 0) == 0
    g = random_training_graph(8, 2, seed=4)
    on, off = build_strong(g, 52), build_strong(g, 52, disable=("knapsack",))
    assert on.size()["row_families"]["knapsack"] > 0
    bounds = []
    for sf in (on, off):
        lp = sf.relax()
        out = solve_arrays("highs", lp.c, lp.A, lp.row_lo, lp.row_hi, lp.col_lo, lp.col_hi, lp.integrality)
        bounds.append(out.objective)
    # implied by the strong LP (through its FREE columns): only the MILP's cut generation gains
    assert bounds[0] == pytest.approx(bounds[1], rel=1e-7)


def _with_workspace(g, every: int, fixed_bytes: int = 0):
    return g.replace(workspace_bytes=(np.arange(g.n) % every == 0).astype(np.int64) * 3, fixed_bytes=fixed_bytes)


@pytest.mark.parametrize("make", [
    lambda: random_training_graph(5, 2, seed=5),
    lambda: _with_workspace(random_training_graph(10, 2, seed=3), 4, fixed_bytes=3),
    lambda: _with_workspace(linear_graph(6), 1),
])
def test_cumulative_memory_rows_match_their_definition(make):
    """The strong formulation's memory rows (assembled with index arithmetic) against the definition written
    out row by row: for stage t and each node k it may compute (k = t last), the kept values S[t, .], the values
    R[t, j <= k] computed so far (k's workspace added to R[t, k]) minus those FREE[t, i, j] freed after a user
    j < k, at most the budget less the fixed bytes (less m_t + ws_t in the row of t itself)."""
    graph = make()
    budget = graph.min_budget_lower_bound_bytes() + 5
    sf = build_milp(graph, budget, "strong", memory_rows="cumulative")
    unit = sf.memory_unit
    m, ws = graph.memory_bytes / unit, graph.workspace_bytes / unit
    cap = (budget - graph.fixed_bytes) / unit
    S = {(t, i): c for t, i, c in zip(sf.s_t, sf.s_i, sf.s_col)}
    R = {(t, i): c for t, i, c in zip(sf.r_t, sf.r_i, sf.r_col)}
    F = list(zip(sf.f_t, sf.f_i, sf.f_k, sf.f_col))
    expected, his = [], []
    for t in range(graph.n):
        for k in sorted({i for (tt, i) in R if tt == t} | {t}):
            row = {}
            for (tt, i), c in S.items():
                if tt == t:
                    row[c] = m[i]
            for (tt, j), c in R.items():
                if tt == t and j <= k:
                    row[c] = m[j] + (ws[k] if j == k else 0.0)
            for ft, fi, fj, c in F:
                if ft == t and fj < k:
                    row[c] = -m[fi]
            expected.append(row)
            his.append(cap - (m[t] + ws[t] if k == t else 0.0))
    families = list(sf.row_families)
    first = sum(sf.row_families[f] for f in families[:families.index("memory")])
    assert sf.row_families["memory"] == len(expected)
    block = sf.A.tocsr()[first:first + len(expected)]
    for r, row in enumerate(expected):
        got = {int(c): float(v) for c, v in zip(block.indices[block.indptr[r]:block.indptr[r + 1]],
                                                block.data[block.indptr[r]:block.indptr[r + 1]])}
        want = {c: v for c, v in row.items() if v != 0}
        assert got.keys() == want.keys(), r
        assert all(got[c] == pytest.approx(want[c]) for c in want), r
    np.testing.assert_allclose(sf.row_hi[first:first + len(expected)], his)
    assert np.all(np.isneginf(sf.row_lo[first:first + len(expected)]))


@pytest.mark.parametrize("memory_rows", ["cumulative", "recurrence"])
def test_with_budget_equals_a_new_build(memory_rows):
    """Re-budgeting changes bounds only and gives exactly the program a new build in the same unit gives
    (workspace and fixed bytes included); where a build would differ in shape it declines."""
    g = random_training_graph(10, 2, seed=3)
    g = g.replace(workspace_bytes=(np.arange(g.n) % 3 == 0).astype(np.int64), fixed_bytes=2)
    lo = g.min_budget_lower_bound_bytes()
    base = build_milp(g, lo + 30, "strong", memory_rows=memory_rows)
    for budget in (lo, lo + 7, lo + 30, lo + 200):
        ref = build_milp(g, budget, "strong", memory_rows=memory_rows, memory_unit=base.memory_unit)
        got = base.with_budget(budget)
        assert got.budget_bytes == budget and got.A is base.A and got.c is base.c
        assert (got.A != ref.A).nnz == 0
        for name in ("row_lo", "row_hi", "col_lo", "col_hi", "integrality"):
            np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)
    assert len(base.budget_rows) > 0
    # the base program is untouched
    np.testing.assert_array_equal(base.row_hi, build_milp(g, lo + 30, "strong", memory_rows=memory_rows).row_hi)
    # below the fixed bytes a build adds an infeasible row: declined, on either side
    assert base.with_budget(1) is None
    assert build_milp(g, 1, "strong", memory_unit=base.memory_unit).with_budget(lo) is None
    # the paper formulation and a program with rows added record no budget rows
    assert build_milp(g, lo + 30, "paper").with_budget(lo) is None
    from remat_core.formulation.cuts import with_rows, without_family

    extra = with_rows(base, sp.csr_array(np.ones((1, base.n_cols))), np.zeros(1), np.full(1, np.inf), "extra")
    assert extra.with_budget(lo) is None
    # removing a family renumbers the budget rows
    fewer = without_family(base, "one_copy")
    ref = without_family(build_milp(g, lo + 7, "strong", memory_rows=memory_rows, memory_unit=base.memory_unit),
                         "one_copy")
    np.testing.assert_array_equal(fewer.with_budget(lo + 7).row_hi, ref.row_hi)
