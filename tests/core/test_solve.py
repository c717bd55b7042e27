import numpy as np
import pytest

import remat_core
from remat_core import (RematResult, Schedule, ScheduleVerificationError, SolveStatus, UnknownMethodError,
                        available_methods, register_method, solve)
from remat_core.solvers import _METHODS, get_method
from remat_core.zoo import linear_graph


def test_checkpoint_all_fits_and_is_optimal():
    g = linear_graph(4)
    res = solve(g, 6, method="checkpoint-all")
    assert res.status is SolveStatus.OPTIMAL and res.success
    assert res.objective == 9.0 and res.lower_bound == 9.0 and res.gap == 0.0
    assert res.peak_memory_bytes == 6 and res.budget_bytes == 6 and res.method == "checkpoint-all"
    assert res.solve_time_s >= 0 and res.stats["recomputations"] == 0
    assert remat_core.make_plan(g, res).num_registers == g.n
    d = res.to_dict(include_schedule=True)
    assert d["status"] == "optimal" and Schedule.from_dict(d["schedule"]) == res.schedule


def test_infeasible_budget_is_a_status_with_budgets():
    g = linear_graph(4)
    res = solve(g, 5, method="checkpoint-all")
    assert res.status is SolveStatus.INFEASIBLE and not res.success
    assert res.schedule is None and res.objective is None
    assert res.stats["method_min_budget_bytes"] == 6
    assert res.stats["min_budget_lower_bound_bytes"] == g.min_budget_lower_bound_bytes() == 3
    with pytest.raises(remat_core.RematError, match="no schedule to plan"):
        remat_core.make_plan(g, res)


@pytest.mark.parametrize("budget", [-3, 0, 1.5, "10", None, True, float("nan")])
def test_bad_budget_names_the_argument(budget):
    with pytest.raises((TypeError, ValueError), match="`budget_bytes` must be a positive integer"):
        solve(linear_graph(2), budget, method="checkpoint-all")


def test_bad_graph_and_method():
    with pytest.raises(TypeError, match="`graph`"):
        solve("graph", 10, method="checkpoint-all")
    with pytest.raises(UnknownMethodError, match="unknown method 'magic'; available methods: .*checkpoint-all"):
        solve(linear_graph(2), 10, method="magic")
    with pytest.raises(TypeError, match="`method`"):
        solve(linear_graph(2), 10, method=3)
    with pytest.raises(TypeError, match="unknown options \\['colour'\\]"):
        solve(linear_graph(2), 10, method="checkpoint-all", colour=1)


@pytest.fixture
def temp_method():
    added = []

    def add(name, fn):
        register_method(name, fn)
        added.append(name)

    yield add
    for name in added:
        _METHODS.pop(name, None)


def test_over_budget_schedule_is_a_bug_not_a_warning(temp_method):
    def liar(graph, budget_bytes):
        return RematResult(status=SolveStatus.FEASIBLE, schedule=Schedule.checkpoint_all(graph))

    temp_method("test-liar", liar)
    with pytest.raises(ScheduleVerificationError, match="exceeds the budget"):
        solve(linear_graph(4), 5, method="test-liar")


def test_status_schedule_consistency_enforced(temp_method):
    temp_method("test-noschedule", lambda graph, budget_bytes: RematResult(status=SolveStatus.OPTIMAL))
    temp_method("test-infeasible-with-schedule", lambda graph, budget_bytes: RematResult(
        status=SolveStatus.INFEASIBLE, schedule=Schedule.checkpoint_all(graph)))
    temp_method("test-bad-bound", lambda graph, budget_bytes: RematResult(
        status=SolveStatus.FEASIBLE, schedule=Schedule.checkpoint_all(graph), lower_bound=1e9))
    temp_method("test-not-result", lambda graph, budget_bytes: 42)
    g = linear_graph(2)
    with pytest.raises(ScheduleVerificationError, match="no schedule"):
        solve(g, 100, method="test-noschedule")
    with pytest.raises(ScheduleVerificationError, match="with status infeasible"):
        solve(g, 100, method="test-infeasible-with-schedule")
    with pytest.raises(ScheduleVerificationError, match="lower bound"):
        solve(g, 100, method="test-bad-bound")
    with pytest.raises(remat_core.RematError, match="not a RematResult"):
        solve(g, 100, method="test-not-result")


def test_objective_always_comes_from_the_simulator(temp_method):
    def wrong_cost(graph, budget_bytes):
        return RematResult(status=SolveStatus.FEASIBLE, schedule=Schedule.checkpoint_all(graph), objective=1.0)

    temp_method("test-wrong-cost", wrong_cost)
    res = solve(linear_graph(2), 100, method="test-wrong-cost")
    assert res.objective == 5.0 and res.stats["solver_objective"] == 1.0


def test_registry():
    assert available_methods()[0] in _METHODS
    assert "checkpoint-all" in available_methods()
    with pytest.raises(ValueError, match="already registered"):
        register_method("checkpoint-all", lambda g, b: None)
    with pytest.raises(ValueError, match="`name`"):
        register_method("", lambda g, b: None)
    assert callable(get_method("checkpoint-all"))
