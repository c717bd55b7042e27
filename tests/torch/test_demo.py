"""`make demo` (`remat demo`): one run end to end, and its argument checks."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_rejects_a_bad_fraction_in_one_line(tmp_path):
    from remat_core.cli import main

    for bad in ("1.5", "abc", "0"):
        res = subprocess.run([sys.executable, "-m", "remat_core.cli", "demo", "--out", str(tmp_path / "d"),
                              "--fraction", bad], capture_output=True, text=True, cwd=ROOT)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "--fraction" in res.stderr
    assert not (tmp_path / "d").exists()
    assert callable(main)


def test_demo_end_to_end(tmp_path):
    # in the default suite: the demo's sweep forks after the demo's own solves, and once hung there (HiGHS's
    # thread pool copied into the fork: tests/core/test_fork_safety.py)
    out = tmp_path / "demo"
    res = subprocess.run([sys.executable, "-m", "remat_core.cli", "demo", "--out", str(out), "--num", "3",
                          "--steps", "2", "--time-limit", "3"], capture_output=True, text=True, cwd=ROOT,
                         timeout=900, env={**os.environ, "MPLBACKEND": "Agg"})
    assert res.returncode == 0, res.stderr[-3000:]
    text = res.stdout
    # per model: the budget, the predicted and the measured peak, the comparison with torch.utils.checkpoint
    assert text.count("peak predicted") == 2 and text.count("torch.utils.checkpoint at this memory") == 2
    assert "budget sweep of unet-b32" in text and "HiGHS" not in text
    rows = [json.loads(line) for line in (out / "sweep.jsonl").read_text().splitlines()]
    from remat_core.units import min_budget_bytes
    from remat_core.zoo import zoo_graph

    low = min_budget_bytes(zoo_graph("unet", batch_size=32))[0]
    assert min(r["budget_bytes"] for r in rows) == low  # the sweep starts at the hard lower bound
    for name in ("tradeoff", "schedule_matrices", "memory_timeline"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert (out / f"{name}.svg").stat().st_size > 1000
