"""``search="portfolio"`` (and ``"auto"``): HiGHS's MILP and branch-and-cut race; the first proof wins."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from canonical import CASES, graph

from remat_core import SolveStatus, checkpoint_all_peak_bytes, simulate, solve
from remat_core.formulation import build_milp
from remat_core.solvers import _deadline, portfolio
from remat_core.solvers.backends import BackendResult
from remat_core.solvers.ilp import _strengthen, warm_start_schedule
from remat_core.zoo import linear_graph, random_training_graph


def test_canonical_optima():
    for case in CASES:
        g = graph(case.graph)
        res = solve(g, case.budget_bytes, method="ilp", search="portfolio")
        if case.optimum is None:
            assert res.status is SolveStatus.INFEASIBLE, case
            continue
        assert res.status is SolveStatus.OPTIMAL, (case, res)
        assert res.objective == pytest.approx(case.optimum), case
        assert res.peak_memory_bytes <= case.budget_bytes


def test_branch_and_cut_wins_and_interrupts_highs_from_a_script_without_main_guard(tmp_path):
    """linear(12) at 5 units: branch-and-cut proves it several times faster than HiGHS (about 3 s vs 12 s
    here), so it wins and HiGHS is interrupted. Run as a plain script with no ``__main__`` guard, which a
    child started by multiprocessing's spawn method would re-execute."""
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent("""
        import json, time
        from remat_core import solve
        from remat_core.zoo import linear_graph
        t0 = time.perf_counter()
        res = solve(linear_graph(12), 5, method="ilp", search="portfolio", time_limit_s=120)
        print(json.dumps({"status": res.status.value, "objective": res.objective, "peak": res.peak_memory_bytes,
                          "portfolio": res.stats["portfolio"], "s": time.perf_counter() - t0}))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "optimal" and got["objective"] == 37.0 and got["peak"] <= 5
    assert got["portfolio"]["winner"] == "branch-and-cut", got
    assert got["portfolio"]["milp"]["status"] == "Interrupted by user"
    assert got["portfolio"]["branch_and_cut"]["status"] == "branch-and-cut: optimal"


@pytest.fixture(scope="module")
def hard():
    """random(12 layers, seed 5) at 50: neither search proves it within a few seconds."""
    g, budget = random_training_graph(12, 2, seed=5), 50
    sf = _strengthen(build_milp(g, budget, "strong"), "highs", 1, None)[0]
    start, _method, cost = warm_start_schedule(g, budget)
    return g, budget, sf, sf.encode(start), cost


def test_at_the_time_limit_both_searches_report_and_combine(hard, monkeypatch):
    g, budget, sf, x0, cost = hard
    # the child may report up to _KILL_GRACE_S late here (under load its interpreter's start alone can take
    # most of the limit); test_at_the_time_limit_a_late_child_is_not_waited_for checks the wait at a limit
    monkeypatch.setattr(portfolio, "_LATE_SHARE", 10.0)
    t0 = time.perf_counter()
    out, details = portfolio.race(sf, x0, time_limit_s=4.0, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options={"mip_pscost_minreliable": 0})
    elapsed = time.perf_counter() - t0
    assert elapsed < 4.0 + 6.0, elapsed            # the child is waited for no longer than its deadline + grace
    assert details["winner"] is None and "branch_and_cut" in details and "error" not in details, details
    assert out.status is SolveStatus.FEASIBLE
    assert out.objective + sf.objective_offset <= cost + 1e-9
    assert simulate(g, sf.decode(out.x)).peak_memory_bytes <= budget
    assert out.bound is not None and out.bound <= out.objective + 1e-9


def test_a_failing_child_leaves_the_milp_alone(hard, monkeypatch):
    _g, _budget, sf, x0, _cost = hard
    monkeypatch.setattr(portfolio, "_LATE_SHARE", 10.0)   # its error may come after the limit under load
    # the child raises (bad option): reported, and the MILP's own result returned
    out, details = portfolio.race(sf, x0, time_limit_s=2.0, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options=None, bc_options={"node_limit": 0})
    assert "node_limit" in details["error"] and out.status in (SolveStatus.FEASIBLE, SolveStatus.OPTIMAL)
    # no interpreter to start: the MILP runs alone
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    out, details = portfolio.race(sf, x0, time_limit_s=1.0, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options=None)
    assert "error" in details and "milp" in details and out.x is not None


class _SilentChild:
    """A branch-and-cut child that never reports: records how long ``race`` waits for it."""

    def __init__(self):
        self.started, self.waits, self.closed = time.perf_counter(), [], False
        self.outbox = self.inbox = self
        self.posted = []

    def post(self, objective, x):
        self.posted.append(objective)

    def fetch(self):
        return None

    def poll(self):
        return None

    def wait(self, timeout_s):
        self.waits.append(timeout_s)
        return None

    def close(self):
        self.closed = True


def test_at_the_time_limit_a_late_child_is_not_waited_for(hard):
    """Past the deadline the child gets at most ``_LATE_SHARE`` of the limit to report (it used to get 5 s,
    which broke short limits); then HiGHS's result stands alone."""
    _g, _budget, sf, x0, _cost = hard
    child = _SilentChild()
    out, details = portfolio.race(sf, x0, time_limit_s=1.0, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options=None, child=child)
    assert child.closed and len(child.waits) == 1
    assert child.waits[0] <= 1.0 + portfolio._LATE_SHARE * 1.0
    assert details["error"] == "branch-and-cut did not report" and out.x is not None


def test_combine_takes_the_cheaper_schedule_and_the_higher_bound():
    x1, x2 = np.zeros(3), np.ones(3)
    a = BackendResult(status=SolveStatus.FEASIBLE, x=x1, objective=10.0, bound=7.0, stats={"nodes": 5})
    b = BackendResult(status=SolveStatus.FEASIBLE, x=x2, objective=9.0, bound=6.0, stats={})
    out = portfolio._combine(a, b)
    assert out.objective == 9.0 and out.x is x2 and out.bound == 7.0 and out.status is SolveStatus.FEASIBLE
    none = BackendResult(status=SolveStatus.NO_SOLUTION, x=None, objective=None, bound=8.5, stats={})
    out = portfolio._combine(none, b)
    assert out.objective == 9.0 and out.bound == 8.5
    infeasible = BackendResult(status=SolveStatus.INFEASIBLE, stats={})
    assert portfolio._combine(infeasible, b) is infeasible


def test_auto_picks_the_portfolio_only_with_two_cores(monkeypatch):
    g = linear_graph(8)                    # the LP bound does not prove the warm start: a search runs
    assert solve(g, 4, method="ilp", threads=1).stats["search"] == "milp"
    assert solve(g, 4, method="ilp", threads=2).stats["search"] == "portfolio"
    assert solve(g, 4, method="ilp", backend="cbc").stats["search"] == "milp"
    monkeypatch.setattr(portfolio, "cpu_count", lambda: 1)
    assert solve(g, 4, method="ilp").stats["search"] == "milp"
    monkeypatch.setattr(portfolio, "cpu_count", lambda: 2)
    res = solve(g, 4, method="ilp")
    assert res.stats["search"] == "portfolio" and res.status is SolveStatus.OPTIMAL and res.objective == 26
    assert res.stats["portfolio"]["winner"] in ("milp", "branch-and-cut", "quick branch-and-cut")
    with pytest.raises(ValueError, match="backend='highs' and formulation='strong'"):
        solve(g, 4, method="ilp", search="portfolio", formulation="paper")


def test_mailbox_hands_over_each_post_once(tmp_path):
    box = portfolio._Mailbox(str(tmp_path / "box.npy"))
    reader = portfolio._Mailbox(box.path)
    assert reader.fetch() is None                     # nothing posted yet
    box.post(12.5, np.array([0.0, 1.0, 1.0]))
    got = reader.fetch()
    assert got[0] == 12.5 and got[1].tolist() == [0.0, 1.0, 1.0]
    assert reader.fetch() is None                     # the same post is not handed over twice
    box.post(11.0, np.array([1.0, 0.0, 0.0]))
    assert reader.fetch()[0] == 11.0
    assert not list(tmp_path.glob("*.part"))          # written under a temporary name, then renamed


@pytest.fixture(scope="module")
def chain8():
    """linear(8) at 4 units: the strong program and REVOLVE's schedule (cost 26, the optimum)."""
    g, budget = linear_graph(8), 4
    sf = build_milp(g, budget, "strong")
    best = solve(g, budget, method="griewank-logn")
    assert best.objective == 26
    return g, budget, sf, sf.encode(best.schedule)


def test_highs_takes_a_supplied_schedule(chain8):
    """With presolve off, a schedule supplied through the user-solution callback becomes HiGHS's incumbent:
    the primal bound it polls with next is that schedule's objective."""
    from remat_core.solvers.backends.highs import solve as highs_solve

    _g, _budget, sf, x = chain8
    seen = []

    def supply(primal_bound):
        seen.append(primal_bound)
        return x if primal_bound > 26 - sf.objective_offset + 1e-9 else None

    out = highs_solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                      options={"presolve": "off"}, supply=supply)
    assert out.status is SolveStatus.OPTIMAL and out.objective + sf.objective_offset == pytest.approx(26)
    assert seen[0] == np.inf and seen[1] == 26 - sf.objective_offset, seen   # taken at once, not found later


def test_highs_reports_its_improving_schedules(chain8):
    from remat_core.solvers.backends.highs import solve as highs_solve

    g, budget, sf, _x = chain8
    found = []
    out = highs_solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                      report=lambda objective, x: found.append((objective, x)))
    assert out.status is SolveStatus.OPTIMAL and found
    assert [o for o, _ in found] == sorted((o for o, _ in found), reverse=True)   # each one cheaper
    for objective, x in found:
        sim = simulate(g, sf.decode(x))
        assert sim.peak_memory_bytes <= budget and sim.total_cost == pytest.approx(objective + sf.objective_offset)
    assert found[-1][0] == pytest.approx(out.objective)


def test_branch_and_cut_shares_what_it_finds_and_takes_what_it_receives(chain8):
    from remat_core.solvers.branch_and_cut import branch_and_cut

    g, budget, sf, x_opt = chain8
    rotor = solve(g, budget, method="rotor")             # fits, costs 44
    shared = []
    out = branch_and_cut(sf, start=sf.encode(rotor.schedule), share=lambda o, x: shared.append((o, x.copy())))
    assert out.status is SolveStatus.OPTIMAL and out.objective + sf.objective_offset == pytest.approx(26, abs=1e-6)
    assert shared and shared[-1][0] + sf.objective_offset == pytest.approx(26, abs=1e-6)   # not the start itself
    for objective, x in shared:
        cost = simulate(g, sf.decode(x)).total_cost
        assert cost == pytest.approx(objective + sf.objective_offset) and cost < 44
    # a schedule received at the first node becomes the incumbent: nothing cheaper is left to share
    polls, shared = [], []
    out = branch_and_cut(sf, start=sf.encode(rotor.schedule), share=lambda o, x: shared.append(o),
                         receive=lambda: polls.append(1) or (x_opt if len(polls) == 1 else None))
    assert out.status is SolveStatus.OPTIMAL and out.stats["received_incumbents"] == 1 and shared == []


def test_the_worker_exchanges_schedules_through_the_mailboxes(chain8, tmp_path):
    """The child process's main, run here: it takes the schedule posted for it and posts what it finds."""
    import pickle

    from remat_core.solvers import _portfolio_worker

    g, budget, sf, x_opt = chain8
    job, result = tmp_path / "job.pkl", tmp_path / "result.pkl"
    with open(job, "wb") as f:
        pickle.dump(dict(sf=sf, start=None, deadline_epoch=None, mip_rel_gap=1e-4, options={}), f)
    assert _portfolio_worker.main(["worker", str(job), str(result)]) == 0
    status, out = pickle.load(open(result, "rb"))
    assert status == "ok" and out.status is SolveStatus.OPTIMAL and out.stats["received_incumbents"] == 0
    posted = portfolio._Mailbox(str(tmp_path / portfolio._TO_MILP)).fetch()   # its last find, for HiGHS
    assert posted is not None and posted[0] + sf.objective_offset == pytest.approx(26, abs=1e-6)
    assert simulate(g, sf.decode(posted[1])).peak_memory_bytes <= budget
    # a schedule posted for it before it starts: taken at its first node
    (tmp_path / portfolio._TO_MILP).unlink()
    portfolio._Mailbox(str(tmp_path / portfolio._TO_BC)).post(26 - sf.objective_offset, x_opt)
    assert _portfolio_worker.main(["worker", str(job), str(result)]) == 0
    status, out = pickle.load(open(result, "rb"))
    assert status == "ok" and out.status is SolveStatus.OPTIMAL and out.stats["received_incumbents"] == 1
    assert not (tmp_path / portfolio._TO_MILP).exists()    # nothing cheaper than what it received


def test_without_a_warm_start_both_searches_run():
    """No schedule to start from: the portfolio still runs branch-and-cut beside HiGHS (its dives look for a
    schedule); on a budget whose LP is feasible but that holds no schedule, HiGHS proves it."""
    res = solve(linear_graph(8), 4, method="ilp", search="portfolio", warm_start=False)
    assert res.stats["search"] == "portfolio" and res.status is SolveStatus.OPTIMAL and res.objective == 26
    base = random_training_graph(4, 2, seed=5)
    g = base.replace(cost=base.cost * 1.37 + 0.11)
    budget = (2 * g.min_budget_lower_bound_bytes() + checkpoint_all_peak_bytes(g)) // 3
    res = solve(g, budget, method="ilp", search="portfolio")
    assert res.status is SolveStatus.INFEASIBLE and res.stats["search"] == "portfolio"
    assert res.stats["portfolio"]["winner"] == "milp"


def _short_search_clock_frozen(monkeypatch) -> list:
    """While ``race``'s short search runs, the portfolio's clock (its soft time, the child's delay) stands
    still at the search's start, so that what a test checks depends on the nodes searched, not on how fast
    this machine runs them under load; elsewhere it is the real clock (the waits for the child end).
    Returns the keywords of every ``branch_and_cut`` call made in this process."""
    from remat_core.solvers import branch_and_cut as bc_module

    calls, frozen = [], []
    real_bc = bc_module.branch_and_cut

    def recorded(*a, **k):
        calls.append(k)
        frozen.append(time.perf_counter())
        try:
            return real_bc(*a, **k)
        finally:
            frozen.clear()

    monkeypatch.setattr(bc_module, "branch_and_cut", recorded)
    monkeypatch.setattr(portfolio, "time", type("Clock", (), {
        "perf_counter": staticmethod(lambda: frozen[0] if frozen else time.perf_counter()),
        "time": staticmethod(time.time)}))
    return calls


def test_a_short_search_in_this_process_comes_first(chain8, monkeypatch):
    """While the child starts, branch-and-cut runs here for a short time: linear(8) at 4 from rotor's schedule
    (44) is proved there; a search it cannot finish (linear(12) at 5) hands its cheapest schedule on.

    Issue 36: this asserted a race against the clock (the proof within 0.5 s, the search's seconds) and
    failed on a loaded machine. The portfolio's clock stands still during the short search and the search's
    own limit is long, so the proof depends on nodes only; its time limit is checked as the argument given."""
    g, budget, sf, _x = chain8
    calls = _short_search_clock_frozen(monkeypatch)
    monkeypatch.setattr(portfolio, "_QUICK_S", 60.0)
    rotor = solve(g, budget, method="rotor")
    out, details = portfolio.race(sf, sf.encode(rotor.schedule), time_limit_s=120, mip_rel_gap=1e-4, threads=None,
                                  verbose=False, milp_options=None)
    assert details["winner"] == "quick branch-and-cut" and "milp" not in details
    assert out.status is SolveStatus.OPTIMAL and out.objective + sf.objective_offset == pytest.approx(26, abs=1e-6)
    assert len(calls) == 1 and calls[0]["time_limit_s"] == min(60.0, portfolio._QUICK_SHARE * 120)
    # a search the short one cannot finish within its nodes: its schedule goes on to HiGHS and the child
    monkeypatch.setattr(portfolio, "_QUICK_NODES", 3)
    g12 = linear_graph(12)
    sf12 = _strengthen(build_milp(g12, 5, "strong"), "highs", 1, None)[0]
    start = solve(g12, 5, method="rotor")
    out, details = portfolio.race(sf12, sf12.encode(start.schedule), time_limit_s=120, mip_rel_gap=1e-4,
                                  threads=None, verbose=False, milp_options=None)
    assert details["quick"]["status"] in ("branch-and-cut: node limit", "branch-and-cut: time limit")
    assert details["quick"]["nodes"] <= 3
    assert details["winner"] in ("milp", "branch-and-cut")
    assert out.status is SolveStatus.OPTIMAL and out.objective + sf12.objective_offset == pytest.approx(37, abs=1e-6)


def test_race_starts_its_child_only_when_the_short_search_outlasts_the_delay(chain8, monkeypatch):
    """``race(child=True)`` spawns the branch-and-cut child once its short search has run
    ``_CHILD_DELAY_S`` without a proof: a gap closed sooner costs no interpreter; one closed later, or not
    at all, gets the child as before (from the short search's schedule when that is cheaper).

    Issue 36: the portfolio's clock stands still during the short search (a delay of 30 s never passes, one
    of 0 s has passed at the first node), which ends by its node limit, not its seconds: load changes nothing."""
    g, budget, sf, _x = chain8
    start = sf.encode(solve(g, budget, method="rotor").schedule)   # 44: the short search proves 26
    spawned = []
    real = portfolio.start_child

    def counting(*args, **kwargs):
        spawned.append(kwargs.get("time_limit_s"))
        return real(*args, **kwargs)

    monkeypatch.setattr(portfolio, "start_child", counting)
    _short_search_clock_frozen(monkeypatch)
    monkeypatch.setattr(portfolio, "_QUICK_S", 60.0)
    monkeypatch.setattr(portfolio, "_CHILD_DELAY_S", 30.0)
    out, details = portfolio.race(sf, start, time_limit_s=120, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options=None)
    assert details["winner"] == "quick branch-and-cut" and spawned == []
    monkeypatch.setattr(portfolio, "_CHILD_DELAY_S", 0.0)
    out, details = portfolio.race(sf, start, time_limit_s=120, mip_rel_gap=1e-4, threads=None, verbose=False,
                                  milp_options=None)
    assert details["winner"] == "quick branch-and-cut" and len(spawned) == 1 and 0 < spawned[0] <= 120
    # a search the short one cannot finish (3 nodes): the child is spawned at its end and the race goes on
    monkeypatch.setattr(portfolio, "_CHILD_DELAY_S", 30.0)
    monkeypatch.setattr(portfolio, "_QUICK_NODES", 3)
    g12 = linear_graph(12)
    sf12 = _strengthen(build_milp(g12, 5, "strong"), "highs", 1, None)[0]
    out, details = portfolio.race(sf12, sf12.encode(solve(g12, 5, method="rotor").schedule), time_limit_s=120,
                                  mip_rel_gap=1e-4, threads=None, verbose=False, milp_options=None)
    assert len(spawned) == 2 and "error" not in details and details["winner"] in ("milp", "branch-and-cut")
    assert out.status is SolveStatus.OPTIMAL and out.objective + sf12.objective_offset == pytest.approx(37, abs=1e-6)


class _StopAfterShortSearch(Exception):
    pass


def _short_search(monkeypatch, sf, start, clock_step_s=None, **constants):
    """Run ``race`` up to the end of its short search, with ``constants`` set in ``portfolio``, and return
    that search's result and the keywords it was called with. No child starts, and HiGHS is not run.

    With ``clock_step_s``, the portfolio's clock (the one its short search's soft time and floor cap are
    measured on) advances by that much at each reading instead of with the machine's load."""
    from remat_core.solvers import branch_and_cut as bc_module
    from remat_core.solvers.backends import highs as highs_module

    for name, value in constants.items():
        monkeypatch.setattr(portfolio, name, value)
    if clock_step_s is not None:
        ticks = iter(range(1, 10**9))
        monkeypatch.setattr(portfolio, "time", type("Clock", (), {
            "perf_counter": staticmethod(lambda: next(ticks) * clock_step_s), "time": staticmethod(time.time)}))
    got = []
    real = bc_module.branch_and_cut
    monkeypatch.setattr(bc_module, "branch_and_cut", lambda *a, **k: got.append((real(*a, **k), k)) or got[-1][0])
    monkeypatch.setattr(portfolio, "start_child", lambda *a, **k: None)

    def stop(*a, **k):
        raise _StopAfterShortSearch

    monkeypatch.setattr(highs_module, "solve", stop)
    with pytest.raises(_StopAfterShortSearch):
        portfolio.race(sf, start, time_limit_s=120, mip_rel_gap=1e-4, threads=None, verbose=False, milp_options=None)
    assert len(got) == 1
    return got[0]


def test_the_short_search_runs_its_node_floor_even_when_its_time_is_spent(monkeypatch):
    """The short search stops at its soft time only after ``_QUICK_MIN_NODES`` nodes (a proof depends on
    nodes, not seconds) or ``_QUICK_FLOOR_S`` more, and at ``_QUICK_S`` at the latest. The portfolio's clock
    is simulated (each reading a quarter second later), so what is checked does not depend on the load."""
    g = linear_graph(12)
    sf = _strengthen(build_milp(g, 5, "strong"), "highs", 1, None)[0]
    start = sf.encode(solve(g, 5, method="rotor").schedule)
    spent = dict(_CHILD_DELAY_S=0.0, _CHILD_READY_S=0.0, _QUICK_MIN_S=0.0)   # the soft time is 0: spent at once
    for floor in (1, 6):
        quick, _ = _short_search(monkeypatch, sf, start, clock_step_s=0.25, _QUICK_MIN_NODES=floor,
                                 _QUICK_FLOOR_S=60.0, _QUICK_S=60.0, **spent)
        assert quick.stats["nodes"] == floor, quick.stats
        assert quick.stats["backend_status"] == "branch-and-cut: stopped by the caller"
    # the floor runs at most _QUICK_FLOOR_S past the soft time (here 0), then the search stops short of its
    # nodes: the clock reads 0.25 s per node, so the third check (0.75 s >= 0.6 s) stops it after 2 nodes
    quick, _ = _short_search(monkeypatch, sf, start, clock_step_s=0.25, _QUICK_MIN_NODES=10**6,
                             _QUICK_FLOOR_S=0.6, _QUICK_S=60.0, **spent)
    assert quick.stats["backend_status"] == "branch-and-cut: stopped by the caller"
    assert quick.stats["nodes"] == 2, quick.stats
    # _QUICK_S (within _QUICK_SHARE of the limit) is the short search's own time limit, floor or not
    quick, kwargs = _short_search(monkeypatch, sf, start, _QUICK_MIN_NODES=10**6, _QUICK_FLOOR_S=60.0,
                                  _QUICK_S=0.2, **spent)
    assert kwargs["time_limit_s"] == 0.2
    assert quick.stats["backend_status"] == "branch-and-cut: time limit"
    assert quick.stats["nodes"] < 10**6


def test_ilp_starts_the_child_before_rens_only_when_rens_runs(monkeypatch):
    """The child's start overlaps RENS on a program that is not small; when RENS is skipped (start one unit
    above the bound) or the program is small, ``race`` starts it, and only if its short search needs long
    enough."""
    from remat_core.solvers import ilp as ilp_module

    early = []
    real = portfolio.start_child
    monkeypatch.setattr(portfolio, "start_child", lambda *a, **k: early.append(1) or real(*a, **k))
    g = random_training_graph(5, 2, seed=5)
    lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
    budget = int(round(lo + 0.3 * (hi - lo)))   # 121 from a start of 121 over a bound of 120: RENS is skipped
    monkeypatch.setattr(portfolio, "_CHILD_DELAY_S", 30.0)
    res = solve(g, budget, method="ilp", search="portfolio")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 121
    assert "skipped" in res.stats["rens"] and early == []
    monkeypatch.setattr(ilp_module, "_rens_skipped", lambda *args: False)
    res = solve(g, budget, method="ilp", search="portfolio")   # 342 integer columns: small
    assert res.status is SolveStatus.OPTIMAL and res.objective == 121
    assert "tries" in res.stats["rens"] and early == [] and res.stats["rens"]["child_beside"] is False
    monkeypatch.setattr(ilp_module, "_SMALL_PROGRAM_INTEGER", 0)
    res = solve(g, budget, method="ilp", search="portfolio")
    assert res.status is SolveStatus.OPTIMAL and res.objective == 121
    assert "tries" in res.stats["rens"] and early == [1] and res.stats["rens"]["child_beside"] is True


def test_highs_runs_without_its_rens_only_beside_a_child(monkeypatch):
    """Beside a branch-and-cut child, HiGHS's RENS (``ilp`` ran its own already) and its root reduced-cost
    heuristic are off unless ``solver_options`` sets them; alone (the child failed to start, or
    ``search="milp"``) it keeps them."""
    from remat_core.solvers import ilp as ilp_module
    from remat_core.solvers.backends import highs

    seen = []
    real = highs.solve

    def recording(*args, **kwargs):
        seen.append(dict(kwargs.get("options") or {}))
        return real(*args, **kwargs)

    monkeypatch.setattr(highs, "solve", recording)
    monkeypatch.setattr(_deadline, "MILP_LIMIT_S_PER_NONZERO", 0.0)   # in this process, where HiGHS is recorded
    off = ilp_module._HIGHS_PORTFOLIO_DEFAULTS
    assert set(off) == {"mip_heuristic_run_rens", "mip_heuristic_run_root_reduced_cost"} and not any(off.values())
    g = linear_graph(12)   # at 5 units: the short search does not prove it, so HiGHS starts
    res = solve(g, 5, method="ilp", search="portfolio", time_limit_s=2.0)
    assert res.stats["portfolio"]["milp_options"] == {**off, "mip_pscost_minreliable": 0}
    assert seen[-1] == res.stats["solver_options"] == res.stats["portfolio"]["milp_options"]
    res = solve(g, 5, method="ilp", search="portfolio", time_limit_s=2.0,
                solver_options={"mip_heuristic_run_rens": True})
    assert seen[-1] == {**off, "mip_heuristic_run_rens": True, "mip_pscost_minreliable": 0}
    res = solve(g, 5, method="ilp", search="milp", time_limit_s=2.0)
    assert seen[-1] == res.stats["solver_options"] == {"mip_pscost_minreliable": 0}
    # no interpreter for the child: HiGHS runs alone, with its heuristics
    sf = _strengthen(build_milp(g, 5, "strong"), "highs", 1, None)[0]
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    out, details = portfolio.race(sf, sf.encode(solve(g, 5, method="rotor").schedule), time_limit_s=1.0,
                                  mip_rel_gap=1e-4, threads=None, verbose=False, milp_options={"presolve": "on"},
                                  milp_options_beside_child=off)
    assert "error" in details and seen[-1] == details["milp_options"] == {"presolve": "on"}


def test_the_short_search_rounds_its_nodes_lp_points(monkeypatch):
    """``_QUICK_NODE_ROUNDING``: from the rounded root point (213), the short search proves random(10 layers,
    seed 5) at 48 (212) with an incumbent found by rounding, in fewer nodes than without."""
    from remat_core.solvers import ilp as ilp_module

    g, budget = random_training_graph(10, 2, seed=5), 48
    sf, _bound, stats = _strengthen(build_milp(g, budget, "strong"), "highs", 1, None)
    schedule, cost = ilp_module._rounded(g, sf, stats["x"], budget)
    assert cost == 213
    nodes = _short_search_nodes(monkeypatch, sf, sf.encode(schedule), 212, "_QUICK_NODE_ROUNDING", "rounded_incumbents")
    assert nodes[True] < nodes[False] / 2, nodes


def test_the_short_search_separates_cover_rows_at_its_nodes(monkeypatch):
    """``_QUICK_COVER_CUTS``: given the time, the short search proves random(5 layers, seed 4) at 44 from the
    optimum (169) with cover rows separated below the root, in fewer nodes than without them."""
    g, budget = random_training_graph(5, 2, seed=4), 44
    sf = _strengthen(build_milp(g, budget, "strong"), "highs", 1, None)[0]
    start = sf.encode(solve(g, budget, method="ilp").schedule)
    nodes = _short_search_nodes(monkeypatch, sf, start, 169, "_QUICK_COVER_CUTS", "cover_cut_rows")
    assert nodes[True] < nodes[False] / 2, nodes


def _short_search_nodes(monkeypatch, sf, start, optimum, switch, stat):
    """The short search's nodes to prove ``optimum`` from ``start`` with the module switch ``switch`` on (as
    shipped) and off, given all the time it needs; the statistic ``stat`` is positive exactly when it is on."""
    assert getattr(portfolio, switch) is True   # as shipped
    monkeypatch.setattr(portfolio, "_CHILD_READY_S", math.inf)   # the short search runs to its _QUICK_S
    monkeypatch.setattr(portfolio, "_QUICK_S", 60.0)
    nodes = {}
    for on in (True, False):
        monkeypatch.setattr(portfolio, switch, on)
        out, details = portfolio.race(sf, start, time_limit_s=600, mip_rel_gap=1e-4, threads=None,
                                      verbose=False, milp_options=None, child=False)
        assert details["winner"] == "quick branch-and-cut", details
        assert out.status is SolveStatus.OPTIMAL
        assert out.objective + sf.objective_offset == pytest.approx(optimum, abs=1e-6)
        assert (details["quick"][stat] > 0) is on
        nodes[on] = details["quick"]["nodes"]
    return nodes
