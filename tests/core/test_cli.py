"""The `remat` command, through remat_core.cli.main and once through the installed console script."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from remat_core.cli import main, parse_budget
from remat_core.zoo import linear_graph


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_solve_prints_json(capsys):
    code, out, _ = run(capsys, "solve", "linear:4", "6", "--schedule")
    data = json.loads(out)
    assert code == 0 and data["status"] == "optimal" and data["peak_memory_bytes"] == 6
    assert len(data["schedule"]["R"]) == 9
    code, out, _ = run(capsys, "solve", "linear:4", "0.5x")
    assert code == 1 and json.loads(out)["status"] == "infeasible"


def test_solve_zoo_model_with_batch_size_and_outputs(capsys, tmp_path):
    out_json, png = tmp_path / "r.json", tmp_path / "rs.png"
    code, out, _ = run(capsys, "solve", "vgg16", "16GB", "--batch-size", "4", "--out", str(out_json),
                       "--plot", str(png))
    assert code == 0 and json.loads(out_json.read_text())["budget_bytes"] == 16 * 10**9
    assert png.stat().st_size > 1000


def test_graph_files_in_every_format(capsys, tmp_path):
    from remat_core.zoo.models import DATA_DIR

    p = tmp_path / "g.json"
    linear_graph(3).save(p)
    assert run(capsys, "solve", str(p), "100")[0] == 0
    assert run(capsys, "solve", os.path.join(DATA_DIR, "keras_vgg16.json"), "16GB")[0] == 0


def test_budget_parsing():
    g = linear_graph(4)
    assert parse_budget("123") == 123
    assert parse_budget("2GiB") == 2 * 2**30 and parse_budget("16GB") == 16 * 10**9
    assert parse_budget("1x", g) == 6
    for bad in ("lots", "0", "-5GiB"):
        with pytest.raises(ValueError, match="budget"):
            parse_budget(bad, g)


def test_errors_are_reported_not_raised(capsys):
    code, _, err = run(capsys, "solve", "linear:4", "lots")
    assert code == 2 and "remat: error: budget 'lots'" in err
    code, _, err = run(capsys, "solve", "no-such-graph", "10")
    assert code == 2 and "no-such-graph" in err
    code, _, err = run(capsys, "solve", "linear:4", "10", "--method", "nope")
    assert code == 2 and "available methods" in err
    with pytest.raises(SystemExit):
        main(["sweep", "linear:4", "--workers", "0"])


def test_sweep_command_resumes_and_plots(capsys, tmp_path):
    out, png = tmp_path / "s.jsonl", tmp_path / "curves.svg"
    args = ["sweep", "linear:6", "--budgets", "0.6x,0.8x,1x", "--methods", "checkpoint-all",
            "--scheduler", "serial", "--out", str(out), "--plot", str(png), "--no-progress"]
    code, text, _ = run(capsys, *args)
    assert code == 0 and "3 solves computed, 0 reused" in text and "approximation ratio" in text
    assert png.stat().st_size > 1000 and len(out.read_text().splitlines()) == 3
    code, text, _ = run(capsys, *args, "--json")
    data = json.loads(text)
    assert data["computed"] == 0 and data["reused"] == 3 and len(data["rows"]) == 3


def test_max_batch_command(capsys):
    code, text, _ = run(capsys, "max-batch", "linear:4", "--budget", "30", "--no-progress")
    data = json.loads(text)
    assert code == 0 and data["batch_size"] == 5 and data["result"]["peak_memory_bytes"] == 30
    code, text, _ = run(capsys, "max-batch", "vgg16", "--budget", "16GB", "--no-progress")
    assert code == 0 and json.loads(text)["batch_size"] > 100
    code, _, err = run(capsys, "max-batch", "linear:4", "--budget", "3", "--no-progress")
    assert code == 1


def test_plot_command(capsys, tmp_path):
    sweep_file = tmp_path / "s.jsonl"
    run(capsys, "sweep", "linear:5", "--num", "4", "--methods", "checkpoint-all", "--scheduler", "serial",
        "--out", str(sweep_file), "--no-progress")
    for argv, name in ((["curves", str(sweep_file)], "c.png"),
                       (["schedule", "linear:5", "1x"], "rs.svg"),
                       (["timeline", "linear:5", "1x", "--method", "checkpoint-all"], "t.png")):
        path = tmp_path / name
        code, _, _ = run(capsys, "plot", *argv, "-o", str(path))
        assert code == 0 and path.stat().st_size > 1000
    code, _, err = run(capsys, "plot", "schedule", "linear:5", "-o", str(tmp_path / "x.png"))
    assert code == 2 and "needs a budget" in err


def test_demo_writes_table_and_plots(capsys, tmp_path):
    code, text, _ = run(capsys, "demo", "--out", str(tmp_path), "--graph", "linear:6", "--scheduler", "serial",
                        "--no-progress", "--methods", "checkpoint-all")
    assert code == 0 and "checkpoint-all" in text and "optimal" in text
    for name in ("sweep.jsonl", "tradeoff.png", "tradeoff.svg", "schedule_matrices.png", "schedule_matrices.svg",
                 "memory_timeline.png", "memory_timeline.svg", "plan.json", "graph.json"):
        assert (tmp_path / name).stat().st_size > 0, name


def test_installed_console_script(tmp_path):
    exe = shutil.which("remat", path=os.path.dirname(sys.executable)) or shutil.which("remat")
    if exe is None:
        pytest.skip("the `remat` console script is not installed (pip install -e .)")
    help_text = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    for cmd in ("solve", "sweep", "max-batch", "plot", "demo"):
        assert cmd in help_text
    res = subprocess.run([exe, "solve", "linear:3", "1KiB"], capture_output=True, text=True)
    assert res.returncode == 0 and json.loads(res.stdout)["status"] == "optimal"
