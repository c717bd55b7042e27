"""Budget fractions on PyTorch graphs are of activation memory, parameter gradients left out."""

import torch

from remat_core import checkpoint_all_peak_bytes
from remat_core.units import activation_bytes, resolve_budget
from remat_torch import extract_graph


def test_gradients_are_not_activation_memory():
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())])
    g = extract_graph(net, torch.randn(4, 128), granularity="op", cost_model="unit").graph
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    names = set(g.meta["gradient_nodes"])
    grad_bytes = sum(int(g.memory_bytes[g.index(n)]) for n in names)
    assert grad_bytes == weights   # one gradient per parameter, nothing else in those nodes
    peak = checkpoint_all_peak_bytes(g)
    act = activation_bytes(g)
    # parameter-heavy at batch 4: gradients dominate what checkpoint-all holds beyond the fixed bytes
    assert 0 < act < peak - g.fixed_bytes - weights // 2
    assert resolve_budget(g, 1.0) == peak and resolve_budget(g, 0.0) == peak - act


def test_gradient_nodes_hold_only_gradients_beside_fused_backward_ops():
    """LayerNorm's backward returns the input's gradient with the weight's: only the holder node that takes
    the parameter gradients is a gradient node, at op and at module granularity."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                              torch.nn.LayerNorm(64), torch.nn.Linear(64, 4))
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    for granularity in ("op", "module"):
        g = extract_graph(net, torch.randn(8, 32), granularity=granularity, cost_model="unit").graph
        names = g.meta["gradient_nodes"]
        assert sum(int(g.memory_bytes[g.index(n)]) for n in names) == weights, granularity
        assert not any(n.endswith("native_layer_norm_backward") for n in names)
