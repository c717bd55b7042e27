"""Extract real-model training graphs with remat_torch and save them into the graph zoo.

Run: ``.venv/bin/python benchmarks/export_torch_zoo.py [--only NAME ...]``

Writes ``remat_core/zoo/data/torch_<model>_b<batch>.json`` (``remat_core.Graph.save``; the batch size
is in the name because these graphs are fixed-batch, and so that short zoo names such as ``vgg16`` keep
resolving to the batch-scalable ``keras_*`` files):
module granularity, FLOP costs (``cost_model="flops"``: counted on fake
tensors, no real compute), memory from tensor sizes (float32), training mode.

| name | model | input |
|---|---|---|
| vgg16 | VGG16 (config D) | 2 x 3 x 224 x 224 |
| resnet50 | ResNet-50 | 2 x 3 x 224 x 224 |
| mobilenet | MobileNet v1 | 2 x 3 x 224 x 224 |
| unet | U-Net, base 32, depth 4 | 1 x 3 x 256 x 256 |
| transformer | 4-layer GPT-style stack, d=256, 8 heads | 4 x 128 tokens |
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from remat_torch import extract_graph  # noqa: E402
from remat_torch import models  # noqa: E402

OUT = os.path.join(HERE, "..", "remat_core", "zoo", "data")


def specs():
    return {
        "vgg16": (models.vgg16, lambda: torch.randn(2, 3, 224, 224), "VGG16, batch 2, 224x224"),
        "resnet50": (models.resnet50, lambda: torch.randn(2, 3, 224, 224), "ResNet-50, batch 2, 224x224"),
        "mobilenet": (models.mobilenet_v1, lambda: torch.randn(2, 3, 224, 224), "MobileNet v1, batch 2, 224x224"),
        "unet": (lambda: models.unet(base=32, depth=4), lambda: torch.randn(1, 3, 256, 256),
                 "U-Net base 32 depth 4, batch 1, 256x256"),
        "transformer": (models.transformer, lambda: torch.randint(0, 1000, (4, 128)),
                        "4-layer transformer d=256 h=8, batch 4, 128 tokens"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    os.makedirs(OUT, exist_ok=True)
    for name, (ctor, make_input, desc) in specs().items():
        if args.only and name not in args.only:
            continue
        torch.manual_seed(0)
        model = ctor().train()
        x = make_input()
        t0 = time.perf_counter()
        stem = f"torch_{name}_b{x.shape[0]}"
        eg = extract_graph(model, x, granularity="module", cost_model="flops", name=stem)
        g = eg.graph
        meta = g.meta
        meta.update({"source": "benchmarks/export_torch_zoo.py", "description": desc, "dtype": "float32",
                     "torch_version": torch.__version__})
        g = g.replace(meta=meta)
        path = os.path.join(OUT, f"{stem}.json")
        g.save(path)
        print(f"{name}: {g.n} nodes ({eg.n_forward} forward), fixed {g.fixed_bytes / 2**20:.1f} MiB, "
              f"activations {g.memory_bytes.sum() / 2**20:.1f} MiB, {g.cost.sum() / 1e9:.2f} GFLOP, "
              f"{time.perf_counter() - t0:.1f} s -> {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
