"""The memory timeline of a host plan: device and host memory against time, and the copies.

Draws what :func:`~remat_core.host.simulate_host` found: device memory at each
computation, host memory over time, and each copy as a bar on the copy stream
(copies to the host and back in two colours; the training state's fetches
and gradient saves among them), with the stalls shaded. matplotlib
is imported inside :func:`plot_host_timeline`.
"""

from __future__ import annotations

from typing import Any

from ..graph import Graph
from .plan import HostPlan
from .simulate import HostSimulation, simulate_host

__all__ = ["plot_host_timeline"]


def plot_host_timeline(graph: Graph, plan: HostPlan, host_bandwidth: Any, path: str | None = None,
                       cost_per_s: float | None = None, title: str | None = None) -> Any:
    """Plot device memory, host memory and the copies of ``plan`` against simulated time.

    Parameters
    ----------
    graph : Graph
    plan : HostPlan
    host_bandwidth : float or str
    path : str, optional
        Write the figure there (``.png``, ``.svg``, ``.pdf``); else return it.
    cost_per_s : float, optional
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    sim: HostSimulation = simulate_host(graph, plan, host_bandwidth, cost_per_s)
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_dev, ax_copy) = plt.subplots(2, 1, figsize=(10, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    gib = 2 ** 30
    ax_dev.step(sim.step_start, sim.step_memory_bytes / gib, where="post", color="tab:blue", label="device")
    xs = [0.0] + [t for t, _ in sim.host_timeline]
    ys = [0.0] + [b / gib for _, b in sim.host_timeline]
    ax_dev.step(xs, ys, where="post", color="tab:orange", label="host")
    ax_dev.set_ylabel("GiB")
    ax_dev.legend(fontsize=8)
    for kind, node, s, e in sim.copies:
        out = kind in ("offload", "save")   # to the host: activations offloaded, gradients saved
        ax_copy.barh(1 if out else 0, e - s, left=s, height=0.8, color="tab:orange" if out else "tab:green")
    ax_copy.set_yticks([0, 1], ["to device", "to host"])
    ax_copy.set_xlabel(f"time ({graph.meta.get('cost_unit', 'cost units')})")
    fig.suptitle(title or f"{graph.name or 'graph'}: time {sim.time:.4g} (stalls {sim.stall:.4g}), device peak "
                 f"{sim.peak_device_bytes / gib:.3g} GiB, host peak {sim.peak_host_bytes / gib:.3g} GiB", fontsize=9)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig
