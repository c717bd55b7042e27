"""Shared helpers for benchmark scripts: markdown tables and README sections.

Each script owns one section of ``benchmarks/README.md`` delimited by
``<!-- BEGIN name -->`` / ``<!-- END name -->`` and rewrites only that section,
so scripts can run in any order. Raw results go to ``benchmarks/results/``.
The MILP-tuning experiments in ``benchmarks/experiments/`` write to that
folder's ``README.md`` and ``results/`` instead (``EXPERIMENTS_README``,
``EXPERIMENTS_RESULTS``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from typing import Any, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "README.md")
RESULTS = os.path.join(HERE, "results")
EXPERIMENTS_README = os.path.join(HERE, "experiments", "README.md")
EXPERIMENTS_RESULTS = os.path.join(HERE, "experiments", "results")


def _commit() -> str:
    """The checked-out commit, with ``+changes`` when tracked files differ from it ("" outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=HERE, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ":(top)", ":(top,exclude)benchmarks/README.md", ":(top,exclude)benchmarks/results",
                                ":(top,exclude)benchmarks/experiments/README.md",
                                ":(top,exclude)benchmarks/experiments/results"],
                               capture_output=True, text=True, cwd=HERE, check=False).stdout.strip()
    except OSError:
        return ""
    return head + ("+changes" if head and dirty else "")


#: the code a benchmark runs is the code checked out when it starts, not when it writes its table
_COMMIT_AT_START = _commit()


def machine_line() -> str:
    """One line describing where the numbers were measured (the commit is the one the script started from)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = _COMMIT_AT_START
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}" + (f", commit {commit}" if commit else "")


#: short solves are repeated (the median run is reported) while their total stays under this many seconds
REPEAT_BUDGET_S = 10.0
#: ... and at most this many times
REPEAT_MAX_RUNS = 5


def repeated(call: Any, budget_s: float = REPEAT_BUDGET_S, max_runs: int = REPEAT_MAX_RUNS) -> dict:
    """Run ``call()`` (which returns a dict with ``"time_s"``) again while the runs so far took less than
    ``budget_s`` in all, at most ``max_runs`` times; return the run of median time (of an even number, the
    slower of the middle two) with ``"times_s"``, ``"objectives"`` and ``"statuses"``: every run's seconds,
    objective and status (a solve that takes 0.1 s is timed over several runs; one that takes a minute, once)."""
    runs = [call()]
    while _wants_more(runs, budget_s, max_runs):
        runs.append(call())
    return _median_run(runs)


def interleaved(calls: dict[str, Any], budget_s: float = REPEAT_BUDGET_S, max_runs: int = REPEAT_MAX_RUNS) -> dict:
    """:func:`repeated` for several variants of one measurement at once: ``calls`` maps a name to a callable;
    the runs go in rounds, each round one run of every variant that wants more (same rule as
    :func:`repeated`), the round's order rotated by one each time, so that a drift of the machine's speed
    over the minutes of a measurement falls on every variant alike instead of on the ones run last.
    Returns name -> what :func:`repeated` returns."""
    names = list(calls)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    k = 0
    while True:
        order = names[k % len(names):] + names[:k % len(names)]
        due = [name for name in order if not runs[name] or _wants_more(runs[name], budget_s, max_runs)]
        if not due:
            break
        for name in due:
            runs[name].append(calls[name]())
        k += 1
    return {name: _median_run(runs[name]) for name in names}


def _wants_more(runs: list[dict], budget_s: float, max_runs: int) -> bool:
    return len(runs) < max_runs and sum(r["time_s"] for r in runs) < budget_s


def _median_run(runs: list[dict]) -> dict:
    median = sorted(runs, key=lambda r: r["time_s"])[len(runs) // 2]   # of two runs, the slower
    return dict(median, times_s=[r["time_s"] for r in runs], objectives=[r.get("objective") for r in runs],
                statuses=[r.get("status") for r in runs])


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    def fmt(x: Any) -> str:
        if isinstance(x, float):
            return f"{x:.4g}"
        return str(x)

    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(fmt(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def write_section(name: str, markdown: str, readme: str = README) -> None:
    """Replace (or append) the section called ``name`` of ``readme`` (``benchmarks/README.md``)."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    text = open(readme).read() if os.path.exists(readme) else "# Benchmarks\n"
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    tmp = readme + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, readme)


def save_json(name: str, data: Any, folder: str = RESULTS) -> str:
    """Write raw results to ``<folder>/<name>.json`` (``benchmarks/results/``); returns the path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
    return path


def command_line() -> str:
    """How this script was run, for the README."""
    return "python " + " ".join([os.path.relpath(sys.argv[0], os.path.dirname(HERE))] + sys.argv[1:])


DATA_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data", "dtr_dags"))
DTR_GRAPHS = [
    "U-Net_6", "ResNet-32_56", "InceptionV4_64", "Transformer_10",
    "DenseNet-121_84", "Unrolled_GAN", "TreeLSTM_D.6", "LSTM_512",
]


def dtr_graph_path(name: str) -> str:
    """Path of one of the eight shared DTR graphs (``REMAT_DATA_DIR`` overrides the folder)."""
    return os.path.join(os.environ.get("REMAT_DATA_DIR", DATA_DIR), f"{name}.json")


def quick_arguments(doc: str, quick_help: str) -> Any:
    """Parse ``--quick`` alone, the option of the benchmarks without a time limit."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    return ap.parse_args()


def limit_arguments(doc: str, quick_help: str, limit_default: float, limit_help: str,
                    extra: Any = None) -> Any:
    """Parse ``--quick``, ``--limit`` and ``--report-only``, the options of the solver benchmarks
    (``extra(parser)`` adds a script's own)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--limit", type=float, default=limit_default, help=limit_help)
    ap.add_argument("--report-only", action="store_true", help="rewrite the README section from the saved results")
    if extra is not None:
        extra(ap)
    return ap.parse_args()


def rewrite_section_from_results(results_name: str, section: str, render: Any, folder: str = RESULTS,
                                 readme: str = README) -> None:
    """Rewrite section ``section`` of ``readme`` from ``<folder>/<results_name>.json`` (``{"meta", "rows"}``)."""
    with open(os.path.join(folder, f"{results_name}.json")) as f:
        data = json.load(f)
    write_section(section, render(data["rows"], data["meta"]), readme)
