"""Hugging Face Accelerate drives a rematerialized model unchanged (one process, CPU).

``Accelerator.prepare`` of the model, optimizer and data loader, then three
steps of ``accelerator.backward`` and ``optimizer.step``: the same losses and
parameters as the plain model prepared the same way. The two-rank run (where
``prepare`` wraps the model in DDP) is in ``test_distributed.py``.
"""

import copy
import os
import sys

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")
sys.path.insert(0, os.path.dirname(__file__))

from dist_worker import TinyLM  # noqa: E402

from remat_torch import rematerialize  # noqa: E402

STEPS = 3


@pytest.fixture
def accelerator():
    from accelerate.state import AcceleratorState, GradientState, PartialState

    acc = accelerate.Accelerator(cpu=True)
    yield acc
    AcceleratorState._reset_state(reset_partial_state=True)  # a process-wide singleton: leave none behind
    GradientState._reset_state()
    PartialState._reset_state()


def _data(n=12, seq=32, vocab=64):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (n, seq), generator=g)
    return torch.utils.data.TensorDataset(ids, ids.roll(-1, dims=1))


def _train(acc, model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(_data(), batch_size=4, shuffle=False)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses = []
    for ids, labels in loader:
        opt.zero_grad()
        loss = model(ids, labels)
        acc.backward(loss)
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_accelerate_prepare_and_three_steps_match_the_plain_model(accelerator):
    torch.manual_seed(0)
    model = TinyLM()
    ref = copy.deepcopy(model)
    ids, labels = _data()[:4]
    rm = rematerialize(model, (ids, labels), budget=0.5, granularity="module", cost_model="flops",
                       time_limit_s=5)
    assert rm.result.schedule.compute_counts().max() > 1  # something is recomputed
    losses = _train(accelerator, rm)
    losses_ref = _train(accelerator, ref)
    assert len(losses) == STEPS
    assert losses == pytest.approx(losses_ref, rel=1e-6)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert rm.solves == 1  # the three steps reused the first plan
