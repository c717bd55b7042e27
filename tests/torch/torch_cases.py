"""Shared fixtures for the PyTorch adapter tests: the four project models on small inputs."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
# One intra-op thread: under pytest-xdist on a 2-core machine, OpenMP oversubscription makes
# small ops hundreds of times slower (measured: 0.3 s vs 40 s for one recompute-heavy step).
torch.set_num_threads(1)

from remat_torch.models import ResNetSmall, SmallCNN, TransformerBlock, UNetSmall  # noqa: E402


def make_case(name):
    torch.manual_seed(0)
    if name == "cnn":
        return SmallCNN(), (torch.randn(2, 3, 32, 32),)
    if name == "resnet":
        return ResNetSmall(), (torch.randn(2, 3, 32, 32),)
    if name == "unet":
        return UNetSmall(), (torch.randn(2, 3, 32, 32),)
    if name == "transformer":
        return TransformerBlock(), (torch.randn(2, 16, 32),)
    raise KeyError(name)


MODELS = ["cnn", "resnet", "unet", "transformer"]


def eager_step(model, inputs, seed=1, loss=lambda y: (y * y).sum()):
    """Reference: plain autograd on a copy; returns (model copy, output)."""
    m = copy.deepcopy(model)
    torch.manual_seed(seed)
    out = m(*inputs)
    loss(out).backward()
    return m, out


def assert_same_state(m_remat, m_eager, rtol=1.3e-6, atol=1e-5):
    """Gradients and buffers (BatchNorm statistics) equal within float32 round-off."""
    for (name, p1), (_, p2) in zip(m_remat.named_parameters(), m_eager.named_parameters()):
        assert (p1.grad is None) == (p2.grad is None), name
        if p1.grad is not None:
            torch.testing.assert_close(p1.grad, p2.grad, rtol=rtol, atol=atol, msg=f"grad of {name}")
    for (name, b1), (_, b2) in zip(m_remat.named_buffers(), m_eager.named_buffers()):
        torch.testing.assert_close(b1, b2, rtol=rtol, atol=atol, msg=f"buffer {name}")


def keep_schedule(graph, n_forward, kind):
    """Schedules with recomputation, without needing a solver.

    ``"none"`` keeps nothing between stages (maximal recomputation);
    ``"half"`` keeps every other forward value and every backward value.
    """
    from remat_core import optimal_r_given_s

    n = graph.n
    S = np.zeros((n, n), bool)
    if kind == "half":
        for t in range(n):
            S[t, [i for i in range(min(t, n_forward)) if i % 2 == 0]] = True
            S[t, n_forward:t] = True
    return optimal_r_given_s(graph, S)


def holder_bytes(eg):
    """Bytes of the gradient holder nodes of an extracted graph (no ops: a gradient or a kept output sharing the
    storage of the node before it), which the memory model counts a second time while both are live."""
    return sum(int(eg.graph.memory_bytes[k]) for k, grp in enumerate(eg.groups) if not grp.ops and grp.outputs)


def executor_step_sq(ex, m, inputs):
    """One step of executor ``ex`` on module ``m`` with loss sum(y**2) (tangent 2*y); gradients into ``.grad``."""
    params = [p for _, p in m.named_parameters()]
    buffers = [b for _, b in m.named_buffers()]
    st = ex.begin(params, buffers, list(inputs))
    ex.run_forward(st)
    (out,) = ex.user_outputs(st)
    ex.apply_buffer_updates(m, st)
    ex.run_backward(st, [2 * out])
    for p, gr in zip(params, ex.primal_grads(st)):
        p.grad = gr
    return out
