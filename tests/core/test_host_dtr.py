"""DTR with swapping: within budget, swaps instead of recomputing when copies are cheap, recomputes otherwise."""

import math

import pytest

from remat_core import checkpoint_all_peak_bytes, solve
from remat_core.host import dtr_swap_plan, simulate_host
from remat_core.units import min_budget_bytes
from remat_core.zoo import linear_graph, random_training_graph


@pytest.mark.parametrize("seed", range(8))
def test_every_plan_fits(seed):
    g = random_training_graph(6, seed=seed).replace(meta={"cost_unit": "s"})
    top, floor = checkpoint_all_peak_bytes(g), min_budget_bytes(g)[0]
    found = 0
    for share in (1.0, 0.7, 0.4, 0.1, 0.0):
        budget = floor + int(share * (top - floor))
        for swap in (True, False):
            plan = dtr_swap_plan(g, budget, 2.0, swap=swap)
            if plan is not None:
                found += 1
                sim = simulate_host(g, plan, 2.0)
                assert sim.peak_device_bytes <= budget
                if not swap:
                    assert plan.num_offloads == 0
    assert found >= 4


def test_swaps_when_copies_are_cheaper_than_recomputation():
    g = linear_graph(10).replace(meta={"cost_unit": "s"})
    fast = simulate_host(g, dtr_swap_plan(g, 7, math.inf), math.inf)
    slow_plan = dtr_swap_plan(g, 7, 1e-3)   # a 1-byte copy takes 1000 s: recompute instead
    slow = simulate_host(g, slow_plan, 1e-3)
    assert fast.recompute_count == 0 and fast.time == float(g.cost.sum()) and fast.peak_device_bytes <= 7
    assert slow_plan.num_offloads == 0 and slow.recompute_count > 0 and slow.peak_device_bytes <= 7


def test_as_a_method_and_bad_input():
    g = linear_graph(10).replace(meta={"cost_unit": "s"})
    res = solve(g, 6, method="dtr-swap", host_bandwidth=4.0)
    assert res.success and res.stats["plan"] == "dtr-swap" and res.peak_memory_bytes <= 6
    assert dtr_swap_plan(g, 2, 4.0) is None   # below what any plan needs
    with pytest.raises(ValueError, match="`host_bandwidth`"):
        dtr_swap_plan(g, 6, None)
