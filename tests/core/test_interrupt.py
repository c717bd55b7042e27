"""Interrupting a solve leaves no process and no temporary folder (issue 25, "Leaked processes and files").

``remat solve --method ilp`` on a graph that takes minutes runs the portfolio:
a child process (``remat_core.solvers._portfolio_worker``) in a
``remat-portfolio-*`` folder. Each test sends one signal to the command and
checks, within 5 s of its exit, that no process it started remains (by parent
pid, and by the command line naming its temporary folder) and that the folder
is gone. ``TMPDIR`` points into the test's own folder, so runs of other tests
beside this one do not count.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from remat_core.zoo import random_training_graph

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: random(16 layers, seed 6) at 77: HiGHS and branch-and-cut take minutes to prove it (benchmarks/README.md)
_GRAPH, _BUDGET = (16, 2, 6), 77
_SETTLE_S = 5.0


def _processes() -> list[tuple[int, int, str]]:
    """``(pid, ppid, command line)`` of every process."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue   # a zombie has exited (its parent, maybe this test, has not reaped it yet)
        out.append((int(entry), int(stat.rsplit(")", 1)[-1].split()[1]), cmd))
    return out


def _left_behind(parent: int, tmp: str) -> tuple[list, list]:
    procs = [p for p in _processes() if p[1] == parent or tmp in p[2]]
    folders = [f for f in os.listdir(tmp) if f.startswith("remat-")]
    return procs, folders


def _start_solve(tmp_path) -> tuple[subprocess.Popen, str]:
    g = random_training_graph(*_GRAPH[:2], seed=_GRAPH[2])
    path = tmp_path / "graph.json"
    path.write_text(__import__("json").dumps(g.to_dict()))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from remat_core.cli import main; sys.exit(main())",
                             "solve", str(path), str(_BUDGET), "--method", "ilp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=str(tmp_path))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:   # until the portfolio's child runs
        if any("_portfolio_worker" in cmd and str(tmp) in cmd for _, _, cmd in _processes()):
            return proc, str(tmp)
        if proc.poll() is not None:
            pytest.fail(f"the solve ended before its child started: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the portfolio's child did not start within 60 s")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_signal_to_remat_solve_leaves_no_process_and_no_folder(tmp_path, sig):
    proc, tmp = _start_solve(tmp_path)
    time.sleep(2.5)   # past the short search: HiGHS's MILP runs in the main thread
    proc.send_signal(sig)
    sent = time.monotonic()
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"remat solve did not exit within 30 s of {sig.name}")
    finally:
        proc.stderr.close()
    assert code != 0
    if sig is not signal.SIGINT:   # a Python-level handler in the parent would wait for HiGHS to return
        assert time.monotonic() - sent < _SETTLE_S, f"{sig.name} took {time.monotonic() - sent:.1f} s to end the solve"
    deadline = time.monotonic() + _SETTLE_S
    while True:
        procs, folders = _left_behind(proc.pid, tmp)
        if not procs and not folders:
            break
        if time.monotonic() > deadline:
            for pid, _, _ in procs:   # do not leave them running past the test either
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            pytest.fail(f"{_SETTLE_S} s after {sig.name}: processes {procs}, folders {folders}")
        time.sleep(0.1)


def test_sigkill_to_a_sweep_on_the_embedded_dask_cluster_leaves_no_process(tmp_path):
    # the cluster's worker processes, and the portfolio's child under a worker, die with the sweep
    pytest.importorskip("distributed")
    g = random_training_graph(*_GRAPH[:2], seed=_GRAPH[2])
    path = tmp_path / "graph.json"
    path.write_text(__import__("json").dumps(g.to_dict()))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from remat_core.cli import main; sys.exit(main())",
                             "sweep", str(path), "--budgets", str(_BUDGET), "--methods", "ilp", "--scheduler",
                             "embedded", "--workers", "1", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(tmp_path))
    deadline = time.monotonic() + 90
    while not any("_portfolio_worker" in cmd and str(tmp) in cmd for _, _, cmd in _processes()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the sweep's solve did not start the portfolio's child within 90 s")
        time.sleep(0.1)
    workers = [pid for pid, ppid, _ in _processes() if ppid == proc.pid]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + _SETTLE_S
    while True:
        alive = [p for p in _processes() if p[0] in workers or p[1] in workers or str(tmp) in p[2]]
        folders = [f for f in os.listdir(tmp) if f.startswith("remat-")]
        if not alive and not folders:
            break
        if time.monotonic() > deadline:
            for pid, _, _ in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            pytest.fail(f"{_SETTLE_S} s after SIGKILL: processes {alive}, folders {folders}")
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_to_a_sweep_on_the_local_pool_leaves_no_process_and_no_folder(tmp_path, sig):
    # issue 36: the pool's workers outlived the sweep (parent 1, holding its stderr) and a deadline folder stayed
    g = random_training_graph(*_GRAPH[:2], seed=_GRAPH[2])
    path = tmp_path / "graph.json"
    path.write_text(__import__("json").dumps(g.to_dict()))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from remat_core.cli import main; sys.exit(main())",
                             "sweep", str(path), "--budgets", f"{_BUDGET},{_BUDGET + 3}", "--methods", "ilp",
                             "--time-limit", "120", "--workers", "2", "--scheduler", "local", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(tmp_path))
    deadline = time.monotonic() + 90
    while not any(str(tmp) in cmd for _, _, cmd in _processes()):   # a worker's solve started its child
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no worker of the sweep started a child within 90 s")
        time.sleep(0.1)
    workers = [pid for pid, ppid, _ in _processes() if ppid == proc.pid]
    assert workers
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + _SETTLE_S
    while True:
        alive = [p for p in _processes() if p[0] in workers or p[1] in workers or str(tmp) in p[2]]
        folders = [f for f in os.listdir(tmp) if f.startswith("remat-")]
        if not alive and not folders:
            break
        if time.monotonic() > deadline:
            for pid, _, _ in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            pytest.fail(f"{_SETTLE_S} s after {sig.name}: processes {alive}, folders {folders}")
        time.sleep(0.1)
