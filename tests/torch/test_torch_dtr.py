"""The live DTR runtime: gradients equal to eager under a budget, with no plan."""

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import remat_torch  # noqa: E402
from remat_core.errors import BudgetInfeasibleError  # noqa: E402
from remat_torch.dtr import DTRTensor, activation_peak_bytes  # noqa: E402


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.3),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.Dropout(0.3),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * 12 * 12, 5))


class TreeNet(nn.Module):
    """A recursive network over a binary tree that the input decides (data-dependent control flow)."""

    def __init__(self, d=16):
        super().__init__()
        self.leaf, self.comb, self.out = nn.Linear(d, d), nn.Linear(2 * d, d), nn.Linear(d, 1)

    def encode(self, xs):
        if xs.shape[0] == 1:
            return torch.tanh(self.leaf(xs[0]))
        cut = int(xs[1:, 0].argmax()) + 1          # where the tree splits depends on the values
        return torch.tanh(self.comb(torch.cat([self.encode(xs[:cut]), self.encode(xs[cut:])])))

    def forward(self, xs):
        return self.out(self.encode(xs)).square().sum()


def eager_and_dtr(model, step, fraction, seed=0):
    """Gradients and buffers of one eager step and of one step under dtr at ``fraction`` of its activations."""
    ref, under, probe = model, copy.deepcopy(model), copy.deepcopy(model)
    torch.manual_seed(seed)
    step(ref).backward()
    torch.manual_seed(seed)
    peak = activation_peak_bytes(lambda: step(probe).backward())
    budget = int(fraction * peak)
    torch.manual_seed(seed)
    with remat_torch.dtr(budget=budget) as rt:
        step(under).backward()
    return ref, under, rt, budget


def assert_same_training_state(ref, under):
    for (name, p), q in zip(ref.named_parameters(), under.parameters()):
        assert type(q.grad) is torch.Tensor, name        # plain tensors once the block exits
        assert torch.equal(p.grad, q.grad), name          # bit for bit: the same kernels on the same inputs
    for (name, b), c in zip(ref.named_buffers(), under.buffers()):
        assert torch.equal(b, c), name                    # running statistics updated once


def test_cnn_with_batchnorm_and_dropout_matches_eager_under_half_its_activations():
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 12, 12), torch.randint(0, 5, (4,))
    step = lambda m: nn.functional.cross_entropy(m(x), y)   # noqa: E731
    ref, under, rt, budget = eager_and_dtr(small_cnn().train(), step, 0.5)
    assert rt.stats["evictions"] > 0 and rt.stats["rematerializations"] > 0   # it did recompute
    assert rt.stats["peak_bytes"] <= budget
    assert_same_training_state(ref, under)


def test_recursive_tree_network_matches_eager_under_its_activations():
    # at 0.7: lower budgets thrash on this small net (its parameter gradients are a large part of the
    # activation memory), which makes the test slow, not wrong
    torch.manual_seed(1)
    xs = torch.randn(32, 16)
    ref, under, rt, budget = eager_and_dtr(TreeNet(), lambda m: m(xs), 0.7)
    assert rt.stats["evictions"] > 0 and rt.stats["rematerializations"] > 0
    assert rt.stats["peak_bytes"] <= budget
    assert_same_training_state(ref, under)


def test_dropout_mask_is_replayed_not_redrawn():
    torch.manual_seed(2)
    blocks = [m for _ in range(6) for m in (nn.Linear(32, 32), nn.Dropout(0.5), nn.Tanh())]
    model = nn.Sequential(*blocks, nn.Linear(32, 1))
    x = torch.randn(128, 32)
    ref, under, rt, _ = eager_and_dtr(model, lambda m: m(x).sum(), 0.5, seed=5)
    assert rt.stats["rematerializations"] > 0
    assert_same_training_state(ref, under)


def test_tracking_only_never_evicts_and_outputs_stay_usable():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(4, 8)
    with remat_torch.dtr() as rt:
        out = model(x)
        loss = out.sum()
        loss.backward()
    assert rt.stats["evictions"] == 0 and rt.stats["peak_bytes"] > 0
    assert isinstance(out, DTRTensor)
    assert torch.allclose(out * 1, model(x))   # a returned tensor still computes after the block
    assert loss.item() == pytest.approx(model(x).sum().item())


def test_a_budget_below_one_operator_raises_with_the_bytes_needed():
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    with pytest.raises(BudgetInfeasibleError, match="too small: an operator needs") as info:
        with remat_torch.dtr(budget=256):
            model(torch.randn(32, 64)).sum().backward()
    assert info.value.min_budget_bytes > 256


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="`budget`"):
        with remat_torch.dtr(budget="lots"):
            pass
    with pytest.raises(TypeError, match="`budget`"):
        with remat_torch.dtr(budget=0.5):   # fractions need a baseline: activation_peak_bytes
            pass
    with pytest.raises(ValueError, match="`heuristic`"):
        with remat_torch.dtr(budget=1024, heuristic="belady"):
            pass


def test_thrashing_raises_instead_of_running_on():
    torch.manual_seed(1)
    xs = torch.randn(32, 16)
    model = TreeNet()
    full = activation_peak_bytes(lambda: model(xs).backward())
    with pytest.raises(BudgetInfeasibleError, match="thrashes"):
        with remat_torch.dtr(budget=int(0.6 * full), heuristic="h_dtr_local", max_replay_factor=2):
            model(xs).backward()


def test_the_default_heuristic_counts_evicted_ancestors_and_does_not_thrash_there():
    torch.manual_seed(1)
    xs = torch.randn(32, 16)
    model = TreeNet()
    full = activation_peak_bytes(lambda: model(xs).backward())
    with remat_torch.dtr(budget=int(0.6 * full), max_replay_factor=2) as rt:
        model(xs).backward()
    assert rt.heuristic == "h_dtr" and rt.stats["peak_bytes"] <= int(0.6 * full)


def test_output_sizes_are_sized_on_meta_once_per_signature(monkeypatch):
    import importlib

    live = importlib.import_module("remat_torch.dtr")   # the module (the package exports the function `dtr`)
    calls = []
    real = live._new_bytes_on_meta
    monkeypatch.setattr(live, "_new_bytes_on_meta", lambda *a: calls.append(a[0]) or real(*a))
    monkeypatch.setattr(live, "_NEW_BYTES_CACHE", {})
    lin = nn.Linear(32, 32)

    def step(batch):
        lin.zero_grad(set_to_none=True)
        with remat_torch.dtr(budget=10**9):
            lin(torch.randn(batch, 32)).square().sum().backward()

    step(8)
    first = len(calls)
    step(8)
    assert first > 0 and len(calls) == first            # the same shapes: every size from the cache
    step(16)
    assert len(calls) > first                           # new shapes are sized again
    a, b = torch.ones(4, 8), torch.ones(8, 8)
    assert live._new_bytes(torch.ops.aten.mm.default, (a, b), {}, torch.ops.aten.mm.default._schema) == 4 * 8 * 4
    assert live._new_bytes(torch.ops.aten.mm.default, (b, b), {}, torch.ops.aten.mm.default._schema) == 8 * 8 * 4
