import numpy as np
import pytest
from hypothesis import given, strategies as st

from remat_core import (Compute, ExecutionPlan, Free, InvalidPlanError, InvalidScheduleError, Schedule, make_plan,
                        optimal_r_given_s, replay, simulate)
from remat_core.zoo import linear_graph
from strategies import dags, valid_schedules


@given(st.data())
def test_unhoisted_plan_replays_the_simulator_exactly(data):
    g = data.draw(dags(max_nodes=9))
    s = data.draw(valid_schedules(g))
    plan = make_plan(g, s, hoist=False)
    rep = replay(g, plan)
    sim = simulate(g, s)
    assert rep.step_memory_bytes.tolist() == sim.step_memory_bytes.tolist()
    assert rep.peak_memory_bytes == sim.peak_memory_bytes
    assert rep.total_cost == pytest.approx(sim.total_cost)
    assert plan.compute_counts().tolist() == sim.compute_counts.tolist()


@given(st.data())
def test_hoisted_plan_never_above_the_simulator(data):
    g = data.draw(dags(max_nodes=9))
    s = data.draw(valid_schedules(g))
    rep = replay(g, make_plan(g, s))
    sim = simulate(g, s)
    assert (rep.step_memory_bytes <= sim.step_memory_bytes).all()
    assert rep.peak_memory_bytes <= sim.peak_memory_bytes


def test_hoisting_frees_right_after_last_read():
    g = linear_graph(3)
    s = optimal_r_given_s(g, np.zeros((7, 7), bool))
    plan = make_plan(g, s)
    stmts = list(plan)
    for pos, st_ in enumerate(stmts):
        if isinstance(st_, Free):
            reads = [p for p, x in enumerate(stmts) if isinstance(x, Compute) and st_.register in x.inputs]
            produced = next(p for p, x in enumerate(stmts) if isinstance(x, Compute) and x.register == st_.register)
            last = max(reads, default=produced)
            # only frees separate the free from the last read
            assert all(isinstance(x, Free) for x in stmts[last + 1:pos])


def test_plan_inputs_follow_deps_and_to_dict():
    g = linear_graph(2)
    plan = make_plan(g, Schedule.checkpoint_all(g))
    assert isinstance(plan, ExecutionPlan) and plan.num_registers == 5
    d = plan.to_dict()
    assert d["statements"][0] == ["compute", 0, 0, [], 0]
    assert "computes" in repr(plan) and len(plan) == len(d["statements"])


def test_make_plan_rejects_invalid_schedule():
    g = linear_graph(1)
    bad = Schedule(np.eye(3, dtype=bool), np.zeros((3, 3), bool))
    with pytest.raises(InvalidScheduleError):
        make_plan(g, bad)


@pytest.mark.parametrize(
    "stmts, match",
    [
        ([Compute(1, 0, (5,), 0)], "does not hold live node 0"),
        ([Compute(0, 0, (), 0), Compute(0, 0, (), 0)], "a second time"),
        ([Compute(0, 0, (), 0), Free(0, 0), Free(0, 0)], "not live"),
        ([Compute(0, 0, (), 0)], "still live"),
        ([Compute(9, 0, (), 0)], "unknown node"),
        ([Compute(1, 0, (), 0)], "needs 1 inputs"),
        (["junk"], "not a Compute or Free"),
    ],
)
def test_replay_catches_broken_plans(stmts, match):
    g = linear_graph(1)
    with pytest.raises(InvalidPlanError, match=match):
        replay(g, ExecutionPlan(stmts, g.n, hoisted=False))
