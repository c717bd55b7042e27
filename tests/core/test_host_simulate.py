"""The host-tier simulator: a hand-computed example with overlapping copies, no copies = replay, bad plans."""

import math

import numpy as np
import pytest

from remat_core import Graph, Node, Schedule, make_plan, replay, simulate
from remat_core.host import HostPlan, Offload, Prefetch, Wait, cost_per_second, simulate_host, validate_bandwidth
from remat_core.host.plan import host_plan_from_execution_plan
from remat_core.plan import Compute, Free, InvalidPlanError
from remat_core.zoo import random_training_graph


def _hand_graph():
    # a -> b -> c, and d reads c and a (a is idle from b to d: the value worth offloading)
    return Graph([Node("a", 2.0, 8), Node("b", 3.0, 4, deps=("a",)), Node("c", 1.0, 4, deps=("b",)),
                  Node("d", 2.0, 2, deps=("c", "a"), is_backward=True)], meta={"cost_unit": "s"})


def _hand_plan():
    return HostPlan([
        Compute(0, 0, (), 0),      # a: 0-2 s, device 8
        Offload(0, 0),             # a's copy: 2-6 s (8 B at 2 B/s), overlapping b
        Compute(1, 1, (0,), 1),    # b: 2-5 s, device 12
        Offload(1, 1),             # b's copy queues behind a's: 6-8 s
        Free(0, 0),                # waits for a's copy: stall 1 s (5 -> 6), device 4
        Compute(2, 2, (1,), 2),    # c: 6-7 s while b's copy runs (a read does not wait for a copy out), device 8
        Free(1, 1),                # waits for b's copy: stall 1 s (7 -> 8), device 4
        Prefetch(0, 0, 3),         # a back: 8-12 s, allocated now: device 12
        Compute(3, 4, (3, 2), 3),  # d (deps in graph order: a, c) waits for a: stall 4 s, runs 12-14 s, device 14
        Free(2, 2), Free(3, 0), Free(4, 3),
    ], 4)


def test_hand_example_with_overlapping_copies():
    sim = simulate_host(_hand_graph(), _hand_plan(), host_bandwidth=2.0)
    assert sim.compute_cost == 8.0
    assert sim.time == 14.0
    assert sim.stall == 6.0
    assert sim.peak_device_bytes == 14
    assert sim.step_memory_bytes.tolist() == [8, 12, 8, 14]
    assert sim.step_start.tolist() == [0.0, 2.0, 6.0, 12.0]
    # host: a from 2 s, b from 5 s to the end of its copy (8 s; never read back), a until its prefetch ends
    assert sim.peak_host_bytes == 12
    assert sim.copies == [("offload", 0, 2.0, 6.0), ("offload", 1, 6.0, 8.0), ("prefetch", 0, 8.0, 12.0)]
    assert sim.copied_bytes == 20
    assert sim.host_timeline == [(2.0, 8), (5.0, 12), (8.0, 8), (12.0, 0)]


def test_timeline_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    from remat_core.host.timeline import plot_host_timeline

    path = tmp_path / "timeline.png"
    plot_host_timeline(_hand_graph(), _hand_plan(), 2.0, str(path))
    assert path.stat().st_size > 1000


def test_faster_link_hides_the_copies():
    # at 8 B/s: a's copy 2-3 s and b's 5-5.5 s end before their frees; a's prefetch 7-8 s: d waits 1 s
    sim = simulate_host(_hand_graph(), _hand_plan(), host_bandwidth=8.0)
    assert (sim.time, sim.stall, sim.peak_device_bytes) == (9.0, 1.0, 14)
    free = simulate_host(_hand_graph(), _hand_plan(), host_bandwidth=math.inf)
    assert (free.time, free.stall) == (8.0, 0.0)


def test_wait_statement_blocks_the_compute_stream():
    stmts = list(_hand_plan().statements)
    stmts.insert(8, Wait(3))   # explicit wait before d: same time, the stall moves to the wait
    sim = simulate_host(_hand_graph(), HostPlan(stmts, 4), host_bandwidth=2.0)
    assert (sim.time, sim.stall) == (14.0, 6.0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("hoist", [False, True])
def test_without_copies_it_is_the_replay(seed, hoist):
    g = random_training_graph(5, seed=seed)
    sched = Schedule.checkpoint_all(g)
    plan = make_plan(g, sched, hoist=hoist)
    sim = simulate_host(g, host_plan_from_execution_plan(plan))   # no bandwidth needed without copies
    rep = replay(g, plan)
    assert sim.peak_device_bytes == rep.peak_memory_bytes
    assert np.array_equal(sim.step_memory_bytes, rep.step_memory_bytes)
    assert sim.time == pytest.approx(rep.total_cost) and sim.stall == 0 and sim.peak_host_bytes == 0
    if not hoist:
        assert sim.peak_device_bytes == simulate(g, sched).peak_memory_bytes


def test_bad_plans_name_the_statement():
    g = _hand_graph()
    stmts = list(_hand_plan().statements)
    with pytest.raises(InvalidPlanError, match="statement 7 prefetches node 0 from host slot 5"):
        simulate_host(g, HostPlan(stmts[:7] + [Prefetch(0, 5, 3)] + stmts[8:], 4), host_bandwidth=2.0)
    with pytest.raises(InvalidPlanError, match="frees register 0, which is not live"):
        simulate_host(g, HostPlan(stmts[:5] + [Free(0, 0)] + stmts[5:], 4), host_bandwidth=2.0)
    with pytest.raises(InvalidPlanError, match="still live"):
        simulate_host(g, HostPlan(stmts[:-1], 4), host_bandwidth=2.0)
    with pytest.raises(ValueError, match="`host_bandwidth`"):
        simulate_host(g, _hand_plan())


def test_plan_round_trips_through_json():
    plan = _hand_plan()
    again = HostPlan.from_dict(plan.to_dict())
    assert again.statements == plan.statements
    with pytest.raises(InvalidPlanError):
        HostPlan.from_dict({"num_nodes": 1, "statements": [["jump", 1]]})


def test_bandwidth_and_cost_unit_validation():
    assert validate_bandwidth("16GB/s") == 16e9
    assert validate_bandwidth("1GiB") == 2.0 ** 30
    assert validate_bandwidth(math.inf) == math.inf and validate_bandwidth("inf") == math.inf
    assert validate_bandwidth(0) is None and validate_bandwidth(None) is None
    for bad in (-1, float("nan"), "fast"):
        with pytest.raises(ValueError, match="`host_bandwidth`"):
            validate_bandwidth(bad)
    with pytest.raises(TypeError, match="`host_bandwidth`"):
        validate_bandwidth(True)
    g = _hand_graph()
    assert cost_per_second(g) == 1.0
    assert cost_per_second(g.replace(meta={"cost_unit": "ns"})) == 1e9
    with pytest.raises(ValueError, match="`cost_per_s`"):
        cost_per_second(g.replace(meta={"cost_unit": "node"}))
    assert cost_per_second(g.replace(meta={"cost_unit": "node"}), cost_per_s=5.0) == 5.0


def test_the_host_tier_loads_no_framework_or_solver_library():
    import subprocess
    import sys

    code = ("import sys, remat_core.host; print(sorted(m for m in ('torch', 'tensorflow', 'scipy.optimize', "
            "'highspy', 'numba', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_partial_offload_by_hand():
    """A chunk of ``a`` goes to the host while ``c`` runs: device 10 bytes there instead of 12."""
    from remat_core.host import DropPart, OffloadPart, RestorePart

    g = Graph([Node("a", 2.0, 4), Node("b", 2.0, 4, deps=("a",)), Node("c", 2.0, 4, deps=("b",)),
               Node("d", 2.0, 1, deps=("a", "c"), is_backward=True)], meta={"cost_unit": "s"})
    stmts = [
        Compute(0, 0, (), 0),        # a: 0-2 s, device 4
        OffloadPart(0, 0, 2),        # 2 of a's 4 bytes: 2-3 s at 2 B/s, host 2
        Compute(1, 1, (0,), 1),      # b: 2-4 s, device 8
        DropPart(0),                 # the copy has ended: device 6
        Compute(2, 2, (1,), 2),      # c: 4-6 s, device 10 (whole a: 12)
        Free(1, 1),                  # device 6
        RestorePart(0),              # the chunk back: 6-7 s, device 8
        Compute(3, 3, (0, 2), 3),    # d waits for it (stall 1 s): 7-9 s, device 9
        Free(0, 0), Free(2, 2), Free(3, 3)]
    sim = simulate_host(g, HostPlan(stmts, 4), host_bandwidth=2.0)
    assert (sim.time, sim.stall, sim.peak_device_bytes, sim.peak_host_bytes, sim.copied_bytes) == (9.0, 1.0, 10, 2, 4)
    assert sim.step_memory_bytes.tolist() == [4, 8, 10, 9]
    plan = HostPlan(stmts, 4)
    assert HostPlan.from_dict(plan.to_dict()).statements == plan.statements
    assert (plan.num_offloads, plan.num_partial_offloads, plan.num_prefetches) == (1, 1, 1)
    bad = [
        (stmts[:3] + [Compute(2, 2, (1,), 2), DropPart(0), Compute(3, 3, (0, 2), 3)], "part of which"),   # read
        ([Compute(0, 0, (), 0), OffloadPart(0, 0, 4)], "chunk of 1 to 3"),                                   # whole
        ([Compute(0, 0, (), 0), DropPart(0)], "no chunk"),
        ([Compute(0, 0, (), 0), RestorePart(0)], "no chunk off"),
    ]
    for stmts_bad, match in bad:
        with pytest.raises(InvalidPlanError, match=match):
            simulate_host(g, HostPlan(stmts_bad, 4), host_bandwidth=2.0)
