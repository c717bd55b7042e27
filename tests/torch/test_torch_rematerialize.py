"""rematerialize(): a module that trains with a plan from any method; normal loops; edge cases."""

import copy
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))

from torch_cases import MODELS, assert_same_state, eager_step, make_case  # noqa: E402

import remat_core  # noqa: E402
from remat_core import checkpoint_all_peak_bytes, simulate  # noqa: E402
from remat_torch import BudgetInfeasibleError, RematModule, rematerialize, train_step  # noqa: E402

# chen-sqrtn proper only takes chain graphs; on DAGs it is linearized-sqrtn / ap-sqrtn (Checkmate section 5)
METHODS = ["checkpoint-all", "linearized-sqrtn", "ap-sqrtn", "ilp", "lp-rounding"]


def _tight_budgets(graph):
    """Budgets between the lower bound and the checkpoint-all peak, tightest first."""
    lo = graph.min_budget_lower_bound_bytes()
    hi = checkpoint_all_peak_bytes(graph)
    return [int(lo + f * (hi - lo)) for f in (0.5, 0.7, 0.85)] + [hi]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", MODELS)
def test_methods_give_eager_gradients_within_budget(name, method):
    if method not in remat_core.available_methods():
        pytest.skip(f"method {method!r} is not registered in remat_core yet")
    model, inputs = make_case(name)
    ref, ref_out = eager_step(model, inputs)
    m = copy.deepcopy(model)
    top = [n for n, _ in m.named_children()]
    # block granularity keeps the MILP small; checkpoint-all and chen run at module granularity
    kw = dict(granularity="block", blocks=top) if method in ("ilp", "lp-rounding") else dict(granularity="module")
    probe = rematerialize(m, inputs, budget=1.0, method="checkpoint-all", cost_model="flops", **kw)
    g = probe.extracted.graph
    budgets = [checkpoint_all_peak_bytes(g)] if method == "checkpoint-all" else _tight_budgets(g)
    rm = None
    for b in budgets:
        try:
            opts = {"time_limit_s": 20} if method == "ilp" else {}
            rm = rematerialize(m, inputs, budget=b, method=method, cost_model="flops", hoist=False,
                               measure=True, solver_options=opts, **kw)
            break
        except BudgetInfeasibleError:
            continue
        except TypeError:  # the method takes no time limit
            rm = rematerialize(m, inputs, budget=b, method=method, cost_model="flops", hoist=False,
                               measure=True, **kw)
            break
    assert rm is not None, f"{method} found no plan even at the checkpoint-all peak"
    torch.manual_seed(1)
    out = rm(*inputs)
    (out * out).sum().backward()
    torch.testing.assert_close(out, ref_out, rtol=1.3e-6, atol=1e-5)
    assert_same_state(m, ref)
    sim = simulate(rm.extracted.graph, rm.result.schedule)
    # tracked storages equal the simulator's bytes, up to gradients that holder nodes count a second time
    held = sum(int(rm.extracted.graph.memory_bytes[k]) for k, grp in enumerate(rm.extracted.groups)
               if not grp.ops and grp.outputs)
    assert sim.peak_memory_bytes - held <= rm.last_peak_bytes <= sim.peak_memory_bytes == rm.predicted_peak_bytes
    assert rm.last_peak_bytes <= rm.result.budget_bytes
    assert (rm.executor.compute_counts == rm.result.schedule.compute_counts()).all()


def test_training_loop_matches_eager_over_steps():
    model, inputs = make_case("resnet")
    ref = copy.deepcopy(model)
    m = copy.deepcopy(model)
    rm = rematerialize(m, inputs, budget=1.0, cost_model="unit")
    assert isinstance(rm, RematModule)
    opt = torch.optim.SGD(rm.parameters(), lr=0.05, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    target = torch.randint(0, 10, (2,))
    for _ in range(3):
        loss = train_step(rm, inputs, lambda y: torch.nn.functional.cross_entropy(y, target), opt)
        opt_ref.zero_grad(set_to_none=True)
        loss_ref = torch.nn.functional.cross_entropy(ref(*inputs), target)
        loss_ref.backward()
        opt_ref.step()
        torch.testing.assert_close(loss, loss_ref.detach(), rtol=1e-5, atol=1e-6)
    for p1, p2 in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p1, p2, rtol=1e-5, atol=1e-6)
    for b1, b2 in zip(m.buffers(), ref.buffers()):
        torch.testing.assert_close(b1, b2, rtol=1e-5, atol=1e-6)


def test_bf16_autocast_grads_close_to_eager_autocast():
    model, inputs = make_case("cnn")
    m, ref = copy.deepcopy(model), copy.deepcopy(model)
    rm = rematerialize(m, inputs, budget=1.0, autocast_dtype=torch.bfloat16, cost_model="unit")
    assert any("_to_copy" in o for grp in rm.extracted.groups for o in grp.ops)  # casts are ops
    for mod, seed in ((rm, 1), (ref, 1)):
        torch.manual_seed(seed)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = mod(*inputs)
        assert out.dtype == torch.bfloat16
        out.float().pow(2).sum().backward()
    for p1, p2 in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p1.grad, p2.grad, rtol=5e-2, atol=5e-2)
    # called without autocast: a plan of its own, traced as eager runs that call (float32)
    for mod in (rm, ref):
        torch.manual_seed(2)
        out = mod(*inputs)
        assert out.dtype == torch.float32
        mod.zero_grad(set_to_none=True)
        out.pow(2).sum().backward()
    assert rm.num_plans == 2
    for p1, p2 in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p1.grad, p2.grad)


def test_multiple_inputs_and_outputs_and_input_grads():
    class Multi(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(3, 4)

        def forward(self, x, z):
            a, b = self.a(x), self.b(z)
            return {"sum": a + b, "prod": torch.tanh(a) * b, "argmax": a.argmax(-1)}

    torch.manual_seed(0)
    model = Multi()
    x = torch.randn(2, 4, requires_grad=True)
    z = torch.randn(2, 3)
    m, ref = copy.deepcopy(model), copy.deepcopy(model)
    rm = rematerialize(m, (x, z), cost_model="unit", granularity="op")
    x1, x2 = (x.detach().clone().requires_grad_() for _ in range(2))
    o = rm(x1, z)
    r = ref(x2, z)
    (o["sum"].sum() + o["prod"].pow(2).sum()).backward()
    (r["sum"].sum() + r["prod"].pow(2).sum()).backward()
    assert torch.equal(o["argmax"], r["argmax"]) and not o["argmax"].requires_grad
    torch.testing.assert_close(x1.grad, x2.grad)
    assert_same_state(m, ref)


def test_eval_mode_and_no_grad_run_the_plain_module():
    model, inputs = make_case("cnn")
    rm = rematerialize(copy.deepcopy(model), inputs, cost_model="unit")
    rm.eval()
    model.eval()
    torch.testing.assert_close(rm(*inputs), model(*inputs))
    rm.train()
    with torch.no_grad():
        assert rm(*inputs).shape == (2, 10)


def test_errors():
    model, inputs = make_case("cnn")
    with pytest.raises(BudgetInfeasibleError, match="no plan"):
        rematerialize(copy.deepcopy(model), inputs, budget=1000, method="checkpoint-all", cost_model="unit")
    with pytest.raises(ValueError, match="`budget`"):
        rematerialize(copy.deepcopy(model), inputs, budget=1.5)
    with pytest.raises(ValueError, match="`budget`"):
        rematerialize(copy.deepcopy(model), inputs, budget="lots")
    with pytest.raises(TypeError, match="`budget`"):
        rematerialize(copy.deepcopy(model), inputs, budget=[1])
    with pytest.raises(remat_core.UnknownMethodError):
        rematerialize(copy.deepcopy(model), inputs, method="magic", cost_model="unit")


def test_budget_fraction_is_of_checkpoint_all_peak():
    model, inputs = make_case("transformer")
    rm = rematerialize(copy.deepcopy(model), inputs, budget=1.0, cost_model="unit")
    assert rm.result.budget_bytes == checkpoint_all_peak_bytes(rm.extracted.graph)


def test_chain_only_method_on_a_dag_is_a_clear_error():
    if "chen-sqrtn" not in remat_core.available_methods():
        pytest.skip("chen-sqrtn is not registered")
    model, inputs = make_case("resnet")
    with pytest.raises(remat_core.GraphValidationError, match="linearized-sqrtn"):
        rematerialize(model, inputs, budget=0.8, method="chen-sqrtn", cost_model="unit")


def _grads(model):
    return {n: (None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}


def test_requires_grad_changes_after_planning_get_a_plan_of_their_own():
    """Freezing, unfreezing and input ``requires_grad`` are part of a plan's key (issue 36): a parameter
    frozen at planning time and unfrozen later gets eager's gradient, never a silent ``None``."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref = copy.deepcopy(net)
    x = torch.randn(3, 4)
    net[0].weight.requires_grad_(False)
    rm = rematerialize(net, x, budget=1.0, method="checkpoint-all", cost_model="unit", granularity="module")

    def both(x_needs_grad=False):
        for p_r, p in zip(ref.parameters(), net.parameters()):
            p_r.requires_grad_(p.requires_grad)
            p.grad = p_r.grad = None
        xs = [x.clone().requires_grad_(x_needs_grad) for _ in range(2)]
        rm(xs[0]).pow(2).sum().backward()
        ref(xs[1]).pow(2).sum().backward()
        got, want = _grads(net), _grads(ref)
        assert {k for k, g in got.items() if g is None} == {k for k, g in want.items() if g is None}
        for k, g in want.items():
            if g is not None:
                torch.testing.assert_close(got[k], g)
        if x_needs_grad:
            torch.testing.assert_close(xs[0].grad, xs[1].grad)
        else:
            assert xs[0].grad is None

    both()
    assert net[0].weight.grad is None
    net[0].weight.requires_grad_(True)  # unfrozen after planning
    both()
    assert net[0].weight.grad is not None and rm.num_plans == 2
    net[2].requires_grad_(False)  # the other way round
    both()
    assert net[2].weight.grad is None and rm.num_plans == 3
    both(x_needs_grad=True)  # an input that needs a gradient
    assert rm.num_plans == 4
    net[2].requires_grad_(True)
    both()  # back to a flag set seen before: its plan is reused
    assert rm.num_plans == 4


def test_wrong_input_width_names_the_input_and_the_expected_shape(caplog):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    rm = rematerialize(net, torch.randn(3, 4), budget=1.0, cost_model="unit", granularity="module")
    with pytest.raises(ValueError, match=r"input 0 has shape \(3, 5\), the model expects \(3, 4\)") as info:
        rm(torch.randn(3, 5))
    assert isinstance(info.value, remat_core.RematError)
    assert "fake_tensor" not in caplog.text  # no traceback logged by the fake-tensor mode


def test_state_dict_keys_load_into_the_original_model():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    keys = list(net.state_dict())
    rm = rematerialize(net, torch.randn(3, 4), budget=1.0, cost_model="unit", granularity="module")
    sd = rm.state_dict()
    assert list(sd) == keys
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    fresh.load_state_dict(sd)  # strict: the keys match
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), sd.values()))
    torch.nn.init.zeros_(fresh[0].weight)
    rm.load_state_dict(fresh.state_dict())
    assert torch.equal(net[0].weight, torch.zeros(8, 4))
    outer = torch.nn.Sequential(rm)  # nested: the prefix of the parent only
    assert list(outer.state_dict()) == [f"0.{k}" for k in keys]
    outer.load_state_dict(outer.state_dict())


def test_pickle_and_torch_save_keep_the_plans_schedules(tmp_path):
    import pickle

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(64, 4)
    rm = rematerialize(net, x, budget=0.99, cost_model="unit", granularity="module")
    rm(x).sum().backward()
    want = [p.grad.clone() for p in net.parameters()]
    path = tmp_path / "rm.pt"
    torch.save(rm, path)
    for copy_ in (pickle.loads(pickle.dumps(rm)), torch.load(path, weights_only=False)):
        copy_.zero_grad(set_to_none=True)
        copy_(x).sum().backward()
        assert copy_.result.method == "loaded"  # traced again, its schedule reused without solving
        assert (copy_.result.schedule.to_dict() == rm.result.schedule.to_dict())
        for p, g in zip(copy_.module.parameters(), want):
            torch.testing.assert_close(p.grad, g)


def test_a_smaller_last_batch_without_a_plan_at_the_fraction_is_planned_with_a_warning(caplog):
    """0.99 of activation memory has a plan for a batch of 64 but none for 8 (the gradients, which no plan
    frees, weigh more): the last batch is planned at its smallest feasible budget, not an error mid-epoch."""
    import logging

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 4))
    ref = copy.deepcopy(net)
    with pytest.raises(BudgetInfeasibleError):  # the first call still says so
        rematerialize(copy.deepcopy(net), torch.randn(8, 32), budget=0.99, cost_model="unit", granularity="module")
    rm = rematerialize(net, torch.randn(64, 32), budget=0.99, cost_model="unit", granularity="module")
    x = torch.randn(8, 32)
    with caplog.at_level(logging.WARNING, logger="remat_torch"):
        rm(x).pow(2).sum().backward()
    assert "instead of failing" in caplog.text and rm.num_plans == 2
    assert rm.result.budget_bytes > remat_core.units.resolve_budget(rm.extracted.graph, 0.99)
    ref(x).pow(2).sum().backward()
    assert_same_state(net, ref)
