"""``auto``'s anytime search: feasibility first, then restarts that keep improving until the deadline.

What lives here
---------------
* :func:`min_peak_schedules` (feasibility first). For each DTR heuristic, the
  smallest budget at which its run succeeds, found by bisection over the
  whole budget range (from the graph's lower bound to the checkpoint-all
  peak), and the schedule run there. The range does not depend on the budget
  asked for, so these schedules are the same whatever that budget is: a
  schedule of peak ``p`` is a candidate at every budget ``>= p``, which makes
  the feasibility they give monotone in the budget, and the smallest of their
  peaks is the smallest budget found (the hint ``auto`` reports when nothing
  fits; a budget found, not a proof: DTR is not monotone in its budget).
* :func:`restart_moves` and :func:`improve` (the improvement loop). Restarts
  of DTR under each heuristic, both freeing rules and tighter budgets (a run
  under 0.9 of the budget leaves room that
  :func:`~remat_core.solvers.segments.polish` turns into kept values), then
  seeds of the ``random`` heuristic; each schedule is polished under the
  budget asked for, re-simulated and offered. The moves come in a fixed
  order, so a longer search tries a superset of a shorter one's moves and is
  never worse; it stops at its deadline, after ``max_moves`` moves (a work
  budget: tests use it instead of the wall clock), when the incumbent is at
  the lower bound, or when the moves run out.

Every run is capped in computations by the time left (a DTR run cannot be
interrupted), from its heuristic's measured time per computation.

Imports: numpy, the graph, schedule and simulator, :mod:`.dtr` and
:mod:`.segments`; never :mod:`.auto`, which imports this module.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..graph import Graph
from ..schedule import RematResult, SolveStatus

__all__ = ["Move", "restart_moves", "min_peak_schedules", "improve", "HEURISTIC_ORDER"]

log = logging.getLogger(__name__)

#: DTR heuristics in the order the search tries them: msps first (the best on most shared graphs, and the one
#: reaching the smallest budgets; benchmarks/README.md, section dtr), h_dtr (the slowest per computation) last.
HEURISTIC_ORDER = ("msps", "h_dtr_eq", "h_dtr_local", "largest", "lru", "h_dtr")
#: Budgets of the restarts, as shares of the budget asked for.
SCALES = (1.0, 0.97, 0.94, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6)
#: After the grid of SCALES: every share from 0.995 down to 0.6 in steps of 0.005 (those not in SCALES), for
#: these heuristics and freeing rules in turn. A DTR run's cost is not monotone in its budget, and a run under a
#: slightly different share, polished, is often cheaper: at 0.6 of the peak of the 497-node layered graph
#: (seed 7) msps under 0.91 of the budget gave 1.0175 times the bound against the grid's 1.0218, and under 0.88
#: on the 245-node one 1.0102 against 1.0109 (no other share or heuristic of the grid came closer). A longer
#: limit reaches further into them (issue 37: it must pay).
FINE_STEP = 0.005
FINE_FLOOR = 0.6
FINE_RUNS = (("msps", False), ("h_dtr_eq", False), ("msps", True), ("h_dtr_eq", True))
#: Then msps (default freeing rule, then keep_dead) at every share 0.001 apart not tried yet, before the random
#: heuristic's seeds: where a 300 s limit had run every other restart (497-node layered graph at 0.5: 1,004
#: moves, 1.0260 times the bound, as with 60 s), these shares found 1.0253 (0.678) and 1.0241 (0.643).
ULTRA_STEP = 0.001
#: Budget shares of the ``random`` heuristic's restarts, one round of them per seed.
RANDOM_SCALES = (1.0, 0.95, 0.9)
#: How much slower a computation of these heuristics is than one of ``h_dtr_eq`` (their walks over evicted
#: values; measured on LSTM_512, benchmarks/README.md section dtr), for a cap before their own run is timed.
SLOWDOWN = {"h_dtr": 60.0, "msps": 16.0}
#: How much slower a computation under the ``keep_dead`` freeing rule is than under the default rule, by
#: heuristic: msps's ancestor walks and h_dtr's neighbourhood walks then cross the dead values too (LSTM_512
#: at 0.17 of its activation memory: msps 0.9 ms a computation against 41 us, one run 14.6 s; h_dtr 0.5 ms
#: against 10 us, one run 6.3 s; the other heuristics within 1.3x).
KEEP_DEAD_SLOWDOWN = {"msps": 25.0, "h_dtr": 60.0}
#: Computation cap (a multiple of n) of a heuristic's first run, before its time per computation is known.
FIRST_CAP = 10.0
#: The most computations per node any run may make (DTR's own default).
MAX_CAP = 50.0


@dataclass(frozen=True)
class Move:
    """One restart: DTR with ``heuristic`` (and ``seed``) under ``scale`` times the budget, freeing rule
    ``keep_dead``; its schedule is then polished under the full budget."""

    heuristic: str
    scale: float
    keep_dead: bool
    seed: int = 0

    @property
    def name(self) -> str:
        seed = f", seed {self.seed}" if self.heuristic == "random" else ""
        kd = ", keep_dead" if self.keep_dead else ""
        return f"restart(dtr({self.heuristic}{seed}{kd}) at {self.scale:g}B)"


def _fine_scales(step: float = FINE_STEP, skip: tuple[float, ...] = SCALES) -> list[float]:
    """The budget shares ``step`` apart from just below 1 down to FINE_FLOOR, the largest first, without those
    in ``skip``."""
    steps = int(round((1.0 - FINE_FLOOR) / step))
    return [s for s in (round(1.0 - step * k, 3) for k in range(1, steps + 1)) if s not in skip]


def restart_moves(n_seeds: int = 200) -> Iterator[Move]:
    """The restarts in the order :func:`improve` tries them: every heuristic and freeing rule at each budget
    share of ``SCALES`` (the largest first), then the fine shares (``_fine_scales``) for each of
    ``FINE_RUNS`` in turn, then msps at the shares ``ULTRA_STEP`` apart not tried yet, then ``n_seeds`` seeds
    of the ``random`` heuristic.

    Examples
    --------
    >>> moves = list(restart_moves(n_seeds=1))
    >>> moves[0].name, moves[120].name
    ('restart(dtr(msps) at 1B)', 'restart(dtr(msps) at 0.995B)')
    >>> moves[-1].name
    'restart(dtr(random, seed 1) at 0.9B)'
    """
    for scale in SCALES:
        for heuristic in HEURISTIC_ORDER:
            for keep_dead in (False, True):
                yield Move(heuristic, scale, keep_dead)
    for heuristic, keep_dead in FINE_RUNS:
        for scale in _fine_scales():
            yield Move(heuristic, scale, keep_dead)
    tried = tuple(SCALES) + tuple(_fine_scales())
    for keep_dead in (False, True):
        for scale in _fine_scales(ULTRA_STEP, tried):
            yield Move("msps", scale, keep_dead)
    for seed in range(1, n_seeds + 1):
        for scale in RANDOM_SCALES:
            yield Move("random", scale, False, seed)


class _Runner:
    """DTR runs capped by the time left: each heuristic's time per computation is measured on its runs."""

    def __init__(self, graph: Graph, clock: Callable[[], float], deadline: float | None,
                 per: dict[str, float] | None = None):
        self.graph, self.clock, self.deadline = graph, clock, deadline
        # seconds per computation by "heuristic/keep_dead"; the ones given were measured under the default rule
        self.per: dict[str, float] = {f"{h}/False": v for h, v in (per or {}).items()}
        self.runs = 0

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()

    def estimate(self, heuristic: str, keep_dead: bool) -> float | None:
        """Seconds per computation of a run of ``heuristic`` under that freeing rule: measured, else from the
        other rule's or another heuristic's measurement times the slowdowns above; ``None``: nothing measured."""
        per = self.per.get(f"{heuristic}/{keep_dead}")
        if per is not None:
            return per
        factor = KEEP_DEAD_SLOWDOWN.get(heuristic, 1.0) if keep_dead else 1.0
        other = self.per.get(f"{heuristic}/{not keep_dead}")
        if other is not None:
            return other * factor if keep_dead else other
        if self.per:
            return max(self.per.values()) * SLOWDOWN.get(heuristic, 1.0) * factor
        return None

    def cap(self, heuristic: str, keep_dead: bool = False) -> float | None:
        """The computation cap (a multiple of n) for a run now; ``None``: no time for one."""
        left = self.left()
        if left is None:
            return MAX_CAP
        per = self.estimate(heuristic, keep_dead)
        if per is None:   # the very first run: a computation costs far less than a simulation step
            cap = FIRST_CAP if left > 0.5 else 0.0
        else:   # half the time left: the time per computation is an estimate, and varies with the load
            cap = 0.5 * left / max(per * self.graph.n, 1e-9)
        return None if cap < 1.2 else min(cap, MAX_CAP)

    def fits(self, heuristic: str, keep_dead: bool, cap: float) -> bool:
        """Whether a run capped at ``cap`` computations per node, at its measured (or estimated) time per
        computation, ends before the deadline."""
        left = self.left()
        if left is None:
            return True
        per = self.estimate(heuristic, keep_dead)
        return left > 0 and (per is None or per * self.graph.n * cap < left)

    def run(self, budget_bytes: int, heuristic: str, keep_dead: bool, seed: int = 0,
            cap: float | None = None) -> dict[str, Any] | None:
        """One DTR run (:func:`~remat_core.solvers.dtr.dtr_run`), or ``None`` when there is no time for it."""
        from .dtr import dtr_run

        cap = self.cap(heuristic, keep_dead) if cap is None else cap
        if cap is None:
            return None
        t0 = self.clock()
        out = dtr_run(self.graph, budget_bytes, heuristic, seed, cap, keep_dead=keep_dead)
        spent = self.clock() - t0
        self.runs += 1
        if out["computations"]:
            per = max(spent, 1e-6) / out["computations"]
            key = f"{heuristic}/{keep_dead}"
            self.per[key] = max(per, self.per.get(key, 0.0))
        return out


def _verified(graph: Graph, schedule: Any, budget_bytes: int, name: str, message: str) -> RematResult | None:
    """``schedule`` as a verified FEASIBLE result under ``budget_bytes``; ``None`` when it does not fit."""
    from ..simulate import simulate

    sim = simulate(graph, schedule)
    if sim.peak_memory_bytes > budget_bytes:
        return None
    from . import verify_result

    res = RematResult(status=SolveStatus.FEASIBLE, schedule=schedule, budget_bytes=int(budget_bytes), method=name,
                      message=message)
    return verify_result(graph, res)


def min_peak_schedules(graph: Graph, offer: Callable[[str, RematResult], None], budget_bytes: int,
                       clock: Callable[[], float] | None = None, deadline: float | None = None,
                       heuristics: tuple[str, ...] = HEURISTIC_ORDER,
                       seconds_per_computation: dict[str, float] | None = None) -> int | None:
    """Feasibility first: for each heuristic, bisect the whole budget range for the smallest budget at which
    its DTR run succeeds (the default freeing rule, else ``keep_dead``), and offer the schedule found there when
    its peak fits ``budget_bytes``. Returns the smallest peak found (``None``: none), whatever ``budget_bytes``.

    The range and every run are independent of ``budget_bytes`` (only the offers depend on it), so that the
    same schedules are candidates at every budget: what this finds for a budget it finds for every larger one.
    A heuristic is skipped when the time left does not allow its bisection (about 2 x 8 runs), and a
    bisection stops (keeping what it found) before a run that would end past ``deadline``;
    ``seconds_per_computation`` (by heuristic, measured elsewhere) sizes the first runs.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(16)
    >>> found = []
    >>> peak = min_peak_schedules(g, lambda name, res: found.append(res), 10**6)
    >>> peak <= 10**6 and len(found) > 0
    True
    """
    from ..simulate import checkpoint_all_peak_bytes

    clock = time.perf_counter if clock is None else clock   # looked up now: a test may replace it
    runner = _Runner(graph, clock, deadline, seconds_per_computation)
    lo = graph.min_budget_lower_bound_bytes() - 1
    hi = checkpoint_all_peak_bytes(graph)   # DTR evicts nothing there
    best_peak: int | None = None
    for heuristic in heuristics:
        left = runner.left()
        per = runner.estimate(heuristic, False)
        if left is not None and per is not None and 16 * per * graph.n * FIRST_CAP > 0.8 * left:
            continue
        # one cap for the whole bisection, so that its runs do not depend on the time: the result is the same
        # at every budget asked for whenever the bisection runs at all
        cap = FIRST_CAP

        def ok(b: int) -> dict[str, Any] | None:
            for keep_dead in (False, True):
                if not runner.fits(heuristic, keep_dead, cap):
                    raise TimeoutError
                out = runner.run(b, heuristic, keep_dead, cap=cap)
                if out is not None and out["ok"]:
                    return out
            return None

        a, b = lo, hi
        found = None
        tol = max(1, (hi - lo) // 200)
        while b - a > tol:
            mid = (a + b) // 2
            try:
                out = ok(mid)
            except TimeoutError:   # no time for another run: keep what the bisection found so far
                break
            if out is not None:
                b, found = mid, out
            else:
                a = mid
        if found is None:
            continue
        res = _verified(graph, found["schedule"], max(int(budget_bytes), int(hi)), f"min-peak(dtr({heuristic}))",
                        f"DTR ({heuristic}) at the smallest budget its bisection found, {b} bytes")
        if res is None:
            continue
        peak = int(res.peak_memory_bytes)
        best_peak = peak if best_peak is None else min(best_peak, peak)
        if peak <= budget_bytes:
            res.budget_bytes = int(budget_bytes)
            offer(res.method, res)
    return best_peak


def improve(graph: Graph, budget_bytes: int, offer: Callable[[str, RematResult], None],
            incumbent: Callable[[], RematResult | None], lower_bound: float | None = None,
            clock: Callable[[], float] | None = None, deadline: float | None = None,
            max_moves: int | None = None, stop: Callable[[], bool] | None = None,
            moves: Iterator[Move] | None = None,
            seconds_per_computation: dict[str, float] | None = None) -> dict[str, Any]:
    """Restart DTR with each :class:`Move` in turn, polish each schedule under ``budget_bytes`` and ``offer``
    it (the caller keeps the cheapest), until the deadline, ``max_moves`` moves, the incumbent at
    ``lower_bound``, ``stop()`` or the end of the moves. Returns what it did (``moves``, ``improved``,
    ``why``: why it stopped).

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    offer : callable
        ``offer(name, result)`` with each verified result.
    incumbent : callable
        The cheapest result so far (``None``: none).
    lower_bound : float, optional
        A proven lower bound on the cost: the search stops when the incumbent reaches it.
    clock : callable, optional
        Seconds (``time.perf_counter``, looked up at the call, by default; tests pass a fake clock).
    deadline : float, optional
        A ``clock()`` time; each run is capped so as to end before it.
    max_moves : int, optional
        The most moves tried (a work budget, independent of the machine's speed).
    stop : callable, optional
        Checked between moves: ``True`` ends the search.
    moves : iterator of Move, optional
        Default :func:`restart_moves`.
    seconds_per_computation : dict, optional
        A DTR computation's time by heuristic (under the default freeing rule), measured elsewhere: it sizes
        the caps of the first runs.

    Examples
    --------
    >>> from remat_core.zoo import random_training_graph
    >>> from remat_core.units import resolve_budget
    >>> g = random_training_graph(20, seed=1)
    >>> best = []
    >>> info = improve(g, resolve_budget(g, 0.6), lambda n, r: best.append(r),
    ...                lambda: min(best, key=lambda r: r.objective) if best else None, max_moves=6)
    >>> info["moves"], all(r.peak_memory_bytes <= resolve_budget(g, 0.6) for r in best)
    (6, True)
    """
    from ..simulate import simulate
    from .segments import polish

    clock = time.perf_counter if clock is None else clock   # looked up now: a test may replace it
    runner = _Runner(graph, clock, deadline, seconds_per_computation)
    lower = graph.min_budget_lower_bound_bytes()
    sim_s: float | None = None
    info: dict[str, Any] = {"moves": 0, "improved": 0, "why": "moves exhausted"}
    real_clock = clock is time.perf_counter
    it = restart_moves() if moves is None else iter(moves)
    while True:
        # every check before the next move is taken, so that a shared iterator loses none
        inc = incumbent()
        if max_moves is not None and info["moves"] >= max_moves:
            info["why"] = "work budget"
            break
        if lower_bound is not None and inc is not None and inc.objective <= lower_bound * (1 + 1e-9):
            info["why"] = "at the lower bound"
            break
        if stop is not None and stop():
            info["why"] = "stopped"
            break
        left = runner.left()
        if left is not None and left <= 0:
            info["why"] = "deadline"
            break
        move = next(it, None)
        if move is None:
            break
        run_budget = int(math.floor(budget_bytes * move.scale))
        if run_budget < lower:
            continue
        info["moves"] += 1
        out = runner.run(run_budget, move.heuristic, move.keep_dead, move.seed)
        if out is None:   # no time for this heuristic's run: a cheaper one may still fit
            continue
        if not out["ok"]:
            continue
        cand = out["schedule"]
        if sim_s is None:
            t0 = clock()
            simulate(graph, cand)
            sim_s = clock() - t0
        left = runner.left()
        if left is None or left > 8 * sim_s + 0.2:   # a polish round: a timeline simulation, the optimal R, another
            cand = polish(graph, cand, budget_bytes, deadline=deadline if real_clock else None)
        before = inc.objective if inc is not None else math.inf
        res = _verified(graph, cand, budget_bytes, move.name, f"DTR ({move.heuristic}) under {run_budget} bytes, "
                        "polished")
        if res is None:
            continue
        offer(res.method, res)
        if res.objective < before:
            info["improved"] += 1
            log.debug("anytime: %s: %s", move.name, res.objective)
    info["runs"] = runner.runs
    return info
