"""Measured node costs of an extracted Keras graph (``cost_model="profile"``).

Each call's forward, and its forward followed by its vector-Jacobian product,
run as their own ``tf.function`` on the example batch's values: ``warmup``
untimed runs, then the median of ``repeats`` wall-clock timings
(``time.perf_counter``, after the result is copied to the host, so that GPU
work is waited for). A backward node costs the difference (at least 1% of its
forward); the loss node costs the loss and its gradient. Unit: seconds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["profile_costs"]


def _time(fn, args, warmup: int, repeats: int) -> float:
    import tensorflow as tf

    def run():
        out = fn(*args)
        for t in tf.nest.flatten(out):
            if t is not None:
                t.numpy()

    for _ in range(max(1, warmup)):
        run()
    samples = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def profile_costs(eg: Any, inputs: list, targets: list, warmup: int = 2, repeats: int = 5) -> np.ndarray:
    """Wall-clock seconds of every node of ``eg.graph`` (see the module docstring)."""
    import tensorflow as tf

    from .execute import _forward, _FwdValue, _vjp, total_loss

    values: dict[int, list] = {}
    cost = np.zeros(eg.graph.n)
    for call in eg.calls:
        xs = [inputs[r[1]] if r[0] == "input" else values[r[1]][r[2]] for r in call.inputs]
        c = call.index
        fwd = tf.function(lambda *a, c=c: _forward(eg, c, list(a), [])[0], autograph=False)

        def fwd_bwd(*a, c=c):
            outs, tape, _ = _forward(eg, c, list(a), [])
            dys = [tf.ones_like(o) if o.dtype.is_floating else None for o in outs]
            return _vjp(eg, c, _FwdValue(outs, tape, list(a), ()), dys)

        values[c] = [tf.identity(t) for t in fwd(*xs)]
        cost[c] = _time(fwd, xs, warmup, repeats)
        if c in eg.backward_index:
            both = _time(tf.function(fwd_bwd, autograph=False), xs, warmup, repeats)
            cost[eg.backward_index[c]] = max(both - cost[c], 0.01 * cost[c])
    flat = [values[c][o] for c, o in eg.outputs]

    def loss_and_grad(*a):
        preds = list(a[:len(flat)])
        with tf.GradientTape() as tape:
            for t in preds:
                tape.watch(t)
            loss = total_loss(eg, preds, list(a[len(flat):]))
        return loss, tape.gradient(loss, preds)

    cost[eg.loss_index] = _time(tf.function(loss_and_grad, autograph=False), flat + list(targets), warmup, repeats)
    return cost
