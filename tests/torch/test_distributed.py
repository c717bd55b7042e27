"""Rematerialized modules under data parallelism: two gloo ranks on one machine (CPU).

The ranks run in a fresh process group started by ``dist_worker.py`` (its
own session, killed as a whole if it overruns ``TIMEOUT_S``; every collective
inside times out after 60 s). Each scenario runs the same wrapper around the
plain model and around the rematerialized one (budget 0.5) for three
optimizer steps:

* DDP and FSDP2 (``fully_shard`` on the whole module), with a plan: each rank's gradients
  after the reduce equal those without remat on every step, and the rank's
  measured peak (the c10 allocator's rise in a step plus what was resident:
  the storages of the rank's parameters or shards and inputs, and DDP's
  gradient buckets as DDP reports them) is within the
  plan's peak plus :func:`remat_torch.distributed.comm_overhead_bytes`,
  which is within the per-rank budget;
* FSDP2 per block (``fully_shard_blocks``: each block and then the root), against per-block FSDP2
  without remat: the same checks, with the per-block overhead model;
* DDP and FSDP2 around the plain model with the live DTR runtime (half the
  step's activation memory) entered around the steps: the same gradients;
* ``torch.compile(DDP(model), backend=remat_torch.backend(budget))``: the
  reduced gradients equal eager DDP's on every step, the rank's measured rise
  in a step within the plan's budget (bytes above the level before the step)
  and within 5% of the plan's prediction; with small gradient buckets Dynamo's
  DDPOptimizer splits the step into one graph per bucket, each planned on its own;
* Accelerate ``prepare`` (which wraps the model in DDP on two ranks) and HF
  ``Trainer`` with DDP: the same losses and parameters as without remat.
"""

import json
import os
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
# one xdist worker runs this file (make test uses --dist loadgroup): its module fixtures then start the two
# ranks once, not once per worker, four ranks at a time on a 2-core machine
pytestmark = pytest.mark.xdist_group("distributed")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 600  # a loaded 2-core machine: the four scenarios take about a minute there
SLACK_BYTES = 4096  # scalar temporaries outside the graph (the loss's), as in test_torch_memory


def _kill(proc):
    """Kill the worker and the ranks it spawned (one session), and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _run_ranks(scenarios, out_dir):
    """Run ``dist_worker.py`` for ``scenarios``; the per-rank records by scenario."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "dist_worker.py"), ",".join(scenarios),
                             str(out_dir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill(proc)
        pytest.fail(f"the two ranks did not finish in {TIMEOUT_S} s")
    except BaseException:  # Ctrl-C: the ranks are in their own session and would not get it
        _kill(proc)
        raise
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    recs = {}
    for name in scenarios:
        recs[name] = [json.load(open(os.path.join(out_dir, f"{name}-rank{r}.json"))) for r in range(2)]
    return recs


@pytest.fixture(scope="module")
def wrapped_runs(tmp_path_factory):
    return _run_ranks(["ddp", "fsdp", "ddp-dtr", "fsdp-dtr", "fsdp-dtr-local", "fsdp-blocks", "fsdp-blocks-on-use",
                       "fsdp-blocks-plain"],
                      tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def compiled_runs(tmp_path_factory):
    return _run_ranks(["ddp-compiled", "ddp-compiled-buckets", "ddp-compiled-one-graph", "fsdp-compiled"],
                      tmp_path_factory.mktemp("dist-compiled"))


@pytest.fixture(scope="module")
def fsdp_compiled_blocks_runs(tmp_path_factory):
    return _run_ranks(["fsdp-compiled-blocks"], tmp_path_factory.mktemp("dist-fsdp-compiled-blocks"))


@pytest.fixture(scope="module")
def compiled_inductor_runs(tmp_path_factory):
    return _run_ranks(["ddp-compiled-inductor"], tmp_path_factory.mktemp("dist-compiled-inductor"))


@pytest.fixture(scope="module")
def hf_runs(tmp_path_factory):
    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    return _run_ranks(["accelerate", "trainer"], tmp_path_factory.mktemp("dist-hf"))


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_gradients_equal_without_remat_and_peak_within_per_rank_budget(wrapped_runs, strategy):
    r0, r1 = wrapped_runs[strategy]
    for rec in (r0, r1):
        assert rec["recomputed"] > 1, rec  # budget 0.5 recomputes something
        assert len(rec["diffs"]) == 3
        # the same ops on the same values: the reduced gradients agree to float32 round-off on every step
        assert max(rec["diffs"]) <= 1e-6 * max(rec["grad_scale"], 1.0), rec
        per_rank_budget = rec["budget_bytes"] + rec["overhead_bytes"]
        assert rec["predicted_peak_bytes"] <= rec["budget_bytes"]
        for rise in rec["rises"][-1:]:  # the last step: DDP rebuilds its buckets in the second
            measured = rec["resident"] + rise
            assert measured <= rec["predicted_peak_bytes"] + rec["overhead_bytes"] + SLACK_BYTES, rec
            assert measured <= per_rank_budget + SLACK_BYTES, rec
            # the plan's own part is all there: more than the plan's activations were measured
            assert measured >= rec["predicted_peak_bytes"] - SLACK_BYTES, rec
    # one plan for ranks that are alike: rank 0 solved it, rank 1 received it
    assert (r0["solves"], r1["solves"]) == (1, 0)
    assert r1["method"] == "loaded"


def test_ddp_peak_is_the_plan_plus_buckets(wrapped_runs):
    """Under DDP the model is exact: plan peak + one copy of the parameters' bytes (buckets)."""
    for rec in wrapped_runs["ddp"]:
        measured = rec["resident"] + rec["rises"][-1]
        predicted = rec["predicted_peak_bytes"] + rec["overhead_bytes"]
        assert abs(measured - predicted) <= 0.05 * measured, rec


def _check_one_compiled_plan(records, tol):
    """One graph, one plan: reduced gradients equal eager DDP's on every step; the last step's rise within the
    plan's budget and within 5% of the compile-time check's measurement (of the memory model's prediction when
    that check did not run)."""
    for rec in records:
        assert len(rec["diffs"]) == 3 and max(rec["diffs"]) <= tol * max(rec["grad_scale"], 1.0), rec
        (plan,) = rec["plans"]
        assert plan["recomputed"] > 0 and plan["predicted_peak_bytes"] <= plan["budget_bytes"], rec
        rise = rec["rises"][-1]
        assert rise <= plan["budget_bytes"] + SLACK_BYTES, rec
        expected = plan["measured_peak_bytes"] or plan["predicted_peak_bytes"]
        assert abs(rise - expected) <= 0.05 * rise, rec
        # DDP rebuilds its gradient buckets in the second step (a copy of the parameters' bytes, once)
        assert rec["rises"][1] <= plan["budget_bytes"] + rec["overhead_bytes"] + SLACK_BYTES, rec


@pytest.mark.parametrize("scenario", ["ddp-compiled", "ddp-compiled-one-graph"])
def test_compiled_plan_under_ddp(compiled_runs, scenario):
    """``torch.compile(DDP(model), backend=remat_torch.backend(0.5))``: one graph (one gradient bucket, or
    several buckets with ``torch._dynamo.config.optimize_ddp = False``), the plan's halves as FX graphs."""
    _check_one_compiled_plan(compiled_runs[scenario], tol=1e-6)


def test_compiled_plan_under_ddp_split_per_bucket(compiled_runs):
    """Dynamo's DDPOptimizer splits the step into one graph per gradient bucket; each piece gets its own plan
    within its own budget (a fraction of that piece's activation memory: the values passed between pieces are
    its outputs, so 0.5 is below what the pieces reach and this runs at 0.9). The step's rise is bounded by the
    sum of the pieces' budgets only, a loose bound."""
    for rec in compiled_runs["ddp-compiled-buckets"]:
        assert max(rec["diffs"]) <= 1e-6 * max(rec["grad_scale"], 1.0), rec
        assert len(rec["plans"]) > 1, rec
        for plan in rec["plans"]:
            assert plan["predicted_peak_bytes"] <= plan["budget_bytes"], rec
        assert rec["rises"][-1] <= sum(p["budget_bytes"] for p in rec["plans"]) + SLACK_BYTES, rec


@pytest.mark.slow
def test_compiled_plan_under_ddp_with_inductor(compiled_inductor_runs):
    """The same with Inductor compiling the halves, at 0.7 (a cold compile per rank: minutes on a loaded 2-core
    machine; at 0.5 the compile-time check found no plan on this model, smallest 0.545); fused kernels round
    differently from eager, hence the looser tolerance."""
    _check_one_compiled_plan(compiled_inductor_runs["ddp-compiled-inductor"], tol=1e-5)
    for rec in compiled_inductor_runs["ddp-compiled-inductor"]:
        assert rec["plans"][0]["measured_peak_bytes"] is not None, rec  # the compile-time check ran


def test_compiled_plan_under_fsdp2(compiled_runs):
    """``torch.compile(fully_shard(model), backend=remat_torch.backend(0.5))``: FSDP2's hooks run outside the
    one compiled graph, which gets the gathered parameters. The reduced gradient shards equal eager FSDP2's on
    every step; the rank's measured peak (its shards and inputs, plus the step's rise) is within the per-rank
    model: what was resident, the gathered parameters, FSDP2's buffers beyond the shard
    (``comm_overhead_bytes`` less the shard already resident) and the plan's peak above the step's start,
    which with the plan's budget in place of its peak is within the per-rank budget."""
    for rec in compiled_runs["fsdp-compiled"]:
        assert rec["grad_types"] == ["DTensor"] and rec["graphs"] == 1, rec
        assert len(rec["diffs"]) == 3 and max(rec["diffs"]) <= 1e-6 * max(rec["grad_scale"], 1.0), rec
        (plan,) = rec["plans"]
        assert plan["recomputed"] > 0 and plan["predicted_peak_bytes"] <= plan["budget_bytes"], rec
        shard = rec["resident"] - 2048  # the parameter shards (the inputs: 2,048 B)
        around = rec["resident"] + rec["param_bytes"] + rec["overhead_bytes"] - shard
        measured = rec["resident"] + rec["rises"][-1]
        assert measured <= around + plan["predicted_peak_bytes"] + SLACK_BYTES, rec
        assert measured <= around + plan["budget_bytes"] + SLACK_BYTES, rec
        # the gathered parameters and the plan's own part are really there
        assert measured >= rec["resident"] + rec["param_bytes"] + plan["measured_peak_bytes"] - SLACK_BYTES, rec
        # compiled_budget_bytes turns this per-rank budget back into the backend's
        assert rec["backend_budget_bytes"] == plan["budget_bytes"], rec


@pytest.mark.slow
def test_compiled_under_fsdp2_per_block(fsdp_compiled_blocks_runs):
    """``fully_shard`` per block, then the root, then ``torch.compile``: Dynamo breaks the graph at each block
    (FSDP2's hooks are skipped), and the break inside the loop over the blocks leaves the model's own forward
    eager; each block's forward is one compiled graph with its own plan (one plan here: both blocks share the
    code), within its own budget (0.6 of that graph's activation memory: 0.5 is below the smallest plan found,
    0.526). The reduced gradient shards equal eager per-block FSDP2's on every step. There is no single plan
    for the step, so no per-rank bound is asserted."""
    for rec in fsdp_compiled_blocks_runs["fsdp-compiled-blocks"]:
        assert rec["grad_types"] == ["DTensor"], rec
        assert len(rec["diffs"]) == 3 and max(rec["diffs"]) <= 1e-6 * max(rec["grad_scale"], 1.0), rec
        assert rec["plans"], rec
        for plan in rec["plans"]:
            assert plan["recomputed"] > 0 and plan["predicted_peak_bytes"] <= plan["budget_bytes"], rec


def _check_dtr_records(records):
    for rec in records:
        assert len(rec["stats"]) == 3 and rec["grad_types"] == ["Tensor"], rec
        assert max(rec["diffs"]) <= 1e-6, rec  # every step, the two plain ones first included
        for st in rec["stats"]:
            assert st["rematerializations"] > 0 and st["peak_bytes"] <= rec["budget_bytes"], rec


def test_live_dtr_under_ddp_gives_the_same_gradients(wrapped_runs):
    _check_dtr_records(wrapped_runs["ddp-dtr"])


@pytest.mark.parametrize("scenario", ["fsdp-dtr", "fsdp-dtr-local"])
def test_live_dtr_under_fsdp2_gives_the_same_gradients(wrapped_runs, scenario):
    """A rank died with SIGSEGV here in three suite runs (issue 39): the runtime replayed FSDP2's all-gather
    buffers (c10d's schemas mark no written argument) and could replay values that read parameters FSDP2 had
    freed. With ``h_dtr_local`` the crash came in 2 of 2 runs before the fix (with ``largest``: a crash in one
    run, a collective timeout in another)."""
    _check_dtr_records(wrapped_runs[scenario])


@pytest.mark.parametrize("scenario", ["fsdp-blocks", "fsdp-blocks-on-use"])
def test_fully_shard_per_block_gradients_and_per_rank_peak(wrapped_runs, scenario):
    """FSDP2 per block (``fully_shard_blocks``: remat first, then each block and the root sharded): the
    reduced gradient shards equal those of the same per-block FSDP2 run without remat on every step, and the
    rank's measured peak is within the per-rank model (plan + ``comm_overhead_bytes(..., blocks=)``), which is
    within the per-rank budget. ``-on-use``: a block is gathered when the plan first reads it, one block at a
    time (``gathered=1``); the model then counts one block's parameters instead of all."""
    for rec in wrapped_runs[scenario]:
        assert rec["sharded"] == ["DTensor"] and rec["grad_types"] == ["DTensor"], rec
        assert rec["recomputed"] > 1, rec
        assert len(rec["diffs"]) == 3 and max(rec["diffs"]) <= 1e-6 * max(rec["grad_scale"], 1.0), rec
        assert rec["predicted_peak_bytes"] <= rec["budget_bytes"], rec
        # per block, the root's all-gather buffer holds only the parameters outside the blocks
        assert rec["overhead_bytes"] < rec["overhead_whole_bytes"], rec
        # a batch of another shape after sharding gets its own plan and the same gradients
        assert rec["num_plans"] == 2 and rec["new_shape_diff"] <= 1e-6 * max(rec["grad_scale"], 1.0), rec
        if rec["gathered"] is not None:  # less the blocks not gathered
            assert rec["overhead_whole_bytes"] - rec["overhead_bytes"] >= min(rec["block_bytes"]), rec
        measured = rec["resident"] + rec["rises"][-1]  # the rank's parameter shards and inputs, and the step
        assert measured <= rec["predicted_peak_bytes"] + rec["overhead_bytes"] + SLACK_BYTES, rec
        assert measured <= rec["budget_bytes"] + rec["overhead_bytes"] + SLACK_BYTES, rec
        # the plan's own part is all there: more than the plan's activations were measured
        assert measured >= rec["predicted_peak_bytes"] - SLACK_BYTES, rec


def test_fully_shard_blocks_on_use_gathers_one_block_at_a_time(wrapped_runs):
    """With ``gathered=1`` each block is gathered when the plan reads it (the forward, then the backward in
    reverse: at least two gathers per block and step), and the rank's steps peak lower than with every block
    gathered for the whole step, by one block (50,816 B here). The smallest step of each run is compared: gloo
    may free an all-gather output later than FSDP2 drops it, which adds a block's bytes to some step."""
    for on_use, whole in zip(wrapped_runs["fsdp-blocks-on-use"], wrapped_runs["fsdp-blocks"]):
        assert on_use["gathers"] >= 2 * len(on_use["block_bytes"]) * 3, on_use
        assert min(on_use["rises"]) + min(on_use["block_bytes"]) // 2 < min(whole["rises"]), (on_use, whole)


def test_plain_fully_shard_per_block_is_refused_with_a_clear_error(wrapped_runs):
    """Without ``fully_shard_blocks`` the blocks' parameters would stay sharded when the plan runs: refused,
    naming the parameter and what to do."""
    for rec in wrapped_runs["fsdp-blocks-plain"]:
        assert rec["error"] is not None, rec
        assert "'blocks.0." in rec["error"], rec
        assert "fully_shard_blocks" in rec["error"], rec


def test_fully_shard_blocks_refuses_bad_input():
    from remat_torch import rematerialize
    from remat_torch.distributed import fully_shard_blocks

    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="`rm`"):
        fully_shard_blocks(net, [net[0]])
    rm = rematerialize(net, (x,), budget=1.0, method="checkpoint-all", cost_model="unit")
    with pytest.raises(ValueError, match="`blocks`"):
        fully_shard_blocks(rm, [])
    with pytest.raises(ValueError, match=r"`blocks\[1\]`"):
        fully_shard_blocks(rm, [net[0], torch.nn.Linear(8, 8)])
    with pytest.raises(ValueError, match=r"`blocks\[0\]`"):
        fully_shard_blocks(rm, [net])
    with pytest.raises(ValueError, match="`gathered`"):
        fully_shard_blocks(rm, [net[0]], gathered=0)


def test_accelerate_prepare_two_ranks(hf_runs):
    for rec in hf_runs["accelerate"]:
        assert rec["num_processes"] == 2 and rec["wrapped"] == "DistributedDataParallel", rec
        assert rec["losses"] == pytest.approx(rec["losses_ref"], rel=1e-6)
        assert len(rec["losses"]) == 3
        assert rec["param_diff"] <= 1e-6, rec


def test_trainer_ddp_two_ranks(hf_runs):
    for rec in hf_runs["trainer"]:
        assert rec["world_size"] == 2 and rec["wrapped"] == "DistributedDataParallel", rec
        assert rec["global_step"] == 3
        assert rec["losses"] == pytest.approx(rec["losses_ref"], rel=1e-5)
        assert rec["param_diff"] <= 1e-5, rec
    # the plan was made for Trainer's call (use_cache off, num_items_in_batch): rank 0 solved, rank 1 reused it,
    # and Trainer's steps made no other
    assert [rec["solves"] for rec in hf_runs["trainer"]] == [1, 0]


def test_comm_overhead_bytes_model():
    from remat_torch.distributed import comm_overhead_bytes

    net = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 3))  # 143 params: 572 bytes
    assert comm_overhead_bytes(net, "ddp", 4) == 572
    assert comm_overhead_bytes(net, "fsdp", 4) == 572 + 2 * 143
    assert comm_overhead_bytes(net, "fsdp", 1) == 2 * 572  # one rank: its shard is everything, no buffer kept
    # per block: shards (2 x 143 B), the root's flat buffer (nothing outside the blocks), the largest block
    assert comm_overhead_bytes(net, "fsdp", 4, blocks=[net[0], net[1]]) == 2 * 143 + 440
    assert comm_overhead_bytes(net, "fsdp", 4, blocks=[net[1]]) == 2 * 143 + 440 + 132
    # one block gathered at a time: the smaller block's 132 B are counted by the plan, not held
    assert comm_overhead_bytes(net, "fsdp", 4, blocks=[net[0], net[1]], gathered=1) == 2 * 143 + 440 - 132
    assert comm_overhead_bytes(net, "fsdp", 4, blocks=[net[0], net[1]], gathered=2) == 2 * 143 + 440
    with pytest.raises(ValueError, match="`gathered`"):
        comm_overhead_bytes(net, "fsdp", 4, gathered=1)
    with pytest.raises(ValueError, match="`gathered`"):
        comm_overhead_bytes(net, "fsdp", 4, blocks=[net[0]], gathered=0)
    with pytest.raises(ValueError, match="`blocks`"):
        comm_overhead_bytes(net, "ddp", 4, blocks=[net[0]])
    with pytest.raises(ValueError, match=r"`blocks\[0\]`"):
        comm_overhead_bytes(net, "fsdp", 4, blocks=[torch.nn.Linear(2, 2)])
    net[1].weight.requires_grad_(False)
    assert comm_overhead_bytes(net, "ddp", 2) == 572 - 120
    with pytest.raises(ValueError, match="`strategy`"):
        comm_overhead_bytes(net, "zero3", 2)
    with pytest.raises(ValueError, match="`world_size`"):
        comm_overhead_bytes(net, "ddp", 0)


def test_compiled_budget_bytes_model():
    from remat_torch.distributed import comm_overhead_bytes, compiled_budget_bytes

    net = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 3))  # 572 bytes of parameters
    # DDP: what was resident, and the buckets DDP rebuilds once (the parameters' bytes)
    assert compiled_budget_bytes(net, 10_000, "ddp", 4, resident_bytes=2_000) == 10_000 - 2_000 - 572
    # FSDP2: the gathered parameters, and FSDP2's buffers beyond the shard already resident (143 B)
    over = comm_overhead_bytes(net, "fsdp", 4)
    assert compiled_budget_bytes(net, "10000B", "fsdp", 4, resident_bytes=2_000) == 10_000 - 2_000 - 572 - over + 143
    over_b = comm_overhead_bytes(net, "fsdp", 4, blocks=[net[0]])
    assert compiled_budget_bytes(net, 10_000, "fsdp", 4, resident_bytes=0, blocks=[net[0]]) == \
        10_000 - 572 - over_b + 143
    with pytest.raises(ValueError, match="`resident_bytes`"):
        compiled_budget_bytes(net, 10_000, "fsdp", 4, resident_bytes=-1)
    with pytest.raises(ValueError, match="`budget`"):
        compiled_budget_bytes(net, 2_000, "fsdp", 4, resident_bytes=1_000)
    with pytest.raises(ValueError, match="`strategy`"):
        compiled_budget_bytes(net, 10_000, "zero3", 4, resident_bytes=0)


def test_rematerialize_shared_without_process_group_is_rematerialize():
    from remat_torch.distributed import rematerialize_shared

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    rm = rematerialize_shared(net, (x,), budget=1.0, method="checkpoint-all", cost_model="unit")
    rm(x).sum().backward()
    assert rm.solves == 1 and net[0].weight.grad is not None


def test_a_budget_in_bytes_is_per_device_with_a_strategy():
    from remat_torch.distributed import comm_overhead_bytes, rematerialize_shared

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    x = torch.randn(256, 64)
    rm = rematerialize_shared(net, (x,), budget=400_000, strategy="fsdp", method="checkpoint-all",
                              cost_model="unit")
    assert rm.result.budget_bytes == 400_000 - comm_overhead_bytes(net, "fsdp", 1)
    assert rm.predicted_peak_bytes + comm_overhead_bytes(net, "fsdp", 1) <= 400_000
    full = rematerialize_shared(net, (x,), budget=1.0, strategy="ddp", method="checkpoint-all", cost_model="unit")
    assert full.result.budget_bytes == rm.result.peak_memory_bytes  # a fraction is of the plan's own memory
    blocks = rematerialize_shared(net, (x,), budget=400_000, strategy="fsdp", blocks=[net[0]],
                                  method="checkpoint-all", cost_model="unit")
    assert blocks.result.budget_bytes == 400_000 - comm_overhead_bytes(net, "fsdp", 1, blocks=[net[0]])
    with pytest.raises(ValueError, match="`budget`"):
        rematerialize_shared(net, (x,), budget=1000, strategy="ddp")
    with pytest.raises(ValueError, match="`strategy`"):
        rematerialize_shared(net, (x,), budget=400_000, strategy="zero")
    with pytest.raises(ValueError, match="`plan`"):
        rematerialize_shared(net, (x,), budget=0.5, plan="saved.json")
