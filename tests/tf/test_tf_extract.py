"""Keras extraction (remat_tf.extract): layer records, FLOP rules, and the shipped zoo files."""

import json
import os

import pytest

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from remat_core.zoo.models import DATA_DIR, graph_from_spec  # noqa: E402
from remat_tf.extract import forward_layers, keras_to_graph, zoo_spec  # noqa: E402


def _small_model():
    from keras import layers

    inp = keras.Input(shape=(8, 8, 3), name="x")
    c = layers.Conv2D(4, (3, 3), padding="same", name="conv")(inp)
    b = layers.BatchNormalization(name="bn")(c)
    r = layers.ReLU(name="relu")(b)
    d = layers.Conv2D(4, (1, 1), activation="relu", name="conv_act")(r)
    a = layers.Add(name="add")([r, d])
    p = layers.MaxPooling2D((2, 2), name="pool")(a)
    g = layers.GlobalAveragePooling2D(name="gap")(p)
    out = layers.Dense(5, name="fc")(g)
    return keras.Model(inp, out, name="small")


def test_layer_records():
    recs = {r["name"]: r for r in forward_layers(_small_model())}
    assert list(recs) == ["conv", "bn", "relu", "conv_act", "add", "pool", "gap", "fc"]
    assert recs["conv"]["deps"] == []  # the model input is not a node
    assert recs["add"]["deps"] == ["relu", "conv_act"]
    assert recs["conv"]["flops"] == 8 * 8 * 4 * 3 * 3 * 3
    assert recs["conv_act"]["flops"] == 8 * 8 * 4 * 4 + 8 * 8 * 4  # fused ReLU adds one per output
    assert recs["bn"]["flops"] == 4 * 8 * 8 * 4
    assert recs["add"]["flops"] == 2 * 8 * 8 * 4
    assert recs["pool"]["flops"] == 4 * 4 * 4 * 4 and recs["pool"]["output_elements"] == 64
    assert recs["fc"]["flops"] == 4 * 5 and recs["fc"]["output_elements"] == 5
    assert recs["conv"]["params"] == 3 * 3 * 3 * 4 + 4


def test_keras_to_graph():
    model = _small_model()
    g = keras_to_graph(model, batch_size=2)
    assert g.n == 17 and int(g.is_backward.sum()) == 8
    assert g.fixed_bytes == 8 * model.count_params() + 2 * 4 * 8 * 8 * 3
    assert g.memory_bytes[g.index("relu")] == 2 * 4 * 8 * 8 * 4
    spec = zoo_spec(model, "small")
    assert json.loads(json.dumps(spec)) == spec
    assert graph_from_spec(spec, batch_size=2) == g


def test_shared_layers_are_rejected():
    from keras import layers

    inp = keras.Input(shape=(4,))
    dense = layers.Dense(4)
    model = keras.Model(inp, dense(dense(inp)))
    with pytest.raises(ValueError, match="shared layers"):
        forward_layers(model)


def _regenerate(name):
    from remat_tf.zoo_models import MODELS, build_model

    spec = zoo_spec(build_model(name), name, source=MODELS[name][1], script="benchmarks/export_keras_zoo.py")
    with open(os.path.join(DATA_DIR, f"keras_{name}.json")) as f:
        shipped = json.load(f)
    return spec, shipped


def _same(spec, shipped):
    for key in ("layers", "outputs", "params", "input_elements", "input_shape", "source"):
        assert spec[key] == shipped[key], key


def test_shipped_vgg16_is_what_keras_gives():
    _same(*_regenerate("vgg16"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg19", "mobilenet", "resnet50", "unet", "fcn8", "segnet"])
def test_shipped_zoo_is_what_keras_gives(name):
    _same(*_regenerate(name))
