"""Budget sweeps: many independent solves, locally or on a Dask cluster, resumable.

:func:`sweep` solves one graph at every budget with every method — the data
behind the paper's Figure 5 (cost vs budget) and Table 2 (approximation
ratios). The solves are independent, so they run in parallel:

* ``scheduler=None`` or ``"local"``: a local process pool (``n_workers``
  processes);
* ``"serial"``: one at a time in this process (debugging; methods registered
  at run time with :func:`remat_core.register_method` are visible);
* ``"embedded"``: a Dask ``distributed.LocalCluster`` started for the sweep;
* an address such as ``"tcp://10.0.0.5:8786"``: an existing Dask scheduler;
* a ``distributed.Client``: used as is.

With ``out=path``, every finished row is appended to a JSON-lines file as it
arrives (strict JSON: a non-finite number is the string ``"inf"``, read back as
a float). Running the same sweep again with the same ``out`` reads the rows
already there and solves only the missing ones, so an interrupted sweep
resumes without recomputing (rows with status ``error`` are retried).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ._json import NON_FINITE, dumps
from .graph import Graph
from .simulate import checkpoint_all_peak_bytes
from .solvers import get_method, solve, validate_budget

__all__ = ["sweep", "SweepResult", "load_sweep", "budget_grid", "graph_key", "applicable_methods"]

log = logging.getLogger(__name__)

_DONE_STATUSES = {"optimal", "feasible", "infeasible", "no_solution"}
#: Row keys that hold text (never a number written as "inf")
_TEXT_KEYS = {"graph", "method", "status", "message", "backend"}


def graph_key(graph: Graph) -> str:
    """``<name>#<hash>``: the graph's name and a short hash of its structure, costs and sizes.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> graph_key(linear_graph(3)) == graph_key(linear_graph(3)), graph_key(linear_graph(3)).startswith("linear-3#")
    (True, True)
    """
    h = hashlib.sha1()
    for arr in (*graph.csr[:2], graph.cost, graph.memory_bytes, graph.workspace_bytes,
                graph.is_backward.astype(np.int8)):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(str(graph.fixed_bytes).encode())
    return f"{graph.name or 'graph'}#{h.hexdigest()[:12]}"


def budget_grid(graph: Graph, num: int = 10, low: int | None = None, high: int | None = None) -> list[int]:
    """``num`` budgets evenly spaced from ``low`` to ``high`` bytes (integers, increasing, unique).

    Defaults: ``low`` = :meth:`Graph.min_budget_lower_bound_bytes` (no schedule
    fits below it), ``high`` = checkpoint-all's peak (nothing to gain above it).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> budget_grid(linear_graph(4), num=3)
    [3, 4, 6]
    """
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f"`num` must be an integer >= 1; got {num!r}")
    lo = graph.min_budget_lower_bound_bytes() if low is None else validate_budget(low)
    hi = checkpoint_all_peak_bytes(graph) if high is None else validate_budget(high)
    if hi < lo:
        raise ValueError(f"`high` ({hi}) must be >= `low` ({lo})")
    if num == 1:
        return [int(hi)]
    return sorted({int(round(x)) for x in np.linspace(lo, hi, int(num))})


def applicable_methods(graph: Graph, methods: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``methods`` into those that apply to ``graph`` and those that do not (chain-only ones on a DAG).

    A method that does not apply raises :class:`GraphValidationError` before
    looking at the budget, so a 1-byte probe tells without solving anything.

    Examples
    --------
    >>> from remat_core.zoo import random_training_graph
    >>> applicable_methods(random_training_graph(6, seed=0), ["checkpoint-all", "chen-sqrtn"])
    (['checkpoint-all'], ['chen-sqrtn'])
    """
    from .errors import GraphValidationError

    ok, skipped = [], []
    for m in methods:
        try:
            solve(graph, 1, method=m)
        except GraphValidationError:
            skipped.append(m)
            continue
        except Exception:  # the probe only looks for GraphValidationError; the real solve reports the rest
            pass
        ok.append(m)
    return ok, skipped


def _options_key(options: Mapping[str, Any]) -> str:
    return json.dumps(options, sort_keys=True, default=str)


def _row_key(gkey: str, budget: int, method: str, options: Mapping[str, Any]) -> tuple:
    return (gkey, int(budget), method, _options_key(options))


def _solve_task(graph: Graph, gkey: str, budget: int, method: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Solve one (graph, budget, method) and return its row; runs in a worker. Never raises."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"graph": gkey, "budget_bytes": int(budget), "method": method,
                           "options": json.loads(_options_key(options)), "base_cost": float(graph.cost.sum())}
    try:
        res = solve(graph, int(budget), method=method, **options)
    except Exception as exc:  # recorded as an error row; the sweep goes on
        (log.warning if isinstance(exc, (ValueError, TypeError)) else log.error)("sweep: %s at %d bytes failed: %s: %s", method, budget, type(exc).__name__, exc)
        row.update(status="error", objective=None, lower_bound=None, peak_memory_bytes=None,
                   message=f"{type(exc).__name__}: {exc}", backend="", solve_time_s=time.perf_counter() - t0,
                   stats={})
        return row
    stats = {k: v for k, v in res.stats.items() if isinstance(v, (int, float, str, bool)) or v is None}
    row.update(status=res.status.value, objective=res.objective, lower_bound=res.lower_bound,
               peak_memory_bytes=res.peak_memory_bytes, message=res.message, backend=res.backend,
               solve_time_s=res.solve_time_s, stats=stats)
    return row


@dataclass
class SweepResult:
    """The rows of a sweep (one dict per graph, budget and method) and helpers.

    Each row has ``graph`` (see :func:`graph_key`), ``budget_bytes``,
    ``method``, ``options``, ``status``, ``objective``, ``lower_bound``,
    ``peak_memory_bytes``, ``solve_time_s``, ``base_cost`` (cost of computing
    every node once), ``message``, ``backend`` and ``stats``.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    computed: int = 0
    reused: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def methods(self) -> list[str]:
        """Methods present, in first-appearance order."""
        return list(dict.fromkeys(r["method"] for r in self.rows))

    @property
    def graphs(self) -> list[str]:
        """Graph keys present, in first-appearance order."""
        return list(dict.fromkeys(r["graph"] for r in self.rows))

    def _select(self, graph: str | None) -> list[dict[str, Any]]:
        graphs = self.graphs
        if graph is None:
            if len(graphs) > 1:
                raise ValueError(f"the sweep holds several graphs; pass `graph` (one of {graphs})")
            return self.rows
        sel = [r for r in self.rows if r["graph"] == graph or r["graph"].split("#")[0] == graph]
        if not sel:
            raise ValueError(f"no rows for graph {graph!r}; graphs: {graphs}")
        return sel

    def curves(self, graph: str | None = None, overhead: bool = True) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per method: ``(budgets_bytes, costs)`` over the budgets where it found a schedule, by budget.

        With ``overhead`` the costs are divided by the cost of computing every
        node once (1.0 = no recomputation), as in the paper's Figure 5.
        """
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for m in self.methods:
            pts = sorted((r["budget_bytes"], r["objective"] / r["base_cost"] if overhead and r["base_cost"] else
                          r["objective"]) for r in self._select(graph)
                         if r["method"] == m and r["objective"] is not None)
            if pts:
                out[m] = (np.array([p[0] for p in pts], dtype=np.int64), np.array([p[1] for p in pts], dtype=float))
        return out

    def approximation_ratios(self, reference: str = "ilp", graph: str | None = None,
                             use_lower_bound: bool = True) -> dict[str, dict[str, Any]]:
        """Geometric mean of cost / optimal cost per method (the paper's Table 2).

        The denominator at a budget is the reference method's cost when it is
        proven optimal; otherwise (``use_lower_bound``) its proven lower bound,
        which makes the ratio an upper bound on the true one (``exact`` is then
        false). Budgets where the method or the denominator is missing are
        skipped; ``infeasible`` counts the budgets where the reference found a
        schedule and the method did not.

        Returns
        -------
        dict
            ``method -> {"geomean", "max", "count", "infeasible", "exact"}``.
        """
        rows = self._select(graph)
        denom: dict[tuple[str, int], tuple[float, bool]] = {}
        for r in rows:
            if r["method"] != reference:
                continue
            if r["status"] == "optimal" and r["objective"] is not None:
                denom[(r["graph"], r["budget_bytes"])] = (float(r["objective"]), True)
            elif use_lower_bound and r["lower_bound"] is not None and r["lower_bound"] > 0:
                denom[(r["graph"], r["budget_bytes"])] = (float(r["lower_bound"]), False)
        if not denom:
            raise ValueError(f"no budget has a reference cost from method {reference!r}")
        out: dict[str, dict[str, Any]] = {}
        for m in self.methods:
            ratios, exact, missing = [], True, 0
            for r in rows:
                if r["method"] != m or (r["graph"], r["budget_bytes"]) not in denom:
                    continue
                d, ex = denom[(r["graph"], r["budget_bytes"])]
                if r["objective"] is None:
                    missing += 1
                    continue
                ratios.append(r["objective"] / d)
                exact = exact and ex
            out[m] = {
                "geomean": float(math.exp(np.mean(np.log(ratios)))) if ratios else None,
                "max": float(max(ratios)) if ratios else None,
                "count": len(ratios), "infeasible": missing, "exact": exact,
            }
        return out

    def table(self, graph: str | None = None) -> list[dict[str, Any]]:
        """Rows sorted by budget then method (a copy)."""
        order = {m: i for i, m in enumerate(self.methods)}
        return sorted((dict(r) for r in self._select(graph)), key=lambda r: (r["budget_bytes"], order[r["method"]]))

    def to_jsonl(self, path: str | os.PathLike) -> None:
        """Write all rows as JSON lines (atomically)."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            for r in self.rows:
                f.write(dumps(r) + "\n")
        os.replace(tmp, path)


def load_sweep(path: str | os.PathLike) -> SweepResult:
    """Read the rows of a JSON-lines sweep file (a truncated last line is ignored).

    Later rows for the same graph, budget, method and options replace earlier ones.
    """
    rows: dict[tuple, dict[str, Any]] = {}
    path = os.fspath(path)
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d: skipping a line that is not valid JSON (interrupted write?)", path, lineno)
                continue
            for k, v in r.items():   # numbers written as "inf"/"-inf"/"nan" (remat_core._json) read back
                if isinstance(v, str) and v in NON_FINITE and k not in _TEXT_KEYS:
                    r[k] = NON_FINITE[v]
            rows[_row_key(r["graph"], r["budget_bytes"], r["method"], r.get("options", {}))] = r
    return SweepResult(rows=list(rows.values()))


def _check_options(methods: Sequence[str], method_options: Mapping[str, Mapping[str, Any]]) -> None:
    unknown_methods = set(method_options) - set(methods)
    if unknown_methods:
        raise ValueError(f"`method_options` names methods not in `methods`: {sorted(unknown_methods)}")
    for m in methods:
        fn = get_method(m)
        opts = method_options.get(m, {})
        if not isinstance(opts, Mapping):
            raise TypeError(f"`method_options[{m!r}]` must be a mapping; got {type(opts).__name__}")
        params = inspect.signature(fn).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            continue
        accepted = list(params)[2:]
        bad = sorted(set(opts) - set(accepted))
        if bad:
            raise TypeError(f"method {m!r} got unknown options {bad}; it accepts {accepted}")


class _Writer:
    def __init__(self, path: str | None):
        self.f = open(path, "a") if path else None

    def write(self, row: dict[str, Any]) -> None:
        if self.f is not None:
            self.f.write(dumps(row) + "\n")
            self.f.flush()
            os.fsync(self.f.fileno())

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="solve", leave=False)


def sweep(
    graph: Graph,
    budgets: Iterable[int],
    methods: Sequence[str],
    *,
    out: str | os.PathLike | None = None,
    scheduler: Any = None,
    n_workers: int | None = None,
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: bool = True,
    cluster_kwargs: Mapping[str, Any] | None = None,
) -> SweepResult:
    """Solve ``graph`` at every budget with every method, in parallel, resumably.

    Parameters
    ----------
    graph : Graph
    budgets : iterable of int
        Total budgets in bytes (see :func:`budget_grid`).
    methods : sequence of str
        Registered method names.
    out : path, optional
        JSON-lines file: rows are appended as they finish, and rows already
        in it (same graph, budget, method and options; status other than
        ``error``) are reused instead of recomputed.
    scheduler : None, "local", "serial", "embedded", address or distributed.Client
        Where the solves run (see the module docstring).
    n_workers : int, optional
        Local processes or embedded-cluster workers (default: CPU count, at
        most the number of solves).
    method_options : mapping, optional
        ``method -> options`` for :func:`remat_core.solve` (for example
        ``{"ilp": {"time_limit_s": 60}}``).
    progress : bool
        Show a tqdm progress bar.
    cluster_kwargs : mapping, optional
        Extra arguments for ``distributed.LocalCluster`` with ``"embedded"``
        (for example ``{"processes": False}``).

    Returns
    -------
    SweepResult
        The rows of this sweep (reused and new), by budget then method.

    Raises
    ------
    TypeError, ValueError
        On a bad argument or option (naming it), before anything runs.
    UnknownMethodError
        On an unknown method.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(4)
    >>> res = sweep(g, [4, 6], ["checkpoint-all"], scheduler="serial", progress=False)
    >>> [(r["budget_bytes"], r["status"]) for r in res.table()]
    [(4, 'infeasible'), (6, 'optimal')]
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    budgets = [validate_budget(b) for b in budgets]
    if not budgets:
        raise ValueError("`budgets` must not be empty")
    if isinstance(methods, str):
        methods = [methods]
    methods = list(dict.fromkeys(methods))
    if not methods:
        raise ValueError("`methods` must not be empty")
    method_options = dict(method_options or {})
    _check_options(methods, method_options)
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1):
        raise ValueError(f"`n_workers` must be an integer >= 1; got {n_workers!r}")
    if scheduler is not None and not isinstance(scheduler, str) and type(scheduler).__name__ != "Client":
        raise ValueError(f"`scheduler` must be None, 'local', 'serial', 'embedded', a scheduler address or a "
                         f"distributed.Client; got {scheduler!r}")
    if isinstance(scheduler, str) and not scheduler:
        raise ValueError("`scheduler` must not be an empty string")
    gkey = graph_key(graph)
    tasks = [(b, m, dict(method_options.get(m, {}))) for b in sorted(set(budgets)) for m in methods]
    wanted = {_row_key(gkey, b, m, o) for b, m, o in tasks}

    done: dict[tuple, dict[str, Any]] = {}
    out_path = os.fspath(out) if out is not None else None
    if out_path and os.path.exists(out_path):
        for r in load_sweep(out_path).rows:
            k = _row_key(r["graph"], r["budget_bytes"], r["method"], r.get("options", {}))
            if k in wanted and r.get("status") in _DONE_STATUSES:
                done[k] = r
    todo = [t for t in tasks if _row_key(gkey, *t) not in done]
    log.info("sweep %s: %d solves, %d reused from %s", gkey, len(todo), len(done), out_path)
    new_rows: list[dict[str, Any]] = []
    if todo:
        if out_path:
            os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        writer = _Writer(out_path)
        try:
            _run(graph, gkey, todo, scheduler, n_workers, progress, dict(cluster_kwargs or {}),
                 lambda row: (writer.write(row), new_rows.append(row)))
        finally:
            writer.close()
    rows = list(done.values()) + new_rows
    order = {m: i for i, m in enumerate(methods)}
    rows.sort(key=lambda r: (r["budget_bytes"], order[r["method"]]))
    return SweepResult(rows=rows, computed=len(new_rows), reused=len(done))


def _run(graph, gkey, todo, scheduler, n_workers, progress, cluster_kwargs, emit) -> None:
    workers = n_workers or max(1, min(os.cpu_count() or 1, len(todo)))
    bar = _progress(len(todo), progress, f"sweep {graph.name or 'graph'}")
    try:
        if scheduler == "serial" or (scheduler in (None, "local") and workers == 1):
            for b, m, o in todo:
                emit(_solve_task(graph, gkey, b, m, o))
                bar.update()
        elif scheduler in (None, "local"):
            _run_pool(graph, gkey, todo, workers, emit, bar)
        else:
            _run_dask(graph, gkey, todo, scheduler, workers, cluster_kwargs, emit, bar)
    finally:
        bar.close()


def _run_pool(graph, gkey, todo, workers, emit, bar) -> None:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # the workers die with this process whatever ends it (SIGTERM, SIGKILL): multiprocessing's own workers
    # would live on (each holds the queue's write end, so it never sees EOF) and keep the caller's stderr
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_pool_worker_init, initargs=(os.getpid(),))
    try:
        futures = [pool.submit(_solve_task, graph, gkey, b, m, o) for b, m, o in todo]
        for fut in as_completed(futures):
            emit(fut.result())
            bar.update()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _pool_worker_init(parent_pid: int) -> None:
    """In a sweep's pool worker: exit, killing its own deadline children, as soon as the sweep's process is gone."""
    from .solvers._lifeline import die_with_parent

    die_with_parent(parent_pid)


def _run_dask(graph, gkey, todo, scheduler, workers, cluster_kwargs, emit, bar) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("a Dask scheduler needs `distributed` (pip install 'remat[dist]')") from exc

    own_client = own_cluster = None
    if isinstance(scheduler, Client):
        client = scheduler
    elif scheduler == "embedded":
        kw = {"n_workers": workers, "threads_per_worker": 1, "dashboard_address": None, **cluster_kwargs}
        own_cluster = LocalCluster(**kw)
        client = own_client = Client(own_cluster)
    elif isinstance(scheduler, str):
        client = own_client = Client(scheduler)
    else:
        raise ValueError(f"`scheduler` must be None, 'local', 'serial', 'embedded', a scheduler address or a "
                         f"distributed.Client; got {scheduler!r}")
    try:
        # hash=False: a key of its own.  With the default content-hash key, a second sweep of the same
        # graph on a shared scheduler can reuse the key while the first sweep's client is releasing it,
        # and its tasks are then cancelled for "lost dependencies".
        g_future = client.scatter(graph, broadcast=True, hash=False)
        futures = [client.submit(_solve_task, g_future, gkey, b, m, o, pure=False) for b, m, o in todo]
        try:
            for fut in as_completed(futures):
                emit(fut.result())
                bar.update()
        except BaseException:
            client.cancel(futures)
            raise
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()
