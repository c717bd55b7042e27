"""Regenerate the Keras zoo graphs ``remat_core/zoo/data/keras_<model>.json``.

Builds each model of :data:`remat_tf.zoo_models.MODELS` with Keras (no weights
downloaded), extracts the layer-level forward DAG with FLOPs and output sizes
per example (:func:`remat_tf.extract.zoo_spec`) and writes it as JSON, so
that ``remat_core.zoo.zoo_graph(name, batch_size=B)`` needs no framework.

Usage::

    .venv/bin/python benchmarks/export_keras_zoo.py            # all models
    .venv/bin/python benchmarks/export_keras_zoo.py vgg16 unet # some
    .venv/bin/python benchmarks/export_keras_zoo.py --out /tmp/zoo
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "remat_core", "zoo", "data")


def export(names, out: str) -> list[str]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    from remat_tf.extract import zoo_spec
    from remat_tf.zoo_models import MODELS, build_model

    os.makedirs(out, exist_ok=True)
    written = []
    for name in names:
        model = build_model(name)
        spec = zoo_spec(model, name, source=MODELS[name][1], script="benchmarks/export_keras_zoo.py")
        path = os.path.join(out, f"keras_{name}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(spec, f, indent=0)
        os.replace(tmp, path)
        written.append(path)
        print(f"{name}: {len(spec['layers'])} layers, {spec['params']} parameters, "
              f"{sum(x['flops'] for x in spec['layers']) / 1e9:.3g} GFLOP/example -> {path}")
        keras.backend.clear_session()
    return written


def main(argv=None) -> int:
    from remat_tf.zoo_models import MODELS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", help=f"models to export (default: all of {', '.join(MODELS)})")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: remat_core/zoo/data)")
    args = p.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; available: {', '.join(MODELS)}")
    export(args.models or list(MODELS), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
