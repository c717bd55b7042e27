"""Plots: what each figure draws (lines, labels, shaded extents), and that the files are written."""

import pytest

pytest.importorskip("matplotlib")

from remat_core import Schedule, solve  # noqa: E402
from remat_core.plot import plot_memory_timeline, plot_schedule_matrices, plot_tradeoff_curves  # noqa: E402
from remat_core.sweep import SweepResult, sweep  # noqa: E402
from remat_core.units import min_budget_bytes  # noqa: E402
from remat_core.zoo import linear_graph, random_training_graph  # noqa: E402


def _check(path, ext):
    data = path.read_bytes()
    assert len(data) > 1000
    if ext == "png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert b"<svg" in data[:2000]


def _labels(ax):
    return [ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith("_")]


def _extent(patch, axis):
    """(low, high) of a span along ``axis`` (0: x, 1: y): a Rectangle or a Polygon by matplotlib version."""
    if hasattr(patch, "get_width"):
        lo = patch.get_x() if axis == 0 else patch.get_y()
        return lo, lo + (patch.get_width() if axis == 0 else patch.get_height())
    vals = [v[axis] for v in patch.get_xy()]
    return min(vals), max(vals)


def _row(method, budget, objective, lower_bound=None, status="feasible", stats=None):
    return {"graph": "g#1", "budget_bytes": budget, "method": method, "options": {}, "status": status,
            "objective": objective, "lower_bound": lower_bound, "peak_memory_bytes": budget if objective else None,
            "base_cost": 10.0, "solve_time_s": 0.0, "message": "", "backend": "", "stats": stats or {}}


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_tradeoff_curves_files(tmp_path, ext):
    g = random_training_graph(6, seed=3)
    res = sweep(g, [10**6, 2 * 10**6], ["checkpoint-all"], scheduler="serial", progress=False)
    path = tmp_path / f"curves.{ext}"
    plot_tradeoff_curves(res, path)
    _check(path, ext)


def test_tradeoff_curves_merge_identical_methods_and_name_the_infeasible_one(tmp_path):
    rows = []
    for b, obj in ((2**30, 30.0), (2 * 2**30, 15.0), (3 * 2**30, 10.0)):
        rows += [_row("ilp", b, obj, lower_bound=obj), _row("lp-rounding", b, obj), _row("greedy", b, obj * 1.2),
                 _row("chain-only", b, None, status="infeasible")]
    fig = plot_tradeoff_curves(SweepResult(rows=rows), tmp_path / "c.png", min_budget_bytes=2**29)
    ax = fig.axes[0]
    # identical curves are one line, labelled with both names; one line per distinct curve
    assert _labels(ax) == ["ilp = lp-rounding", "greedy"]
    merged = next(ln for ln in ax.get_lines() if ln.get_label() == "ilp = lp-rounding")
    # a step curve in GiB: one point per budget plus the last value carried to the right edge, in %
    assert list(merged.get_xdata()[:3]) == [1.0, 2.0, 3.0] and merged.get_drawstyle() == "steps-post"
    assert list(merged.get_ydata()) == [200.0, 50.0, 0.0, 0.0]
    assert ax.get_xlabel().startswith("memory budget (GiB")
    # the infeasible region runs from the left edge to the hard lower bound (0.5 GiB)
    (span,) = ax.patches
    lo, hi = _extent(span, 0)
    assert hi == pytest.approx(0.5) and lo == pytest.approx(ax.get_xlim()[0])
    assert span.get_label() == "no schedule fits (< 512 MiB)"
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["no schedule at any budget:\nchain-only"]


def test_tradeoff_curves_bound_from_the_rows_and_proven_lower_bounds(tmp_path):
    rows = [_row("ilp", 10, None, status="infeasible", stats={"min_budget_lower_bound_bytes": 12}),
            _row("ilp", 20, 30.0, lower_bound=20.0), _row("ilp", 30, 15.0, lower_bound=15.0)]
    fig = plot_tradeoff_curves(SweepResult(rows=rows), tmp_path / "c.svg")
    ax = fig.axes[0]
    assert _labels(ax) == ["ilp", "ilp proven lower bound"]
    bound = ax.get_lines()[1]
    assert list(bound.get_xdata()) == [20.0] and list(bound.get_ydata()) == [100.0]
    (span,) = ax.patches
    assert _extent(span, 0)[1] == pytest.approx(12.0)
    assert ax.get_xlabel().startswith("memory budget (bytes")


def test_tradeoff_curves_need_a_schedule(tmp_path):
    res = sweep(linear_graph(4), [3], ["checkpoint-all"], scheduler="serial", progress=False)
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_tradeoff_curves(res, tmp_path / "x.png")


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_schedule_matrices(tmp_path, ext):
    g = linear_graph(6)
    res = solve(g, min_budget_bytes(g)[0] + 1, method="lp-rounding")
    path = tmp_path / "sub" / f"rs.{ext}"
    fig = plot_schedule_matrices(g, res.schedule, path)
    _check(path, ext)
    r_ax, s_ax = fig.axes
    assert (r_ax.get_title(), s_ax.get_title()) == ("R: computed in stage", "S: kept into stage")
    # the divider between forward and backward nodes, on both axes of both matrices
    first_bwd = int(g.is_backward.argmax())
    for ax in (r_ax, s_ax):
        dividers = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert len(dividers) == 2
        assert {tuple(ln.get_xdata()) for ln in dividers} >= {(first_bwd - 0.5, first_bwd - 0.5)}
    # the colour key names every colour; the title gives the peak in human units and the recomputations
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "first computation", "forward node: recomputed (R), kept (S)", "backward node: recomputed (R), kept (S)",
        "not computed / not kept"]
    assert f"{res.stats['recomputations']} recomputations" in fig._suptitle.get_text()
    assert " B," in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="`schedule`"):
        plot_schedule_matrices(linear_graph(2), Schedule.checkpoint_all(g), tmp_path / "bad.png")


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_memory_timeline(tmp_path, ext):
    g = random_training_graph(6, seed=3).replace(fixed_bytes=5 * 2**20)
    need = min_budget_bytes(g)[0]
    tight = solve(g, need + (g.memory_bytes.max() // 2), method="lp-rounding")
    assert tight.success and tight.stats["recomputations"] > 0
    missing = solve(g, need - 1, method="checkpoint-all")
    path = tmp_path / f"t.{ext}"
    fig = plot_memory_timeline(g, [("all", Schedule.checkpoint_all(g)), ("lp", tight), ("ca", missing)], path,
                               budget_bytes=tight.budget_bytes)
    _check(path, ext)
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0
    labels = _labels(ax)
    assert labels[0].startswith("all: peak ") and labels[1].startswith("lp: peak ")
    assert f"{tight.stats['recomputations']} recomputations" in labels[1]
    assert any(lb.startswith("budget ") for lb in labels) and "recomputation" in labels
    # recomputations are marked: one dot per recomputation of the tight schedule
    dots = [ln for ln in ax.get_lines() if ln.get_label() == "_recomputation"]
    assert len(dots) == 1 and len(dots[0].get_xdata()) == tight.stats["recomputations"]
    # the fixed bytes are a band from 0
    (band,) = ax.patches
    assert _extent(band, 1) == pytest.approx((0.0, 5.0))  # 5 MiB on a MiB axis
    assert band.get_label() == "fixed, always resident (5.00 MiB)"
    # the method without a schedule is named, with its status
    assert [t.get_text() for t in ax.texts] == ["no schedule: ca: infeasible"]
