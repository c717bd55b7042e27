"""The windowed-MILP search (remat_core.solvers.lns): its program admits the incumbent, what it returns fits
the budget (the simulator judging), a longer search (a work budget, not the clock) is never worse and here
better, and the deadline holds under a fake clock."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from remat_core import simulate, solve
from remat_core.solvers.lns import ROUNDS, improve_windows, reoptimize_window, window_program, windows
from remat_core.units import resolve_budget
from remat_core.zoo import random_training_graph


@pytest.fixture(scope="module")
def start():
    """A 55-node random training graph at 0.6 of its activation memory and DTR's (msps) schedule: 356 units
    against 332 after 16 windows of 4 stages."""
    g = random_training_graph(12, 3, seed=8)
    budget = resolve_budget(g, 0.6)
    res = solve(g, budget, method="dtr", heuristic="msps")
    assert res.success
    return g, budget, res.schedule


def test_the_window_program_admits_the_incumbent(start):
    """The incumbent, encoded as the program's start, satisfies every row: the program's memory accounting
    never counts more than the simulator's (else the incumbent would be cut off)."""
    g, budget, sched = start
    for width in (4, 8):
        for a, b in windows(g, sched, width):
            prog = window_program(g, sched, budget, a, b)
            f = prog.form
            ax = f.A @ prog.start
            assert np.all(ax <= f.row_hi + 1e-9) and np.all(ax >= f.row_lo - 1e-9), (a, b)
            assert np.all(prog.start <= f.col_hi) and np.all(prog.start >= f.col_lo)
            # the layout names every column once: R, S, FREE and memory columns
            cols = np.concatenate([f.r_col, f.s_col, f.f_col, f.u_col])
            assert np.array_equal(np.sort(cols), np.arange(f.n_cols)), (a, b)
            assert prog.start_cost == pytest.approx(float(f.c @ prog.start))


def test_every_window_result_fits_and_is_cheaper(start, caplog):
    """Every re-optimized window is valid and within the budget by the simulator and cheaper than the incumbent;
    the program never proposes one the simulator rejects (a warning would say so)."""
    g, budget, sched = start
    found = 0
    with caplog.at_level(logging.WARNING, logger="remat_core.solvers.lns"):
        for a, b in windows(g, sched, 4):
            cand = reoptimize_window(g, sched, budget, a, b)
            if cand is not None:
                found += 1
                sim = simulate(g, cand)
                assert sim.peak_memory_bytes <= budget and sim.total_cost < sched.cost(g)
    assert found >= 2
    assert not [r for r in caplog.records if r.name == "remat_core.solvers.lns"]


def test_a_longer_search_is_never_worse_and_here_better(start):
    """Work budgets of 1, 2, 4, 8 and 16 window programs, each solved to optimality: the costs never rise and
    16 beat 1 (measured: 345, 341, 341, 335, 332 from 356)."""
    g, budget, sched = start
    costs = []
    for k in (1, 2, 4, 8, 16):
        best, info = improve_windows(g, sched, budget, max_windows=k, window_s=None, widths=(4,))
        assert info["windows"] <= k
        sim = simulate(g, best)
        assert sim.peak_memory_bytes <= budget
        costs.append(sim.total_cost)
    assert costs[0] < sched.cost(g)
    assert all(b <= a for a, b in zip(costs, costs[1:]))
    assert costs[-1] < costs[0]


def test_the_deadline_holds_under_a_fake_clock(start):
    """A clock that advances 1 s at each reading: with a 3 s deadline the search stops after at most three
    programs, and says why."""
    g, budget, sched = start
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    best, info = improve_windows(g, sched, budget, clock=clock, deadline=3.0, widths=(4,))
    assert info["why"] == "deadline" and 1 <= info["windows"] <= 3
    assert simulate(g, best).peak_memory_bytes <= budget


def test_offers_and_stop(start):
    """Every improvement is offered (each cheaper than the last); ``stop()`` ends the search; an empty window
    has no program."""
    g, budget, sched = start
    offered = []
    calls = [0]

    def stop() -> bool:
        calls[0] += 1
        return calls[0] > 6

    best, info = improve_windows(g, sched, budget, offer=offered.append, stop=stop, window_s=None, widths=(4,))
    assert info["why"] == "stopped" and info["windows"] == 6
    assert offered and offered[-1] is best
    costs = [s.cost(g) for s in offered]
    assert all(b < a for a, b in zip([sched.cost(g)] + costs, costs))
    assert window_program(g, sched, budget, 10, 10) is None


def test_without_an_end_of_rounds_a_longer_search_is_never_worse_and_uses_the_work_given(start):
    """Issue 37: a longer limit must be used. With ``rounds=None`` the search goes on past the first cycle of
    rounds (wider, shifted windows) until its work budget: every budget is used in full and the costs never
    rise (measured: 341, 332, 332, 328); where the old fixed rounds stop (no window improves, 332), 80 programs
    go on to 328."""
    g, budget, sched = start
    costs = []
    for k in (4, 16, 40, 80):
        best, info = improve_windows(g, sched, budget, max_windows=k, window_s=None, widths=(4,), rounds=None)
        assert info["windows"] == k and info["why"] == "work budget", info
        assert simulate(g, best).peak_memory_bytes <= budget
        costs.append(best.cost(g))
    assert all(b <= a for a, b in zip(costs, costs[1:])), costs
    assert info["rounds"] > ROUNDS   # the last one went past the first cycle
    fixed, info_fixed = improve_windows(g, sched, budget, max_windows=80, window_s=None, widths=(4,))
    assert info_fixed["why"] == "no window improves" and info_fixed["windows"] < 80
    assert costs[-1] < fixed.cost(g)


def test_without_an_end_of_rounds_the_search_runs_to_its_deadline(start):
    """Under a fake clock (1 s a reading, four readings a program) the search with ``rounds=None`` stops at the
    deadline, after more rounds than a cycle, not when a cycle finds nothing; with no deadline, work budget or
    ``stop``, ``rounds=None`` would never end: refused."""
    g, budget, sched = start
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    best, info = improve_windows(g, sched, budget, clock=clock, deadline=340.0, widths=(4,), window_s=None,
                                 rounds=None)
    assert info["why"] == "deadline" and info["rounds"] > ROUNDS, info
    assert simulate(g, best).peak_memory_bytes <= budget and best.cost(g) < sched.cost(g)
    with pytest.raises(ValueError, match="`rounds=None`"):
        improve_windows(g, sched, budget, rounds=None)


def test_programs_limited_in_nodes_give_the_same_search_whatever_the_speed(start):
    """auto's setting (each program HiGHS's root only, no limit in seconds): the same work budget gives the same
    schedule twice, and a larger one is never worse, so under a deadline a longer limit repeats a shorter one."""
    g, budget, sched = start
    runs = {}
    for k in (3, 6, 6, 12):
        best, info = improve_windows(g, sched, budget, max_windows=k, window_s=None, window_nodes=1, rounds=None,
                                     widths=(4,))
        assert info["windows"] == k and simulate(g, best).peak_memory_bytes <= budget
        runs.setdefault(k, []).append(best)
    a, b = runs[6]
    assert np.array_equal(a.dense()[0], b.dense()[0]) and np.array_equal(a.dense()[1], b.dense()[1])
    costs = [runs[k][0].cost(g) for k in (3, 6, 12)]
    assert costs[0] < sched.cost(g) and all(y <= x for x, y in zip(costs, costs[1:])), costs
