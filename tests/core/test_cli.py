"""The `remat` command, through remat_core.cli.main and in fresh processes (where native output would show)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from remat_core.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def remat(*argv, timeout=120):
    """`remat ARGV` in a fresh interpreter: what a user's shell sees."""
    return subprocess.run([sys.executable, "-m", "remat_core.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_solve_json_in_a_fresh_process_is_json_only():
    # ilp runs HiGHS, whose constructor prints a banner on fd 1 once per process (workers included)
    res = remat("solve", "vgg16", "0.9", "--batch-size", "32", "--method", "ilp", "--time-limit", "20", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)  # raises if anything else is on stdout
    assert data["status"] == "optimal" and data["method"] == "ilp" and data["graph"] == "vgg16-b32"
    assert "HiGHS" not in res.stdout and "HiGHS" not in res.stderr


def test_verbose_logs_and_shows_solver_output_on_stderr_only():
    res = remat("-v", "solve", "vgg16", "0.9", "--batch-size", "32", "--method", "ilp", "--json")
    assert res.returncode == 0
    json.loads(res.stdout)
    assert "solving vgg16-b32" in res.stderr and "Running HiGHS" in res.stderr


def test_solve_human_summary(capsys):
    code, out, _ = run(capsys, "solve", "linear:8", "0.5", "--method", "checkpoint-all")
    assert code == 1 and "infeasible" in out
    code, out, _ = run(capsys, "solve", "linear:8", "0.5", "--method", "lp-rounding")
    lines = out.splitlines()
    assert code == 0 and len(lines) <= 8
    assert lines[1] == "budget    5 B (0.50 of activation memory)"  # linear:8: peak 10 B, fixed 0
    assert any(ln.startswith("overhead  +") and "%" in ln for ln in lines)
    code, out, _ = run(capsys, "solve", "vgg16", "0.5", "--batch-size", "32", "--method", "checkpoint-all")
    assert code == 1 and "every schedule needs >= 2.58 GiB" in out


def test_solve_json_and_outputs(capsys, tmp_path):
    out_json, png = tmp_path / "r.json", tmp_path / "rs.png"
    code, out, _ = run(capsys, "solve", "vgg16", "16GB", "--batch-size", "4", "--method", "checkpoint-all",
                       "--out", str(out_json), "--plot", str(png), "--json", "--schedule")
    assert code == 0 and json.loads(out_json.read_text())["budget_bytes"] == 16 * 10**9
    assert json.loads(out)["schedule"] is not None
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_budget_forms_share_one_meaning(capsys):
    def budget(text):
        code, out, err = run(capsys, "solve", "linear:4", text, "--method", "checkpoint-all", "--json")
        assert code in (0, 1), err
        return json.loads(out)["budget_bytes"]

    # linear:4: fixed 0 bytes, checkpoint-all peak 6 bytes
    assert budget("0.5") == budget("0.5x") == 3 and budget("1x") == 6
    assert budget("123") == 123 and budget("2GiB") == 2 * 2**30 and budget("1 GiB") == 2**30
    assert budget("16GB") == 16 * 10**9


def test_graph_files_in_every_format(capsys, tmp_path):
    from remat_core.zoo import linear_graph
    from remat_core.zoo.models import DATA_DIR

    p = tmp_path / "g.json"
    linear_graph(3).save(p)
    assert run(capsys, "solve", str(p), "100", "--method", "checkpoint-all")[0] == 0
    assert run(capsys, "solve", os.path.join(DATA_DIR, "keras_vgg16.json"), "16GB",
               "--method", "checkpoint-all")[0] == 0


def _bad_inputs(tmp):
    (tmp / "list.json").write_text("[1, 2]")
    (tmp / "scalar.json").write_text("3")
    (tmp / "noid.json").write_text('{"nodes": [{"cost_cpu": 1, "cost_ram": 2}], "args": {}, '
                                   '"cost_ram_parameters": 0}')
    (tmp / "binary.json").write_bytes(b"\xff\xfe\x00")
    (tmp / "rows.jsonl").write_text('{"graph": "g", "budget_bytes": 5}\n')
    (tmp / "d").mkdir()
    return [
        ("solve", "linear:4", "inf"),
        ("solve", "linear:4", "1e400"),
        ("solve", "linear:4", "1.5x"),
        ("solve", "linear:4", "-5GiB"),
        ("solve", "linear:4", "lots"),
        ("solve", str(tmp / "d"), "1GiB"),
        ("solve", str(tmp / "list.json"), "1GiB"),
        ("solve", str(tmp / "scalar.json"), "1GiB"),
        ("solve", str(tmp / "noid.json"), "1GiB"),
        ("solve", str(tmp / "binary.json"), "1GiB"),
        ("solve", "no-such-graph", "1GiB"),
        ("solve", "linear:4", "1GiB", "--method", "nope"),
        ("solve", "linear:4", "1GiB", "--method", "ilp", "--options", '{"no_such_option": 1}'),
        ("solve", "linear:4", "1GiB", "--options", "[1]"),
        ("solve", "linear:4", "1GiB", "--out", str(tmp / "missing" / "r.json")),
        ("solve", "linear:4", "1GiB", "--out", "/proc/remat-cannot-write.json"),
        ("solve", "linear:4", "1GiB", "--out", str(tmp / "d")),
        ("solve", "linear:4", "1GiB", "--plot", str(tmp / "missing" / "rs.png")),
        ("solve", "linear:4", "1GiB", "--plot", str(tmp / "rs.txt")),
        ("sweep", "linear:4", "--methods", ""),
        ("sweep", "linear:4", "--methods", "ilp", "--options", '{"ipl": {"time_limit_s": 1}}'),
        ("sweep", "linear:4", "--methods", "ilp", "--options", '{"checkpoint-all": {}}'),
        ("sweep", "linear:4", "--methods", "checkpoint-all", "--plot", str(tmp / "missing" / "c.png")),
        ("sweep", "linear:4", "--methods", "checkpoint-all", "--out", str(tmp / "missing" / "s.jsonl")),
        ("sweep", "linear:4", "--methods", "checkpoint-all", "--scheduler", "tcp://127.0.0.1:9"),
        ("sweep", "linear:4", "--methods", "checkpoint-all", "--budgets", "0.5,inf"),
        ("max-batch", "linear:4", "--budget", "1e400"),
        ("plot", "curves", str(tmp / "rows.jsonl"), "-o", str(tmp / "c.png")),
        ("plot", "curves", str(tmp / "d"), "-o", str(tmp / "c.png")),
        ("plot", "schedule", "linear:5", "-o", str(tmp / "x.png")),
        ("plot", "timeline", "linear:5", "1x", "-o", str(tmp / "missing" / "t.png")),
    ]


def test_every_bad_input_is_one_line_and_a_non_zero_exit(capsys, tmp_path):
    for argv in _bad_inputs(tmp_path):
        try:
            code, out, err = run(capsys, *argv)
        except SystemExit as exc:  # a usage error, from argparse
            code, (out, err) = exc.code, capsys.readouterr()
        assert code != 0, argv
        assert out == "", argv
        assert len(err.strip().splitlines()) == 1 and err.startswith(("remat: error: ", f"remat {argv[0]}: error: ")), (argv, err)
    assert not (tmp_path / "missing").exists()


def test_bad_inputs_in_a_fresh_process(tmp_path):
    for argv in [a for a in _bad_inputs(tmp_path) if a[0] != "sweep"][:6]:
        res = remat(*argv)
        assert res.returncode == 2 and res.stdout == "", argv
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, (argv, res.stderr)


def test_usage_errors_exit_2(capsys):
    for argv in (["sweep", "linear:4", "--workers", "0"], ["solve", "linear:4"],
                 ["solve", "linear:4", "1", "--time-limit", "inf"], ["nope"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_sweep_skips_methods_that_do_not_apply(capsys, tmp_path):
    code, out, err = run(capsys, "sweep", "vgg16", "--batch-size", "32", "--num", "3", "--methods",
                         "checkpoint-all,chen-sqrtn,rotor,ap-greedy", "--scheduler", "serial", "--no-progress")
    assert code == 0
    assert err.strip().splitlines() == ["remat: skipping chen-sqrtn, rotor: chain-only, and vgg16-b32 is not a chain"]
    assert "chen-sqrtn" not in out and "ap-greedy" in out
    ratios = out.split("approximation ratio")
    assert len(ratios) == 1  # ilp was not among the methods: no ratios against it


def test_sweep_command_resumes_and_plots(capsys, tmp_path):
    out, png = tmp_path / "s.jsonl", tmp_path / "curves.svg"
    args = ["sweep", "linear:6", "--budgets", "0.6x,0.8x,1x", "--methods", "checkpoint-all,lp-rounding",
            "--reference", "lp-rounding", "--scheduler", "serial", "--out", str(out), "--plot", str(png),
            "--no-progress"]
    code, text, _ = run(capsys, *args)
    assert code == 0 and "6 solves computed, 0 reused" in text and "approximation ratio" in text
    assert b"<svg" in png.read_bytes()[:2000] and len(out.read_text().splitlines()) == 6
    code, text, _ = run(capsys, *args, "--json")
    data = json.loads(text)
    assert data["computed"] == 0 and data["reused"] == 6 and len(data["rows"]) == 6


def test_max_batch_command(capsys):
    code, text, _ = run(capsys, "max-batch", "linear:4", "--budget", "30", "--no-progress", "--json")
    data = json.loads(text)
    assert code == 0 and data["batch_size"] == 5 and data["result"]["peak_memory_bytes"] == 30
    code, text, _ = run(capsys, "max-batch", "vgg16", "--budget", "16GB", "--no-progress")
    assert code == 0 and "largest batch size" in text
    code, _, _ = run(capsys, "max-batch", "linear:4", "--budget", "3", "--no-progress")
    assert code == 1


def test_plot_command(capsys, tmp_path):
    sweep_file = tmp_path / "s.jsonl"
    run(capsys, "sweep", "linear:5", "--num", "4", "--methods", "checkpoint-all", "--scheduler", "serial",
        "--out", str(sweep_file), "--no-progress")
    for argv, name in ((["curves", str(sweep_file)], "c.png"),
                       (["schedule", "linear:5", "1x"], "rs.svg"),
                       (["timeline", "linear:5", "1x", "--method", "checkpoint-all,lp-rounding"], "t.png")):
        path = tmp_path / name
        code, _, _ = run(capsys, "plot", *argv, "-o", str(path))
        assert code == 0 and path.stat().st_size > 1000


def test_methods_zoo_and_version(capsys):
    from remat_core import __version__
    from remat_core.solvers import available_methods
    from remat_core.zoo.models import list_zoo

    code, out, _ = run(capsys, "methods")
    assert code == 0 and [ln.split()[0] for ln in out.splitlines()] == available_methods()
    code, out, _ = run(capsys, "methods", "--json")
    assert [m["method"] for m in json.loads(out)] == available_methods()
    code, out, _ = run(capsys, "zoo", "--json")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == list_zoo()
    assert all(r["min_budget_bytes"] <= r["checkpoint_all_peak_bytes"] for r in rows)
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"remat {__version__}"


def test_installed_console_script():
    exe = shutil.which("remat", path=os.path.dirname(sys.executable)) or shutil.which("remat")
    if exe is None:
        pytest.skip("the `remat` console script is not installed (pip install -e .)")
    help_text = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    for cmd in ("solve", "sweep", "max-batch", "plot", "methods", "zoo", "demo"):
        assert cmd in help_text
    res = subprocess.run([exe, "solve", "linear:3", "1KiB", "--json"], capture_output=True, text=True)
    assert res.returncode == 0 and json.loads(res.stdout)["status"] == "optimal"
