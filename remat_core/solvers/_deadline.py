"""Run a method in a child process that is killed at a deadline, so that a time limit holds.

Building a large program, HiGHS's presolve and the rounding loops cannot be
interrupted from inside at an arbitrary point: ``ilp`` with ``time_limit_s=2``
ran 60 s on a 353-node graph. :func:`call_with_deadline` runs
``solve(graph, budget, method, **options)`` in a fresh interpreter
(``python -m remat_core.solvers._deadline_worker``, for the reasons
:mod:`~remat_core.solvers.portfolio` gives against ``multiprocessing``) with a
slightly shorter time limit of its own; if the child has not answered by the
deadline, its whole process group (the portfolio's branch-and-cut child
included) is killed and the caller goes on with the schedule it already had.
The child's temporary files live in the job's directory (``TMPDIR`` points
there), which is removed in every case, interrupts included; the child dies
with this process (:mod:`~remat_core.solvers._lifeline`).
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from ..graph import Graph
from ..schedule import RematResult
from ._lifeline import track, untrack

__all__ = ["DeadlineChild", "call_with_deadline", "guarded_solve", "guard", "in_child", "CHILD_STARTUP_S"]

log = logging.getLogger(__name__)

#: Seconds from starting the child to its first line of solver work (the interpreter, numpy, scipy and
#: remat_core's imports): about 0.3 s measured on an idle 2-core machine; more under load.
CHILD_STARTUP_S = 0.6
#: Seconds the child keeps back from its own limit to pickle its result before the parent's deadline.
_CHILD_REPORT_S = 0.15
#: Share of the time left that the child's own limit gets: the solvers overshoot their own limits (the reason for
#: the child), and a child that answers by itself returns its best schedule and bound rather than being killed.
_CHILD_SHARE = 0.85
_POLL_S = 0.02
#: :func:`guarded_solve` kills its child this share of the limit before the limit: killing and reaping a child
#: that holds a large program, and verifying the schedule returned, took the call up to 10.4% past a 2 s limit
#: with two busy loops beside it (U-Net_6, ilp) when the kill came at the limit itself.
_KILL_EARLY_SHARE = 0.03
_ENV_FLAG = "REMAT_DEADLINE_CHILD"


def in_child() -> bool:
    """Whether this process is a deadline child (so a method must not start another one)."""
    return os.environ.get(_ENV_FLAG) == "1"


class DeadlineChild:
    """``solve(graph, budget_bytes, method, **options)`` started in a child process, killed at ``deadline``.

    Start it, do other work meanwhile, then :meth:`wait`; :meth:`close` (also
    called by :meth:`wait`) kills whatever is left and removes the files.
    """

    def __init__(self, method: str, graph: Graph, budget_bytes: int, options: dict[str, Any], deadline: float,
                 time_option: str = "time_limit_s"):
        self.method, self.deadline = method, deadline
        self.folder = tempfile.mkdtemp(prefix="remat-deadline-")
        self.proc: subprocess.Popen | None = None
        self.out = os.path.join(self.folder, "result.pkl")
        self.why = ""
        self._key: int | None = None
        try:
            left = deadline - time.perf_counter()
            child_limit = _CHILD_SHARE * left - CHILD_STARTUP_S - _CHILD_REPORT_S
            if child_limit <= 0.05:
                self.why = f"{method}: not started, {left:.2f} s left is less than a child's start-up"
                return
            opts = dict(options)
            opts[time_option] = child_limit
            job = os.path.join(self.folder, "job.pkl")
            with open(job, "wb") as f:
                pickle.dump({"method": method, "graph": graph, "budget_bytes": int(budget_bytes), "options": opts},
                            f, protocol=pickle.HIGHEST_PROTOCOL)
            child_tmp = os.path.join(self.folder, "tmp")
            os.mkdir(child_tmp)
            env = dict(os.environ, TMPDIR=child_tmp, **{_ENV_FLAG: "1"})
            self.proc = subprocess.Popen([sys.executable, "-m", "remat_core.solvers._deadline_worker", job, self.out,
                                          str(os.getpid())],
                                         env=env, start_new_session=True, stdin=subprocess.DEVNULL)
            self._key = track(self.close)   # SIGTERM to this process kills the child too (_lifeline)
        except BaseException:
            self.close()
            raise

    def wait(self) -> tuple[RematResult | None, str]:
        """The child's verified result, or ``None`` and why (time limit, its error)."""
        try:
            if self.proc is None:
                return None, self.why
            while not os.path.exists(self.out):
                if self.proc.poll() is not None and not os.path.exists(self.out):
                    return None, f"{self.method}: the child process exited with code {self.proc.returncode} without a result"
                if time.perf_counter() >= self.deadline:
                    return None, f"{self.method}: stopped at the time limit"
                time.sleep(_POLL_S)
            with open(self.out, "rb") as f:
                kind, payload = pickle.load(f)
            if kind == "error":
                return None, f"{self.method}: {payload}"
            return payload, ""
        finally:
            self.close()

    def close(self) -> None:
        """Kill the child's process group (if running) and remove the job's files."""
        if self.proc is not None:
            _kill_group(self.proc)
        shutil.rmtree(self.folder, ignore_errors=True)
        if self._key is not None:
            untrack(self._key)
            self._key = None


def call_with_deadline(method: str, graph: Graph, budget_bytes: int, options: dict[str, Any],
                       deadline: float, time_option: str = "time_limit_s") -> tuple[RematResult | None, str]:
    """``solve(graph, budget_bytes, method, **options)`` in a child, killed at ``deadline``.

    Parameters
    ----------
    deadline : float
        Absolute :func:`time.perf_counter` time by which this call returns.
    time_option : str
        The option the child's time limit is passed as (what is left to the
        deadline, less its start-up and report time).

    Returns
    -------
    (RematResult or None, str)
        The child's verified result, or ``None`` with the reason (time limit,
        the child's error).
    """
    return DeadlineChild(method, graph, budget_bytes, options, deadline, time_option).wait()


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the child and everything it started (its own session), then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):   # already gone
            pass
    else:
        try:   # the child is done; anything it left running in its group goes too
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:   # pragma: no cover - SIGKILL is not ignorable
        log.warning("deadline child %d did not exit after SIGKILL", proc.pid)


#: Heuristics the parent runs for its fallback schedule while the child solves (milliseconds on the graphs
#: whose program passes the memory guard); chain-only methods are skipped on other graphs.
FALLBACK_METHODS = ("checkpoint-all", "rotor", "ap-greedy", "linearized-greedy", "linearized-sqrtn", "dtr")
#: Programs with fewer estimated nonzeros than this run in-process: their build and LP take well under a
#: second, and tests reach into the solvers' internals there (monkeypatching a child cannot see).
GUARD_MIN_NONZEROS = 150_000
#: A MILP (``ilp``) runs in-process only with at least this many seconds of limit per estimated nonzero of its
#: program: HiGHS overran a MIP time limit by 0.2-1.3 s on programs of 90-135 k nonzeros with two busy loops
#: beside it (its presolve and root work do not stop at the limit), about 1e-5 s per nonzero, and an overrun
#: must stay within the limit's 10% slack. Below that the program is solved in a child killed at the limit.
MILP_LIMIT_S_PER_NONZERO = 1e-4


def guard(method: str, graph: Graph, budget_bytes: int, options: dict[str, Any],
          time_limit_s: float | None, limit_s_per_nonzero: float = 0.0,
          model_bytes_limit: int | None = None) -> RematResult | None:
    """What a formulation-based method returns instead of building its program here, or ``None`` to go on.

    * The estimated program (:func:`~remat_core.formulation.size.estimate_milp_size`) is over
      ``model_bytes_limit`` (default :data:`~remat_core.formulation.size.DEFAULT_MODEL_BYTES_LIMIT`): nothing
      is built; the cheapest heuristic schedule is returned with a message saying so (``NO_SOLUTION``
      without one), ``stats["model_built"] = False``, ``stats["schedule_method"]`` naming the heuristic and
      ``stats["bound_method"] = "each node once"`` (the only bound known: no MILP or LP was solved).
    * A time limit is set, this is not already a deadline child, and the program has at least
      :data:`GUARD_MIN_NONZEROS` nonzeros, or the limit is under ``limit_s_per_nonzero`` seconds per
      nonzero (:data:`MILP_LIMIT_S_PER_NONZERO` for a MILP): :func:`guarded_solve`.
    """
    from ..formulation.size import DEFAULT_MODEL_BYTES_LIMIT, estimate_milp_size
    from ..units import format_bytes

    limit = DEFAULT_MODEL_BYTES_LIMIT if model_bytes_limit is None else model_bytes_limit
    size = estimate_milp_size(graph)
    if not size.fits(limit):
        why = (f"{method}: the program would need about {format_bytes(size.bytes)} "
               f"({size.nonzeros:.3g} nonzeros), over the {format_bytes(limit)} model limit; "
               f"not built (method 'auto' or 'segments' handle graphs this large)")
        res = _with_fallback(graph, budget_bytes, None, why, time.perf_counter(),
                             None if time_limit_s is None else time.perf_counter() + float(time_limit_s))
        res.stats.update(model_built=False, bound_method="each node once")
        return res
    if time_limit_s is not None and not in_child() and (
            size.nonzeros >= GUARD_MIN_NONZEROS or time_limit_s < limit_s_per_nonzero * size.nonzeros):
        return guarded_solve(method, graph, budget_bytes, options, time_limit_s)
    return None


def guarded_solve(method: str, graph: Graph, budget_bytes: int, options: dict[str, Any],
                  time_limit_s: float) -> RematResult:
    """``method`` within ``time_limit_s``, start-up included: in a deadline child, with a fallback.

    The child starts first; meanwhile this process finds the cheapest schedule
    of :data:`FALLBACK_METHODS`. If the child answers in time, its result is
    returned (the fallback's schedule where it is cheaper, with the child's
    bound); if not, the fallback schedule is returned as ``FEASIBLE`` with the
    lower bound every schedule has (each node computed once), or no schedule
    with status ``NO_SOLUTION`` when no heuristic found one.
    """
    start = time.perf_counter()
    deadline = start + (1.0 - _KILL_EARLY_SHARE) * float(time_limit_s)
    child = DeadlineChild(method, graph, budget_bytes, options, deadline)
    try:
        return _with_fallback(graph, budget_bytes, child, "", start, deadline)
    finally:
        child.close()


def _cheapest_heuristic(graph: Graph, budget_bytes: int, deadline: float | None) -> RematResult | None:
    """The cheapest schedule of :data:`FALLBACK_METHODS` within the budget (none started past ``deadline``)."""
    from ..errors import GraphValidationError
    from . import _METHODS, solve

    best: RematResult | None = None
    for name in FALLBACK_METHODS:
        if name not in _METHODS or (deadline is not None and time.perf_counter() >= deadline):
            continue
        try:
            res = solve(graph, budget_bytes, method=name,
                        **({"order": "stages"} if name == "dtr" else {}))   # dtr's stage run alone: the quick one
        except GraphValidationError:
            continue
        except Exception as exc:   # an optional heuristic's failure must not cost the solve
            log.debug("heuristic %s failed: %s", name, exc)
            continue
        if res.success and (best is None or res.objective < best.objective):
            best = res
    return best


def _with_fallback(graph: Graph, budget_bytes: int, child: DeadlineChild | None, why: str, start: float,
                   deadline: float | None) -> RematResult:
    """The child's result or the cheapest fallback heuristic's schedule, whichever is better (see guarded_solve)."""
    import numpy as np

    from ..schedule import SolveStatus

    fallback = _cheapest_heuristic(graph, budget_bytes, deadline)
    got = None
    if child is not None:
        got, why = child.wait()
    elapsed = time.perf_counter() - start
    if got is not None and (fallback is None or (got.success and got.objective <= fallback.objective)):
        got.stats["deadline_child"] = True
        return got
    bound = float(np.sum(graph.cost))
    stats: dict[str, Any] = {"deadline_child": child is not None, "why": why or (got.message if got is not None else "")}
    if got is not None:
        stats["child_status"] = got.status.value
        if got.status is SolveStatus.INFEASIBLE:
            return got
        if got.lower_bound is not None:
            bound = max(bound, got.lower_bound)
    if fallback is None:
        return RematResult(status=SolveStatus.NO_SOLUTION, stats=stats,
                           message=f"{stats['why']} after {elapsed:.2f} s; no heuristic schedule fits either")
    bound = min(bound, fallback.objective)
    status = SolveStatus.OPTIMAL if fallback.objective <= bound * (1 + 1e-9) else SolveStatus.FEASIBLE
    stats["fallback_method"] = stats["schedule_method"] = fallback.method   # who made the schedule returned
    return RematResult(status=status, schedule=fallback.schedule, lower_bound=bound, stats=stats,
                       message=f"{stats['why']} after {elapsed:.2f} s; returning {fallback.method}'s schedule")


def not_worse_than_heuristic(graph: Graph, result: RematResult, best: RematResult | None) -> RematResult:
    """``result``, or ``best`` (the cheapest :data:`FALLBACK_METHODS` schedule, from :func:`_cheapest_heuristic`,
    or None) where that is cheaper (or ``result`` has none).

    The heuristic schedule keeps ``result``'s lower bound (a bound holds for
    every schedule) and its message says so.
    """
    from ..schedule import SolveStatus

    if best is None:
        return result
    if result.schedule is not None:
        from ..simulate import simulate

        if simulate(graph, result.schedule, timeline=False).total_cost <= best.objective:
            return result
    bound = result.lower_bound
    if bound is not None and bound > best.objective:   # pragma: no cover - a valid bound never exceeds a cost
        bound = best.objective
    status = SolveStatus.OPTIMAL if bound is not None and best.objective <= bound * (1 + 1e-9) else SolveStatus.FEASIBLE
    stats = dict(result.stats, heuristic_method=best.method, own_status=result.status.value)
    return RematResult(status=status, schedule=best.schedule, lower_bound=bound, backend=result.backend, stats=stats,
                       message=f"{best.method}'s schedule is cheaper than this method's ({result.message})")
