"""Plans that move the training state (parameters, inputs) to the host, run in PyTorch on the CPU host pool:
training equals eager at every step, the copies run in the plan's order, the device pool's peak is the
simulator's prediction."""

import copy
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))

from torch_cases import make_case  # noqa: E402

from remat_core.host import (DropState, FetchState, HostPlan, StateLayout, simulate_host,  # noqa: E402
                             solve_offload, state_floor_bytes)
from remat_core.plan import Compute  # noqa: E402
from remat_torch import extract_graph  # noqa: E402
from remat_torch.offload import OffloadExecutor, offload_training_state, torch_state_layout  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(64, 8)), (torch.randn(4, 64),)


def _planned_copies(plan):
    return [("fetch_state" if isinstance(s, FetchState) else "drop_state", s.block) if isinstance(s, (
        FetchState, DropState)) else (type(s).__name__.lower(), s.node)
        for s in plan.statements if isinstance(s, (FetchState, DropState)) or type(s).__name__ in (
            "Offload", "Prefetch")]


def _train_like_eager(ex, model, inputs, make_opt, steps=4):
    """``steps`` optimizer steps with the executor and with eager PyTorch: outputs, gradients and parameters
    equal at every step; the copies in plan order; the device pool's peak equal to the prediction."""
    m, ref = copy.deepcopy(model), copy.deepcopy(model)
    opt_m, opt_r = make_opt(m.parameters()), make_opt(ref.parameters())
    planned = _planned_copies(ex.host_plan)
    still = HostPlan([s for s in ex.host_plan.statements if not isinstance(s, (FetchState, DropState))],
                     ex.host_plan.num_nodes)
    base = OffloadExecutor(ex.eg, still)
    base.step(copy.deepcopy(model), inputs)
    base_over = (simulate_host(ex.eg.graph, still, math.inf).step_memory_bytes - base.step_bytes).tolist()
    assert min(base_over) == 0
    for step in range(steps):
        torch.manual_seed(100 + step)
        out = ex.step(m, inputs, accumulate=False)
        torch.manual_seed(100 + step)
        ref_out = ref(*inputs)
        ref_out.sum().backward()
        torch.testing.assert_close(out[0], ref_out, rtol=1.3e-6, atol=1e-5)
        for (name, p1), (_, p2) in zip(m.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p1.grad, p2.grad, rtol=1.3e-6, atol=1e-5, msg=f"grad of {name}")
        opt_m.step()
        opt_r.step()
        opt_m.zero_grad()
        opt_r.zero_grad()
        for (name, p1), (_, p2) in zip(m.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p1, p2, rtol=1.3e-6, atol=1e-5, msg=f"{name} after step {step}")
        for (name, b1), (_, b2) in zip(m.named_buffers(), ref.named_buffers()):
            torch.testing.assert_close(b1, b2, msg=f"buffer {name}")
        assert ex.copy_log == planned
        assert ex.peak_bytes == ex.predicted_peak_bytes
        # at every computation, the state moves change the device pool exactly as they change the prediction:
        # the same plan without them is over its tracked bytes by the same amounts (where a node's value shares a
        # storage with another's, e.g. BatchNorm's `<kept>` statistics, the simulator counts both)
        over = simulate_host(ex.eg.graph, ex.host_plan, math.inf).step_memory_bytes - ex.step_bytes
        assert over.tolist() == base_over
    return m, opt_m


def test_mlp_with_weights_on_the_host_trains_like_eager_with_adamw():
    model, inputs = _mlp()
    eg = extract_graph(model, inputs, granularity="module")
    lay = torch_state_layout(eg, model, inputs)
    floor = state_floor_bytes(eg.graph, lay)
    budget = floor + 2000   # far below the parameters plus the gradients (what remat alone needs)
    assert budget < eg.graph.min_budget_lower_bound_bytes()
    ex = offload_training_state(model, inputs, budget, host_bandwidth=math.inf)
    plan = ex.host_plan
    assert ex.predicted_peak_bytes <= budget and plan.layout == lay
    assert len(ex.host_blocks) >= 3   # most weights live on the host between steps
    m, opt = _train_like_eager(ex, model, inputs, lambda ps: torch.optim.AdamW(ps, lr=1e-2))
    # no storage is shared between nodes here: the device pool is the prediction at every computation
    assert ex.step_bytes.tolist() == simulate_host(eg.graph, plan, math.inf).step_memory_bytes.tolist()
    # the weights on the host are the module's parameters, stepped there with their Adam moments; the nodes
    # read device copies fetched from them (separate tensors)
    params = list(m.parameters())
    for j in ex.host_blocks:
        p = params[ex._block_ph[j]]
        assert set(opt.state[p]) >= {"exp_avg", "exp_avg_sq"}
    assert ex.peak_host_bytes == simulate_host(eg.graph, plan, math.inf).peak_host_bytes > 0


@pytest.mark.parametrize("name,frac,moves,make_opt", [
    ("cnn", 0.3, {"param", "input"}, lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)),   # BatchNorm, dropout
    ("transformer", 0.2, {"param"}, lambda ps: torch.optim.AdamW(ps, lr=1e-3)),                 # LayerNorm, attention
])
def test_models_with_state_off_the_device_train_like_eager(name, frac, moves, make_opt):
    model, inputs = make_case(name)
    eg = extract_graph(model, inputs, granularity="module")
    g = eg.graph
    lay = torch_state_layout(eg, model, inputs)
    lo, hi = state_floor_bytes(g, lay), g.min_budget_lower_bound_bytes()
    res = solve_offload(g, int(lo + frac * (hi - lo)), host_bandwidth=math.inf, state_layout=lay)
    assert res.success and res.peak_memory_bytes < hi   # only a plan that moves the state fits
    plan = res.host_plan
    assert {lay.blocks[j].kind for j in plan.dropped_blocks()} == moves
    ex = OffloadExecutor(eg, plan)
    _train_like_eager(ex, model, inputs, make_opt, steps=3)


def test_a_weight_on_the_device_between_steps_leaves_the_module_while_dropped():
    """A hand-written plan: weight ``2.weight`` stays on the device between steps but is dropped between its
    forward and backward readers, and so is the input; the module holds the host copy meanwhile."""
    model, inputs = _mlp()
    eg = extract_graph(model, inputs, granularity="module")
    g = eg.graph
    lay = torch_state_layout(eg, model, inputs)
    names = [b.name for b in lay.blocks]
    w, x = names.index("param:2.weight"), names.index("input:0")
    res = solve_offload(g, g.min_budget_lower_bound_bytes() + 10**6, host_bandwidth=math.inf)
    stmts = []
    for s in res.host_plan.statements:
        for j in (w, x):
            if isinstance(s, Compute) and s.node == lay.blocks[j].nodes[-1]:
                stmts.append(FetchState(j))
        stmts.append(s)
        for j in (w, x):
            if isinstance(s, Compute) and s.node == lay.blocks[j].nodes[0]:
                stmts.append(DropState(j))
    plan = HostPlan(stmts, g.n, layout=lay)
    ex = OffloadExecutor(eg, plan)
    assert ex.host_blocks == []
    seen = []

    class Spy(OffloadExecutor):
        def _fetch_state(self, st, j, cuda, stream):
            if j == w:   # while dropped, the module's parameter is the host copy, not the step's tensor
                seen.append(st.params[st_index].data_ptr() == st.state_host[w].data_ptr())
            super()._fetch_state(st, j, cuda, stream)

    st_index = ex._block_ph[w]
    spy = Spy(eg, plan)
    m, _ = _train_like_eager(spy, model, inputs, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), steps=3)
    assert seen == [True] * 3
    # between the drops, the device holds the two blocks less than the plan that keeps them
    saved = simulate_host(g, res.host_plan, math.inf).step_memory_bytes - spy.step_bytes
    assert saved.max() == lay.blocks[w].nbytes + lay.blocks[x].nbytes and saved.min() == 0


def test_state_plans_are_checked():
    model, inputs = _mlp()
    eg = extract_graph(model, inputs, granularity="module")
    g = eg.graph
    wrong = StateLayout(g, [("w", 64, "param", (0,))])
    plan = HostPlan([DropState(0), FetchState(0)] + [s for s in solve_offload(
        g, 10**9, host_bandwidth=math.inf).host_plan.statements], g.n, layout=wrong)
    with pytest.raises(ValueError, match="torch_state_layout"):
        OffloadExecutor(eg, plan)
    from remat_core.host import DropPart, OffloadPart, RestorePart

    base = solve_offload(g, 10**9, host_bandwidth=math.inf).host_plan.statements
    parts = [base[0], OffloadPart(base[0].register, base[0].node, 8), base[1], DropPart(base[0].register),
             RestorePart(base[0].register)] + list(base[2:])
    with pytest.raises(ValueError, match="OffloadPart"):   # simulated only: a storage is not freed in part
        OffloadExecutor(eg, HostPlan(parts, g.n))
    with pytest.raises(ValueError, match="`host_bandwidth`"):
        offload_training_state(model, inputs, 10**6, host_bandwidth=0)
    lay = torch_state_layout(eg, model, inputs)
    with pytest.raises(ValueError, match="`budget`"):
        offload_training_state(model, inputs, state_floor_bytes(g, lay) - 1, host_bandwidth=math.inf)
    with pytest.raises(ValueError, match="`inputs`"):
        torch_state_layout(eg, model, ())
