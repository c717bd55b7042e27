"""Chen, Griewank and the generalized baselines."""

import math
from functools import lru_cache

import numpy as np
import pytest

from remat_core import Graph, Schedule, SolveStatus, available_methods, simulate, solve
from remat_core.simulate import checkpoint_all_peak_bytes
from remat_core.solvers.baselines import (
    articulation_points, checkpoint_candidates, chen_schedule, chen_sqrtn_schedule, generalized_schedule,
    trade_off_curve,
)
from remat_core.solvers.griewank import binomial_forward_steps, griewank_schedule, revolve, revolve_forward_steps
from remat_core.zoo import linear_graph, random_layered_dag, random_training_graph, training_graph

CHAIN_METHODS = ["chen-sqrtn", "chen-greedy", "griewank-logn"]
DAG_METHODS = ["linearized-sqrtn", "linearized-greedy", "ap-sqrtn", "ap-greedy"]
FAMILIES = CHAIN_METHODS + DAG_METHODS


def hetero_chain(n, seed):
    rng = np.random.default_rng(seed)
    return linear_graph(n, cost=rng.integers(1, 6, 2 * n + 1), memory_bytes=rng.integers(1, 9, 2 * n + 1),
                        fixed_bytes=int(rng.integers(0, 5)))


def chain_training(n, seed):
    rng = np.random.default_rng(seed)
    fwd = Graph.from_arrays([[]] + [[i] for i in range(n - 1)], cost=rng.integers(1, 6, n),
                            memory_bytes=rng.integers(1, 9, n))
    return training_graph(fwd)


# ---------------------------------------------------------------- sqrt(n)
@pytest.mark.parametrize("n", [4, 9, 16, 25, 49, 100, 144])
def test_sqrtn_memory_is_o_sqrt_n_with_one_extra_forward(n):
    g = linear_graph(n)
    sim = simulate(g, chen_sqrtn_schedule(g))
    # forward n + loss + backward n, plus at most one more forward pass
    assert sim.total_cost <= 2 * n + 1 + n
    assert sim.compute_counts[:n].max() <= 2
    assert sim.peak_memory_bytes <= 2 * math.isqrt(n) + 3
    assert checkpoint_all_peak_bytes(g) == n + 2  # what it is compared with


# --------------------------------------------------- chains == generalizations
@pytest.mark.parametrize("graph", [linear_graph(1), linear_graph(7), linear_graph(16), hetero_chain(12, 0),
                                   hetero_chain(9, 3), chain_training(8, 1)])
@pytest.mark.parametrize("family", ["sqrtn", "greedy"])
def test_generalized_equal_chen_on_chains(graph, family):
    chen = trade_off_curve(graph, f"chen-{family}", pareto=False)
    lin = trade_off_curve(graph, f"linearized-{family}", pareto=False)
    ap = trade_off_curve(graph, f"ap-{family}", pareto=False)
    assert len(chen) == len(lin) == len(ap) >= 1
    for a, b, c in zip(chen, lin, ap):
        Ra, Sa = a.schedule.dense()
        for other in (b, c):
            Rb, Sb = other.schedule.dense()
            assert np.array_equal(Ra, Rb) and np.array_equal(Sa, Sb)
    n = (graph.n - 1) // 2
    assert checkpoint_candidates(graph, "ap").tolist() == list(range(n))


def test_chen_schedule_explicit_segments():
    g = linear_graph(6)
    sim = simulate(g, chen_schedule(g, [2]))
    # segment f0, f1 recomputed once; f3..f5 form the kept last segment
    assert sim.compute_counts.tolist() == [2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert sim.total_cost == 15


def test_articulation_points():
    # 0 -> {1, 2} -> 3 -> 4 ; 4 is a cut vertex to the virtual sink, 0 to the virtual source
    g = Graph.from_arrays([[], [0], [0], [1, 2], [3]])
    assert articulation_points(g).tolist() == [0, 3, 4]
    g2 = Graph.from_arrays([[], [0], [1], [0, 2]])  # a skip 0 -> 3 around 1, 2
    assert articulation_points(g2).tolist() == [0, 3]


# ---------------------------------------------------------------- REVOLVE
@lru_cache(maxsize=None)
def brute_forward_steps(l, s):
    """The REVOLVE recurrence minimized over every split (independent of the closed form)."""
    if l == 1:
        return 0
    if s == 1:
        return l * (l - 1) // 2
    return min(m + brute_forward_steps(l - m, s - 1) + brute_forward_steps(m, s) for m in range(1, l))


@pytest.mark.parametrize("s", [1, 2, 3, 4, 6])
def test_revolve_matches_binomial_formula(s):
    for l in range(1, 60):
        acts = revolve(l, s)
        assert revolve_forward_steps(acts) == binomial_forward_steps(l, s) == brute_forward_steps(l, s)
        assert [a[1] for a in acts if a[0] == "adjoint"] == list(range(l - 1, -1, -1))
        assert sum(a[0] == "snapshot" for a in acts) <= l


def test_revolve_snapshot_count_never_exceeds_s():
    for l, s in [(20, 3), (35, 4), (10, 2)]:
        live, most = {0}, 1
        for a in revolve(l, s):
            if a[0] == "snapshot":
                live.add(a[1])
            elif a[0] == "release":
                live.discard(a[1])
            most = max(most, len(live))
        assert most <= s


def test_revolve_rejects_bad_arguments():
    with pytest.raises(ValueError, match="`s`"):
        revolve(5, 0)
    with pytest.raises(ValueError, match="`slots`"):
        griewank_schedule(linear_graph(3), -1)


@pytest.mark.parametrize("n", [1, 3, 8, 20])
def test_griewank_schedule_recomputation_is_binomial(n):
    g = linear_graph(n)
    for slots in range(0, n + 1):
        sim = simulate(g, griewank_schedule(g, slots))
        assert int(sim.compute_counts[: n + 1].sum()) == binomial_forward_steps(n + 1, slots + 1) + 1
        assert (sim.compute_counts[n + 1:] == 1).all()


# ------------------------------------------------ every schedule is valid
@pytest.mark.parametrize("seed", range(4))
def test_dag_baselines_pass_simulator_on_random_dags(seed):
    graphs = [random_training_graph(6, max_width=3, seed=seed), random_layered_dag(8, max_width=3, seed=seed)]
    for g in graphs:
        base = checkpoint_all_peak_bytes(g)
        for method in DAG_METHODS:
            pts = trade_off_curve(g, method, pareto=False)
            for p in pts:
                sim = simulate(g, p.schedule)  # raises on an invalid schedule
                assert sim.peak_memory_bytes == p.peak_memory_bytes and sim.total_cost == p.cost
                assert sim.total_cost >= g.cost.sum() - 1e-9
            costs = []
            for frac in (1.0, 0.8, 0.6, 0.4):
                res = solve(g, max(1, int(base * frac)), method=method)
                assert res.status in (SolveStatus.FEASIBLE, SolveStatus.INFEASIBLE)
                if res.success:
                    assert res.peak_memory_bytes <= res.budget_bytes
                    costs.append(res.objective)
                else:
                    assert res.stats["method_min_budget_bytes"] > res.budget_bytes
            assert costs == sorted(costs)  # less memory never costs less


@pytest.mark.parametrize("graph", [linear_graph(10), hetero_chain(10, 1), chain_training(7, 2)])
def test_chain_baselines_budget_search(graph):
    base = checkpoint_all_peak_bytes(graph)
    for method in CHAIN_METHODS:
        res = solve(graph, base, method=method)
        assert res.success and res.stats["recomputations"] == 0  # nothing recomputed at the no-remat peak
        prev = res.objective
        for b in range(base - 1, 0, -1):
            res = solve(graph, b, method=method)
            if not res.success:
                low = res.stats["method_min_budget_bytes"]
                assert low > b
                assert solve(graph, low, method=method).success
                break
            assert res.objective >= prev - 1e-9
            prev = res.objective


@pytest.mark.parametrize("method", FAMILIES)
def test_pareto_curve_is_monotone(method):
    g = hetero_chain(14, 5)
    pts = trade_off_curve(g, method)
    assert len(pts) >= 2
    peaks = [p.peak_memory_bytes for p in pts]
    costs = [p.cost for p in pts]
    assert peaks == sorted(set(peaks)) and costs == sorted(costs, reverse=True) and len(set(costs)) == len(costs)


def test_forward_only_graph_windowed_mode_saves_memory():
    g = random_layered_dag(30, max_width=2, seed=4, random_costs=False)
    base = checkpoint_all_peak_bytes(g)
    pts = trade_off_curve(g, "linearized-sqrtn")
    assert min(p.peak_memory_bytes for p in pts) < base


def test_generalized_rejects_backward_checkpoint():
    g = linear_graph(3)
    with pytest.raises(ValueError, match="`checkpoints`"):
        generalized_schedule(g, [5])


def test_trade_off_curve_unknown_method():
    with pytest.raises(ValueError, match="`method`"):
        trade_off_curve(linear_graph(3), "nope")


# ------------------------------------------------ the MILP is never worse
@pytest.mark.skipif("ilp" not in available_methods(), reason="the `ilp` method is not registered yet")
@pytest.mark.parametrize("graph", [linear_graph(6), hetero_chain(5, 7), random_training_graph(4, max_width=2, seed=3)])
def test_milp_never_worse_than_baselines(graph):
    from remat_core.chain import is_chain

    methods = FAMILIES + ["rotor"] if is_chain(graph) else DAG_METHODS
    for method in methods:
        if method == "rotor":
            budgets = [checkpoint_all_peak_bytes(graph) - 1]
        else:
            budgets = sorted({p.peak_memory_bytes for p in trade_off_curve(graph, method)})[:3]
        for b in budgets:
            base = solve(graph, b, method=method)
            if not base.success:
                continue
            milp = solve(graph, base.peak_memory_bytes, method="ilp", time_limit_s=20)
            assert milp.success, (method, b, milp.message)
            assert milp.objective <= base.objective + 1e-6, (method, b)
