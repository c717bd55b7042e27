"""Keras / TensorFlow adapter: extract a layer-level training graph, profile it, execute plans.

Three verbs (see ``docs/architecture.rst``):

* :func:`extract_graph` turns a Keras 3 functional or ``Sequential`` model
  into a :class:`remat_core.Graph` (one forward and one backward node per
  layer call, and the loss);
* :func:`remat_tf.profile.profile_costs` measures node costs (or FLOPs, the zoo's cost model);
* :func:`remat_tf.execute.run_plan` runs an execution plan layer by layer inside ``tf.function``.

:func:`rematerialize` puts them together: it returns a :class:`RematModel`, a
``keras.Model`` whose ``fit`` trains inside a memory budget.

:mod:`remat_tf.extract` turns Keras models into the batch-size-independent
zoo files of :mod:`remat_core.zoo`.

This package imports TensorFlow / Keras and ``remat_core``;
the core never imports it, and it holds no solver logic.
"""

from remat_core.errors import BudgetInfeasibleError

from .api import RematModel, rematerialize
from .graph import COST_MODELS, ExtractedGraph, UnsupportedModelError, extract_graph

__all__ = ["rematerialize", "RematModel", "extract_graph", "ExtractedGraph", "UnsupportedModelError",
           "COST_MODELS", "BudgetInfeasibleError"]
