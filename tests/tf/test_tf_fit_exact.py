"""RematModel.fit with a recomputing plan trains exactly like plain Keras fit (float64, every step, every weight).

Covers issue 35: the optimizer racing with late recomputations (wrong training from the second step on, different
run to run) and the "nodes in a cycle" crash of a recomputed ZeroPadding2D -> Conv2D chain.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import remat_tf  # noqa: E402
from remat_core.simulate import checkpoint_all_peak_bytes  # noqa: E402
from remat_core.units import min_budget_bytes  # noqa: E402

layers = keras.layers


@pytest.fixture
def float64():
    old, old_policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")  # once a model is built, the global policy no longer follows floatx
    yield
    keras.config.set_floatx(old)
    keras.config.set_dtype_policy(old_policy)


def zeropad_chain(size=16):
    inp = keras.Input((size, size, 3))
    x = inp
    for _ in range(4):
        x = layers.Activation("relu")(layers.Conv2D(8, 3)(layers.ZeroPadding2D(1)(x)))
    return keras.Model(inp, layers.Dense(4)(layers.GlobalAveragePooling2D()(x)), name="zeropad")


def mobilenet(size=64):
    return keras.applications.MobileNetV2(input_shape=(size, size, 3), alpha=0.35, weights=None, classes=4,
                                          classifier_activation=None)


def _budget(eg, where):
    """Total bytes at ``where`` of the way from the smallest known budget to checkpoint-all."""
    lo = min_budget_bytes(eg.graph)[0]
    return int(lo + where * (checkpoint_all_peak_bytes(eg.graph) - lo))


def _per_batch(running):
    """Keras logs the running mean of the loss; recover each batch's loss."""
    return [running[0]] + [(k + 1) * running[k] - k * running[k - 1] for k in range(1, len(running))]


def _fit(model, x, y, batch):
    seen = []
    cb = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(float(logs["loss"])))
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
    return _per_batch(seen), [v.numpy().copy() for v in model.variables]


def test_zeropad_conv_chain_recomputes_without_cycle():
    """The minimal reproducer of the 'nodes in a cycle' crash: recomputed ZeroPadding2D -> Conv2D -> ReLU.

    Float32 (the oneDNN rewrite that fused the chain into a cycle does not handle float64); fails without
    remat_tf.execute._detach_sources (checked)."""
    keras.utils.set_random_seed(0)
    model = zeropad_chain(64)  # the reproducer's size: at 16x16 the CPU rewrite does not fuse and no cycle forms
    xb = np.random.default_rng(0).standard_normal((4, 64, 64, 3)).astype("float32")
    yb = np.zeros((4, 4), "float32")
    eg = remat_tf.extract_graph(model, xb, yb, "mse")
    rm = remat_tf.RematModel.from_extracted(eg, budget=_budget(eg, 0.3), method="ilp",
                                            solver_options={"time_limit_s": 20})
    assert rm.plan.compute_counts().sum() > eg.graph.n
    loss, grads = rm.compute_gradients(xb, yb)
    with tf.GradientTape() as tape:
        ref = keras.losses.get("mse")(yb, model(xb, training=True))
        ref = tf.reduce_mean(ref)
    want = tape.gradient(ref, model.trainable_variables)
    assert abs(float(loss) - float(ref)) < 1e-6
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-6)


# MobileNetV2 at 64x64 with batches of 8: at 32x32 with 4 its last BatchNorms normalize 4 values each, and
# three SGD steps amplify round-off (plain Keras against itself eagerly: 1e-5 relative) past any fair tolerance
def transformer(size):
    """Two pre-norm encoder blocks (MultiHeadAttention, no dropout) over size*size tokens of the image's pixels."""
    inp = keras.Input((size, size, 3))
    x = layers.Dense(16)(layers.Reshape((size * size, 3))(inp))
    for _ in range(2):
        h = layers.LayerNormalization()(x)
        x = layers.Add()([x, layers.MultiHeadAttention(num_heads=2, key_dim=8)(h, h)])
        h = layers.LayerNormalization()(x)
        x = layers.Add()([x, layers.Dense(16)(layers.Dense(32, activation="gelu")(h))])
    return keras.Model(inp, layers.Dense(4)(layers.GlobalAveragePooling1D()(x)), name="transformer")


def app(name):
    def build(size):
        return getattr(keras.applications, name)(input_shape=(size, size, 3), weights=None, classes=4,
                                                 classifier_activation=None)
    return build


def _plan_at(eg, budget):
    """A RematModel at ``budget`` (a fraction, or "smallest": the smallest budget auto finds a plan for)."""
    opts = {"time_limit_s": 10}
    if budget != "smallest":
        return remat_tf.RematModel.from_extracted(eg, budget=budget, method="auto", solver_options=opts)
    # the lower bound first; where no plan reaches it, auto reports the smallest peak it reached (or the budget
    # its plan needs with the weight gradients the step holds counted): try that
    budget = min_budget_bytes(eg.graph)[0]
    for _ in range(5):
        try:
            return remat_tf.RematModel.from_extracted(eg, budget=budget, method="auto", solver_options=opts)
        except remat_tf.BudgetInfeasibleError as exc:
            # auto's plan within its time limit varies with the machine's load: step up by at least 1%
            budget = max(int(exc.min_budget_bytes), int(budget * 1.01) + 1)
    return remat_tf.RematModel.from_extracted(eg, budget=budget, method="auto", solver_options=opts)


def efficientnet(size):
    """EfficientNetB0 with its dropout on: the same model (and its dropout seed states) trains both ways."""
    return app("EfficientNetB0")(size)


# The models of issue 35 at 0.6 of activation memory and at the smallest budget auto finds. The plain fit runs on
# the same model object, all its variables (dropout seed generators included) restored before each fit, so a
# dropout layer draws the same masks in both (EfficientNetB0's dropout and stochastic depth stay on).
@pytest.mark.parametrize("build,size,batch,budgets", [
    (zeropad_chain, 16, 4, ("smallest",)),  # float64: Eigen's 32 MiB conv scratch puts 0.6 out of reach
    (mobilenet, 48, 8, ("smallest",)),
    (transformer, 4, 8, (0.6, "smallest")),
    pytest.param(mobilenet, 64, 8, (0.6, "smallest"), marks=pytest.mark.slow),
    pytest.param(app("ResNet50"), 64, 4, (0.6, "smallest"), marks=pytest.mark.slow, id="ResNet50-64-4"),
    pytest.param(app("DenseNet121"), 64, 4, (0.6, "smallest"), marks=pytest.mark.slow, id="DenseNet121-64-4"),
    pytest.param(efficientnet, 64, 4, (0.6, "smallest"), marks=pytest.mark.slow),
])
def test_fit_equals_plain_fit_float64(float64, build, size, batch, budgets):
    keras.utils.set_random_seed(0)
    model = build(size)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3 * batch, size, size, 3))
    y = rng.integers(0, 4, 3 * batch)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    w0 = [v.numpy().copy() for v in model.variables]
    eg = remat_tf.extract_graph(model, x[:batch], y[:batch], loss)

    def restore():
        for v, w in zip(model.variables, w0):
            v.assign(w)

    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss, jit_compile=False)
    want_loss, want_w = _fit(model, x, y, batch)
    for budget in budgets:
        rm = _plan_at(eg, budget)
        assert rm.plan.compute_counts().sum() > eg.graph.n, "the plan must recompute for this test to mean anything"
        for _ in range(2):  # twice in a row: a race would differ between runs
            restore()
            rm.compile(optimizer=keras.optimizers.SGD(0.05))
            got_loss, got_w = _fit(rm, x, y, batch)
            # round-off only; a step reading updated weights (or another dropout mask) is off by ~1e-2
            assert all(v.dtype == "float64" for v in model.trainable_variables)
            np.testing.assert_allclose(got_loss, want_loss, rtol=1e-10, atol=1e-12, err_msg=f"budget {budget}")
            for v, a, b in zip(model.variables, got_w, want_w):
                assert np.max(np.abs(a - b)) <= 1e-10 * (1.0 + np.max(np.abs(b))), (budget, v.path)
            assert rm.run_info.compute_counts and sum(rm.run_info.compute_counts) > eg.graph.n


def _grappler_graph(cf):
    """The function's graph after Grappler's default optimizations (what the runtime executes)."""
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
    from tensorflow.python.grappler import tf_optimizer

    meta = tf.compat.v1.train.export_meta_graph(graph_def=cf.graph.as_graph_def(add_shapes=True), graph=cf.graph)
    fetch = meta_graph_pb2.CollectionDef()
    for t in cf.outputs:
        fetch.node_list.value.append(t.name)
    meta.collection_def["train_op"].CopyFrom(fetch)
    return tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta)


def test_weight_updates_follow_every_read_after_grappler(float64):
    """Structural check of the fit race: in the graph the runtime executes (after Grappler, whose dependency
    optimizer dropped the read-before-write edges tf.function adds), every read of a weight that feeds
    anything is an ancestor of that weight's update. Without the step barrier some reads are not (checked)."""
    nx = pytest.importorskip("networkx")
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(48, 48, 3), alpha=0.35, weights=None, classes=4,
                                           classifier_activation=None)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 48, 48, 3)), rng.integers(0, 4, 8)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rm = remat_tf.rematerialize(model, x, y, loss=loss, budget=0.95, method="ilp", solver_options={"time_limit_s": 20})
    assert rm.plan.compute_counts().sum() > rm.extracted.graph.n
    rm.compile(optimizer=keras.optimizers.SGD(0.01))
    rm.optimizer.build(rm.trainable_variables)
    cf = tf.function(lambda a, b: rm.train_step((a, b)), autograph=False).get_concrete_function(
        tf.TensorSpec(x.shape, "float64"), tf.TensorSpec(y.shape, "int64"))
    model_handles = {id(v._value.handle) for v in model.variables}
    weight_inputs = {inner.op.name for outer, inner in cf.graph.captures if id(outer) in model_handles}
    gd = _grappler_graph(cf)
    g = nx.DiGraph()
    for n in gd.node:
        g.add_node(n.name)
        for i in n.input:
            g.add_edge(i.lstrip("^").split(":")[0], n.name)
    reads, writes = {}, {}
    for n in gd.node:
        res = n.input[0].split(":")[0] if n.input else None
        if res not in weight_inputs:
            continue
        if n.op == "ReadVariableOp" and g.out_degree(n.name):
            reads.setdefault(res, []).append(n.name)
        elif n.op.startswith(("Assign", "ResourceApply")):
            writes.setdefault(res, []).append(n.name)
    assert len(writes) >= len(model.trainable_variables)
    unordered = [(r, w) for res, ws in writes.items() for w in ws for r in reads.get(res, [])
                 if r not in nx.ancestors(g, w)]
    assert not unordered, unordered[:5]


def test_shared_layer_two_inputs_two_outputs_fit_equals_plain_fit(float64):
    keras.utils.set_random_seed(0)
    a, b = keras.Input((12,)), keras.Input((12,))
    shared = layers.Dense(24, activation="tanh", name="shared")
    ha, hb = shared(a), shared(b)
    h = layers.Concatenate()([layers.Dense(24, activation="relu")(ha), layers.Dense(24, activation="relu")(hb)])
    for _ in range(3):
        h = layers.Dense(24, activation="relu")(h)
    model = keras.Model([a, b], [layers.Dense(2, name="o1")(h), layers.Dense(3, name="o2")(shared(h[:, :12]))])
    rng = np.random.default_rng(0)
    x = [rng.standard_normal((24, 12)), rng.standard_normal((24, 12))]
    y = [rng.standard_normal((24, 2)), rng.standard_normal((24, 3))]
    w0 = [v.numpy().copy() for v in model.variables]
    eg = remat_tf.extract_graph(model, [t[:8] for t in x], [t[:8] for t in y], "mse")
    rm = remat_tf.RematModel.from_extracted(eg, budget=_budget(eg, 0.2), method="ilp",
                                            solver_options={"time_limit_s": 20})
    assert rm.plan.compute_counts().sum() > eg.graph.n
    plain = keras.models.clone_model(model)
    plain.set_weights(w0)
    plain.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
    want = plain.fit(x, y, batch_size=8, shuffle=False, verbose=0).history["loss"]
    for _ in range(2):
        for v, w in zip(model.variables, w0):
            v.assign(w)
        rm.compile(optimizer=keras.optimizers.SGD(0.05))
        got = rm.fit(x, y, batch_size=8, shuffle=False, verbose=0).history["loss"]
        np.testing.assert_allclose(got, want, rtol=1e-10)
        for v, p in zip(model.variables, plain.variables):
            np.testing.assert_allclose(v.numpy(), p.numpy(), rtol=1e-9, atol=1e-12)
