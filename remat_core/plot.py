"""Plots (matplotlib, imported on first use): memory timelines, schedule matrices, trade-off curves."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .graph import Graph
from .schedule import Schedule
from .simulate import simulate

__all__ = ["plot_memory_timeline", "plot_tradeoff_curves", "plot_schedule_matrices"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> None:
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, bbox_inches="tight", dpi=120)


def plot_memory_timeline(
    graph: Graph,
    schedules: Sequence[tuple[str, Schedule]],
    path: str | os.PathLike,
    budget_bytes: int | None = None,
    title: str | None = None,
) -> None:
    """Plot the simulated memory at every computation step of one or more schedules.

    Parameters
    ----------
    graph : Graph
    schedules : sequence of (label, Schedule)
    path : str or path
        Output file; the format follows the extension (``.png``, ``.svg``).
    budget_bytes : int, optional
        Drawn as a horizontal line.
    title : str, optional
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    scale, unit = _byte_scale(max(1, graph.fixed_bytes, int(graph.memory_bytes.max(initial=1))))
    for label, sched in schedules:
        sim = simulate(graph, sched)
        ax.plot(np.arange(len(sim.step_memory_bytes)), sim.step_memory_bytes / scale, lw=1.2,
                label=f"{label} (peak {sim.peak_memory_bytes / scale:.3g} {unit}, cost {sim.total_cost:.4g})")
    if budget_bytes is not None:
        ax.axhline(budget_bytes / scale, color="crimson", ls="--", lw=1, label="budget")
    ax.set_xlabel("computation step")
    ax.set_ylabel(f"memory ({unit})")
    ax.set_title(title or f"memory timeline: {graph.name or 'graph'}")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    _save(fig, path)
    plt.close(fig)


def plot_tradeoff_curves(
    sweep_result,
    path: str | os.PathLike,
    graph: str | None = None,
    title: str | None = None,
    show_lower_bound: str | None = "ilp",
) -> None:
    """Plot budget vs compute overhead for every method of a sweep (the paper's Figure 5).

    Parameters
    ----------
    sweep_result : SweepResult
        From :func:`remat_core.sweep` or :func:`remat_core.sweep.load_sweep`.
    path : str or path
        Output file; the format follows the extension (``.png``, ``.svg``).
    graph : str, optional
        Which graph, when the sweep holds several.
    title : str, optional
    show_lower_bound : str or None
        Also draw this method's proven lower bounds (dotted) where they are
        below its cost (an ILP stopped at its time limit).

    Raises
    ------
    ValueError
        If no method found a schedule at any budget.

    Examples
    --------
    >>> import os, tempfile
    >>> from remat_core.sweep import sweep
    >>> from remat_core.zoo import linear_graph
    >>> res = sweep(linear_graph(4), [6, 8], ["checkpoint-all"], scheduler="serial", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "curves.svg")
    >>> plot_tradeoff_curves(res, path)
    >>> os.path.getsize(path) > 0
    True
    """
    curves = sweep_result.curves(graph=graph, overhead=True)
    if not curves:
        raise ValueError("no method found a schedule at any budget of this sweep; nothing to plot")
    rows = sweep_result._select(graph)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    top = max(int(b.max()) for b, _ in curves.values())
    scale, unit = _byte_scale(top)
    markers = "os^vD<>pPXh*"
    for i, (method, (budgets, over)) in enumerate(curves.items()):
        ax.plot(budgets / scale, over, marker=markers[i % len(markers)], ms=4, lw=1.3, label=method)
    if show_lower_bound:
        pts = sorted((r["budget_bytes"], r["lower_bound"] / r["base_cost"]) for r in rows
                     if r["method"] == show_lower_bound and r.get("lower_bound") is not None and r["base_cost"]
                     and (r["objective"] is None or r["lower_bound"] < r["objective"] * (1 - 1e-6)))
        if pts:
            ax.plot([p[0] / scale for p in pts], [p[1] for p in pts], ls=":", color="gray", marker=".",
                    label=f"{show_lower_bound} lower bound")
    ax.set_xlabel(f"memory budget ({unit})")
    ax.set_ylabel("compute overhead (cost / cost without remat)")
    name = graph or (sweep_result.graphs[0].split("#")[0] if sweep_result.graphs else "graph")
    ax.set_title(title or f"cost vs budget: {name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    _save(fig, path)
    plt.close(fig)


def plot_schedule_matrices(
    graph: Graph,
    schedule: Schedule,
    path: str | os.PathLike,
    title: str | None = None,
) -> None:
    """Plot the R (recompute) and S (keep) matrices of a schedule side by side (the paper's Figure 7).

    Rows are stages, columns nodes; forward and backward nodes get different
    colours, and first computations (the diagonal) are shown apart from
    recomputations.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
    path : str or path
        Output file (``.png`` or ``.svg``).
    title : str, optional

    Examples
    --------
    >>> import os, tempfile
    >>> from remat_core import Schedule
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> path = os.path.join(tempfile.mkdtemp(), "rs.png")
    >>> plot_schedule_matrices(g, Schedule.checkpoint_all(g), path)
    >>> os.path.getsize(path) > 0
    True
    """
    from matplotlib.colors import ListedColormap

    if schedule.n != graph.n:
        raise ValueError(f"`schedule` has {schedule.n} stages but `graph` has {graph.n} nodes")
    R, S = schedule.dense()
    bwd = np.asarray(graph.is_backward)
    # 0 empty, 1 forward, 2 backward, 3 first computation (diagonal)
    codes_r = np.where(R, np.where(bwd[None, :], 2, 1), 0)
    codes_r[np.arange(graph.n), np.arange(graph.n)] = 3
    codes_s = np.where(S, np.where(bwd[None, :], 2, 1), 0)
    cmap = ListedColormap(["white", "#1f77b4", "#d62728", "#bbbbbb"])
    plt = _pyplot()
    size = min(12.0, 3.0 + graph.n / 25)
    fig, axes = plt.subplots(1, 2, figsize=(2 * size, size))
    sim = simulate(graph, schedule, timeline=False)
    for ax, codes, label in ((axes[0], codes_r, "R: computed in stage"), (axes[1], codes_s, "S: kept into stage")):
        ax.imshow(codes, cmap=cmap, vmin=0, vmax=3, interpolation="nearest", aspect="equal")
        ax.set_title(label)
        ax.set_xlabel("node")
        ax.set_ylabel("stage")
    fig.suptitle(title or f"{graph.name or 'graph'}: cost {sim.total_cost:.4g}, peak "
                 f"{sim.peak_memory_bytes} bytes, {sim.recompute_count} recomputations "
                 "(grey: first computation, blue: forward, red: backward)", fontsize=9)
    _save(fig, path)
    plt.close(fig)


def _byte_scale(x: int) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if x >= scale:
            return float(scale), unit
    return 1.0, "bytes"
