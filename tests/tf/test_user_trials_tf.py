"""What a Keras user hit trying remat_tf on inputs the other tests do not use (engineer T's trials).

Bugs still open are strict xfails: they start passing, and must be unmarked, when fixed.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import remat_tf  # noqa: E402


def _dense_remat_model():
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    x = np.random.default_rng(0).standard_normal((12, 8)).astype("float32")
    y = np.arange(12) % 3
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rm = remat_tf.rematerialize(net, x[:4], y[:4], loss=loss, budget=1.0, method="checkpoint-all")
    rm.compile(optimizer="adam")
    return net, rm, x, y


def test_model_checkpoint_in_fit_saves_a_model_that_reloads_with_the_trained_weights(tmp_path):
    """``fit(callbacks=[ModelCheckpoint("best.keras")])`` died at the end of epoch 1 with "Object RematModel was
    created by passing non-serializable argument values in `__init__()`"; plain Keras saves and reloads."""
    net, rm, x, y = _dense_remat_model()
    path = str(tmp_path / "best.keras")
    rm.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[keras.callbacks.ModelCheckpoint(path)])
    loaded = keras.models.load_model(path, compile=False)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), net.predict(x, verbose=0), rtol=1e-6)


def test_save_weights_of_a_remat_model_load_into_the_plain_model(tmp_path):
    """``rm.save_weights`` nested the weights under the RematModel: the plain model could not load them (T-bugs #18)."""
    net, rm, x, y = _dense_remat_model()
    rm.fit(x, y, batch_size=4, epochs=1, verbose=0)
    path = str(tmp_path / "w.weights.h5")
    rm.save_weights(path)
    plain = keras.models.clone_model(net)
    plain.load_weights(path)
    np.testing.assert_allclose(plain.predict(x, verbose=0), net.predict(x, verbose=0), rtol=1e-6)
