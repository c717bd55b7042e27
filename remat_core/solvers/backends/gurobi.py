"""Gurobi backend (``gurobipy``; used only when installed and licensed)."""

from __future__ import annotations

import time

import numpy as np

from ...errors import SolverError
from ...schedule import SolveStatus
from . import BackendResult, checked

# gurobipy.GRB.Status code -> our status (None: an error)
_STATUS = {
    2: SolveStatus.OPTIMAL,        # OPTIMAL
    3: SolveStatus.INFEASIBLE,     # INFEASIBLE
    4: SolveStatus.INFEASIBLE,     # INF_OR_UNBD (every column is bounded)
    5: None,                       # UNBOUNDED
    7: SolveStatus.NO_SOLUTION,    # ITERATION_LIMIT
    8: SolveStatus.NO_SOLUTION,    # NODE_LIMIT
    9: SolveStatus.NO_SOLUTION,    # TIME_LIMIT
    10: SolveStatus.NO_SOLUTION,   # SOLUTION_LIMIT
    11: SolveStatus.NO_SOLUTION,   # INTERRUPTED
    12: None,                      # NUMERIC
    13: SolveStatus.NO_SOLUTION,   # SUBOPTIMAL
    16: SolveStatus.NO_SOLUTION,   # WORK_LIMIT
    17: SolveStatus.NO_SOLUTION,   # MEM_LIMIT
}


def solve(c, A, row_lo, row_hi, col_lo, col_hi, integrality, *, time_limit_s=None, mip_rel_gap=None,
          threads=None, verbose=False, start=None, options=None) -> BackendResult:
    import gurobipy as gp

    env = gp.Env(empty=True)
    env.setParam("OutputFlag", 1 if verbose else 0)
    env.start()
    model = gp.Model(env=env)
    if time_limit_s is not None:
        model.Params.TimeLimit = float(time_limit_s)
    if mip_rel_gap is not None:
        model.Params.MIPGap = float(mip_rel_gap)
    if threads is not None:
        model.Params.Threads = int(threads)
    for key, value in (options or {}).items():
        model.setParam(key, value)
    is_mip = bool(np.any(integrality))
    vtype = np.where(np.asarray(integrality) > 0, "I", "C") if is_mip else "C"
    x = model.addMVar(len(c), lb=col_lo, ub=col_hi, obj=c, vtype=vtype)
    A = A.tocsr()
    eq = row_lo == row_hi
    fin_lo = np.isfinite(row_lo) & ~eq
    fin_hi = np.isfinite(row_hi) & ~eq
    if eq.any():
        model.addMConstr(A[eq], x, "=", row_lo[eq])
    if fin_lo.any():
        model.addMConstr(A[fin_lo], x, ">", row_lo[fin_lo])
    if fin_hi.any():
        model.addMConstr(A[fin_hi], x, "<", row_hi[fin_hi])
    if start is not None and is_mip:
        x.Start = np.asarray(start, dtype=np.float64)
    t0 = time.perf_counter()
    model.optimize()
    elapsed = time.perf_counter() - t0
    code = int(model.Status)
    if code not in _STATUS or _STATUS[code] is None:
        raise SolverError(f"Gurobi failed: status code {code}")
    ours = _STATUS[code]
    stats = {"backend_status": code, "time_s": elapsed}
    sol = np.asarray(x.X, dtype=np.float64) if model.SolCount > 0 else None
    objective = float(model.ObjVal) if sol is not None else None
    bound = None
    if is_mip:
        try:
            bound = float(model.ObjBound)
        except (AttributeError, gp.GurobiError):
            bound = None
        stats["nodes"] = int(model.NodeCount)
        stats["gap"] = float(model.MIPGap) if sol is not None else None
    elif ours is SolveStatus.OPTIMAL:
        bound = objective
    if ours is SolveStatus.NO_SOLUTION and sol is not None:
        ours = SolveStatus.FEASIBLE
    return checked(BackendResult(status=ours, x=sol, objective=objective, bound=bound, stats=stats), c)
