"""The ``remat`` command.

Sub-commands:

* ``solve``: one graph, one budget, one method; prints a short summary
  (``--json``: the result as JSON, and nothing else, on stdout).
* ``sweep``: one graph, many budgets and methods, in parallel (local processes
  or Dask), resumable through a JSON-lines file; prints the cost table and the
  approximation ratios, optionally plots the trade-off curves.
* ``max-batch``: the largest batch size that fits a budget at bounded cost.
* ``plot``: trade-off curves of a sweep file, R/S matrices or the memory
  timeline of a schedule.
* ``methods``, ``zoo``: what is registered and what graphs ship.
* ``demo``: the end-to-end job behind ``make demo``; it lives in
  :mod:`remat_torch.demo` and comes in through the ``remat.cli_commands``
  entry point (the core never imports an adapter).

Graphs are named by a zoo name (``vgg16``, see ``remat zoo``), a JSON file
(remat graph, zoo model or DTR format) or ``linear:N``. Budgets have one
meaning everywhere (:func:`remat_core.units.resolve_budget`): a number in
[0, 1] (``1``, ``0.6`` or ``0.6x``) is a fraction of activation memory; a
whole number above 1 (``123456``) or a size (``2GiB``, ``16GB``, ``1.5 GiB``,
``1B``) is the total device memory, parameters included (``GiB``/``G`` are
powers of 1024, ``GB`` powers of 1000).

Solver libraries print to the process's standard output from native code
(HiGHS prints a banner when its first instance is made, in every process).
The command points file descriptor 1 at ``/dev/null`` (at standard error with
``-v``) while it runs, so that stdout holds only what the command prints, and
worker processes inherit that.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import inspect
import io
import json
import logging
import os
import re
import sys
import tempfile
from typing import Any, Callable, Iterator, Sequence

from .errors import GraphValidationError, RematError
from .graph import Graph
from .units import format_bytes, min_budget_bytes, resolve_budget

__all__ = ["main", "build_parser", "load_graph_arg", "graph_factory_arg", "check_out_dir", "CLIError",
           "GRAPH_HELP", "BUDGET_HELP", "PLUGIN_GROUP", "to_json"]

log = logging.getLogger("remat_core.cli")

_PLOT_EXTENSIONS = (".png", ".svg", ".pdf")


class CLIError(ValueError):
    """A bad command-line value (printed as ``remat: error: ...``)."""


# ------------------------------------------------------------------ inputs
def _read_json_file(path: str, what: str = "graph file") -> Any:
    if os.path.isdir(path):
        raise CLIError(f"{what} {path!r} is a directory, not a JSON file")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError:
        raise CLIError(f"{what} {path!r} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CLIError(f"{what} {path!r} is not valid JSON: {exc}") from None
    except RecursionError:   # arrays or objects nested thousands deep (was "internal error: RecursionError")
        raise CLIError(f"{what} {path!r} is JSON nested too deeply to be a graph") from None
    except OSError as exc:
        raise CLIError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None


def _looks_like_a_path(spec: str) -> bool:
    """Whether a graph spec that names no existing file was meant as one (a folder in it, or a .json end)."""
    return "/" in spec or os.sep in spec or spec.lower().endswith(".json")


def _scalable_zoo_model(name: str) -> bool:
    """Whether ``name`` is a zoo model that can be built at any batch size."""
    from .zoo.models import SPEC_FORMAT, load_spec

    try:
        return load_spec(name).get("format") == SPEC_FORMAT
    except (ValueError, TypeError):
        return False


def _split_batch_suffix(spec: str, batch_size: int | None) -> tuple[str, int | None]:
    """``("unet", 32)`` for ``"unet-b32"``, the name a zoo model's graph carries, when ``unet`` is a zoo model
    that scales with the batch (so ``unet-b1`` is keras_unet at batch 1, not the file torch_unet_b1, which
    ``unet_b1`` names); else ``(spec, batch_size)``. A ``batch_size`` that disagrees is an error."""
    m = re.fullmatch(r"(.+)-b([0-9]+)", spec)
    if m is None or os.path.exists(spec) or not _scalable_zoo_model(m.group(1)):
        return spec, batch_size
    b = int(m.group(2))
    if batch_size is not None and batch_size != b:
        raise CLIError(f"graph {spec!r} is {m.group(1)!r} at batch size {b}; --batch-size {batch_size} disagrees")
    return m.group(1), b


def graph_factory_arg(spec: str) -> Callable[[int], Graph] | None:
    """``batch_size -> Graph`` for a graph spec that scales with the batch, else ``None``.

    Zoo models (``vgg19``) and zoo model files scale; ``linear:N`` scales its
    node sizes and costs linearly; other files are fixed-batch graphs.
    """
    from .zoo import linear_graph
    from .zoo.models import SPEC_FORMAT, graph_from_spec, load_spec, zoo_graph

    if spec.startswith("linear:"):
        n = _int_arg(spec.split(":", 1)[1], "linear:N")
        return lambda b: linear_graph(n, cost=float(b), memory_bytes=b).replace(name=f"linear-{n}-b{b}")
    if os.path.exists(spec):
        data = _read_json_file(spec)
        if isinstance(data, dict) and data.get("format") == SPEC_FORMAT:
            return lambda b: graph_from_spec(data, batch_size=b)
        return None
    if _looks_like_a_path(spec):
        raise CLIError(f"file not found: {spec}")
    spec = _split_batch_suffix(spec, None)[0]   # "unet-b32": unet, whose batch size is what varies
    try:
        data = load_spec(spec)
    except ValueError as exc:
        raise CLIError(f"graph {spec!r} is neither a file, linear:N, nor a zoo graph ({exc})") from None
    if data.get("format") == SPEC_FORMAT:
        return lambda b: zoo_graph(spec, batch_size=b)
    return None


def load_graph_arg(spec: str, batch_size: int | None = None) -> Graph:
    """A graph from a zoo name, a JSON file (remat graph, zoo model or DTR format) or ``linear:N``.

    Raises
    ------
    CLIError
        If ``spec`` names nothing known or usable, or ``batch_size`` does not apply.
    """
    from .graph import load_dtr_dag
    from .zoo import linear_graph
    from .zoo.models import SPEC_FORMAT, graph_from_spec, zoo_graph

    if spec.startswith("linear:"):
        if batch_size not in (None, 1):
            return graph_factory_arg(spec)(batch_size)
        return linear_graph(_int_arg(spec.split(":", 1)[1], "linear:N"))
    if os.path.exists(spec):
        head = _read_json_file(spec)
        if not isinstance(head, dict):
            raise CLIError(f"graph file {spec!r} must hold a JSON object; got a JSON {type(head).__name__}")
        if head.get("format") == SPEC_FORMAT:
            return graph_from_spec(head, batch_size=batch_size or 1)
        if batch_size is not None:
            raise CLIError(f"graph file {spec!r} has a fixed batch size; drop --batch-size")
        if head.get("format") == "remat-graph":
            return Graph.from_dict(head, source=repr(spec))   # every error names the file
        try:
            return load_dtr_dag(spec)
        except RematError:
            raise
        except (KeyError, AttributeError, TypeError, ValueError) as exc:
            raise CLIError(f"graph file {spec!r} is neither a remat graph, a zoo model nor a valid DTR graph "
                           f"({type(exc).__name__}: {exc})") from None
    if _looks_like_a_path(spec):
        raise CLIError(f"file not found: {spec}")
    spec, batch_size = _split_batch_suffix(spec, batch_size)
    try:
        return zoo_graph(spec, batch_size=batch_size)
    except ValueError as exc:
        raise CLIError(f"graph {spec!r}: no such file, and neither linear:N nor a zoo graph (`remat zoo` lists "
                       f"them): {exc}") from None


def _int_arg(text: str, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise CLIError(f"`{what}` must be an integer; got {text!r}") from None
    if v < 1:
        raise CLIError(f"`{what}` must be >= 1; got {v}")
    return v


def _is_fraction(text: str) -> bool:
    """Whether the budget ``text`` is a fraction of activation memory (a number in [0, 1], ``0.5x``)."""
    from .units import _NUMBER_RE

    m = _NUMBER_RE.match(text)
    return bool(m) and (bool(m.group(2)) or 0.0 <= float(m.group(1)) <= 1.0)


def _budget_arg(graph: Graph, text: str, argument: str = "budget") -> int:
    """The budget ``text`` in bytes on ``graph`` (bytes, a size, or a fraction of activation memory)."""
    return resolve_budget(graph, text.strip() if isinstance(text, str) else text, argument)


def _json_arg(text: str, what: str) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"`{what}` must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise CLIError(f"`{what}` must be a JSON object; got {text!r}")
    return value


def _accepts(method: str, option: str) -> bool:
    from .solvers import get_method

    params = inspect.signature(get_method(method)).parameters
    return option in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _with_time_limit(method: str, options: dict, time_limit_s: float | None) -> dict:
    """Add ``time_limit_s`` to ``options`` when given and the method takes it."""
    if time_limit_s is not None and "time_limit_s" not in options and _accepts(method, "time_limit_s"):
        return {**options, "time_limit_s": time_limit_s}
    return options


def _unknown_method(name: str, argument: str) -> CLIError:
    from .solvers import available_methods

    close = difflib.get_close_matches(name, available_methods(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return CLIError(f"`{argument}` names unknown method {name!r}{hint}; available methods: "
                    f"{', '.join(available_methods())}")


def _methods_arg(text: str | None, argument: str = "--methods") -> list[str]:
    from .solvers import available_methods

    if text is None or text.strip() == "all":
        return available_methods()
    methods = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    if not methods:
        raise CLIError(f"`{argument}` names no method; give a comma-separated list or 'all'")
    for m in methods:
        if m not in available_methods():
            raise _unknown_method(m, argument)
    return methods


def _per_method_options(text: str, methods: list[str]) -> dict[str, dict]:
    """``--options`` of sweep: a JSON object ``method -> options``; every key must be a chosen method."""
    value = _json_arg(text, "--options")
    for m, opts in value.items():
        if m not in methods:
            from .solvers import available_methods

            if m not in available_methods():
                raise _unknown_method(m, "--options")
            raise CLIError(f"`--options` has options for {m!r}, which is not among --methods ({', '.join(methods)})")
        if not isinstance(opts, dict):
            raise CLIError(f"`--options` for {m!r} must be a JSON object; got {json.dumps(opts)}")
    return value


def _check_out_path(path: str | None, argument: str, plot: bool = False) -> None:
    """Fail before any work if ``path`` cannot be written (missing or read-only folder, a directory, bad extension)."""
    if path is None:
        return
    if not path or os.path.isdir(path):
        raise CLIError(f"`{argument}` must be a file path; got {path!r}" + (" (a directory)" if path else ""))
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"`{argument}`: folder {os.path.dirname(path) or folder!r} does not exist")
    if os.path.exists(path):
        writable = os.access(path, os.W_OK)
    else:  # try it: os.access says yes to root even where nothing can be created
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".remat-probe-"):
                writable = True
        except OSError:
            writable = False
    if not writable:
        raise CLIError(f"`{argument}`: cannot write {path!r}")
    if plot and os.path.splitext(path)[1].lower() not in _PLOT_EXTENSIONS:
        raise CLIError(f"`{argument}` must end in {', '.join(_PLOT_EXTENSIONS)}; got {path!r}")


def check_out_dir(path: str, argument: str) -> None:
    """Create the output folder ``path`` (its parent must exist and be writable)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise CLIError(f"`{argument}` must be a folder; {path!r} is a file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CLIError(f"`{argument}`: folder {parent!r} does not exist")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"`{argument}`: cannot create {path!r}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CLIError(f"`{argument}`: {path!r} is not writable")


def _check_scheduler(scheduler: str | None, timeout_s: float = 5.0) -> None:
    """Fail fast on a Dask scheduler address nothing listens on (instead of Dask's 30 s wait)."""
    if not scheduler or scheduler in ("local", "serial", "embedded"):
        return
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(scheduler if "://" in scheduler else f"tcp://{scheduler}")
    try:
        host, port = url.hostname, url.port
    except ValueError:
        host, port = None, None
    if url.scheme not in ("tcp", "tls") or not host or port is None:
        raise CLIError(f"`--scheduler` must be local, serial, embedded or an address such as tcp://host:8786; "
                       f"got {scheduler!r}")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise CLIError(f"`--scheduler`: cannot reach {scheduler!r} ({exc.strerror or exc})") from None


# ------------------------------------------------------------------ output
def to_json(value: Any, indent: int | None = None) -> str:
    """Strict JSON text for what the command prints or writes (:mod:`remat_core._json`).

    Python's ``json`` writes ``Infinity`` and ``NaN``, which are not JSON (a
    sum of costs of 1e300 overflows to infinity); here a non-finite number is
    the string ``"inf"``, ``"-inf"`` or ``"nan"`` (``float()`` reads each
    back).

    Examples
    --------
    >>> to_json({"objective": float("inf"), "gap": 0.5})
    '{"objective": "inf", "gap": 0.5}'
    """
    from ._json import dumps

    return dumps(value, indent)


@contextlib.contextmanager
def _native_stdout_redirected(verbose: bool) -> Iterator[None]:
    """Point file descriptor 1 at /dev/null (stderr when ``verbose``) while Python's ``print`` keeps stdout.

    Native libraries (HiGHS's banner) and child processes write to fd 1; with
    it redirected, stdout holds only what the command prints itself.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no fd 1 (embedded interpreter): nothing to protect
        yield
        return
    try:
        python_on_fd1 = sys.stdout.fileno() == 1
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        python_on_fd1 = False
    sink = os.dup(2) if verbose else os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 1)
    os.close(sink)
    old = sys.stdout
    if python_on_fd1:
        sys.stdout = open(os.dup(saved), "w", encoding=getattr(old, "encoding", None) or "utf-8",
                          errors=getattr(old, "errors", None) or "strict", buffering=1)
    try:
        yield
    finally:
        if python_on_fd1:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
                sys.stdout.close()
            sys.stdout = old
        os.dup2(saved, 1)
        os.close(saved)


class _TqdmLogHandler(logging.Handler):
    """Writes log records above any tqdm progress bar (tqdm.write) on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)


@contextlib.contextmanager
def _logging_configured(verbosity: int) -> Iterator[None]:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = _TqdmLogHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
    loggers = [logging.getLogger(n) for n in ("remat_core", "remat_torch", "remat_tf")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(level)
        lg.propagate = False
    # below -v, warnings of the library are one line each, not the sweep's per-budget repetition
    try:
        yield
    finally:
        for lg, (lvl, prop) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.setLevel(lvl)
            lg.propagate = prop


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _solve_summary(graph: Graph, res) -> list[str]:
    """The human summary of one solve (a few lines)."""
    from .simulate import checkpoint_all_peak_bytes
    from .units import budget_fraction

    base = float(graph.cost.sum())
    peak_all = checkpoint_all_peak_bytes(graph)
    frac = budget_fraction(graph, res.budget_bytes)
    lines = [f"graph     {graph.name or 'graph'}: {graph.n} nodes ({int(graph.is_backward.sum())} backward); "
             f"checkpoint-all peak {format_bytes(peak_all)}, of which fixed {format_bytes(graph.fixed_bytes)}",
             f"budget    {format_bytes(res.budget_bytes)} " + (
                 f"({frac:.2f} of activation memory)" if res.budget_bytes >= graph.fixed_bytes else
                 f"(below the fixed memory, {format_bytes(graph.fixed_bytes)})"),
             f"method    {res.method}{' (' + res.backend + ')' if res.backend else ''}: {res.status.value} "
             f"in {res.solve_time_s:.2f} s"]
    # a method that returns another method's schedule (ilp whose program was not built, a fallback at a deadline)
    producer = res.stats.get("schedule_method") or res.stats.get("heuristic_method")
    if res.stats.get("model_built") is False:
        lines[-1] += f" (its program was NOT built: over the model memory limit; schedule from {producer or '-'})"
    elif res.success and producer and producer != res.method:
        lines[-1] += f" (schedule from {producer})"
    if res.success:
        over = res.objective / base - 1 if base > 0 else 0.0
        lines.append(f"peak      {format_bytes(res.peak_memory_bytes)} "
                     f"({format_bytes(peak_all - res.peak_memory_bytes)} below checkpoint-all)")
        lines.append(f"overhead  +{_pct(over)} compute ({res.stats.get('recomputations', '?')} recomputations)")
        if "peak_host_bytes" in res.stats:   # a plan with a host tier: its time includes the copies' stalls
            lines.append(f"host      {res.stats['offloaded_values']} values offloaded, host peak "
                         f"{format_bytes(res.stats['peak_host_bytes'])}, stalls +{_pct(res.stats['stall'] / base)}: "
                         f"{res.stats['plan']}")
        if res.stats.get("bound_method") == "each node once":
            lines.append("bound     none solved: only that every node is computed once (overhead >= +0.0%)")
        elif res.lower_bound is not None and base > 0:
            lines.append(f"bound     overhead >= +{_pct(max(0.0, res.lower_bound / base - 1))} "
                         f"(gap {_pct(res.gap or 0.0)})")
    else:
        need, culprit = min_budget_bytes(graph)
        if res.budget_bytes < need:
            lines.append(f"no schedule can fit: every schedule needs >= {format_bytes(need)} "
                         f"({budget_fraction(graph, need):.2f} of activation memory; node {culprit!r})")
        elif res.message:
            lines.append(f"message   {res.message}")
    return lines


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'budget':>10} {'method':>18} {'status':>11} {'overhead':>9} {'peak':>10} {'gap':>6} {'time':>7}")
    for r in rows:
        over = (f"+{_pct(r['objective'] / r['base_cost'] - 1)}" if r.get("objective") is not None
                and r.get("base_cost") else "-")
        gap = "-"
        if r.get("objective") is not None and r.get("lower_bound") is not None and r["objective"] > 0:
            gap = _pct(max(0.0, 1 - r["lower_bound"] / r["objective"]))
        print(f"{format_bytes(r['budget_bytes']):>10} {r['method']:>18} {r['status']:>11} {over:>9} "
              f"{format_bytes(r.get('peak_memory_bytes')):>10} {gap:>6} {r.get('solve_time_s') or 0:>6.2f}s")


def _print_ratios(res, reference: str) -> dict | None:
    try:
        ratios = res.approximation_ratios(reference=reference)
    except ValueError as exc:
        print(f"(no approximation ratios: {_one_line(exc)})")
        return None
    print(f"approximation ratio vs {reference} (geometric mean of cost / {reference}'s cost over budgets):")
    for m, s in ratios.items():
        gm = f"{s['geomean']:.4f}" if s["geomean"] is not None else "-"
        print(f"  {m:>18}: {gm}  (n={s['count']}, infeasible where {reference} fits: {s['infeasible']}"
              f"{'' if s['exact'] else ', vs lower bound'})")
    return ratios


# ---------------------------------------------------------------- commands
def _cmd_solve(args: argparse.Namespace) -> int:
    from . import solve

    _check_out_path(args.out, "--out")
    _check_out_path(args.plot, "--plot", plot=True)
    graph = load_graph_arg(args.graph, args.batch_size)
    budget = _budget_arg(graph, args.budget)
    from .host.solve import HOST_METHODS   # pofo, offload-all, ...: methods that exist only with a host tier

    if args.method not in _methods_arg(None) and not (args.host_bandwidth is not None and args.method in HOST_METHODS):
        raise _unknown_method(args.method, "--method")
    if args.method in HOST_METHODS:   # of these only the MILPs take a time limit
        options = _json_arg(args.options, "--options")
        if args.time_limit is not None and args.method in ("offload-milp", "offload-lp-rounding"):
            options.setdefault("time_limit_s", args.time_limit)
    else:
        options = _with_time_limit(args.method, _json_arg(args.options, "--options"), args.time_limit)
    if args.host_bandwidth is not None:   # offloading to host memory with remat (remat_core.host)
        options["host_bandwidth"] = args.host_bandwidth
    log.info("solving %s (%d nodes) at %s with %s", graph.name, graph.n, format_bytes(budget), args.method)
    res = solve(graph, budget, method=args.method, **options)
    log.info("%s: %s in %.2f s", args.method, res.status.value, res.solve_time_s)
    data = res.to_dict(include_schedule=args.schedule)
    data["graph"] = graph.name
    text = to_json(data, indent=2)
    if args.json:
        print(text)
    else:
        print("\n".join(_solve_summary(graph, res)))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plot:
        from .plot import plot_schedule_matrices

        if getattr(res, "host_plan", None) is not None:   # with a host tier: device and host memory, the copies
            from .host.timeline import plot_host_timeline

            plot_host_timeline(graph, res.host_plan, res.host_bandwidth, args.plot)
            log.info("wrote %s", args.plot)
        elif res.schedule is None:
            print(f"remat: no plot: {args.method} found no schedule", file=sys.stderr)
        else:
            plot_schedule_matrices(graph, res.schedule, args.plot)
            log.info("wrote %s", args.plot)
    return 0 if res.success else 1


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import applicable_methods, budget_grid, sweep

    _check_out_path(args.out, "--out")
    _check_out_path(args.plot, "--plot", plot=True)
    _check_scheduler(args.scheduler)
    graph = load_graph_arg(args.graph, args.batch_size)
    methods = _methods_arg(args.methods)
    per_method = _per_method_options(args.options, methods)
    if args.budgets is not None:
        budgets = [_budget_arg(graph, x, "--budgets") for x in args.budgets.split(",") if x.strip()]
        if not budgets:
            raise CLIError("`--budgets` names no budget")
    else:
        budgets = budget_grid(graph, args.num)
    methods, skipped = applicable_methods(graph, methods)
    if skipped:
        print(f"remat: skipping {', '.join(skipped)}: chain-only, and {graph.name or 'the graph'} is not a chain",
              file=sys.stderr)
    if not methods:
        raise CLIError(f"none of the methods applies to {graph.name or 'the graph'}")
    options = {m: _with_time_limit(m, dict(per_method.get(m, {})), args.time_limit) for m in methods}
    res = sweep(graph, budgets, methods, out=args.out, scheduler=args.scheduler, n_workers=args.workers,
                method_options={m: o for m, o in options.items() if o}, progress=not args.no_progress)
    reference = args.reference if args.reference in methods else None
    if args.json:
        ratios = None
        if reference:
            with contextlib.suppress(ValueError):
                ratios = res.approximation_ratios(reference=reference)
        print(to_json({"graph": graph.name, "skipped_methods": skipped, "rows": res.table(),
                          "approximation_ratios": ratios, "computed": res.computed, "reused": res.reused},
                         indent=1))
    else:
        need, _ = min_budget_bytes(graph)
        print(f"{graph.name}: {res.computed} solves computed, {res.reused} reused; no schedule fits below "
              f"{format_bytes(need)}")
        _print_table(res.table())
        if reference:
            _print_ratios(res, reference)
    if args.plot:
        from .plot import plot_tradeoff_curves

        plot_tradeoff_curves(res, args.plot, min_budget_bytes=min_budget_bytes(graph)[0])
        if not args.json:
            print(f"wrote {args.plot}")
    return 0


def _cmd_max_batch(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from .batch import max_batch_size

    factory = graph_factory_arg(args.graph)
    if factory is None:
        raise CLIError(f"graph {args.graph!r} has a fixed batch size; max-batch needs a zoo model or linear:N")
    text = args.budget.strip()
    if _is_fraction(text):
        raise CLIError(f"`--budget` of max-batch is total bytes (a size such as 16GB or 12GiB); got {text!r}, "
                       "a fraction of activation memory, which changes with the batch size")
    budget = resolve_budget(None, text, "--budget")   # bytes: the graph is not looked at
    if args.method not in _methods_arg(None):
        raise _unknown_method(args.method, "--method")
    options = _with_time_limit(args.method, _json_arg(args.options, "--options"), args.time_limit)
    bar = tqdm(desc=f"max-batch {args.method}", unit="probe", disable=args.no_progress, leave=False)

    def graph_fn(b: int) -> Graph:
        bar.set_postfix(batch=b)
        bar.update()
        log.info("trying batch size %d", b)
        return factory(b)

    try:
        res = max_batch_size(graph_fn, budget, method=args.method, cost_cap=args.cost_cap,
                             max_batch=args.max_batch, **options)
    finally:
        bar.close()
    out = res.to_dict()
    out["graph"] = args.graph
    if args.json:
        print(to_json(out, indent=1))
    else:
        print(f"{args.graph} under {format_bytes(budget)} with {args.method}: largest batch size "
              f"{res.batch_size}{' (the --max-batch limit)' if res.hit_max_batch else ''}")
        r = res.result
        if r is not None and r.success:
            # res.overhead is a ratio (1.0: no recomputation), not a percentage
            over = (f", compute {res.overhead:.2f}x the cost without recomputation (+{_pct(res.overhead - 1)})"
                    if res.overhead is not None else "")
            print(f"  peak {format_bytes(r.peak_memory_bytes)}{over}")
        if res.batch_size == 0:   # say what the smallest batch needs, as `solve` does for an impossible budget
            from .units import min_budget_bytes

            need, culprit = min_budget_bytes(factory(1))
            print(f"  batch size 1 needs >= {format_bytes(need)} with any schedule (node {culprit!r})")
    return 0 if res.batch_size > 0 else 1


_SWEEP_KEYS = ("graph", "budget_bytes", "method", "status", "objective", "base_cost")


def _load_sweep_arg(path: str):
    from .sweep import load_sweep

    if not os.path.exists(path):
        raise CLIError(f"sweep file {path!r} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"sweep file {path!r} is a directory")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except UnicodeDecodeError:
        raise CLIError(f"sweep file {path!r} is not UTF-8 text") from None
    for lineno, line in enumerate(lines, 1):
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # load_sweep skips (and logs) a torn last line
        if not isinstance(r, dict):
            raise CLIError(f"sweep file {path!r}, line {lineno}: a row must be a JSON object")
        missing = [k for k in _SWEEP_KEYS if k not in r]
        if missing:
            raise CLIError(f"sweep file {path!r}, line {lineno}: the row lacks {', '.join(missing)}")
    res = load_sweep(path)
    if not res.rows:
        raise CLIError(f"sweep file {path!r} holds no rows")
    return res


def _cmd_plot(args: argparse.Namespace) -> int:
    from . import solve
    from .plot import plot_memory_timeline, plot_schedule_matrices, plot_tradeoff_curves

    _check_out_path(args.out, "--out", plot=True)
    if args.kind == "curves":
        plot_tradeoff_curves(_load_sweep_arg(args.source), args.out, graph=args.graph_key)
    else:
        if args.budget is None:
            raise CLIError(f"`remat plot {args.kind}` needs a budget")
        graph = load_graph_arg(args.source, args.batch_size)
        budget = _budget_arg(graph, args.budget)
        methods = _methods_arg(args.method, "--method")
        if args.kind == "schedule" and len(methods) != 1:
            raise CLIError("`remat plot schedule` takes one --method")
        results = []
        for m in methods:
            res = solve(graph, budget, method=m, **_with_time_limit(m, {}, args.time_limit))
            if res.schedule is None:
                print(f"remat: {m}: {res.status.value} at {format_bytes(budget)}", file=sys.stderr)
            results.append((m, res))
        if not any(r.schedule is not None for _, r in results):
            raise CLIError(f"no method found a schedule within {format_bytes(budget)}")
        if args.kind == "schedule":
            plot_schedule_matrices(graph, results[0][1].schedule, args.out)
        else:
            plot_memory_timeline(graph, [(m, r.schedule if r.schedule is not None else r) for m, r in results],
                                 args.out, budget_bytes=budget)
    print(f"wrote {args.out}")
    return 0


def _cmd_methods(args: argparse.Namespace) -> int:
    from .solvers import available_methods, get_method

    rows = []
    for m in available_methods():
        doc = (inspect.getdoc(get_method(m)) or "").split("\n\n")[0].replace("\n", " ")
        doc = doc.removeprefix(f"``{m}``: ").replace("``", "")
        rows.append((m, doc[:1].upper() + doc[1:]))
    if args.json:
        print(to_json([{"method": m, "summary": d} for m, d in rows], indent=1))
    else:
        width = max(len(m) for m, _ in rows)
        for m, d in rows:
            room = 100 - width
            print(f"{m:<{width}}  {d if len(d) <= room else d[:room - 3].rsplit(' ', 1)[0] + ' ...'}")
    return 0


def _resolve_zoo(name: str) -> str:
    """The zoo file a name stands for (``vgg16`` -> ``keras_vgg16``)."""
    from .zoo.models import _resolve

    return _resolve(name)


def _cmd_zoo(args: argparse.Namespace) -> int:
    from .simulate import checkpoint_all_peak_bytes
    from .zoo.models import list_zoo, zoo_graph

    names = list_zoo()
    rows = []
    for name in names:
        # what the CLI accepts besides the file name: vgg16 for keras_vgg16 (a model at any batch size, whose
        # graphs are named vgg16-b<N>); a fixed-batch file (torch_unet_b1) is named by its file name only
        short = name.split("_", 1)[-1]
        try:
            short = short if _resolve_zoo(short) == name and _scalable_zoo_model(name) else name
        except ValueError:
            short = name
        try:
            g = zoo_graph(name, batch_size=args.batch_size) if args.batch_size else zoo_graph(name)
        except ValueError:
            g = zoo_graph(name)
        rows.append({"name": name, "short_name": short, "graph_name": g.name, "nodes": g.n, "fixed_bytes": int(g.fixed_bytes),
                     "checkpoint_all_peak_bytes": int(checkpoint_all_peak_bytes(g)),
                     "min_budget_bytes": min_budget_bytes(g)[0], "batch_size": g.meta.get("batch_size")})
    if args.json:
        print(to_json(rows, indent=1))
    else:
        width = max([len(r["short_name"]) for r in rows] + [4])
        full = max([len(r["name"]) for r in rows] + [4])
        print(f"{'name':<{width}} {'file':<{full}} {'nodes':>5} {'batch':>5} {'fixed':>10} {'no-remat peak':>13} "
              f"{'min budget':>10}")
        for r in rows:
            print(f"{r['short_name']:<{width}} {r['name']:<{full}} {r['nodes']:>5} {str(r['batch_size'] or '-'):>5} "
                  f"{format_bytes(r['fixed_bytes']):>10} {format_bytes(r['checkpoint_all_peak_bytes']):>13} "
                  f"{format_bytes(r['min_budget_bytes']):>10}")
        print("(either column names a graph; so does the name a graph prints, such as unet-b32: unet at batch 32)")
    return 0


# ------------------------------------------------------------------ parser
GRAPH_HELP = ("a zoo name (vgg16, mobilenet, resnet50, unet, ...; see `remat zoo`), a JSON file "
               "(remat graph, zoo model or DTR format) or linear:N")
BUDGET_HELP = ("a fraction of activation memory (a number in (0, 1]: 1, 0.6 or 0.6x), or total bytes, parameters "
               "included: a whole number above 1 or a size (123456, 512MiB, 1.5 GiB, 16GB; GiB/G = 1024**3, "
               "GB = 1000**3; 1B is one byte)")


def _version() -> str:
    from . import __version__

    return f"remat {__version__}"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(plugins: bool | Sequence[str] = True) -> argparse.ArgumentParser:
    """The argument parser of the ``remat`` command.

    ``plugins``: load every command of the ``remat.cli_commands`` entry points
    (``True``) or only the named ones (:func:`main` loads the one it runs).
    """
    verbose_help = "log progress on stderr (-vv: debug), and show solver output there"
    common = _Parser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=0, help=verbose_help)
    p = _Parser(
        prog="remat",
        description="Tensor rematerialization planner: solve, sweep budgets, find the maximum batch size and plot "
        "schedules of training graphs.", epilog="Run `remat COMMAND --help` for each command.")
    p.add_argument("-v", "--verbose", action="count", default=0, dest="verbose_top", help=verbose_help)
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("solve", parents=[common], help="solve one graph at one budget",
                       description="Solve one graph at one budget with one method and print a summary "
                       "(--json: the RematResult as JSON). Exit status 1 if no schedule was found.")
    s.add_argument("graph", help="graph: " + GRAPH_HELP)
    s.add_argument("budget", help="memory budget: " + BUDGET_HELP)
    s.add_argument("--method", default="auto" if "auto" in _registered() else "ilp",
                   help="method name (see `remat methods`; default %(default)s)")
    s.add_argument("--batch-size", type=int, default=None, help="batch size for zoo models (default 1)")
    s.add_argument("--options", default="",
                   help="method options as a JSON object, e.g. '{\"mip_rel_gap\": 0.01}' (ilp's relative MIP gap)")
    s.add_argument("--time-limit", type=float, default=None, help="time_limit_s for methods that take one")
    s.add_argument("--host-bandwidth", default=None, help="offload to host memory too, over a link of this many "
                   "bytes/s (e.g. 16GB/s); the cost is then time with the copies' stalls (docs: offload)")
    s.add_argument("--json", action="store_true", help="print the result as JSON (and nothing else) on stdout")
    s.add_argument("--schedule", action="store_true",
                   help="include the schedule (and the run's event sequence, where there is one) in the JSON "
                   "(--json, --out)")
    s.add_argument("--out", default=None, help="also write the JSON result to this file")
    s.add_argument("--plot", default=None, help="write the R/S matrices of the schedule (with --host-bandwidth: the "
                   "device and host memory timeline and the copies) to this .png/.svg/.pdf")
    s.set_defaults(fn=_cmd_solve)

    w = sub.add_parser("sweep", parents=[common], help="solve one graph at many budgets with many methods",
                       description="Solve a graph at several budgets with several methods in parallel, print the "
                       "cost table and the approximation ratios. Methods that do not apply to the graph "
                       "(chain-only methods on a DAG) are skipped with one line on stderr.")
    w.add_argument("graph", help="graph: " + GRAPH_HELP)
    w.add_argument("--batch-size", type=int, default=None, help="batch size for zoo models (default 1)")
    w.add_argument("--budgets", default=None, help="comma-separated budgets, each " + BUDGET_HELP +
                   " (default: --num budgets from the lower bound to checkpoint-all's peak)")
    w.add_argument("--num", type=int, default=8, help="number of budgets when --budgets is not given (default 8)")
    w.add_argument("--methods", default="all", help="comma-separated method names (default: all registered)")
    w.add_argument("--options", default="", help="per-method options as JSON, e.g. '{\"ilp\": {\"mip_rel_gap\": 0.01}}'")
    w.add_argument("--time-limit", type=float, default=None, help="time_limit_s for every method that takes one")
    w.add_argument("--out", default=None, help="JSON-lines results file; rerunning with the same file resumes")
    w.add_argument("--scheduler", default=None, help="where solves run: local (process pool, default), serial, "
                   "embedded (a Dask LocalCluster) or a Dask scheduler address such as tcp://host:8786")
    w.add_argument("--workers", type=int, default=None, help="parallel workers (default: CPU count)")
    w.add_argument("--reference", default="ilp", help="method whose costs are optimal for the ratios (default ilp)")
    w.add_argument("--plot", default=None, help="write the budget-vs-overhead curves to this .png/.svg/.pdf")
    w.add_argument("--json", action="store_true", help="print rows and ratios as JSON instead of a table")
    w.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    w.set_defaults(fn=_cmd_sweep)

    m = sub.add_parser("max-batch", parents=[common], help="largest batch size that fits a budget at bounded cost",
                       description="Find the largest batch size whose training step fits the budget with a cost "
                       "of at most one extra forward pass (Checkmate eq. 10), by searching over batch sizes.")
    m.add_argument("graph", help="a zoo model (vgg19, mobilenet, unet, ...), a zoo model JSON file or linear:N")
    m.add_argument("--budget", default="16GB", help="memory budget in total bytes (default 16GB = 16e9 bytes, "
                   "the paper's V100): bytes or a size such as 16GB / 12GiB")
    m.add_argument("--method", default="checkpoint-all", help="method name (default checkpoint-all)")
    m.add_argument("--cost-cap", type=float, default=None, help="cost cap as a factor of the cost without "
                   "recomputation (default: one extra forward pass, eq. 10)")
    m.add_argument("--max-batch", type=int, default=1 << 16, help="largest batch size to try (default 65536)")
    m.add_argument("--options", default="", help="method options as a JSON object")
    m.add_argument("--time-limit", type=float, default=None, help="time_limit_s for methods that take one")
    m.add_argument("--json", action="store_true", help="print the result as JSON")
    m.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    m.set_defaults(fn=_cmd_max_batch)

    pl = sub.add_parser("plot", parents=[common], help="plot sweep curves, R/S matrices or a memory timeline",
                        description="curves SWEEP.jsonl: budget vs overhead for every method of a sweep file. "
                        "schedule GRAPH BUDGET: the R and S matrices of a method's schedule. "
                        "timeline GRAPH BUDGET: simulated memory over time for one or more methods.")
    pl.add_argument("kind", choices=["curves", "schedule", "timeline"], help="what to plot")
    pl.add_argument("source", help="sweep JSON-lines file (curves) or graph (schedule, timeline)")
    pl.add_argument("budget", nargs="?", default=None, help="budget for schedule/timeline: " + BUDGET_HELP)
    pl.add_argument("-o", "--out", required=True, help="output file: .png, .svg or .pdf")
    pl.add_argument("--method", default="checkpoint-all", help="method(s), comma-separated for timeline")
    pl.add_argument("--batch-size", type=int, default=None, help="batch size for zoo models")
    pl.add_argument("--time-limit", type=float, default=None, help="time_limit_s for methods that take one")
    pl.add_argument("--graph-key", default=None, help="for curves: which graph, when the file holds several")
    pl.set_defaults(fn=_cmd_plot)

    me = sub.add_parser("methods", parents=[common], help="list the registered methods",
                        description="List the registered methods with a one-line summary each.")
    me.add_argument("--json", action="store_true", help="print the list as JSON")
    me.set_defaults(fn=_cmd_methods)

    z = sub.add_parser("zoo", parents=[common], help="list the zoo graphs",
                       description="List the graphs that ship with remat: nodes, fixed bytes, the peak without "
                       "rematerialization and the smallest budget any schedule can reach.")
    z.add_argument("--batch-size", type=int, default=None, help="batch size for zoo models (default: each file's)")
    z.add_argument("--json", action="store_true", help="print the list as JSON")
    z.set_defaults(fn=_cmd_zoo)

    _add_plugin_commands(sub, common, plugins)
    return p


# Commands that live outside the core register here (``[project.entry-points."remat.cli_commands"]``):
# ``name = "package.module:function"``, where ``function(subparsers, common)`` adds the command's parser and
# sets its ``fn``. The core never imports an adapter; the demo (PyTorch) comes in this way.
PLUGIN_GROUP = "remat.cli_commands"
# what to install when a command the docs promise is not registered or cannot load
_PLUGIN_HINTS = {"demo": "pip install 'remat[torch]' (the demo trains PyTorch models)"}


def _plugin_entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def _add_unavailable_command(sub, common, name: str, why: str) -> None:
    """A stand-in for a plugin command that cannot run here: it takes any arguments and says why."""

    def fn(args: argparse.Namespace) -> int:
        raise CLIError(f"`remat {name}` is not available: {why}")

    fn.takes_any_arguments = True  # main() does not reject the arguments meant for the real command
    p = sub.add_parser(name, parents=[common], help=f"(not available: {why})")
    p.set_defaults(fn=fn)


def _add_plugin_commands(sub, common, plugins: bool | Sequence[str]) -> None:
    """Add the commands of the ``remat.cli_commands`` entry points.

    ``plugins`` is ``True`` (load all), or the names to load; the others get a
    stand-in parser, so that a core command does not pay for importing an
    adapter (the demo's plugin imports torch).
    """
    found = _plugin_entry_points()
    for name in sorted(set(found) | set(_PLUGIN_HINTS)):
        hint = _PLUGIN_HINTS.get(name, "reinstall the package that provides it")
        if name not in found:
            _add_unavailable_command(sub, common, name, f"not installed; {hint}")
        elif plugins is True or name in plugins:
            try:
                found[name].load()(sub, common)
            except ImportError as exc:
                _add_unavailable_command(sub, common, name, f"{exc}; {hint}")
        else:
            _add_unavailable_command(sub, common, name, "not loaded")


def _registered() -> list[str]:
    from .solvers import available_methods

    return available_methods()


_EXPECTED = (CLIError, RematError, ValueError, TypeError, KeyError, OSError, ArithmeticError, ImportError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``remat`` command; returns the exit status.

    Every error is one line on stderr (``remat: error: ...``) with exit status
    2; ``-v`` shows the traceback instead.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    # a core command loads no plugin (the demo's imports torch); the top-level help lists them all
    wants_help = command is None and any(a in ("-h", "--help") for a in argv)
    parser = build_parser(plugins=True if wants_help else [command] if command else [])
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args.fn, "takes_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.verbose = args.verbose + args.verbose_top
    for name in ("batch_size", "workers", "num", "max_batch", "steps", "threads"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {v}")
    for name in ("time_limit", "cost_cap"):
        v = getattr(args, name, None)
        if v is not None and not (0 < v < float("inf")):
            parser.error(f"--{name.replace('_', '-')} must be a positive number; got {v}")
    with _logging_configured(args.verbose), _native_stdout_redirected(args.verbose > 0):
        try:
            return args.fn(args)
        except KeyboardInterrupt:
            print("remat: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `remat ... | head`: the reader left; nothing to report
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except _EXPECTED as exc:
            if args.verbose:
                raise
            print(f"remat: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        except Exception as exc:  # a bug: still one line, the traceback with -v
            if args.verbose:
                raise
            print(f"remat: internal error: {type(exc).__name__}: {_one_line(exc)} (run with -v for the traceback)",
                  file=sys.stderr)
            return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
