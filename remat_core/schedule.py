"""Schedules over frontier-advancing stages, solver statuses and results.

A schedule for an ``n``-node graph is two binary ``n x n`` matrices:
``R[t, i] = 1`` if node ``i`` is (re)computed in stage ``t`` and
``S[t, i] = 1`` if the value of ``i`` is kept in memory from stage ``t-1``
into stage ``t``. Stage ``t`` computes ``v_t`` for the first time, so
``R[t, t] = 1``, ``R[t, i] = 0`` for ``i > t`` and ``S[t, i] = 0`` for
``i >= t``.

:class:`Schedule` stores both matrices compactly, as sorted CSR rows (an
``int64`` pointer array and an ``int64`` column array each), so graphs with
thousands of nodes cost memory in proportion to the schedule, not ``n**2``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .errors import InvalidScheduleError

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Graph

__all__ = ["Schedule", "SolveStatus", "RematResult"]


def _to_csr(mat: Any, name: str) -> tuple[int, np.ndarray, np.ndarray]:
    """Turn a dense or scipy-sparse binary matrix into ``(n, ptr, idx)`` with sorted rows."""
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover - scipy is a hard dependency
        sp = None
    if sp is not None and sp.issparse(mat):
        m = sp.csr_array(mat)
        m.sum_duplicates()
        if m.shape[0] != m.shape[1]:
            raise InvalidScheduleError(f"`{name}` must be square; got shape {m.shape}")
        data = np.asarray(m.data)
        keep = data != 0
        if np.any((data != 0) & (data != 1)):
            raise InvalidScheduleError(f"`{name}` must be binary (0/1); found value {data[(data != 0) & (data != 1)][0]!r}")
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))[keep]
        cols = np.asarray(m.indices)[keep]
        n = m.shape[0]
    else:
        a = np.asarray(mat)
        if a.ndim != 2 or a.shape[0] != a.shape[1]:
            raise InvalidScheduleError(f"`{name}` must be a square matrix; got shape {a.shape}")
        if a.dtype != bool:
            bad = (a != 0) & (a != 1)
            if np.any(bad):
                t, i = np.argwhere(bad)[0]
                raise InvalidScheduleError(
                    f"`{name}` must be binary (0/1); {name}[{t}, {i}] = {a[t, i].item()!r}", stage=int(t), node=int(i)
                )
        rows, cols = np.nonzero(a)
        n = a.shape[0]
    order = np.lexsort((cols, rows))
    rows, cols = rows[order].astype(np.int64), cols[order].astype(np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, rows + 1, 1)
    return n, np.cumsum(ptr), np.ascontiguousarray(cols)


class Schedule:
    """A rematerialization schedule ``(R, S)`` stored as sorted CSR rows.

    Parameters
    ----------
    R, S : array_like or scipy.sparse matrix
        Binary ``n x n`` matrices (see the module docstring).

    Raises
    ------
    InvalidScheduleError
        If a matrix is not square and binary, the two differ in size, or the
        frontier-advancing structure is broken (``R[t, t] = 0``, ``R[t, i] = 1``
        for ``i > t``, ``S[t, i] = 1`` for ``i >= t``); the message names the
        stage and node. Dependency constraints need the graph:
        :func:`remat_core.simulate` checks them.

    Examples
    --------
    >>> import numpy as np
    >>> s = Schedule(np.eye(3, dtype=bool), np.tril(np.ones((3, 3), bool), -1))
    >>> s.n, s.num_computes
    (3, 3)
    """

    __slots__ = ("_n", "_R_ptr", "_R_idx", "_S_ptr", "_S_idx")

    def __init__(self, R: Any, S: Any):
        n, rp, ri = _to_csr(R, "R")
        m, sp_, si = _to_csr(S, "S")
        if n != m:
            raise InvalidScheduleError(f"`R` and `S` must have the same shape; got {n}x{n} and {m}x{m}")
        self._init(n, rp, ri, sp_, si)

    @classmethod
    def from_csr(cls, n: int, R_ptr: Any, R_idx: Any, S_ptr: Any, S_idx: Any) -> "Schedule":
        """Build from CSR rows directly (rows must be sorted; checked)."""
        self = cls.__new__(cls)
        arrs = [np.ascontiguousarray(a, dtype=np.int64) for a in (R_ptr, R_idx, S_ptr, S_idx)]
        for nm, ptr, idx in (("R", arrs[0], arrs[1]), ("S", arrs[2], arrs[3])):
            if ptr.shape != (n + 1,) or ptr[0] != 0 or ptr[-1] != len(idx) or np.any(np.diff(ptr) < 0):
                raise InvalidScheduleError(f"`{nm}` CSR pointer array is malformed for n={n}")
            if len(idx) and (idx.min() < 0 or idx.max() >= n):
                raise InvalidScheduleError(f"`{nm}` has a column outside 0..{n - 1}")
            rows = np.repeat(np.arange(n), np.diff(ptr))
            same_row = rows[1:] == rows[:-1]
            if np.any(same_row & (idx[1:] <= idx[:-1])):
                raise InvalidScheduleError(f"`{nm}` CSR rows must be strictly increasing")
        self._init(n, *arrs)
        return self

    def _init(self, n: int, rp: np.ndarray, ri: np.ndarray, sp_: np.ndarray, si: np.ndarray) -> None:
        r_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(rp))
        s_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(sp_))
        above = np.flatnonzero(ri > r_rows)
        if above.size:
            t, i = int(r_rows[above[0]]), int(ri[above[0]])
            raise InvalidScheduleError(
                f"R[{t}, {i}] = 1 computes node {i} in stage {t} before the frontier reaches it (needs i <= t)",
                stage=t, node=i,
            )
        diag = np.zeros(n, dtype=bool)
        diag[r_rows[ri == r_rows]] = True
        if not diag.all():
            t = int(np.flatnonzero(~diag)[0])
            raise InvalidScheduleError(f"R[{t}, {t}] = 0: stage {t} must compute node {t}", stage=t, node=t)
        bad = np.flatnonzero(si >= s_rows)
        if bad.size:
            t, i = int(s_rows[bad[0]]), int(si[bad[0]])
            raise InvalidScheduleError(
                f"S[{t}, {i}] = 1 keeps node {i} into stage {t}, but it is not computed before stage {t} (needs i < t)",
                stage=t, node=i,
            )
        for a in (rp, ri, sp_, si):
            a.setflags(write=False)
        self._n, self._R_ptr, self._R_idx, self._S_ptr, self._S_idx = n, rp, ri, sp_, si

    # ---------------------------------------------------------------- access
    @property
    def n(self) -> int:
        """Number of stages (= number of nodes)."""
        return self._n

    @property
    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(R_ptr, R_idx, S_ptr, S_idx)``: the read-only int64 CSR arrays."""
        return self._R_ptr, self._R_idx, self._S_ptr, self._S_idx

    @property
    def num_computes(self) -> int:
        """Number of node computations (``R.sum()``)."""
        return int(len(self._R_idx))

    def R_row(self, t: int) -> np.ndarray:
        """Nodes computed in stage ``t``, ascending."""
        return self._R_idx[self._R_ptr[t]:self._R_ptr[t + 1]]

    def S_row(self, t: int) -> np.ndarray:
        """Nodes kept from stage ``t-1`` into stage ``t``, ascending."""
        return self._S_idx[self._S_ptr[t]:self._S_ptr[t + 1]]

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """``(R, S)`` as dense boolean ``n x n`` arrays."""
        R = np.zeros((self._n, self._n), dtype=bool)
        S = np.zeros((self._n, self._n), dtype=bool)
        R[np.repeat(np.arange(self._n), np.diff(self._R_ptr)), self._R_idx] = True
        S[np.repeat(np.arange(self._n), np.diff(self._S_ptr)), self._S_idx] = True
        return R, S

    @property
    def R(self) -> np.ndarray:
        """Dense boolean ``R`` (allocates ``n**2`` bytes)."""
        return self.dense()[0]

    @property
    def S(self) -> np.ndarray:
        """Dense boolean ``S`` (allocates ``n**2`` bytes)."""
        return self.dense()[1]

    def compute_counts(self) -> np.ndarray:
        """How many times each node is computed (``R.sum(axis=0)``), int64."""
        return np.bincount(self._R_idx, minlength=self._n).astype(np.int64)

    def cost(self, graph: "Graph") -> float:
        """Total compute cost ``sum_t sum_i cost[i] R[t, i]`` (float)."""
        self._check_graph(graph)
        return float(graph.cost[self._R_idx].sum())

    def _check_graph(self, graph: "Graph") -> None:
        if graph.n != self._n:
            raise InvalidScheduleError(f"schedule has {self._n} stages but the graph has {graph.n} nodes")

    # ---------------------------------------------------------- conversions
    @classmethod
    def checkpoint_all(cls, graph: "Graph") -> "Schedule":
        """The schedule that computes every node once and keeps each value until its last use."""
        n = graph.n
        last_use = np.arange(n, dtype=np.int64)
        for i, us in enumerate(graph.users):
            if us:
                last_use[i] = us[-1]
        # S[t, i] = 1 for i < t <= last_use[i]
        lengths = last_use - np.arange(n)
        rows = np.concatenate([np.arange(i + 1, last_use[i] + 1) for i in range(n)]) if n else np.zeros(0, np.int64)
        cols = np.repeat(np.arange(n, dtype=np.int64), lengths)
        order = np.lexsort((cols, rows))
        rows, cols = rows[order].astype(np.int64), cols[order]
        s_ptr = np.zeros(n + 1, dtype=np.int64)
        np.add.at(s_ptr, rows + 1, 1)
        return cls.from_csr(n, np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64), np.cumsum(s_ptr), cols)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: per-stage lists of computed and kept nodes."""
        return {
            "n": self._n,
            "R": [self.R_row(t).tolist() for t in range(self._n)],
            "S": [self.S_row(t).tolist() for t in range(self._n)],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Schedule":
        """Inverse of :meth:`to_dict`."""
        try:
            n = int(data["n"])
            rows_r, rows_s = data["R"], data["S"]
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidScheduleError(f"schedule JSON needs `n`, `R` and `S`: {exc}") from None
        if len(rows_r) != n or len(rows_s) != n:
            raise InvalidScheduleError(f"schedule JSON must have {n} rows in `R` and `S`")

        def pack(rows):
            ptr = np.zeros(n + 1, dtype=np.int64)
            ptr[1:] = np.cumsum([len(r) for r in rows])
            idx = np.fromiter((int(i) for r in rows for i in sorted(r)), dtype=np.int64, count=int(ptr[-1]))
            return ptr, idx

        return cls.from_csr(n, *pack(rows_r), *pack(rows_s))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return self._n == other._n and all(np.array_equal(a, b) for a, b in zip(self.csr, other.csr))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Schedule: {self._n} stages, {self.num_computes} computes, {len(self._S_idx)} kept values>"


class SolveStatus(str, enum.Enum):
    """Outcome of a solve.

    ``OPTIMAL``: proven optimal for the method's model. ``FEASIBLE``: a
    schedule within budget, not proven optimal. ``INFEASIBLE``: no schedule
    fits the budget (proven, or for a heuristic: none of the ones it tries).
    ``NO_SOLUTION``: the search stopped (time limit) without a schedule.
    ``ERROR``: the solver failed.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"
    ERROR = "error"


@dataclass
class RematResult:
    """What every method returns (see :func:`remat_core.solve`).

    Attributes
    ----------
    status : SolveStatus
    message : str
    schedule : Schedule or None
        Present when ``status`` is ``OPTIMAL`` or ``FEASIBLE`` (a result that
        records its run as a ``sequence`` may carry only that).
    objective : float or None
        Simulated total compute cost of ``schedule``.
    lower_bound : float or None
        A proven lower bound on the optimal cost, when the method has one.
    peak_memory_bytes : int or None
        Simulated peak of ``schedule`` (workspace and fixed bytes included).
    budget_bytes : int
    method, backend : str
    solve_time_s : float
        Wall time of the method, re-simulation included.
    stats : dict
        Method-specific details; ``min_budget_bytes`` (exact smallest feasible
        budget) or ``min_budget_lower_bound_bytes`` when the budget is too small.
    sequence : remat_core.sequence.OpSequence or None
        The run as compute / free events, when the method records one
        (``dtr``). Then ``objective`` and ``peak_memory_bytes`` are the
        sequence's, and ``schedule`` (if any) is a stage-form plan in the
        graph's numbering, also within budget, costing
        ``stats["schedule_cost"]``.
    """

    status: SolveStatus
    message: str = ""
    schedule: Schedule | None = None
    objective: float | None = None
    lower_bound: float | None = None
    peak_memory_bytes: int | None = None
    budget_bytes: int = 0
    method: str = ""
    backend: str = ""
    solve_time_s: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    sequence: Any = None

    @property
    def success(self) -> bool:
        """True when a schedule within budget was found."""
        return self.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)

    @property
    def gap(self) -> float | None:
        """Relative gap ``(objective - lower_bound) / objective`` when both are known."""
        if self.objective is None or self.lower_bound is None:
            return None
        if self.objective == 0:
            return 0.0
        return max(0.0, (self.objective - self.lower_bound) / self.objective)

    def to_dict(self, include_schedule: bool = False) -> dict[str, Any]:
        """JSON-ready summary (the schedule, and the sequence where there is one, only when asked for: a result
        whose run is recorded only as a sequence, e.g. ``dtr``'s, carries its plan there)."""
        d = {
            "status": self.status.value, "message": self.message, "objective": self.objective,
            "lower_bound": self.lower_bound, "peak_memory_bytes": self.peak_memory_bytes,
            "budget_bytes": self.budget_bytes, "method": self.method, "backend": self.backend,
            "solve_time_s": self.solve_time_s, "stats": self.stats,
        }
        if include_schedule:
            d["schedule"] = self.schedule.to_dict() if self.schedule is not None else None
            d["sequence"] = self.sequence.to_dict() if self.sequence is not None else None
        return d

    def __repr__(self) -> str:
        parts = [f"status={self.status.value}", f"method={self.method!r}"]
        if self.objective is not None:
            parts.append(f"objective={self.objective:g}")
        if self.peak_memory_bytes is not None:
            parts.append(f"peak={self.peak_memory_bytes}/{self.budget_bytes}")
        return f"RematResult({', '.join(parts)})"
