"""RematModel and batch shapes: each new shape gets its own plan (cached, bounded), the last partial batch of an
epoch included; a shape no plan fits is refused at every call, also after Keras would relax the batch dimension."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import remat_tf  # noqa: E402
from remat_core.errors import BudgetInfeasibleError, RematError  # noqa: E402
from remat_core.units import resolve_budget  # noqa: E402

layers = keras.layers
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def mlp(dtype="float32"):
    inputs = keras.Input((16,), dtype=dtype)
    x = inputs
    for _ in range(4):
        x = layers.BatchNormalization(dtype=dtype)(layers.Dense(64, activation="relu", dtype=dtype)(x))
    return keras.Model(inputs, layers.Dense(4, dtype=dtype)(x), name="mlp")


def data(n, dtype="float32"):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 16)).astype(dtype), rng.integers(0, 4, n)


def test_each_batch_shape_gets_its_own_plan_within_its_budget():
    keras.utils.set_random_seed(0)
    x, y = data(1024)
    rm = remat_tf.rematerialize(mlp(), x[:64], y[:64], loss=LOSS, budget=0.75, method="ilp",
                                solver_options={"time_limit_s": 10}, max_plans=3)
    rm.compile(optimizer="sgd")
    rm.fit(x[:256], y[:256], batch_size=64, epochs=1, verbose=0)
    rm.fit(x[:256], y[:256], batch_size=32, epochs=1, verbose=0)
    rm.fit(x, y, batch_size=512, epochs=1, verbose=0)   # Keras alone would now trace with a batch of None
    batches = sorted(k[0][0][0][0] for k in rm.plans)
    assert batches == [32, 64, 512]
    for spec in rm.plans.values():
        assert spec.budget_bytes == resolve_budget(spec.eg.graph, 0.75) or spec.budget_bytes <= rm.budget_bytes
        assert spec.predicted_peak_bytes <= spec.budget_bytes
        assert spec.train_fn is not None  # each shape ran its own traced step
    rm.fit(x[:256], y[:256], batch_size=16, epochs=1, verbose=0)
    assert len(rm.plans) == 3 and sorted(k[0][0][0][0] for k in rm.plans) == [16, 32, 512]  # bounded, LRU


def test_partial_last_batch_trains_like_plain_fit():
    keras.utils.set_random_seed(0)
    model = mlp("float64")
    x, y = data(100, "float64")
    w0 = [v.numpy().copy() for v in model.variables]
    rm = remat_tf.rematerialize(model, x[:32], y[:32], loss=LOSS, budget=0.75, method="ilp",
                                solver_options={"time_limit_s": 10})
    assert rm.plan.compute_counts().sum() > rm.extracted.graph.n
    plain = keras.models.clone_model(model)
    plain.set_weights(w0)
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss=LOSS, jit_compile=False)
    want = plain.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0).history["loss"]
    rm.compile(optimizer=keras.optimizers.SGD(0.1))
    got = rm.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0).history["loss"]
    assert {k[0][0][0][0] for k in rm.plans} == {4, 32}  # 100 = 3 x 32 + 4 (Keras feeds x as float32: own key)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for a, b in zip(model.variables, plain.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12)
    # train_on_batch (a shape of its own), then evaluate and predict: the same as plain Keras
    got = rm.train_on_batch(x[:20], y[:20])
    want = plain.train_on_batch(x[:20], y[:20])
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(rm.evaluate(x, y, batch_size=32, verbose=0),
                               plain.evaluate(x, y, batch_size=32, verbose=0), rtol=1e-10)
    np.testing.assert_allclose(rm.predict(x, batch_size=32, verbose=0), plain.predict(x, batch_size=32, verbose=0),
                               rtol=1e-9, atol=1e-12)


def test_a_shape_without_plan_is_refused_at_every_call():
    keras.utils.set_random_seed(0)
    x, y = data(4096)
    eg = remat_tf.extract_graph(mlp(), x[:64], y[:64], LOSS)
    budget = resolve_budget(eg.graph, 0.75)
    rm = remat_tf.RematModel.from_extracted(eg, budget=budget, method="ilp", solver_options={"time_limit_s": 10})
    rm.compile(optimizer="sgd")
    rm.fit(x[:256], y[:256], batch_size=64, epochs=1, verbose=0)
    rm.fit(x[:256], y[:256], batch_size=32, epochs=1, verbose=0)
    for call in (lambda: rm.fit(x, y, batch_size=4096, epochs=1, verbose=0),
                 lambda: rm.train_on_batch(x, y),
                 lambda: rm.compute_gradients(x, y)):
        with pytest.raises(BudgetInfeasibleError, match="4096"):
            call()
    rm.fit(x[:64], y[:64], batch_size=64, epochs=1, verbose=0)  # the planned shapes still train


def test_a_trace_with_unknown_batch_is_refused():
    keras.utils.set_random_seed(0)
    x, y = data(64)
    rm = remat_tf.rematerialize(mlp(), x, y, loss=LOSS, budget=1.0, method="checkpoint-all")
    rm.compile(optimizer="sgd")
    fn = tf.function(lambda a, b: rm.train_step((a, b)), autograph=False)
    with pytest.raises(RematError, match="fully known shapes"):
        fn.get_concrete_function(tf.TensorSpec((None, 16), "float32"), tf.TensorSpec((None,), "int64"))


def test_sample_weights_and_regularizers_are_refused_by_name():
    keras.utils.set_random_seed(0)
    x, y = data(64)
    rm = remat_tf.rematerialize(mlp(), x, y, loss=LOSS, budget=1.0, method="checkpoint-all")
    rm.compile(optimizer="sgd")
    with pytest.raises(RematError, match="`sample_weight`"):
        rm.fit(x, y, sample_weight=np.ones(64), batch_size=64, verbose=0)
    with pytest.raises(RematError, match="`class_weight`"):
        rm.fit(x, y, class_weight={0: 1.0, 1: 2.0, 2: 1.0, 3: 1.0}, batch_size=64, verbose=0)
    inp = keras.Input((16,))
    reg = keras.Model(inp, layers.Dense(4, kernel_regularizer="l2", name="dense_l2")(inp))
    with pytest.raises(remat_tf.UnsupportedModelError, match="dense_l2.*kernel_regularizer"):
        remat_tf.rematerialize(reg, x, y, loss=LOSS, method="checkpoint-all")


def test_every_plan_over_the_budget_is_reported_with_the_best_one(monkeypatch):
    """When every plan found needs more than the budget once the held weight gradients are counted, the error's
    smallest budget is the best plan's executed peak, and that plan rides on the error for a caller that accepts
    the budget (the partial last batch below)."""
    import remat_tf.api as api

    keras.utils.set_random_seed(0)
    x, y = data(64)
    eg = remat_tf.extract_graph(mlp(), x[:32], y[:32], LOSS)
    real = api.executed_peak_bytes
    monkeypatch.setattr(api, "executed_peak_bytes", lambda g, plan: real(g, plan) + 10 ** 9)
    budget = resolve_budget(eg.graph, 1.0)   # checkpoint-all fits the graph; not with the extra held bytes
    with pytest.raises(BudgetInfeasibleError) as info:
        api._solve_plan(eg, budget, "checkpoint-all", True, None)
    result, plan = info.value.best_plan
    assert info.value.min_budget_bytes == result.budget_bytes == result.stats["executed_peak_bytes"] > 10 ** 9
    assert plan is not None


def test_a_partial_batch_takes_the_plan_that_needs_its_fallback_budget(monkeypatch):
    """T-bugs #23: the last batch of an epoch, refused at the fraction, was 'planned at its smallest feasible
    budget' by solving again there, which found another plan over that budget: fit died mid-epoch (NASNetMobile,
    float64). The plan that set the smallest budget is taken as it is."""
    import remat_tf.api as api

    keras.utils.set_random_seed(0)
    x, y = data(36)
    rm = remat_tf.rematerialize(mlp(), x[:32], y[:32], loss=LOSS, budget=1.0, method="checkpoint-all")
    real, calls = api._solve_plan, []

    def solve_plan(eg, budget_bytes, *args):
        calls.append(budget_bytes)
        if len(calls) == 1:   # the partial batch at the fraction: its plan needs more, and rides on the error
            result, plan = real(eg, resolve_budget(eg.graph, 1.0), *args)
            result.budget_bytes = int(result.peak_memory_bytes)
            exc = BudgetInfeasibleError("over", result, budget_bytes=budget_bytes,
                                        min_budget_bytes=result.budget_bytes)
            exc.best_plan = (result, plan)
            raise exc
        raise BudgetInfeasibleError("over again", None, budget_bytes=budget_bytes, min_budget_bytes=budget_bytes + 1)

    monkeypatch.setattr(api, "_solve_plan", solve_plan)
    rm.compile(optimizer="sgd")
    rm.fit(x, y, batch_size=32, epochs=1, verbose=0)   # 36 = 32 + a last batch of 4
    assert len(calls) == 1 and {k[0][0][0][0] for k in rm.plans} == {4, 32}
