"""Benchmark and test graphs: generators, and model graphs shipped as JSON.

Generators: :func:`linear_graph` (the paper's standard chain),
:func:`random_layered_dag` (seeded random forward DAGs),
:func:`training_graph` (loss and backward nodes derived from a forward DAG the
way reverse-mode autodiff does) and :func:`random_training_graph`.
Model graphs: :func:`zoo_graph` and :func:`list_zoo` read the JSON specs in
``zoo/data/`` (exported from Keras and PyTorch models by the scripts in
``benchmarks/``) at any batch size.

The zoo imports the graph and the errors of the core only, so that tests and
benchmarks can build graphs without loading the simulator or any solver.
"""

from .generators import linear_graph, random_layered_dag, random_training_graph, training_graph
from .models import list_zoo, zoo_graph

__all__ = ["linear_graph", "random_layered_dag", "random_training_graph", "training_graph", "list_zoo", "zoo_graph"]
