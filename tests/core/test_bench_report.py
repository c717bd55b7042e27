"""The benchmark scripts' repetition helpers (``benchmarks/_report.py``): how often each variant runs, in
what order, and which run is reported."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
_report = pytest.importorskip("_report")


def _timed(log, name, seconds):
    """A call that records its name and reports the next of ``seconds`` as its time."""
    it = iter(seconds)

    def call():
        log.append(name)
        return {"time_s": next(it), "objective": 1.0, "status": "optimal"}
    return call


def test_interleaved_runs_each_variant_as_repeated_would_in_rotated_rounds():
    log = []
    calls = {"a": _timed(log, "a", [1.0, 3.0, 2.0, 5.0, 4.0]),   # four runs: 11 s after the fourth
             "b": _timed(log, "b", [6.0, 6.0]),                    # two runs: 12 s after them
             "c": _timed(log, "c", [20.0])}                        # one run
    got = _report.interleaved(calls, budget_s=10.0, max_runs=5)
    # each variant ran as often as repeated() would have run it alone
    alone = {}
    for name, times in (("a", [1.0, 3.0, 2.0, 5.0, 4.0]), ("b", [6.0, 6.0]), ("c", [20.0])):
        alone[name] = _report.repeated(_timed([], name, times), budget_s=10.0, max_runs=5)
        assert got[name]["times_s"] == alone[name]["times_s"], name
        assert got[name]["time_s"] == alone[name]["time_s"], name
    assert got["a"]["time_s"] == 3.0 and got["b"]["time_s"] == 6.0 and got["c"]["time_s"] == 20.0
    # in rounds, the first variant of each round rotating: no variant's runs all come after another's
    assert len(got["a"]["times_s"]) == 4 and len(got["b"]["times_s"]) == 2
    assert log == ["a", "b", "c",   # round 0
                   "b", "a",        # round 1 starts at b; c is done
                   "a",             # round 2 would start at c; b is done
                   "a"]             # round 3
