"""A plan is never run stale: every call is checked against what the plan was specialized on (issue 25).

Python attributes that forward branches on, submodule training flags, input
``requires_grad``, dtypes, shapes and the values tracing read from tensors
each get their own plan or a clear error; outputs that hold ``None`` or a view
of another output; ``rematerialize`` under ``no_grad``; the torch version check.
"""

import copy

import pytest

torch = pytest.importorskip("torch")

import remat_core  # noqa: E402
import remat_torch  # noqa: E402
from remat_torch import UnsupportedModelError, rematerialize  # noqa: E402

torch.set_num_threads(1)
KW = dict(budget=1.0, method="checkpoint-all", granularity="op", cost_model="unit")


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)
        self.double = False

    def forward(self, x):
        y = torch.tanh(self.a(x))
        if self.double:
            y = y * 2 + 1
        return self.b(self.drop(y))


def _grads(m):
    return [p.grad.clone() for p in m.parameters()]


def _step(m, *args, seed=0, **kwargs):
    m.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = m(*args, **kwargs)
    out.pow(2).sum().backward()
    return out.detach()


def test_a_python_attribute_that_forward_reads_gets_its_own_plan():
    torch.manual_seed(0)
    model, x = Branchy(), torch.randn(4, 8)
    ref = copy.deepcopy(model)
    rm = rematerialize(model, x, **KW)
    for flag in (True, False, True):
        model.double = ref.double = flag
        torch.testing.assert_close(_step(rm, x), _step(ref, x))
        for g, h in zip(_grads(model), _grads(ref)):
            torch.testing.assert_close(g, h)
    assert rm.num_plans == 2 and rm.solves == 2  # one per value, reused when the value comes back


def test_a_submodule_in_eval_mode_gets_its_own_plan():
    torch.manual_seed(0)
    model, x = Branchy(), torch.randn(4, 8)
    ref = copy.deepcopy(model)
    rm = rematerialize(model, x, **KW)
    model.drop.eval()
    ref.drop.eval()
    torch.testing.assert_close(_step(rm, x), _step(ref, x))  # no dropout now, as in eager
    assert rm.num_plans == 2


def test_an_input_that_starts_requiring_grad_gets_its_gradient():
    torch.manual_seed(0)
    model, x = Branchy(), torch.randn(4, 8)
    ref = copy.deepcopy(model)
    rm = rematerialize(model, x, **KW)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    _step(rm, x1)
    _step(ref, x2)
    assert x1.grad is not None
    torch.testing.assert_close(x1.grad, x2.grad)


def test_a_float16_input_to_a_float32_model_is_refused_at_the_call():
    torch.manual_seed(0)
    model, x = Branchy(), torch.randn(4, 8)
    rm = rematerialize(model, x, **KW)
    with pytest.raises(remat_core.RematError, match="tensor input 0 is torch.float16 but the model's parameters"):
        rm(x.half())  # refused at the call, before a plan is made for it (eager fails in the step)
    _step(rm, x)  # the float32 plan still runs


def test_new_shapes_are_planned_and_the_cache_is_bounded():
    torch.manual_seed(0)
    model = Branchy()
    ref = copy.deepcopy(model)
    rm = rematerialize(model, torch.randn(4, 8), max_plans=2, **KW)
    for n in (3, 2, 1):
        x = torch.randn(n, 8)
        torch.testing.assert_close(_step(rm, x), _step(ref, x))
    assert rm.num_plans == 2 and rm.solves + rm.derived == 4  # a new batch size may take an earlier schedule
    with pytest.raises(ValueError, match="`max_plans`"):
        rematerialize(model, torch.randn(4, 8), max_plans=0, **KW)


def test_keyword_inputs_and_constant_arguments():
    class KwNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, scale=1.0, extra=None, mode="sum"):
            y = self.lin(x) * scale
            if extra is not None:
                y = y + extra["bias"]
            return {"out": y, "sum": y.sum() if mode == "sum" else y.mean(), "none": None}

    torch.manual_seed(0)
    model = KwNet()
    ref = copy.deepcopy(model)
    x, bias = torch.randn(3, 4), torch.randn(4)
    rm = rematerialize(model, (x,), example_kwargs={"scale": 2.0, "extra": {"bias": bias}}, **KW)
    out = rm(x, scale=2.0, extra={"bias": bias})
    assert out["none"] is None and set(out) == {"out", "sum", "none"}
    r = ref(x, scale=2.0, extra={"bias": bias})
    torch.testing.assert_close(out["out"], r["out"])
    rm(x, scale=3.0, extra={"bias": bias}, mode="mean")  # other constants: another plan
    assert rm.num_plans == 2


def test_outputs_with_none_and_a_view_of_another_output():
    class Views(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 6)

        def forward(self, x):
            y = self.lin(x)
            return y, None, y[:, :3], y.t()

    torch.manual_seed(0)
    model, x = Views(), torch.randn(5, 6)
    ref = copy.deepcopy(model)
    rm = rematerialize(model, x, **KW)
    out, r = rm(x), ref(x)
    assert out[1] is None and out[2].shape == (5, 3) and out[3].shape == (6, 5)
    (out[0].sum() + out[2].pow(2).sum() + out[3].exp().sum()).backward()
    (r[0].sum() + r[2].pow(2).sum() + r[3].exp().sum()).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_rematerialize_under_no_grad_says_what_to_do():
    model, x = Branchy(), torch.randn(4, 8)
    with torch.no_grad(), pytest.raises(remat_core.RematError, match="outside `torch.no_grad"):
        rematerialize(model, x, **KW)
    with torch.inference_mode(), pytest.raises(remat_core.RematError, match="inference_mode"):
        rematerialize(model, x, **KW)


def test_a_value_read_from_an_input_is_specialized_and_guarded():
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, mask):
            y = self.lin(x)
            if (mask > 0).all():  # reads a value: the fast path when nothing is masked
                return y
            return y * mask.unsqueeze(-1)

    torch.manual_seed(0)
    model = Masked()
    ref = copy.deepcopy(model)
    x, ones = torch.randn(3, 5, 4), torch.ones(3, 5)
    rm = rematerialize(model, (x, ones), **KW)
    assert rm.extracted.value_reads.values == [True]
    some = ones.clone()
    some[:, -2:] = 0
    for mask in (ones, some, ones):
        torch.testing.assert_close(_step(rm, x, mask), _step(ref, x, mask))
    assert rm.num_plans == 2 and rm.extracted.value_reads.values == [True]


def test_a_value_read_is_recorded_only_as_far_as_the_trace_read():
    """A trace that stops at a value read gets the value from a real forward that stops at that read too
    (Hugging Face's mask check comes before the layers, which then never run for real: 1.2 of GPT-2's 5 CPU
    s of planning); a trace that reads further gets a recording of the whole forward. Every value read is
    guarded, and training equals eager."""

    class TwoReads(torch.nn.Module):
        def __init__(self, second: bool):
            super().__init__()
            self.first = torch.nn.Linear(4, 4)
            self.later = torch.nn.Linear(4, 4)
            self.second = second

        def forward(self, x, mask):
            y = self.first(x)
            if not (mask > 0).all():
                y = y * mask.unsqueeze(-1)
            y = self.later(y)
            if self.second and (mask.sum(-1) > 4).all():
                y = y * 2
            return y

    x, ones = torch.randn(3, 5, 4), torch.ones(3, 5)
    some = ones.clone()
    some[:, -2:] = 0
    for second in (False, True):
        torch.manual_seed(0)
        model = TwoReads(second)
        ref = copy.deepcopy(model)
        real = []   # the later layer's calls on real tensors (the traces call it on fake ones)
        model.later.register_forward_pre_hook(lambda m, a: real.append(type(a[0]) is torch.Tensor))
        rm = rematerialize(model, (x, ones), **KW)
        assert rm.extracted.value_reads.values == ([True, True] if second else [True])
        assert any(real) == second   # one read: recorded without running the layers after it
        for mask in (ones, some, ones):
            torch.testing.assert_close(_step(rm, x, mask), _step(ref, x, mask))
            for p, q in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad)
        assert rm.num_plans == 2


def test_a_value_read_from_a_parameter_is_refused_with_its_place():
    class DD(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(4, 4)
            self.gate = torch.nn.Parameter(torch.ones(1))

        def forward(self, x):
            y = self.inner(x)
            if self.gate.sum() > 0:
                y = y * 2
            return y

    with pytest.raises(UnsupportedModelError) as info:
        rematerialize(DD(), torch.randn(2, 4), **KW)
    msg = str(info.value)
    assert "test_torch_guards.py" in msg and "self.gate.sum() > 0" in msg
    assert "trainable parameter 'gate'" in msg and "remat_torch.dtr" in msg


def test_torch_version_check():
    check = remat_torch._check_torch_version
    check("2.13.0")
    check("2.13.1+cpu")
    for bad in ("2.12.1", "2.14.0", "3.0.0", "nightly"):
        with pytest.raises(ImportError, match="remat_torch needs torch>=2.13,<2.14"):
            check(bad)


def test_a_loaded_plan_is_used_and_other_shapes_are_solved(tmp_path):
    torch.manual_seed(0)
    model, x = Branchy(), torch.randn(64, 8)
    ref = copy.deepcopy(model)
    rm = rematerialize(model, x, budget=0.85, method="ilp", granularity="op", cost_model="unit", time_limit_s=2)
    path = tmp_path / "branchy.plan.json"
    rm.save_plan(path)
    loaded = rematerialize(model, x, plan=path, cost_model="unit", time_limit_s=2)
    assert loaded.result.method == "loaded" and loaded.solves == 0
    assert loaded.result.schedule == rm.result.schedule and loaded.result.budget_bytes == rm.result.budget_bytes
    torch.testing.assert_close(_step(loaded, x), _step(ref, x))
    small = torch.randn(48, 8)  # no saved plan fits: solved, at the saved plan's fraction of activation memory
    torch.testing.assert_close(_step(loaded, small), _step(ref, small))
    assert loaded.solves + loaded.derived == 1
    assert remat_core.units.budget_fraction(loaded.extracted.graph, loaded.result.budget_bytes) == pytest.approx(
        0.85, abs=0.01)
    with pytest.raises(remat_core.RematError, match="another model, shape or dtype"):
        rematerialize(model, torch.randn(3, 8), plan=path, cost_model="unit")  # the first call must fit
