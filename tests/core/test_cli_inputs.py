"""The `remat` command on inputs a newcomer or a hostile tester gives it (issue 36)."""

import json

import pytest

from remat_core.cli import main, to_json
from remat_core.zoo import linear_graph


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _strict_json(text):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # the sum of costs overflows on purpose
def test_json_output_is_strict_json_when_the_cost_overflows(capsys, tmp_path):
    g = linear_graph(4)
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(g.replace(cost=g.cost * 1e308).to_dict()))
    out_file = tmp_path / "r.json"
    code, out, _ = run(capsys, "solve", str(path), "1.0", "--method", "checkpoint-all", "--json",
                       "--out", str(out_file))
    assert code == 0
    data = _strict_json(out)   # Python's json wrote `Infinity`, which no strict parser reads
    assert data["objective"] == "inf" and float(data["objective"]) == float("inf")
    assert _strict_json(out_file.read_text())["objective"] == "inf"


def test_to_json_writes_non_finite_numbers_as_strings():
    assert to_json({"a": [float("nan"), float("-inf"), 1.5], "b": (float("inf"),)}) == \
        '{"a": ["nan", "-inf", 1.5], "b": ["inf"]}'


@pytest.mark.parametrize("budget,line", [("1", "budget    10 B (1.00 of activation memory)"),
                                         ("1.0", "budget    10 B (1.00 of activation memory)"),
                                         ("0.5", "budget    5 B (0.50 of activation memory)"),
                                         ("7", "budget    7 B (0.70 of activation memory)"),
                                         ("7B", "budget    7 B (0.70 of activation memory)")])
def test_budgets_mean_the_same_on_the_command_line(capsys, budget, line):
    code, out, _ = run(capsys, "solve", "linear:8", budget, "--method", "checkpoint-all")   # peak 10 B
    assert out.splitlines()[1] == line


@pytest.mark.parametrize("budget,words", [("0B", "at least 1 byte"), ("1.5", "whole number of bytes"),
                                          ("inf", "size"), ("-1", "above 0"),
                                          # zero was clamped to "budget 1 B"; "50%" listed only the size forms
                                          ("0x", "above 0"), ("0.0", "above 0"), ("-0", "above 0"),
                                          ("50%", "fraction of activation memory in (0, 1] (0.5 or '0.5x')")])
def test_a_bad_budget_is_one_line(capsys, budget, words):
    code, out, err = run(capsys, "solve", "linear:8", budget, "--method", "checkpoint-all")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err


def test_max_batch_takes_bytes_not_a_fraction(capsys):
    code, _, err = run(capsys, "max-batch", "linear:8", "--budget", "0.5", "--no-progress")
    assert code == 2 and "`--budget` of max-batch is total bytes" in err


# ---------------------------------------------------------------- zoo names round-trip
def test_every_zoo_graph_is_listed_under_a_name_the_cli_accepts_and_its_own_name_loads_it(capsys):
    from remat_core.cli import load_graph_arg
    from remat_core.sweep import graph_key
    from remat_core.zoo.models import list_zoo, zoo_graph

    code, out, _ = run(capsys, "zoo", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows] == list_zoo()
    shorts = {r["short_name"] for r in rows}
    assert {"vgg16", "unet", "mobilenet", "resnet50"} <= shorts   # the names the docs use
    for r in rows:
        g = zoo_graph(r["name"])
        for spec in (r["name"], r["short_name"], r["graph_name"]):
            assert graph_key(load_graph_arg(spec)) == graph_key(g), spec
    # the name a graph prints at another batch size (the demo prints unet-b32) names it again
    g32 = load_graph_arg("unet", batch_size=32)
    assert g32.name == "unet-b32" and graph_key(load_graph_arg("unet-b32")) == graph_key(g32)
    code, out, _ = run(capsys, "zoo")
    assert code == 0 and out.splitlines()[0].split()[:2] == ["name", "file"]
    assert any(ln.split()[:2] == ["vgg16", "keras_vgg16"] for ln in out.splitlines())


def test_a_batch_size_that_disagrees_with_the_name_is_an_error(capsys):
    code, _, err = run(capsys, "solve", "unet-b32", "0.5", "--batch-size", "16", "--method", "checkpoint-all")
    assert code == 2 and "disagrees" in err


def test_max_batch_prints_the_cost_ratio_not_a_percentage_of_it(capsys):
    # checkpoint-all recomputes nothing: its cost is 1.00x the cost without recomputation (was "+100.0%")
    code, out, _ = run(capsys, "max-batch", "linear:4", "--budget", "30", "--no-progress")
    assert code == 0 and "compute 1.00x the cost without recomputation (+0.0%)" in out


# ---------------------------------------------------------------- graph files
def test_a_missing_graph_file_says_file_not_found(capsys, tmp_path):
    missing = str(tmp_path / "nope.json")
    code, _, err = run(capsys, "solve", missing, "0.5")
    assert code == 2 and err.strip() == f"remat: error: file not found: {missing}"
    code, _, err = run(capsys, "max-batch", missing, "--budget", "1GB", "--no-progress")
    assert code == 2 and "file not found" in err
    code, _, err = run(capsys, "solve", "no_such_graph", "0.5")
    assert code == 2 and "no such file" in err and "remat zoo" in err


def test_remat_format_errors_name_the_file(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "remat-graph", "version": 1, "nodes": [{"name": "a", "cost": -1}]}))
    code, _, err = run(capsys, "solve", str(path), "0.5")
    assert code == 2 and str(path) in err and "`cost`" in err


def test_an_empty_graph_file_is_refused(capsys, tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"format": "remat-graph", "version": 1, "nodes": []}))
    code, out, err = run(capsys, "solve", str(path), "0.5")
    assert code == 2 and out == "" and "at least one node" in err and str(path) in err


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000])
def test_deeply_nested_json_is_a_clear_error(capsys, tmp_path, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    code, _, err = run(capsys, "solve", str(path), "0.5")
    assert code == 2 and "nested too deeply" in err and "internal error" not in err


def test_deeply_nested_json_through_graph_load(tmp_path):
    from remat_core import Graph, GraphValidationError

    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GraphValidationError, match="nested too deeply"):
        Graph.load(path)


def test_the_options_example_of_the_help_works(capsys):
    from remat_core.cli import build_parser

    help_text = build_parser(plugins=[])._subparsers._group_actions[0].choices["solve"].format_help()
    example = help_text.split("e.g. '", 1)[1].split("'", 1)[0]
    code, out, err = run(capsys, "solve", "linear:6", "0.6", "--method", "ilp", "--options", example)
    assert code == 0, err
