"""A ``dtr`` result that carries only the operation sequence it ran (no stage schedule) executes in PyTorch.

The transformer block at 0.6 of its activation memory: the stage run in the
graph's numbering fails, the stage run in a memory-aware order succeeds, so
``solve(method="dtr", order="auto")`` returns a sequence and no schedule.
``make_plan`` turns the sequence into statements, and the executor trains
with it: outputs, gradients, parameters and BatchNorm-free state equal plain
autograd after every step of an SGD-with-momentum loop (dropout masks
included), and the tracked peak equals the sequence's simulated peak.
"""

import copy
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))

from torch_cases import executor_step_sq, holder_bytes, make_case  # noqa: E402

from remat_core import make_plan, replay, solve  # noqa: E402
from remat_core.sequence import simulate_sequence  # noqa: E402
from remat_core.units import resolve_budget  # noqa: E402
from remat_torch import Executor, extract_graph, rematerialize  # noqa: E402
from remat_torch.meter import AllocatorMeter  # noqa: E402

STEPS = 3


def _sequence_only_case(granularity):
    model, inputs = make_case("transformer")
    eg = extract_graph(model, inputs, granularity=granularity)
    budget = resolve_budget(eg.graph, 0.6)
    res = solve(eg.graph, budget, method="dtr", order="auto", heuristic="h_dtr", find_min_budget=False)
    assert res.success and res.schedule is None and res.sequence is not None, res.stats.get("run_costs")
    return model, inputs, eg, res


def _train_beside(step, ours, ref, inputs, after_step=None):
    """``STEPS`` steps of SGD with momentum: ``step(i)`` runs ours (gradients into ``.grad``) and returns its
    output, ``ref`` plain autograd on ``inputs`` from the same RNG seed. Outputs and gradients, then parameters,
    are compared at every step; ``after_step(i)`` runs last."""
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for i in range(STEPS):
        torch.manual_seed(100 + i)
        out = step(i)
        torch.manual_seed(100 + i)
        ref_out = ref(*inputs)
        (ref_out * ref_out).sum().backward()
        torch.testing.assert_close(out, ref_out, rtol=1.3e-6, atol=1e-5)
        for (name, p1), (_, p2) in zip(ours.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p1.grad, p2.grad, rtol=1.3e-6, atol=1e-5, msg=f"step {i}: grad of {name}")
        opt_ours.step()
        opt_ref.step()
        opt_ours.zero_grad(set_to_none=True)
        opt_ref.zero_grad(set_to_none=True)
        for (name, p1), (_, p2) in zip(ours.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p1, p2, rtol=1e-5, atol=1e-6, msg=f"step {i}: parameter {name}")
        if after_step is not None:
            after_step(i)


@pytest.mark.parametrize("granularity", ["module", "op"])
@pytest.mark.parametrize("hoist", [False, True])
def test_a_sequence_only_dtr_result_trains_like_eager(granularity, hoist):
    model, inputs, eg, res = _sequence_only_case(granularity)
    g = eg.graph
    sim = simulate_sequence(g, res.sequence)
    plan = make_plan(g, res, hoist=hoist)
    assert plan.compute_counts().tolist() == sim.compute_counts.tolist()
    assert int(sim.compute_counts.sum()) > g.n   # it recomputes
    ex = Executor(eg, plan, measure=not hoist)   # unhoisted: interpreted, every storage tracked
    assert ex.predicted_peak_bytes == replay(g, plan).peak_memory_bytes <= sim.peak_memory_bytes <= res.budget_bytes
    held = holder_bytes(eg)

    def check_tracked(_):
        if not hoist:
            # the live storages the interpreter tracked: the sequence's own timeline, up to the bytes of the
            # holder nodes (no ops: a gradient or a kept output sharing the storage of the node before it),
            # which the memory model counts a second time while both are live
            assert sim.peak_memory_bytes - held <= ex.peak_bytes <= sim.peak_memory_bytes
            assert (ex.step_bytes <= sim.step_memory_bytes).all()
            assert (ex.step_bytes >= sim.step_memory_bytes - held).all()

    ours, ref = copy.deepcopy(model), copy.deepcopy(model)
    _train_beside(lambda i: executor_step_sq(ex, ours, inputs), ours, ref, inputs, after_step=check_tracked)


def test_a_sequence_only_plan_against_the_allocator():
    """The fast path's allocator peak beside the prediction (what the test prints is the measurement)."""
    model, inputs, eg, res = _sequence_only_case("module")
    plan = make_plan(eg.graph, res)
    ex = Executor(eg, plan)
    m = copy.deepcopy(model)
    resident = sum(t.untyped_storage().nbytes() for t in list(m.parameters()) + list(m.buffers()) + list(inputs))
    for _ in range(2):   # the first step makes one-off allocations
        for p in m.parameters():
            p.grad = None
        torch.manual_seed(0)
        with AllocatorMeter() as meter:
            executor_step_sq(ex, m, inputs)
    measured = meter.peak_bytes + resident
    print(f"measured {measured} B, predicted {ex.predicted_peak_bytes} B, budget {res.budget_bytes} B")
    assert measured <= 1.05 * ex.predicted_peak_bytes


def test_rematerialize_trains_with_a_sequence_only_dtr_result():
    model, inputs = make_case("transformer")
    ours, ref = copy.deepcopy(model), copy.deepcopy(model)
    rm = rematerialize(ours, inputs, budget=0.6, method="dtr", granularity="module", cost_model="unit",
                       solver_options={"order": "auto", "heuristic": "h_dtr", "find_min_budget": False})
    assert rm.result.schedule is None and rm.result.sequence is not None
    def step(_):
        out = rm(*inputs)
        (out * out).sum().backward()
        return out

    _train_beside(step, ours, ref, inputs)
    assert rm.predicted_peak_bytes <= rm.result.budget_bytes


def test_a_saved_sequence_only_plan_is_reused_without_solving(tmp_path):
    """``save_plan`` writes the sequence of a result that has no schedule; ``rematerialize(plan=...)`` in a fresh
    module re-simulates and runs it: the same plan statements, the same gradients."""
    model, inputs = make_case("transformer")
    opts = dict(budget=0.6, method="dtr", granularity="module", cost_model="unit",
                solver_options={"order": "auto", "heuristic": "h_dtr", "find_min_budget": False})
    rm = rematerialize(copy.deepcopy(model), inputs, **opts)
    assert rm.result.schedule is None
    torch.manual_seed(5)
    out = rm(*inputs)
    (out * out).sum().backward()
    path = tmp_path / "plan.json"
    rm.save_plan(path)
    again = rematerialize(copy.deepcopy(model), inputs, plan=path, **opts)
    assert again.result.method == "loaded" and again.result.sequence == rm.result.sequence
    assert again.predicted_peak_bytes == rm.predicted_peak_bytes
    torch.manual_seed(5)
    out2 = again(*inputs)
    (out2 * out2).sum().backward()
    torch.testing.assert_close(out2, out, rtol=0, atol=0)
    pairs = list(zip(again.named_parameters(), rm.named_parameters()))
    assert pairs and all(p1.grad is not None for (_, p1), _ in pairs)
    for (name, p1), (_, p2) in pairs:
        torch.testing.assert_close(p1.grad, p2.grad, rtol=0, atol=0, msg=name)
