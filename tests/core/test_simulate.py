import numpy as np
import pytest
from hypothesis import given, strategies as st

from oracle import oracle_simulate
from remat_core import Graph, InvalidScheduleError, Schedule, optimal_r_given_s, simulate
from remat_core.zoo import linear_graph
from strategies import dags, raw_schedules, training_graphs, valid_schedules


def test_hand_computed_linear_checkpoint_all():
    # linear_graph(2): f0 f1 loss g1 g0, all unit; checkpoint-all keeps f0 until g0 and f1 until g1
    g = linear_graph(2)
    sim = simulate(g, Schedule.checkpoint_all(g))
    # stage 0: f0 -> 1; stage 1: [f0] + f1 -> 2; stage 2: [f0 f1] + loss -> 3;
    # stage 3: [f0 f1 loss] + g1 -> 4; stage 4: [f0 g1] + g0 -> 3
    assert sim.step_memory_bytes.tolist() == [1, 2, 3, 4, 3]
    assert (sim.peak_memory_bytes, sim.peak_stage, sim.peak_node) == (4, 3, 3)
    assert sim.total_cost == 5.0 and sim.recompute_count == 0


def test_fixed_bytes_workspace_and_frees_within_stage():
    # a -> b -> c, everything recomputed in the last stage; workspace only on b
    g = Graph.from_arrays([[], [0], [1]], memory_bytes=[10, 20, 30], workspace_bytes=[0, 5, 0], fixed_bytes=100)
    S = np.zeros((3, 3), bool)
    sched = optimal_r_given_s(g, S)
    sim = simulate(g, sched)
    # stage 2: a (110), b (130 + 5 ws = 135, then free a -> 120), c (150)
    assert sim.step_memory_bytes[-3:].tolist() == [110, 135, 150]
    assert sim.peak_memory_bytes == 150 and (sim.peak_stage, sim.peak_node) == (2, 2)
    assert sim.total_cost == 6.0 and sim.compute_counts.tolist() == [3, 2, 1]
    assert sim.fits(150) and not sim.fits(149)


def test_value_kept_into_next_stage_is_not_freed():
    g = Graph.from_arrays([[], [0], [0, 1]], memory_bytes=[1, 2, 4])
    R = np.eye(3, dtype=bool)
    S = np.zeros((3, 3), bool)
    S[1, 0] = S[2, 0] = S[2, 1] = True
    sim = simulate(g, Schedule(R, S))
    assert sim.step_memory_bytes.tolist() == [1, 3, 7]


def test_recompute_while_resident_is_counted_twice():
    g = Graph.from_arrays([[], [0]], memory_bytes=[5, 1])
    R = np.array([[1, 0], [1, 1]], bool)
    S = np.array([[0, 0], [1, 0]], bool)
    sim = simulate(g, Schedule(R, S))
    assert sim.step_memory_bytes.tolist() == [5, 10, 11]


@pytest.mark.parametrize(
    "R, S, match, stage, node",
    [
        # stage 1 computes node 1 without node 0 (neither kept nor recomputed)
        ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[0, 0, 0], [0, 0, 0], [0, 1, 0]],
         "stage 1 computes node 1", 1, 1),
        # S[2, 0] = 1 but node 0 was neither computed nor kept in stage 1
            ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[0, 0, 0], [0, 0, 0], [1, 1, 0]],
         r"S\[2, 0\] = 1 keeps node 0", 2, 0),
    ],
)
def test_invalid_schedules_name_stage_and_node(R, S, match, stage, node):
    g = Graph.from_arrays([[], [0], [1]]) if stage == 1 else Graph.from_arrays([[], [], [0, 1]])
    with pytest.raises(InvalidScheduleError, match=match) as info:
        simulate(g, Schedule(np.array(R), np.array(S)))
    assert (info.value.stage, info.value.node) == (stage, node)


def test_bad_arguments():
    g = linear_graph(1)
    with pytest.raises(TypeError, match="`graph`"):
        simulate("g", Schedule.checkpoint_all(g))
    with pytest.raises(TypeError, match="`schedule`"):
        simulate(g, "s")
    with pytest.raises(InvalidScheduleError, match="3 nodes"):
        simulate(g, Schedule(np.eye(2), np.zeros((2, 2))))


@given(st.data())
def test_simulator_matches_closed_form_oracle(data):
    g = data.draw(dags(max_nodes=9))
    sched = data.draw(valid_schedules(g))
    ok, cost, peak, steps = oracle_simulate(g, sched)
    assert ok
    sim = simulate(g, sched)
    assert sim.total_cost == pytest.approx(cost)
    assert sim.peak_memory_bytes == peak
    assert list(zip(sim.step_stage.tolist(), sim.step_node.tolist(), sim.step_memory_bytes.tolist())) == steps


@given(st.data())
def test_simulator_rejects_exactly_the_invalid_schedules(data):
    g = data.draw(dags(max_nodes=7))
    sched = data.draw(raw_schedules(g))
    ok, *_ = oracle_simulate(g, sched)
    if ok:
        simulate(g, sched)
    else:
        with pytest.raises(InvalidScheduleError):
            simulate(g, sched)


@given(training_graphs())
def test_checkpoint_all_cost_is_sum_and_never_recomputes(g):
    sim = simulate(g, Schedule.checkpoint_all(g))
    assert sim.total_cost == pytest.approx(float(g.cost.sum()))
    assert sim.recompute_count == 0


@given(st.data())
def test_r_given_s_is_valid_minimal_and_forced(data):
    g = data.draw(dags(max_nodes=9))
    base = data.draw(valid_schedules(g, extra=False))
    wasteful = data.draw(valid_schedules(g, extra=True))
    sim_base = simulate(g, base)
    # same S with any valid R costs at least as much: R given S is minimal (entrywise)
    minimal = optimal_r_given_s(g, wasteful)
    Rm, _ = minimal.dense()
    Rw, _ = wasteful.dense()
    assert not (Rm & ~Rw).any()
    assert simulate(g, minimal).total_cost <= simulate(g, wasteful).total_cost
    assert sim_base.total_cost >= float(g.cost.sum()) - 1e-9
