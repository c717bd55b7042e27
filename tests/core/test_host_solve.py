"""Planning with a host tier: routing through ``solve``, the joint plan against remat and offload alone."""

import math

import pytest

from remat_core import checkpoint_all_peak_bytes, solve
from remat_core.host import HostResult, offload_all_plan, offload_to_budget, simulate_host, solve_offload
from remat_core.schedule import Schedule
from remat_core.zoo import linear_graph, random_training_graph


def _graph(seed=0, layers=6):
    return random_training_graph(layers, seed=seed).replace(meta={"cost_unit": "s"})


@pytest.mark.parametrize("bw", [None, 0])
@pytest.mark.parametrize("method", ["checkpoint-all", "linearized-greedy", "lp-rounding"])
def test_no_bandwidth_is_todays_result(bw, method):
    g = _graph(1)
    budget = int(0.8 * checkpoint_all_peak_bytes(g))
    today = solve(g, budget, method=method)
    res = solve(g, budget, method=method, host_bandwidth=bw)
    assert not isinstance(res, HostResult)
    assert res.status == today.status and res.objective == today.objective and res.schedule == today.schedule


@pytest.mark.parametrize("seed", range(3))
def test_infinite_bandwidth_offloads_instead_of_recomputing(seed):
    g = _graph(seed)
    floor = simulate_host(g, offload_to_budget(g, Schedule.checkpoint_all(g), 1, math.inf) or
                          offload_all_plan(g), math.inf).peak_device_bytes
    for frac in (1.0, 0.7, 0.4):
        budget = max(floor, int(frac * checkpoint_all_peak_bytes(g)))
        # the remat method's plans (with recomputation) are candidates too: free copies must beat them
        res = solve(g, budget, method="linearized-greedy", host_bandwidth=math.inf)
        assert isinstance(res, HostResult) and res.success
        assert res.stats["recomputations"] == 0
        assert res.objective == pytest.approx(float(g.cost.sum()))
        assert res.peak_memory_bytes <= budget


def test_offload_to_budget_fits_whenever_it_returns_a_plan():
    for seed in range(6):
        g = _graph(seed, layers=8)
        top = checkpoint_all_peak_bytes(g)
        for frac in (0.9, 0.6, 0.3, 0.1):
            budget = int(frac * top)
            plan = offload_to_budget(g, Schedule.checkpoint_all(g), budget, 1.0)
            if plan is not None:
                sim = simulate_host(g, plan, 1.0)
                assert sim.peak_device_bytes <= budget and sim.recompute_count == 0


@pytest.mark.parametrize("bw", [0.5, 2.0, 8.0])
def test_joint_is_at_least_as_fast_as_each_alone(bw):
    g = _graph(3, layers=8)
    top = checkpoint_all_peak_bytes(g)
    save_on_cpu = simulate_host(g, offload_all_plan(g), bw)
    for frac in (0.95, 0.75, 0.55, 0.4):
        budget = int(frac * top)
        remat = solve(g, budget, method="linearized-greedy")
        joint = solve(g, budget, method="linearized-greedy", host_bandwidth=bw)
        if remat.success:
            assert joint.success and joint.objective <= remat.objective + 1e-9
        if save_on_cpu.peak_device_bytes <= budget:
            assert joint.success and joint.objective <= save_on_cpu.time + 1e-9
        if joint.success:
            again = simulate_host(g, joint.host_plan, bw)
            assert again.peak_device_bytes == joint.peak_memory_bytes <= budget
            assert again.time == joint.objective


def test_pofo_and_offload_all_methods():
    g = linear_graph(6).replace(meta={"cost_unit": "s"})
    res = solve(g, 5, method="pofo", host_bandwidth=1.0)
    assert res.success and res.stats["plan"].startswith("pofo") and res.peak_memory_bytes <= 5
    assert res.host_plan.num_offloads > 0
    everything = solve(g, 100, method="offload-all", host_bandwidth=1.0)
    assert everything.success and everything.host_plan.num_offloads == 7
    # the joint search includes POFO on a chain, so it is never slower
    assert solve(g, 5, method="checkpoint-all", host_bandwidth=1.0).objective <= res.objective
    tiny = solve(g, 1, method="checkpoint-all", host_bandwidth=1.0)
    assert tiny.status.value == "infeasible" and tiny.host_plan is None and not tiny.success


def test_bad_input_names_the_argument():
    g = _graph()
    with pytest.raises(ValueError, match="`host_bandwidth`"):
        solve(g, 100, host_bandwidth="fast")
    with pytest.raises(ValueError, match="`host_bandwidth`"):
        solve(g, 100, host_bandwidth=-1)
    with pytest.raises(ValueError, match="`budget_bytes`"):
        solve_offload(g, -5, host_bandwidth=1.0)
    with pytest.raises(ValueError, match="`base_budgets`"):
        solve_offload(g, 100, host_bandwidth=1.0, base_budgets=0)
    with pytest.raises(ValueError, match="`cost_per_s`"):
        solve(g.replace(meta={"cost_unit": "node"}), int(0.5 * checkpoint_all_peak_bytes(g)),
              method="checkpoint-all", host_bandwidth=1.0)


def test_cli_solve_with_host_bandwidth(capsys, tmp_path):
    from remat_core.cli import main

    out = tmp_path / "res.json"
    assert main(["solve", "linear:8", "0.3", "--method", "checkpoint-all", "--host-bandwidth", "inf",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "values offloaded" in text
    import json

    data = json.loads(out.read_text())
    assert data["stats"]["recomputations"] == 0 and data["stats"]["offloaded_values"] > 0
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    assert main(["solve", "linear:8", "0.3", "--method", "checkpoint-all", "--host-bandwidth", "inf",
                 "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000
    assert main(["solve", "linear:8", "0.3", "--method", "checkpoint-all", "--host-bandwidth", "fast"]) == 2
    assert "`host_bandwidth`" in capsys.readouterr().err


def test_plan_file_round_trip_keeps_the_copies(tmp_path):
    import json

    from remat_core.cli import main
    from remat_core.errors import ScheduleVerificationError
    from remat_core.host import Offload, Prefetch, Wait, host_result_from_dict
    from remat_core.plan import InvalidPlanError

    g = linear_graph(6).replace(meta={"cost_unit": "s"})
    res = solve(g, 5, method="pofo", host_bandwidth=1.0)   # POFO's plans wait for their prefetches
    kinds = {type(s) for s in res.host_plan.statements}
    assert {Offload, Prefetch, Wait} <= kinds
    data = json.loads(json.dumps(res.to_dict(include_schedule=True)))
    back = host_result_from_dict(g, data)
    assert back.host_plan.statements == res.host_plan.statements
    assert (back.objective, back.peak_memory_bytes, back.peak_host_bytes) == (
        res.objective, res.peak_memory_bytes, res.peak_host_bytes)
    assert "host_plan" not in res.to_dict()   # only with the schedule, as the CLI's --schedule says
    # the file's numbers are never trusted: the plan is re-simulated against its budget
    with pytest.raises(ScheduleVerificationError, match="`data`"):
        host_result_from_dict(g, {**data, "budget_bytes": res.peak_memory_bytes - 1})
    with pytest.raises(InvalidPlanError, match="`plan`"):
        host_result_from_dict(g, {**data, "host_plan": {"num_nodes": g.n, "statements": [["jump", 1]]}},
                              argument="plan")
    with pytest.raises(InvalidPlanError, match="no host plan"):
        host_result_from_dict(g, res.to_dict())
    with pytest.raises(InvalidPlanError, match="does not run on this graph"):
        host_result_from_dict(linear_graph(7).replace(meta={"cost_unit": "s"}), data)
    # `remat solve --host-bandwidth ... --schedule --out` writes the same plan
    out = tmp_path / "res.json"
    assert main(["solve", "linear:6", "5", "--method", "pofo", "--host-bandwidth", "inf", "--schedule",
                 "--out", str(out)]) == 0
    from_cli = host_result_from_dict(linear_graph(6), json.loads(out.read_text()))
    assert from_cli.host_plan.statements == solve(linear_graph(6), 5, method="pofo", host_bandwidth=math.inf
                                                  ).host_plan.statements
    assert {Offload, Prefetch, Wait} <= {type(s) for s in from_cli.host_plan.statements}


def test_a_run_recorded_as_events_is_a_plan_with_the_same_time_and_peak():
    from remat_core.host import host_plan_from_execution_plan
    from remat_core.host.greedy import plan_from_sequence

    checked = 0
    for seed in range(3):
        g = _graph(seed, layers=8)
        top = checkpoint_all_peak_bytes(g)
        for frac in (0.9, 0.6, 0.4):
            res = solve(g, int(frac * top), method="dtr")
            if not res.success or res.sequence is None:
                continue
            checked += 1
            sim = simulate_host(g, host_plan_from_execution_plan(plan_from_sequence(g, res.sequence)))
            assert (sim.time, sim.peak_device_bytes) == (res.objective, res.peak_memory_bytes)
            # the joint search starts from that run: never slower than it
            joint = solve_offload(g, int(frac * top), method="dtr", host_bandwidth=1.0)
            assert joint.objective <= res.objective
    assert checked >= 5   # 5 of the 9 (graph, budget) pairs have a dtr plan


def test_partial_offloads_in_the_greedy_and_the_joint_search():
    """With ``partial``, the greedy may offload a chunk of a value (the bytes the stretch needs): every plan
    fits, the chunks' memory is exact, and on this graph the chunk copies less and stalls less."""
    g = random_training_graph(12, seed=0).replace(meta={"cost_unit": "s"})
    top = checkpoint_all_peak_bytes(g)
    budget = g.fixed_bytes + (top - g.fixed_bytes) // 2
    whole = offload_to_budget(g, Schedule.checkpoint_all(g), budget, 1.0)
    part = offload_to_budget(g, Schedule.checkpoint_all(g), budget, 1.0, partial=True)
    sw, sp = simulate_host(g, whole, 1.0), simulate_host(g, part, 1.0)
    assert part.num_partial_offloads >= 1 and whole.num_partial_offloads == 0
    assert sp.peak_device_bytes <= budget and sw.peak_device_bytes <= budget
    assert (sp.time, sp.copied_bytes) < (sw.time, sw.copied_bytes)   # measured: 293 vs 295
    for f in (0.4, 0.6, 0.8):   # the joint search with chunks: what it returns fits, never slower than without
        b = g.fixed_bytes + int(f * (top - g.fixed_bytes))
        res = solve_offload(g, b, method="checkpoint-all", host_bandwidth=2.0, partial=0.5, base_budgets=1)
        plain = solve_offload(g, b, method="checkpoint-all", host_bandwidth=2.0, base_budgets=1)
        assert res.success and simulate_host(g, res.host_plan, 2.0).peak_device_bytes <= b
        assert res.objective <= plain.objective + 1e-9
    with pytest.raises(ValueError, match="`partial`"):
        solve_offload(g, b, host_bandwidth=2.0, partial=0.5, schedule_required=True)
    with pytest.raises(ValueError, match="`partial`"):
        solve_offload(g, b, host_bandwidth=2.0, partial=2)
