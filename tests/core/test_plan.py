import heapq

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

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


# ------------------------------------------------------------ plans of operation sequences (issue 41)
def _dtr_sequence(g, data):
    """A DTR run as it ran (simrd's semantics) on ``g`` at a drawn budget in a drawn topological order, or None."""
    from remat_core.simulate import checkpoint_all_peak_bytes
    from remat_core.solvers.dtr import dtr_sequence_run

    lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
    budget = data.draw(st.integers(min(max(1, lo), hi), hi), label="budget")
    order = None
    if not g.is_backward.any():   # a drawn topological order: the ready node of smallest drawn priority next
        prio = data.draw(st.permutations(range(g.n)), label="priorities")
        waiting = [len(set(d)) for d in g.deps]
        ready = [(prio[k], k) for k in range(g.n) if waiting[k] == 0]
        order = []
        while ready:
            k = heapq.heappop(ready)[1]
            order.append(k)
            for j in sorted(set(g.users[k])):
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, (prio[j], j))
    run = dtr_sequence_run(g, budget, max_overhead=20, order=order)
    return (run["sequence"], budget) if run["ok"] else (None, budget)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_unhoisted_sequence_plan_replays_the_sequence_exactly(data):
    from remat_core.sequence import simulate_sequence

    g = data.draw(dags(max_nodes=12))
    seq, budget = _dtr_sequence(g, data)
    assume(seq is not None)
    sim = simulate_sequence(g, seq)
    plan = make_plan(g, seq, hoist=False)
    rep = replay(g, plan)
    assert rep.step_memory_bytes.tolist() == sim.step_memory_bytes.tolist()
    assert rep.peak_memory_bytes == sim.peak_memory_bytes <= budget
    assert rep.total_cost == pytest.approx(sim.total_cost)
    assert plan.compute_counts().tolist() == sim.compute_counts.tolist()
    assert [c.node for c in plan.computes()] == sim.step_node.tolist()
    hoisted = replay(g, make_plan(g, seq))
    assert (hoisted.step_memory_bytes <= sim.step_memory_bytes).all()
    # stage == node exactly on a node's first computation (what executors take outputs and RNG states from)
    seen = set()
    for c in plan.computes():
        assert (c.stage == c.node) == (c.node not in seen)
        seen.add(c.node)


@given(st.data())
def test_sequence_plan_equals_its_stage_form(data):
    from remat_core.sequence import from_schedule

    g = data.draw(dags(max_nodes=9))
    s = data.draw(valid_schedules(g))
    assert make_plan(g, from_schedule(g, s)).statements == make_plan(g, s).statements
    unhoisted = make_plan(g, from_schedule(g, s), hoist=False)
    assert replay(g, unhoisted).step_memory_bytes.tolist() == simulate(g, s).step_memory_bytes.tolist()
    assert [(c.node, c.stage) for c in unhoisted.computes()] == [(c.node, c.stage) for c in
                                                                 make_plan(g, s, hoist=False).computes()]


def _sequence_only_result(g, fraction):
    """A ``dtr`` result that succeeded only as it runs (no stage schedule): the first of 60 budgets from
    ``fraction`` down to the graph's lower bound where the stage run fails and the run as it runs succeeds."""
    from remat_core import solve
    from remat_core.units import resolve_budget

    lo, hi = g.min_budget_lower_bound_bytes(), resolve_budget(g, fraction)
    for j in range(60, -1, -1):
        res = solve(g, lo + (hi - lo) * j // 60, method="dtr", order="given", find_min_budget=False)
        if res.success and res.schedule is None:
            return res
    return None


def test_a_sequence_only_result_plans_its_sequence_within_budget():
    from remat_core.sequence import simulate_sequence
    from remat_core.zoo import zoo_graph

    g = zoo_graph("torch_unet_b1")
    res = _sequence_only_result(g, 0.5)
    assert res is not None, "no budget where only the run as it runs succeeds"
    plan = make_plan(g, res)
    rep = replay(g, plan)
    sim = simulate_sequence(g, res.sequence)
    assert rep.peak_memory_bytes <= sim.peak_memory_bytes == res.peak_memory_bytes <= res.budget_bytes
    assert replay(g, make_plan(g, res, hoist=False)).peak_memory_bytes == sim.peak_memory_bytes
    assert rep.total_cost == pytest.approx(res.objective)


def test_sequence_plans_refuse_backward_before_forward_and_bad_input():
    from remat_core import Graph, Node, RematError, RematResult, SolveStatus
    from remat_core.sequence import COMPUTE, FREE, OpSequence

    g = Graph([Node("x"), Node("y", deps=("x",)), Node("g", is_backward=True, deps=("x",))])
    ok = OpSequence([COMPUTE, COMPUTE, COMPUTE, FREE], [0, 1, 2, 0])
    assert [c.node for c in make_plan(g, ok).computes()] == [0, 1, 2]
    with pytest.raises(InvalidPlanError, match="backward node 2 .* before the first computation of forward node 1"):
        make_plan(g, OpSequence([COMPUTE, COMPUTE, COMPUTE], [0, 2, 1]))
    with pytest.raises(InvalidScheduleError, match="event 2 computes node 1"):
        make_plan(g, OpSequence([COMPUTE, FREE, COMPUTE], [0, 0, 1]))
    with pytest.raises(TypeError, match="`schedule`"):
        make_plan(g, [0, 1, 2])
    with pytest.raises(RematError, match="no schedule to plan: status is infeasible"):
        make_plan(g, RematResult(status=SolveStatus.INFEASIBLE, message="too small"))


@pytest.mark.parametrize("order", ["stages", "auto"])
def test_a_result_plans_the_run_its_objective_describes(order):
    """With a sequence and a schedule, the plan is the sequence's (the run ``objective`` and the peak describe);
    for the stage run alone that is the schedule's own plan."""
    from remat_core import solve
    from remat_core.sequence import simulate_sequence
    from remat_core.units import resolve_budget
    from remat_core.zoo import zoo_graph

    g = zoo_graph("torch_resnet50_b2")
    res = solve(g, resolve_budget(g, 0.2), method="dtr", order=order, find_min_budget=False)
    assert res.success and res.schedule is not None and res.sequence is not None
    if order == "auto":   # the stage run in the memory-aware order: 52.6e9 against the numbering's 79.8e9
        assert res.stats["run"] != "stages" and res.objective < res.stats["schedule_cost"]
    plan = make_plan(g, res)
    assert replay(g, plan).total_cost == pytest.approx(res.objective)
    assert replay(g, make_plan(g, res, hoist=False)).peak_memory_bytes == \
        simulate_sequence(g, res.sequence).peak_memory_bytes == res.peak_memory_bytes
    if order == "stages":
        assert plan.statements == make_plan(g, res.schedule).statements
