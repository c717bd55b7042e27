"""Native (C++17) kernels: the algorithms of ``_reference.py``, compiled by pip.

The extension ``_native_ext`` is built from ``native/kernels.cpp``; this
wrapper gives it the signatures of ``_numba.py`` (int64 arrays in, int64
arrays out). Importing this module raises ImportError when the extension was
not built, and the dispatcher falls back to numba.
"""

from __future__ import annotations

import numpy as np

from . import _native_ext  # noqa: F401  (ImportError -> implementation unavailable)


def simulate(n, R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx, mem, ws, fixed):
    info, steps = _native_ext.simulate(int(n), R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx, mem, ws, int(fixed))
    return np.frombuffer(info, dtype=np.int64), np.frombuffer(steps, dtype=np.int64)


def r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx):
    ptr, idx = _native_ext.r_given_s(int(n), S_ptr, S_idx, dep_ptr, dep_idx)
    return np.frombuffer(ptr, dtype=np.int64), np.frombuffer(idx, dtype=np.int64)


def path_cuts(n, in_ptr, in_idx, W, cum, first, Rcol, Scol, tol, max_cuts):
    viol, ptr, idx = _native_ext.path_cuts(int(n), in_ptr, in_idx, W, cum, first, Rcol, Scol, float(tol),
                                           int(max_cuts))
    return (np.frombuffer(viol, dtype=np.float64), np.frombuffer(ptr, dtype=np.int64),
            np.frombuffer(idx, dtype=np.int64))


def dtr(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, heuristic, seed, max_computes,
        keep_dead=0):
    out = _native_ext.dtr(int(n), dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, int(fixed), int(budget),
                          int(heuristic), int(seed), int(max_computes), int(keep_dead))
    return tuple(np.frombuffer(a, dtype=np.int64) for a in out)
