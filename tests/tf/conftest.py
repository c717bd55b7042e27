"""TensorFlow settings for the Keras adapter's tests, applied before TensorFlow is imported.

* The CPU allocator is the BFC allocator (as ``benchmarks/bench_tf.py`` sets it): its statistics count every
  allocation of a step, which the memory tests compare with the predictions (the default CPU allocator
  reported no allocation at all for a small transformer's step).
* One inter-op thread: the executor runs one op at a time, so a step's peak does not depend on how ops of
  one plan statement happen to overlap under the machine's load (measured: a transformer plan at 0.5 peaked
  6.9% below its op-by-op replay with two inter-op threads, within 1% with one).
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
