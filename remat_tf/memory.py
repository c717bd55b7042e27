"""Measured kernel scratch: bytes a TensorFlow kernel allocates beyond its inputs and outputs.

Some kernels take working buffers that no tensor of the graph shows: on CPU,
TensorFlow's Eigen convolution backprops (float64, or any dtype without
oneDNN) take up to 32 MiB each whatever the batch, while the oneDNN kernels
(float32 with oneDNN on, the default) take almost none; on a GPU, cuDNN picks
a workspace per algorithm. A fixed allowance is wrong in one case or the
other, so :func:`measure_scratch` measures it: each op of a kernel family in
:data:`SCRATCH_OP_TYPES` is rebuilt alone in a ``tf.function`` (same type,
attributes, input shapes and dtypes; integer inputs such as a backprop's
``input_sizes`` get their static values) and run on zeros on the device in
use; its scratch is the allocator's peak during the run minus the bytes in use
after it, outputs alive (``tf.config.experimental.get_memory_info``,
the maximum over ``repeats`` runs: a kernel that shards over threads may take
one buffer per thread). Results are cached per op signature for the process,
so a model with many identical convolutions measures each shape once.

When the allocator keeps no statistics (CPU with oneDNN off, which TensorFlow
refuses with a ValueError) nothing can be measured; :func:`measure_scratch`
then returns ``None`` and the caller falls back to
:data:`remat_tf.graph.CPU_KERNEL_SCRATCH_BYTES` (the Eigen kernels' upper bound).

This module imports TensorFlow only; :mod:`remat_tf.graph` uses it.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["SCRATCH_OP_TYPES", "stats_device", "train_step_peak_bytes", "train_step_tensor_peak_bytes",
           "measure_scratch", "clear_cache", "replay_peak_bytes"]

log = logging.getLogger(__name__)

# kernel families that allocate working buffers beyond their outputs (convolutions, their backprops, batch
# norm's gradient, matrix products); every other op's memory is its outputs, which the graph counts already
SCRATCH_OP_TYPES = frozenset({
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3D", "Conv3DBackpropInputV2",
    "Conv3DBackpropFilterV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter", "FusedBatchNormV3", "FusedBatchNormGradV3", "MatMul", "BatchMatMulV2",
    "BatchMatMulV3", "Einsum", "MaxPoolGrad", "AvgPoolGrad", "Conv", "Conv2DBackpropInputV2",
})

_cache: dict[tuple, int] = {}
_device_ok: dict[str, bool] = {}


def clear_cache() -> None:
    """Forget every measurement (they are kept for the process otherwise)."""
    _cache.clear()
    _device_ok.clear()


def stats_device() -> str | None:
    """The device whose allocator statistics can be read (``"GPU:0"`` or ``"CPU:0"``), or ``None``."""
    import tensorflow as tf

    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    if device not in _device_ok:
        try:
            tf.config.experimental.reset_memory_stats(device)
            tf.config.experimental.get_memory_info(device)
            _device_ok[device] = True
        except (ValueError, RuntimeError, NotImplementedError) as exc:
            log.info("allocator statistics unavailable on %s (%s): kernel scratch is not measured", device, exc)
            _device_ok[device] = False
    return device if _device_ok[device] else None


def _static_value(t: Any) -> tuple | None:
    """The value of an integer tensor known while tracing (a constant, or the shape of a fully known tensor)."""
    import tensorflow as tf

    if t.op.type in ("Shape", "ShapeN"):
        source = t.op.inputs[t.value_index]
        return tuple(source.shape.as_list()) if source.shape.is_fully_defined() else None
    value = tf.get_static_value(t)
    return None if value is None else tuple(value.ravel().tolist())


def _signature(op: Any) -> tuple | None:
    """What decides an op's scratch: its type, attributes and input shapes, dtypes and static values."""
    import tensorflow as tf

    parts = []
    for t in op.inputs:
        if t.dtype == tf.resource or not t.shape.is_fully_defined():
            return None
        static = None
        if t.dtype.is_integer:
            static = _static_value(t)
            if static is None:
                return None
        parts.append((tuple(t.shape.as_list()), t.dtype.name, static))
    attrs = tuple(sorted((k, v.SerializeToString()) for k, v in op.node_def.attr.items() if not k.startswith("_")))
    return op.type, tuple(parts), attrs


def _rebuilt(op: Any, signature: tuple):
    """A concrete function running ``op`` alone: its float inputs are arguments, its integer inputs constants."""
    import tensorflow as tf

    _, parts, _ = signature
    attrs = {k: v for k, v in op.node_def.attr.items() if not k.startswith("_")}
    specs = [tf.TensorSpec(shape, dtype) for shape, dtype, static in parts if static is None]

    def fn(*args):
        it = iter(args)
        inputs = [next(it) if static is None else tf.constant(list(static) if len(shape) else static[0],
                                                              dtype=dtype, shape=shape)
                  for shape, dtype, static in parts]
        graph = tf.compat.v1.get_default_graph()
        new = graph._create_op_internal(op.type, inputs, [o.dtype for o in op.outputs], attrs=attrs)
        return list(new.outputs)

    return tf.function(fn, autograph=False).get_concrete_function(*specs), specs


def _measure_one(op: Any, signature: tuple, device: str, repeats: int) -> int:
    import tensorflow as tf

    fn, specs = _rebuilt(op, signature)
    with tf.device(device):
        args = [tf.zeros(s.shape, s.dtype) for s in specs]
    fn(*args)  # the first run may allocate once-only buffers (oneDNN primitives): not per-step memory
    worst = 0
    for _ in range(max(1, repeats)):
        tf.config.experimental.reset_memory_stats(device)
        before = tf.config.experimental.get_memory_info(device)["current"]
        outs = fn(*args)
        info = tf.config.experimental.get_memory_info(device)
        # the outputs' chunks (what is still in use), not their sizes: the BFC allocator may hand out a chunk of
        # up to twice a request, and that waste belongs to the output, which the replay counts by its size
        worst = max(worst, info["peak"] - info["current"])
        del outs
    return int(worst)


def train_step_peak_bytes(model, x, y, device: str | None = None) -> int:
    """The allocator's peak during one ``model.train_on_batch(x, y)`` above the bytes in use before it, measured
    on a second step (the first one traces). ``device``: default :func:`stats_device`."""
    import tensorflow as tf

    device = device or stats_device()
    model.train_on_batch(x, y)
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    model.train_on_batch(x, y)
    return tf.config.experimental.get_memory_info(device)["peak"] - before


def train_step_tensor_peak_bytes(model, x, y) -> tuple[int, int]:
    """``(allocator peak, tensor peak)`` of one ``model.train_on_batch(x, y)`` (a second step, after one that
    traces), both above the bytes in use before it, read from TensorFlow's profiler.

    The profiler records every allocation of the device's allocator with the
    bytes requested and the bytes of the chunk handed out; the allocator
    peak (what :func:`train_step_peak_bytes` reads) counts chunks, the tensor
    peak the requests: the BFC allocator hands out a free chunk of up to
    twice the request whole, so the two differ by its waste. Measured on
    remat_tf steps (within the allocator's peak there); on a plain Keras
    ``fit`` step it read more than the allocator's peak (ResNet50 32x32
    batch 8: 97.0 MiB against 40.7; not investigated).
    """
    import glob
    import shutil
    import tempfile

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    device = stats_device()
    if device is None:
        raise ValueError("the allocator keeps no statistics on this device: nothing to measure")
    model.train_on_batch(x, y)
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    logdir = tempfile.mkdtemp(prefix="remat_tf_profile_")
    tf.profiler.experimental.start(logdir, options=tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=3, python_tracer_level=0, device_tracer_level=0))
    try:
        model.train_on_batch(x, y)
    finally:
        tf.profiler.experimental.stop()
    chunk_peak = tf.config.experimental.get_memory_info(device)["peak"] - before
    events = []
    paths = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    for path in paths:
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            for line in plane.lines:
                for ev in line.events:
                    kind = plane.event_metadata[ev.metadata_id].name
                    if kind in ("MemoryAllocation", "MemoryDeallocation"):
                        stats = {names[st.metadata_id]: st.uint64_value or st.int64_value for st in ev.stats
                                 if names[st.metadata_id] in ("addr", "requested_bytes")}
                        events.append((line.timestamp_ns * 1000 + ev.offset_ps, kind == "MemoryAllocation", stats))
    shutil.rmtree(logdir, ignore_errors=True)
    if not paths:
        raise RuntimeError("TensorFlow's profiler wrote no trace")
    events.sort(key=lambda e: e[:2])  # at one instant a buffer is freed before its address is handed out again
    requested: dict[int, int] = {}
    current = peak = 0
    for _, alloc, stats in events:
        if alloc:
            requested[stats["addr"]] = stats["requested_bytes"]
            current += stats["requested_bytes"]
            peak = max(peak, current)
        else:
            current -= requested.pop(stats["addr"], 0)
    return int(chunk_peak), int(peak)


def measure_scratch(ops: list, repeats: int = 3) -> dict[str, int] | None:
    """Measured scratch bytes of every op of ``ops`` in :data:`SCRATCH_OP_TYPES` (see the module docstring).

    Parameters
    ----------
    ops : list of tf.Operation
        Operations of a traced graph.
    repeats : int
        Measured runs per new signature (after one untimed run); the maximum is kept.

    Returns
    -------
    dict or None
        Op name -> bytes (ops that cannot be rebuilt, for example with an
        integer input of unknown value, are left out), or ``None`` when the
        device's allocator keeps no statistics.
    """
    import tensorflow as tf

    device = stats_device()
    if device is None:
        return None
    out: dict[str, int] = {}
    new = 0
    for op in ops:
        if op.type not in SCRATCH_OP_TYPES:
            continue
        sig = _signature(op)
        if sig is None:
            log.debug("op %s (%s) cannot be rebuilt alone: scratch not measured", op.name, op.type)
            continue
        key = (device, sig)
        if key not in _cache:
            try:
                _cache[key] = _measure_one(op, sig, device, repeats)
            except (tf.errors.OpError, ValueError, TypeError) as exc:  # will not run alone: nothing, logged
                log.debug("op %s (%s) could not run alone (%s): scratch not measured", op.name, op.type, exc)
                _cache[key] = 0
            new += 1
        out[op.name] = max(0, _cache[key])
    log.info("kernel scratch: %d ops, %d new signatures measured on %s", len(out), new, device)
    return out


# ops whose output is a view of an input buffer (TensorFlow forwards the buffer): no allocation; the buffer lives
# until the last reader of either tensor
ALIAS_OP_TYPES = frozenset({"Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
                            "PreventGradient", "EnsureShape", "Snapshot", "CheckNumerics"})
# element-wise kernels that write their output into an input's buffer when nothing else reads that input
# (TensorFlow's forward_input_or_allocate_output)
FORWARDING_OP_TYPES = frozenset({
    "Relu", "Relu6", "Elu", "Selu", "Sigmoid", "Tanh", "Softplus", "Exp", "Log", "Neg", "Square", "Sqrt", "Rsqrt",
    "Erf", "Abs", "Reciprocal", "BiasAdd", "AddV2", "Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum",
    "SquaredDifference", "AddN", "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "SigmoidGrad", "TanhGrad",
    "SoftplusGrad", "RsqrtGrad", "SqrtGrad", "Select", "SelectV2", "DivNoNan", "MulNoNan",
})
# outputs that live outside the step's allocations: weights (a read aliases the variable), the captured batch
_RESIDENT_OP_TYPES = frozenset({"ReadVariableOp", "Const", "Placeholder", "VarHandleOp"})


def _out_bytes(t: Any) -> int:
    import tensorflow as tf

    if t.dtype in (tf.resource, tf.variant) or not t.shape.is_fully_defined():
        return 0
    return int(t.shape.num_elements()) * t.dtype.size


def replay_peak_bytes(graph: Any, scratch: dict | None = None, freed_at: dict | None = None, order: str = "created",
                      forwarding: bool = True) -> int:
    """Peak bytes of the tensors a traced ``tf.function`` step allocates, replayed op by op.

    The step's operations that must run (ancestors of its outputs and of its
    control outputs; a re-traced forward that nothing reads is pruned, as
    TensorFlow does) run in dependency order: ``order="created"`` runs the
    earliest-created ready op first (the plan's control edges leave little
    choice), ``"fifo"`` the first to become ready, ``"ready"`` the one whose
    last-created input was created first (the optimizer's writes then run
    right after their gradient, as TensorFlow's executor runs a ready op
    soon). An op allocates its
    outputs (none for a view, :data:`ALIAS_OP_TYPES`) plus its measured
    scratch (``scratch``: op name -> bytes) while it runs; a buffer is freed
    when the last op reading it (or a view of it) ran. With ``forwarding``
    (the default), an element-wise kernel (:data:`FORWARDING_OP_TYPES`, the
    optimizer's ``lr * grad`` included) writes into an input buffer as
    TensorFlow's executor lets it: the input tensor has that op as its only
    reader and no view of it is pending. Measured on CPU with oneDNN
    (TensorFlow 2.21, 32x32 batch 8): without it the replay counted SGD's
    ``lr * grad`` beside the gradient (ResNet50 checkpoint-all 31.5 MiB
    replayed, 25.0 measured; 22.5 with it). Weights, constants and the
    captured inputs are resident and not counted. ``freed_at`` (tensor name
    -> op name) frees a tensor with no reader in the graph after that op
    instead of at the end of the step.

    Returns the peak above the resident bytes. The BFC allocator's waste is
    not modelled: it rounds every request to 256 bytes and hands out a whole
    free chunk of up to twice the request without splitting it, so its meter
    reads more than the tensors hold (ResNet50 checkpoint-all at its peak:
    22.60 MiB of tensors requested, 25.18 MiB of chunks; this replay 22.52).
    """
    import heapq

    import tensorflow as tf

    if order not in ("created", "fifo", "ready"):
        raise ValueError(f"`order` must be 'created', 'fifo' or 'ready'; got {order!r}")
    scratch = scratch or {}
    freed_at = dict(freed_at or {})
    ops = graph.get_operations()
    index = {op.name: i for i, op in enumerate(ops)}
    roots = [t.op for t in graph.outputs] + list(getattr(graph, "control_outputs", []))
    live: set = set()
    stack = [op for op in roots if op.name in index]
    while stack:
        op = stack.pop()
        if op.name in live:
            continue
        live.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    fetched = {t.name for t in graph.outputs}
    after: dict[str, list] = {}
    for t, op in freed_at.items():
        after.setdefault(op, []).append(t)
    # buffers: a tensor maps to a buffer; a buffer is freed when its pending reads reach zero
    buf_of: dict[str, int] = {}
    size: dict[int, int] = {}
    pending: dict[int, int] = {}
    held: set = set()  # buffers kept to the end (fetched) or until a freed_at op
    waiting: dict[str, int] = {}
    rank: dict[str, int] = {}  # the creation index of an op's last-created predecessor
    users: dict[str, list] = {}
    for op in ops:
        if op.name not in live:
            continue
        preds = {t.op.name for t in op.inputs if t.op.name in live} | {c.name for c in op.control_inputs
                                                                      if c.name in live}
        waiting[op.name] = len(preds)
        rank[op.name] = max((index[p] for p in preds), default=-1)
        for p in preds:
            users.setdefault(p, []).append(op)
    reads: dict[str, int] = {}
    for op in ops:
        if op.name in live:
            for t in op.inputs:
                reads[t.name] = reads.get(t.name, 0) + 1
    tick = [0]

    def key(op):
        tick[0] += 1
        if order == "ready":
            return rank[op.name], index[op.name]
        return index[op.name] if order == "created" else tick[0]

    ready = [(key(op), op) for op in ops if op.name in live and waiting[op.name] == 0]
    heapq.heapify(ready)
    current = peak = 0
    next_buf = 0

    def release(b):
        nonlocal current
        if b in size and pending[b] <= 0 and b not in held:
            current -= size.pop(b)

    while ready:
        _, op = heapq.heappop(ready)
        new_bufs = []
        for o, t in enumerate(op.outputs):
            if op.type in _RESIDENT_OP_TYPES or t.dtype == tf.resource:
                continue
            n_reads = reads.get(t.name, 0)
            if op.type in ALIAS_OP_TYPES and op.inputs and t.dtype != tf.resource:
                src = op.inputs[min(o, len(op.inputs) - 1)].name
                if src in buf_of:
                    b = buf_of[src]
                    buf_of[t.name] = b
                    pending[b] += n_reads
                    if t.name in fetched or t.name in freed_at:
                        held.add(b)
                    continue
            nb = _out_bytes(t)
            b = None
            if forwarding and op.type in FORWARDING_OP_TYPES:
                for x in op.inputs:
                    if reads.get(x.name, 0) != 1:
                        continue  # TensorFlow forwards only a tensor with one reader
                    cand = buf_of.get(x.name)
                    if cand is not None and cand in size and pending[cand] == 1 and cand not in held \
                            and size[cand] == nb and x.dtype == t.dtype and cand not in new_bufs:
                        b = cand  # its one pending read is this op's, consumed below
                        break
            if b is None:
                b = next_buf
                next_buf += 1
                size[b] = nb
                pending[b] = 0
                current += nb
            new_bufs.append(b)
            buf_of[t.name] = b
            pending[b] += n_reads
            if t.name in fetched or t.name in freed_at:
                held.add(b)
        peak = max(peak, current + int(scratch.get(op.name, 0)))
        for t in op.inputs:
            b = buf_of.get(t.name)
            if b is not None:
                pending[b] -= 1
                release(b)
        for b in new_bufs:
            release(b)
        for name in after.get(op.name, []):
            b = buf_of.get(name)
            if b is not None:
                held.discard(b)
                release(b)
        for u in users.get(op.name, []):
            waiting[u.name] -= 1
            if waiting[u.name] == 0:
                heapq.heappush(ready, (key(u), u))
    return int(peak)
