"""Byte sizes and budgets (remat_core.units): one meaning everywhere."""

import numpy as np
import pytest

from remat_core import Graph, checkpoint_all_peak_bytes
from remat_core.units import (
    activation_bytes, budget_fraction, format_bytes, min_budget_bytes, parse_bytes, resolve_budget,
)
from remat_core.zoo import linear_graph


@pytest.mark.parametrize("text, expected", [
    ("8GiB", 8 * 2**30), ("800MB", 800 * 10**6), ("1 GiB", 2**30), ("1.5KiB", 1536), ("4096", 4096),
    ("2g", 2 * 2**30), (123, 123),
])
def test_parse_bytes_reads_sizes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["inf", "1e400", "-5GiB", "1.5x", "abc", "0", "", "5 parsecs"])
def test_parse_bytes_refuses_what_is_not_a_size_naming_the_argument(bad):
    with pytest.raises(ValueError, match="`budget`"):
        parse_bytes(bad, "budget")


@pytest.mark.parametrize("bad", [True, None, 1.5, [1]])
def test_parse_bytes_refuses_other_types(bad):
    with pytest.raises(TypeError, match="`size`"):
        parse_bytes(bad)


def test_format_bytes_is_human():
    assert format_bytes(3 * 2**29) == "1.50 GiB"
    assert format_bytes(999) == "999 B"
    assert format_bytes(2**40) == "1.00 TiB"


def test_fractions_are_of_activation_memory_and_round_trip():
    g = linear_graph(6).replace(fixed_bytes=100)
    peak = checkpoint_all_peak_bytes(g)
    act = activation_bytes(g)
    assert act == peak - 100
    assert resolve_budget(g, 1.0) == peak
    assert resolve_budget(g, 0.5) == resolve_budget(g, "0.5") == resolve_budget(g, "0.5x") == 100 + act // 2
    assert budget_fraction(g, resolve_budget(g, 0.5)) == pytest.approx(0.5)
    assert resolve_budget(g, "1KiB") == 1024 and resolve_budget(g, 1024) == 1024   # bytes stay bytes
    with pytest.raises(ValueError, match="`budget`.*\\(0, 1\\]"):
        resolve_budget(g, 1.5)


def test_gradient_nodes_are_not_activation_memory():
    """An adapter that models parameter gradients as nodes names them; a fraction leaves them out, so that
    1.0 is still checkpoint-all's peak and 0.0 saves exactly the activations."""
    # x -> a -> loss -> ga -> gw (gw: a parameter gradient, kept to the end by the sink)
    nodes = [
        {"name": "a", "cost": 1, "memory_bytes": 40, "deps": []},
        {"name": "loss", "cost": 1, "memory_bytes": 1, "deps": ["a"]},
        {"name": "ga", "cost": 1, "memory_bytes": 40, "deps": ["a", "loss"], "is_backward": True},
        {"name": "gw", "cost": 1, "memory_bytes": 60, "deps": ["ga"], "is_backward": True},
        {"name": "sink", "cost": 0, "memory_bytes": 0, "deps": ["gw"], "is_backward": True},
    ]
    plain = Graph(nodes, fixed_bytes=10)
    marked = Graph(nodes, fixed_bytes=10, meta={"gradient_nodes": ["gw"]})
    peak = checkpoint_all_peak_bytes(marked)
    zeroed = plain.replace(memory_bytes=np.array([40, 1, 40, 0, 0]))
    assert activation_bytes(marked) == checkpoint_all_peak_bytes(zeroed) - 10 < activation_bytes(plain)
    assert resolve_budget(marked, 1.0) == peak
    assert resolve_budget(marked, 0.01) == peak - activation_bytes(marked) + int(0.01 * activation_bytes(marked))
    assert budget_fraction(marked, resolve_budget(marked, 0.25)) == pytest.approx(0.25, abs=1e-2)


def test_min_budget_names_the_node_that_sets_it():
    g = linear_graph(4).replace(fixed_bytes=7)
    need, node = min_budget_bytes(g)
    assert need == g.min_budget_lower_bound_bytes() and node in {n.name for n in g.nodes()}


# ---------------------------------------------------------------- one meaning of a budget (issue 36)
@pytest.mark.parametrize("fraction", [1, "1", 1.0, "1.0", "1x"])
def test_a_bare_one_is_all_of_activation_memory_not_one_byte(fraction):
    g = linear_graph(8)   # checkpoint-all peak 10 bytes
    assert resolve_budget(g, fraction) == 10


@pytest.mark.parametrize("zero", [0, "0", 0.0, "0.0", "0x", "-0", -0.0])
def test_a_bare_zero_is_the_zero_fraction_which_no_schedule_fits(zero):
    """Read as the fraction 0 (not 0 bytes), it leaves nothing for the activations: one error naming `budget`
    and the least a schedule needs (it was the fixed bytes, or 1 byte when there are none, and planned on)."""
    for fixed in (100, 0):
        g = linear_graph(8).replace(fixed_bytes=fixed)
        with pytest.raises(ValueError, match="`budget` must be above 0") as info:
            resolve_budget(g, zero)
        assert f"needs {fixed + 3} B, 0.30 of activation memory" in str(info.value)


@pytest.mark.parametrize("budget,expected", [(2, 2), ("2", 2), ("123456", 123456), (8e9, 8 * 10**9), ("1e9", 10**9),
                                             ("1B", 1), ("8GB", 8 * 10**9), ("8G", 8 * 2**30), ("8Gi", 8 * 2**30),
                                             ("8GiB", 8 * 2**30)])
def test_bytes_need_a_unit_or_a_whole_number_above_one(budget, expected):
    assert resolve_budget(linear_graph(8), budget) == expected


@pytest.mark.parametrize("bad,words", [("0B", "at least 1 byte"), (1.5, "whole number of bytes"),
                                       ("1.5", "whole number of bytes"), (-1, "above 0"), ("-0.5", "above 0"),
                                       (float("inf"), "finite"), (float("nan"), "finite"), ("1.5x", "in (0, 1]"),
                                       # zero was clamped to 1 byte; "50%" was told only the size forms
                                       (0, "above 0"), ("0x", "above 0"), ("0.0", "above 0"), ("-0", "above 0"),
                                       ("50%", "fraction of activation memory in (0, 1]")])
def test_a_budget_that_is_neither_is_one_error_naming_the_argument(bad, words):
    with pytest.raises(ValueError, match="`budget`") as info:
        resolve_budget(linear_graph(8), bad)
    assert words in str(info.value)


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_solve_refuses_a_non_finite_budget_naming_budget_bytes(bad):
    from remat_core import solve

    with pytest.raises(ValueError, match="`budget_bytes`"):   # int(inf) raised a bare OverflowError
        solve(linear_graph(4), bad)


def test_an_empty_graph_is_refused():
    from remat_core import Graph, GraphValidationError

    for build in (lambda: Graph([]), lambda: Graph.from_arrays([]),
                  lambda: Graph.from_dict({"format": "remat-graph", "version": 1, "nodes": []})):
        with pytest.raises(GraphValidationError, match="at least one node"):
            build()
