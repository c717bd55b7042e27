"""The rotor dynamic program: exact in its own model, converted schedules pass our simulator."""

import heapq
import math

import numpy as np
import pytest

from remat_core import Graph, GraphValidationError, available_methods, simulate, solve
from remat_core.simulate import checkpoint_all_peak_bytes
from remat_core.solvers.rotor import RotorChain, rotor_chain, rotor_schedule, rotor_table
from remat_core.zoo import linear_graph, random_training_graph, training_graph


def exhaustive(chain: RotorChain, M: int) -> float:
    """Cheapest operation sequence in rotor's model (Dijkstra over every sequence; no DP structure assumed).

    Items: ("a", j) plain activation, ("A", j) abar_j, ("d", j) gradient (("d", L) is the loss).
    F_j needs a_{j-1} or abar_{j-1} (nothing for j = 0); F_all^j's input must stay resident
    until B_j; B_j needs delta_{j+1}, abar_j and a_{j-1}; any value may be freed at any time
    otherwise. At every computation, resident + new value + workspace <= M.
    """
    L = chain.length
    x, xbar, d = chain.x.tolist(), chain.xbar.tolist(), chain.d.tolist()
    fw, bw, wf, wb = chain.fw.tolist(), chain.bw.tolist(), chain.wf.tolist(), chain.wb.tolist()

    def size(it):
        k, j = it
        return {"a": x, "A": xbar, "d": d}[k][j]

    def has_act(res, j):
        return j < 0 or ("a", j) in res or ("A", j) in res

    def legal(res):
        return all(has_act(res, j - 1) for (k, j) in res if k == "A")

    start = (frozenset(), L - 1)
    dist = {start: 0.0}
    heap = [(0.0, 0, start)]
    tie = 0
    while heap:
        c, _, state = heapq.heappop(heap)
        if c > dist.get(state, math.inf):
            continue
        res, nb = state
        if nb < 0:
            return c
        cur = sum(size(i) for i in res)
        succ = []
        for j in range(L + 1):
            if not has_act(res, j - 1):
                continue
            if j == L:
                if nb == L - 1 and ("d", L) not in res and cur + x[L] + wf[L] <= M:
                    succ.append((fw[L], res | {("d", L)}, nb))
                continue
            for kind, sz in (("a", x[j]), ("A", xbar[j])):
                if (kind, j) not in res and cur + sz + wf[j] <= M:
                    succ.append((fw[j], res | {(kind, j)}, nb))
        j = nb
        if ("d", j + 1) in res and ("A", j) in res and has_act(res, j - 1) and cur + d[j] + wb[j] <= M:
            succ.append((bw[j], res | {("d", j)}, nb - 1))
        for it in res:
            r2 = res - {it}
            if legal(r2):
                succ.append((0.0, r2, nb))
        for dc, r2, nb2 in succ:
            s2 = (frozenset(r2), nb2)
            if c + dc < dist.get(s2, math.inf):
                dist[s2] = c + dc
                tie += 1
                heapq.heappush(heap, (c + dc, tie, s2))
    return math.inf


def random_chain(L, rng):
    x = rng.integers(1, 4, L + 1)
    return RotorChain(
        fw=rng.integers(1, 5, L + 1).astype(float), bw=np.append(rng.integers(1, 5, L), 0.0),
        x=x, xbar=x + rng.integers(0, 3, L + 1), d=np.append(rng.integers(1, 4, L), [x[L], 0]),
        wf=rng.integers(0, 2, L + 1), wb=np.append(rng.integers(0, 2, L), 0),
    )


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    L = [1, 2, 3, 3][seed % 4]
    chain = random_chain(L, rng)
    top = int(chain.xbar.sum() + chain.d.sum() + chain.x.sum() + 2)
    opt, _ = rotor_table(chain, top)
    curve = opt[(0, L)]
    for M in range(0, top + 1, 1 if L < 3 else 2):
        assert curve[M] == exhaustive(chain, M), (seed, M)
    assert math.isfinite(curve[top])


def test_dp_equals_exhaustive_on_graph_chains():
    fwd = Graph.from_arrays([[], [0], [1]], cost=[2, 1, 3], memory_bytes=[2, 3, 1])
    for g in (linear_graph(3, cost=[1, 2, 3, 1, 2, 2, 1], memory_bytes=[3, 1, 2, 1, 2, 2, 1]), training_graph(fwd)):
        chain = rotor_chain(g)
        opt, _ = rotor_table(chain, 16)
        for M in range(17):
            assert opt[(0, chain.length)][M] == exhaustive(chain, M)


@pytest.mark.parametrize("g", [linear_graph(8), linear_graph(6, cost=np.arange(1, 14), memory_bytes=np.arange(13, 0, -1)),
                               training_graph(Graph.from_arrays([[], [0], [1], [2], [3]], cost=[3, 1, 4, 1, 5],
                                                                memory_bytes=[2, 7, 1, 8, 2]))])
def test_converted_schedule_matches_dp_and_fits(g):
    base = checkpoint_all_peak_bytes(g)
    for limit in range(1, base + 1):
        sched, dp_cost = rotor_schedule(g, limit - g.fixed_bytes if limit > g.fixed_bytes else 1)
        if sched is None:
            continue
        sim = simulate(g, sched)
        assert sim.total_cost <= dp_cost + 1e-9  # the optimal R never computes more than rotor's plan
        assert sim.peak_memory_bytes <= max(limit, g.fixed_bytes + 1)


def test_solve_rotor_budget_search_and_infeasible():
    g = linear_graph(10, memory_bytes=np.arange(1, 22) * 1000, fixed_bytes=500)
    base = checkpoint_all_peak_bytes(g)
    prev = None
    for frac in (1.0, 0.8, 0.6, 0.5, 0.4):
        res = solve(g, int(base * frac), method="rotor", mem_slots=50)
        if res.success:
            assert res.peak_memory_bytes <= res.budget_bytes
            assert prev is None or res.objective >= prev
            prev = res.objective
    assert solve(g, base, method="rotor").stats["recomputations"] == 0
    res = solve(g, 600, method="rotor")
    assert res.status.value == "infeasible" and res.stats["method_min_budget_bytes"] > 600
    assert solve(g, res.stats["method_min_budget_bytes"], method="rotor", mem_slots=500).success
    with pytest.raises(ValueError, match="`mem_slots`"):
        solve(g, base, method="rotor", mem_slots=0)


def test_rotor_rejects_dags():
    with pytest.raises(GraphValidationError, match="rotor"):
        solve(random_training_graph(4, seed=0), 10**6, method="rotor")


@pytest.mark.skipif("ilp" not in available_methods(), reason="the `ilp` method is not registered yet")
@pytest.mark.parametrize("n", [4, 6])
def test_rotor_vs_milp_on_chains(n):
    """The MILP is optimal for our model: never worse than rotor at rotor's own peak (see docs/baselines.rst)."""
    g = linear_graph(n)
    base = checkpoint_all_peak_bytes(g)
    for b in range(base, 2, -1):
        r = solve(g, b, method="rotor")
        if not r.success:
            break
        m = solve(g, r.peak_memory_bytes, method="ilp", time_limit_s=20)
        assert m.success and m.objective <= r.objective + 1e-6
