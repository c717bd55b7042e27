"""Keras functional model -> layer-level forward DAG with a FLOP cost model.

This is the framework side of the benchmark zoo (:mod:`remat_core.zoo.models`):
:func:`forward_layers` walks a Keras 3 functional model and returns one record
per layer (inputs, output elements and FLOPs per example, parameters);
:func:`zoo_spec` packs them into the JSON form that
:func:`remat_core.zoo.models.zoo_graph` turns into a training graph for any
batch size without importing a framework; :func:`keras_to_graph` does both
steps at once.

The cost model counts multiply-accumulates as one FLOP, per example, like the
Checkmate paper's layer hooks (its ``extraction_hooks``):

=======================  ===========================================================
layer                    FLOPs per example
=======================  ===========================================================
Conv2D                   output elements x kernel_h x kernel_w x in_channels / groups
Conv2DTranspose          input elements x kernel_h x kernel_w x out_channels
DepthwiseConv2D          output elements x kernel_h x kernel_w
Dense                    in_features x out_features (x leading dims)
MultiHeadAttention       projections + heads x T x S x (key_dim + value_dim + 1) + output projection
BatchNormalization       4 x elements
pooling                  output elements x pool window (global pooling: input elements)
UpSampling2D             output elements (nearest) or 5 x output elements (bilinear)
Add / Multiply / ...     sum of input elements
activations, Dropout     elements
reshape, pad, crop,      0 (data movement)
concatenate
=======================  ===========================================================

A fused activation (``Conv2D(..., activation="relu")``) adds one FLOP per
output element.
"""

from __future__ import annotations

import logging
import math
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["forward_layers", "zoo_spec", "keras_to_graph", "ZOO_SPEC_FORMAT", "ZOO_SPEC_VERSION"]

ZOO_SPEC_FORMAT = "remat-zoo-model"
ZOO_SPEC_VERSION = 1
BYTES_PER_ELEMENT = 4

_ZERO_COST = {"Reshape", "Flatten", "ZeroPadding2D", "Cropping2D", "Concatenate", "Permute", "InputLayer"}
_ELEMENTWISE = {"Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum"}
_ACTIVATIONS = {"Activation", "ReLU", "LeakyReLU", "Softmax", "ELU", "PReLU", "Dropout", "SpatialDropout2D",
                "GaussianNoise", "Rescaling", "Normalization"}


def _elements(shape: Any) -> int:
    """Elements of one example of a tensor of ``shape`` (batch dimension dropped)."""
    dims = tuple(shape)[1:]
    if any(d is None for d in dims):
        raise ValueError(f"cannot size a tensor with unknown dimensions {tuple(shape)}; build the model "
                         "with a fixed input shape")
    return int(math.prod(int(d) for d in dims))


def _layer_flops(layer: Any, in_shapes: list[tuple], out_shape: tuple) -> int:
    """FLOPs per example of one layer (see the module docstring)."""
    kind = type(layer).__name__
    out_el = _elements(out_shape)
    in_el = [_elements(s) for s in in_shapes]
    if kind == "Conv2D" or kind == "Conv1D":
        kernel = layer.kernel.shape  # (kh, kw, cin/groups, cout)
        flops = out_el * int(math.prod(kernel[:-2])) * int(kernel[-2])
    elif kind == "Conv2DTranspose":
        kernel = layer.kernel.shape  # (kh, kw, cout, cin)
        flops = in_el[0] * int(math.prod(kernel[:-2])) * int(kernel[-2])
    elif kind == "DepthwiseConv2D":
        kernel = layer.kernel.shape  # (kh, kw, cin, multiplier)
        flops = out_el * int(math.prod(kernel[:2]))
    elif kind == "Dense":
        kernel = layer.kernel.shape
        flops = (in_el[0] // int(kernel[0])) * int(kernel[0]) * int(kernel[1])
    elif kind == "MultiHeadAttention":
        t_len, s_len = in_el[0] // int(in_shapes[0][-1]), in_el[-1] // int(in_shapes[-1][-1])
        heads, kd = int(layer.num_heads), int(layer.key_dim)
        vd = int(layer.value_dim or kd)
        d_q, d_v = int(in_shapes[0][-1]), int(in_shapes[-1][-1])
        flops = (t_len * d_q * heads * kd + s_len * d_v * heads * (kd + vd)  # projections
                 + heads * t_len * s_len * (kd + vd + 1)  # scores, softmax, context
                 + t_len * heads * vd * int(out_shape[-1]))  # output projection
    elif kind == "BatchNormalization" or kind == "LayerNormalization":
        flops = 4 * in_el[0]
    elif kind in ("MaxPooling2D", "AveragePooling2D"):
        flops = out_el * int(math.prod(layer.pool_size))
    elif kind in ("GlobalAveragePooling2D", "GlobalMaxPooling2D"):
        flops = in_el[0]
    elif kind == "UpSampling2D":
        flops = out_el * (5 if getattr(layer, "interpolation", "nearest") == "bilinear" else 1)
    elif kind in _ELEMENTWISE:
        flops = sum(in_el)
    elif kind in _ACTIVATIONS:
        flops = out_el
    elif kind in _ZERO_COST:
        flops = 0
    else:
        log.warning("no FLOP rule for layer %s of type %s; counting one FLOP per output element", layer.name, kind)
        flops = out_el
    act = getattr(layer, "activation", None)
    if kind not in _ACTIVATIONS and act is not None and getattr(act, "__name__", "linear") != "linear":
        flops += out_el
    return int(flops)


def forward_layers(model: Any) -> list[dict[str, Any]]:
    """One record per non-input layer of a Keras functional model, in topological order.

    Parameters
    ----------
    model : keras.Model
        A functional model built with a fixed input shape, every layer called once.

    Returns
    -------
    list of dict
        ``name``, ``type``, ``deps`` (names of producing layers; model inputs
        are left out), ``flops`` and ``output_elements`` (per example),
        ``params``.

    Raises
    ------
    ValueError
        If a layer is shared (called more than once), has several outputs, or
        a shape is unknown.
    """
    input_layers = {t._keras_history.operation.name for t in model.inputs}
    records = []
    known = set()
    for layer in model.layers:
        if type(layer).__name__ == "InputLayer" or layer.name in input_layers:
            continue
        nodes = layer._inbound_nodes
        if len(nodes) != 1:
            raise ValueError(f"layer {layer.name!r} is called {len(nodes)} times; shared layers are not supported")
        node = nodes[0]
        deps = []
        for t in node.input_tensors:
            producer = t._keras_history.operation.name
            if producer in input_layers:
                continue
            if producer not in known:
                raise ValueError(f"layer {layer.name!r} reads {producer!r}, which is not an earlier layer")
            if producer not in deps:
                deps.append(producer)
        outputs = node.output_tensors
        if len(outputs) != 1:
            raise ValueError(f"layer {layer.name!r} has {len(outputs)} outputs; one is supported")
        out_shape = tuple(outputs[0].shape)
        in_shapes = [tuple(t.shape) for t in node.input_tensors]
        records.append({
            "name": layer.name,
            "type": type(layer).__name__,
            "deps": deps,
            "flops": _layer_flops(layer, in_shapes, out_shape),
            "output_elements": _elements(out_shape),
            "params": int(layer.count_params()),
        })
        known.add(layer.name)
    return records


def zoo_spec(model: Any, name: str, source: str = "", **meta: Any) -> dict[str, Any]:
    """The batch-size-independent JSON description of ``model`` read by :func:`remat_core.zoo.models.zoo_graph`.

    Parameters
    ----------
    model : keras.Model
    name : str
        Zoo name (for example ``"vgg16"``).
    source : str
        How the model was built (recorded in the file).
    **meta
        Extra JSON-serializable fields (stored under ``meta``).

    Returns
    -------
    dict
        ``format``, ``version``, ``name``, ``layers`` (see :func:`forward_layers`),
        ``outputs`` (layer names), ``params``, ``input_elements`` (per
        example), ``input_shape``, ``bytes_per_element``, ``cost_model``,
        ``source`` and ``meta``.
    """
    import keras

    layers = forward_layers(model)
    outputs = [t._keras_history.operation.name for t in model.outputs]
    return {
        "format": ZOO_SPEC_FORMAT,
        "version": ZOO_SPEC_VERSION,
        "name": name,
        "source": source,
        "framework": f"keras {keras.__version__}",
        "cost_model": "flops (multiply-accumulate = 1) per example; backward = 2 x forward",
        "bytes_per_element": BYTES_PER_ELEMENT,
        "input_shape": [list(t.shape)[1:] for t in model.inputs],
        "input_elements": sum(_elements(t.shape) for t in model.inputs),
        "params": int(model.count_params()),
        "outputs": outputs,
        "layers": layers,
        "meta": dict(meta),
    }


def keras_to_graph(model: Any, batch_size: int = 1, name: str = "", rule: str = "checkmate"):
    """The layer-level training graph of a Keras model at ``batch_size`` (see :func:`remat_core.zoo.models.graph_from_spec`)."""
    from remat_core.zoo.models import graph_from_spec

    return graph_from_spec(zoo_spec(model, name or model.name), batch_size=batch_size, rule=rule)
