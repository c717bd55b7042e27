"""Two searches at once: HiGHS's MILP in this process, branch-and-cut in a child process; the first proof wins.

Neither search dominates the other (``docs/formulation.rst``, section
*Branch-and-cut*): ours proves some chains several times faster than HiGHS
and fails on instances HiGHS proves in seconds. Run side by side on two
cores, the race takes about the time of the faster one on each instance.
When branch-and-cut proves the optimum first, HiGHS is interrupted through
its MIP callback; when HiGHS finishes first, the child is killed. At a time
limit, the cheaper incumbent and the higher bound of the two (both bounds
are valid for the same program) are returned.

Before HiGHS starts, a short branch-and-cut runs in this process while the
child's interpreter starts; it proves small gaps at once, or hands its
cheapest schedule to both searches. The two searches then pass each other
their schedules while they run (:class:`_Mailbox`): HiGHS's improving
solutions tighten branch-and-cut's cutoff, and branch-and-cut's reach HiGHS
through its user-solution callback. (With its presolve on, HiGHS drops an
outside solution that its reductions removed from the presolved program;
with presolve off it takes every one, but it was slower on the benchmark
instances, so presolve stays on: the tuning history in
``benchmarks/experiments/README.md``.) Without a schedule to start from, branch-and-cut still runs:
its dives look for one while HiGHS proves infeasibility if there is none.
Beside the child, HiGHS runs without its own RENS (``ilp`` searched that
neighbourhood already) and without its root reduced-cost heuristic
(``ilp._HIGHS_PORTFOLIO_DEFAULTS``).

The child is a fresh interpreter (``python -m remat_core.solvers._portfolio_worker``)
rather than a ``multiprocessing`` process: forking a process that runs solver
threads is unsafe, and the *spawn* start method re-imports the caller's main
script, which fails in scripts without an ``if __name__ == "__main__"`` guard.
The program travels to it as a pickle in a temporary directory. The child
and the directory go with this process however it ends (exception, ``SIGINT``,
``SIGTERM``, ``SIGKILL``: :mod:`~remat_core.solvers._lifeline`).
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from ..formulation.standard_form import StandardForm
from ..schedule import SolveStatus
from .backends import BackendResult

__all__ = ["race", "cpu_count"]

log = logging.getLogger("remat_core.ilp")

_KILL_GRACE_S = 5.0   # how long the child may take to report once it has proved (or with no time limit)
#: At a time limit, the child may report this share of the limit past the deadline (its branch-and-cut stops
#: at the deadline by itself, between node LPs); later it is killed and HiGHS's result stands alone (the
#: schedules the child found reached HiGHS already), so that the limit holds within its 10% slack.
_LATE_SHARE = 0.03
_WAIT_POLL_S = 0.005
#: Before HiGHS starts, branch-and-cut searches in this process while the child's interpreter starts (on the
#: other core): at most this many nodes (None: no limit), seconds, and share of the time limit. A small gap
#: above a good start is often closed there in a few nodes, before HiGHS's root work would have finished;
#: otherwise its cheapest schedule starts both searches. A node limit cost proofs that the short search
#: would have found (section *portfolio-tuning* of benchmarks/experiments/README.md, *short search <= 50
#: nodes*).
_QUICK_NODES, _QUICK_S, _QUICK_SHARE = None, 0.5, 0.25
#: The child's interpreter is ready about 0.26 s after it starts (its imports and a job of a few
#: milliseconds, measured); once it is, the short search here only delays HiGHS, so it gets what is left of
#: this time, and at least _QUICK_MIN_S (``ilp`` starts the child before RENS, which may have used that time
#: already). A shorter time lost short-search proofs (tuning history in benchmarks/experiments/README.md).
_CHILD_READY_S, _QUICK_MIN_S = 0.4, 0.1
#: ... but it stops there only once it has searched this many nodes, or run _QUICK_FLOOR_S past that time
#: (and within _QUICK_S): whether a proof is within reach depends on nodes, not seconds, and a node takes from
#: a few to tens of milliseconds with the graph's size and the machine's speed. Where no proof comes, the floor
#: only delays HiGHS, hence the cap. Section *portfolio-tuning* of benchmarks/experiments/README.md times both
#: (*no node floor*, *node floor without its cap*).
_QUICK_MIN_NODES, _QUICK_FLOOR_S = 20, 0.15
#: When ``race`` starts the child itself (``ilp`` starts it before RENS, and without RENS leaves it to
#: ``race``), it does so once the short search has run this long without a proof: most small gaps are closed
#: sooner than an interpreter is spawned and reaped (1-3 ms of this process's time, 0.26 s of the other core's).
_CHILD_DELAY_S = 0.02
#: The short search separates lifted cover inequalities at every node as well as path inequalities (besides
#: keeping the root's cover rows; ``branch_and_cut``'s ``cover_cuts``): its gaps are small, and there they
#: close in far fewer nodes (section *portfolio-tuning* of benchmarks/experiments/README.md, *no cover cuts in
#: the short search*). The child's long search keeps neither (``cover_rows``).
_QUICK_COVER_CUTS = True
#: ... and rounds every node's LP point into a schedule (``branch_and_cut``'s ``node_rounding``, the threshold
#: sweep only): a better incumbent early cuts the rest of a short search (section *portfolio-tuning*, *no node
#: rounding in the short search*). Randomized draws besides cost more per node than they saved.
_QUICK_NODE_ROUNDING = True
_PROOFS = (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE)


def cpu_count() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not on Linux
        return os.cpu_count() or 1


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Mailbox:
    """One file through which one search hands its latest schedule to the other.

    ``post`` replaces the file atomically (a reader never sees half of it);
    ``fetch`` returns ``(objective, x)`` when the file changed since the last
    fetch, else None, at the cost of one ``stat`` call.
    """

    def __init__(self, path: str):
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._posted = 0

    def post(self, objective: float, x: np.ndarray) -> None:
        self._posted += 1
        part = f"{self.path}.{self._posted}.part"
        with open(part, "wb") as f:
            np.save(f, np.concatenate([[float(objective)], np.asarray(x, dtype=np.float64)]))
        os.replace(part, self.path)

    def fetch(self) -> tuple[float, np.ndarray] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        stamp = (st.st_mtime_ns, st.st_ino)
        if stamp == self._seen:
            return None
        try:
            with open(self.path, "rb") as f:
                data = np.load(f)
        except (OSError, ValueError, EOFError):   # replaced while we opened it: read it next time
            return None
        self._seen = stamp
        return float(data[0]), data[1:]


_TO_MILP, _TO_BC = "to_milp.npy", "to_branch_and_cut.npy"   # mailbox file names in the job directory


class _Child:
    """The branch-and-cut process: started at once, polled without blocking, always reaped."""

    def __init__(self, sf: StandardForm, start: np.ndarray | None, deadline_epoch: float | None,
                 mip_rel_gap: float | None, options: dict[str, Any]):
        self.dir = tempfile.mkdtemp(prefix="remat-portfolio-")
        job, self.result = os.path.join(self.dir, "job.pkl"), os.path.join(self.dir, "result.pkl")
        self.inbox, self.outbox = _Mailbox(os.path.join(self.dir, _TO_MILP)), _Mailbox(os.path.join(self.dir, _TO_BC))
        with open(job, "wb") as f:
            pickle.dump(dict(sf=sf, start=start, deadline_epoch=deadline_epoch, mip_rel_gap=mip_rel_gap,
                             options=options), f, protocol=pickle.HIGHEST_PROTOCOL)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_package_root()] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        for var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"   # one core is its share
        self.stderr = open(os.path.join(self.dir, "stderr.txt"), "wb")
        self.started = time.perf_counter()
        self.proc = None
        try:   # the child dies with this process however that ends, and removes self.dir then (_lifeline)
            self.proc = subprocess.Popen([sys.executable, "-m", "remat_core.solvers._portfolio_worker", job,
                                          self.result, str(os.getpid())],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                         env=env)
        except BaseException:
            self.close()
            raise
        self.outcome: tuple[str, Any] | None = None   # ("ok", BackendResult) or ("error", message)

    def _done(self) -> bool:
        # the result is written atomically before the child exits; its interpreter's exit takes another
        # 0.1 s or more, which a time limit need not wait for
        return os.path.exists(self.result) or self.proc.poll() is not None

    def poll(self) -> tuple[str, Any] | None:
        """The child's outcome once it has posted it or exited, else None (never blocks)."""
        if self.outcome is None and self._done():
            self._collect()
        return self.outcome

    def wait(self, timeout_s: float) -> tuple[str, Any] | None:
        """The child's outcome once it has posted it or exited, waiting at most ``timeout_s``; else None."""
        if self.outcome is None:
            end = time.perf_counter() + max(timeout_s, 0.0)
            while not self._done():
                if time.perf_counter() >= end:
                    return None
                time.sleep(_WAIT_POLL_S)
            self._collect()
        return self.outcome

    def _collect(self) -> None:
        try:
            with open(self.result, "rb") as f:
                self.outcome = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            self.stderr.flush()
            with open(self.stderr.name, "rb") as f:
                tail = f.read()[-2000:].decode(errors="replace")
            self.outcome = ("error", f"exit code {self.proc.returncode}: {tail.strip() or 'no output'}")

    def close(self) -> None:
        """Kill the child if it still runs and remove its files (again: nothing more to do)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _combine(milp: BackendResult, bc: BackendResult | None) -> BackendResult:
    """The better incumbent and the higher bound of two searches over the same program."""
    if bc is None:
        return milp
    if milp.status is SolveStatus.INFEASIBLE:
        return milp
    have = [r for r in (milp, bc) if r.x is not None and r.objective is not None]
    best = min(have, key=lambda r: r.objective) if have else None
    bounds = [r.bound for r in (milp, bc) if r.bound is not None]
    bound = max(bounds) if bounds else None
    if best is not None and bound is not None:
        bound = min(bound, best.objective)
    status = SolveStatus.FEASIBLE if best is not None else SolveStatus.NO_SOLUTION
    return BackendResult(status=status, x=None if best is None else best.x,
                         objective=None if best is None else best.objective, bound=bound, stats=dict(milp.stats))


def start_child(sf: StandardForm, start: np.ndarray | None, *, time_limit_s: float | None,
                mip_rel_gap: float | None, bc_options: dict[str, Any] | None = None,
                details: dict[str, Any] | None = None) -> _Child | None:
    """Start branch-and-cut on ``sf`` in a child process now (its interpreter needs 0.25-0.3 s to be ready).

    ``ilp`` starts it before RENS, so that both overlap with the child's
    start; schedules found meanwhile reach it through ``child.outbox.post``.
    Returns None (and notes why in ``details["error"]``) if no child could be
    started; the caller must ``close()`` a child it got.
    """
    deadline_epoch = None if time_limit_s is None else time.time() + float(time_limit_s)
    try:
        return _Child(sf, start, deadline_epoch, mip_rel_gap, dict(bc_options or {}))
    except OSError as exc:   # no interpreter to start, no temporary directory
        log.warning("ilp: could not start branch-and-cut beside the MILP (%s); the MILP runs alone", exc)
        if details is not None:
            details["error"] = str(exc)
        return None


def race(sf: StandardForm, start: np.ndarray | None, *, time_limit_s: float | None, mip_rel_gap: float | None,
         threads: int | None, verbose: bool, milp_options: dict[str, Any] | None,
         bc_options: dict[str, Any] | None = None, child: _Child | None | bool = True,
         milp_options_beside_child: dict[str, Any] | None = None,
         ) -> tuple[BackendResult, dict[str, Any]]:
    """HiGHS's MILP on ``sf`` here and branch-and-cut from ``start`` in a child process, until one proves.

    ``child``: one :func:`start_child` already started (its deadline then
    stands), True to start one here (once the short search has run
    :data:`_CHILD_DELAY_S` without a proof), False for none (HiGHS alone after the
    short search). It is closed on return either way.
    ``milp_options_beside_child`` are HiGHS options added to ``milp_options``
    (which win) only when HiGHS starts with the child running beside it.

    While the child starts, a short branch-and-cut runs here
    (:data:`_QUICK_NODES`, :data:`_QUICK_S`, until :data:`_CHILD_READY_S`
    after the child started but at least :data:`_QUICK_MIN_S` and
    :data:`_QUICK_MIN_NODES` nodes, these at most :data:`_QUICK_FLOOR_S`
    longer; lifted cover rows separated and the LP point rounded at every
    node, :data:`_QUICK_COVER_CUTS`, :data:`_QUICK_NODE_ROUNDING`); if it proves, that is the
    result (``winner`` ``"quick branch-and-cut"``), else its cheapest
    schedule is the start of both searches.

    Returns the result (the prover's, or both combined at a time limit) and
    ``details``: ``winner`` (``"milp"``, ``"branch-and-cut"``, ``"quick
    branch-and-cut"`` or None), each search's (``"quick"``, ``"milp"``,
    ``"branch-and-cut"``) status, seconds and nodes, and how many schedules each passed
    to the other (``"to_milp"``, ``"to_branch_and_cut"``; the latter as
    counted by branch-and-cut: the ones cheaper than its own). A child that
    fails (cannot start, raises) only leaves the MILP running alone
    (``details["error"]``).
    """
    from .backends.highs import solve as highs_solve
    from .branch_and_cut import branch_and_cut

    t0 = time.perf_counter()
    deadline_epoch = None if time_limit_s is None else time.time() + float(time_limit_s)
    details: dict[str, Any] = {"winner": None}
    lazy = child is True   # started here, once the short search has run _CHILD_DELAY_S without a proof
    if child is True or child is False:
        child = None

    def spawn() -> None:
        nonlocal child
        if child is None and "error" not in details:
            left = None if deadline_epoch is None else max(deadline_epoch - time.time(), 0.05)
            child = start_child(sf, start, time_limit_s=left, mip_rel_gap=mip_rel_gap, bc_options=bc_options,
                                details=details)

    try:
        def proved() -> bool:
            got = child.poll() if child is not None else None
            return got is not None and got[0] == "ok" and got[1].status in _PROOFS

        details["to_milp"] = 0
        # the short search ends at hard_s, or at soft_s once it has searched _QUICK_MIN_NODES nodes or run
        # _QUICK_FLOOR_S longer
        hard_s = _QUICK_S if time_limit_s is None else min(_QUICK_S, _QUICK_SHARE * float(time_limit_s))
        soft_s = hard_s
        if child is not None:   # the child is (nearly) ready: search here only while it is not
            soft_s = min(hard_s, max(_QUICK_MIN_S, _CHILD_READY_S - (time.perf_counter() - child.started)))
        elif lazy:
            soft_s = min(hard_s, _CHILD_DELAY_S + _CHILD_READY_S)
        t_quick = time.perf_counter()

        def on_node(nodes: int) -> bool:
            elapsed = time.perf_counter() - t_quick
            if lazy and child is None and elapsed >= _CHILD_DELAY_S:
                spawn()
            return elapsed >= soft_s and (nodes >= _QUICK_MIN_NODES or elapsed >= soft_s + _QUICK_FLOOR_S)

        quick = branch_and_cut(sf, start=start, time_limit_s=hard_s, mip_rel_gap=mip_rel_gap, threads=threads,
                               node_limit=_QUICK_NODES, cover_rows=True, cover_cuts=_QUICK_COVER_CUTS,
                               node_rounding=_QUICK_NODE_ROUNDING, on_node=on_node)
        details["quick"] = {"status": quick.stats.get("backend_status"), "time_s": quick.stats.get("time_s"),
                            "nodes": quick.stats.get("nodes"), "cover_cut_rows": quick.stats.get("cover_cut_rows"),
                            "rounded_incumbents": quick.stats.get("rounded_incumbents")}
        if quick.status in _PROOFS:
            details["winner"] = "quick branch-and-cut"
            return quick, details
        if quick.x is not None and (start is None or quick.objective < float(sf.c @ start) - 1e-9):
            start = quick.x
            if child is not None:
                child.outbox.post(quick.objective, start)   # the child takes it at its first node
        if lazy:
            spawn()   # (from the short search's cheapest schedule when it had not started yet)
        left_s = None if time_limit_s is None else max(float(time_limit_s) - (time.perf_counter() - t0), 0.05)

        def supply(primal_bound: float) -> np.ndarray | None:
            got = child.inbox.fetch()
            if got is None or not got[0] < primal_bound - 1e-9 or got[1].shape != (sf.n_cols,):
                return None
            details["to_milp"] += 1
            return got[1]

        options = dict(milp_options or {})
        if child is not None:
            options = {**(milp_options_beside_child or {}), **options}
        details["milp_options"] = options
        milp = highs_solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                           time_limit_s=left_s, mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose,
                           start=start, options=options or None,
                           interrupt=proved if child else None, supply=supply if child else None,
                           report=child.outbox.post if child else None)
        details["milp"] = {"status": milp.stats.get("backend_status"), "time_s": time.perf_counter() - t0,
                           "nodes": milp.stats.get("nodes")}
        if milp.status in _PROOFS or child is None:
            details["winner"] = "milp" if milp.status in _PROOFS else None
            return milp, details
        # interrupted because the child proved, or stopped at the time limit: the child then stops about as soon
        if deadline_epoch is None:
            wait_s = _KILL_GRACE_S
        else:
            wait_s = max(deadline_epoch - time.time(), 0.0) + min(_KILL_GRACE_S, _LATE_SHARE * float(time_limit_s))
        got = child.wait(wait_s)
        if got is None or got[0] != "ok":
            details["error"] = "branch-and-cut did not report" if got is None else got[1]
            if got is not None:
                log.warning("ilp: branch-and-cut beside the MILP failed: %s", got[1])
            return milp, details
        bc = got[1]
        details["branch_and_cut"] = {"status": bc.stats.get("backend_status"), "time_s": bc.stats.get("time_s"),
                                     "nodes": bc.stats.get("nodes")}
        details["to_branch_and_cut"] = bc.stats.get("received_incumbents", 0)
        if bc.status in _PROOFS:
            details["winner"] = "branch-and-cut"
            return bc, details
        return _combine(milp, bc), details
    finally:
        if child is not None:
            child.close()
