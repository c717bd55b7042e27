"""HiGHS backend (``highspy``), the default."""

from __future__ import annotations

import time

import numpy as np

from ...errors import SolverError
from ...schedule import SolveStatus
from . import BackendResult

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


def solve(c, A, row_lo, row_hi, col_lo, col_hi, integrality, *, time_limit_s=None, mip_rel_gap=None,
          threads=None, verbose=False, start=None, options=None) -> BackendResult:
    import highspy

    n_cols, n_rows = len(c), A.shape[0]
    csc = A.tocsc()
    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(verbose))
    if time_limit_s is not None:
        h.setOptionValue("time_limit", float(time_limit_s))
    if mip_rel_gap is not None:
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    global _threads_in_use
    wanted = "default" if threads is None else int(threads)
    if _threads_in_use is not None and _threads_in_use != wanted:
        # HiGHS keeps one thread pool per process; another size needs a fresh pool
        h.resetGlobalScheduler(True)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    _threads_in_use = wanted
    for key, value in (options or {}).items():
        if h.setOptionValue(key, value) != highspy.HighsStatus.kOk:
            raise ValueError(f"HiGHS rejected option {key!r} = {value!r}")
    is_mip = bool(np.any(integrality))
    status = h.passModel(
        n_cols, n_rows, int(csc.nnz), 1, 1, 0.0,
        np.ascontiguousarray(c, np.float64), np.ascontiguousarray(col_lo, np.float64),
        np.ascontiguousarray(col_hi, np.float64), np.ascontiguousarray(row_lo, np.float64),
        np.ascontiguousarray(row_hi, np.float64), csc.indptr.astype(np.int32), csc.indices.astype(np.int32),
        np.ascontiguousarray(csc.data, np.float64),
        np.ascontiguousarray(integrality, np.int32),
    )
    if status == highspy.HighsStatus.kError:
        raise SolverError("HiGHS rejected the model (passModel returned an error)")
    if start is not None and is_mip:
        h.setSolution(n_cols, np.arange(n_cols, dtype=np.int32), np.ascontiguousarray(start, np.float64))
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
    stats = {"backend_status": h.modelStatusToString(model_status), "time_s": elapsed}
    bound = None
    if is_mip:
        stats["nodes"] = int(info.mip_node_count)
        bound = float(info.mip_dual_bound) if np.isfinite(info.mip_dual_bound) else None
        stats["gap"] = float(info.mip_gap) if np.isfinite(info.mip_gap) else None
    else:
        stats["simplex_iterations"] = int(info.simplex_iteration_count)
    objective = float(info.objective_function_value) if x is not None else None
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
