"""POFO on chains: the dynamic program equals exhaustive search over keep / offload / recompute; nested POFO
(rotor's recursion inside the recomputed runs) equals exhaustive search over labellings and trees."""

import itertools
import math
import random

import pytest

from remat_core import Graph, GraphValidationError, Node, checkpoint_all_peak_bytes, make_plan, solve
from remat_core.chain import as_chain
from remat_core.host import host_plan_from_execution_plan, pofo_plan, pofo_solve, simulate_host
from remat_core.host.pofo import LEAF, pofo_nested_solve, pofo_units
from remat_core.zoo import linear_graph, random_training_graph


def _chain(n, seed, reads_input):
    """A chain training graph with ``n`` forward stages (``n + 1`` with the loss) and random sizes and costs."""
    rng = random.Random(seed)
    nodes = [Node(f"f{j}", cost=rng.randint(1, 5), memory_bytes=rng.randint(1, 6), workspace_bytes=rng.randint(0, 2),
                  deps=(f"f{j - 1}",) if j else ()) for j in range(n)]
    nodes.append(Node("loss", cost=1, memory_bytes=1, deps=(f"f{n - 1}",)))
    for j in range(n - 1, -1, -1):
        deps = ["loss" if j == n - 1 else f"b{j + 1}", f"f{j}"] + ([f"f{j - 1}"] if reads_input and j else [])
        nodes.append(Node(f"b{j}", cost=rng.randint(1, 8), memory_bytes=rng.randint(1, 6),
                          workspace_bytes=rng.randint(0, 2), is_backward=True, deps=tuple(deps)))
    return Graph(nodes, fixed_bytes=rng.randint(0, 3), meta={"cost_unit": "s"})


def _exhaustive(g, n, bw):
    """(peak, time, labels) of every labelling, each judged by the simulator."""
    out = []
    for labels in itertools.product(*([("K", "O", "R", "T")] * (n - 1) + [("K", "R")])):
        sim = simulate_host(g, pofo_plan(g, labels), host_bandwidth=bw)
        out.append((sim.peak_device_bytes, sim.time, labels))
    return out


CASES = [(n, seed, reads, bw) for n, seed, reads, bw in [
    (1, 0, False, 1.0), (2, 1, True, 0.5), (3, 2, False, 2.0), (4, 3, True, 1.0), (5, 4, False, 0.5),
    (6, 5, True, 2.0), (7, 6, False, 1.0), (8, 7, True, 1.0), (8, 8, False, 4.0), (5, 9, True, math.inf),
]]


@pytest.mark.parametrize("n,seed,reads_input,bw", CASES)
def test_dp_equals_exhaustive_search(n, seed, reads_input, bw):
    g = _chain(n, seed, reads_input)
    table = _exhaustive(g, n, bw)
    top = checkpoint_all_peak_bytes(g)
    optimal_with = set()
    for budget in range(g.fixed_bytes + 1, top + 2):
        best = min((t for peak, t, _ in table if peak <= budget), default=math.inf)
        labels, dp_time = pofo_solve(g, budget, bw, slot_bytes=1)
        assert dp_time == pytest.approx(best, abs=1e-9), (budget, labels)
        if labels is not None:
            sim = simulate_host(g, pofo_plan(g, labels), host_bandwidth=bw)
            assert sim.peak_device_bytes <= budget
            assert sim.time == pytest.approx(dp_time, abs=1e-9)
            optimal_with.update(labels)
    if n >= 4 and bw <= 1.0:
        assert {"O", "R"} <= optimal_with   # the cases exercise both offloading and recomputation


def test_coarse_slots_still_fit():
    g = _chain(8, 11, True)
    top = checkpoint_all_peak_bytes(g)
    for budget in range(g.fixed_bytes + 1, top + 1):
        labels, t = pofo_solve(g, budget, 1.0, mem_slots=4)
        exact = pofo_solve(g, budget, 1.0, slot_bytes=1)[1]
        if labels is not None:
            assert simulate_host(g, pofo_plan(g, labels), host_bandwidth=1.0).peak_device_bytes <= budget
            assert t >= exact - 1e-9   # coarser memory can only cost more


def test_infinite_bandwidth_never_recomputes_when_offloading_fits():
    g = _chain(7, 12, True)
    for budget in range(g.fixed_bytes + 1, checkpoint_all_peak_bytes(g) + 1):
        labels, t = pofo_solve(g, budget, math.inf, slot_bytes=1)
        no_remat = min((p for p, _, lab in _exhaustive_no_r(g, 7)), default=None)
        if no_remat is not None and no_remat <= budget:
            assert "R" not in labels and t == pytest.approx(float(g.cost.sum()))


def _exhaustive_no_r(g, n):
    for labels in itertools.product(*([("K", "O")] * (n - 1) + [("K",)])):
        yield simulate_host(g, pofo_plan(g, labels), host_bandwidth=math.inf).peak_device_bytes, None, labels


def test_units_and_bad_input():
    assert pofo_units(["R", "R", "R"]) == [("M", 0, 2, None)]
    assert pofo_units(["O", "R", "K"]) == [("M", 1, 1, 2), ("S", 0)]
    assert pofo_units(["R", "T", "R", "K"]) == [("M", 2, 2, 3), ("M", 0, 1, "T")]
    g = linear_graph(3)
    with pytest.raises(ValueError, match="`labels`"):
        pofo_plan(g, ["K", "K", "O"])
    with pytest.raises(ValueError, match="`labels`"):
        pofo_plan(g, ["K", "K", "T"])
    with pytest.raises(ValueError, match="`labels`"):
        pofo_plan(g, ["K", "X", "K"])
    with pytest.raises(GraphValidationError, match="pofo"):
        pofo_solve(random_training_graph(4, seed=0), 10 ** 6, 1e9)
    with pytest.raises(ValueError, match="`host_bandwidth`"):
        pofo_solve(g, 10, 0)

def _trees(s, e):
    """Every recursion tree of the stages s..e (see pofo_nested_solve)."""
    out = [LEAF]
    for i in range(s + 1, e + 1):
        lefts = _trees(s, i - 2) if i - 1 > s else [None]
        out += [("S", i, r, lft) for r in _trees(i, e) for lft in lefts]
        out += [("D", i, r, lft) for r in _trees(i, e) for lft in _trees(s, i - 1)]
    return out


def _exhaustive_nested(g, n, bw):
    """(peak, time) of every labelling with every tree of each of its runs, each judged by the simulator."""
    info = as_chain(g, "test")
    out = []
    for labels in itertools.product(*([("K", "O", "R", "T")] * (n - 1) + [("K", "R")])):
        runs = [u[1:3] for u in pofo_units(labels, info.reads_input) if u[0] == "M"]
        for choice in itertools.product(*[_trees(s, e) for s, e in runs]):
            trees = {s: t for (s, _), t in zip(runs, choice)}
            sim = simulate_host(g, pofo_plan(g, labels, trees), host_bandwidth=bw)
            out.append((sim.peak_device_bytes, sim.time))
    return out


NESTED_CASES = [(2, 1, True, 0.5), (3, 2, False, 2.0), (4, 3, True, 1.0), (5, 4, False, 0.5), (5, 13, True, 1e-6),
         (6, 5, False, 1e-6), (6, 14, True, 2.0)]


@pytest.mark.parametrize("n,seed,reads_input,bw", NESTED_CASES)
def test_nested_dp_equals_exhaustive_search(n, seed, reads_input, bw):
    g = _chain(n, seed, reads_input)
    table = _exhaustive_nested(g, n, bw)
    for budget in range(g.fixed_bytes + 1, checkpoint_all_peak_bytes(g) + 2):
        best = min((t for peak, t in table if peak <= budget), default=math.inf)
        labels, trees, t = pofo_nested_solve(g, budget, bw, slot_bytes=1)
        assert t == pytest.approx(best, abs=1e-9), budget
        single = pofo_solve(g, budget, bw, slot_bytes=1)[1]
        assert t <= single + 1e-9                    # never worse than single-level POFO
        if labels is not None:
            sim = simulate_host(g, pofo_plan(g, labels, trees), host_bandwidth=bw)
            assert sim.peak_device_bytes <= budget and sim.time == pytest.approx(t, abs=1e-9)


def test_nested_beats_single_level_and_rotor_on_a_linear_chain():
    """linear_graph(6) at 4 bytes with useless copies: single-level POFO can only offload (a copy of a byte takes
    1e9 s), rotor's plan takes 27, the nested plan 18 (a split of the first run); each judged by the simulator."""
    g = linear_graph(6).replace(meta={"cost_unit": "s"})
    labels, trees, t = pofo_nested_solve(g, 4, 1e-9, slot_bytes=1)
    assert t == 18.0 and trees and any(tree[0] == "S" for tree in trees.values())
    assert pofo_solve(g, 4, 1e-9, slot_bytes=1)[1] > 1e9
    rotor = solve(g, 4, method="rotor")
    sim = simulate_host(g, host_plan_from_execution_plan(make_plan(g, rotor.schedule, hoist=True)))
    assert sim.peak_device_bytes <= 4 and sim.time == 27.0


@pytest.mark.parametrize("seed,reads_input", [(21, False), (23, False), (26, False), (27, False),
                                               (22, True), (24, True), (25, True), (28, True)])
def test_nested_never_worse_than_rotor(seed, reads_input):
    """At every budget where rotor's plan fits (judged by the simulator), nested POFO fits and is at most as slow.
    With backward nodes that read their stage's input (seeds 22, 24, 25), rotor's smallest budgets need a stage
    input kept only for the stages above and then recomputed: the ``T`` label and the ``D`` split."""
    g = _chain(8, seed, reads_input)
    for budget in range(g.fixed_bytes + 1, checkpoint_all_peak_bytes(g) + 1):
        rotor = solve(g, budget, method="rotor")
        labels, trees, t = pofo_nested_solve(g, budget, 1.0, slot_bytes=1)
        if rotor.success:
            sim = simulate_host(g, host_plan_from_execution_plan(make_plan(g, rotor.schedule, hoist=True)))
            if sim.peak_device_bytes <= budget:
                assert labels is not None and t <= sim.time + 1e-9, budget
                ours = simulate_host(g, pofo_plan(g, labels, trees), host_bandwidth=1.0)
                assert ours.peak_device_bytes <= budget and ours.time == pytest.approx(t, abs=1e-9)


def test_plan_rejects_bad_trees():
    g = linear_graph(4).replace(meta={"cost_unit": "s"})
    with pytest.raises(ValueError, match="split"):
        pofo_plan(g, ["R", "R", "R", "K"], {0: ("S", 0, LEAF, None)})
    with pytest.raises(ValueError, match="`trees`"):
        pofo_plan(g, ["R", "R", "R", "K"], {1: LEAF})


def test_pofo_nested_method_and_joint_search():
    g = linear_graph(6).replace(meta={"cost_unit": "s"})
    res = solve(g, 4, method="pofo-nested", host_bandwidth=1e-9)
    assert res.success and res.objective == 18.0 and res.stats["plan"].startswith("nested pofo")
    joint = solve(g, 4, method="rotor", host_bandwidth=1e-9)   # the joint search runs it on chains
    assert joint.success and joint.objective <= 18.0 and joint.peak_memory_bytes <= 4


def _exhaustive_partial(g, n, bw, partial):
    """(peak, time) of every labelling with whole and partial offloads, each judged by the simulator."""
    out = []
    for labels in itertools.product(*([("K", "O", "R", "T", "P")] * (n - 1) + [("K", "R")])):
        if any(lab == "P" and g.memory_bytes[j] < 2 for j, lab in enumerate(labels)):
            continue   # a value of 1 byte has no chunk
        sim = simulate_host(g, pofo_plan(g, labels, partial=partial), host_bandwidth=bw)
        out.append((sim.peak_device_bytes, sim.time))
    return out


@pytest.mark.parametrize("n,seed,reads_input,bw,partial", [(4, 3, True, 1.0, 0.5), (5, 4, False, 0.5, 0.5),
                                                           (5, 9, True, 1.0, 0.3), (6, 5, True, 0.5, 0.5)])
def test_partial_dp_equals_exhaustive_search(n, seed, reads_input, bw, partial):
    """With ``partial``, a value may also be offloaded in part ("P": a chunk goes to the host, the rest stays);
    the DP equals exhaustive search over that space, and it is faster than whole offloading at some budgets."""
    g = _chain(n, seed, reads_input)
    table = _exhaustive_partial(g, n, bw, partial)
    faster = 0
    for budget in range(g.fixed_bytes + 1, checkpoint_all_peak_bytes(g) + 2):
        best = min((t for peak, t in table if peak <= budget), default=math.inf)
        labels, t = pofo_solve(g, budget, bw, slot_bytes=1, partial=partial)
        assert t == pytest.approx(best, abs=1e-9), budget
        whole = pofo_solve(g, budget, bw, slot_bytes=1)[1]
        assert t <= whole + 1e-9
        faster += t < whole - 1e-9
        if labels is not None:
            sim = simulate_host(g, pofo_plan(g, labels, partial=partial), host_bandwidth=bw)
            assert sim.peak_device_bytes <= budget and sim.time == pytest.approx(t, abs=1e-9)
        nested = pofo_nested_solve(g, budget, bw, slot_bytes=1, partial=partial)
        assert nested[2] <= t + 1e-9
        if nested[0] is not None:
            sim = simulate_host(g, pofo_plan(g, nested[0], nested[1], partial=partial), host_bandwidth=bw)
            assert sim.peak_device_bytes <= budget and sim.time == pytest.approx(nested[2], abs=1e-9)
    assert faster > 0


def test_partial_bad_input():
    g = _chain(3, 2, False)
    with pytest.raises(ValueError, match="`partial`"):
        pofo_solve(g, 100, 1.0, partial=1.5)
    with pytest.raises(ValueError, match="`labels`"):
        pofo_plan(g, ["P", "K", "K"])   # no fraction given
    res = solve(g, checkpoint_all_peak_bytes(g) - 1, method="pofo", host_bandwidth=1.0, partial=0.5)
    assert res.success and res.peak_memory_bytes < checkpoint_all_peak_bytes(g)


@pytest.mark.parametrize("n,seed,reads_input,bw", [(4, 3, True, 1.0), (5, 13, True, 0.5)])
def test_nested_partial_dp_equals_exhaustive_search(n, seed, reads_input, bw):
    """Nested POFO with chunks: every labelling (K/O/R/T/P) with every tree of each of its runs."""
    g = _chain(n, seed, reads_input)
    info = as_chain(g, "test")
    table = []
    for labels in itertools.product(*([("K", "O", "R", "T", "P")] * (n - 1) + [("K", "R")])):
        if any(lab == "P" and g.memory_bytes[j] < 2 for j, lab in enumerate(labels)):
            continue
        runs = [u[1:3] for u in pofo_units(labels, info.reads_input) if u[0] == "M"]
        for choice in itertools.product(*[_trees(s, e) for s, e in runs]):
            plan = pofo_plan(g, labels, {s: t for (s, _), t in zip(runs, choice)}, partial=0.5)
            sim = simulate_host(g, plan, host_bandwidth=bw)
            table.append((sim.peak_device_bytes, sim.time))
    for budget in range(g.fixed_bytes + 1, checkpoint_all_peak_bytes(g) + 2):
        best = min((t for peak, t in table if peak <= budget), default=math.inf)
        assert pofo_nested_solve(g, budget, bw, slot_bytes=1, partial=0.5)[2] == pytest.approx(best, abs=1e-9), budget
