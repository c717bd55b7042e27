"""The anytime search of ``auto`` (``remat_core.solvers.anytime``): feasibility first, monotone in the budget,
the smallest budget found as the hint, and a longer search never worse. Deterministic: a work budget
(``max_moves``), a fake clock, or limits so long that no cap depends on the time."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from remat_core import simulate, solve
from remat_core.schedule import SolveStatus
from remat_core.solvers.anytime import SCALES, Move, improve, min_peak_schedules, restart_moves
from remat_core.units import resolve_budget
from remat_core.zoo import random_training_graph


@pytest.fixture(scope="module")
def g500():
    g = random_training_graph(120, 3, seed=0)   # 493 nodes
    assert 450 <= g.n <= 550
    return g


def _search(g, budget, **kw):
    found = []

    def incumbent():
        return min(found, key=lambda r: r.objective) if found else None

    info = improve(g, budget, lambda name, res: found.append(res), incumbent, **kw)
    return incumbent(), info, found


def test_moves_come_in_a_fixed_order_and_a_longer_search_tries_a_superset():
    a = list(itertools.islice(restart_moves(), 50))
    b = list(itertools.islice(restart_moves(), 80))
    assert b[:50] == a and len(set(b)) == len(b)
    assert a[0] == Move("msps", 1.0, False)


def test_a_longer_search_is_never_worse_and_here_better(g500):
    budget = resolve_budget(g500, 0.5)
    costs = []
    for moves in (1, 6, 24):
        best, info, found = _search(g500, budget, max_moves=moves)
        assert info["moves"] == moves and info["why"] == "work budget"
        for res in found:   # every offer is a verified schedule within the budget
            assert res.status is SolveStatus.FEASIBLE and res.peak_memory_bytes <= budget
            assert simulate(g500, res.schedule).total_cost == pytest.approx(res.objective)
        costs.append(best.objective)
    assert costs[0] >= costs[1] >= costs[2]
    assert costs[2] < costs[0]   # the restarts at tighter budgets, polished, beat the first run on this graph


def test_the_fine_restarts_follow_the_grid_and_pay():
    """After the grid of SCALES, budget shares 0.005 apart (issue 37: a longer limit must find more): on this
    89-node graph at 0.6 the first fine move (msps under 0.995 of the budget) beats all 120 moves of the grid."""
    moves = list(restart_moves(n_seeds=0))
    grid = [m for m in moves if m.scale in SCALES]
    assert moves[:len(grid)] == grid and len(grid) == 120 and len(moves) == len(set(moves))
    fine = moves[len(grid):len(grid) + 4 * 71]
    assert {m.scale for m in fine} == {round(1 - 0.005 * k, 3) for k in range(1, 80)} - set(SCALES)
    assert fine[0] == Move("msps", 0.995, False)
    ultra = moves[len(grid) + 4 * 71:]   # then msps at every other share 0.001 apart, both freeing rules
    assert len(ultra) == 2 * 320 and {m.heuristic for m in ultra} == {"msps"} and ultra[0].scale == 0.999
    assert {m.scale for m in ultra} == {round(1 - 0.001 * k, 3) for k in range(1, 401)} - {m.scale for m in fine} \
        - set(SCALES)
    g = random_training_graph(20, 3, seed=0)
    budget = resolve_budget(g, 0.6)
    grid_best, _, _ = _search(g, budget, max_moves=120)
    fine_best, _, found = _search(g, budget, max_moves=121)
    assert fine_best.objective < grid_best.objective and fine_best.method == "restart(dtr(msps) at 0.995B)"
    assert all(r.peak_memory_bytes <= budget for r in found)


def test_the_deadline_holds_on_a_fake_clock(g500):
    """Each clock read advances 10 ms: the search must stop by its deadline (in clock time), whatever a move
    costs in wall time."""
    now = [0.0]

    def clock():
        now[0] += 0.01
        return now[0]

    best, info, _ = _search(g500, resolve_budget(g500, 0.5), clock=clock, deadline=1.0)
    assert info["why"] == "deadline" and 0 < info["moves"] < 100
    assert now[0] <= 1.0 + 0.05   # no move started after the deadline


def test_the_search_stops_at_the_lower_bound(g500):
    budget = resolve_budget(g500, 0.9)
    best, info, _ = _search(g500, budget, max_moves=50)
    again, info2, _ = _search(g500, budget, max_moves=50, lower_bound=best.objective)
    assert info2["why"] == "at the lower bound" and info2["moves"] < 50 and again.objective == best.objective


def test_min_peak_schedules_do_not_depend_on_the_budget(g500):
    offers = {}
    peaks = {}
    for frac in (0.3, 0.6, 0.9):
        budget = resolve_budget(g500, frac)
        got = []
        peaks[frac] = min_peak_schedules(g500, lambda name, res: got.append(res), budget)
        offers[frac] = got
        assert all(r.peak_memory_bytes <= budget for r in got)
    assert peaks[0.3] == peaks[0.6] == peaks[0.9] is not None
    assert len(offers[0.3]) <= len(offers[0.6]) <= len(offers[0.9])
    assert min(r.peak_memory_bytes for r in offers[0.9]) == peaks[0.9]


def _auto(g, budget):
    # a limit so long that no DTR cap depends on the time, and a search that settles at once when it has a
    # schedule: the result depends on the graph and the budget only
    return solve(g, budget, method="auto", time_limit_s=600, memory_limit_bytes=10**6, stop_gap=10.0,
                 patience_s=0.0)


def test_feasibility_is_monotone_in_the_budget_and_the_hint_is_the_smallest_found(g500):
    lower = g500.min_budget_lower_bound_bytes()
    top = resolve_budget(g500, 0.35)
    grid = sorted({int(b) for b in np.linspace(lower, top, 12)})
    results = {b: _auto(g500, b) for b in grid}
    ok = [b for b in grid if results[b].success]
    assert ok, "nothing found anywhere on the grid"
    first = ok[0]
    assert all(results[b].success for b in grid if b >= first), \
        {b: results[b].status.value for b in grid}   # a schedule at a budget is one at every larger budget
    for b in grid:
        res = results[b]
        if res.success:
            assert res.peak_memory_bytes <= b
            continue
        assert res.status is not SolveStatus.OPTIMAL
        hint = res.stats.get("min_budget_bytes")
        assert hint is not None and hint > b
        assert hint <= first   # never above a budget at which auto succeeds
        assert str(hint) in res.message
    # the hint is a budget at which a schedule was found: auto succeeds there
    hints = {results[b].stats["min_budget_bytes"] for b in grid if not results[b].success}
    for hint in hints:
        assert _auto(g500, hint).success


def test_bad_search_options_are_named():
    g = random_training_graph(4, seed=0)
    with pytest.raises(ValueError, match="`stop_gap`"):
        solve(g, 10**6, method="auto", stop_gap=-1)
    with pytest.raises(ValueError, match="`patience_s`"):
        solve(g, 10**6, method="auto", patience_s=float("nan"))



class _Clock:
    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now


@pytest.mark.parametrize("limit,stall_s", [(60.0, 8.0), (300.0, 30.0), (None, 8.0)])
def test_the_stall_window_grows_with_an_explicit_limit(monkeypatch, limit, stall_s):
    """1-5% above the bound, the search ends once nothing has improved for max(patience_s, limit / 10): 8 s under
    the default 60 s (issue 36's planning time), 30 s under 300 s (issue 37: a longer limit pays). The window
    ``solve_auto`` passes, and the rule read under a fake clock."""
    import remat_core.solvers.auto as auto
    from remat_core.schedule import RematResult
    from remat_core.zoo import linear_graph

    calls = []
    real = auto._settled_rule
    monkeypatch.setattr(auto, "_settled_rule", lambda *a: calls.append(a) or real(*a))
    g = linear_graph(6)
    solve(g, 8, method="auto", **({} if limit == 60.0 else {"time_limit_s": limit}))   # 60 s is the default
    assert [c[4] for c in calls] == [stall_s]

    clock = _Clock()
    monkeypatch.setattr(auto, "time", clock)
    best = auto._Best(g, 8)
    rule = real(best, clock.now, auto.DEFAULT_STOP_GAP, auto.DEFAULT_PATIENCE_S, stall_s)
    for since, settled in ((stall_s - 1.0, False), (stall_s + 1.0, True)):
        clock.now = 2000.0 - since
        best.offer("x", RematResult(status=SolveStatus.FEASIBLE, objective=103.0 - since / 100))   # 3% above
        best.lower_bound = 100.0
        clock.now = 2000.0
        assert rule() is settled
    # the windowed MILP under a long limit: no stall rule (within stop_gap it still ends)
    best.stall_from = math.inf
    clock.now += 1e6
    assert not rule()
    best.offer("y", RematResult(status=SolveStatus.FEASIBLE, objective=100.5))
    assert rule()


def test_a_long_limit_alternates_the_windowed_milp_and_the_restarts(monkeypatch):
    """Under a long limit (stall window 30 s) the windowed MILP and the restarts take turns, each until nothing
    has improved for the window; the MILP again only from a new schedule, and to the limit once the restarts
    have run out. Stub turns on a fake clock (1 s a step)."""
    import remat_core.solvers.auto as auto
    from remat_core.schedule import RematResult
    from remat_core.zoo import linear_graph

    clock = _Clock()
    monkeypatch.setattr(auto, "time", clock)
    g = linear_graph(6)
    best = auto._Best(g, 8)

    def improve_to(name, objective):
        res = RematResult(status=SolveStatus.FEASIBLE, objective=objective)
        best.result, best.method, best.improved_at, best.staged = res, name, clock.now, (name, res)

    improve_to("first", 103.0)   # 3% above the bound: the stall rule applies
    best.lower_bound = 100.0
    settled = auto._settled_rule(best, clock.now, auto.DEFAULT_STOP_GAP, auto.DEFAULT_PATIENCE_S, 30.0)
    turns = []

    def lns(_best, _graph, _budget, deadline, stop):
        turns.append(("lns", best.staged[1].objective, best.stall_from == math.inf))
        windows = 0
        while clock.now < deadline and not stop():
            clock.now += 1.0
            windows += 1
        best.tried["lns"] = {"status": "stopped", "windows": windows, "improved": 0, "time_s": float(windows)}

    def anytime(_best, _graph, _budget, deadline, stop, moves):
        k = sum(t[0] == "restarts" for t in turns)
        turns.append(("restarts", best.result.objective))
        n, status = 0, "stopped"
        if k == 0:   # the first turn finds a cheaper schedule, then stalls
            clock.now += 5.0
            improve_to("restart", 102.0)
        while clock.now < deadline and not stop():
            clock.now += 1.0
            n += 1
            if k == 2 and n == 10:   # the third runs out of moves
                status = "moves exhausted"
                break
        done = best.tried.get("anytime", {}).get("moves", 0)
        best.tried["anytime"] = {"status": status, "moves": done + n + 1, "improved": 0, "time_s": 0.0}

    monkeypatch.setattr(auto, "_lns", lns)
    monkeypatch.setattr(auto, "_anytime", anytime)
    deadline = clock.now + 300.0
    auto._alternate(best, g, 8, deadline, settled, None)
    assert turns == [("lns", 103.0, False), ("restarts", 103.0), ("lns", 102.0, False), ("restarts", 102.0),
                     ("restarts", 102.0), ("lns", 102.0, True)]
    assert clock.now >= deadline
    # one entry for every MILP turn: 30 + 30 s stalled, then the rest of the limit
    assert best.tried["lns"]["windows"] == 30 + 30 + (deadline - 1000.0 - 30 - 35 - 30 - 30 - 10)
