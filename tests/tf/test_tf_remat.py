"""Keras adapter (remat_tf): layer-level graphs, plans executed inside tf.function, fit."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import remat_tf  # noqa: E402
from remat_core.errors import BudgetInfeasibleError  # noqa: E402
from remat_core.simulate import checkpoint_all_peak_bytes  # noqa: E402
from remat_core.units import format_bytes, min_budget_bytes  # noqa: E402
from remat_tf import RematModel, UnsupportedModelError, extract_graph, rematerialize  # noqa: E402

layers = keras.layers


def cnn_bn_dropout():
    inp = keras.Input((16, 16, 3))
    x = inp
    for i, f in enumerate((8, 8, 16, 16)):
        x = layers.Conv2D(f, 3, padding="same", name=f"conv{i}")(x)
        x = layers.BatchNormalization(name=f"bn{i}")(x)
        x = layers.ReLU(name=f"relu{i}")(x)
        if i == 1:
            x = layers.MaxPooling2D(name="pool")(x)
            x = layers.Dropout(0.3, name="drop")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(4, name="fc")(x), name="cnn")


def resnet():
    inp = keras.Input((12, 12, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    for _ in range(3):
        h = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
        h = layers.Conv2D(8, 3, padding="same")(h)
        x = layers.ReLU()(layers.Add()([x, h]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(4)(x), name="resnet")


def unet():
    inp = keras.Input((16, 16, 3))
    c1 = layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    p1 = layers.MaxPooling2D()(c1)
    c2 = layers.Conv2D(16, 3, padding="same", activation="relu")(p1)
    p2 = layers.MaxPooling2D()(c2)
    b = layers.Conv2D(32, 3, padding="same", activation="relu")(p2)
    u2 = layers.Concatenate()([layers.Conv2DTranspose(16, 2, strides=2)(b), c2])
    d2 = layers.Conv2D(16, 3, padding="same", activation="relu")(u2)
    u1 = layers.Concatenate()([layers.UpSampling2D()(d2), c1])
    d1 = layers.Conv2D(8, 3, padding="same", activation="relu")(u1)
    return keras.Model(inp, layers.Conv2D(2, 1)(d1), name="unet")


def encoder():
    inp = keras.Input((8, 16))
    x = inp
    for i in range(2):
        a = layers.MultiHeadAttention(num_heads=2, key_dim=8, name=f"mha{i}")(x, x)
        x = layers.LayerNormalization(name=f"ln{i}a")(layers.Add()([x, a]))
        f = layers.Dense(32, activation="relu")(x)
        f = layers.Dropout(0.1)(layers.Dense(16)(f))
        x = layers.LayerNormalization(name=f"ln{i}b")(layers.Add()([x, f]))
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(inp, layers.Dense(3)(x), name="encoder")


def mobilenet():
    return keras.applications.MobileNet(weights=None, input_shape=(32, 32, 3), alpha=0.25, classes=5)


def shared_two_inputs():
    a, b = keras.Input((6,), name="a"), keras.Input((6,), name="b")
    dense = layers.Dense(6, activation="tanh", name="shared")
    h = layers.Concatenate()([dense(a), dense(dense(b))])
    return keras.Model([a, b], layers.Dense(2)(h), name="shared")


def build(fn, seed=0):
    keras.utils.set_random_seed(seed)
    return fn()


def data(model, n=4, classes=None, seed=1):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n, *t.shape[1:])).astype("float32") for t in model.inputs]
    out = model.outputs[0].shape[1:]
    y = rng.integers(0, classes, n) if classes else rng.standard_normal((n, *out)).astype("float32")
    return (xs[0] if len(xs) == 1 else xs), y


def tight(eg, frac=0.25):
    """A budget between the smallest feasible one and the checkpoint-all peak."""
    lo, _ = min_budget_bytes(eg.graph)
    return int(lo + frac * (checkpoint_all_peak_bytes(eg.graph) - lo))


def reference_step(fn, x, y, loss):
    """Loss, gradients and non-trainable state after one plain GradientTape step."""
    model = build(fn)
    with tf.GradientTape() as tape:
        value = remat_tf.graph.loss_object(loss)(y, model(x, training=True))
    grads = tape.gradient(value, model.trainable_variables)
    return float(value), [g.numpy() for g in grads], [v.numpy() for v in model.non_trainable_variables]


def check_plan(fn, loss, method, frac, classes=None, options=None):
    model = build(fn)
    x, y = data(model, classes=classes)
    eg = extract_graph(model, x, y, loss)
    budget = 1.0 if method == "checkpoint-all" else tight(eg, frac)
    rm = RematModel.from_extracted(eg, budget=budget, method=method, solver_options=options)
    assert rm.predicted_peak_bytes <= rm.budget_bytes
    value, grads = rm.compute_gradients(x, y)
    ref_loss, ref_grads, ref_state = reference_step(fn, x, y, loss)
    assert float(value) == pytest.approx(ref_loss, rel=1e-5)
    assert len(grads) == len(ref_grads) == len(model.trainable_variables)
    for g, r, v in zip(grads, ref_grads, model.trainable_variables):
        # float32 round-off: op order differs between tf.function and eager, amplified by depth (MobileNet)
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-4 * float(np.abs(r).max()) + 1e-7,
                                   err_msg=v.path)
    for s, r, v in zip(model.non_trainable_variables, ref_state, model.non_trainable_variables):
        np.testing.assert_allclose(s.numpy(), r, rtol=1e-5, atol=1e-6, err_msg=f"{v.path} updated once")
    return rm


@pytest.mark.parametrize("method", ["checkpoint-all", "ilp", "lp-rounding"])
def test_cnn_bn_dropout_gradients(method):
    rm = check_plan(cnn_bn_dropout, "mse", method, 0.2, options={"time_limit_s": 30} if method == "ilp" else None)
    counts = rm.plan.compute_counts()
    if method == "checkpoint-all":
        assert counts.max() == 1 and rm.run_info.forward_reruns == 0
    else:  # a tight budget recomputes, dropout and BatchNorm included
        assert counts.sum() > rm.extracted.graph.n


def test_residual_network_ilp():
    rm = check_plan(resnet, "mse", "ilp", 0.2, options={"time_limit_s": 30})
    assert rm.plan.compute_counts().sum() > rm.extracted.graph.n


def test_unet_lp_rounding():
    rm = check_plan(unet, "mse", "lp-rounding", 0.2)
    assert rm.plan.compute_counts().sum() > rm.extracted.graph.n


def test_transformer_encoder():
    rm = check_plan(encoder, "mse", "lp-rounding", 0.3)
    names = rm.extracted.graph.names
    assert "mha0" in names and "grad/mha0" in names and "grad/ln1b" in names
    # attention probabilities are saved for the gradient inside the layer: counted as residuals
    assert rm.extracted.graph.meta["residual_bytes"][names.index("mha0")] > 0


def test_mobilenet():
    rm = check_plan(mobilenet, "sparse_categorical_crossentropy", "auto", 0.3, classes=5,
                    options={"time_limit_s": 5})
    assert rm.result.success


def test_shared_layer_and_two_inputs():
    rm = check_plan(shared_two_inputs, "mse", "ilp", 0.2, options={"time_limit_s": 20})
    names = rm.extracted.graph.names
    assert {"shared@0", "shared@1", "shared@2", "grad/shared@2"} <= set(names)


def test_fit_matches_eager_fit():
    x, y = data(build(cnn_bn_dropout), n=16, seed=3)
    ref = build(cnn_bn_dropout)
    ref.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", run_eagerly=True)
    ref_hist = ref.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    model = build(cnn_bn_dropout)
    eg = extract_graph(model, x[:8], y[:8], "mse")
    rm = RematModel.from_extracted(eg, budget=tight(eg, 0.2), method="ilp", solver_options={"time_limit_s": 30})
    assert rm.plan.compute_counts().sum() > rm.extracted.graph.n
    rm.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    hist = rm.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    assert hist["loss"][1] < hist["loss"][0]
    np.testing.assert_allclose(hist["loss"], ref_hist, rtol=1e-4)
    assert "mae" in hist
    for a, b in zip(model.weights, ref.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=a.path)
    # evaluation and prediction run the wrapped model
    assert rm.predict(x, verbose=0).shape == (16, 4)


def test_vgg16_graph_matches_zoo():
    from remat_core.zoo import zoo_graph

    model = keras.applications.VGG16(weights=None)
    x = np.zeros((1, 224, 224, 3), "float32")
    y = np.zeros((1, 1000), "float32")
    g = extract_graph(model, x, y, "categorical_crossentropy").graph
    z = zoo_graph("vgg16", batch_size=1)
    m = g.meta["n_forward"]
    assert z.names[:m + 1] == g.names[:m + 1]
    np.testing.assert_array_equal(g.cost[:m + 1], z.cost[:m + 1])
    assert sum(g.meta["residual_bytes"]) == 0  # fused ReLUs, pooling and softmax save only outputs
    np.testing.assert_array_equal(g.memory_bytes[:m], z.memory_bytes[:m])
    # the zoo leaves the targets out and keeps every weight gradient resident; the adapter frees each one
    # after its update (counted in its backward node's workspace)
    assert g.fixed_bytes + g.meta["weight_grad_bytes"] - 4 * 1000 == z.fixed_bytes
    rev = {f"grad/{n}": n for n in g.names[:m]}
    for k in range(m + 1, g.n):
        assert g.cost[k] == z.cost[z.index(g.names[k])] == 2 * g.cost[g.index(rev[g.names[k]])]


def test_infeasible_budget_names_the_layer():
    model = build(cnn_bn_dropout)
    x, y = data(model)
    eg = extract_graph(model, x, y, "mse")
    lo, culprit = min_budget_bytes(eg.graph)
    with pytest.raises(BudgetInfeasibleError) as err:
        RematModel.from_extracted(eg, budget=lo - 1, method="ilp")
    assert err.value.min_budget_bytes >= lo and err.value.culprit == culprit.removeprefix("grad/")
    assert "of activation memory" in str(err.value) and repr(err.value.culprit) in str(err.value)
    assert format_bytes(err.value.min_budget_bytes) in str(err.value)


def test_unsupported_models():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = layers.Dense(2)

        def call(self, x):
            return self.d(x)

    sub = Sub()
    sub(np.zeros((2, 3), "float32"))
    with pytest.raises(UnsupportedModelError, match="subclassed"):
        extract_graph(sub, np.zeros((2, 3), "float32"), np.zeros((2, 2), "float32"), "mse")
    inp = keras.Input((3,))
    reg = keras.Model(inp, layers.Dense(2, kernel_regularizer="l2", name="reg")(inp))
    with pytest.raises(UnsupportedModelError, match="'reg'"):
        extract_graph(reg, np.zeros((2, 3), "float32"), np.zeros((2, 2), "float32"), "mse")
    with pytest.raises(ValueError, match="cost_model"):
        extract_graph(reg, np.zeros((2, 3), "float32"), np.zeros((2, 2), "float32"), "mse", cost_model="x")


def test_profile_costs_and_sequential():
    net = keras.Sequential([keras.Input((5,)), layers.Dense(7, activation="relu"), layers.Dense(2)])
    x, y = np.ones((4, 5), "float32"), np.ones((4, 2), "float32")
    eg = extract_graph(net, x, y, "mse", cost_model="profile", warmup=1, repeats=2)
    assert eg.graph.meta["cost_unit"] == "s" and (eg.graph.cost > 0).all()
    rm = rematerialize(net, x, y, loss="mse", method="checkpoint-all")
    with pytest.raises(ValueError, match="loss"):
        rm.compile(optimizer="sgd", loss="mae")
    rm.compile(optimizer="sgd")
    # another batch size gets its own plan (tests/tf/test_tf_batch_shapes.py), with the same cost model
    rm.fit(np.ones((3, 5), "float32"), np.ones((3, 2), "float32"), batch_size=3, verbose=0)
    assert len(rm.plans) == 2
    assert [s.eg.graph.meta["cost_unit"] for s in rm.plans.values()] == ["flop", "flop"]


@pytest.mark.parametrize("pattern", ["recompute-all", "keep-outputs-recompute-inputs"])
def test_recomputation_keeps_gradients_masks_and_statistics(pattern):
    """Hand-made schedules recompute every forward node (BatchNorm and dropout included) in every backward
    stage; the second keeps the layers' outputs too, so that backward nodes see recomputed inputs next to
    old outputs (the executor's _reuse_old_forward path)."""
    from remat_core import Schedule, make_plan
    from remat_tf.execute import apply_updates, run_plan

    model = build(cnn_bn_dropout)
    x, y = data(model)
    eg = extract_graph(model, x, y, "mse")
    g, m = eg.graph, eg.n_forward
    R = np.eye(g.n, dtype=bool)
    S = np.zeros((g.n, g.n), dtype=bool)
    for t in range(g.n):
        for i in range(t):
            forward = i < m
            if pattern == "recompute-all":
                R[t, i] = forward
                S[t, i] = not forward
            else:
                S[t, i] = True
                R[t, i] = forward and t > m and i % 2 == 0
    plan = make_plan(g, Schedule(R, S))
    infos = []

    @tf.function(autograph=False)
    def grads(x, y):
        out = run_plan(eg, plan, [x], [y])
        apply_updates(out.updates)
        infos.append(out.info)
        return out.loss, out.grads

    value, got = grads(tf.constant(x), tf.constant(y))
    ref_loss, ref_grads, ref_state = reference_step(cnn_bn_dropout, x, y, "mse")
    assert float(value) == pytest.approx(ref_loss, rel=1e-5)
    for a, b, v in zip(got, ref_grads, model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()) + 1e-7,
                                   err_msg=v.path)
    for a, b in zip(model.non_trainable_variables, ref_state):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-5, atol=1e-6)
    counts = plan.compute_counts()
    recomputed = {g.names[k] for k in range(m) if counts[k] > 1}
    if pattern == "recompute-all":
        assert {"bn1", "drop", "conv0"} <= recomputed and infos[0].forward_reruns == 0
    else:  # even forward nodes are recomputed; the odd ones' backward nodes trace their layer again, and
        # their gradients read the kept outputs: nothing is left for the runtime to re-run
        assert "bn1" in recomputed and "drop" not in recomputed and infos[0].forward_reruns == 0


def split_two_outputs():
    a = keras.Input((6,))
    h = layers.Dense(8, activation="tanh", name="h")(a)
    left, right = keras.ops.split(h, 2, axis=-1)  # an operation with two outputs
    o1 = layers.Dense(3, name="o1")(left)
    o2 = layers.Dense(2, name="o2")(layers.Multiply()([right, right]))
    return keras.Model(a, [o1, o2], name="two")


def two_output_loss(y_true, y_pred):
    return keras.ops.mean((y_true[0] - y_pred[0]) ** 2) + keras.ops.mean(keras.ops.abs(y_true[1] - y_pred[1]))


def test_operation_with_two_outputs_and_two_model_outputs():
    model = build(split_two_outputs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype("float32")
    y = [rng.standard_normal((4, 3)).astype("float32"), rng.standard_normal((4, 2)).astype("float32")]
    eg = extract_graph(model, x, y, two_output_loss)
    assert [c.n_outputs for c in eg.calls if c.name == "split"] == [2]
    rm = RematModel.from_extracted(eg, budget=tight(eg, 0.1), method="ilp", solver_options={"time_limit_s": 20})
    value, grads = rm.compute_gradients(x, y)
    ref = build(split_two_outputs)
    with tf.GradientTape() as tape:
        ref_value = remat_tf.graph.loss_object(two_output_loss)(y, ref(x, training=True))
    assert float(value) == pytest.approx(float(ref_value), rel=1e-6)
    for a, b in zip(grads, tape.gradient(ref_value, ref.trainable_variables)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
