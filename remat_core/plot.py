"""Plots (matplotlib, imported on first use): trade-off curves, schedule matrices, memory timelines.

Every function writes one figure to ``path`` (the format follows the
extension: ``.png``, ``.svg``, ``.pdf``) and returns the matplotlib
``Figure`` (closed, so it can be inspected but not shown), which the tests use
to check what is drawn. Sizes are printed with
:func:`remat_core.units.format_bytes`.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from .graph import Graph
from .schedule import Schedule
from .simulate import simulate
from .units import format_bytes

__all__ = ["plot_memory_timeline", "plot_tradeoff_curves", "plot_schedule_matrices"]

_MARKERS = "osD^v<>pPXh*"
_FWD, _BWD, _FIRST, _INFEASIBLE = "#1f77b4", "#d62728", "#9a9a9a", "#e0e0e0"


def _pyplot():
    import matplotlib

    if not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> None:
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, bbox_inches="tight", dpi=150)


def _unit(x: float) -> tuple[float, str]:
    """The binary unit in which ``x`` bytes reads best: ``(2**30, "GiB")``."""
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if x >= scale:
            return float(scale), unit
    return 1.0, "bytes"


def plot_tradeoff_curves(
    sweep_result,
    path: str | os.PathLike,
    graph: str | None = None,
    title: str | None = None,
    show_lower_bound: str | None = "ilp",
    min_budget_bytes: int | None = None,
):
    """Plot compute overhead against the memory budget for every method of a sweep.

    Each method is a step curve: its cost at a budget holds until the next
    budget of the sweep (more memory never costs more). Methods whose points
    coincide are drawn once, labelled ``"ilp = lp-rounding"``; a method that
    found no schedule at any budget is named in the figure. Budgets below
    ``min_budget_bytes`` (no schedule exists there) are shaded.

    Parameters
    ----------
    sweep_result : SweepResult
        From :func:`remat_core.sweep` or ``remat_core.sweep.load_sweep``.
    path : str or path
        Output file; the format follows the extension (``.png``, ``.svg``, ``.pdf``).
    graph : str, optional
        Which graph, when the sweep holds several.
    title : str, optional
    show_lower_bound : str or None
        Also draw this method's proven lower bounds (dotted) where they are
        below its cost (an ILP stopped at its time limit).
    min_budget_bytes : int, optional
        The hard lower bound (:func:`remat_core.units.min_budget_bytes`):
        the region below it is shaded as infeasible. By default, the bound
        recorded in the sweep's infeasible rows, if any.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If no method found a schedule at any budget.

    Examples
    --------
    >>> import os, tempfile
    >>> from remat_core.sweep import sweep
    >>> from remat_core.zoo import linear_graph
    >>> res = sweep(linear_graph(4), [4, 6, 8], ["checkpoint-all"], scheduler="serial", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "curves.svg")
    >>> fig = plot_tradeoff_curves(res, path, min_budget_bytes=3)
    >>> [ln.get_label() for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")]
    ['checkpoint-all']
    """
    rows = sweep_result._select(graph)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    curves: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {}
    for m in methods:
        pts = sorted((int(r["budget_bytes"]), 100.0 * (r["objective"] / r["base_cost"] - 1))
                     for r in rows if r["method"] == m and r.get("objective") is not None and r.get("base_cost"))
        if pts:
            curves[m] = (tuple(p[0] for p in pts), tuple(round(p[1], 9) for p in pts))
    if not curves:
        raise ValueError("no method found a schedule at any budget of this sweep; nothing to plot")
    never = [m for m in methods if m not in curves]
    if min_budget_bytes is None:  # infeasible rows carry the bound (remat_core.solve records it)
        known = [(r.get("stats") or {}).get("min_budget_lower_bound_bytes") for r in rows]
        min_budget_bytes = max([int(b) for b in known if isinstance(b, (int, float))], default=None)
    groups: dict[tuple, list[str]] = {}
    for m, pts in curves.items():
        groups.setdefault(pts, []).append(m)

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    all_budgets = sorted({int(r["budget_bytes"]) for r in rows})
    scale, unit = _unit(all_budgets[-1])
    x_hi = all_budgets[-1] / scale
    x_lo = all_budgets[0] / scale
    span = max(x_hi - x_lo, 0.05 * x_hi)
    if min_budget_bytes:  # show some of the infeasible region left of the bound
        x_lo = min(x_lo, min_budget_bytes / scale) - 0.15 * span
    pad = 0.04 * span
    # the curve with most points first and largest: coincident markers stay visible, nested
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[0][0]))
    for i, ((budgets, over), names) in enumerate(ordered):
        x = [b / scale for b in budgets] + [x_hi + pad]
        y = list(over) + [over[-1]]
        # open markers, shrinking with i: a point two curves share shows both markers, one inside the other
        ax.step(x, y, where="post", lw=1.6, marker=_MARKERS[i % len(_MARKERS)], ms=max(4.0, 10.0 - 1.5 * i),
                mfc="none", mew=1.5, markevery=list(range(len(budgets))), label=" = ".join(names), zorder=3 + i)
    if show_lower_bound:
        pts = sorted((r["budget_bytes"], 100.0 * (r["lower_bound"] / r["base_cost"] - 1)) for r in rows
                     if r["method"] == show_lower_bound and r.get("lower_bound") is not None and r.get("base_cost")
                     and (r.get("objective") is None or r["lower_bound"] < r["objective"] * (1 - 1e-3)))
        if pts:
            ax.plot([p[0] / scale for p in pts], [p[1] for p in pts], ls="none", color="0.3", marker="_", ms=10,
                    label=f"{show_lower_bound} proven lower bound", zorder=20)
    if min_budget_bytes:
        ax.axvspan(x_lo - pad, min_budget_bytes / scale, color=_INFEASIBLE, zorder=0,
                   label=f"no schedule fits (< {format_bytes(min_budget_bytes)})")
        ax.axvline(min_budget_bytes / scale, color="0.4", lw=1, ls="--", zorder=1)
    if never:
        ax.text(0.99, 0.97, "no schedule at any budget:\n" + ", ".join(never), transform=ax.transAxes,
                ha="right", va="top", fontsize=8, color="0.25", zorder=30,
                bbox={"boxstyle": "round", "fc": "white", "ec": "0.7"})
    ax.set_xlim(x_lo - pad, x_hi + pad)
    ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))
    ax.set_xlabel(f"memory budget ({unit}, parameters included)")
    ax.set_ylabel("compute overhead (%)")
    name = graph or (sweep_result.graphs[0].split("#")[0] if sweep_result.graphs else "graph")
    ax.set_title(title or f"{name}: extra compute vs memory budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    _save(fig, path)
    plt.close(fig)
    return fig


def plot_schedule_matrices(
    graph: Graph,
    schedule: Schedule,
    path: str | os.PathLike,
    title: str | None = None,
):
    """Plot the R (computed in stage) and S (kept into stage) matrices of a schedule side by side.

    Rows are stages, columns nodes. First computations (the diagonal) are
    grey; recomputations and kept values are blue for forward nodes and red
    for backward ones. A line separates the forward nodes from the backward
    ones, and a colour key sits under the matrices.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
    path : str or path
        Output file (``.png``, ``.svg`` or ``.pdf``).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import os, tempfile
    >>> from remat_core import Schedule
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> path = os.path.join(tempfile.mkdtemp(), "rs.png")
    >>> fig = plot_schedule_matrices(g, Schedule.checkpoint_all(g), path)
    >>> [ax.get_title() for ax in fig.axes]
    ['R: computed in stage', 'S: kept into stage']
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if schedule.n != graph.n:
        raise ValueError(f"`schedule` has {schedule.n} stages but `graph` has {graph.n} nodes")
    R, S = schedule.dense()
    bwd = np.asarray(graph.is_backward, dtype=bool)
    # 0 empty, 1 forward, 2 backward, 3 first computation (diagonal)
    codes_r = np.where(R, np.where(bwd[None, :], 2, 1), 0)
    codes_r[np.arange(graph.n), np.arange(graph.n)] = 3
    codes_s = np.where(S, np.where(bwd[None, :], 2, 1), 0)
    cmap = ListedColormap(["white", _FWD, _BWD, _FIRST])
    plt = _pyplot()
    size = min(7.0, 2.5 + graph.n / 30)
    fig, axes = plt.subplots(1, 2, figsize=(2 * size + 0.5, size + 1.0))
    sim = simulate(graph, schedule, timeline=False)
    first_bwd = int(np.argmax(bwd)) if bwd.any() else None
    for ax, codes, label in ((axes[0], codes_r, "R: computed in stage"), (axes[1], codes_s, "S: kept into stage")):
        ax.imshow(codes, cmap=cmap, vmin=0, vmax=3, interpolation="nearest", aspect="equal")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("node (topological order)")
        ax.set_ylabel("stage")
        if first_bwd is not None:
            ax.axvline(first_bwd - 0.5, color="k", lw=0.8, ls="--")
            ax.axhline(first_bwd - 0.5, color="k", lw=0.8, ls="--")
            ax.text(first_bwd - 0.5, graph.n - 1, " backward \u2192", fontsize=7, va="bottom", ha="left")
        for side in ax.spines.values():
            side.set_color("0.6")
    key = [Patch(fc=_FIRST, label="first computation"), Patch(fc=_FWD, label="forward node: recomputed (R), kept (S)"),
           Patch(fc=_BWD, label="backward node: recomputed (R), kept (S)"),
           Patch(fc="white", ec="0.6", label="not computed / not kept")]
    fig.legend(handles=key, loc="lower center", ncol=2, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(title or f"{graph.name or 'graph'}: peak {format_bytes(sim.peak_memory_bytes)}, "
                 f"{sim.recompute_count} recomputations", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    _save(fig, path)
    plt.close(fig)
    return fig


def plot_memory_timeline(
    graph: Graph,
    schedules: Sequence[tuple[str, Any]],
    path: str | os.PathLike,
    budget_bytes: int | None = None,
    title: str | None = None,
):
    """Plot the simulated memory at every computation of one or more schedules.

    The x axis counts computations from 0; the fixed bytes (parameters,
    gradients, inputs) are a shaded band at the bottom; recomputations are
    marked with dots; the budget is a dashed line. An entry whose schedule is
    ``None`` (or a :class:`~remat_core.RematResult` without one) is named in
    the figure as having no schedule instead of being dropped.

    Parameters
    ----------
    graph : Graph
    schedules : sequence of (label, Schedule, RematResult or None)
    path : str or path
        Output file; the format follows the extension (``.png``, ``.svg``, ``.pdf``).
    budget_bytes : int, optional
        Drawn as a horizontal line.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import os, tempfile
    >>> from remat_core import Schedule
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> path = os.path.join(tempfile.mkdtemp(), "t.png")
    >>> fig = plot_memory_timeline(g, [("all", Schedule.checkpoint_all(g)), ("ilp", None)], path, budget_bytes=4)
    >>> float(fig.axes[0].get_xlim()[0]), fig.axes[0].texts[0].get_text()
    (0.0, 'no schedule: ilp: no schedule')
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    missing = []
    entries = []
    for label, item in schedules:
        sched = item if isinstance(item, Schedule) else getattr(item, "schedule", None)
        if sched is None:
            status = getattr(getattr(item, "status", None), "value", "no schedule")
            missing.append(f"{label}: {status}")
        else:
            entries.append((label, simulate(graph, sched)))
    top = max([float(graph.fixed_bytes), float(budget_bytes or 0)] +
              [float(sim.peak_memory_bytes) for _, sim in entries])
    scale, unit = _unit(top)
    top = float(graph.fixed_bytes)
    longest = 1
    for label, sim in entries:
        mem = np.asarray(sim.step_memory_bytes, dtype=float) / scale
        steps = np.arange(len(mem))
        line, = ax.step(steps, mem, where="post", lw=1.3, zorder=3,
                        label=f"{label}: peak {format_bytes(sim.peak_memory_bytes)}, "
                              f"{sim.recompute_count} recomputations")
        recomputed = np.asarray(sim.step_node) != np.asarray(sim.step_stage)
        if recomputed.any():
            # one colour for every curve's recomputation markers, the colour of their legend entry
            ax.plot(steps[recomputed], mem[recomputed], ls="none", marker="o", ms=3, color="0.3",
                    zorder=4, label="_recomputation")
        top = max(top, float(mem.max(initial=0)) * scale)
        longest = max(longest, len(mem))
    if graph.fixed_bytes > 0:
        ax.axhspan(0, graph.fixed_bytes / scale, color="0.85", zorder=0,
                   label=f"fixed, always resident ({format_bytes(graph.fixed_bytes)})")
    if budget_bytes is not None:
        ax.axhline(budget_bytes / scale, color="crimson", ls="--", lw=1, zorder=2, label=f"budget {format_bytes(budget_bytes)}")
        top = max(top, float(budget_bytes))
    if any(ln.get_label() == "_recomputation" for ln in ax.get_lines()):
        ax.plot([], [], ls="none", marker="o", ms=3, color="0.3", label="recomputation")
    if missing:
        ax.text(0.99, 0.03, "no schedule: " + "; ".join(missing), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=8, color="crimson", bbox={"boxstyle": "round", "fc": "white", "ec": "crimson"})
    ax.set_xlim(0, longest)
    ax.set_ylim(0, top * 1.08 / scale if top > 0 else 1)
    ax.set_xlabel("computation (execution order)")
    ax.set_ylabel(f"memory in use ({unit})")
    ax.set_title(title or f"memory during one training step: {graph.name or 'graph'}")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.grid(alpha=0.3)
    _save(fig, path)
    plt.close(fig)
    return fig
