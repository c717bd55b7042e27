"""Solvers at scale: time limits that hold, the memory guard, the large-graph method.

Wall-time bounds: a limit L must return within 1.1 L plus ``_SLACK_S``, the time to reap the killed child,
unpickle its answer and re-simulate the schedule in ``solve`` (tens of milliseconds idle; the bound allows
for a 2-core machine shared with other jobs).
"""

from __future__ import annotations

import glob
import os
import tempfile
import time

import numpy as np
import pytest

from remat_core import load_dtr_dag, simulate, solve
from remat_core.formulation.size import DEFAULT_MODEL_BYTES_LIMIT, estimate_milp_size
from remat_core.schedule import SolveStatus
from remat_core.units import resolve_budget
from remat_core.zoo import random_training_graph

from conftest import SHARED_DATA

_SLACK_S = 0.3
needs_data = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared DTR graphs not present")


def _dtr(name):
    return load_dtr_dag(os.path.join(SHARED_DATA, f"{name}.json"))


@pytest.fixture(autouse=True)
def _private_tmp(tmp_path, monkeypatch):
    """Deadline children's directories go to a folder of this test's own (others may share /tmp)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _leftovers():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "remat-*")))


def _children():
    """Processes whose parent is this one (killed children must be gone)."""
    me, out = os.getpid(), []
    for d in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.append(d)
    return out


def _timed(graph, frac, method, limit, **options):
    budget = resolve_budget(graph, frac)
    before = _leftovers()
    t0 = time.perf_counter()
    res = solve(graph, budget, method=method, time_limit_s=limit, **options)
    wall = time.perf_counter() - t0
    assert wall <= 1.1 * limit + _SLACK_S, f"{method} with time_limit_s={limit} took {wall:.2f} s"
    assert not (_leftovers() - before), "a deadline child left its directory behind"
    assert not _children(), "a child process outlived the solve"
    return res, budget, wall


@pytest.mark.parametrize("method", ["ilp", "lp-rounding"])
def test_formulation_methods_hold_a_short_limit_on_a_program_larger_than_it(method):
    """183 nodes, ~5.7 M nonzeros: building the program and its LP alone take longer than 2 s here."""
    g = random_training_graph(40, seed=1)
    res, budget, _ = _timed(g, 0.6, method, 2.0)
    assert res.success and res.peak_memory_bytes <= budget   # the best heuristic schedule at least
    assert res.lower_bound is not None and res.lower_bound <= res.objective


@needs_data
def test_lp_rounding_holds_its_limit_where_the_lp_alone_is_longer():
    """U-Net_6 (201 nodes): the LP relaxation alone takes longer than the 3 s limit."""
    res, budget, _ = _timed(_dtr("U-Net_6"), 0.5, "lp-rounding", 3.0)
    assert res.success and res.lower_bound is not None


@needs_data
@pytest.mark.parametrize("name,limit", [("U-Net_6", 2.0), ("InceptionV4_64", 3.0)])
def test_auto_holds_its_limit(name, limit):
    res, budget, _ = _timed(_dtr(name), 0.5, "auto", limit)
    assert res.success and res.lower_bound is not None


@needs_data
def test_memory_guard_refuses_to_build_a_program_too_large():
    """InceptionV4_64's strong MILP would need ~250 GiB: nothing is built, a heuristic schedule comes back."""
    g = _dtr("InceptionV4_64")
    assert not estimate_milp_size(g).fits(DEFAULT_MODEL_BYTES_LIMIT)
    res = solve(g, resolve_budget(g, 0.9), method="ilp")
    assert "not built" in res.message
    assert res.success and res.lower_bound == pytest.approx(float(np.sum(g.cost)))
