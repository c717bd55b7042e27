"""Plots (matplotlib, imported on first use): memory timelines, schedule matrices, trade-off curves."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .graph import Graph
from .schedule import Schedule
from .simulate import simulate

__all__ = ["plot_memory_timeline"]


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


def _byte_scale(x: int) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if x >= scale:
            return float(scale), unit
    return 1.0, "bytes"
