"""Memory floors of the PyTorch adapter (issues 36 and 40), measured with the allocator.

* Never worse than doing nothing: the plan that recomputes nothing measures
  at most eager PyTorch's peak (model outputs the step does not keep, such as
  the ``logits`` beside a Hugging Face ``loss``, are not held all step, and no
  zero gradient is allocated for them).
* No floor above per-layer checkpointing: every tiny Hugging Face model is
  planned at the peak that Hugging Face's own gradient checkpointing
  measures, trains like eager there and stays within that budget.
* The outputs a plan leaves out of the backward pass still get their
  gradients when the caller's loss uses them, and outputs the caller keeps
  through backward are counted from the next step on.
"""

import copy
import logging
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from hf_cases import loss_step as _loss_step  # noqa: E402
from hf_cases import make, resident_bytes  # noqa: E402  (skips without torch / transformers)

import torch  # noqa: E402

from remat_torch import rematerialize  # noqa: E402
from remat_torch.meter import AllocatorMeter  # noqa: E402

torch.set_num_threads(1)


def _peak(module, batch, steps=2):
    """Allocator peak of the last of ``steps`` steps (the first ones make one-off allocations)."""
    for _ in range(steps):
        module.zero_grad(set_to_none=True)
        with AllocatorMeter() as meter:
            loss = _loss_step(module, batch)
        del loss
    return meter.peak_bytes


def _assert_same_grads(model, ref):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=f"gradient of {name}")


@pytest.mark.parametrize("granularity", ["op", "module"])
@pytest.mark.parametrize("name", ["qwen2", "gpt2", "bert", "vit", pytest.param("t5", marks=pytest.mark.slow)])
def test_no_recomputation_plan_measures_at_most_eager(name, granularity):
    model, batch = make(name)
    eager = _peak(copy.deepcopy(model), batch)
    # at op granularity every value is freed after its own last use, as autograd frees saved tensors; a
    # module-level node keeps its inputs to its last op and its outputs together (Qwen2 measured 8 KiB, 1.2%,
    # above eager there), so a plan above op level that recomputes nothing is made at op level
    # "module": granularity auto with a limit that sends the op-level graph to the large path (module level)
    kw = dict(granularity="auto", time_limit_s=0.01) if granularity == "module" else dict(granularity="op")
    rm = rematerialize(copy.deepcopy(model), example_kwargs=batch, budget=1.0, method="checkpoint-all",
                       cost_model="unit", **kw)
    assert rm.result.schedule.compute_counts().max() == 1
    if granularity == "module":
        assert rm.extracted.graph.meta["granularity_auto"]["op_path"] == "large"
    if granularity == "module" and name == "qwen2":
        assert rm.extracted.graph.meta["no_remat_from"]["predicted_peak_bytes"] > rm.predicted_peak_bytes
    assert 1 in rm.extracted.released_outputs  # the logits: not fixed memory, no tangent
    ours = _peak(rm, batch)
    # before the fix: +25% (the logits and a zero gradient for them held all step, and a copy of every
    # attention matrix made by dropout(p=0)); no allowance since the batch-norm fix of extract.py (session 4)
    assert ours <= eager, (ours, eager)
    res = resident_bytes(model, batch)
    assert abs(rm.predicted_peak_bytes - (res + ours)) <= 0.05 * (res + ours)


def _hf_checkpointing_peak(model, batch):
    hf = copy.deepcopy(model)
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return _peak(hf, batch)


def _planned_at_hf_checkpointing_peak(name):
    model, batch = make(name)
    budget = resident_bytes(model, batch) + _hf_checkpointing_peak(model, batch)
    ref = copy.deepcopy(model)
    rm = rematerialize(model, example_kwargs=batch, budget=budget, granularity="module", time_limit_s=5)
    assert rm.result.peak_memory_bytes <= budget
    measured = resident_bytes(model, batch) + _peak(rm, batch)
    assert measured <= budget + 1024, (measured, budget)  # the loss's scalar temporaries aside
    loss = _loss_step(rm, batch)
    loss_ref = _loss_step(ref, batch)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-6)
    _assert_same_grads(model, ref)
    assert rm.num_plans == 1  # the loss-only step never needed another plan


def test_gpt2_is_planned_at_hf_checkpointing_peak():
    _planned_at_hf_checkpointing_peak("gpt2")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "llama", "qwen2", "t5"])
def test_hf_model_is_planned_at_hf_checkpointing_peak(name):
    _planned_at_hf_checkpointing_peak(name)


class _LossAndLogits(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.drop = torch.nn.Dropout(0.3)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x, y):
        logits = self.b(self.drop(torch.relu(self.a(x))))
        return {"loss": torch.nn.functional.cross_entropy(logits, y), "logits": logits}


def test_a_loss_that_uses_the_logits_gets_their_gradient(caplog):
    torch.manual_seed(0)
    model = _LossAndLogits()
    ref = copy.deepcopy(model)
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    rm = rematerialize(model, (x, y), budget=1.0, cost_model="unit", granularity="module")
    assert rm.extracted.tangent_outputs == [0] and rm.extracted.untraced_outputs == [1]
    for step in range(3):
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        with caplog.at_level(logging.WARNING, logger="remat_torch"):
            for m in (rm, ref):
                torch.manual_seed(step)  # same dropout masks
                out = m(x, y)
                (out["loss"] + out["logits"].pow(2).mean()).backward()
        _assert_same_grads(model, ref)
        if step == 0:
            assert "did not expect" in caplog.text
        caplog.clear()
    assert rm.num_plans == 2 and rm.extracted.tangent_outputs == [0, 1]  # re-planned once, with the logits


def test_outputs_kept_through_backward_are_counted_from_the_next_step(caplog):
    model, batch = make("gpt2")
    rm = rematerialize(model, example_kwargs=batch, budget=1.0, method="checkpoint-all", granularity="module",
                       cost_model="unit")
    assert rm.extracted.released_outputs == [1]
    with caplog.at_level(logging.WARNING, logger="remat_torch"):
        out = rm(**batch)
        out.loss.backward()  # `out.logits` stays alive through backward
    assert "keeps model output(s) [1]" in caplog.text
    del out
    caplog.clear()
    res = resident_bytes(model, batch)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        with AllocatorMeter() as meter:
            out = rm(**batch)
            out.loss.backward()
        del out
    assert rm.num_plans == 2 and rm.extracted.released_outputs == [] and rm.extracted.untraced_outputs == [1]
    assert "keeps" not in caplog.text
    assert res + meter.peak_bytes <= rm.result.budget_bytes + 1024


def test_demo_transformer_without_recomputation_measures_at_most_eager():
    """The demo's transformer (dropout p=0: PyTorch's decomposition copies the input, eager does not)."""
    from remat_torch.models import TransformerLM

    torch.manual_seed(0)
    net = TransformerLM(vocab=64, dim=32, heads=2, n_layers=2, seq_len=32, p_drop=0.0)
    tokens = torch.randint(0, 64, (4, 32))

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x).pow(2).mean()

    model = WithLoss()

    def peak(m):
        for _ in range(2):
            m.zero_grad(set_to_none=True)
            with AllocatorMeter() as meter:
                m(tokens).backward()
        return meter.peak_bytes

    eager = peak(copy.deepcopy(model))
    rm = rematerialize(copy.deepcopy(model), tokens, budget=1.0, method="checkpoint-all", granularity="module",
                       cost_model="unit")
    assert peak(rm) <= eager


def test_conv_bn_relu_without_recomputation_measures_at_most_eager():
    """BatchNorm's output is read once (by the ReLU) but its statistics by the backward: a holder node
    takes the statistics so the output is freed as eager frees it (before: +31% on the demo's CNN)."""
    from remat_torch.models import _conv_bn

    torch.manual_seed(0)
    net = torch.nn.Sequential(_conv_bn(3, 16), _conv_bn(16, 16), torch.nn.MaxPool2d(2), _conv_bn(16, 32),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    x = torch.randn(8, 3, 16, 16)

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x).pow(2).mean()

    model = WithLoss()

    def peak(m):
        for _ in range(2):
            m.zero_grad(set_to_none=True)
            with AllocatorMeter() as meter:
                m(x).backward()
        return meter.peak_bytes

    eager = peak(copy.deepcopy(model))
    for granularity in ("op", "module"):
        rm = rematerialize(copy.deepcopy(model), x, budget=1.0, method="checkpoint-all", granularity=granularity,
                           cost_model="unit")
        assert any(g.name.endswith("<kept>") for g in rm.extracted.groups)
        ours = peak(rm)
        assert ours <= eager, (granularity, ours, eager)
