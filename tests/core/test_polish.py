"""segments.polish and trim_keeps: local improvement of an incumbent schedule, the simulator judging."""

import os

import numpy as np
import pytest

from remat_core import simulate, solve
from remat_core.simulate import checkpoint_all_peak_bytes
from remat_core.solvers.segments import polish, trim_keeps
from remat_core.units import resolve_budget
from remat_core.zoo import random_training_graph


def _stage_peaks(graph, schedule):
    sim = simulate(graph, schedule)
    peaks = np.zeros(graph.n, dtype=np.int64)
    np.maximum.at(peaks, sim.step_stage, sim.step_memory_bytes)
    return sim, peaks


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("heuristic", ["msps", "h_dtr_eq", "h_dtr"])
def test_trim_keeps_same_cost_no_more_memory_in_any_stage(seed, heuristic):
    g = random_training_graph(16, seed=seed)
    res = solve(g, resolve_budget(g, 0.5), method="dtr", heuristic=heuristic, order="stages")
    assert res.success
    trimmed = trim_keeps(g, res.schedule)
    sim0, peaks0 = _stage_peaks(g, res.schedule)
    sim1, peaks1 = _stage_peaks(g, trimmed)   # simulate validates the trimmed schedule
    assert sim1.total_cost == sim0.total_cost
    assert np.array_equal(trimmed.compute_counts(), res.schedule.compute_counts())
    assert np.all(peaks1 <= peaks0)
    R0, S0 = res.schedule.dense()
    R1, S1 = trimmed.dense()
    assert np.array_equal(R0, R1) and not np.any(S1 & ~S0)
    # DTR leaves values resident until it needs their room: some keeps are never read
    assert S1.sum() < S0.sum()
    assert trim_keeps(g, trimmed).dense()[1].sum() == S1.sum()   # idempotent


def test_polish_uses_room_of_unread_keeps():
    # without trimming, no gap of this DTR schedule fits next to the memory its unread keeps hold
    g = random_training_graph(16, seed=0)
    budget = resolve_budget(g, 0.5)
    res = solve(g, budget, method="dtr", heuristic="msps", order="stages")
    better = polish(g, res.schedule, budget)
    sim = simulate(g, better)
    assert sim.peak_memory_bytes <= budget
    assert sim.total_cost < res.objective - 10


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.8])
def test_polish_never_worse_and_within_budget(seed, fraction):
    g = random_training_graph(12, seed=seed)
    budget = resolve_budget(g, fraction)
    res = solve(g, budget, method="dtr", heuristic="h_dtr_eq", order="stages")
    if not res.success:
        return
    out = polish(g, res.schedule, budget)
    sim = simulate(g, out)
    assert sim.peak_memory_bytes <= budget
    assert sim.total_cost <= res.objective
    if out is not res.schedule:
        assert sim.total_cost < res.objective


def test_polish_over_budget_input_returned_unchanged():
    g = random_training_graph(10, seed=1)
    res = solve(g, resolve_budget(g, 0.5), method="dtr", heuristic="msps", order="stages")
    assert polish(g, res.schedule, g.fixed_bytes) is res.schedule


DAGS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "dtr_dags")


@pytest.mark.slow
@pytest.mark.parametrize("name, most", [("TreeLSTM_D.6", 1.40), ("LSTM_512", 1.18)])
def test_polish_dtr_large_graphs_at_half_the_peak(name, most):
    from remat_core.graph import load_dtr_dag

    path = os.path.join(DAGS, f"{name}.json")
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    g = load_dtr_dag(path)
    budget = int(g.fixed_bytes + 0.5 * (checkpoint_all_peak_bytes(g) - g.fixed_bytes))
    res = solve(g, budget, method="dtr", heuristic="msps", order="stages")
    out = simulate(g, polish(g, res.schedule, budget))
    assert out.peak_memory_bytes <= budget
    assert out.total_cost / float(np.sum(g.cost)) <= most


def test_solve_dtr_keep_dead_option_picks_the_freeing_rule():
    from remat_core.solvers.dtr import dtr_run

    g = random_training_graph(16, seed=2)
    budget = resolve_budget(g, 0.5)
    for keep_dead in (False, True):
        res = solve(g, budget, method="dtr", heuristic="msps", keep_dead=keep_dead, find_min_budget=False,
                    order="stages")
        run = dtr_run(g, budget, "msps", keep_dead=keep_dead)
        assert res.success == run["ok"] and res.stats["keep_dead"] is keep_dead
        if res.success:
            assert res.objective == simulate(g, run["schedule"]).total_cost
    with pytest.raises(ValueError, match="keep_dead"):
        solve(g, budget, method="dtr", keep_dead="yes")


@pytest.mark.parametrize("seed", [0])
def test_auto_large_path_offers_and_polishes_keep_dead_runs(seed):
    from remat_core.solvers.dtr import HEURISTICS

    g = random_training_graph(24, seed=seed)
    budget = resolve_budget(g, 0.4)
    res = solve(g, budget, method="auto", time_limit_s=4, memory_limit_bytes=10**6)
    assert res.stats["path"] == "large"
    assert res.stats["tried"]["dtr(msps, keep_dead)"]["status"] != "skipped"
    assert "dtr(msps, keep_dead)" in res.stats["tried"]
    kd = [solve(g, budget, method="dtr", heuristic=h, keep_dead=True, find_min_budget=False, order="stages")
          for h in HEURISTICS if h != "random"]
    found = [r.objective for r in kd if r.success]
    assert found and res.success and res.peak_memory_bytes <= budget
    assert res.objective <= min(found)
