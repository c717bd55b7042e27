"""``ilp`` beyond its memory guard: the program is not built, and the result says so (issues 36 and 37)."""

import pytest

from remat_core import solve
from remat_core.cli import main
from remat_core.zoo import linear_graph


def test_ilp_over_its_model_limit_says_the_program_was_not_built():
    g = linear_graph(20)
    res = solve(g, 11, method="ilp", model_bytes_limit=1)
    assert res.success and res.method == "ilp"
    assert res.stats["model_built"] is False
    assert res.stats["schedule_method"] in ("dtr", "checkpoint-all", "rotor", "ap-greedy", "linearized-greedy",
                                            "linearized-sqrtn")
    assert "not built" in res.message and res.stats["schedule_method"] in res.message
    assert res.stats["bound_method"] == "each node once" and res.lower_bound == pytest.approx(float(g.cost.sum()))


def test_ilp_within_its_model_limit_builds_and_solves():
    res = solve(linear_graph(6), 5, method="ilp")
    assert res.status.value == "optimal" and "model_built" not in res.stats and "schedule_method" not in res.stats


def test_the_cli_names_the_method_that_made_the_schedule(capsys):
    code = main(["solve", "linear:20", "0.5", "--method", "ilp", "--options", '{"model_bytes_limit": 1}'])
    out = capsys.readouterr().out
    assert code == 0
    method_line = next(ln for ln in out.splitlines() if ln.startswith("method"))
    assert "NOT built" in method_line and "schedule from" in method_line
    bound_line = next(ln for ln in out.splitlines() if ln.startswith("bound"))
    assert "none solved" in bound_line and "gap" not in bound_line


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_a_bad_model_limit_is_named(bad):
    with pytest.raises(ValueError, match="model_bytes_limit"):
        solve(linear_graph(4), 5, method="ilp", model_bytes_limit=bad)
