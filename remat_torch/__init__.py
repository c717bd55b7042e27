"""PyTorch adapter: extract a training graph, profile it, execute plans.

Three verbs (see ``docs/architecture.rst``):

* :func:`extract_graph` turns an ``nn.Module`` and example inputs into a
  :class:`remat_core.Graph` (the AOTAutograd joint graph, grouped at
  ``"op"``, ``"module"`` or ``"block"`` granularity) plus what is needed to run
  each node;
* :func:`remat_torch.profile.node_costs` gives node costs (``"profile"``,
  ``"flops"``, ``"unit"``);
* :class:`Executor` runs an execution plan op by op, with gradients equal to
  plain autograd.

:func:`rematerialize` puts them together: it returns a :class:`RematModule`
that trains under a memory budget with a normal ``loss.backward(); opt.step()``
loop; :func:`train_step` is the one-call training step.

This package imports torch and ``remat_core`` (graphs,
plans, :func:`remat_core.solve`, budgets from ``remat_core.units``); the core
never imports it. It holds no solver logic: a plan comes from the core, and
this package only turns a model into a graph and a plan into a training step.
"""

import torch as _torch

#: The torch versions this adapter is tested with (the ``torch`` extra of pyproject.toml declares the same).
TORCH_VERSIONS = ((2, 13), (2, 14))


def _check_torch_version(version: str) -> None:
    """Refuse a torch outside :data:`TORCH_VERSIONS`: the adapter reads AOTAutograd internals."""
    import re

    m = re.match(r"^(\d+)\.(\d+)", version)
    lo, hi = TORCH_VERSIONS
    if m is None or not lo <= (int(m.group(1)), int(m.group(2))) < hi:
        raise ImportError(
            f"remat_torch needs torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]} (the versions it is tested with: it reads "
            f"AOTAutograd's joint graph and fake-tensor internals, which change between releases); found torch "
            f"{version}. Install a supported torch, e.g. `pip install 'torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}'`")


_check_torch_version(_torch.__version__)

from .api import (BudgetInfeasibleError, InputMismatchError, RematModule, clear_graph_cache,  # noqa: E402
                  rematerialize, resolve_budget, train_step)
from .compiled import CompiledBudgetError, backend  # noqa: E402
from .dtr import dtr  # noqa: E402
from .execute import Executor  # noqa: E402
from .extract import GRANULARITIES, ExtractedGraph, UnsupportedModelError, extract_graph  # noqa: E402
from .profile import COST_MODELS, node_costs  # noqa: E402

__all__ = [
    "extract_graph", "ExtractedGraph", "UnsupportedModelError", "GRANULARITIES",
    "node_costs", "COST_MODELS",
    "Executor",
    "rematerialize", "RematModule", "train_step", "resolve_budget", "BudgetInfeasibleError",
    "InputMismatchError", "clear_graph_cache", "dtr",
    "backend", "CompiledBudgetError",
]
