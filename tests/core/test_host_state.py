"""The training state on the host (remat_core.host.state): parameters, gradients and the input batch."""

import math

import pytest

from remat_core import Graph, Node, SolveStatus, solve
from remat_core.host import (DropState, FetchState, HostPlan, SaveState, StateLayout, host_result_from_dict,
                             simulate_host, solve_offload, state_floor_bytes, zoo_state_layout)
from remat_core.plan import Compute, Free, InvalidPlanError
from remat_core.zoo import linear_graph, zoo_graph


def _abc():
    """a -> b -> c; 6 fixed bytes: a 2-byte weight read by a and c, its 2-byte gradient written by c, 2 bytes
    resident. A copy of 2 bytes takes 1 s at 2 B/s."""
    g = Graph([Node("a", 2.0, 4), Node("b", 2.0, 4, deps=("a",)), Node("c", 2.0, 2, deps=("b",))],
              fixed_bytes=6, meta={"cost_unit": "s"})
    lay = StateLayout(g, [("wA", 2, "param", (0, 2), "dA"), ("dA", 2, "grad", (2,))])
    return g, lay


def test_simulator_hand_computed_state_moves():
    g, lay = _abc()
    plan = HostPlan([DropState(0), DropState(1),       # between steps: the weight on the host, no gradient yet
                     FetchState(0),                    # t 0-1; the first computation waits for it
                     Compute(0, 0, (), 0),             # t 1-3: 2 resident + 2 weight + 4 = 8
                     DropState(0),                     # no copy: the host copy is current
                     Compute(1, 1, (0,), 1),           # t 3-5: 2 + 4 + 4 = 10
                     Free(0, 0),
                     FetchState(0),                    # t 5-6
                     Compute(2, 2, (1,), 2),           # waits to 6, t 6-8: 2 + 2 weight + 4 + 2 output + 2 gradient
                     SaveState(1),                     # t 8-9
                     Free(1, 1), Free(2, 2),
                     DropState(1)], g.n, layout=lay)   # waits for the save: t 9
    sim = simulate_host(g, plan, host_bandwidth=2.0)
    assert sim.step_memory_bytes.tolist() == [8, 10, 12]
    assert sim.peak_device_bytes == 12            # without moving the state: 6 + 4 + 4 = 14 at b
    assert (sim.time, sim.compute_cost, sim.stall) == (9.0, 6.0, 3.0)
    assert sim.peak_host_bytes == 4 and sim.copied_bytes == 6
    assert [c[0] for c in sim.copies] == ["fetch", "fetch", "save"]


def test_simulator_state_rules():
    g, lay = _abc()
    body = [Compute(0, 0, (), 0), Compute(1, 1, (0,), 1), Compute(2, 2, (1,), 2)]
    frees = [Free(0, 0), Free(1, 1), Free(2, 2)]
    # the weight stays on the device between steps, dropped and fetched within it; the gradient stays: valid
    ok = HostPlan(body[:1] + [DropState(0)] + body[1:2] + [FetchState(0)] + body[2:] + frees, g.n, layout=lay)
    assert simulate_host(g, ok, host_bandwidth=2.0).step_memory_bytes.tolist() == [10, 12, 16]
    bad = {
        "reads state block": [DropState(0)] + body + frees,
        "with writes not saved": [DropState(0), DropState(1), FetchState(0)] + body + frees + [DropState(1)],
        "allocated by its writer": [DropState(1), FetchState(1)] + body + frees,
        "only a gradient": [Compute(0, 0, (), 0), SaveState(0)] + body[1:] + frees,
        "off it at the end": body + [DropState(0)] + frees,
        # on the host between steps but the gradient stays on the device: the optimizer would update it there
        "the optimizer updates": [DropState(0), FetchState(0)] + body + frees,
        # the gradient saved but the weight on the device between steps
        "is saved": body + [SaveState(1)] + frees,
    }
    for message, stmts in bad.items():
        with pytest.raises(InvalidPlanError, match=message):
            simulate_host(g, HostPlan(stmts, g.n, layout=lay), host_bandwidth=2.0)
    with pytest.raises(InvalidPlanError, match="layout"):
        HostPlan([DropState(0)] + body + frees, g.n)


def test_layout_validation():
    g, _ = _abc()
    with pytest.raises(ValueError, match="more than the graph's fixed_bytes"):
        StateLayout(g, [("w", 7, "param", (0,))])
    with pytest.raises(ValueError, match="kind"):
        StateLayout(g, [("w", 1, "weights", (0,))])
    with pytest.raises(ValueError, match=r"nodes must be in \[0, 3\)"):
        StateLayout(g, [("w", 1, "param", (3,))])
    with pytest.raises(ValueError, match="not a gradient block"):
        StateLayout(g, [("w", 1, "param", (0,), "dw")])
    with pytest.raises(ValueError, match="not a zoo model graph"):
        zoo_state_layout(linear_graph(3))


def test_zoo_layout_is_the_fixed_bytes():
    for name in ("vgg19", "unet", "mobilenet", "resnet50"):
        g = zoo_graph(name, batch_size=3)
        lay = zoo_state_layout(g)
        assert lay.movable_bytes == g.fixed_bytes and lay.resident_bytes == 0
        params = [b for b in lay.blocks if b.kind == "param"]
        assert all(lay.blocks[lay.grad_index[lay.blocks.index(b)]].nbytes == b.nbytes for b in params)
        assert sum(b.nbytes for b in lay.blocks if b.kind == "input") == 4 * 3 * g.meta["batch_size"] * {
            "vgg19": 224 * 224, "unet": 416 * 608, "mobilenet": 224 * 224, "resnet50": 224 * 224}[name]
        assert state_floor_bytes(g, lay) < g.min_budget_lower_bound_bytes()


def test_state_lifts_the_floor():
    """Between the state floor and the remat floor only the host tier with the state layout fits; at the state
    floor it still fits; one byte below nothing can."""
    g = zoo_graph("vgg19", batch_size=1)
    lay = zoo_state_layout(g)
    floor, remat_floor = state_floor_bytes(g, lay), g.min_budget_lower_bound_bytes()
    assert floor < remat_floor
    mid = (floor + remat_floor) // 2
    assert solve(g, mid, method="checkpoint-all").status is SolveStatus.INFEASIBLE
    assert not solve_offload(g, mid, method="checkpoint-all", host_bandwidth=16e9).success
    for budget in (mid, floor):
        res = solve_offload(g, budget, method="checkpoint-all", host_bandwidth=16e9, state_layout=lay)
        assert res.success and res.peak_memory_bytes <= budget
        assert res.stats["state_blocks_moved"] > 0 and res.host_plan.layout is lay
        sim = simulate_host(g, res.host_plan, 16e9)           # the result is the simulator's
        assert (sim.peak_device_bytes, sim.time) == (res.peak_memory_bytes, res.objective)
        assert res.peak_host_bytes > 0
    below = solve_offload(g, floor - 1, method="checkpoint-all", host_bandwidth=16e9, state_layout=lay)
    assert below.status is SolveStatus.INFEASIBLE
    # free copies: nothing waits
    free = solve_offload(g, floor, method="checkpoint-all", host_bandwidth=math.inf, state_layout=lay)
    assert free.success and free.simulation.stall == 0.0 and free.stats["recomputations"] == 0


@pytest.mark.parametrize("name", ["unet", pytest.param("mobilenet", marks=pytest.mark.slow),
                                  pytest.param("resnet50", marks=pytest.mark.slow)])
def test_state_plans_fit_between_the_floors(name):
    g = zoo_graph(name, batch_size=2)
    lay = zoo_state_layout(g)
    floor, remat_floor = state_floor_bytes(g, lay), g.min_budget_lower_bound_bytes()
    for budget in (floor + (remat_floor - floor) // 3, remat_floor):
        res = solve_offload(g, budget, method="checkpoint-all", host_bandwidth=16e9, state_layout=lay)
        assert res.success and res.peak_memory_bytes <= budget


def test_state_plan_round_trip():
    g = zoo_graph("vgg19", batch_size=1)
    lay = zoo_state_layout(g)
    budget = state_floor_bytes(g, lay) + 10 ** 6
    res = solve_offload(g, budget, method="checkpoint-all", host_bandwidth=16e9, state_layout=lay)
    data = res.to_dict(include_schedule=True)
    back = host_result_from_dict(g, data)
    assert back.host_plan.statements == res.host_plan.statements and back.host_plan.layout == lay
    assert back.objective == res.objective and back.peak_memory_bytes == res.peak_memory_bytes
    with pytest.raises(InvalidPlanError, match="pass the graph"):
        HostPlan.from_dict(data["host_plan"])


def test_state_layout_argument_checked():
    g = zoo_graph("vgg19", batch_size=1)
    other = zoo_state_layout(zoo_graph("vgg19", batch_size=2))
    with pytest.raises(TypeError, match="`state_layout`"):
        solve_offload(g, 10 ** 10, host_bandwidth=16e9, state_layout=other)
    with pytest.raises(ValueError, match="schedule_required"):
        solve_offload(g, 10 ** 10, host_bandwidth=16e9, state_layout=zoo_state_layout(g), schedule_required=True)
