"""CBC backend through python-mip (``pip install remat[cbc]``)."""

from __future__ import annotations

import time

import numpy as np

from ...errors import SolverError
from ...schedule import SolveStatus
from . import BackendResult, checked

# mip.OptimizationStatus name -> our status (None: an error)
_STATUS = {
    "OPTIMAL": SolveStatus.OPTIMAL,
    "FEASIBLE": SolveStatus.FEASIBLE,
    "INFEASIBLE": SolveStatus.INFEASIBLE,
    "INT_INFEASIBLE": SolveStatus.INFEASIBLE,
    "NO_SOLUTION_FOUND": SolveStatus.NO_SOLUTION,
    "UNBOUNDED": None,
    "ERROR": None,
    "LOADED": None,
    "CUTOFF": SolveStatus.NO_SOLUTION,
    "OTHER": None,
}


def solve(c, A, row_lo, row_hi, col_lo, col_hi, integrality, *, time_limit_s=None, mip_rel_gap=None,
          threads=None, verbose=False, start=None, options=None) -> BackendResult:
    import mip

    model = mip.Model(sense=mip.MINIMIZE, solver_name=mip.CBC)
    model.verbose = 1 if verbose else 0
    if threads is not None:
        model.threads = int(threads)
    if mip_rel_gap is not None:
        model.max_mip_gap = float(mip_rel_gap)
    for key, value in (options or {}).items():
        if not hasattr(model, key):
            raise ValueError(f"python-mip models have no option {key!r}")
        setattr(model, key, value)
    n = len(c)
    xs = [
        model.add_var(lb=float(col_lo[j]), ub=float(col_hi[j]), obj=float(c[j]),
                      var_type=mip.INTEGER if integrality[j] else mip.CONTINUOUS)
        for j in range(n)
    ]
    A = A.tocsr()
    for r in range(A.shape[0]):
        lo, hi = float(row_lo[r]), float(row_hi[r])
        idx = A.indices[A.indptr[r]:A.indptr[r + 1]]
        val = A.data[A.indptr[r]:A.indptr[r + 1]]
        expr = mip.xsum(float(v) * xs[j] for j, v in zip(idx, val))
        if len(idx) == 0:
            if lo > 1e-9 or hi < -1e-9:
                return BackendResult(status=SolveStatus.INFEASIBLE, stats={"backend_status": "empty row infeasible"})
            continue
        if lo == hi:
            model.add_constr(expr == lo)
        else:
            if np.isfinite(lo):
                model.add_constr(expr >= lo)
            if np.isfinite(hi):
                model.add_constr(expr <= hi)
    is_mip = bool(np.any(integrality))
    if start is not None and is_mip:
        model.start = [(xs[j], float(start[j])) for j in range(n) if integrality[j]]
    t0 = time.perf_counter()
    kw = {"relax": not is_mip}
    if time_limit_s is not None:
        kw["max_seconds"] = float(time_limit_s)
    if verbose:
        status = model.optimize(**kw)
    else:   # CLP prints its LP log (e.g. "Optimal - objective value") whatever model.verbose says
        from ..._native_io import native_output_silenced

        with native_output_silenced("stdout"):
            status = model.optimize(**kw)
    elapsed = time.perf_counter() - t0
    ours = _STATUS.get(status.name)
    if ours is None:
        raise SolverError(f"CBC failed: status {status.name}")
    stats = {"backend_status": status.name, "time_s": elapsed}
    x = None
    if model.num_solutions and status in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
        x = np.array([v.x for v in xs], dtype=np.float64)
    objective = float(model.objective_value) if x is not None else None
    bound = None
    if is_mip:
        b = model.objective_bound
        bound = float(b) if b is not None and np.isfinite(b) else None
        if objective is not None and bound is not None:
            stats["gap"] = max(0.0, (objective - bound) / max(abs(objective), 1e-9))
        stats["nodes"] = None
    elif ours is SolveStatus.OPTIMAL:
        bound = objective
    if ours is SolveStatus.FEASIBLE and x is None:
        ours = SolveStatus.NO_SOLUTION
    if ours is SolveStatus.OPTIMAL and x is None:
        raise SolverError("CBC reported optimal without a solution")
    if ours is SolveStatus.OPTIMAL and bound is None:
        bound = objective
    # a status and bound are about the reported objective: not trusted when it is not the point's
    return checked(BackendResult(status=ours, x=x, objective=objective, bound=bound, stats=stats), c)
