"""Costs of any finite size: the MILP and the LP see scaled costs (remat_core.formulation.scaling)."""

import math

import pytest

from remat_core import solve
from remat_core.formulation.scaling import MAX_UNSCALED_COST, cost_scale, scaled_graph, unscale_result
from remat_core.schedule import RematResult, SolveStatus
from remat_core.zoo import linear_graph


@pytest.mark.parametrize("factor", [1e18, 1e300])
@pytest.mark.parametrize("method", ["ilp", "lp-rounding"])
def test_huge_costs_give_the_schedule_of_the_unscaled_graph(method, factor):
    # issue 36: costs of 1e18 or more stopped ilp and lp-rounding ("HiGHS failed: model status Unknown")
    g = linear_graph(6)
    big = g.replace(cost=g.cost * factor)
    small_res = solve(g, 5, method=method, time_limit_s=30)
    big_res = solve(big, 5, method=method, time_limit_s=30)
    assert small_res.success and big_res.success
    assert big_res.status == small_res.status
    assert big_res.objective == pytest.approx(small_res.objective * factor, rel=1e-9)
    assert big_res.lower_bound == pytest.approx(small_res.lower_bound * factor, rel=1e-6)
    assert big_res.lower_bound <= big_res.objective * (1 + 1e-9)
    assert big_res.stats["cost_scale"] == cost_scale(big) > 1


def test_ordinary_costs_are_not_scaled():
    g = linear_graph(6)
    assert cost_scale(g) == 1.0 and scaled_graph(g, 1.0) is g
    assert cost_scale(g.replace(cost=g.cost * MAX_UNSCALED_COST / g.cost.max())) == 1.0
    res = solve(g, 5, method="ilp")
    assert "cost_scale" not in res.stats


def test_the_scale_is_an_exact_power_of_two_and_unscaling_restores_the_units():
    g = linear_graph(4)
    big = g.replace(cost=g.cost * 3e20)
    s = cost_scale(big)
    assert math.log2(s).is_integer()
    assert (scaled_graph(big, s).cost * s == big.cost).all()   # exact both ways
    r = unscale_result(RematResult(status=SolveStatus.FEASIBLE, objective=2.0, lower_bound=1.5), s)
    assert (r.objective, r.lower_bound, r.stats["cost_scale"]) == (2.0 * s, 1.5 * s, s)
