"""Cost models for the nodes of an extracted graph.

``"unit"``
    Every node costs 1.
``"flops"``
    Floating-point operations counted by :class:`torch.utils.flop_counter.FlopCounterMode`
    on fake tensors (no real compute), plus the number of elements the node
    writes, so that pointwise and memory-bound ops (which the flop counter
    leaves at zero) are not free to recompute. Unit: ``"flop"``.
``"profile"``
    Measured time in seconds: on a GPU, CUDA events recorded on the current
    stream around each run (device time, not launch time); on CPU the wall clock
    (``time.perf_counter``) with ``warmup`` untimed runs and the median of
    ``repeats`` timed runs. All node outputs are held at once while profiling
    (checkpoint-all without frees), so profile on inputs that fit.
"""

from __future__ import annotations

import logging
import operator
import time
from typing import Any, Sequence

import numpy as np

__all__ = ["COST_MODELS", "WORKSPACE_MODELS", "node_costs", "measure_workspace", "node_signature"]

log = logging.getLogger(__name__)

COST_MODELS = ("unit", "flops", "profile")
WORKSPACE_MODELS = ("estimate", "measure")


def _placeholder_values(eg, model, inputs, fake_mode=None):
    import torch

    vals = [p.detach() for _, p in model.named_parameters()]
    vals += [b.detach().clone() for _, b in model.named_buffers()]
    vals += [x.detach() for x in inputs]
    dev = inputs[0].device if inputs else torch.device("cpu")
    for shape, stride, dtype in eg.tangent_meta:
        vals.append(torch.ones(shape, dtype=dtype, device=dev).as_strided(shape, stride)
                    if torch.empty(shape).as_strided(shape, stride).is_contiguous()
                    else torch.ones(shape, dtype=dtype, device=dev))
    if fake_mode is not None:
        vals = [fake_mode.from_tensor(v) for v in vals]
    return vals


def _args(spec, k, values, outs, graph):
    deps = graph.deps[k]
    return [values[s[1]] if s[0] == "ph" else outs[deps[s[1]]][s[2]] for s in spec.inputs]


def _cuda_device(values):
    """The CUDA device of the first CUDA tensor among ``values``, or None (CPU)."""
    for v in values:
        if v is not None and v.is_cuda:
            return v.device
    return None


def _cuda_times(fn, args, repeats: int, device):
    """Run ``fn(*args)`` ``repeats`` times on ``device``, each timed with CUDA events on the current stream.

    The events are recorded on the stream the kernels are launched on, so an
    interval is the device time of the node's kernels, not the host's launch
    time; the host waits on the last event only.
    Returns the last result and the times in seconds.
    """
    import torch

    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        pairs = []
        res = None
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            res = fn(*args)
            end.record(stream)
            pairs.append((start, end))
        pairs[-1][1].synchronize()
    return res, [a.elapsed_time(b) / 1e3 for a, b in pairs]


def node_costs(eg, model, inputs: Sequence, cost_model: str, warmup: int = 2, repeats: int = 5,
               progress: bool = False) -> tuple[np.ndarray, str]:
    """Cost of every node of ``eg.graph`` under ``cost_model``.

    Parameters
    ----------
    eg : ExtractedGraph
    model : torch.nn.Module
    inputs : sequence of torch.Tensor
        The example inputs the graph was extracted with.
    cost_model : {"unit", "flops", "profile"}
    warmup, repeats : int
        For ``"profile"``: untimed and timed runs per node (median of the timed).
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    costs : numpy.ndarray
    unit : str
        ``"node"``, ``"flop"`` or ``"s"``.

    Raises
    ------
    ValueError
        On an unknown ``cost_model`` or non-positive ``repeats``.
    """
    import torch

    if cost_model not in COST_MODELS:
        raise ValueError(f"`cost_model` must be one of {COST_MODELS}; got {cost_model!r}")
    if int(repeats) < 1:
        raise ValueError(f"`repeats` must be a positive integer; got {repeats!r}")
    if int(warmup) < 0:
        raise ValueError(f"`warmup` must be >= 0; got {warmup!r}")
    g = eg.graph
    if cost_model == "unit":
        return np.ones(g.n), "node"
    from tqdm.auto import tqdm

    costs = np.zeros(g.n)
    outs: list = [None] * g.n
    it = tqdm(range(g.n), desc=f"cost model {cost_model}", disable=not progress)
    if cost_model == "flops":
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.utils.flop_counter import FlopCounterMode

        mode = FakeTensorMode(allow_non_fake_inputs=True)
        values = _placeholder_values(eg, model, inputs, mode)
        with torch.random.fork_rng(devices=[]), torch.no_grad(), mode:
            for k in it:
                spec = eg.groups[k]
                args = _args(spec, k, values, outs, g)
                with FlopCounterMode(display=False) as fc:
                    res = spec.fn.forward(*args)
                written = sum(t.numel() for t in res if isinstance(t, torch.Tensor))
                costs[k] = float(fc.get_total_flops()) + float(written)
                outs[k] = res
        return costs, "flop"
    values = _placeholder_values(eg, model, inputs)
    dev = _cuda_device(values)
    with torch.random.fork_rng(devices=[] if dev is None else [dev]), torch.no_grad():
        for k in it:
            spec = eg.groups[k]
            args = _args(spec, k, values, outs, g)
            for _ in range(int(warmup)):
                spec.fn.forward(*args)
            if dev is not None:
                res, times = _cuda_times(spec.fn.forward, args, int(repeats), dev)
            else:
                times = []
                for _ in range(int(repeats)):
                    t0 = time.perf_counter()
                    res = spec.fn.forward(*args)
                    times.append(time.perf_counter() - t0)
            costs[k] = float(np.median(times))
            outs[k] = res
    return costs, "s"


def measure_workspace(eg, model, inputs: Sequence, progress: bool = False, share: bool = True) -> np.ndarray:
    """Bytes each node allocates beyond what it keeps, measured by running it once.

    Every node is run on the example inputs while the allocator is watched
    (again where the first run allocated beyond what it keeps, which may be
    one-off caches or lazy initialisation; a run that allocated nothing
    more cannot measure lower and is not repeated): on CPU
    with :class:`remat_torch.meter.AllocatorMeter` (the profiler's memory
    events), on a GPU with :class:`remat_torch.meter.CudaMeter`
    (``torch.cuda.max_memory_allocated`` of the inputs' device, synchronized
    before and after). This sees
    the temporaries that
    operators allocate inside themselves, such as oneDNN's format reorders
    in ``convolution_backward``, which no graph-level estimate can see.

    The workspace is the node's peak above the level at the call minus what
    it still holds when it returns (its outputs), clipped at zero; where the
    outputs allocate less than the node's ``memory_bytes`` (views of other
    values) the latter is subtracted instead. The memory model adds
    ``memory_bytes`` plus the workspace at the compute instant and reserves
    the outputs that are fixed bytes (model outputs) in ``fixed_bytes`` from
    the start, so the prediction follows what the allocator sees.

    Parameters
    ----------
    eg : ExtractedGraph
    model : torch.nn.Module
    inputs : sequence of torch.Tensor
        The example inputs the graph was extracted with.
    progress : bool
        Show a tqdm progress bar.
    share : bool
        Measure once per ``node_signature`` (default): a node with the
        same ops on inputs of the same layouts as one measured before (the
        next layer of a stack) takes that measurement, and later nodes read
        zeros of its outputs' layouts instead of running it (its integer
        outputs excepted). ``False`` measures every node.

    Returns
    -------
    numpy.ndarray
        int64 bytes per node of ``eg.graph``.
    """
    import torch
    from tqdm.auto import tqdm

    from .meter import meter_for

    g = eg.graph
    ws = np.zeros(g.n, dtype=np.int64)
    outs: list = [None] * g.n
    values = _placeholder_values(eg, model, inputs)
    dev = _cuda_device(values)
    seen: dict = {}   # node signature -> (peak, net, node) measured on the first node with it
    zeros: dict = {}   # (dtype, device) -> one zero-filled buffer that every stand-in of that kind views
    with torch.random.fork_rng(devices=[] if dev is None else [dev]), torch.no_grad():
        for k in tqdm(range(g.n), desc="workspace", disable=not progress):
            spec = eg.groups[k]
            args = _args(spec, k, values, outs, g)
            sig = node_signature(spec.fn, args) if share else None
            if sig in seen:   # the same ops on the same shapes (another layer of a stack): same allocations
                peak, net, twin = seen[sig]
                res = _stand_ins(outs[twin], zeros)
                if res is None:   # outputs whose values later ops may depend on (indices): computed
                    res = spec.fn.forward(*args)
            else:
                with meter_for(dev) as m:  # on a GPU: the caching allocator's peak counters, device synchronized
                    res = spec.fn.forward(*args)
                peak, net = int(m.peak_bytes), int(m.net_bytes)
                if peak > max(net, int(g.memory_bytes[k])):
                    # a first run may count one-off allocations (lazy initialisation, caches): measured again;
                    # one that allocated nothing beyond what it keeps cannot measure lower, and is not run again
                    with meter_for(dev) as m:
                        res = spec.fn.forward(*args)
                    peak, net = int(m.peak_bytes), int(m.net_bytes)
                if sig is not None:
                    seen[sig] = (peak, net, k)
            # the model adds memory_bytes + workspace at this instant; the outputs that are fixed bytes
            # (model outputs, gradients) were reserved from the start: so subtract all that is kept
            ws[k] = max(peak - max(net, int(g.memory_bytes[k])), 0)
            outs[k] = res
    log.debug("workspace: %d nodes measured, %d shared a measurement", len(seen), g.n - len(seen))
    return ws


def _stand_ins(outputs, pool: dict | None = None):
    """Zero-filled tensors of the layouts of ``outputs`` (a node's results), or None where one of them is an
    integer tensor (indices a later op may read) or no tensor: what later nodes read from a repeated node,
    whose allocations are known, so that the repeat need not run. Zeros, not uninitialized memory: denormals
    would slow later ops down.

    With ``pool`` (a dict kept across calls), every stand-in of a dtype and device is a view of one zero
    buffer, grown when a larger one is needed: the graph's ops are functional (they do not write into their
    inputs), so they can share it, and a fresh zeroed block per value (its page faults) took about a third of
    the workspace measurement (4-layer GPT-2, 117 repeated nodes: 1.2 of 3.2 CPU s)."""
    import torch

    if not all(isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)
               for t in outputs):
        return None

    def zeros(t):
        numel = 1 + sum((d - 1) * st for d, st in zip(t.shape, t.stride())) if t.numel() else 0
        if pool is None:
            return torch.zeros(numel, dtype=t.dtype, device=t.device).as_strided(t.shape, t.stride())
        key = (t.dtype, t.device)
        buf = pool.get(key)
        if buf is None or buf.numel() < numel:
            buf = pool[key] = torch.zeros(max(numel, 1), dtype=t.dtype, device=t.device)
        return buf.as_strided(t.shape, t.stride())

    return tuple(zeros(t) for t in outputs)


def node_signature(fn, args) -> tuple | None:
    """What a node's allocations depend on: its ops with their arguments (values named by position) and the
    shape, strides, dtype and device of each input. Nodes with equal signatures (the same layer repeated)
    allocate the same; ``None`` where the graph calls something other than an op (a constant), which is
    measured on its own.

    Examples
    --------
    >>> import torch, torch.fx as fx
    >>> aten = torch.ops.aten
    >>> f = fx.symbolic_trace(lambda x: aten.mul.Tensor(aten.relu.default(x), 2))
    >>> node_signature(f, [torch.ones(3)]) == node_signature(f, [torch.zeros(3)])
    True
    >>> node_signature(f, [torch.ones(3)]) == node_signature(f, [torch.ones(4)])
    False
    >>> node_signature(fx.symbolic_trace(lambda x: torch.relu(x)), [torch.ones(3)]) is None
    True
    """
    import torch
    import torch.fx as fx

    index: dict = {}
    parts: list = []

    def ref(a):
        return ("v", index[a]) if isinstance(a, fx.Node) else a

    for n in fn.graph.nodes:
        index[n] = len(index)
        if n.op == "placeholder":
            parts.append(("ph",))
            continue
        target = n.target
        if n.op == "call_function" and not isinstance(target, torch._ops.OpOverload) and target is not operator.getitem:
            if getattr(target, "__module__", None) != "_operator":
                return None
        try:
            parts.append((n.op, str(target), repr(fx.node.map_aggregate(n.args, ref)),
                          repr(fx.node.map_aggregate(n.kwargs, ref))))
        except KeyError:  # pragma: no cover - nodes are in order
            return None
    metas = tuple((tuple(a.shape), tuple(a.stride()), a.dtype, str(a.device), a.storage_offset())
                  if isinstance(a, torch.Tensor) else ("c", repr(a)) for a in args)
    return tuple(parts), metas
