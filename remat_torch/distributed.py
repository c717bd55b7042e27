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

__all__ = ["rematerialize_shared", "comm_overhead_bytes", "STRATEGIES"]

log = logging.getLogger(__name__)

#: The data-parallel wrappers :func:`comm_overhead_bytes` knows.
STRATEGIES = ("ddp", "fsdp")


def _param_bytes(model) -> int:
    seen = {}
    for p in model.parameters():
        if p.requires_grad:
            seen[id(p)] = p.numel() * p.element_size()
    return sum(seen.values())


def comm_overhead_bytes(model, strategy: str, world_size: int) -> int:
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

    Returns
    -------
    int

    Raises
    ------
    ValueError
        On an unknown ``strategy`` or a ``world_size`` below 1.

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
    if strategy == "ddp":
        return nbytes
    shard = -(-nbytes // world_size)
    return 2 * shard + (nbytes if world_size > 1 else 0)


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


def _plan_budget(model, budget: Any, strategy: str | None, world_size: int) -> Any:
    """The plan's budget for a per-device ``budget``: bytes less the wrapper's overhead; a fraction as is."""
    if strategy is None or budget is None:
        return budget
    from remat_core.units import _as_fraction, _whole_bytes, format_bytes, parse_bytes

    if _as_fraction(budget, "budget") is not None:
        return budget
    total = parse_bytes(_whole_bytes(budget), "budget")
    overhead = comm_overhead_bytes(model, strategy, world_size)
    if total <= overhead:
        raise ValueError(f"`budget` {format_bytes(total)} per device does not even hold what {strategy} keeps on "
                         f"each of {world_size} ranks ({format_bytes(overhead)}); give a larger `budget`")
    return total - overhead


def rematerialize_shared(model, example_inputs=(), budget: Any = None, *, example_kwargs: dict | None = None,
                         group=None, strategy: str | None = None, **options):
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
    budget = _plan_budget(model, budget, strategy, world)
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
