"""HiGHS backend (``highspy``), the default."""

from __future__ import annotations

import hashlib
import logging
import os
import time

import numpy as np
import scipy.sparse as sp

from ...errors import SolverError
from ...schedule import SolveStatus
from . import BackendResult

log = logging.getLogger(__name__)

# HighsModelStatus name -> our status (None: an error)
_STATUS = {
    "kOptimal": SolveStatus.OPTIMAL,
    "kInfeasible": SolveStatus.INFEASIBLE,
    "kUnboundedOrInfeasible": SolveStatus.INFEASIBLE,  # every column is bounded: cannot be unbounded
    "kTimeLimit": SolveStatus.NO_SOLUTION,              # FEASIBLE when an incumbent exists
    "kIterationLimit": SolveStatus.NO_SOLUTION,
    "kSolutionLimit": SolveStatus.NO_SOLUTION,
    "kInterrupt": SolveStatus.NO_SOLUTION,
    "kHighsInterrupt": SolveStatus.NO_SOLUTION,
    "kMemoryLimit": SolveStatus.NO_SOLUTION,
    "kObjectiveBound": SolveStatus.NO_SOLUTION,
    "kObjectiveTarget": SolveStatus.NO_SOLUTION,
    "kModelEmpty": SolveStatus.OPTIMAL,
    "kUnbounded": None,
    "kNotset": None,
    "kLoadError": None,
    "kModelError": None,
    "kPresolveError": None,
    "kSolveError": None,
    "kPostsolveError": None,
    "kUnknown": None,
}


_threads_in_use: int | str | None = None   # the size of HiGHS's process-wide thread pool


#: HiGHS's presolve for the LPs of LPSequence and of branch-and-cut (not for MILPs): it cost more than it saved.
#: The root LP was faster without it on every program tried, the portfolio's short branch-and-cut on nearly
#: every one (section lp-presolve of benchmarks/experiments/README.md).
_LP_PRESOLVE = "off"


_banner_printed = False


def _stop_pool_before_fork() -> None:
    """Stop the forking thread's HiGHS worker threads (they start again at its next solve).

    A forked child copies only the forking thread. HiGHS hands a parallel task straight to an idle worker
    of the pool that thread started, and in the child that worker does not exist: the child's first solve
    then waits for it forever, past any time limit (a ``sweep`` forked after a solve in the same process
    hung this way, tests/core/test_fork_safety.py). Registered with :func:`os.register_at_fork` on the
    first solve. A thread with no pool of its own is left as it is (HiGHS keeps one pool per thread that
    started one).
    """
    if _threads_in_use is not None:
        import highspy

        highspy.Highs.resetGlobalScheduler(True)


_fork_hook_registered = False


def new_highs(verbose: bool = False):
    """A ``highspy.Highs()``. HiGHS prints its banner on standard output when the first one is made, before
    any option can stop it; unless ``verbose`` or remat's logger is enabled for INFO (``remat -v``), that one
    is made with the descriptor pointed at the null device (library code prints nothing by itself)."""
    import highspy

    global _banner_printed
    if _banner_printed or verbose or logging.getLogger("remat_core").isEnabledFor(logging.INFO):
        _banner_printed = True
        return highspy.Highs()
    from ..._native_io import native_output_silenced

    with native_output_silenced("stdout"):
        h = highspy.Highs()
    _banner_printed = True
    return h


def _configure(h, time_limit_s, mip_rel_gap, threads, verbose, options) -> None:
    """Set ``h``'s options (HiGHS keeps one thread pool per process: another size needs a fresh pool)."""
    import highspy

    h.setOptionValue("output_flag", bool(verbose))
    h.setOptionValue("time_limit", float("inf") if time_limit_s is None else float(time_limit_s))
    if mip_rel_gap is not None:
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    global _threads_in_use, _fork_hook_registered
    if not _fork_hook_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_stop_pool_before_fork)
        _fork_hook_registered = True
    wanted = "default" if threads is None else int(threads)
    if _threads_in_use is not None and _threads_in_use != wanted:
        h.resetGlobalScheduler(True)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    _threads_in_use = wanted
    _set_options(h, options)


def _set_options(h, options) -> None:
    """Set the user's ``options`` on ``h``; ``ValueError`` names the first one HiGHS rejects."""
    import highspy

    for key, value in (options or {}).items():
        if h.setOptionValue(key, value) != highspy.HighsStatus.kOk:
            raise ValueError(f"HiGHS rejected option {key!r} = {value!r}")


def check_options(options) -> None:
    """Raise ``ValueError`` naming the first of ``options`` that HiGHS rejects (unknown name or bad value)."""
    import highspy

    h = new_highs()
    h.setOptionValue("output_flag", False)
    _set_options(h, options)


def _pass_model(h, c, csc, row_lo, row_hi, col_lo, col_hi, integrality) -> None:
    import highspy

    status = h.passModel(
        len(c), csc.shape[0], int(csc.nnz), 1, 1, 0.0,
        np.ascontiguousarray(c, np.float64), np.ascontiguousarray(col_lo, np.float64),
        np.ascontiguousarray(col_hi, np.float64), np.ascontiguousarray(row_lo, np.float64),
        np.ascontiguousarray(row_hi, np.float64), csc.indptr.astype(np.int32), csc.indices.astype(np.int32),
        np.ascontiguousarray(csc.data, np.float64),
        np.ascontiguousarray(integrality, np.int32),
    )
    if status == highspy.HighsStatus.kError:
        raise SolverError("HiGHS rejected the model (passModel returned an error)")


def _run(h, is_mip: bool) -> BackendResult:
    """Run ``h`` and translate what it reports."""
    import highspy

    t0 = time.perf_counter()
    run = h.run()
    elapsed = time.perf_counter() - t0
    model_status = h.getModelStatus()
    name = model_status.name
    if name not in _STATUS:
        raise SolverError(f"HiGHS returned an unknown model status {name!r}")
    ours = _STATUS[name]
    if ours is None or (run == highspy.HighsStatus.kError and ours is not SolveStatus.INFEASIBLE):
        raise SolverError(f"HiGHS failed: model status {h.modelStatusToString(model_status)}")
    info = h.getInfo()
    has_x = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
    x = np.asarray(h.getSolution().col_value, dtype=np.float64) if has_x else None
    if x is None and name == "kModelEmpty":   # no rows: every column at its bound of least cost (HiGHS gives none)
        lp = h.getLp()
        cost, lo, hi = (np.asarray(v, dtype=np.float64) for v in (lp.col_cost_, lp.col_lower_, lp.col_upper_))
        x = np.where(cost > 0, lo, np.where(cost < 0, hi, np.clip(0.0, lo, hi)))
        if not np.all(np.isfinite(x)):
            raise SolverError("HiGHS: an empty model with an unbounded column")
    stats = {"backend_status": h.modelStatusToString(model_status), "time_s": elapsed}
    bound = None
    if is_mip:
        stats["nodes"] = int(info.mip_node_count)
        bound = float(info.mip_dual_bound) if np.isfinite(info.mip_dual_bound) else None
        stats["gap"] = float(info.mip_gap) if np.isfinite(info.mip_gap) else None
    else:
        stats["simplex_iterations"] = int(info.simplex_iteration_count)
    objective = float(info.objective_function_value) if x is not None else None
    if name == "kModelEmpty" and x is not None:
        objective = float(np.asarray(h.getLp().col_cost_, dtype=np.float64) @ x)
    if ours is SolveStatus.NO_SOLUTION and x is not None:
        ours = SolveStatus.FEASIBLE
    if ours is SolveStatus.OPTIMAL:
        if x is None:
            raise SolverError("HiGHS reported optimal without a solution")
        if not is_mip:
            bound = objective
        elif bound is None:
            bound = objective
    return BackendResult(status=ours, x=x, objective=objective, bound=bound, stats=stats)


def solve(c, A, row_lo, row_hi, col_lo, col_hi, integrality, *, time_limit_s=None, mip_rel_gap=None,
          threads=None, verbose=False, start=None, options=None, interrupt=None, supply=None,
          report=None) -> BackendResult:
    """Solve with HiGHS.

    HiGHS only, for a search running beside this one (:mod:`~remat_core.solvers.portfolio`):
    ``interrupt()``, polled by the MIP search, stops it when it returns True;
    ``supply(primal_bound)``, polled at the points where HiGHS asks for an
    outside solution, may return a point cheaper than ``primal_bound`` (the
    objective of HiGHS's incumbent, without offset) to become the incumbent;
    ``report(objective, x)`` is called with every improving solution HiGHS
    finds. With its presolve on, HiGHS maps an outside solution into the
    presolved program, whose reductions may have removed it, and then drops
    it without a word (seen with HiGHS 1.15 on random(16 layers, seed 3) at
    87 units): ``supply`` is reliable with ``options={"presolve": "off"}``.
    """
    from . import checked

    args = (c, A, row_lo, row_hi, col_lo, col_hi, integrality)
    out = _solve_once(*args, time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose,
                      start=start, options=options, interrupt=interrupt, supply=supply, report=report)
    verified = checked(out, c)
    if verified is out:
        return out
    # HiGHS's objective is not its point's: with presolve on, HiGHS 1.16 may map an outside solution (the start,
    # or one from ``supply``) into the presolved program, where its reductions give it a lower value than it
    # has, take that value for its incumbent's, and then report "Optimal" with the outside point, which the
    # true optimum beats (docs/reliability.rst). Solved again without outside points, then with presolve off.
    log.info("HiGHS reported objective %.9g for a point of objective %.9g; solving again without the start",
                out.objective, verified.objective)
    spent = out.stats.get("time_s", 0.0)
    for retry in ({}, {"presolve": "off"}):
        left = None if time_limit_s is None else float(time_limit_s) - spent
        if left is not None and left <= 0:
            break
        again = _solve_once(*args, time_limit_s=left, mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose,
                            start=None, options={**(options or {}), **retry}, interrupt=interrupt, supply=None,
                            report=report)
        spent += again.stats.get("time_s", 0.0)
        checked_again = checked(again, c)
        if checked_again is again:
            if again.status is SolveStatus.INFEASIBLE:   # contradicts the feasible point in hand: nothing proven
                break
            if again.x is None or verified.objective < again.objective - 1e-9:
                # the outside point is still the cheaper one: kept, with the bound of the consistent run
                bound = None if again.bound is None else min(again.bound, verified.objective)
                again = BackendResult(status=SolveStatus.FEASIBLE, x=verified.x, objective=verified.objective,
                                      bound=bound, stats=again.stats)
            again.stats["objective_mismatch"] = verified.stats["objective_mismatch"]
            again.stats["time_s"] = spent
            return again
    verified.stats["time_s"] = spent
    return verified


def _solve_once(c, A, row_lo, row_hi, col_lo, col_hi, integrality, *, time_limit_s, mip_rel_gap, threads, verbose,
                start, options, interrupt, supply, report) -> BackendResult:
    """One HiGHS run of :func:`solve` (its result as HiGHS reports it)."""
    import highspy

    h = new_highs(verbose)
    _configure(h, time_limit_s, mip_rel_gap, threads, verbose, options)
    _pass_model(h, c, A.tocsc(), row_lo, row_hi, col_lo, col_hi, integrality)
    is_mip = bool(np.any(integrality))
    if start is not None and is_mip:
        n_cols = len(c)
        h.setSolution(n_cols, np.arange(n_cols, dtype=np.int32), np.ascontiguousarray(start, np.float64))
    if interrupt is not None and is_mip:
        def poll(event) -> None:
            if interrupt():
                event.interrupt()
        h.cbMipInterrupt.subscribe(poll)
    if supply is not None and is_mip:
        def offer(event) -> None:
            x = supply(float(event.data_out.mip_primal_bound))
            if x is not None:
                event.data_in.setSolution(np.ascontiguousarray(x, np.float64))
        h.cbMipUserSolution.subscribe(offer)
    if report is not None and is_mip:
        def found(event) -> None:
            report(float(event.data_out.objective_function_value), np.array(event.data_out.mip_solution))
        h.cbMipImprovingSolution.subscribe(found)
    return _run(h, is_mip)


class LPSequence:
    """Linear programs that share ``c`` and ``A`` and differ in bounds, each solve starting from the last basis.

    After a change of bounds only (a budget in another allowance, say), the
    dual simplex method restarts from the previous optimal basis, which is
    usually a few pivots away; a program with another ``c`` or ``A`` is
    loaded afresh. A warm re-solve that runs longer than the last solve from
    scratch (at least :data:`MIN_WARM_ALLOWANCE_S`) is abandoned and the LP
    solved from scratch, so a sequence never costs much more than cold solves.
    """

    #: a warm re-solve may always run this long before it is abandoned (seconds)
    MIN_WARM_ALLOWANCE_S = 1.0

    def __init__(self, threads: int | None = None, verbose: bool = False):
        self.threads, self.verbose = threads, verbose
        self._h = None
        self._key = None
        self._cold_s = 0.0
        self._seen = None          # (A, c, A as CSC, key) of the last solve(): not hashed again
        self.warm_solves = 0       # re-solves that finished from the previous basis
        self.warm_abandoned = 0    # re-solves given up for a solve from scratch

    def _cold(self, key, c, csc, row_lo, row_hi, col_lo, col_hi, time_limit_s) -> BackendResult:
        import highspy

        self._h, self._key = new_highs(self.verbose), key
        _configure(self._h, time_limit_s, None, self.threads, self.verbose, None)
        self._h.setOptionValue("presolve", _LP_PRESOLVE)
        _pass_model(self._h, c, csc, row_lo, row_hi, col_lo, col_hi, np.zeros(len(c), np.int32))
        out = _run(self._h, False)
        self._cold_s = out.stats["time_s"]
        return out

    def solve(self, c, A, row_lo, row_hi, col_lo, col_hi, *, time_limit_s=None) -> BackendResult:
        if self._seen is not None and A is self._seen[0] and c is self._seen[1]:
            csc, key = self._seen[2], self._seen[3]   # the very arrays of the last call (a re-budgeted program)
        else:
            csc = A.tocsc()
            digest = hashlib.blake2b(digest_size=16)
            for part in (np.asarray(c, np.float64), csc.indptr, csc.indices, np.asarray(csc.data, np.float64)):
                digest.update(np.ascontiguousarray(part).tobytes())
            key = (len(c), csc.shape, digest.hexdigest())
            self._seen = (A, c, csc, key)
        if self._h is None or key != self._key:
            return self._cold(key, c, csc, row_lo, row_hi, col_lo, col_hi, time_limit_s)
        allowance = max(self._cold_s, self.MIN_WARM_ALLOWANCE_S)
        limit = allowance if time_limit_s is None else min(allowance, float(time_limit_s))
        # HiGHS measures its time limit on the run clock of the object, which keeps counting across runs
        _configure(self._h, self._h.getRunTime() + limit, None, self.threads, self.verbose, None)
        cols = np.arange(len(c), dtype=np.int32)
        rows = np.arange(csc.shape[0], dtype=np.int32)
        self._h.changeColsBounds(len(cols), cols, np.ascontiguousarray(col_lo, np.float64),
                                 np.ascontiguousarray(col_hi, np.float64))
        self._h.changeRowsBounds(len(rows), rows, np.ascontiguousarray(row_lo, np.float64),
                                 np.ascontiguousarray(row_hi, np.float64))
        out = _run(self._h, False)
        if out.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE):
            self.warm_solves += 1
            return out
        spent = out.stats["time_s"]
        if time_limit_s is not None and spent >= float(time_limit_s):
            return out   # the caller's limit, not the warm allowance, ran out
        self.warm_abandoned += 1
        left = None if time_limit_s is None else max(float(time_limit_s) - spent, 0.0)
        return self._cold(key, c, csc, row_lo, row_hi, col_lo, col_hi, left)

    def add_rows(self, rows, row_lo, row_hi, *, time_limit_s=None) -> BackendResult:
        """Append ``row_lo <= rows @ x <= row_hi`` to the last LP and re-solve it from its basis.

        The dual simplex method starts from the last optimal basis (the new
        rows' slacks basic), usually a few pivots from the new optimum. A
        later :meth:`solve` loads its program afresh.
        """
        import highspy

        if self._h is None:
            raise RuntimeError("add_rows() needs an LP solved by solve() first")
        csr = sp.csr_array(rows)
        _configure(self._h, None if time_limit_s is None else self._h.getRunTime() + float(time_limit_s),
                   None, self.threads, self.verbose, None)
        status = self._h.addRows(csr.shape[0], np.ascontiguousarray(row_lo, np.float64),
                                 np.ascontiguousarray(row_hi, np.float64), int(csr.nnz),
                                 csr.indptr[:-1].astype(np.int32), csr.indices.astype(np.int32),
                                 np.ascontiguousarray(csr.data, np.float64))
        if status == highspy.HighsStatus.kError:
            raise SolverError("HiGHS rejected the added rows (addRows returned an error)")
        self._key = None   # the kept model is no longer any program's digest
        out = _run(self._h, False)
        if out.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE):
            self.warm_solves += 1
        return out
