"""Maximum batch size search (remat_core.batch)."""

import functools
import math

import numpy as np
import pytest

from remat_core import RematResult, Schedule, SolveStatus, UnknownMethodError, optimal_r_given_s, simulate
from remat_core.batch import batch_size_upper_bound, forward_pass_cost_cap, max_batch_size
from remat_core.solvers import _METHODS, register_method
from remat_core.zoo import linear_graph
from remat_core.zoo.models import load_spec, zoo_graph


def _keep_nothing(graph, budget_bytes):
    """Test method: checkpoint-all if it fits, else keep only every k-th forward value (k = 2, 3, 4)."""
    full = Schedule.checkpoint_all(graph)
    _, S = full.dense()
    n_fwd = graph.meta.get("n_forward", 0)
    candidates = [full]
    for k in (2, 3, 4):
        S2 = S.copy()
        S2[:, [i for i in range(n_fwd) if i % k]] = False
        candidates.append(optimal_r_given_s(graph, S2))
    for sched in candidates:
        if simulate(graph, sched, timeline=False).peak_memory_bytes <= budget_bytes:
            return RematResult(SolveStatus.FEASIBLE, schedule=sched)
    return RematResult(SolveStatus.INFEASIBLE, message="no candidate schedule fits")


@pytest.fixture
def keep_nothing():
    register_method("test-keep-nothing", _keep_nothing, overwrite=True)
    yield "test-keep-nothing"
    _METHODS.pop("test-keep-nothing", None)


def _linear(b, n=8):
    return linear_graph(n, cost=float(b), memory_bytes=b, fixed_bytes=7)


def _brute_force(graph_fn, budget, method, cap_factor, limit=120):
    from remat_core import solve

    best = 0
    for b in range(1, limit + 1):
        g = graph_fn(b)
        r = solve(g, budget, method=method)
        cap = forward_pass_cost_cap(g) if cap_factor is None else cap_factor * g.cost.sum()
        if r.success and r.objective <= cap * (1 + 1e-9):
            best = b
    return best


@pytest.mark.parametrize("budget", [7 + 7, 40, 100, 333, 1000])
def test_matches_brute_force_for_checkpoint_all(budget):
    r = max_batch_size(_linear, budget, method="checkpoint-all")
    assert r.batch_size == _brute_force(_linear, budget, "checkpoint-all", None)
    if r.batch_size:
        assert r.result.peak_memory_bytes <= budget
        assert r.graph.n == 17 and r.overhead == pytest.approx(1.0)
        # the next batch does not fit
        assert simulate(_linear(r.batch_size + 1), Schedule.checkpoint_all(_linear(r.batch_size + 1))).peak_memory_bytes > budget


@pytest.mark.parametrize("budget", [40, 150])
@pytest.mark.parametrize("cap", [None, 1.0, 1.5, math.inf])
def test_cost_cap_with_a_recomputing_method(keep_nothing, budget, cap):
    r = max_batch_size(_linear, budget, method=keep_nothing, cost_cap=cap, max_batch=256)
    # the smallest candidate peak is 5 * batch + 7 bytes: no batch above budget // 5 can fit
    assert r.batch_size == _brute_force(_linear, budget, keep_nothing, cap, limit=budget // 5 + 1)
    if r.batch_size:
        assert r.result.objective <= r.cost_cap * (1 + 1e-9)


def test_recomputation_buys_a_larger_batch(keep_nothing):
    plain = max_batch_size(_linear, 600, method="checkpoint-all")
    remat = max_batch_size(_linear, 600, method=keep_nothing, cost_cap=math.inf)
    assert remat.batch_size > plain.batch_size
    assert remat.overhead > 1.0


def test_nothing_fits_and_search_limits():
    r = max_batch_size(_linear, 5, method="checkpoint-all")
    assert r.batch_size == 0 and r.result is None and r.trace[0]["fits"] is False
    r = max_batch_size(_linear, 10**9, method="checkpoint-all", max_batch=37)
    assert r.batch_size == 37 and r.hit_max_batch
    # the trace records every probe: doubling then bisection
    r = max_batch_size(_linear, 100, method="checkpoint-all")
    probes = [t["batch_size"] for t in r.trace]
    assert probes[:4] == [1, 2, 4, 8] and len(probes) == len(set(probes))


def test_eq10_cap_is_one_extra_forward_pass():
    g = linear_graph(3, cost=[1, 2, 3, 10, 4, 5, 6])
    assert forward_pass_cost_cap(g) == pytest.approx(31 + 6)  # loss (node 3) is not a forward layer


def test_bad_arguments():
    with pytest.raises(TypeError, match="`graph_fn`"):
        max_batch_size(3, 10)
    with pytest.raises(ValueError, match="`budget_bytes`"):
        max_batch_size(_linear, -1)
    with pytest.raises(UnknownMethodError, match="available methods"):
        max_batch_size(_linear, 10, method="nope")
    with pytest.raises(ValueError, match="`max_batch`"):
        max_batch_size(_linear, 10, max_batch=0)
    with pytest.raises(ValueError, match="`cost_cap`"):
        max_batch_size(_linear, 10, cost_cap=-2)
    with pytest.raises(TypeError, match="must return a Graph"):
        max_batch_size(lambda b: None, 10)


def test_zoo_model_max_batch_is_tight():
    budget = 16 * 10**9
    fn = functools.partial(zoo_graph, "vgg16")
    r = max_batch_size(fn, budget, method="checkpoint-all")
    assert r.batch_size > 1
    nxt = fn(r.batch_size + 1)
    assert simulate(nxt, Schedule.checkpoint_all(nxt)).peak_memory_bytes > budget
    assert r.result.peak_memory_bytes <= budget


@pytest.mark.parametrize("budget", [14, 30, 100, 1000])
def test_upper_bound_is_the_hard_lower_bound_ceiling(budget):
    ub = batch_size_upper_bound(_linear, budget)
    # brute force over the graph's own lower bound
    assert ub == max([b for b in range(1, 400) if _linear(b).min_budget_lower_bound_bytes() <= budget], default=0)
    # no method can pass it: checkpoint-all is below, and a batch above is rejected without a solve
    r = max_batch_size(_linear, budget, method="checkpoint-all")
    assert r.batch_size <= ub
    assert batch_size_upper_bound(_linear, 10**9, max_batch=37) == 37


def test_limited_by_lower_bound_is_read_from_the_trace():
    # with no cost cap, LP rounding recomputes the chain down to its hard bound: 3 values of b bytes + 7
    r = max_batch_size(_linear, 150, method="lp-rounding", cost_cap=math.inf)
    assert r.batch_size == batch_size_upper_bound(_linear, 150) == 47
    assert r.limited_by_lower_bound and r.to_dict()["limited_by_lower_bound"]
    nxt = [t for t in r.trace if t["batch_size"] == 48][0]
    assert nxt["lower_bound_bytes"] > 150 and nxt["status"] is None  # rejected without a solve
    # checkpoint-all stops below the bound: its limit is its own peak, not the bound
    r = max_batch_size(_linear, 150, method="checkpoint-all")
    assert r.batch_size < 47 and not r.limited_by_lower_bound


def test_upper_bound_bad_arguments():
    with pytest.raises(TypeError, match="`graph_fn`"):
        batch_size_upper_bound(3, 10)
    with pytest.raises(ValueError, match="`budget_bytes`"):
        batch_size_upper_bound(_linear, 0)
    with pytest.raises(ValueError, match="`max_batch`"):
        batch_size_upper_bound(_linear, 10, max_batch=0)
    with pytest.raises(TypeError, match="must return a Graph"):
        batch_size_upper_bound(lambda b: None, 10)


def _vgg19_checkmate_accounting(b):
    """VGG19 with Checkmate's fixed bytes: parameters + gradients, the input batch not counted."""
    return zoo_graph("vgg19", b).replace(fixed_bytes=8 * load_spec("vgg19")["params"])


def test_vgg19_max_batch_is_the_hard_ceiling_for_every_method():
    """Why every method stops at 285 on VGG19 at 16 GB (and the paper's Checkmate at 289).

    At batch 286 computing grad/block1_conv1 alone (its three inputs and its output) plus the fixed bytes
    exceeds 16e9 bytes, so no schedule of any method fits: 285 is the true maximum. In Checkmate's
    accounting (the input batch not resident) the same ceiling is 289, the paper's Figure 6 value.
    """
    budget = 16 * 10**9
    fn = functools.partial(zoo_graph, "vgg19")
    assert fn(285).min_budget_lower_bound_bytes() <= budget < fn(286).min_budget_lower_bound_bytes()
    assert batch_size_upper_bound(fn, budget) == 285
    for method in ("ap-sqrtn", "ap-greedy"):
        r = max_batch_size(fn, budget, method=method)
        assert r.batch_size == 285 and r.limited_by_lower_bound
        assert r.result.peak_memory_bytes <= budget and r.result.objective <= r.cost_cap
    assert batch_size_upper_bound(_vgg19_checkmate_accounting, budget) == 289
    r = max_batch_size(_vgg19_checkmate_accounting, budget, method="ap-greedy")
    assert r.batch_size == 289 and r.limited_by_lower_bound


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lp-rounding", "ilp"])
def test_vgg19_checkmate_methods_reach_the_ceiling(method):
    budget = 16 * 10**9
    fn = functools.partial(zoo_graph, "vgg19")
    r = max_batch_size(fn, budget, method=method, min_batch=256, time_limit_s=60)
    assert r.batch_size == 285 and r.limited_by_lower_bound
