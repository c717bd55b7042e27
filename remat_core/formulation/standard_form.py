"""The MILP in standard form, and the maps between its vectors and schedules.

A :class:`StandardForm` is what a backend solves:

    minimize    c @ x + objective_offset
    subject to  row_lo <= A @ x <= row_hi
                col_lo <= x <= col_hi
                x[j] integer where integrality[j] == 1

together with the variable layout needed to decode a solution vector back to
``(R, S)`` and to encode a schedule as a starting point (warm start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..graph import Graph
from ..schedule import Schedule

__all__ = ["StandardForm", "canonical_schedule", "exact_free", "exact_memory"]


@dataclass
class StandardForm:
    """A mixed-integer linear program over one graph and budget, plus its variable layout.

    Attributes
    ----------
    c, A, row_lo, row_hi, col_lo, col_hi, integrality
        The program (``A`` is a ``scipy.sparse.csr_array``; ``integrality`` is
        ``uint8``, 1 for integer columns). ``relax()`` drops integrality.
    objective_offset : float
        Constant cost of the computations fixed by the frontier (``R[t, t]``).
    formulation : str
        ``"paper"`` or ``"strong"``; ``"window"`` for the windowed search's
        program (``remat_core.solvers.lns``), whose layout covers only the
        stages of its window (:meth:`decode` and :meth:`encode` do not apply).
    budget_bytes : int
    memory_unit : float
        Bytes per memory unit in ``A`` (see :func:`~remat_core.formulation._rows.memory_unit`).
    r_t, r_i, r_col, s_t, s_i, s_col : numpy.ndarray
        Stage, node and column of every ``R`` and ``S`` variable.
    r_fixed_t, r_fixed_i : numpy.ndarray
        Entries of ``R`` fixed to 1 without a column (the strong formulation's diagonal).
    f_t, f_i, f_k, f_col : numpy.ndarray
        ``FREE`` variables: value ``i`` freed after computing its user ``k`` in stage ``t``.
    u_t, u_k, u_col : numpy.ndarray
        ``U`` variables (memory after allocating ``k`` in stage ``t``, fixed bytes excluded).
    canonical : bool
        Whether the program only admits canonical schedules (see :func:`canonical_schedule`).
    row_families : dict
        Number of rows of each constraint family, for reports.
    budget_rows : numpy.ndarray or None
        Rows whose upper bound is a constant plus the free budget in memory
        units (and no other row or column depends on the budget but ``u_col``'s
        upper bounds); ``None`` when the builder did not record them or rows
        were added since. :meth:`with_budget` needs them.
    """

    c: np.ndarray
    A: sp.csr_array
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integrality: np.ndarray
    objective_offset: float
    formulation: str
    budget_bytes: int
    memory_unit: float
    graph: Graph = field(repr=False)
    r_t: np.ndarray = field(repr=False)
    r_i: np.ndarray = field(repr=False)
    r_col: np.ndarray = field(repr=False)
    s_t: np.ndarray = field(repr=False)
    s_i: np.ndarray = field(repr=False)
    s_col: np.ndarray = field(repr=False)
    r_fixed_t: np.ndarray = field(repr=False)
    r_fixed_i: np.ndarray = field(repr=False)
    f_t: np.ndarray = field(repr=False)
    f_i: np.ndarray = field(repr=False)
    f_k: np.ndarray = field(repr=False)
    f_col: np.ndarray = field(repr=False)
    u_t: np.ndarray = field(repr=False)
    u_k: np.ndarray = field(repr=False)
    u_col: np.ndarray = field(repr=False)
    canonical: bool = False
    row_families: dict[str, int] = field(default_factory=dict)
    budget_rows: np.ndarray | None = field(default=None, repr=False)

    # ------------------------------------------------------------ sizes
    @property
    def n_cols(self) -> int:
        return int(len(self.c))

    @property
    def n_rows(self) -> int:
        return int(self.A.shape[0])

    def size(self) -> dict[str, Any]:
        """Columns, integer columns, rows and non-zeros (for ``stats``)."""
        return {
            "formulation": self.formulation,
            "columns": self.n_cols,
            "integer_columns": int(self.integrality.sum()),
            "rows": self.n_rows,
            "nonzeros": int(self.A.nnz),
            "memory_unit_bytes": self.memory_unit,
            "row_families": dict(self.row_families),
        }

    def relax(self) -> "StandardForm":
        """The LP relaxation: the same program with every column continuous."""
        out = StandardForm(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        out.integrality = np.zeros_like(self.integrality)
        return out

    def with_budget(self, budget_bytes: int) -> "StandardForm | None":
        """The same program for another budget, in the same memory unit, by changing bounds only.

        The matrix, the objective and the column layout are shared (not
        copied), so an LP sequence re-solves it from its last basis. ``None``
        when only a new build gives the program: no :attr:`budget_rows`
        recorded (the paper formulation, or rows added since), or a budget
        below the fixed bytes on either side (then the builder adds an
        infeasible row).
        """
        budget_bytes = int(budget_bytes)
        fixed = self.graph.fixed_bytes
        if self.budget_rows is None or budget_bytes < fixed or self.budget_bytes < fixed:
            return None
        shift = (budget_bytes - self.budget_bytes) / self.memory_unit
        out = StandardForm(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        out.budget_bytes = budget_bytes
        out.row_hi = self.row_hi.copy()
        out.row_hi[self.budget_rows] += shift
        if len(self.u_col):
            out.col_hi = self.col_hi.copy()
            out.col_hi[self.u_col] = (budget_bytes - fixed) / self.memory_unit
        return out

    # ------------------------------------------------------------ decoding
    def fractional(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Dense float ``(R, S)`` from a (possibly fractional) solution vector."""
        n = self.graph.n
        x = np.asarray(x, dtype=np.float64)
        R = np.zeros((n, n))
        S = np.zeros((n, n))
        R[self.r_t, self.r_i] = x[self.r_col]
        R[self.r_fixed_t, self.r_fixed_i] = 1.0
        S[self.s_t, self.s_i] = x[self.s_col]
        np.clip(R, 0.0, 1.0, out=R)
        np.clip(S, 0.0, 1.0, out=S)
        return R, S

    def decode(self, x: np.ndarray) -> Schedule:
        """The schedule of an integer solution vector (entries rounded at 0.5).

        Raises
        ------
        InvalidScheduleError
            If the rounded matrices break the frontier structure (never for a
            solution of this program).
        """
        R, S = self.fractional(x)
        return Schedule(R > 0.5, S > 0.5)

    # ------------------------------------------------------------ encoding
    def encode(self, schedule: Schedule) -> np.ndarray:
        """A solution vector for ``schedule`` (a warm start).

        For a canonical program the schedule is first made canonical (which
        never raises its cost or its memory at any step). The vector satisfies
        every row when the schedule is within :attr:`budget_bytes`.
        """
        R, S = schedule.dense()
        if self.canonical:
            R, S = canonical_schedule(self.graph, S)
        x = np.zeros(self.n_cols)
        x[self.r_col] = R[self.r_t, self.r_i]
        x[self.s_col] = S[self.s_t, self.s_i]
        if len(self.f_col) or len(self.u_col):
            free = exact_free(self.graph, R, S)
            x[self.f_col] = free[self.f_t, self.f_i] == self.f_k
            if len(self.u_col):
                U = exact_memory(self.graph, R, S, free) / self.memory_unit
                x[self.u_col] = U[self.u_t, self.u_k]
        return np.clip(x, self.col_lo, self.col_hi)


def exact_free(graph: Graph, R: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``out[t, i]``: the node after whose computation value ``i`` is freed in stage ``t``, or ``-1``.

    Following the simulator: ``i`` is freed after its last user computed in
    stage ``t`` unless it is kept into stage ``t + 1``.
    """
    n = graph.n
    last = np.full((n, n), -1, dtype=np.int64)
    edges = graph.edges  # sorted by user, so later users overwrite earlier ones
    for i, k in edges:
        col = R[:, k]
        last[col, i] = k
    keep_next = np.zeros((n, n), dtype=bool)
    keep_next[:-1] = S[1:]
    last[keep_next] = -1
    return last


def exact_memory(graph: Graph, R: np.ndarray, S: np.ndarray, free: np.ndarray | None = None) -> np.ndarray:
    """``U[t, k]`` in bytes: memory right after allocating ``k`` in stage ``t`` (fixed bytes and workspace excluded).

    Defined for every ``k`` (computed or not), following the U recurrence.
    """
    n = graph.n
    if free is None:
        free = exact_free(graph, R, S)
    m = graph.memory_bytes.astype(np.float64)
    freed_after = np.zeros((n, n))
    t_idx, i_idx = np.nonzero(free >= 0)
    np.add.at(freed_after, (t_idx, free[t_idx, i_idx]), m[i_idx])
    alloc = np.cumsum(R * m[None, :], axis=1)
    freed_before = np.cumsum(freed_after, axis=1) - freed_after
    return (S * m[None, :]).sum(axis=1)[:, None] + alloc - freed_before


def canonical_schedule(graph: Graph, S: Any) -> tuple[np.ndarray, np.ndarray]:
    """The canonical schedule of a checkpoint matrix: dense bool ``(R, S)``.

    Stage ``t`` computes exactly what the kept values force (``t`` itself,
    values kept into ``t + 1`` but not into ``t``, and their inputs that are
    not kept: :func:`~remat_core.optimal_r_given_s`), and a value kept into
    stage ``t`` that no computation of stage ``t`` reads and that is not kept
    into ``t + 1`` is dropped; repeated until nothing changes (dropping a
    value can make stage ``t - 1`` compute less, and so on).

    If ``S`` comes from a valid schedule, the canonical schedule is valid,
    costs no more, and its memory at every computation is no higher (the
    argument is in ``docs/formulation.rst``), so it fits every budget the
    original fits.

    Examples
    --------
    >>> from remat_core import Schedule
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(2)                  # f0 f1 loss g1 g0; g0 reads f0 and g1
    >>> S = Schedule.checkpoint_all(g).S
    >>> S[4, 2] = True                       # also keep the loss into the stage of g0
    >>> R, S2 = canonical_schedule(g, S)
    >>> bool(S2[4, 2]), bool((S2 == Schedule.checkpoint_all(g).S).all())
    (False, True)
    """
    from ..simulate import optimal_r_given_s

    n = graph.n
    S = np.array(S, dtype=bool, copy=True)
    edges = graph.edges
    # reads[j, i] = 1 when node j reads value i
    reads = sp.csr_array((np.ones(len(edges)), (edges[:, 1], edges[:, 0])), shape=(n, n))
    while True:
        R = optimal_r_given_s(graph, S).dense()[0]
        used = (reads.T @ R.T.astype(np.float64)).T > 0   # used[t, i]: a node computed in t reads i
        nxt = np.zeros_like(S)
        nxt[:-1] = S[1:]
        new = S & (used | nxt)
        if np.array_equal(new, S):
            return R, S
        S = new
