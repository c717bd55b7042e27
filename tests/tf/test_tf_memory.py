"""Kernel scratch measured per op signature (remat_tf.memory) instead of a fixed 32 MiB allowance (issue 35 item 5)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import remat_tf  # noqa: E402
from remat_core.units import budget_fraction, min_budget_bytes  # noqa: E402
from remat_tf import graph as tf_graph  # noqa: E402
from remat_tf import memory  # noqa: E402
from remat_tf.zoo_models import transformer_encoder  # noqa: E402

layers = keras.layers
MiB = 1 << 20

needs_stats = pytest.mark.skipif(memory.stats_device() is None, reason="the allocator keeps no statistics here")


def cnn5(dtype="float32"):
    """The issue's small model: five 3x3 convolutions on 32x32x3 images."""
    inp = keras.Input((32, 32, 3), dtype=dtype)
    x = inp
    for i in range(5):
        x = layers.ReLU(dtype=dtype)(layers.Conv2D(16, 3, padding="same", dtype=dtype)(x))
    return keras.Model(inp, layers.Dense(10, dtype=dtype)(layers.GlobalAveragePooling2D(dtype=dtype)(x)))


def _batch(dtype, n=4):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 32, 32, 3)).astype(dtype), rng.integers(0, 10, n)


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _conv_backprop_filter(dtype):
    x = tf.zeros((4, 32, 32, 16), dtype)

    @tf.function(autograph=False)
    def f(x):
        return tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=[3, 3, 16, 16], out_backprop=x,
                                               strides=[1, 1, 1, 1], padding="SAME")

    return [op for op in f.get_concrete_function(x).graph.get_operations() if op.type == "Conv2DBackpropFilter"]


@needs_stats
def test_scratch_is_measured_per_kernel():
    """float64 runs TensorFlow's Eigen filter backprop (a ~32 MiB working buffer whatever the batch); the
    oneDNN float32 kernel of the same shape takes almost none. One signature is measured once."""
    memory.clear_cache()
    (op64,) = _conv_backprop_filter(tf.float64)
    got = memory.measure_scratch([op64])
    assert got[op64.name] > 16 * MiB
    (op32,) = _conv_backprop_filter(tf.float32)
    assert memory.measure_scratch([op32])[op32.name] < 4 * MiB
    assert len(memory._cache) == 2
    memory.measure_scratch([op64, op32])
    assert len(memory._cache) == 2  # cached per signature


@needs_stats
def test_small_model_plans_below_the_old_allowance_floor():
    """The issue's 5-layer CNN on 4 x 32x32x3: with the 32 MiB allowance no budget below 0.997 of activation
    memory was feasible; with measured scratch (float32, oneDNN) it plans down like a large model."""
    x, y = _batch("float32")
    keras.utils.set_random_seed(0)
    eg = remat_tf.extract_graph(cnn5(), x, y, LOSS)
    floor = budget_fraction(eg.graph, min_budget_bytes(eg.graph)[0])
    old = remat_tf.extract_graph(cnn5(), x, y, LOSS, kernel_scratch=tf_graph.CPU_KERNEL_SCRATCH_BYTES)
    assert budget_fraction(old.graph, min_budget_bytes(old.graph)[0]) > 0.9
    assert floor < 0.7
    rm = remat_tf.RematModel.from_extracted(eg, budget=0.6, method="ilp", solver_options={"time_limit_s": 20})
    assert rm.plan.compute_counts().sum() > eg.graph.n
    loss, _ = rm.compute_gradients(x, y)
    assert np.isfinite(float(loss))


@needs_stats
def test_float64_prediction_covers_the_measured_scratch():
    """float64 checkpoint-all of the 5-layer CNN: the step measures ~36 MiB, nearly all Eigen scratch. Without
    scratch the model predicted 6.6 MiB; measured scratch brings the prediction within 5% above measurement
    (an upper bound: measured / predicted 0.95 here)."""
    x, y = _batch("float64")
    keras.utils.set_random_seed(0)
    eg = remat_tf.extract_graph(cnn5("float64"), x, y, LOSS)
    rm = remat_tf.RematModel.from_extracted(eg, budget=1.0, method="checkpoint-all")
    resident = eg.graph.meta["weight_bytes"] + eg.graph.meta["batch_bytes"]
    predicted = rm.predicted_peak_bytes - resident
    device = memory.stats_device()
    xt, yt = tf.constant(x), tf.constant(y)
    rm.compute_gradients(xt, yt)
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    out = rm.compute_gradients(xt, yt)
    [t.numpy() for t in tf.nest.flatten(out)]
    measured = tf.config.experimental.get_memory_info(device)["peak"] - before
    assert measured > 16 * MiB  # the scratch is real
    assert 0.8 * predicted <= measured <= 1.05 * predicted


def test_unmeasurable_allocator_falls_back_to_the_allowance(monkeypatch):
    """Where the allocator keeps no statistics (CPU with oneDNN off) the Eigen upper bound is used."""
    monkeypatch.setattr(memory, "stats_device", lambda: None)
    x, y = _batch("float32")
    eg = remat_tf.extract_graph(cnn5(), x, y, LOSS)
    assert max(eg.graph.workspace_bytes) >= 32 * MiB
    with pytest.raises(ValueError, match="`kernel_scratch`"):
        remat_tf.extract_graph(cnn5(), x, y, LOSS, kernel_scratch="measured")
    # the error names the scratch that sets the smallest budget (MobileNetV3Small in float64: a 32 MiB buffer)
    with pytest.raises(remat_tf.BudgetInfeasibleError, match=r"kernels take 3\d\.\d MiB of scratch"):
        remat_tf.RematModel.from_extracted(eg, budget=0.5, method="checkpoint-all")


def transformer(seq=64, width=64, blocks=4):
    """Pre-norm encoder blocks (MultiHeadAttention, GELU MLP), as benchmarks/bench_tf.transformer."""
    keras.utils.set_random_seed(0)
    return transformer_encoder(seq, width, blocks)


def bn_cnn():
    """Six 3x3 convolutions with BatchNorm and ReLU on 16x16 images, a max-pool halfway."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3))
    x = inp
    for i, width in enumerate((16, 16, 32, 32, 64, 64)):
        x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(width, 3, padding="same")(x)))
        if i == 2:
            x = layers.MaxPooling2D()(x)
    return keras.Model(inp, layers.Dense(10)(layers.GlobalAveragePooling2D()(x)))


@needs_stats
@pytest.mark.parametrize("name, budgets", [("transformer", (1.0, 0.5)), ("cnn", (1.0,))])
def test_replayed_peak_matches_measured(name, budgets):
    """The traced training step replayed op by op (remat_tf.memory.replay_peak_bytes) predicts the peak of the
    tensors the step allocates within 10% (read from TensorFlow's profiler: the bytes requested), and the BFC
    allocator's peak (chunks: up to twice a request each) within -10%/+100%: the transformer at checkpoint-all
    and at a plan that recomputes, a BatchNorm CNN at checkpoint-all. The graph-level prediction stays an upper
    bound (within 5%)."""
    rng = np.random.default_rng(0)
    if name == "transformer":
        build, x = transformer, rng.standard_normal((8, 64, 64)).astype("float32")
    else:
        build, x = bn_cnn, rng.standard_normal((8, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 10, 8)
    eg = remat_tf.extract_graph(build(), x, y, LOSS)
    resident = eg.graph.fixed_bytes
    for budget in budgets:
        method = "checkpoint-all" if budget == 1.0 else "auto"
        rm = remat_tf.RematModel.from_extracted(eg, budget=budget, method=method,
                                                solver_options={} if method == "checkpoint-all" else
                                                {"time_limit_s": 5})
        rm.compile(optimizer=keras.optimizers.SGD(0.01))
        assert rm.replayed_peak_bytes is None  # nothing traced yet
        measured, tensors = memory.train_step_tensor_peak_bytes(rm, x, y)
        replayed = rm.replayed_peak_bytes - resident
        predicted = rm.predicted_peak_bytes - resident
        # 5% with one intra-op thread (as bench_tf runs); with more, TensorFlow's kernels overlap differently
        # and 10% is allowed (measured 0.915-0.931 of the replay for the 0.5 plan with two)
        one_thread = 1 in (tf.config.threading.get_intra_op_parallelism_threads(),
                           int(os.environ.get("TF_NUM_INTRAOP_THREADS", "0") or 0))
        tolerance = 0.10 if one_thread else 0.15
        # measured 0.89-0.99 of the replay with one thread (Grappler rewrites some of the traced graph)
        assert abs(tensors / replayed - 1) <= tolerance, (budget, tensors, measured, replayed)
        # the allocator's chunks (up to twice a request each): what earlier tests left in its free lists decides
        # where in that range a step lands (the CNN at 1.0: 1.00-1.17 of its replay in one process, 1.24 in a
        # clean-clone run beside two busy loops), so only the design's bound is checked here
        assert 0.9 <= measured / replayed <= 2.0, (budget, tensors, measured, replayed)
        assert measured <= 1.05 * predicted, (budget, measured, predicted)
        if budget == 0.5:
            assert rm.plan.compute_counts().sum() > eg.graph.n  # it recomputes


def residual_bn(blocks=3, width=64, size=8):
    """ResNet-like: a stem, then ``blocks`` bottleneck-free residual blocks (3x3 conv, BatchNorm, ReLU, twice,
    plus the identity), on ``size`` x ``size`` images."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((size, size, 3))
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(width, 3, padding="same")(inp)))
    for _ in range(blocks):
        h = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(width, 3, padding="same")(x)))
        h = layers.BatchNormalization()(layers.Conv2D(width, 3, padding="same")(h))
        x = layers.ReLU()(layers.Add()([x, h]))
    return keras.Model(inp, layers.Dense(10)(layers.GlobalAveragePooling2D()(x)))


@needs_stats
def test_every_weight_update_is_gated_and_the_replay_agrees():
    """Each optimizer write is ordered before the first plan statement after the last read of its variable that
    has plan-order control inputs. A statement whose ops all read the previous statement's values has none
    (``tf.control_dependencies`` adds none), and its write used to be left ungated: TensorFlow ran it whenever its
    queue got to it, and the replay, running the writes last, held every weight gradient to the end (ResNet50:
    replayed 3.2x its measured peak). The replay of a recomputing plan of a residual BatchNorm model then stays
    near the allocator's peak (measured 0.82 of the replay: Grappler rewrites BatchNorm's gradient, which the
    replay of the traced graph counts as written)."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 16, 16, 3)).astype("float32"), rng.integers(0, 10, 8)
    eg = remat_tf.extract_graph(residual_bn(blocks=4, width=64, size=16), x, y, LOSS)
    rm = remat_tf.RematModel.from_extracted(eg, budget=0.5, method="linearized-greedy")
    assert rm.plan.compute_counts().sum() > eg.graph.n  # it recomputes
    rm.compile(optimizer=keras.optimizers.SGD(0.01))
    measured = memory.train_step_peak_bytes(rm, x, y)
    info = rm._remat["info"]
    statements = info.statement_ops
    written = {w for w in info.write_statements}
    controlled = [any(c.name not in written for op in ops for c in op.control_inputs) for ops in statements]
    ungated_before = 0
    for write, last in info.write_statements.items():
        later = [j for j in range(last + 1, len(statements)) if controlled[j]]
        if last < 0 or not later:
            continue
        ungated_before += not controlled[last + 1]
        assert any(write in {c.name for c in op.control_inputs} for op in statements[later[0]]), write
    assert ungated_before  # the case the gate used to miss occurs in this model
    replayed = rm.replayed_peak_bytes - eg.graph.fixed_bytes
    assert 0.75 <= measured / replayed <= 1.25, (measured, replayed)
