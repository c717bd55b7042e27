"""Planning without repeating work (issue 40, "Planning in seconds").

* ``granularity="auto"`` traces the model once and groups that one trace at op
  and at module level;
* a second ``rematerialize`` of the same model and call (another budget or
  method) takes the traced and profiled graph from a per-model cache; a change
  that alters the graph (a parameter unfrozen) traces again;
* a new batch size whose graph has the structure of an earlier plan's takes
  that plan's schedule, re-simulated on its own sizes, when it fits the
  budget: no solve; it trains like eager and measures within its budget.
"""

import copy
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from hf_cases import loss_step as _loss_step  # noqa: E402  (skips without torch / transformers)
from hf_cases import make, resident_bytes  # noqa: E402

import torch  # noqa: E402

import remat_torch.api as api  # noqa: E402
import remat_torch.extract as extract  # noqa: E402
from remat_torch import clear_graph_cache, rematerialize, resolve_budget  # noqa: E402
from remat_torch.meter import AllocatorMeter  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def traces(monkeypatch):
    """Counts the model traces (``extract._trace`` calls)."""
    calls = []
    real = extract._trace

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(extract, "_trace", counting)
    return calls


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 2))


def test_granularity_auto_traces_once(traces):
    model, batch = make("gpt2")
    # a short time limit makes auto's size rule send the op-level graph to the large path: module level
    rm = rematerialize(model, example_kwargs=batch, budget=1.0, method="checkpoint-all", time_limit_s=0.01)
    rule = rm.extracted.graph.meta["granularity_auto"]
    assert rule["op_path"] == "large"
    # module level was planned; its plan recomputes nothing, so the op-level grouping of the same trace
    # (which peaks lower) replaced it: still one trace
    assert rm.extracted.graph.meta["no_remat_from"]["granularity"] == "module"
    assert rm.extracted.granularity == "op" and rule["op_nodes"] == rm.extracted.graph.n
    assert len(traces) == 1


def test_a_second_rematerialize_of_the_same_call_reuses_the_graph(traces):
    model, x = _net(), torch.randn(16, 8)
    kw = dict(method="checkpoint-all", granularity="op", cost_model="flops")
    a = rematerialize(model, x, budget=1.0, **kw)
    b = rematerialize(model, x, budget=0.9, **{**kw, "method": "auto", "time_limit_s": 2})
    assert len(traces) == 1 and b.extracted is a.extracted
    rematerialize(model, torch.randn(12, 8), budget=1.0, **kw)   # another shape: its own graph
    assert len(traces) == 2
    model[0].weight.requires_grad_(False)   # the graph computes no gradient for it now
    c = rematerialize(model, x, budget=1.0, **kw)
    assert len(traces) == 3 and c.extracted is not a.extracted
    model[0].weight.requires_grad_(True)
    rematerialize(model, x, budget=1.0, **kw)
    assert len(traces) == 3   # back to the first graph
    model[1] = torch.nn.Tanh()   # another module: traced again
    rematerialize(model, x, budget=1.0, **kw)
    assert len(traces) == 4
    clear_graph_cache(model)
    rematerialize(model, x, budget=1.0, **kw)
    assert len(traces) == 5
    clear_graph_cache()
    assert model not in api._GRAPHS


def test_a_model_with_cached_graphs_is_still_collected():
    import gc
    import weakref

    model, x = _net(), torch.randn(16, 8)
    rm = rematerialize(model, x, budget=1.0, method="checkpoint-all", granularity="op", cost_model="unit")
    ref = weakref.ref(model)
    del model, rm
    gc.collect()
    assert ref() is None


def test_a_new_batch_size_takes_the_earlier_schedule():
    """Planned at batch 4 within a budget in bytes, a batch of 3 (smaller sizes everywhere, same graph) takes
    the batch-4 schedule without solving; loss and gradients equal eager; the allocator stays within the
    budget and the prediction."""
    model, batch = make("gpt2")
    ref = copy.deepcopy(model)
    probe = rematerialize(model, example_kwargs=batch, budget=1.0, method="checkpoint-all", granularity="module")
    budget = resolve_budget(probe.extracted.graph, 0.5)
    rm = rematerialize(model, example_kwargs=batch, budget=budget, method="ilp", granularity="module",
                       time_limit_s=10)
    first = rm.result.schedule
    assert rm.solves == 1 and first.compute_counts().max() > 1   # it recomputes
    small = {k: v[:3] for k, v in batch.items()}
    for _ in range(2):
        with AllocatorMeter() as meter:
            loss = _loss_step(rm, small)
    assert rm.result.method == "derived" and rm.solves == 1 and rm.derived == 1
    assert rm.extracted.graph.meta["input_shapes"][0] == [3, 32]
    assert rm.result.schedule == first
    torch.testing.assert_close(loss, _loss_step(ref, small), rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=f"gradient of {name}")
    measured = resident_bytes(model, small) + meter.peak_bytes
    assert measured <= rm.predicted_peak_bytes + 1024 <= budget + 1024   # + the loss's scalars
