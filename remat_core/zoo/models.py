"""Model graphs shipped as JSON: the Checkmate paper's benchmark zoo.

``remat_core/zoo/data/`` holds two kinds of files:

* ``keras_<model>.json`` (format ``remat-zoo-model``): a layer-level forward
  DAG extracted from a Keras model by ``benchmarks/export_keras_zoo.py``
  (:mod:`remat_tf.extract`), with FLOPs and output elements *per example* and
  the parameter count. :func:`zoo_graph` turns it into a training graph for any
  batch size, without a framework.
* any other ``*.json`` in the plain :meth:`Graph.save` format (for example
  ``torch_*.json`` written by the PyTorch adapter): fixed-batch graphs, loaded
  as they are.

Training graph of a ``remat-zoo-model`` at batch size ``B`` (the paper's
layer-level graph):

* one forward node per Keras layer (model inputs are not nodes), cost
  ``flops * B``, size ``4 * output_elements * B`` bytes;
* a ``loss`` node reading the model outputs (cost: one FLOP per output
  element, size 4 bytes per example);
* one backward node ``grad/<layer>`` per layer, in reverse order, cost
  ``2 * flops * B`` (the backward pass of a layer costs about twice its
  forward pass), size equal to the layer's output. With ``rule="checkmate"``
  (default, the dependency rule of Checkmate's ``dfgraph_from_keras``) it
  reads the layer's output, the outputs *and* gradients of the layer's users,
  and the loss for an output layer. With ``rule="autodiff"`` it reads the
  layer's inputs, its output and the gradients of its users (the rule of
  :func:`remat_core.zoo.training_graph`).
* ``fixed_bytes`` = parameters and their gradients (``2 * 4 * params``) plus
  the input batch (``4 * input_elements * B``).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Mapping

import numpy as np

from ..errors import GraphValidationError
from ..graph import GRAPH_FORMAT, Graph

__all__ = ["zoo_graph", "list_zoo", "load_spec", "graph_from_spec", "DATA_DIR", "RULES"]

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SPEC_FORMAT = "remat-zoo-model"
SPEC_VERSION = 1
RULES = ("checkmate", "autodiff")


def _data_dir() -> str:
    return os.environ.get("REMAT_ZOO_DIR", DATA_DIR)


def list_zoo() -> list[str]:
    """Names of every graph in the zoo folder (file names without ``.json``), sorted.

    ``REMAT_ZOO_DIR`` overrides the folder.

    Examples
    --------
    >>> "keras_vgg16" in list_zoo()
    True
    """
    folder = _data_dir()
    if not os.path.isdir(folder):
        return []
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".json") and not f.startswith("."))


def _resolve(name: str) -> str:
    """A zoo file stem from a full name (``keras_vgg16``) or a unique short one (``vgg16``, ``VGG16``)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string; got {name!r}")
    names = list_zoo()
    if name in names:
        return name
    low = name.lower().replace("-", "").replace("_", "")
    matches = [n for n in names if n.lower().replace("-", "").replace("_", "") == low]
    if not matches:
        matches = [n for n in names if n.split("_", 1)[-1].lower().replace("-", "").replace("_", "") == low]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ValueError(f"zoo name {name!r} is ambiguous: {', '.join(matches)}")
    raise ValueError(f"unknown zoo graph {name!r}; available: {', '.join(names) or '(none)'}")


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime: float) -> str:
    with open(path) as f:
        return f.read()


def load_spec(name: str) -> dict[str, Any]:
    """The raw JSON content of the zoo file ``name`` (a fresh copy).

    Raises
    ------
    ValueError
        If ``name`` is unknown or ambiguous.
    """
    path = os.path.join(_data_dir(), _resolve(name) + ".json")
    try:
        return json.loads(_read(path, os.path.getmtime(path)))
    except json.JSONDecodeError as exc:
        raise GraphValidationError(f"{path!r} is not valid JSON: {exc}") from None


def _check_batch(batch_size: Any) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an integer >= 1; got {batch_size!r}")
    return int(batch_size)


def graph_from_spec(spec: Mapping[str, Any], batch_size: int = 1, rule: str = "checkmate") -> Graph:
    """The layer-level training graph of a ``remat-zoo-model`` spec at ``batch_size``.

    See the module docstring for the construction.

    Parameters
    ----------
    spec : mapping
        As written by :func:`remat_tf.extract.zoo_spec`.
    batch_size : int
    rule : {"checkmate", "autodiff"}
        Which inputs a backward node reads.

    Raises
    ------
    GraphValidationError
        If ``spec`` is not a zoo model spec or is inconsistent.
    ValueError
        On a bad ``batch_size`` or ``rule``.

    Examples
    --------
    >>> spec = {"format": "remat-zoo-model", "version": 1, "name": "toy", "params": 10,
    ...         "input_elements": 3, "bytes_per_element": 4, "outputs": ["b"],
    ...         "layers": [{"name": "a", "deps": [], "flops": 5, "output_elements": 2},
    ...                    {"name": "b", "deps": ["a"], "flops": 7, "output_elements": 1}]}
    >>> g = graph_from_spec(spec, batch_size=2)
    >>> g.names
    ('a', 'b', 'loss', 'grad/b', 'grad/a')
    >>> [g.names[i] for i in g.deps[g.index("grad/a")]]
    ['a', 'b', 'grad/b']
    >>> g.cost.tolist(), g.memory_bytes.tolist(), g.fixed_bytes
    ([10.0, 14.0, 2.0, 28.0, 20.0], [16, 8, 8, 8, 16], 104)
    """
    if not isinstance(spec, Mapping) or spec.get("format") != SPEC_FORMAT:
        raise GraphValidationError(f"not a zoo model spec: expected \"format\": {SPEC_FORMAT!r}")
    if spec.get("version") != SPEC_VERSION:
        raise GraphValidationError(f"unsupported zoo model spec version {spec.get('version')!r}")
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {RULES}; got {rule!r}")
    b = _check_batch(batch_size)
    layers = spec["layers"]
    m = len(layers)
    if m == 0:
        raise GraphValidationError("zoo model spec has no layers")
    bpe = int(spec.get("bytes_per_element", 4))
    index = {layer["name"]: k for k, layer in enumerate(layers)}
    if len(index) != m:
        raise GraphValidationError("zoo model spec has duplicate layer names")
    fdeps: list[list[int]] = []
    for layer in layers:
        try:
            fdeps.append([index[d] for d in layer["deps"]])
        except KeyError as exc:
            raise GraphValidationError(f"layer {layer['name']!r} reads unknown layer {exc.args[0]!r}") from None
    users: list[list[int]] = [[] for _ in range(m)]
    for k, d in enumerate(fdeps):
        for i in d:
            users[i].append(k)
    outputs = [index[o] for o in spec.get("outputs", [])] or [k for k in range(m) if not users[k]]
    flops = np.array([float(layer["flops"]) for layer in layers])
    elems = np.array([int(layer["output_elements"]) for layer in layers], dtype=np.int64)
    loss = m
    grad = {v: m + 1 + j for j, v in enumerate(range(m - 1, -1, -1))}
    deps: list[list[int]] = fdeps + [outputs]
    out_set = set(outputs)
    for v in range(m - 1, -1, -1):
        d = {v}
        d.update(grad[u] for u in users[v])
        if rule == "checkmate":
            d.update(users[v])
        else:
            d.update(fdeps[v])
        if v in out_set or not users[v]:
            d.add(loss)
        deps.append(sorted(d))
    rev = np.arange(m - 1, -1, -1)
    loss_flops = float(sum(int(elems[o]) for o in outputs))
    cost = np.concatenate([flops, [loss_flops], 2.0 * flops[rev]]) * b
    mem = np.concatenate([elems * bpe, [bpe], elems[rev] * bpe]) * b
    names = [layer["name"] for layer in layers]
    all_names = names + ["loss"] + [f"grad/{names[v]}" for v in rev]
    fixed = 2 * bpe * int(spec.get("params", 0)) + bpe * int(spec.get("input_elements", 0)) * b
    return Graph.from_arrays(
        deps, cost=cost, memory_bytes=mem, is_backward=[False] * (m + 1) + [True] * m, names=all_names,
        fixed_bytes=fixed, name=f"{spec.get('name', 'model')}-b{b}",
        meta={"kind": "training", "zoo": spec.get("name", ""), "batch_size": b, "rule": rule,
              "cost_unit": "flop", "n_forward": m, "loss": loss,
              "grad_of": {f"grad/{nm}": nm for nm in names}},
    )


def zoo_graph(name: str, batch_size: int | None = None, rule: str = "checkmate") -> Graph:
    """A training graph from the zoo, built for ``batch_size``.

    Parameters
    ----------
    name : str
        A name from :func:`list_zoo` (``"keras_vgg16"``) or its unique short
        form (``"vgg16"``, case-insensitive).
    batch_size : int, optional
        For ``remat-zoo-model`` files: the batch size (default 1); activations,
        FLOPs and the input batch scale linearly with it, parameters do not.
        Fixed-batch graphs (plain :meth:`Graph.save` files) accept only their
        own batch size (``meta["batch_size"]``) or ``None``.
    rule : {"checkmate", "autodiff"}
        Backward dependency rule (see the module docstring).

    Returns
    -------
    Graph

    Raises
    ------
    ValueError
        On an unknown name or a batch size a fixed-batch graph cannot take.

    Examples
    --------
    >>> g1, g4 = zoo_graph("vgg16"), zoo_graph("vgg16", batch_size=4)
    >>> g1.n, int(g4.memory_bytes.sum()) == 4 * int(g1.memory_bytes.sum())
    (45, True)
    """
    data = load_spec(name)
    if data.get("format") == SPEC_FORMAT:
        return graph_from_spec(data, 1 if batch_size is None else batch_size, rule=rule)
    if data.get("format") == GRAPH_FORMAT:
        g = Graph.from_dict(data)
        if batch_size is not None:
            own = g.meta.get("batch_size")
            if own is None or _check_batch(batch_size) != own:
                raise ValueError(f"zoo graph {name!r} is a fixed-batch graph (batch size {own}); "
                                 f"it cannot be built for `batch_size`={batch_size!r}")
        return g
    raise GraphValidationError(f"zoo file {name!r} has unknown format {data.get('format')!r}")
