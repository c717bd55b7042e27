"""Rematerialized modules under data parallelism: one plan per rank shape, and per-rank memory.

What lives here: :func:`rematerialize_shared`, which makes one plan per
distinct input shape across the ranks of a process group (the lowest rank of
each shape solves, the others receive the schedule, so ranks that are alike
run the same plan and no rank waits on a solver that another already ran),
and :func:`comm_overhead_bytes`, the bytes a data-parallel wrapper keeps on
each rank beyond what the plan's memory model counts (DDP's gradient buckets,
FSDP2's sharded parameters and gradients), so that a budget in bytes means
per-device bytes.

This module imports torch, ``torch.distributed`` (inside the functions) and
:func:`remat_torch.api.rematerialize`; nothing in the adapter imports it.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

import torch

from .api import rematerialize

__all__ = ["rematerialize_shared", "comm_overhead_bytes", "compiled_budget_bytes", "fully_shard_blocks", "STRATEGIES"]

log = logging.getLogger(__name__)

#: The data-parallel wrappers :func:`comm_overhead_bytes` knows.
STRATEGIES = ("ddp", "fsdp")


def _param_bytes(model) -> int:
    seen = {}
    for p in model.parameters():
        if p.requires_grad:
            seen[id(p)] = p.numel() * p.element_size()
    return sum(seen.values())


def comm_overhead_bytes(model, strategy: str, world_size: int, blocks=None, gathered: int | None = None) -> int:
    """Bytes a data-parallel wrapper holds on each rank beyond the plan's memory model.

    The plan's fixed bytes count the full parameters and their gradients, as
    on one device. On top of that:

    ``"ddp"``
        :class:`~torch.nn.parallel.DistributedDataParallel` allocates its
        gradient buckets once, one flat buffer per bucket, as large as all the
        gradients together (``gradient_as_bucket_view=False``, the default):
        one more copy of the trainable parameters' bytes.
    ``"fsdp"``
        FSDP2 (``fully_shard``) on the whole module keeps the rank's shard of
        the parameters (``1/world_size`` of their bytes) besides the unsharded
        parameters that its all-gather makes for the step (those are the
        plan's fixed bytes), and with more than one rank it holds the flat
        all-gather output (the parameters' bytes once more) through the
        forward; the reduce-scatter leaves the rank's shard of the gradients
        (``1/world_size`` again), held until they are zeroed. The
        reduce-scatter itself runs after the plan's last node, when the
        activations are freed.

    ``"fsdp"`` with ``blocks`` (:func:`fully_shard_blocks`)
        The shards of the parameters and of the gradients as above; the
        root's flat all-gather output (the bytes of the parameters outside
        ``blocks``), which FSDP2 keeps through the step; and one block's flat
        buffer at a time, the largest block's bytes: its all-gather output
        while the step starts (freed once copied into the block's
        parameters), or its reduce-scatter input after the plan's backward.

    ``"fsdp"`` with ``blocks`` and ``gathered=k`` (``fully_shard_blocks(..., gathered=k)``)
        As above, less what the plan's fixed bytes count but the rank does
        not hold: the parameters of every block but the ``k`` largest, since
        at most ``k`` blocks are gathered at a time. The overhead can then
        be negative: the plan may count more than the device holds.

    The overhead is the largest of these over the step, so a plan within
    ``budget - overhead`` keeps the rank within ``budget``; where the
    overhead falls (FSDP2's all-gather buffer in the forward) and the plan's
    peak does not (in the backward) the rank stays further below.

    Parameters
    ----------
    model : torch.nn.Module
        The model before wrapping (its full parameters).
    strategy : {"ddp", "fsdp"}
    world_size : int
        Ranks in the group.
    blocks : iterable of torch.nn.Module, optional
        With ``"fsdp"``: the submodules sharded on their own
        (:func:`fully_shard_blocks`); default: the whole module is one group.
    gathered : int, optional
        With ``blocks``: as :func:`fully_shard_blocks` (default: every block
        gathered for the whole step).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        On an unknown ``strategy``, a ``world_size`` below 1, or ``blocks``
        with ``"ddp"`` or holding something other than a submodule of ``model``.

    Examples
    --------
    >>> import torch
    >>> from remat_torch.distributed import comm_overhead_bytes
    >>> net = torch.nn.Linear(10, 10)  # 110 float32 parameters: 440 bytes
    >>> comm_overhead_bytes(net, "ddp", 2), comm_overhead_bytes(net, "fsdp", 2)
    (440, 880)
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"`strategy` must be one of {STRATEGIES}; got {strategy!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"`world_size` must be a positive integer; got {world_size!r}")
    nbytes = _param_bytes(model)
    if blocks is not None and strategy != "fsdp":
        raise ValueError(f"`blocks` applies to strategy 'fsdp' only; got strategy {strategy!r}")
    if gathered is not None and (blocks is None or isinstance(gathered, bool) or not isinstance(gathered, int)
                                 or gathered < 1):
        raise ValueError(f"`gathered` must be a positive integer, with `blocks`; got {gathered!r}")
    if strategy == "ddp":
        return nbytes
    shard = -(-nbytes // world_size)
    if world_size == 1:  # no all-gather: the shard is the parameters themselves
        return 2 * shard
    if blocks is None:
        return 2 * shard + nbytes
    blocks = list(blocks)
    inner = {id(m) for m in model.modules() if m is not model}
    for i, blk in enumerate(blocks):
        if not isinstance(blk, torch.nn.Module) or id(blk) not in inner:
            raise ValueError(f"`blocks[{i}]` must be a submodule of `model`; got {type(blk).__name__}")
    per_block = [_param_bytes(blk) for blk in blocks]
    root = nbytes - _param_bytes(torch.nn.ModuleList(blocks))
    overhead = 2 * shard + root + max(per_block, default=0)
    if gathered is not None:  # the blocks not gathered are counted by the plan, not held
        overhead -= sum(sorted(per_block)[:max(0, len(per_block) - gathered)])
    return overhead


def compiled_budget_bytes(model, budget: Any, strategy: str, world_size: int, resident_bytes: int,
                          blocks=None) -> int:
    """The budget in bytes for :func:`remat_torch.compiled.backend` that keeps a rank within ``budget``.

    The compiled backend's budget in bytes is what the step may add above
    the level before it. Before a step a rank holds ``resident_bytes``: its
    parameters (FSDP2: its shards), the optimizer state, the batch, DDP's
    gradient buckets. During the step it adds, besides the plan:

    ``"ddp"``
        Nothing after the first steps; DDP rebuilds its buckets once, in the
        second step, while the old ones live: the parameters' bytes.
    ``"fsdp"``
        The gathered parameters (their bytes) and FSDP2's buffers beyond the
        parameter shard (:func:`comm_overhead_bytes` less one shard).

    Parameters
    ----------
    model : torch.nn.Module
        The model before wrapping.
    budget : int or str
        Per-device bytes.
    strategy : {"ddp", "fsdp"}
    world_size : int
    resident_bytes : int
        What the rank holds before a step (on a GPU: ``torch.cuda.memory_allocated()``
        then).
    blocks : iterable of torch.nn.Module, optional
        As :func:`comm_overhead_bytes`.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        As :func:`comm_overhead_bytes`; a negative ``resident_bytes``; a
        ``budget`` that leaves nothing for the step.

    Examples
    --------
    >>> import torch
    >>> from remat_torch.distributed import compiled_budget_bytes
    >>> net = torch.nn.Linear(10, 10)  # 440 bytes of parameters
    >>> compiled_budget_bytes(net, 10_000, "fsdp", 2, resident_bytes=1_000)  # 10,000 - 1,000 - 440 - 660
    7900
    """
    from remat_core.units import _whole_bytes, format_bytes, parse_bytes

    if isinstance(resident_bytes, bool) or not isinstance(resident_bytes, int) or resident_bytes < 0:
        raise ValueError(f"`resident_bytes` must be a non-negative integer; got {resident_bytes!r}")
    total = parse_bytes(_whole_bytes(budget), "budget")
    overhead = comm_overhead_bytes(model, strategy, world_size, blocks=blocks)
    nbytes = _param_bytes(model)
    if strategy == "ddp":
        step = nbytes
    else:
        step = nbytes + overhead - (-(-nbytes // world_size))
    left = total - resident_bytes - step
    if left <= 0:
        raise ValueError(f"`budget` {format_bytes(total)} per device leaves nothing for the step: the rank holds "
                         f"{format_bytes(resident_bytes)} before it and {strategy} adds {format_bytes(step)}; give "
                         "a larger `budget`")
    return left


def _call_signature(args, kwargs) -> str:
    """What decides whether two ranks can share a plan: the call's structure, tensor shapes and dtypes."""
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten((args, kwargs))
    parts = [str(spec)]
    for x in leaves:
        if isinstance(x, torch.Tensor):
            parts.append(f"T{tuple(x.shape)}:{x.dtype}:{x.requires_grad}")
        else:
            parts.append(repr(x))
    return "|".join(parts)


def _plan_budget(model, budget: Any, strategy: str | None, world_size: int, blocks=None, gathered=None) -> Any:
    """The plan's budget for a per-device ``budget``: bytes less the wrapper's overhead; a fraction as is."""
    if strategy is None or budget is None:
        return budget
    from remat_core.units import _as_fraction, _whole_bytes, format_bytes, parse_bytes

    if _as_fraction(budget, "budget") is not None:
        return budget
    total = parse_bytes(_whole_bytes(budget), "budget")
    overhead = comm_overhead_bytes(model, strategy, world_size, blocks=blocks, gathered=gathered)
    if total <= overhead:
        raise ValueError(f"`budget` {format_bytes(total)} per device does not even hold what {strategy} keeps on "
                         f"each of {world_size} ranks ({format_bytes(overhead)}); give a larger `budget`")
    return total - overhead


def rematerialize_shared(model, example_inputs=(), budget: Any = None, *, example_kwargs: dict | None = None,
                         group=None, strategy: str | None = None, blocks=None, gathered: int | None = None,
                         **options):
    """:func:`remat_torch.rematerialize` on every rank, solving once per distinct input shape.

    Every rank of ``group`` calls it with its own example inputs. Ranks whose
    calls have the same structure, shapes and dtypes form one class; the
    lowest rank of each class traces and solves, and the schedule is sent to
    the others, which trace and reuse it (``rematerialize(..., plan=)``; the
    graph's fingerprint is checked, so a plan never runs on a graph it was
    not made for). Without an initialized process group it is
    :func:`~remat_torch.rematerialize`. The exchange uses
    ``torch.distributed.all_gather_object``: with NCCL, set each rank's
    device first (``torch.cuda.set_device(local_rank)``), as it requires.

    Parameters
    ----------
    model, example_inputs, budget, example_kwargs
        As :func:`remat_torch.rematerialize`.
    group : torch.distributed.ProcessGroup, optional
        Default: the world.
    strategy : {"ddp", "fsdp"}, optional
        The wrapper the module will be given to. With it, a budget in bytes
        (an ``int`` or a size string) is per-device bytes: the plan gets
        ``budget`` less :func:`comm_overhead_bytes` for this wrapper and the
        group's size. A fraction of activation memory is the plan's budget
        either way. Without it, a budget in bytes is the plan's.
    blocks : iterable of torch.nn.Module, optional
        With ``strategy="fsdp"``: the blocks that :func:`fully_shard_blocks`
        will shard on their own (the overhead is then per block).
    gathered : int, optional
        With ``blocks``: as :func:`fully_shard_blocks`.
    **options
        Passed to :func:`~remat_torch.rematerialize`.

    Returns
    -------
    RematModule
        With ``solves`` 1 on the ranks that solved, 0 on the others.

    Raises
    ------
    ValueError
        A ``budget`` in bytes at or below the wrapper's overhead, an unknown
        ``strategy``, or ``plan`` among the options.
    BudgetInfeasibleError
        As :func:`~remat_torch.rematerialize` (on the ranks that solve).

    Examples
    --------
    >>> import torch
    >>> from remat_torch.distributed import rematerialize_shared
    >>> net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    >>> x = torch.randn(256, 64)
    >>> rm = rematerialize_shared(net, x, budget=400_000, strategy="ddp", method="checkpoint-all")
    >>> rm.result.budget_bytes  # 400,000 per device less DDP's buckets (4,225 float32 parameters)
    383100
    """
    import torch.distributed as dist

    if "plan" in options:
        raise ValueError("`plan` cannot be combined with rematerialize_shared (it shares the plans it makes)")
    group_ok = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size(group) if group_ok else 1
    if blocks is not None:
        blocks = list(blocks)
    budget = _plan_budget(model, budget, strategy, world, blocks, gathered)
    if not group_ok:
        return rematerialize(model, example_inputs, budget, example_kwargs=example_kwargs, **options)
    rank = dist.get_rank(group)
    sig = _call_signature(example_inputs, example_kwargs or {})
    sigs: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(sigs, sig, group=group)
    leader = sigs.index(sig)
    plan_json = None
    rm = None
    if leader == rank:
        rm = rematerialize(model, example_inputs, budget, example_kwargs=example_kwargs, **options)
        fd, path = tempfile.mkstemp(suffix=".json", prefix="remat-plan-")
        os.close(fd)
        try:
            rm.save_plan(path)
            with open(path) as f:
                plan_json = f.read()
        finally:
            os.unlink(path)
    plans: list = [None] * len(sigs)
    dist.all_gather_object(plans, plan_json, group=group)
    if rm is not None:
        return rm
    fd, path = tempfile.mkstemp(suffix=".json", prefix="remat-plan-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(plans[leader])
        log.info("rank %d: using the plan solved on rank %d", rank, leader)
        return rematerialize(model, example_inputs, budget, example_kwargs=example_kwargs, plan=path, **options)
    finally:
        os.unlink(path)


def fully_shard_blocks(rm, blocks, *, gathered: int | None = None, **fsdp_kwargs):
    """FSDP2 ``fully_shard`` on each of ``blocks`` of a rematerialized module, then on the module itself.

    The supported order is *remat, then shard*: ``rm = rematerialize(model,
    example_inputs, ...)`` first (so the plan is traced on the full
    parameters), then ``fully_shard_blocks(rm, model.blocks)``, instead of
    ``fully_shard`` on each block and on ``rm``. Between steps each rank
    holds only its shards (parameters, gradients, and the optimizer state
    built on them). The plan runs the whole step as one graph and never
    calls a block's ``forward``, so FSDP2's per-block hooks cannot gather a
    block when it is reached; instead every block is gathered when the step
    starts (one all-gather per block, after the root's), and each block's
    gradients are reduce-scattered by FSDP2 once the plan's backward is done.
    Inside the step a rank therefore holds the full parameters, as with
    ``fully_shard`` on the whole module: :func:`comm_overhead_bytes` with
    ``blocks=`` counts what sharding adds on top.

    Parameters
    ----------
    rm : RematModule
        From :func:`remat_torch.rematerialize`, not sharded yet.
    blocks : iterable of torch.nn.Module
        Submodules of the rematerialized model (for a transformer: its
        layers), each sharded on its own.
    gathered : int, optional
        Default: every block is gathered when the step starts. With an
        integer ``k``, a block is gathered when the plan's first operator
        that reads one of its parameters runs (forward, recomputation or
        backward), and at most ``k`` blocks are gathered at a time: gathering
        another reshards the block used least recently. Every rank must run
        the same plan (:func:`rematerialize_shared` gives ranks with the same
        shapes the same one), since the gathers are collectives issued in
        the plan's order. The plan's operators then run through a Python
        dispatch mode (slower per operator).
    **fsdp_kwargs
        Passed to every ``fully_shard`` call (``mesh``, ``mp_policy``, ...).

    Returns
    -------
    RematModule
        ``rm``, now also an ``FSDPModule``.

    Raises
    ------
    TypeError
        If ``rm`` is not a :class:`~remat_torch.RematModule`.
    ValueError
        If ``rm`` is already sharded, ``blocks`` is empty or holds a module
        that is not a submodule of the rematerialized model, or ``gathered``
        is not a positive integer.

    Examples
    --------
    >>> import torch, torch.distributed as dist
    >>> from remat_torch import rematerialize
    >>> from remat_torch.distributed import fully_shard_blocks
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    >>> x = torch.randn(8, 16)
    >>> rm = fully_shard_blocks(rematerialize(net, x, budget=1.0, method="checkpoint-all"), [net[0], net[2]],
    ...                         gathered=1)
    >>> rm(x).sum().backward()
    >>> type(net[0].weight.grad).__name__  # the rank's shard of the reduced gradient
    'DTensor'
    >>> dist.destroy_process_group()
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard

    from .api import RematModule

    if not isinstance(rm, RematModule):
        raise TypeError("`rm` must be a RematModule (rematerialize the model first, then shard it); "
                        f"got {type(rm).__name__}")
    if isinstance(rm, FSDPModule):
        raise ValueError("`rm` is already sharded: call fully_shard_blocks on the RematModule instead of "
                         "fully_shard")
    blocks = list(blocks)
    if not blocks:
        raise ValueError("`blocks` must hold at least one submodule of the rematerialized model; got none")
    inner = {id(m) for m in rm.module.modules() if m is not rm.module}
    for i, blk in enumerate(blocks):
        if not isinstance(blk, torch.nn.Module) or id(blk) not in inner:
            raise ValueError(f"`blocks[{i}]` must be a submodule of the rematerialized model; got "
                             f"{type(blk).__name__}")
    if gathered is not None and (isinstance(gathered, bool) or not isinstance(gathered, int) or gathered < 1):
        raise ValueError(f"`gathered` must be a positive integer (blocks gathered at a time) or None; got "
                         f"{gathered!r}")
    for blk in blocks:
        if not isinstance(blk, FSDPModule):
            fully_shard(blk, **fsdp_kwargs)
    fully_shard(rm, **fsdp_kwargs)
    # registered after FSDP2's own pre-forward hook (which it prepends), so the root is set up first
    if gathered is None:
        gather = _BlockGather(blocks)
        rm.register_forward_pre_hook(gather.pre_forward, with_kwargs=True)
        rm.register_forward_hook(gather.post_forward, always_call=True)
    else:
        on_use = _GatherOnUse(blocks, gathered)
        rm.register_forward_pre_hook(on_use.pre_forward, with_kwargs=True)
        rm.register_forward_hook(on_use.post_forward, always_call=True)
        rm._block_gather = on_use  # its `gathers` counts the all-gathers issued
    return rm


def _mute_hooks(blocks) -> list:
    """Remove FSDP2's forward hooks of ``blocks`` (a plan traced for a new shape calls the blocks' forward, and
    their hooks would gather and reshard real parameters inside the trace); what ``_restore_hooks`` needs."""
    muted = []
    for blk in blocks:
        state = blk._get_fsdp_state()
        if len(state._modules) != 1:  # a group of modules sharded together: hooks we cannot re-create
            continue
        state._pre_forward_hook_handle.remove()
        state._post_forward_hook_handle.remove()
        muted.append((blk, state))
    return muted


def _restore_hooks(muted) -> None:
    for blk, state in muted:  # as FSDPState.init registers them
        state._pre_forward_hook_handle = blk.register_forward_pre_hook(state._pre_forward, prepend=True,
                                                                       with_kwargs=True)
        state._post_forward_hook_handle = blk.register_forward_hook(state._post_forward, prepend=False)


class _BlockGather:
    """Forward pre- and post-hook of a block-sharded RematModule: gather every block before the plan runs."""

    def __init__(self, blocks):
        self.blocks = blocks
        self.muted = []

    def pre_forward(self, module, args, kwargs):
        if module.training and torch.is_grad_enabled():  # otherwise the blocks' own forward runs, with its hooks
            for blk in self.blocks:
                blk.unshard()
            self.muted = _mute_hooks(self.blocks)
        return None

    def post_forward(self, module, args, output):
        muted, self.muted = self.muted, []
        _restore_hooks(muted)
        return None


class _GatherOnUse:
    """Gather a block when the plan's first operator that reads its parameters runs; at most ``limit`` at a time.

    During the plan's forward and backward a Python dispatch mode sees every
    operator; an argument whose storage is an unsharded parameter's (FSDP2
    frees it by resizing it to zero bytes and gathers into the same storage
    again, so the executor's references stay valid) makes its block current:
    gathered if it is not, the least recently used block resharded first if
    ``limit`` blocks are gathered. The plan's backward runs inside autograd,
    so the mode is entered and left by hooks on the plan's autograd node.
    """

    def __init__(self, blocks, limit: int):
        self.blocks = blocks
        self.limit = limit
        self.owner: dict = {}  # storage (its C pointer) of an unsharded parameter -> block index
        self.lru: list = []  # gathered blocks, least recently used first
        self.gathers = 0  # all-gathers issued (for tests and benchmarks)
        self._mode = None
        self.muted = []
        self.in_forward = False

    def _params(self, blk):
        return [fp for g in blk._get_fsdp_state()._fsdp_param_groups for fp in g.fsdp_params]

    def _index(self):
        self.owner.clear()
        for i, blk in enumerate(self.blocks):
            for fp in self._params(blk):
                self.owner[fp._unsharded_param.untyped_storage()._cdata] = i

    def use(self, i: int) -> None:
        if i in self.lru:
            if self.lru[-1] != i:
                self.lru.remove(i)
                self.lru.append(i)
            return
        while len(self.lru) >= self.limit:
            j = self.lru.pop(0)
            self.blocks[j].reshard()
            if self.in_forward:  # the module keeps its unsharded parameters until the plan has taken them
                for fp in self._params(self.blocks[j]):
                    fp._setattr_on_modules(fp._unsharded_param)
        self.blocks[i].unshard()
        self.gathers += 1
        self.lru.append(i)

    def _enter(self, *_):
        from torch.utils._python_dispatch import TorchDispatchMode

        owner, use = self.owner, self.use

        aliases = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)  # read no data

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                from torch.utils._pytree import tree_leaves

                for a in () if func in aliases else tree_leaves((args, kwargs or {})):
                    if isinstance(a, torch.Tensor):
                        i = owner.get(a.untyped_storage()._cdata)
                        if i is not None:
                            use(i)
                return func(*args, **(kwargs or {}))

        self._mode = _Mode()
        self._mode.__enter__()

    def _exit(self, *_):
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)

    def pre_forward(self, module, args, kwargs):
        if not (module.training and torch.is_grad_enabled()):
            for blk in self.blocks:  # the blocks' own forward runs, with FSDP2's hooks
                blk.unshard()
            return None
        if not self.owner:
            for blk in self.blocks:  # FSDP2 makes the unsharded parameters at the first gather
                blk.unshard()
                blk.reshard()
            self._index()
        for i in self.lru:  # left gathered by a forward without its backward
            self.blocks[i].reshard()
        self.lru = []
        # the plan takes the module's parameters: the unsharded ones, whose storage is gathered on first use
        for blk in self.blocks:
            for fp in self._params(blk):
                fp._setattr_on_modules(fp._unsharded_param)
        self.muted = _mute_hooks(self.blocks)
        self.in_forward = True
        self._enter()
        return None

    def _exit_backward(self, *_):
        self._exit()
        for i, blk in enumerate(self.blocks):  # the gathered ones get their sharded parameters back from FSDP2
            if i not in self.lru:
                for fp in self._params(blk):
                    fp._setattr_on_modules(fp.sharded_param)

    def post_forward(self, module, args, output):
        muted, self.muted = self.muted, []
        _restore_hooks(muted)
        self.in_forward = False
        if self._mode is None:
            return None
        self._exit()
        from torch.utils._pytree import tree_leaves

        nodes = {t.grad_fn for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.grad_fn is not None}
        for node in nodes:
            node.register_prehook(self._enter)
            node.register_hook(self._exit_backward)
        return None
