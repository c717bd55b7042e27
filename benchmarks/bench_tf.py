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
(c) Against ``keras.RematScope`` (issue 35): keras.applications ResNet50,
    EfficientNetB0, DenseNet121, MobileNetV2 (``weights=None``) and a
    MultiHeadAttention transformer, float32. Plain ``fit``; each RematScope
    mode that runs in this Keras (checked each run; a mode that fails is listed
    with its error); remat_tf checkpoint-all (1.0) and ``auto`` at 0.7, 0.5,
    0.3 of activation memory and the smallest budget it finds. Measured peak: one ``train_on_batch`` step,
    allocator peak minus the bytes in use before it (the same meter as (b));
    step time: median of the per-batch wall clock of one ``fit`` epoch after a
    warm-up epoch. The load average is recorded with each model.

Options: ``--quick`` (smoke run, README untouched), ``--parts abc`` (which parts), ``--models`` (part c).
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


MODELS = ("mobilenetv2", "resnet50", "efficientnetb0", "densenet121", "transformer")
LEVELS = (1.0, 0.7, 0.5, 0.3, "smallest")  # 1.0: auto's plan there recomputes nothing (the fast point)


def transformer(seq: int = 64, width: int = 64, blocks: int = 4):
    """A pre-norm encoder (MultiHeadAttention, GELU MLP) over ``seq`` tokens of ``width`` features, 10 classes."""
    from remat_tf.zoo_models import transformer_encoder

    return transformer_encoder(seq, width, blocks)


def build_app(name: str, size: int):
    """One of :data:`MODELS`, random weights (seeded), 10 classes, logits out."""
    import keras

    keras.utils.set_random_seed(0)
    if name == "transformer":
        return transformer()
    fn = {"mobilenetv2": "MobileNetV2", "resnet50": "ResNet50", "efficientnetb0": "EfficientNetB0",
          "densenet121": "DenseNet121"}[name]
    return getattr(keras.applications, fn)(input_shape=(size, size, 3), weights=None, classes=10,
                                           classifier_activation=None)


def scope_modes(name: str, size: int) -> list:
    """The RematScope settings tried: ``(label, RematScope kwargs, run_eagerly)``.

    "full" and "larger_than" wrap layers that take a ``training`` argument (BatchNorm, Dropout) in
    ``custom_gradient``, which accepts keyword arguments only eagerly: they are tried in a graph and eagerly.
    "list_of_layers" is given every layer without a training argument (what "full" would do in a graph).
    """
    probe = build_app(name, size)
    no_training = [layer.name for layer in probe.layers
                   if layer.weights and not getattr(layer, "_call_has_training_arg", False)]
    threshold = 16 * 16 * 32
    return [("full", {"mode": "full"}, False), ("full, run_eagerly", {"mode": "full"}, True),
            ("activations", {"mode": "activations"}, False),
            (f"larger_than {threshold}", {"mode": "larger_than", "output_size_threshold": threshold}, False),
            (f"larger_than {threshold}, run_eagerly",
             {"mode": "larger_than", "output_size_threshold": threshold}, True),
            (f"list_of_layers ({len(no_training)} without training arg)",
             {"mode": "list_of_layers", "layer_names": no_training}, False)]


def _batch_data(name: str, size: int, batch: int, steps: int):
    rng = np.random.default_rng(2)
    shape = (64, 64) if name == "transformer" else (size, size, 3)
    x = rng.standard_normal((batch * steps, *shape)).astype("float32")
    return x, rng.integers(0, 10, batch * steps)


def _fit_step_ms(model, x, y, batch) -> float:
    """Median per-batch wall clock of one ``fit`` epoch (after a warm-up epoch that traces)."""
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    cb = StepTimes()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
    return 1e3 * statistics.median(cb.times)


def _ours_at(eg, level, time_limit_s):
    """A RematModel at ``level`` (a fraction, or "smallest": the lower bound, else the smallest peak auto reached;
    1.0: checkpoint-all, the plan that recomputes nothing)."""
    import remat_tf
    from remat_core.units import min_budget_bytes

    if level == 1.0:
        return remat_tf.RematModel.from_extracted(eg, budget=1.0, method="checkpoint-all")

    opts = {"time_limit_s": time_limit_s}
    budget = min_budget_bytes(eg.graph)[0] if level == "smallest" else level
    for _ in range(4):
        try:
            return remat_tf.RematModel.from_extracted(eg, budget=budget, method="auto", solver_options=opts)
        except remat_tf.BudgetInfeasibleError as exc:
            if level != "smallest" or not exc.min_budget_bytes or exc.min_budget_bytes <= budget:
                raise
            budget = int(exc.min_budget_bytes)
    return remat_tf.RematModel.from_extracted(eg, budget=budget, method="auto", solver_options=opts)


def versus_scope(name, size, batch, steps, time_limit_s, device, with_eager=True):
    """Part (c) for one model: rows for plain fit, each RematScope mode and remat_tf at :data:`LEVELS`."""
    import keras

    import remat_tf
    from remat_core.units import budget_fraction
    from remat_tf.memory import train_step_peak_bytes

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = _batch_data(name, size, batch, steps)
    xb, yb = x[:batch], y[:batch]
    rows = []
    load0 = os.getloadavg()[0]

    def run(label, kind, model, **extra):
        print(f"  {name}: {label} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        row = {"model": name, "variant": label, "kind": kind, **extra}
        try:
            row["peak"] = train_step_peak_bytes(model, xb, yb, device)
            row["step_ms"] = _fit_step_ms(model, x, y, batch)
        except Exception as exc:  # a RematScope mode that does not run in this Keras: recorded, not fatal
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}"
        rows.append(row)
        return row

    plain = build_app(name, size)
    plain.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss, jit_compile=False)
    run("plain fit", "plain", plain)
    for label, kwargs, eager in scope_modes(name, size):
        if eager and not with_eager:
            continue
        try:
            with keras.RematScope(**kwargs):
                m = build_app(name, size)
            m.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss, jit_compile=False, run_eagerly=eager)
        except Exception as exc:
            rows.append({"model": name, "variant": f"RematScope {label}", "kind": "scope",
                         "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}"})
            continue
        run(f"RematScope {label}", "scope", m)
    t0 = time.perf_counter()
    eg = remat_tf.extract_graph(build_app(name, size), xb, yb, loss)
    extract_s = time.perf_counter() - t0
    resident = eg.graph.meta["weight_bytes"] + eg.graph.meta["batch_bytes"]
    for level in LEVELS:
        t0 = time.perf_counter()
        label = "remat_tf checkpoint-all @1.0" if level == 1.0 else f"remat_tf auto @{level}"
        try:
            rm = _ours_at(eg, level, time_limit_s)
        except remat_tf.BudgetInfeasibleError as exc:
            rows.append({"model": name, "variant": label, "kind": "ours", "error": str(exc)[:200]})
            continue
        solve_s = time.perf_counter() - t0
        rm.compile(optimizer=keras.optimizers.SGD(0.01))
        counts = rm.plan.compute_counts()
        run(label, "ours", rm, fraction=budget_fraction(eg.graph, rm.budget_bytes),
            predicted=rm.predicted_peak_bytes - resident, recomputed=int(counts.sum() - eg.graph.n),
            solve_s=solve_s, extract_s=extract_s)
    load1 = os.getloadavg()[0]
    for r in rows:
        r["load"] = (load0, load1)
    return rows


def goals(rows: list) -> list:
    """Issue 35's goals per model: at every memory level a RematScope mode reaches, ours (at or below that peak)
    is faster; and ours reaches a peak below every RematScope mode's."""
    out = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name and r["kind"] == "ours" and "peak" in r]
        for peer in [r for r in rows if r["model"] == name and r["kind"] == "scope" and "peak" in r]:
            fit = [r for r in mine if r["peak"] <= peer["peak"]]
            best = min(fit, key=lambda r: r["step_ms"]) if fit else None
            met = best is not None and best["step_ms"] < peer["step_ms"]
            out.append([name, peer["variant"], f"{peer['peak'] / MIB:.1f}", f"{peer['step_ms']:.0f}",
                        best["variant"] if best else "none at or below", f"{best['peak'] / MIB:.1f}" if best else "",
                        f"{best['step_ms']:.0f}" if best else "", "met" if met else "missed"])
        scope_peaks = [r["peak"] for r in rows if r["model"] == name and r["kind"] == "scope" and "peak" in r]
        if mine:
            low = min(mine, key=lambda r: r["peak"])
            below = not scope_peaks or low["peak"] < min(scope_peaks)
            out.append([name, "lowest RematScope peak", f"{min(scope_peaks) / MIB:.1f}" if scope_peaks else "none ran",
                        "", low["variant"], f"{low['peak'] / MIB:.1f}", f"{low['step_ms']:.0f}",
                        "met (a level it does not reach)" if below else "missed"])
    return out


MIB = 2.0 ** 20


def plot(rows: list, path: str) -> None:
    """Measured peak against step time, one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["model"] for r in rows))
    cols = min(3, len(names))
    nrows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, 4.0 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        ran = [r for r in rows if r["model"] == name and "peak" in r]
        ours = sorted((r["peak"] / MIB, r["step_ms"], str(r["variant"]).split("@")[-1]) for r in ran
                      if r["kind"] == "ours")
        if ours:
            ax.plot([p[0] for p in ours], [p[1] for p in ours], "o-", color="C0", label="remat_tf (auto)")
            for px, py, lab in ours:
                ax.annotate(lab, (px, py), textcoords="offset points", xytext=(4, 4), fontsize=7)
        for i, r in enumerate(r for r in ran if r["kind"] == "scope"):
            ax.plot([r["peak"] / MIB], [r["step_ms"]], "s", color=f"C{i + 1}", mfc="none", ms=8,
                    label=r["variant"].replace("RematScope ", "RematScope: ")[:52])
        for r in ran:
            if r["kind"] == "plain":
                ax.plot([r["peak"] / MIB], [r["step_ms"]], "k*", ms=11, label="plain fit")
        ax.set_title(name)
        ax.set_xlabel("measured peak of a step (MiB)")
        ax.set_ylabel("fit step time (ms, log)")
        ax.set_yscale("log")  # RematScope's eager modes are 10-20x slower than the rest
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scope_markdown(rows: list, cfg: dict) -> list:
    table = []
    for r in rows:
        table.append([r["model"], r["variant"], f"{r['fraction']:.3f}" if "fraction" in r else "",
                      f"{r['peak'] / MIB:.2f}" if "peak" in r else r.get("error", "")[:160],
                      f"{r['predicted'] / MIB:.2f}" if "predicted" in r else "",
                      f"{r['peak'] / r['predicted']:.3f}" if "predicted" in r and "peak" in r else "",
                      f"{r['step_ms']:.0f}" if "step_ms" in r else "", r.get("recomputed", ""),
                      "{:.1f} / {:.1f}".format(*r["load"])])
    return [

        f"keras.applications models with `weights=None` at {cfg['size']}x{cfg['size']}x3 and the transformer "
        f"(`bench_tf.transformer()`: 4 pre-norm blocks, 64 tokens x 64), batch {cfg['batch']}, float32, SGD, "
        "sparse cross-entropy from logits, `jit_compile=False` everywhere. *Peak*: allocator peak of one "
        "`train_on_batch` minus the bytes in use before it (CPU BFC allocator). *Predicted*: the simulator's peak "
        "minus weights and batch. *Step*: median per-batch wall clock over one `fit` epoch of "
        f"{cfg['steps']} batches after a warm-up epoch. remat_tf: checkpoint-all at 1.0 and method `auto` "
        f"({cfg['time_limit_s']:.0f} s) at 0.7, 0.5, 0.3 of activation memory and the smallest budget auto finds. Load: 1-minute load average at the start "
        "and end of the model (2 cores shared with other engineers' jobs: times are noisy, compare within a model).",
        "",
        _report.table(["model", "variant", "budget (fraction)", "measured peak MiB", "predicted MiB",
                       "measured / predicted", "fit step ms", "recomputed", "load"], table),
        "",
        "Goals (issue 35): at every memory level a RematScope mode reaches, our fastest plan at or below that peak "
        "is faster; and we reach a peak below every RematScope mode's.",
        "",
        _report.table(["model", "RematScope mode", "its peak MiB", "its step ms", "our fastest at or below",
                       "our peak MiB", "our step ms", "goal"], goals(rows)),
        "",
        "![measured peak vs fit step time](results/tf_rematscope.png)",
    ]


def peaks_only(name, size, batch, time_limit_s, device) -> list:
    """Measured and predicted step peaks of plain fit and of remat_tf at :data:`LEVELS` (no timing, no
    RematScope): the quick check of issue 35's first goal, a plan never above plain ``fit``. *Predicted*: the
    graph-level prediction the plan was solved with; *replayed*: the traced training step replayed op by op
    (``RematModel.replayed_peak_bytes``), both minus weights and batch; *tensors*: the peak of the bytes the
    step's allocations requested, from TensorFlow's profiler (``remat_tf.memory.train_step_tensor_peak_bytes``;
    the allocator's meter counts the chunks it handed out)."""
    import keras

    import remat_tf
    from remat_core.units import budget_fraction
    from remat_tf.memory import train_step_tensor_peak_bytes

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    xb, yb = _batch_data(name, size, batch, 1)
    plain = build_app(name, size)
    plain.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss, jit_compile=False)
    plain_peak, plain_tensors = train_step_tensor_peak_bytes(plain, xb, yb)
    out = [[name, "plain fit", "", f"{plain_peak / MIB:.2f}", f"{plain_tensors / MIB:.2f}", "", "", "", "", "", ""]]
    eg = remat_tf.extract_graph(build_app(name, size), xb, yb, loss)
    resident = eg.graph.meta["weight_bytes"] + eg.graph.meta["batch_bytes"]
    for level in LEVELS:
        try:
            rm = _ours_at(eg, level, time_limit_s)
        except remat_tf.BudgetInfeasibleError as exc:
            out.append([name, f"remat_tf @{level}", "", str(exc)[:120], "", "", "", "", "", "", ""])
            continue
        rm.compile(optimizer=keras.optimizers.SGD(0.01))
        (peak, tensors), predicted = train_step_tensor_peak_bytes(rm, xb, yb), rm.predicted_peak_bytes - resident
        replayed = rm.replayed_peak_bytes - eg.graph.fixed_bytes
        out.append([name, f"remat_tf @{level}", f"{budget_fraction(eg.graph, rm.budget_bytes):.3f}",
                    f"{peak / MIB:.2f}", f"{tensors / MIB:.2f}", f"{predicted / MIB:.2f}", f"{peak / predicted:.3f}",
                    f"{replayed / MIB:.2f}", f"{peak / replayed:.3f}", f"{tensors / replayed:.3f}",
                    int(rm.plan.compute_counts().sum() - eg.graph.n)])
        print("  ", out[-1], file=sys.stderr, flush=True)
    return out


def parse_args():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller models and fewer rounds (a smoke run)")
    ap.add_argument("--parts", default="abc", help="a: executor overhead, b: CNN memory, c: against RematScope")
    ap.add_argument("--models", default=",".join(MODELS), help=f"part c: some of {','.join(MODELS)}")
    ap.add_argument("--size", type=int, default=64, help="part c: image side of the keras.applications models")
    ap.add_argument("--batch", type=int, default=8, help="part c: batch size")
    ap.add_argument("--steps", type=int, default=4, help="part c: batches per timed fit epoch")
    ap.add_argument("--time-limit", type=float, default=20.0, help="part c: auto's time_limit_s per plan")
    ap.add_argument("--report-only", action="store_true",
                    help="part c: rewrite the README section and plot from results/tf_rematscope.json (no run)")
    ap.add_argument("--peaks-only", action="store_true",
                    help="part c: only the measured/predicted peaks of plain fit and remat_tf (printed, README untouched)")
    ap.add_argument("--eager-models", default="mobilenetv2,transformer",
                    help="part c: models on which RematScope's modes are also tried with run_eagerly=True (slow)")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    if args.report_only:
        import json

        with open(os.path.join(_report.RESULTS, "tf_rematscope.json")) as f:
            saved = json.load(f)
        plot(saved["rows"], os.path.join(_report.RESULTS, "tf_rematscope.png"))
        scope_text = ["## tf-rematscope", "", f"Command: `{saved.get('command', _report.command_line())}`  ",
                      saved.get("machine", "")] + [""] + scope_markdown(saved["rows"], saved["config"])
        _report.write_section("tf-rematscope", "\n".join(scope_text))
        print("\n".join(scope_text))
        return
    import keras
    import tensorflow as tf

    started = time.perf_counter()
    cfg = (4, 8, 16) if args.quick else (10, 16, 32)
    batch = 8 if args.quick else 128
    text = [
        "## tf",
        "",
        f"Command: `{_report.command_line()}`  ",
        f"Machine: {_report.machine_line()}; TensorFlow {tf.__version__}, Keras {keras.__version__}. The machine "
        "is shared with other engineers' jobs (noisy); ratios are within one run.",
    ]
    data = {}
    device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
    if "a" in args.parts:
        over = overhead(cfg, batch, steps=4 if args.quick else 6, rounds=2 if args.quick else 4)
        data["overhead"] = over
        text += [
            "",
            f"Model of (a) and (b): `bench_tf.cnn{cfg}` ({cfg[0]} conv-BN-ReLU, max-pool + dropout halfway, width "
            f"{cfg[1]}/{2 * cfg[1]}, {cfg[2]}x{cfg[2]} input, batch {batch}, sparse cross-entropy from logits).",
            "",
            "### Executor overhead (checkpoint-all executed by remat_tf vs plain `model.fit`)",
            "",
            "Both `jit_compile=False`; per-step wall clock from a batch callback, medians over "
            f"{over['steps']} steps each, fits interleaved.",
            "",
            _report.table(["plain fit ms/step", "remat checkpoint-all ms/step", "ratio", "target", "graph nodes"],
                          [[f"{over['plain_ms']:.1f}", f"{over['remat_ms']:.1f}", f"{over['ratio']:.3f}", "<= 1.15",
                            over["nodes"]]]),
        ]
    if "b" in args.parts:
        methods = [("checkpoint-all", 1.0), ("ilp", 0.5), ("lp-rounding", 0.5), ("auto", 0.5)]
        device, rows = memory(cfg, batch, methods if not args.quick else methods[:2], 10 if args.quick else 30,
                              repeats=2 if args.quick else 5)
        data["memory"] = rows
        text += [
            "",
            "### Measured peak vs predicted",
            "",
            "Measured: TensorFlow allocator peak during one `compute_gradients` step minus the bytes in use before "
            f"it ({'GPU allocator' if device.startswith('GPU') else 'CPU BFC allocator, TF_CPU_ALLOCATOR_USE_BFC=true'}"
            "). Predicted: the simulator's peak minus weights and batch; kernel scratch measured per op signature "
            "(remat_tf.memory). `recomputed`: extra node computations in the plan; `reruns`: backward nodes whose "
            "layer's forward really re-ran (see remat_tf.execute); the executed cost counts them, the plan's cost "
            f"does not. Step: median of {5 if not args.quick else 2} `compute_gradients` calls, same run.",
            "",
            _report.table(
                ["plan", "budget (fraction of activations)", "predicted MiB", "measured MiB", "measured / predicted",
                 "recomputed", "reruns", "plan cost (GFLOP)", "executed cost (GFLOP)", "step ms"],
                [[r["plan"], f"{r['budget_fraction']:.3f}" if "budget_fraction" in r else "",
                  f"{r['predicted'] / MIB:.2f}" if "predicted" in r else "",
                  f"{r['measured'] / MIB:.2f}" if "measured" in r else r.get("error", "")[:160],
                  f"{r['measured'] / r['predicted']:.3f}" if "predicted" in r else "",
                  r.get("recomputed", ""), r.get("reruns", ""), f"{r['cost'] / 1e9:.3f}" if "cost" in r else "",
                  f"{r['executed_cost'] / 1e9:.3f}" if "cost" in r else "",
                  f"{r['step_ms']:.0f}" if "step_ms" in r else ""]
                 for r in rows]),
        ]
        if len(rows) > 1 and "min_fraction" in rows[1]:
            text += ["", f"Smallest feasible budget (lower bound): {rows[1]['min_fraction']:.3f} of activation memory."]
    if "c" in args.parts:
        scope_cfg = {"size": 32 if args.quick else args.size, "batch": 4 if args.quick else args.batch,
                     "steps": 2 if args.quick else args.steps, "time_limit_s": 5.0 if args.quick else args.time_limit}
        models = [m for m in args.models.split(",") if m]
        unknown = sorted(set(models) - set(MODELS))
        if unknown:
            raise SystemExit(f"--models: unknown {unknown}; choose from {','.join(MODELS)}")
        if args.peaks_only:
            table = []
            for name in models:
                table += peaks_only(name, scope_cfg["size"], scope_cfg["batch"], scope_cfg["time_limit_s"], device)
            print(_report.table(["model", "variant", "budget (fraction)", "measured peak MiB", "tensors MiB",
                                 "predicted MiB", "measured / predicted", "replayed MiB", "measured / replayed",
                                 "tensors / replayed", "recomputed"], table))
            return
        rows = []
        for name in models:
            rows += versus_scope(name, scope_cfg["size"], scope_cfg["batch"], scope_cfg["steps"],
                                 scope_cfg["time_limit_s"], device, with_eager=name in args.eager_models.split(","))
            print(f"[{time.perf_counter() - started:.0f} s] {name} done", file=sys.stderr, flush=True)
            # after every model, so that an interrupted run keeps what it measured
            _report.save_json("tf_rematscope" + ("_quick" if args.quick else ""),
                              {"config": scope_cfg, "device": device, "rows": rows, "command": _report.command_line(),
                               "machine": f"Machine: {_report.machine_line()}; TensorFlow {tf.__version__}, Keras "
                                          f"{keras.__version__}, device {device}; models done after "
                                          f"{time.perf_counter() - started:.0f} s: {', '.join(models[:models.index(name) + 1])}."})
        png = os.path.join(_report.RESULTS, "tf_rematscope" + ("_quick" if args.quick else "") + ".png")
        plot(rows, png)
        scope_text = ["## tf-rematscope", "", f"Command: `{_report.command_line()}`  ",
                      f"Machine: {_report.machine_line()}; TensorFlow {tf.__version__}, Keras {keras.__version__}, "
                      f"device {device}; part (c) of `bench_tf.py` took {time.perf_counter() - started:.0f} s.",
                      ""] + scope_markdown(rows, scope_cfg)
        if not args.quick:
            _report.write_section("tf-rematscope", "\n".join(scope_text))
        print("\n".join(scope_text))
    if "a" in args.parts or "b" in args.parts:
        text += ["", f"Whole run: {time.perf_counter() - started:.0f} s, device {device}."]
        _report.save_json("tf" + ("_quick" if args.quick else ""), dict(data, device=device))
        if not args.quick and "a" in args.parts and "b" in args.parts:
            _report.write_section("tf", "\n".join(text))
        print("\n".join(text))


if __name__ == "__main__":
    main()
