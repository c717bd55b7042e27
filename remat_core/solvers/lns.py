"""Large-neighbourhood search with the exact MILP on windows of the incumbent's stages.

What lives here
---------------
* :func:`window_program` and :func:`reoptimize_window`: everything outside a
  window of stages ``[a, b)`` is fixed to the incumbent (in particular the
  values kept into stage ``a`` and those kept into stage ``b``); inside it,
  ``R`` and ``S`` are re-chosen among the values the incumbent touches in the
  window and their inputs (``depth`` levels of them), by a MILP with the
  simulator's memory accounting (Checkmate's ``U`` recurrence and ``FREE``
  linearization, as in :mod:`remat_core.formulation.strong`), warm-started
  from the incumbent. Any solution of that program, put back into the
  incumbent, is a valid schedule under the budget (the simulator checks it
  anyway), and the incumbent itself is one: the window's optimum is never
  worse.
* :func:`windows` (where to look: the windows whose stages recompute the
  most cost, the costliest first) and :func:`improve_windows` (the loop:
  re-optimize one window after another, accept what is cheaper, widen the
  windows when a whole pass found nothing, until the deadline, a work budget
  of ``max_windows`` programs, or nothing is left to recompute).

The moves come in a fixed order given the incumbent, and a program's result
does not depend on the time when it is solved to optimality or limited in
branch-and-bound nodes (``window_nodes``; ``auto`` gives each program
:data:`WINDOW_NODES`, HiGHS's root), so with work budgets or a deadline a
longer search repeats a shorter one and goes on: never worse (the shorter
one's last program, cut by its deadline, at best equals the longer one's
run of it). With ``window_s`` each program gets that many seconds instead
and its best point is taken: the search's path then depends on the
machine's speed and load.

Imports: numpy, scipy.sparse, the graph, schedule and simulator, the
formulation's memory unit and the MILP backends; never :mod:`.auto` or
:mod:`.anytime` (``auto`` calls this module).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from ..errors import InvalidScheduleError
from ..formulation.standard_form import StandardForm
from ..graph import Graph
from ..schedule import Schedule

__all__ = ["WindowProgram", "window_program", "reoptimize_window", "windows", "round_plan", "improve_windows"]

log = logging.getLogger(__name__)

#: Window widths (stages) tried in turn: the next one when a whole pass over the windows found nothing.
WIDTHS = (8, 16, 32, 64)
#: Seconds a window's program may run by default in :func:`improve_windows` (its best point so far is taken).
WINDOW_S = 1.0
#: Branch-and-bound nodes a window's program may use under ``auto`` (with no limit in seconds but the
#: deadline): HiGHS's root node alone, its heuristics warm-started from the incumbent. On the 245-node graph at
#: its smallest budget the root takes 1.3-4 CPU s a window and finds what a 1 s wall limit cut short (196 ->
#: 171 on one window, where 1 s found nothing); 60 s of the search went from 2.076 to 1.975 times the node
#: costs, against 2.006 with 1 s a program (load 5-8, 2 cores).
WINDOW_NODES = 1
#: Rounds of a cycle of :func:`improve_windows` (:func:`round_plan`): each looks one level of inputs further,
#: with twice the time a program.
ROUNDS = 4
#: HiGHS options of a program limited in nodes: the root's cut loop kept short (same improvements measured on
#: windows of the 245-node graph at its smallest budget, in a third to half of the time).
ROOT_OPTIONS = {"mip_lp_age_limit": 1, "mip_pool_soft_limit": 1}
#: A window's program is not built beyond this many binary columns (its build and solve would not pay).
MAX_BINARIES = 30_000


@dataclass
class WindowProgram:
    """The MILP of one window and how to put its solution back into the incumbent: ``form`` is the program
    (a :class:`~remat_core.formulation.standard_form.StandardForm` whose layout covers stages ``a .. b-1``
    only, formulation ``"window"``), ``start`` the incumbent's vector and ``start_cost`` its cost."""

    a: int
    b: int
    form: StandardForm
    start: np.ndarray
    start_cost: float

    @property
    def n_binaries(self) -> int:
        return int(self.form.integrality.sum())


class _Rows:
    """Sparse rows collected one at a time: ``lo <= sum(v * x[c]) <= hi``."""

    def __init__(self) -> None:
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        k = len(self.lo)
        for col, val in terms:
            self.r.append(k)
            self.c.append(col)
            self.v.append(val)
        self.lo.append(lo)
        self.hi.append(hi)

    def build(self, n_cols: int) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
        A = sp.coo_array((np.asarray(self.v, float), (np.asarray(self.r, np.int64), np.asarray(self.c, np.int64))),
                         shape=(len(self.lo), n_cols)).tocsr()
        A.sum_duplicates()
        return A, np.asarray(self.lo, float), np.asarray(self.hi, float)


def _rows_of(schedule: Schedule) -> tuple[list[set[int]], list[set[int]]]:
    n = schedule.n
    return ([set(schedule.R_row(t).tolist()) for t in range(n)], [set(schedule.S_row(t).tolist()) for t in range(n)])


def window_program(graph: Graph, schedule: Schedule, budget_bytes: int, a: int, b: int, depth: int = 1,
                   rows: tuple[list[set[int]], list[set[int]]] | None = None) -> WindowProgram | None:
    """The MILP that re-chooses stages ``a .. b-1`` of ``schedule`` (see the module docstring); ``None`` when
    the window is empty or its program would exceed :data:`MAX_BINARIES`.

    Candidates of stage ``t``: the values ``i < t`` the incumbent computes or keeps in the window or keeps
    into stage ``b``, the window's own nodes, and ``depth`` levels of their inputs. Columns: ``R[t, i]`` and
    ``S[t, i]`` (binary; ``S[a, .]`` fixed to the incumbent's), ``FREE[t, i, j]`` (continuous, value ``i``
    freed after its user ``j``) and the memory ``M[t, k]`` after computing ``k`` (continuous, in the
    formulation's memory unit).
    """
    from ..formulation._rows import scaled_memory

    n = graph.n
    a, b = max(0, int(a)), min(n, int(b))
    if b <= a:
        return None
    R_rows, S_rows = rows if rows is not None else _rows_of(schedule)
    deps, users = graph.deps, graph.users
    unit, m, ws, cap = scaled_memory(graph, budget_bytes)
    exit_keep = S_rows[b] if b < n else set()
    touched: set[int] = set(range(a, b)) | set(exit_keep)
    for t in range(a, b):
        touched |= R_rows[t] | S_rows[t]
    frontier = set(touched)
    for _ in range(depth):
        frontier = {i for k in frontier for i in deps[k]} - touched
        touched |= frontier
    cand_all = sorted(touched)
    cands: dict[int, list[int]] = {}
    n_bin = 0
    for t in range(a, b):
        c_t = [i for i in cand_all if i < t]
        if t == a:
            c_t = sorted(set(c_t) | S_rows[a])
        cands[t] = c_t
        n_bin += 2 * len(c_t)
        if n_bin > MAX_BINARIES:
            return None

    cols_lo: list[float] = []
    cols_hi: list[float] = []
    cost: list[float] = []
    integ: list[int] = []
    start: list[float] = []

    def new_col(lo: float, hi: float, c: float, integer: bool, x0: float) -> int:
        cols_lo.append(lo)
        cols_hi.append(hi)
        cost.append(c)
        integ.append(1 if integer else 0)
        start.append(x0)
        return len(cost) - 1

    r_cols: dict[tuple[int, int], int] = {}
    s_cols: dict[tuple[int, int], int] = {}
    f_cols: list[tuple[int, int, int, int]] = []   # (t, i, j, column): value i freed after its user j in stage t
    u_cols: list[tuple[int, int, int]] = []        # (t, k, column): the memory after allocating k in stage t
    for t in range(a, b):
        for i in cands[t]:
            r_cols[t, i] = new_col(0.0, 1.0, float(graph.cost[i]), True, float(i in R_rows[t]))
            kept = float(i in S_rows[t])
            if t == a:
                s_cols[t, i] = new_col(kept, kept, 0.0, True, kept)
            else:
                can_keep = i == t - 1 or (t - 1, i) in r_cols
                s_cols[t, i] = new_col(0.0, 1.0 if can_keep else 0.0, 0.0, True, kept if can_keep else 0.0)

    rows_ = _Rows()

    def present(t: int, i: int) -> list[tuple[int, float]]:
        return [(r_cols[t, i], 1.0), (s_cols[t, i], 1.0)] if (t, i) in r_cols else []

    for t in range(a, b):
        c_t = cands[t]
        in_t = set(c_t)
        computable = c_t + [t]
        for k in computable:
            for i in deps[k]:
                if i not in in_t:   # its input is never present in this stage: k is not computed here
                    if k == t:
                        return None
                    cols_hi[r_cols[t, k]] = 0.0
                    continue
                if k == t:
                    rows_.add(present(t, i), 1.0, np.inf)
                else:
                    rows_.add(present(t, i) + [(r_cols[t, k], -1.0)], 0.0, np.inf)
        for i in c_t:
            rows_.add(present(t, i), -np.inf, 1.0)   # never recompute a kept value
            if t > a and i != t - 1:
                prev = present(t - 1, i)
                if prev:
                    rows_.add([(s_cols[t, i], 1.0)] + [(col, -v) for col, v in prev], -np.inf, 0.0)
        # FREE[t, i, j]: i is freed after its user j (j < t, t not a user of i)
        nxt = (lambda i: s_cols.get((t + 1, i))) if t + 1 < b else None
        free_terms: dict[int, list[tuple[int, int]]] = {}   # j -> [(i, col)]
        by_value: dict[int, list[int]] = {}
        for i in c_t:
            us = [j for j in users[i] if j in in_t and j < t]
            if not us or t in users[i]:
                continue
            for j in us:
                last_start = j == max((u for u in users[i] if u in R_rows[t] and u <= t), default=-1)
                kept_next = i in (S_rows[t + 1] if t + 1 < n else set())
                f = new_col(0.0, 1.0, 0.0, False,
                            float(last_start and not kept_next and (i in R_rows[t] or i in S_rows[t])))
                free_terms.setdefault(j, []).append((i, f))
                f_cols.append((t, i, j, f))
                by_value.setdefault(i, []).append(f)
                rows_.add([(f, 1.0), (r_cols[t, j], -1.0)], -np.inf, 0.0)
                for j2 in us:
                    if j2 > j:
                        rows_.add([(f, 1.0), (r_cols[t, j2], 1.0)], -np.inf, 1.0)
        for i, fs in by_value.items():
            terms = [(f, 1.0) for f in fs] + [(col, -v) for col, v in present(t, i)]
            if nxt is not None:
                s_next = nxt(i)
                if s_next is not None:
                    terms.append((s_next, 1.0))
                rows_.add(terms, -np.inf, 0.0)
            else:
                rows_.add(terms, -np.inf, -1.0 if i in exit_keep else 0.0)
        # memory: M[t, k] after allocating k (workspace on top must fit), in computation order
        mem = sum(float(m[i]) for i in S_rows[t])
        prev_col = None
        for k in computable:
            on = k == t or k in R_rows[t]
            if on:
                mem += float(m[k])
            mcol = new_col(0.0, np.inf, 0.0, False, 0.0)
            u_cols.append((t, k, mcol))
            if prev_col is None:
                terms = [(mcol, 1.0)] + [(s_cols[t, i], -float(m[i])) for i in c_t if m[i]]
            else:
                terms = [(mcol, 1.0), (prev_col, -1.0)] + [(f, float(m[i])) for i, f in free_terms.get(prev, [])]
            if k == t:
                rows_.add(terms, float(m[k]), float(m[k]))
                rows_.add([(mcol, 1.0)], -np.inf, cap - float(ws[k]))
            else:
                rows_.add(terms + [(r_cols[t, k], -float(m[k]))], 0.0, 0.0)
                rows_.add([(mcol, 1.0), (r_cols[t, k], float(ws[k]))], -np.inf, cap)
            start[mcol] = mem
            if on:   # the incumbent frees k's inputs whose last user in the stage is k and that are not kept on
                for i, f in free_terms.get(k, []):
                    if start[f]:
                        mem -= float(m[i])
            prev_col, prev = mcol, k
    # the values kept into stage b must be present in stage b-1
    for i in exit_keep:
        if i < b - 1:
            terms = present(b - 1, i)
            if not terms:
                return None
            rows_.add(terms, 1.0, np.inf)
    A, lo, hi = rows_.build(len(cost))
    c = np.asarray(cost)
    x0 = np.asarray(start)

    def layout(entries: list[tuple[int, ...]], width: int) -> list[np.ndarray]:
        """The columns of ``entries`` as int64 arrays (the form's variable layout)."""
        arr = np.asarray(entries, np.int64).reshape(-1, width)
        return [arr[:, j].copy() for j in range(width)]

    r_t, r_i, r_col = layout([(t, i, col) for (t, i), col in r_cols.items()], 3)
    s_t, s_i, s_col = layout([(t, i, col) for (t, i), col in s_cols.items()], 3)
    f_t, f_i, f_k, f_col = layout(f_cols, 4)
    u_t, u_k, u_col = layout(u_cols, 3)
    none = np.zeros(0, np.int64)
    form = StandardForm(c=c, A=A, row_lo=lo, row_hi=hi, col_lo=np.asarray(cols_lo), col_hi=np.asarray(cols_hi),
                        integrality=np.asarray(integ, np.uint8), objective_offset=0.0, formulation="window",
                        budget_bytes=int(budget_bytes), memory_unit=unit, graph=graph, r_t=r_t, r_i=r_i, r_col=r_col,
                        s_t=s_t, s_i=s_i, s_col=s_col, r_fixed_t=none, r_fixed_i=none, f_t=f_t, f_i=f_i,
                        f_k=f_k, f_col=f_col, u_t=u_t, u_k=u_k, u_col=u_col)
    return WindowProgram(a, b, form, x0, float(c @ x0))


def _spliced(schedule: Schedule, prog: WindowProgram, x: np.ndarray,
             rows: tuple[list[set[int]], list[set[int]]]) -> Schedule:
    """The incumbent with stages ``a .. b-1`` taken from the program's solution ``x``."""
    R_rows, S_rows = rows
    R_new = [set(r) for r in R_rows]
    S_new = [set(s) for s in S_rows]
    for t in range(prog.a, prog.b):
        R_new[t] = {t}
        if t > prog.a:
            S_new[t] = set()
    form = prog.form
    for t, i in zip(form.r_t[x[form.r_col] > 0.5].tolist(), form.r_i[x[form.r_col] > 0.5].tolist()):
        R_new[t].add(i)
    on = (x[form.s_col] > 0.5) & (form.s_t > prog.a)
    for t, i in zip(form.s_t[on].tolist(), form.s_i[on].tolist()):
        S_new[t].add(i)
    return _schedule(schedule.n, R_new, S_new)


def _schedule(n: int, R_rows: list[set[int]], S_rows: list[set[int]]) -> Schedule:
    def csr(rows):
        ptr = np.zeros(n + 1, np.int64)
        ptr[1:] = np.cumsum([len(r) for r in rows])
        idx = np.fromiter((i for r in rows for i in sorted(r)), np.int64, int(ptr[-1]))
        return ptr, idx

    rp, ri = csr(R_rows)
    sp_, si = csr(S_rows)
    return Schedule.from_csr(n, rp, ri, sp_, si)


def reoptimize_window(graph: Graph, schedule: Schedule, budget_bytes: int, a: int, b: int, depth: int = 1,
                      time_limit_s: float | None = None,
                      rows: tuple[list[set[int]], list[set[int]]] | None = None) -> Schedule | None:
    """The incumbent with stages ``a .. b-1`` re-optimized by the window's MILP (HiGHS, warm-started
    from the incumbent), when that is cheaper and the simulator finds it within ``budget_bytes``; else ``None``."""
    rows = rows if rows is not None else _rows_of(schedule)
    prog = window_program(graph, schedule, budget_bytes, a, b, depth, rows)
    return None if prog is None else _solved(graph, schedule, budget_bytes, prog, time_limit_s, rows)


def _solved(graph: Graph, schedule: Schedule, budget_bytes: int, prog: WindowProgram, time_limit_s: float | None,
            rows: tuple[list[set[int]], list[set[int]]], max_nodes: int | None = None) -> Schedule | None:
    """:func:`reoptimize_window` once the program is built (``max_nodes``: HiGHS's branch-and-bound node limit)."""
    from ..simulate import simulate
    from .backends import solve_arrays

    a, b, f = prog.a, prog.b, prog.form
    out = solve_arrays("highs", f.c, f.A, f.row_lo, f.row_hi, f.col_lo, f.col_hi, f.integrality,
                       time_limit_s=time_limit_s, threads=None, start=prog.start, mip_rel_gap=1e-6,
                       options=None if max_nodes is None else {"mip_max_nodes": int(max_nodes), **ROOT_OPTIONS})
    if out.x is None or out.objective is None or out.objective >= prog.start_cost - 1e-9:
        return None
    cand = _spliced(schedule, prog, np.asarray(out.x), rows)
    try:
        peak = simulate(graph, cand, timeline=False).peak_memory_bytes
    except InvalidScheduleError as exc:   # the program's model and the simulator disagree: a bug, never returned
        log.warning("lns: window [%d, %d) gave an invalid schedule: %s", a, b, exc)
        return None
    if peak > budget_bytes:
        log.warning("lns: window [%d, %d) gave a schedule of peak %d over the budget %d", a, b, peak, budget_bytes)
        return None
    return cand


def windows(graph: Graph, schedule: Schedule, width: int, offset: int = 0) -> list[tuple[int, int]]:
    """Windows of ``width`` stages (overlapping by half, the first starting at ``offset`` modulo half a width)
    that recompute something, the costliest first (ties: the earlier window)."""
    n = graph.n
    R_ptr, R_idx, _, _ = schedule.csr
    stage = np.repeat(np.arange(n), np.diff(R_ptr))
    rec = np.bincount(stage[R_idx != stage], weights=graph.cost[R_idx[R_idx != stage]], minlength=n)
    step = max(1, width // 2)
    first = int(offset) % step
    starts = ([0] if first else []) + list(range(first, max(n - width, 0) + step, step))
    out = []
    for a in starts:
        b = min(n, a + width)
        score = float(rec[a:b].sum())
        if score > 0:
            out.append((-score, a, b))
    return [(a, b) for _, a, b in sorted(set(out))]


def round_plan(rnd: int, depth: int = 1, widths: tuple[int, ...] = WIDTHS, window_s: float | None = WINDOW_S,
               window_nodes: int | None = None) -> tuple[int, tuple[int, ...], float | None, int | None, int]:
    """What round ``rnd`` of :func:`improve_windows` does: ``(depth, widths, seconds a program, branch-and-bound
    nodes a program, offset)``.

    Rounds come in cycles of :data:`ROUNDS`: within a cycle, round ``p`` looks ``p`` more levels of inputs
    further and gives each program ``2**p`` times ``window_s`` and ``window_nodes``; cycle ``c`` doubles the
    widths ``c`` times and
    shifts the windows by a quarter width on odd cycles, so that a longer search keeps trying new, larger
    neighbourhoods (on the whole graph once a window spans it, up to :data:`MAX_BINARIES`).

    Examples
    --------
    >>> round_plan(0), round_plan(5, window_s=None, window_nodes=1)
    ((1, (8, 16, 32, 64), 1.0, None, 0), (2, (16, 32, 64, 128), None, 2, 4))
    """
    cycle, phase = divmod(int(rnd), ROUNDS)
    ws = tuple(w * 2 ** cycle for w in widths)
    return (depth + phase, ws, None if window_s is None else window_s * 2 ** phase,
            None if window_nodes is None else window_nodes * 2 ** phase,
            (cycle % 2) * max(1, widths[0] * 2 ** cycle // 4))


def _why_stop(info: dict[str, Any], max_windows: int | None, lower_bound: float | None, best_cost: float,
              stop: Callable[[], bool] | None, deadline: float | None, clock: Callable[[], float]) -> str:
    """Why :func:`improve_windows` stops before its next program (``""``: it goes on)."""
    if max_windows is not None and info["windows"] >= max_windows:
        return "work budget"
    if lower_bound is not None and best_cost <= lower_bound * (1 + 1e-9):
        return "at the lower bound"
    if stop is not None and stop():
        return "stopped"
    if deadline is not None and deadline - clock() <= 0.05:
        return "deadline"
    return ""


def improve_windows(graph: Graph, schedule: Schedule, budget_bytes: int,
                    offer: Callable[[Schedule], None] | None = None,
                    clock: Callable[[], float] | None = None, deadline: float | None = None,
                    max_windows: int | None = None, lower_bound: float | None = None,
                    stop: Callable[[], bool] | None = None, depth: int = 1,
                    widths: tuple[int, ...] = WIDTHS, window_s: float | None = WINDOW_S,
                    rounds: int | None = ROUNDS, window_nodes: int | None = None) -> tuple[Schedule, dict[str, Any]]:
    """Re-optimize windows of the incumbent, costliest first, until the deadline, ``max_windows`` programs,
    ``lower_bound``, ``stop()`` or the end of ``rounds`` rounds (``None``: no end but those, and a cycle of
    rounds in which no window had a program). Returns the best schedule and what the search did (``windows``,
    ``improved``, ``rounds``, ``why``).

    A round passes over the windows of each of its widths in turn, moving to the next width when a pass
    improves nothing (and to the next round after a pass that improved something); what each round looks at
    is :func:`round_plan`'s (more levels of inputs and more time a program within a cycle, wider and shifted
    windows from one cycle to the next).

    ``offer(schedule)`` is called with every improvement (verified by the simulator under ``budget_bytes``).
    Each program gets its round's seconds and nodes (``window_s`` and ``window_nodes`` times ``2**p``; at most
    the time left before ``deadline``); with ``window_s=None``, programs are solved to optimality, or to their
    node limit, and the result does not depend on the machine. The moves depend only on the incumbent, so a
    longer search then repeats a shorter one and goes on: never worse.

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import random_training_graph
    >>> from remat_core.units import resolve_budget
    >>> g = random_training_graph(8, 3, seed=1)
    >>> B = resolve_budget(g, 0.7)
    >>> start = solve(g, B, method="dtr").schedule
    >>> best, info = improve_windows(g, start, B, max_windows=4, window_s=None)
    >>> best.cost(g) <= start.cost(g), info["windows"] <= 4
    (True, True)
    """
    if rounds is None and deadline is None and max_windows is None and stop is None:
        raise ValueError("`rounds=None` needs a `deadline`, `max_windows` or `stop` to end the search")
    clock = time.perf_counter if clock is None else clock   # looked up now: a test may replace it
    best = schedule
    best_cost = schedule.cost(graph)
    info: dict[str, Any] = {"windows": 0, "improved": 0, "rounds": 0, "why": "no window improves"}
    built_in_cycle = False   # whether a program was built in this cycle of rounds (rounds=None ends without)
    last_s = 0.0   # the last program's time (build and solve)
    rnd = 0
    while rounds is None or rnd < rounds:
        d, round_widths, limit_s, nodes, offset = round_plan(rnd, depth, widths, window_s, window_nodes)
        info["rounds"] = rnd + 1
        for width in round_widths:
            found = True
            while found:   # passes at this width while one improves something
                found = False
                queue = windows(graph, best, width, offset)
                tried: set[tuple[int, int]] = set()
                while queue:
                    a, b = queue.pop(0)
                    if (a, b) in tried:
                        continue
                    why = _why_stop(info, max_windows, lower_bound, best_cost, stop, deadline, clock)
                    if why:
                        info["why"] = why
                        return best, info
                    limit = limit_s
                    if deadline is not None:
                        left = deadline - clock()
                        if left < last_s:   # the last program would not fit: HiGHS checks its limit between phases,
                            info["why"] = "deadline"   # so a root cut short both overruns and finds nothing
                            return best, info
                        limit = left if limit_s is None else min(left, limit_s)
                    info["windows"] += 1
                    t0 = clock()
                    tried.add((a, b))
                    rows = _rows_of(best)
                    prog = window_program(graph, best, budget_bytes, a, b, d, rows)
                    built_in_cycle |= prog is not None
                    cand = None if prog is None else _solved(graph, best, budget_bytes, prog, limit, rows, nodes)
                    if prog is not None:
                        last_s = clock() - t0
                    cost = math.inf if cand is None else cand.cost(graph)
                    if cost < best_cost - 1e-9:
                        log.debug("lns: window [%d, %d), width %d, depth %d: %.6g -> %.6g", a, b, width, d,
                                  best_cost, cost)
                        best, best_cost = cand, cost
                        info["improved"] += 1
                        found = True
                        if offer is not None:
                            offer(best)
                        queue = [w for w in windows(graph, best, width, offset) if w not in tried]
        rnd += 1
        if rounds is None and rnd % ROUNDS == 0:
            if not built_in_cycle:   # every window of the cycle was beyond MAX_BINARIES: wider ones are too
                info["why"] = "no window has a program"
                return best, info
            built_in_cycle = False
    return best, info
