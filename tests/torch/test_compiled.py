"""The compiled path: ``torch.compile(model, backend=remat_torch.backend(budget=...))``.

Tiny Hugging Face configs (random weights, dropout off for the comparison)
trained for three SGD steps beside an eager copy: loss and every gradient
equal eager's at each step, the allocator's measured peak of a step is
within the budget and within 5% of the compile-time check's measurement
and of the plan's prediction (for Inductor, the replay of the code it
generated; for the uncompiled halves, the memory model), and at budget 1.0
at most ``torch.compile``'s own peak. The default suite runs GPT-2 and Llama
at 0.5 as FX-graph halves, a tanh MLP through Inductor at 1.0 (its code is
plain torch.compile's) and at 0.8, and the replay's unit tests; the models
through Inductor and the smallest found budgets are marked slow.
"""

import copy
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from hf_cases import make  # noqa: E402  (skips without torch / transformers)

import torch  # noqa: E402

import remat_torch  # noqa: E402
from remat_torch.compiled import CompiledBudgetError, RematPartitioner, backend  # noqa: E402
from remat_torch.meter import AllocatorMeter  # noqa: E402

STEPS = 3


class LossOnly(torch.nn.Module):
    """The training step's view of a Hugging Face model: keyword batch in, loss out."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, **batch):
        return self.hf(**batch).loss


def _model(name):
    hf, batch = make(name)
    for m in hf.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for attr in ("dropout", "attention_dropout"):   # rates read as floats (T5's attention, Llama's)
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, 0.0)
    if hasattr(hf, "loss_type") and name in ("gpt2", "llama"):
        hf.loss_type = "ForCausalLM"
    if name == "vit":   # HF's loss sets it at the first call, and Dynamo then recompiles (a second graph and plan)
        hf.config.problem_type = "single_label_classification"
    return LossOnly(hf), batch


def _train(name, be, *, tol=1e-5):
    """Three steps of the compiled copy beside eager; returns (plans, measured peaks of steps 2 and 3)."""
    torch._dynamo.reset()
    ref, batch = _model(name)
    ours = copy.deepcopy(ref)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.1)
    step = torch.compile(ours, backend=be)
    peaks = []
    for i in range(STEPS):
        loss_ref = ref(**batch)
        loss_ref.backward()
        if i == 0:
            loss = step(**batch)
            loss.backward()
        else:
            with AllocatorMeter() as meter:
                loss = step(**batch)
                loss.backward()
                loss = loss.detach()
            peaks.append(meter.peak_bytes)
        torch.testing.assert_close(loss, loss_ref.detach(), rtol=tol, atol=tol)
        for (pn, p), q in zip(ours.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (q.grad is None), pn
            if p.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, rtol=tol, atol=tol, msg=lambda m: f"{pn}: {m}")
        opt_ref.step()
        opt_ours.step()
        opt_ref.zero_grad(set_to_none=True)
        opt_ours.zero_grad(set_to_none=True)
    return be.partitioner.plans, peaks


def _budget_error(exc):
    """The CompiledBudgetError inside Dynamo's BackendCompilerFailed (``inner_exception``), or None."""
    while exc is not None and not isinstance(exc, CompiledBudgetError):
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return exc


def _check(plans, peaks, model_within=None):
    assert len(plans) == 1, plans        # one graph, planned once (no graph break, no recompile)
    plan = plans[0]
    # compile's own plan (budget 1.0) is not measured at compile time: it is plain torch.compile's
    assert (plan.measured_peak_bytes is None) == (plan.source == "compile-default"), plan
    for peak in peaks:
        assert peak <= plan.budget_bytes or plan.source == "compile-default", (peak, plan)
        if plan.measured_peak_bytes is not None:
            assert abs(peak - plan.measured_peak_bytes) <= 0.05 * plan.measured_peak_bytes, (peak, plan)
        if model_within is not None:
            assert abs(peak - plan.predicted_peak_bytes) <= model_within * peak, (peak, plan)
    return plan


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_fx_halves_at_half(name):
    plans, peaks = _train(name, backend(0.5, inductor=False, time_limit_s=3))
    plan = _check(plans, peaks, model_within=0.05)
    assert plan.n_recomputed > 0 and plan.predicted_peak_bytes <= plan.model_budget_bytes


# slow (40-60 s on a loaded 2-core machine): test_inductor_at_one_compiles_as_plain_compile checks the same code in the
# default suite
@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_inductor_at_one_is_compiles_own(name):
    plans, peaks = _train(name, backend(1.0), tol=1e-4)
    plan = _check(plans, peaks)
    assert plan.source == "compile-default"
    torch._dynamo.reset()
    model, batch = _model(name)
    step = torch.compile(model, backend="inductor")
    step(**batch).backward()
    model.zero_grad(set_to_none=True)
    with AllocatorMeter() as meter:
        loss = step(**batch)
        loss.backward()
        del loss
    assert max(peaks) <= meter.peak_bytes * 1.01, (peaks, meter.peak_bytes)


def _generated_code(model, x, be):
    """The wrapper source Inductor generates for the forward and backward of ``model(x).square().mean()`` under
    backend ``be`` (Inductor's and AOTAutograd's caches off, so both are generated here)."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    from remat_torch.compiled.generated import recording

    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False), \
            recording() as records:
        step = torch.compile(lambda v: model(v).square().mean(), backend=be)
        step(x).backward()
    # the first line names the graph's number in this process ("# AOT ID: ['0_forward']")
    return [re.sub(r"^# AOT ID: .*\n", "", r["source"]) for r in records]


def test_inductor_at_one_compiles_as_plain_compile():
    """At budget 1.0 the backend hands Inductor compile's own halves under Inductor's own settings: the generated
    forward and backward code is plain torch.compile's, line for line (buffer reuse on; parameters are static
    inputs, saved as themselves)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 64)]
    for _ in range(3):
        layers += [torch.nn.Tanh(), torch.nn.Linear(64, 64)]
    model = torch.nn.Sequential(*layers)
    x = torch.randn(128, 32)
    plain = _generated_code(copy.deepcopy(model), x, "inductor")
    be = backend(1.0)
    ours = _generated_code(copy.deepcopy(model), x, be)
    assert len(plain) == 2 and ours == plain
    assert any("# reuse" in code for code in ours)     # Inductor's buffer reuse is on
    plan = be.partitioner.plans[-1]
    assert plan.source == "compile-default" and plan.inductor_patches == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param("bert", marks=pytest.mark.xfail(strict=True, reason=(
        "known: the memory model over-predicts BERT's FX halves at 0.5 (367,624 predicted, 348,584 bytes "
        "measured, 5.5%); within the budget, not within 5%"))),
    "vit",
    "t5",
])
def test_fx_halves_at_half_more_models(name):
    plans, peaks = _train(name, backend(0.5, inductor=False, time_limit_s=3))
    _check(plans, peaks, model_within=0.05)


# Where 0.5 (of compile's own plan's generated code) is below the smallest plan found under Inductor, the
# refusal names the smallest (the generated code's peak, replayed before compiling) and the test trains there.
# Inductor fuses a SiLU/GELU backward into one kernel whose three matrix-product inputs and three outputs live
# together (Llama: 6 x 32 KiB of its 304 KiB budget at 0.5, beside 88.6 KiB of gradients and outputs).
# BERT and ViT miss 0.5 narrowly (dtr finds no schedule below 0.4 of the joint graph, whose plan is the smallest).
# Llama's and GPT-2's smallest are plans compiled with realize_reads_threshold=1 (tried where nothing fits under the
# defaults; Llama 0.777 -> 0.664, GPT-2 0.560 -> 0.548, BERT 0.515 -> 0.514).
_REFUSED_AT_HALF = {"gpt2": 0.548, "llama": 0.664, "bert": 0.514, "vit": 0.508}   # smallest found, 2026-11-26


def _inductor_at(name, budget):
    """Trains under Inductor at ``budget``; where the model refuses 0.5 as known, at the smallest it names."""
    try:
        return _train(name, backend(budget), tol=1e-4)
    except Exception as exc:
        err = _budget_error(exc)
        if err is None or name not in _REFUSED_AT_HALF:
            raise
        # the smallest budget in human units and as a fraction, no worse than recorded (a 2% margin)
        assert re.search(r"smallest budget at which a plan was found: [0-9.]+ [KMG]iB \([0-9]+ bytes, [0-9.]+ of "
                         r"activation memory", str(err)), str(err)
        assert err.smallest_fraction <= _REFUSED_AT_HALF[name] + 0.02, str(err)
        # the smallest is a replay of generated code (within 0.3% of the allocator): 1% slack
        return _train(name, backend(int(err.smallest_bytes * 1.01)), tol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "gpt2", "llama", "bert", "t5", "vit",
])
def test_inductor_at_half(name):
    """Inductor at 0.5 (or the smallest found where 0.5 is refused): trains as eager, within the budget, and the
    replay of the generated code, computed before compiling to choose the plan, predicts the allocator's peak
    within 5%."""
    plans, peaks = _inductor_at(name, 0.5)
    plan = _check(plans, peaks, model_within=0.05)
    assert plan.code_peak_bytes is not None and plan.predicted_peak_bytes == plan.code_peak_bytes
    for peak in peaks:
        assert abs(peak - plan.planned_peak_bytes) <= 0.05 * peak, (peak, plan)
    assert plan.n_recomputed > 0 and plan.source != "compile-default"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5", "vit"])
def test_inductor_at_smallest_found(name):
    """The smallest budget the refusal names (the generated code's peak, replayed before compiling) trains within
    itself (1% slack)."""
    torch._dynamo.reset()
    model, batch = _model(name)
    with pytest.raises(Exception, match="smallest") as info:
        torch.compile(model, backend=backend("1KiB"))(**batch)
    err = _budget_error(info.value)
    assert err is not None and err.smallest_bytes > 1024
    plans, peaks = _train(name, backend(int(err.smallest_bytes * 1.01)), tol=1e-4)
    plan = _check(plans, peaks, model_within=0.05)
    assert plan.code_peak_bytes is not None
    for peak in peaks:
        assert abs(peak - plan.planned_peak_bytes) <= 0.05 * peak, (peak, plan)


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param("gpt2", marks=pytest.mark.xfail(strict=True, reason=(
        "known: at GPT-2's smallest found budget the model over-predicts compile's knapsack-0.2 plan "
        "(360,968 predicted, 298,120 bytes measured); within the budget, not within 5%"))),
    "llama",
])
def test_fx_halves_at_smallest_found(name):
    torch._dynamo.reset()
    model, batch = _model(name)
    with pytest.raises(Exception, match="smallest") as info:
        torch.compile(model, backend=backend("1KiB", inductor=False, time_limit_s=3))(**batch)
    err = _budget_error(info.value)
    assert err is not None and err.smallest_bytes > 1024
    plans, peaks = _train(name, backend(int(err.smallest_bytes * 1.05), inductor=False, time_limit_s=3))
    _check(plans, peaks, model_within=0.05)


def test_inductor_plan_is_chosen_on_the_code_it_generates():
    """A small tanh MLP under Inductor at 0.8: the plan's peak, replayed from the code Inductor generates before it is
    compiled, equals the replay of the code compiled for it and is within 5% of the allocator's peak, which is
    within the budget; gradients equal eager's over three steps."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 64)]
    for _ in range(4):      # activations (512 x 64 floats, 128 KiB each) dominate the weights (16 KiB)
        layers += [torch.nn.Tanh(), torch.nn.Linear(64, 64)]
    ref = torch.nn.Sequential(*layers, torch.nn.Tanh(), torch.nn.Linear(64, 1))
    ours = copy.deepcopy(ref)
    be = backend(0.8)     # its smallest plan under Inductor is at 0.685
    step = torch.compile(lambda x: ours(x).square().mean(), backend=be)
    x = torch.randn(512, 32)
    peaks = []
    for i in range(STEPS):
        ref(x).square().mean().backward()
        if i == 0:      # the first step compiles (and the backend measures inside): not metered, as in _train
            step(x).backward()
        else:
            with AllocatorMeter() as meter:
                loss = step(x)
                loss.backward()
                del loss
            peaks.append(meter.peak_bytes)
        for p, q in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    plan = _check(be.partitioner.plans, peaks, model_within=0.05)
    assert plan.n_recomputed > 0 and plan.source != "compile-default"
    assert plan.planned_peak_bytes == plan.code_peak_bytes, plan


@pytest.mark.parametrize("budget", [1.5, -0.1, float("nan"), "lots", 0, True])
def test_bad_budget_names_the_argument(budget):
    with pytest.raises((ValueError, TypeError), match="budget"):
        remat_torch.backend(budget=budget)


def test_bad_time_limit_names_the_argument():
    with pytest.raises(ValueError, match="time_limit_s"):
        RematPartitioner(0.5, time_limit_s=0)


def test_infeasible_budget_names_the_smallest_found():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))
    step = torch.compile(model, backend=backend("1KiB", inductor=False, time_limit_s=1))
    with pytest.raises(Exception, match="smallest budget at which a plan was found") as info:
        step(torch.randn(64, 32)).sum().backward()
    err = _budget_error(info.value)
    assert err is not None and err.smallest_bytes > 1024 and 0 < err.smallest_fraction <= 1


# ---------------------------------------------------------------- the replay of generated code

_BACKWARD_CODE = """
class Runner:
    def call(self, args):
        primals_1, saved_a, tangents_1 = args
        args.clear()
        buf0 = empty_strided_cpu((4, 8), (8, 1), torch.float32)
        buf1 = empty_strided_cpu((4, 8), (8, 1), torch.float32)
        buf2 = reinterpret_tensor(buf1, (32, ), (1, ), 0)  # alias
        del saved_a
        buf3 = buf0; del buf0  # reuse
        # Topologically Sorted Source Nodes: [foo], Original ATen: [aten.foo]
        buf4 = torch.ops.aten.foo.default(buf3)
        buf5 = buf4[0]
        buf6 = buf4[1]
        del buf4
        del buf3
        del buf1
        del buf2
        return (buf5, buf6, )
"""


def test_replay_counts_allocations_reuse_aliases_and_extern_outputs():
    from remat_torch.compiled.generated import simulate

    code = {"source": _BACKWARD_CODE, "sizes": {"buf5": 64, "buf6": 32}, "workspace": {"buf4": 100}}
    peak, live, outs = simulate(code, {"saved_a": ("a", 256)})
    # 256 saved + 2 x 128 allocated = 512, then the saved value dies: 256 + 96 outputs + 100 scratch = 452
    assert peak == 512
    assert live == 96      # buf1 is freed only when its alias buf2 goes too
    assert [b for _, b in outs] == [64, 32]
    # without the saved input counted, the extern op's instant is the peak
    assert simulate(code)[0] == 452


_FORWARD_CODE = """
    def call(self, args):
        primals_1, primals_2 = args
        args.clear()
        buf0 = empty_strided_cpu((8, ), (1, ), torch.float32)
        buf1 = empty_strided_cpu((16, 16), (16, 1), torch.float32)
        buf2 = empty_strided_cpu((16, 16), (16, 1), torch.float32)
        del buf2
        return (buf0, reinterpret_tensor(buf1, (256, ), (1, ), 0), primals_1, )
"""
_BACKWARD_OF_FORWARD = """
    def call(self, args):
        buf1_saved, primals_1, tangents_1 = args
        args.clear()
        buf0 = empty_strided_cpu((16, 32), (32, 1), torch.float32)
        del buf1_saved
        return (buf0, )
"""


def test_step_peak_carries_saved_values_into_the_backward():
    from remat_torch.compiled.generated import step_peak

    fw = {"source": _FORWARD_CODE, "sizes": {}}
    bw = {"source": _BACKWARD_OF_FORWARD, "sizes": {}}
    # forward: 32 + 1024 + 1024 = 2080; backward: the loss (32) + the saved 1024 (returned as a view, whose
    # commas must not shift the positions) + 2048 = 3104
    assert step_peak(fw, bw, num_fwd_outputs=1) == 3104


# ---------------------------------------------------------------- choosing among candidates under Inductor

def _candidates(rows):
    """Candidates as the partitioner holds them: (source, saved, evaluation) from (name, model peak, cost)."""
    from remat_torch.compiled import _Eval

    return [(name, [], _Eval(peak=peak, fixed=0, saved_bytes=0, cost=cost, n_saved=0, n_recomputed=0))
            for name, peak, cost in rows]


def _chooser(generated):
    """``exact`` and ``peak_of`` over a table of generated-code peaks, counting the lowerings."""
    done: dict = {}

    def exact(c, stock=False, cached_only=False):
        if cached_only:
            return done.get(c[0])
        done[c[0]] = generated[c[0]]
        return done[c[0]]

    def peak_of(c):
        return done.get(c[0], c[2].peak)

    return exact, peak_of, done


def test_a_candidate_dominated_by_one_found_over_budget_is_not_lowered():
    # by cost: a (model 90) is over the budget in generated code; b recomputes more and holds more by the model:
    # not lowered; c holds less by the model and fits
    cands = _candidates([("a", 90, 1.0), ("b", 95, 2.0), ("c", 80, 3.0)])
    exact, peak_of, done = _chooser({"a": 120, "b": 99, "c": 98})
    chosen = RematPartitioner(0.5)._choose_by_generated_code(cands, exact, peak_of, 100)
    assert [c[0] for c in chosen] == ["c"] and set(done) == {"a", "c"}


def test_the_smallest_search_lowers_a_bounded_number_and_returns_a_fit():
    import remat_torch.compiled as compiled

    rows = [(f"p{i}", 50 + i, float(i)) for i in range(10)]
    # nothing fits in the cost-ordered pass (every model peak over 40 is lowered only when <= budget)
    exact, peak_of, done = _chooser({f"p{i}": 200 - i for i in range(10)})
    assert RematPartitioner(0.5)._choose_by_generated_code(_candidates(rows), exact, peak_of, 40) == []
    assert len(done) == compiled._SMALLEST_LOWERINGS      # in order of model peak, then it stops
    assert set(done) == {f"p{i}" for i in range(compiled._SMALLEST_LOWERINGS)}
    # a plan the smallest search finds within the budget is returned, not refused
    exact, peak_of, done = _chooser({"a": 130, "b": 95})
    cands = _candidates([("a", 90, 1.0), ("b", 92, 2.0)])
    chosen = RematPartitioner(0.5)._choose_by_generated_code(cands, exact, peak_of, 100)
    assert [c[0] for c in chosen] == ["b"]


def test_generated_code_peaks_are_cached_on_disk(tmp_path, monkeypatch):
    import remat_torch.compiled as compiled
    from torch._inductor import config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    key = ("graph-hash", frozenset({"mm", "relu"}), (("allow_buffer_reuse", "False"),))
    monkeypatch.setattr(compiled, "_EXACT", {})
    compiled._store_exact(key, 12345)
    monkeypatch.setattr(compiled, "_EXACT", {})       # a new process
    assert compiled._known_exact(key) == 12345
    assert compiled._known_exact(key[:2] + ((("allow_buffer_reuse", "True"),),)) is None    # other settings
    with config.patch(fx_graph_cache=False):          # Inductor's own cache off: none of ours either
        monkeypatch.setattr(compiled, "_EXACT", {})
        assert compiled._exact_path(key) is None and compiled._known_exact(key) is None


def test_a_second_batch_shape_is_measured_at_compile_time():
    """Dynamo recompiles for a second batch shape with a symbolic batch size, passed to the graph as an integer
    argument: the compile-time check runs the step with the traced example's value (it used to pass the symbol,
    and the step failed with "Expected result >= 0": T's tiny Falcon, session 4)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 64)]
    for _ in range(4):
        layers += [torch.nn.Tanh(), torch.nn.Linear(64, 64)]
    model = torch.nn.Sequential(*layers)
    be = backend(0.8, inductor=False, time_limit_s=1)
    step = torch.compile(lambda v: model(v).square().mean(), backend=be)
    for batch in (512, 384):
        step(torch.randn(batch, 32)).backward()
    assert len(be.partitioner.plans) == 2
    assert all(p.measured_peak_bytes is not None for p in be.partitioner.plans), be.partitioner.plans


def test_the_cost_pass_and_the_smallest_search_run_separately():
    # the partitioner tries its alternative Inductor settings between the two (their lowerings are saved where one
    # fits): without the search, a cost pass finding nothing lowers no more than its own candidates
    cands = _candidates([("a", 90, 1.0), ("b", 60, 2.0), ("c", 80, 3.0)])
    exact, peak_of, done = _chooser({"a": 130, "b": 120, "c": 95})
    part = RematPartitioner(0.5)
    assert part._choose_by_generated_code(cands, exact, peak_of, 85, search_smallest=False) == []
    # a's model peak is over the budget, c is dominated by b (over in generated code, cheaper, smaller by the model)
    assert set(done) == {"b"}
    # the search alone lowers by model peak and returns a fit it finds
    chosen = part._choose_by_generated_code(cands, exact, peak_of, 100, cost_pass=False)
    assert [c[0] for c in chosen] == ["c"] and set(done) == {"a", "b", "c"}


def test_every_op_that_draws_from_the_rng_is_saved_never_recomputed():
    """Under Inductor the partitioner sees dropout's draws as ``prims.inductor_seeds`` (tagged
    ``nondeterministic_seeded``), which torch's random-op list lacks: compile's knapsack plans recomputed it in the
    backward, drawing a new mask (gradients off by up to 0.009, silently; T-bugs #19, end to end in the slow
    ``test_user_trials::test_compiled_backend_with_dropout_gives_the_gradients_of_plain_compile``)."""
    import torch._inductor.inductor_prims  # noqa: F401  (registers prims.inductor_*)
    from torch import fx

    from remat_torch.compiled import _is_random

    g = fx.Graph()
    x = g.placeholder("x")
    seeds = g.call_function(torch.ops.prims.inductor_seeds.default, (1, torch.device("cpu")))
    rand = g.call_function(torch.ops.aten.rand_like.default, (x,))
    bern = g.call_function(torch.ops.aten.bernoulli.p, (x, 0.5))
    tanh = g.call_function(torch.ops.aten.tanh.default, (x,))
    assert _is_random(seeds) and _is_random(rand) and _is_random(bern)
    assert not _is_random(tanh) and not _is_random(x)
