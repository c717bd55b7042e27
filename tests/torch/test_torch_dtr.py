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


def test_cnn_with_batchnorm_and_dropout_matches_eager_under_its_activations():
    # 0.7: the parameters' gradients are never evicted (a large part of this small net's activation memory)
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 12, 12), torch.randint(0, 5, (4,))
    step = lambda m: nn.functional.cross_entropy(m(x), y)   # noqa: E731
    ref, under, rt, budget = eager_and_dtr(small_cnn().train(), step, 0.7)
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
    assert type(out) is torch.Tensor and out.grad_fn is not None   # plain, its history kept
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
        remat_torch.dtr(budget=[1])
    with pytest.raises(ValueError, match="`budget`"):
        remat_torch.dtr(budget=1.5)
    assert remat_torch.dtr(budget=1).fraction == 1.0 and remat_torch.dtr(budget="64MiB").fraction is None
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


# ---------------------------------------------------------------------------------------------------- issue 41
def deep_mlp(width=64, depth=8):
    torch.manual_seed(3)
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.Tanh())],
                         nn.Linear(width, 1))


def no_dtr_tensor_alive():
    import gc
    gc.collect()
    return not any(type(o) is DTRTensor for o in gc.get_objects() if type(o) is DTRTensor)


def test_an_exception_mid_forward_restores_plain_state_and_later_steps_work():
    model, ref = deep_mlp(), deep_mlp()
    x = torch.randn(256, 64)
    full = activation_peak_bytes(lambda: model(x).square().mean().backward())
    model.zero_grad(set_to_none=False)   # .grad are now plain zero tensors the block will accumulate into

    class Boom(Exception):
        pass

    def bad_forward():
        h = model[:6](x)
        raise Boom(h.shape)

    with pytest.raises(Boom):
        with remat_torch.dtr(budget=int(0.5 * full)):
            bad_forward()
    assert all(type(p.grad) is torch.Tensor for p in model.parameters())
    assert no_dtr_tensor_alive()
    # a plain step afterwards gives eager's gradients
    model(x).square().mean().backward()
    ref(x).square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad)


@pytest.mark.parametrize("where", ["hook", "budget"])
def test_an_exception_mid_backward_restores_plain_grads(where):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    ref = copy.deepcopy(model)
    x = torch.randn(512, 32)
    full = activation_peak_bytes(lambda: model(x).square().mean().backward())
    model.zero_grad(set_to_none=True)
    if where == "budget":   # the forward fits in 0.6 of the activations; tanh's backward does not
        with pytest.raises(BudgetInfeasibleError):
            with remat_torch.dtr(budget=int(0.6 * full)):
                loss = model(x).square().mean()
                loss.backward()
        assert type(loss) is torch.Tensor    # its graph (with wrappers saved in it) lives until it goes
        del loss
    else:
        def boom(g):
            raise KeyError("in backward")

        with pytest.raises(KeyError):
            with remat_torch.dtr(budget=int(0.8 * full)):
                h = model[:3](x)
                h.register_hook(boom)
                model[3:](h).square().mean().backward()
        # h is still saved in the aborted backward's graph (as in eager): it stays a wrapper, readable as usual
        assert torch.equal(h * 1, ref[:3](x))
        del h
    assert any(p.grad is not None for p in model.parameters())   # the failure came after some accumulation
    assert all(p.grad is None or type(p.grad) is torch.Tensor for p in model.parameters())
    assert no_dtr_tensor_alive()
    model.zero_grad(set_to_none=False)   # aten.zero_ on what the block left
    model(x).square().mean().backward()
    ref(x).square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad)


OPTIMIZERS = {
    "sgd": lambda ps, fe: torch.optim.SGD(ps, lr=0.05, foreach=fe),
    "momentum": lambda ps, fe: torch.optim.SGD(ps, lr=0.05, momentum=0.9, foreach=fe),
    "adam": lambda ps, fe: torch.optim.Adam(ps, lr=1e-3, foreach=fe),
    "adamw": lambda ps, fe: torch.optim.AdamW(ps, lr=1e-3, foreach=fe),
}


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_step_and_zero_grad_inside_and_after_the_block_train_as_eager(name, foreach):
    model, ref = deep_mlp(32, 6), deep_mlp(32, 6)
    opt, ref_opt = OPTIMIZERS[name](model.parameters(), foreach), OPTIMIZERS[name](ref.parameters(), foreach)
    x = torch.randn(128, 32)
    rt = remat_torch.dtr(budget=0.5)   # a fraction of eager's activations, measured on the first block
    for step in range(4):
        inside = step % 2 == 0
        with rt:
            loss = model(x).square().mean()
            loss.backward()
            if inside:
                opt.step()
                opt.zero_grad(set_to_none=False)
        if not inside:
            opt.step()
            opt.zero_grad(set_to_none=step == 3)
        ref_loss = ref(x).square().mean()
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=not inside and step == 3)
        assert type(loss) is torch.Tensor and loss.item() == ref_loss.item(), step
        if step > 0:   # the first block measured the baseline; later ones ran under half of it
            assert rt.budget_bytes == int(0.5 * rt.baseline_bytes) and rt.stats["peak_bytes"] <= rt.budget_bytes
            assert rt.stats["evictions"] > 0
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p, q)
    for s, r in zip(opt.state.values(), ref_opt.state.values()):
        for k in r:
            assert type(s[k]) is torch.Tensor and torch.equal(s[k], r[k]), k
    assert no_dtr_tensor_alive()


def test_returned_tensors_are_plain_and_the_block_lets_go_of_its_memory(tmp_path):
    model = deep_mlp()
    x = torch.randn(64, 64)
    with remat_torch.dtr(budget="256KiB") as rt:
        hidden = model[:4](x)
        detached = hidden.detach()
        loss = model[4:](hidden).square().mean()
        loss.backward()
        shape = torch.zeros(3, dtype=torch.long)
    for t in (hidden, detached, loss, shape):
        assert type(t) is torch.Tensor
    assert detached.numpy().shape == (64, 64) and shape.tolist() == [0, 0, 0]
    torch.save({"h": detached, "loss": loss.detach()}, tmp_path / "t.pt")
    back = torch.load(tmp_path / "t.pt")
    assert torch.equal(back["h"], model[:4](x).detach())
    assert hidden.grad_fn is not None and torch.equal(hidden, back["h"])
    assert no_dtr_tensor_alive()
    assert rt.resident == {} and rt.current == 0
    # values inside the block read the same way
    with remat_torch.dtr():
        y = model(x)
        assert y.tolist() == model(x).tolist() and y.detach().numpy().shape == (64, 1)


def test_in_place_writes_into_views_work_and_recompute_correctly(monkeypatch):
    import importlib

    live = importlib.import_module("remat_torch.dtr")
    replays = []
    real = live._ViewWriteReplay.__call__
    monkeypatch.setattr(live._ViewWriteReplay, "__call__", lambda self, *a, **k: replays.append(1) or real(self, *a, **k))
    torch.manual_seed(4)
    lin = nn.Linear(32, 32)
    ids = torch.randn(64, 32)

    def step(m):
        h = torch.tanh(m(ids))
        shifted = h.new_zeros(h.shape)
        shifted[..., 1:] = h[..., :-1].clone()   # HF T5's _shift_right: a write into a view
        shifted[:, 0] = 1.0                        # a second write into another view of the same tensor
        row = shifted[2]                           # a view taken before a write into its owner
        shifted.mul_(2.0)
        z = torch.tanh(m(shifted)) * row.sum()
        for _ in range(6):
            z = torch.tanh(m(z))
        return z.square().sum()

    ref = copy.deepcopy(lin)
    step(ref).backward()
    full = activation_peak_bytes(lambda: step(copy.deepcopy(lin)).backward())
    with remat_torch.dtr(budget=int(0.6 * full), heuristic="largest") as rt:   # no wall times: deterministic
        step(lin).backward()
    assert rt.stats["rematerializations"] > 0 and rt.stats["peak_bytes"] <= int(0.6 * full)
    assert replays   # a tensor written through a view was evicted and recomputed by replaying the write
    assert torch.equal(lin.weight.grad, ref.weight.grad) and torch.equal(lin.bias.grad, ref.bias.grad)


def test_twenty_repeated_runs_at_one_budget_all_succeed():
    # wall times smoothed per operator signature: one noisy measurement no longer tips the evictions into
    # thrashing (3 of 12 runs of the tree net thrashed at 0.5 with raw times; at 0.5 this one now thrashes
    # every time, at 0.6 it never does)
    torch.manual_seed(1)
    model, xs = TreeNet(), torch.randn(32, 16)
    ref = copy.deepcopy(model)
    ref(xs).backward()
    rt = remat_torch.dtr(budget=0.6, max_replay_factor=10)
    for run in range(21):
        model.zero_grad(set_to_none=True)
        with rt:
            model(xs).backward()
        if run:
            assert rt.stats["peak_bytes"] <= rt.budget_bytes and rt.stats["evictions"] > 0, run
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.equal(p.grad, q.grad), run


def test_h_dtr_choice_walked_by_local_score_equals_scoring_every_candidate(monkeypatch):
    # the eviction walks candidates by their local score (cost / (bytes * staleness), never above h_dtr's)
    # and stops once that reaches the best full score: it must pick what scoring all of them picks
    import importlib

    live = importlib.import_module("remat_torch.dtr")
    real = live.DTRRuntime._lowest_score
    rounds = []

    def checked(self, candidates):
        got = real(self, candidates)
        scores = [self._score(v) for v in candidates]
        assert got is candidates[scores.index(min(scores))]   # the first of the lowest, as a full scan gives
        rounds.append(len(candidates))
        return got

    monkeypatch.setattr(live.DTRRuntime, "_lowest_score", checked)
    torch.manual_seed(1)
    model, xs = TreeNet(), torch.randn(32, 16)
    full = activation_peak_bytes(lambda: model(xs).backward())
    model.zero_grad(set_to_none=True)
    with remat_torch.dtr(budget=int(0.6 * full), max_replay_factor=10) as rt:
        model(xs).backward()
    assert rt.stats["evictions"] > 0 and max(rounds) > 10   # many evictions among many candidates were checked


# ---------------------------------------------------------------------------------------------- issue 39 (FSDP2)
def _run_isolated(code):
    """Run ``code`` in a fresh interpreter (a replay reading freed memory would kill this one)."""
    import subprocess
    import sys

    env = dict(__import__("os").environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    return proc.returncode, proc.stdout + proc.stderr


FREED_STORAGE_CODE = """
import torch, remat_torch
torch.manual_seed(0)
w = torch.randn(64, 256, requires_grad=True)   # stands for a parameter FSDP2 gathered
x = torch.randn(512, 64)
ref = torch.tanh(x @ w)
expected = (ref * 2 + x @ w).sum().item()
with remat_torch.dtr(budget=3 * 512 * 256 * 4, heuristic="largest") as rt:
    a = x @ w
    b = torch.tanh(a)
    saved = w.detach().clone()
    w.untyped_storage().resize_(0)          # FSDP2's reshard: the storage freed, no operator, no version change
    c = b * 2                               # evicts a (the largest, first): its replay reads w
    w.untyped_storage().resize_(saved.numel() * 4)   # FSDP2 gathers again: new storage, then the copy
    with torch.no_grad():
        w.copy_(saved)
    got = (c + a).sum().item()
assert rt.stats["rematerializations"] > 0, rt.stats
assert got == expected, (got, expected)
print("ok", rt.stats["rematerializations"])
"""


def test_a_replay_reads_a_copy_of_a_storage_freed_under_it_not_freed_memory():
    # FSDP2 frees a gathered parameter's storage with untyped_storage().resize_(0) after its block; a replay
    # that read it afterwards read freed memory (a rank died with SIGSEGV in the suite, issue 39)
    rc, out = _run_isolated(FREED_STORAGE_CODE)
    assert rc == 0 and "ok" in out, out[-3000:]


FSDP_BLOCKS_CODE = """
import copy, torch, torch.distributed as dist, remat_torch
from torch import nn
from torch.distributed.fsdp import fully_shard
torch.set_num_threads(1)
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
replayed = []
live = __import__("importlib").import_module("remat_torch.dtr")
real = live.DTRRuntime._remat
live.DTRRuntime._remat = lambda self, v: replayed.append(str(v.func)) or real(self, v)
torch.manual_seed(0)
base = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(6)], nn.Linear(64, 1))
ref, ours = base, copy.deepcopy(base)
for m in (ref, ours):
    for block in list(m)[:-1]:
        fully_shard(block)                  # per block: each block's parameters are freed after its forward
    fully_shard(m)
x = torch.randn(128, 64)
rt = remat_torch.dtr(budget=0.8, heuristic="largest")
for step in range(5):
    for m in (ref, ours):
        m.zero_grad(set_to_none=True)
    ref(x).square().mean().backward()
    if step == 0:   # FSDP2 makes its gathered parameters in its first step: not inside the block (a known limit)
        ours(x).square().mean().backward()
    else:           # the first block measures the baseline of the fraction, the later ones evict
        with rt:
            ours(x).square().mean().backward()
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(p.grad.full_tensor(), q.grad.full_tensor()), step
# (no bound on the peak here: on one rank FSDP2 copies the gradients where two reduce-scatter them, so they stay
# evictable, and the evicted ones are brought back at the block's end past the budget, counted in peak_bytes)
assert rt.stats["rematerializations"] > 0, rt.stats
assert not [f for f in replayed if "c10d" in f], replayed     # no collective ever runs again
dist.destroy_process_group()
print("ok", rt.stats["rematerializations"])
"""


def test_fully_shard_per_block_under_the_live_runtime_gives_eager_gradients():
    # one gloo rank: FSDP2 still gathers into storages it frees after each block; before issue 39's fix the
    # replays of forward values in backward read those freed storages (RuntimeError "setStorage ... storage of
    # size 0" here; a kernel reading the tensor directly would segfault)
    pytest.importorskip("torch.distributed.fsdp")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    rc, out = _run_isolated(FSDP_BLOCKS_CODE)
    assert rc == 0 and "ok" in out, out[-3000:]


def test_a_collective_is_never_replayed_and_its_output_keeps_what_it_received():
    # c10d's schemas mark no argument as written: the runtime took an all-gather's output buffer for the zeros
    # it was made as, and the tensor the collective returns for a new value whose recipe is the collective
    import importlib

    dist = torch.distributed
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    live = importlib.import_module("remat_torch.dtr")
    replayed = []
    real = live.DTRRuntime._remat
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        live.DTRRuntime._remat = lambda self, v: replayed.append(str(v.func)) or real(self, v)
        x = torch.randn(256, 64)
        with remat_torch.dtr(budget=4 * 256 * 64 * 4, heuristic="largest") as rt:
            out = torch.zeros(256, 64)
            dist.all_gather_into_tensor(out, x * 2)
            y = torch.tanh(out)
            z = [y * k for k in (2, 3, 4)]   # room made by evicting the largest: never the gathered buffer
            total = (out.sum() + sum(t.sum() for t in z)).item()
    finally:
        live.DTRRuntime._remat = real
        dist.destroy_process_group()
    ref = x * 2
    expected = (ref.sum() + sum((torch.tanh(ref) * k).sum() for k in (2, 3, 4))).item()
    assert rt.stats["evictions"] > 0
    assert total == expected
    assert not [f for f in replayed if "c10d" in f]


def test_an_operators_cost_is_the_smallest_time_measured_for_its_signature(monkeypatch):
    # load only adds time: the smallest measurement is the operator's own cost, and it stops moving once met,
    # so the same budget gives the same evictions (a running mean let the tree net at 0.3 replay from 697 to
    # 20,841 operators over 8 runs of one budget)
    import importlib

    live = importlib.import_module("remat_torch.dtr")
    monkeypatch.setattr(live, "_COST_TABLE", {})
    key = ("op", (3, 4))
    seen = [live._smoothed_cost(key, t)[1] for t in (5e-3, 1e-3, 9e-3, 2e-3)]
    assert seen == [5e-3, 1e-3, 1e-3, 1e-3]
    assert live._smoothed_cost(None, 4e-3) == [1, 4e-3]          # no signature: that call's own time
    assert live._smoothed_cost(("other",), 0.0)[1] > 0           # never zero (a score divides by it)
