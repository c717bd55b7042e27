"""PyTorch adapter: extract a training graph, profile it, execute plans.

Three verbs (see ``DESIGN.md``):

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

from .api import BudgetInfeasibleError, RematModule, rematerialize, resolve_budget, train_step
from .execute import Executor
from .extract import GRANULARITIES, ExtractedGraph, UnsupportedModelError, extract_graph
from .profile import COST_MODELS, node_costs

__all__ = [
    "extract_graph", "ExtractedGraph", "UnsupportedModelError", "GRANULARITIES",
    "node_costs", "COST_MODELS",
    "Executor",
    "rematerialize", "RematModule", "train_step", "resolve_budget", "BudgetInfeasibleError",
]
