"""A result that carries only the operation sequence DTR ran (no stage schedule) trains in Keras like plain fit.

``remat_tf`` plans such a result with ``remat_core.make_plan(graph, result)``; before, it took the missing
schedule for "no plan" and raised ``BudgetInfeasibleError``. The sequence here is a DTR schedule's own run
(``sequence.from_schedule``) handed over without its schedule, so the test does not depend on finding a graph
where DTR's stage run fails.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import remat_tf  # noqa: E402
import remat_tf.api as tf_api  # noqa: E402
from remat_core import RematResult, SolveStatus  # noqa: E402
from remat_core.sequence import from_schedule, simulate_sequence  # noqa: E402
from remat_core.solvers import solve as core_solve  # noqa: E402

from test_tf_fit_exact import _budget, _fit, float64, transformer  # noqa: E402,F401


def test_fit_with_a_sequence_only_result_equals_plain_fit(float64, monkeypatch):  # noqa: F811
    keras.utils.set_random_seed(0)
    model = transformer(4)
    rng = np.random.default_rng(0)
    batch = 8
    x, y = rng.standard_normal((3 * batch, 4, 4, 3)), rng.integers(0, 4, 3 * batch)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    w0 = [v.numpy().copy() for v in model.variables]
    eg = remat_tf.extract_graph(model, x[:batch], y[:batch], loss)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss, jit_compile=False)
    want_loss, want_w = _fit(model, x, y, batch)

    def sequence_only(graph, budget, method=None, **options):
        res = core_solve(graph, budget, method="dtr")
        assert res.success and res.schedule is not None
        seq = from_schedule(graph, res.schedule)
        sim = simulate_sequence(graph, seq)
        return RematResult(status=SolveStatus.FEASIBLE, sequence=seq, objective=float(sim.total_cost),
                           peak_memory_bytes=int(sim.peak_memory_bytes), budget_bytes=int(budget), method="dtr",
                           message="the run only")

    monkeypatch.setattr(tf_api, "solve", sequence_only)
    rm = remat_tf.RematModel.from_extracted(eg, budget=_budget(eg, 0.4), method="dtr")
    assert rm.specialization(x[:batch], y[:batch]).result.schedule is None
    assert rm.plan.compute_counts().sum() > eg.graph.n, "the plan must recompute for this test to mean anything"
    for v, w in zip(model.variables, w0):
        v.assign(w)
    rm.compile(optimizer=keras.optimizers.SGD(0.05))
    got_loss, got_w = _fit(rm, x, y, batch)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-10, atol=1e-12)
    for a, b in zip(got_w, want_w):
        assert np.max(np.abs(a - b)) <= 1e-10 * (1.0 + np.max(np.abs(b)))
