"""Keras adapter benchmark: executor overhead and measured peak memory of plans.

Run: ``.venv/bin/python benchmarks/bench_tf.py [--quick]``

(a) Executor overhead: ``fit`` of checkpoint-all executed by remat_tf against
    plain ``model.fit`` of the same model (``jit_compile=False`` like ours; XLA
    would reorder the plan), on a CNN with BatchNorm and dropout. Per-step
    wall-clock times from a batch-end callback, first epoch dropped (tracing),
    the two fits interleaved in rounds; ratio of the medians within this run.
(b) Memory: plans at 0.5 of activation memory (and checkpoint-all) run by
    ``compute_gradients``; the peak is TensorFlow's own allocator statistic
    (``tf.config.experimental.get_memory_info``: on a GPU its device
    allocator; on CPU the BFC allocator that ``TF_CPU_ALLOCATOR_USE_BFC=true``
    turns on, set by this script before TensorFlow is imported). Measured =
    peak during the step minus the bytes in use before it (weights and the
    batch are resident already); predicted = the simulator's peak minus the
    weights and the batch (activations, temporaries, weight gradients).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _report  # noqa: E402
import numpy as np  # noqa: E402


def cnn(depth: int, width: int, size: int):
    import keras
    from keras import layers

    inp = keras.Input((size, size, 3))
    x = inp
    for i in range(depth):
        x = layers.Conv2D(width * (2 if i >= depth // 2 else 1), 3, padding="same", name=f"conv{i}")(x)
        x = layers.BatchNormalization(name=f"bn{i}")(x)
        x = layers.ReLU(name=f"relu{i}")(x)
        if i == depth // 2 - 1:
            x = layers.MaxPooling2D(name="pool")(x)
            x = layers.Dropout(0.2, name="drop")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(10, name="fc")(x), name=f"cnn{depth}")


def build(cfg, seed=0):
    import keras

    keras.utils.set_random_seed(seed)
    return cnn(*cfg)


class StepTimes:
    """A Keras callback collecting wall-clock seconds per training batch."""

    def __new__(cls):
        import keras

        class _Cb(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.times = []
                self._t = None

            def on_train_batch_begin(self, batch, logs=None):
                self._t = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                self.times.append(time.perf_counter() - self._t)

        return _Cb()


def overhead(cfg, batch, steps, rounds):
    import keras

    import remat_tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * steps, cfg[2], cfg[2], 3)).astype("float32")
    y = rng.integers(0, 10, batch * steps)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    plain = build(cfg)
    plain.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss, jit_compile=False)
    rm = remat_tf.rematerialize(build(cfg), x[:batch], y[:batch], loss=loss, budget=1.0, method="checkpoint-all")
    rm.compile(optimizer=keras.optimizers.SGD(0.01))
    times = {"plain": [], "remat": []}
    for name, m in (("plain", plain), ("remat", rm)):
        m.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)  # trace and warm up
    for r in range(rounds):
        order = [("plain", plain), ("remat", rm)][:: 1 if r % 2 == 0 else -1]
        for name, m in order:
            cb = StepTimes()
            m.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
            times[name] += cb.times
    p, q = statistics.median(times["plain"]), statistics.median(times["remat"])
    return {"plain_ms": 1e3 * p, "remat_ms": 1e3 * q, "ratio": q / p, "steps": len(times["plain"]),
            "nodes": rm.extracted.graph.n}


def _measure(fn, x, y, device):
    import tensorflow as tf

    fn(x, y)  # trace
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    out = fn(x, y)
    [t.numpy() for t in tf.nest.flatten(out)]
    return tf.config.experimental.get_memory_info(device)["peak"] - before


def _step_ms(fn, x, y, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x, y)[0].numpy()
        samples.append(time.perf_counter() - start)
    return 1e3 * statistics.median(samples)


def memory(cfg, batch, methods, time_limit_s, repeats=5):
    import keras
    import tensorflow as tf

    import remat_tf
    from remat_core.errors import BudgetInfeasibleError
    from remat_core.units import budget_fraction, min_budget_bytes

    device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
    rng = np.random.default_rng(1)
    x = tf.constant(rng.standard_normal((batch, cfg[2], cfg[2], 3)).astype("float32"))
    y = tf.constant(rng.integers(0, 10, batch))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rows = []
    plain = build(cfg)

    @tf.function(jit_compile=False)
    def plain_step(x, y):
        with tf.GradientTape() as tape:
            value = loss(y, plain(x, training=True))
        return value, tape.gradient(value, plain.trainable_variables)

    rows.append({"plan": "plain GradientTape step", "measured": _measure(plain_step, x, y, device),
                 "step_ms": _step_ms(plain_step, x, y, repeats)})
    for method, budget in methods:
        try:
            rm = remat_tf.rematerialize(build(cfg), x, y, loss=loss, budget=budget, method=method,
                                        solver_options={"time_limit_s": time_limit_s} if method != "checkpoint-all"
                                        else None)
        except BudgetInfeasibleError as exc:
            rows.append({"plan": f"{method} @{budget}", "error": str(exc)})
            continue
        g = rm.extracted.graph
        resident = g.meta["weight_bytes"] + g.meta["batch_bytes"]
        measured = _measure(rm.compute_gradients, x, y, device)
        counts = rm.plan.compute_counts()
        rows.append({
            "plan": f"{method} @{budget}", "budget_fraction": budget_fraction(g, rm.budget_bytes),
            "predicted": rm.predicted_peak_bytes - resident, "measured": measured,
            "recomputed": int(counts.sum() - g.n), "reruns": rm.run_info.forward_reruns,
            "cost": float(rm.result.objective), "executed_cost": rm.run_info.executed_cost(g),
            "step_ms": _step_ms(rm.compute_gradients, x, y, repeats), "min_fraction": budget_fraction(g, min_budget_bytes(g)[0]),
        })
    return device, rows


def main() -> None:
    args = _report.quick_arguments(__doc__, "smaller model and fewer rounds (a smoke run)")
    import keras
    import tensorflow as tf

    cfg = (4, 8, 16) if args.quick else (10, 16, 32)
    batch = 8 if args.quick else 128
    over = overhead(cfg, batch, steps=4 if args.quick else 6, rounds=2 if args.quick else 6)
    methods = [("checkpoint-all", 1.0), ("ilp", 0.5), ("lp-rounding", 0.5), ("auto", 0.5)]
    device, rows = memory(cfg, batch, methods if not args.quick else methods[:2], 10 if args.quick else 60,
                          repeats=2 if args.quick else 5)
    mib = 2.0 ** 20
    text = [
        "## tf",
        "",
        f"Command: `{_report.command_line()}`  ",
        f"Machine: {_report.machine_line()}; TensorFlow {tf.__version__}, Keras {keras.__version__}, "
        f"device {device}. The machine is shared with other engineers' jobs (noisy); ratios are within one run.",
        "",
        f"Model: `bench_tf.cnn{cfg}` ({cfg[0]} conv-BN-ReLU, max-pool + dropout halfway, width {cfg[1]}/"
        f"{2 * cfg[1]}, {cfg[2]}x{cfg[2]} input, batch {batch}, sparse cross-entropy from logits).",
        "",
        "### Executor overhead (checkpoint-all executed by remat_tf vs plain `model.fit`)",
        "",
        "Both `jit_compile=False`; per-step wall clock from a batch callback, medians over "
        f"{over['steps']} steps each, fits interleaved.",
        "",
        _report.table(["plain fit ms/step", "remat checkpoint-all ms/step", "ratio", "target", "graph nodes"],
                      [[f"{over['plain_ms']:.1f}", f"{over['remat_ms']:.1f}", f"{over['ratio']:.3f}", "<= 1.15",
                        over["nodes"]]]),
        "",
        "### Measured peak vs predicted",
        "",
        "Measured: TensorFlow allocator peak during one `compute_gradients` step minus the bytes in use before "
        f"it ({'GPU allocator' if device.startswith('GPU') else 'CPU BFC allocator, TF_CPU_ALLOCATOR_USE_BFC=true'}"
        "). Predicted: the simulator's peak minus weights and batch. `recomputed`: extra node computations in "
        "the plan; `reruns`: backward nodes whose layer's forward really re-ran (the plan recomputed an input of "
        "a layer whose output it kept and the executor could not point the gradient at the kept tensors, see "
        "remat_tf.execute); the executed cost counts them, the plan's cost does not. Step: median of "
        f"{5 if not args.quick else 2} `compute_gradients` calls, same run.",
        "",
        _report.table(
            ["plan", "budget (fraction of activations)", "predicted MiB", "measured MiB", "measured / predicted",
             "recomputed", "reruns", "plan cost (GFLOP)", "executed cost (GFLOP)", "step ms"],
            [[r["plan"], f"{r['budget_fraction']:.3f}" if "budget_fraction" in r else "",
              f"{r['predicted'] / mib:.2f}" if "predicted" in r else "",
              f"{r['measured'] / mib:.2f}" if "measured" in r else r.get("error", "")[:160],
              f"{r['measured'] / r['predicted']:.3f}" if "predicted" in r else "",
              r.get("recomputed", ""), r.get("reruns", ""), f"{r['cost'] / 1e9:.3f}" if "cost" in r else "",
              f"{r['executed_cost'] / 1e9:.3f}" if "cost" in r else "",
              f"{r['step_ms']:.0f}" if "step_ms" in r else ""]
             for r in rows]),
    ]
    if len(rows) > 1 and "min_fraction" in rows[1]:
        text += ["", f"Smallest feasible budget (lower bound): {rows[1]['min_fraction']:.3f} of activation memory."]
    markdown = "\n".join(text)
    _report.save_json("tf" + ("_quick" if args.quick else ""), {"overhead": over, "device": device, "memory": rows})
    if not args.quick:
        _report.write_section("tf", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
