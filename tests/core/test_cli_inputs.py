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
                                          ("inf", "size"), ("-1", "[0, 1]")])
def test_a_bad_budget_is_one_line(capsys, budget, words):
    code, out, err = run(capsys, "solve", "linear:8", budget, "--method", "checkpoint-all")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err


def test_max_batch_takes_bytes_not_a_fraction(capsys):
    code, _, err = run(capsys, "max-batch", "linear:8", "--budget", "0.5", "--no-progress")
    assert code == 2 and "`--budget` of max-batch is total bytes" in err
