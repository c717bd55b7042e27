"""Operation sequences: one judge for the sequence form and the stage form (remat_core.sequence)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from remat_core import Schedule, simulate, solve
from remat_core.errors import InvalidScheduleError
from remat_core.sequence import COMPUTE, FREE, OpSequence, from_schedule, simulate_sequence
from remat_core.simulate import checkpoint_all_peak_bytes, optimal_r_given_s
from remat_core.units import resolve_budget
from remat_core.zoo import linear_graph
from strategies import dags, training_graphs


def assert_same_judgement(g, sched):
    stage, seq = simulate(g, sched), simulate_sequence(g, from_schedule(g, sched))
    assert seq.total_cost == stage.total_cost
    assert seq.peak_memory_bytes == stage.peak_memory_bytes
    assert np.array_equal(seq.compute_counts, stage.compute_counts)
    assert np.array_equal(seq.step_node, stage.step_node)
    assert np.array_equal(seq.step_memory_bytes, stage.step_memory_bytes)   # every instant, not only the peak


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_sequence_of_a_random_stage_schedule_simulates_equal(data):
    g = data.draw(dags())
    n = g.n
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    S = np.tril(rng.random((n, n)) < data.draw(st.floats(0.0, 1.0)), -1)
    assert_same_judgement(g, optimal_r_given_s(g, S))


@pytest.mark.parametrize("method", ["checkpoint-all", "chen-sqrtn", "linearized-greedy", "dtr", "rotor"])
@pytest.mark.parametrize("fraction", [1.0, 0.6])
def test_sequence_of_each_methods_schedule_simulates_equal(method, fraction):
    g = linear_graph(12)
    if method == "checkpoint-all" and fraction < 1:
        pytest.skip("checkpoint-all fits only at 1.0")
    res = solve(g, resolve_budget(g, fraction), method=method)
    assert res.schedule is not None, res.message
    assert_same_judgement(g, res.schedule)


@settings(max_examples=20, deadline=None)
@given(g=training_graphs())
def test_sequence_of_checkpoint_all_on_training_graphs(g):
    sched = Schedule.checkpoint_all(g)
    assert_same_judgement(g, sched)
    assert simulate_sequence(g, from_schedule(g, sched)).peak_memory_bytes == checkpoint_all_peak_bytes(g)


def test_a_sequence_can_recompute_just_before_the_read_which_stages_cannot_say():
    # a chain 0 -> 1 -> 2 -> 3 with a skip 0 -> 3: free 0 after 1, recompute it just before 3
    g = linear_graph(2)   # forward 0,1 ; loss 2 ; backward 3, 4 (4 reads 0)
    deps = [g.csr[1][g.csr[0][k]:g.csr[0][k + 1]].tolist() for k in range(g.n)]
    assert 0 in deps[4]
    ev = [(COMPUTE, 0), (COMPUTE, 1), (FREE, 0), (COMPUTE, 2), (COMPUTE, 3), (COMPUTE, 0), (COMPUTE, 4)]
    seq = OpSequence(np.array([k for k, _ in ev]), np.array([v for _, v in ev]))
    sim = simulate_sequence(g, seq)
    assert sim.compute_counts.tolist() == [2, 1, 1, 1, 1]


def test_bad_sequences_name_the_event():
    g = linear_graph(2)
    with pytest.raises(InvalidScheduleError, match="event 0 computes node 1"):
        simulate_sequence(g, OpSequence(np.array([COMPUTE]), np.array([1])))
    with pytest.raises(InvalidScheduleError, match="event 0 frees node 0"):
        simulate_sequence(g, OpSequence(np.array([FREE]), np.array([0])))
    with pytest.raises(InvalidScheduleError, match="never computed"):
        simulate_sequence(g, OpSequence(np.array([COMPUTE]), np.array([0])))
    with pytest.raises(ValueError, match="`kind`"):
        OpSequence(np.array([3]), np.array([0]))


def test_sequence_json_round_trip_and_bad_json():
    seq = OpSequence([COMPUTE, COMPUTE, FREE, COMPUTE], [0, 1, 0, 2])
    back = OpSequence.from_dict(json.loads(json.dumps(seq.to_dict())))
    assert back == seq and back != OpSequence([COMPUTE], [0])
    for bad in ({"kind": [0]}, {"kind": [0, 1], "node": [0]}, {"kind": [0], "node": ["a"]},
                {"kind": [2], "node": [0]}, {"kind": [0], "node": [True]}):
        with pytest.raises(InvalidScheduleError, match="sequence JSON"):
            OpSequence.from_dict(bad)


def test_a_results_json_carries_its_sequence_and_the_cli_writes_it(capsys, tmp_path):
    # a dtr run recorded only as a sequence must survive to_dict / `remat solve --schedule`: its plan is there
    from remat_core import make_plan
    from remat_core.cli import main

    g = linear_graph(12)
    budget = resolve_budget(g, 0.4)
    res = solve(g, budget, method="dtr", order="given", find_min_budget=False)
    assert res.success and res.sequence is not None
    d = json.loads(json.dumps(res.to_dict(include_schedule=True)))
    back = OpSequence.from_dict(d["sequence"])
    assert back == res.sequence and simulate_sequence(g, back).total_cost == res.objective
    assert make_plan(g, back).num_registers >= 1
    assert "sequence" not in res.to_dict()
    plain = solve(g, resolve_budget(g, 1.0), method="checkpoint-all")
    assert plain.to_dict(include_schedule=True)["sequence"] == (None if plain.sequence is None
                                                                else plain.sequence.to_dict())
    out = tmp_path / "r.json"
    assert main(["solve", "linear:12", "0.4", "--method", "dtr", "--json", "--schedule", "--out", str(out)]) == 0
    capsys.readouterr()
    saved = json.loads(out.read_text())
    assert saved["schedule"] is not None and OpSequence.from_dict(saved["sequence"]) is not None
