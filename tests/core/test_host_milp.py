"""The offloading MILP (small graphs): decoded plans fit, free copies replace recomputation, slow ones do not."""

import math

import pytest

pytest.importorskip("scipy.optimize")

from remat_core import checkpoint_all_peak_bytes, solve  # noqa: E402
from remat_core.host import simulate_host  # noqa: E402
from remat_core.host.milp import offload_milp_plan  # noqa: E402
from remat_core.zoo import linear_graph, random_training_graph  # noqa: E402


@pytest.mark.parametrize("bw", [0.5, 4.0, math.inf])
def test_decoded_plans_fit(bw):
    g = random_training_graph(3, seed=2).replace(meta={"cost_unit": "s"})
    top = checkpoint_all_peak_bytes(g)
    found = 0
    for frac in (1.0, 0.95, 0.9, 0.6):
        budget = int(frac * top)
        plan, info = offload_milp_plan(g, budget, bw, time_limit_s=20)
        if plan is not None:
            found += 1
            sim = simulate_host(g, plan, bw)
            assert sim.peak_device_bytes <= budget
            assert sim.compute_cost <= info["objective"] + 1e-6   # the MILP counts at least the compute
    assert found >= 3


def test_free_copies_replace_recomputation_and_slow_ones_do_not():
    g = linear_graph(6).replace(meta={"cost_unit": "s"})
    plan, _ = offload_milp_plan(g, 4, math.inf)
    sim = simulate_host(g, plan, math.inf)
    assert sim.recompute_count == 0 and sim.time == float(g.cost.sum()) and sim.peak_device_bytes <= 4
    slow, info = offload_milp_plan(g, 5, 1e-3)   # a byte takes 1000 s: recompute instead
    assert slow.num_offloads == 0
    assert info["objective"] == pytest.approx(solve(g, 5, method="ilp").objective)


def test_as_a_method():
    g = linear_graph(6).replace(meta={"cost_unit": "s"})
    res = solve(g, 4, method="offload-milp", host_bandwidth=4.0, time_limit_s=20)
    assert res.success and res.stats["plan"] == "offload-milp" and res.peak_memory_bytes <= 4
    with pytest.raises(ValueError, match="`host_bandwidth`"):
        offload_milp_plan(g, 4, None)


def test_lp_rounding_fits_and_is_bounded_by_the_relaxation():
    from remat_core.host.milp import offload_lp_rounding_plan

    g = linear_graph(6).replace(meta={"cost_unit": "s"})
    found = 0
    for budget, bw in ((8, 0.5), (7, 0.5), (6, 0.5), (8, 4.0), (7, 4.0)):   # checkpoint-all needs 8
        plan, info = offload_lp_rounding_plan(g, budget, bw, time_limit_s=20)
        milp_plan, milp_info = offload_milp_plan(g, budget, bw, time_limit_s=20)
        assert info["lp_bound"] <= milp_info["objective"] + 1e-6   # the relaxation bounds the MILP
        if plan is not None:
            found += 1
            sim = simulate_host(g, plan, bw)
            assert sim.peak_device_bytes <= budget and sim.time == info["time"]
    assert found >= 4
    res = solve(g, 7, method="offload-lp-rounding", host_bandwidth=4.0)
    assert res.success and res.peak_memory_bytes <= 7


def test_without_copies_it_is_checkmates_milp():
    """Bandwidth 0: the same optimum as the `ilp` method (both exact accounting), down to the smallest budgets."""
    from remat_core.units import min_budget_bytes

    chain = linear_graph(6).replace(meta={"cost_unit": "s"})
    dag = random_training_graph(3, seed=4).replace(meta={"cost_unit": "s"})
    floor, top = min_budget_bytes(chain)[0], checkpoint_all_peak_bytes(chain)
    # the DAG's smaller budgets (56 bytes: 149) take HiGHS 20 s and more on a loaded box: two fast ones
    for g, budgets in ((chain, (floor - 1, floor, floor + 1, (floor + top) // 2, top)), (dag, (62, 74))):
        for budget in budgets:
            ilp = solve(g, budget, method="ilp")
            plan, info = offload_milp_plan(g, budget, 0, time_limit_s=60)
            assert (plan is None) == (not ilp.success), budget
            if plan is not None:
                assert plan.num_offloads == 0
                assert info["objective"] == pytest.approx(ilp.objective)
                sim = simulate_host(g, plan)
                assert sim.time == pytest.approx(ilp.objective) and sim.peak_device_bytes <= budget
