"""Reference kernels: the readable specification and the test oracle.

Every other implementation (``_numba.py``, the native module) has the same
signatures and must return identical integer results. Inputs are contiguous
int64 arrays; schedules and adjacency are in CSR form (``ptr``, ``idx``, rows
sorted ascending).

Simulation (:func:`simulate`)
-----------------------------
For each stage ``t``:

1. Memory starts at ``fixed + sum(mem[i] for i in S[t])``.
2. Every ``i`` kept into the next stage (``S[t+1]``) must be computed or kept
   in stage ``t`` (error code 2, reported for stage ``t+1``; checked before the
   computations of stage ``t``).
3. For the nodes ``k`` of ``R[t]`` in ascending order: every input ``i`` of
   ``k`` must be resident: kept (``i`` in ``S[t]``) or computed earlier in this
   stage (error code 1). Allocate ``mem[k]``; the memory at this step is the
   running total plus ``ws[k]``; it is recorded in ``step_mem`` (one entry per
   computation, in CSR order of ``R``). Then each input ``i`` of ``k`` is freed
   if it is not kept into stage ``t+1`` and no later user ``j > k`` of ``i`` is
   computed in stage ``t``.
4. Values still allocated at the end of the stage are dropped; stage ``t+1``
   starts again from its own ``S`` row.

The peak is the largest step value; ties go to the first step reached
(smallest stage, then smallest node). Errors stop the simulation at the first
violation in the order above.

``info`` holds ``[err_code, err_stage, err_node, err_input, peak, peak_stage,
peak_node]``; ``err_code`` is 0 when the schedule is valid, 1 for a missing
input (``err_node`` needs ``err_input``), 2 for a kept value that was not
available in the previous stage (``err_node`` is that value, ``err_input`` is
-1).

Optimal R given S (:func:`r_given_s`)
-------------------------------------
The second phase of Checkmate's two-phase rounding: given the checkpoint
matrix ``S``, the cheapest ``R`` that makes ``(R, S)`` valid. In stage ``t``
a node must be computed if it is ``t`` itself, if it is kept into stage
``t+1`` but not kept into ``t`` (``S[t+1, i] = 1``, ``S[t, i] = 0``), or if
it is an input of a node computed in stage ``t`` and not kept into ``t``.
Nodes are visited from ``t`` down to 0, so the closure is complete in one
pass. Every computation in this ``R`` is forced by ``S``, so it is the unique
minimal ``R`` for any non-negative costs.
"""

from __future__ import annotations

import numpy as np

ERR_OK = 0
ERR_MISSING_INPUT = 1
ERR_KEPT_UNAVAILABLE = 2


def simulate(n, R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx, mem, ws, fixed):
    """Simulate a schedule; returns ``(info, step_mem)`` (see the module docstring)."""
    R_ptr, R_idx, S_ptr, S_idx = (a.tolist() for a in (R_ptr, R_idx, S_ptr, S_idx))
    dep_ptr, dep_idx, mem, ws = (a.tolist() for a in (dep_ptr, dep_idx, mem, ws))
    fixed = int(fixed)
    info = [0, -1, -1, -1, -1, -1, -1]
    step_mem = [0] * len(R_idx)
    peak, peak_stage, peak_node = -1, -1, -1

    def fail(code, t, node, inp):
        info[0:4] = [code, t, node, inp]
        return np.asarray(info, dtype=np.int64), np.asarray(step_mem, dtype=np.int64)

    for t in range(n):
        kept = S_idx[S_ptr[t]:S_ptr[t + 1]]
        kept_next = S_idx[S_ptr[t + 1]:S_ptr[t + 2]] if t + 1 < n else []
        computed = R_idx[R_ptr[t]:R_ptr[t + 1]]
        kept_set, kept_next_set, computed_set = set(kept), set(kept_next), set(computed)
        current = fixed + sum(mem[i] for i in kept)
        for i in kept_next:
            if i not in computed_set and i not in kept_set:
                return fail(ERR_KEPT_UNAVAILABLE, t + 1, i, -1)
        last_user = {}
        for k in computed:  # ascending: the last write is the last user in this stage
            for i in dep_idx[dep_ptr[k]:dep_ptr[k + 1]]:
                last_user[i] = k
        done = set()
        for step, k in enumerate(computed, start=R_ptr[t]):
            inputs = dep_idx[dep_ptr[k]:dep_ptr[k + 1]]
            for i in inputs:
                if i not in kept_set and i not in done:
                    return fail(ERR_MISSING_INPUT, t, k, i)
            done.add(k)
            current += mem[k]
            at_step = current + ws[k]
            step_mem[step] = at_step
            if at_step > peak:
                peak, peak_stage, peak_node = at_step, t, k
            for i in inputs:
                if last_user[i] == k and i not in kept_next_set:
                    current -= mem[i]
    info[4:7] = [peak, peak_stage, peak_node]
    return np.asarray(info, dtype=np.int64), np.asarray(step_mem, dtype=np.int64)


def r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx):
    """The minimal ``R`` for a checkpoint matrix ``S``; returns ``(R_ptr, R_idx)``."""
    S_ptr, S_idx, dep_ptr, dep_idx = (a.tolist() for a in (S_ptr, S_idx, dep_ptr, dep_idx))
    kept = [-1] * n    # == t when the node is in S[t]
    need = [-1] * n    # == t when the node must be computed in stage t
    R_ptr = [0] * (n + 1)
    R_idx: list[int] = []
    for t in range(n):
        for i in S_idx[S_ptr[t]:S_ptr[t + 1]]:
            kept[i] = t
        need[t] = t
        if t + 1 < n:
            for i in S_idx[S_ptr[t + 1]:S_ptr[t + 2]]:
                if kept[i] != t:
                    need[i] = t
        row = []
        for k in range(t, -1, -1):
            if need[k] != t:
                continue
            row.append(k)
            for i in dep_idx[dep_ptr[k]:dep_ptr[k + 1]]:
                if kept[i] != t:
                    need[i] = t
        row.reverse()
        R_idx.extend(row)
        R_ptr[t + 1] = len(R_idx)
    return np.asarray(R_ptr, dtype=np.int64), np.asarray(R_idx, dtype=np.int64)
