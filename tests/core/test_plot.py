"""Plots: files written, non-empty, in the format of their extension (remat_core.plot)."""

import pytest

pytest.importorskip("matplotlib")

from remat_core import Schedule, solve  # noqa: E402
from remat_core.plot import plot_memory_timeline, plot_schedule_matrices, plot_tradeoff_curves  # noqa: E402
from remat_core.sweep import SweepResult, sweep  # noqa: E402
from remat_core.zoo import linear_graph, random_training_graph  # noqa: E402


def _check(path, ext):
    data = path.read_bytes()
    assert len(data) > 1000
    if ext == "png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert b"<svg" in data[:2000]


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_tradeoff_curves(tmp_path, ext):
    g = random_training_graph(6, seed=3)
    res = sweep(g, [10**6, 2 * 10**6], ["checkpoint-all"], scheduler="serial", progress=False)
    path = tmp_path / f"curves.{ext}"
    plot_tradeoff_curves(res, path)
    _check(path, ext)


def test_tradeoff_curves_with_lower_bounds_and_several_methods(tmp_path):
    rows = []
    for b, obj, lb in ((10, 30.0, 20.0), (20, 15.0, 15.0)):
        for m, o in (("ilp", obj), ("approx", obj * 1.1)):
            rows.append({"graph": "g#1", "budget_bytes": b, "method": m, "options": {},
                         "status": "feasible", "objective": o, "lower_bound": lb if m == "ilp" else None,
                         "peak_memory_bytes": b, "base_cost": 10.0, "solve_time_s": 0.0, "message": "",
                         "backend": "", "stats": {}})
    path = tmp_path / "c.png"
    plot_tradeoff_curves(SweepResult(rows=rows), path, title="t")
    _check(path, "png")


def test_tradeoff_curves_need_a_schedule(tmp_path):
    res = sweep(linear_graph(4), [3], ["checkpoint-all"], scheduler="serial", progress=False)
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_tradeoff_curves(res, tmp_path / "x.png")


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_schedule_matrices(tmp_path, ext):
    g = random_training_graph(5, seed=1)
    path = tmp_path / "sub" / f"rs.{ext}"
    plot_schedule_matrices(g, Schedule.checkpoint_all(g), path)
    _check(path, ext)
    with pytest.raises(ValueError, match="`schedule`"):
        plot_schedule_matrices(linear_graph(2), Schedule.checkpoint_all(g), tmp_path / "bad.png")


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_memory_timeline(tmp_path, ext):
    g = linear_graph(5)
    res = solve(g, 100, method="checkpoint-all")
    path = tmp_path / f"t.{ext}"
    plot_memory_timeline(g, [("a", res.schedule), ("b", Schedule.checkpoint_all(g))], path, budget_bytes=9)
    _check(path, ext)
