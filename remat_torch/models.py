"""Models written in the project for tests, benchmarks and the graph zoo.

Small models for CPU tests (:class:`SmallCNN`, :class:`ResNetSmall`,
:class:`UNetSmall`, :class:`TransformerBlock`) and the architectures of the
published benchmarks (:func:`vgg16`, :func:`resnet50`, :func:`mobilenet_v1`,
:func:`unet`, :func:`transformer`) for the zoo export. No torchvision needed.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "SmallCNN", "ResNetSmall", "UNetSmall", "TransformerBlock", "TransformerLM",
    "vgg16", "resnet50", "mobilenet_v1", "unet", "transformer", "mid_cnn",
]


def _conv_bn(cin, cout, stride=1, groups=1, k=3):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module):
    """Conv-BN-ReLU stages with max pooling, dropout and a linear head."""

    def __init__(self, channels=(8, 16, 32), num_classes=10, p_drop=0.3, in_channels=3):
        super().__init__()
        layers = []
        c = in_channels
        for cout in channels:
            layers += [_conv_bn(c, cout), nn.MaxPool2d(2)]
            c = cout
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(p_drop)
        self.head = nn.Linear(c, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.head(self.dropout(x))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)  # in place on purpose
        return F.relu(out)


class ResNetSmall(nn.Module):
    """A ResNet-style network of basic blocks (residual adds, in-place ops)."""

    def __init__(self, widths=(8, 16, 32), blocks_per_stage=1, num_classes=10):
        super().__init__()
        self.stem = _conv_bn(3, widths[0])
        layers = []
        c = widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks_per_stage):
                layers.append(BasicBlock(c, w, stride=2 if (i > 0 and b == 0) else 1))
                c = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class UNetSmall(nn.Module):
    """A small U-Net: encoder, bottleneck, decoder with skip concatenations."""

    def __init__(self, in_channels=3, out_channels=2, base=8, depth=2):
        super().__init__()
        self.downs = nn.ModuleList()
        c = in_channels
        chans = []
        for d in range(depth):
            w = base * 2 ** d
            self.downs.append(nn.Sequential(_conv_bn(c, w), _conv_bn(w, w)))
            chans.append(w)
            c = w
        self.bottleneck = nn.Sequential(_conv_bn(c, c * 2), _conv_bn(c * 2, c * 2))
        c = c * 2
        self.ups = nn.ModuleList()
        self.decs = nn.ModuleList()
        for w in reversed(chans):
            self.ups.append(nn.ConvTranspose2d(c, w, 2, stride=2))
            self.decs.append(nn.Sequential(_conv_bn(2 * w, w), _conv_bn(w, w)))
            c = w
        self.out = nn.Conv2d(c, out_channels, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottleneck(x)
        for up, dec, skip in zip(self.ups, self.decs, reversed(skips)):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.out(x)


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: multi-head self-attention and an MLP, with dropout."""

    def __init__(self, dim=32, heads=4, mlp_ratio=4, p_drop=0.1):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)
        self.drop = nn.Dropout(p_drop)

    def attention(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        att = self.drop(att.softmax(dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)

    def forward(self, x):
        x = x + self.drop(self.attention(self.ln1(x)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TransformerLM(nn.Module):
    """Token embedding, ``n_layers`` transformer blocks, a linear head."""

    def __init__(self, vocab=1000, dim=256, heads=8, n_layers=4, seq_len=128, p_drop=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, dim))
        self.blocks = nn.Sequential(*[TransformerBlock(dim, heads, 4, p_drop) for _ in range(n_layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def mid_cnn(num_classes=10):
    """A mid-size VGG-like CNN with BatchNorm (the executor-overhead benchmark)."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, "M"]
    layers, c = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers.append(_conv_bn(c, v))
            c = v
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes))


def vgg16(num_classes=1000):
    """VGG16 (configuration D, no BatchNorm) with the standard classifier."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers, c = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
            c = v
    return nn.Sequential(
        nn.Sequential(*layers), nn.AdaptiveAvgPool2d(7), nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(4096, num_classes),
    )


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride=1):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + idt)


def resnet50(num_classes=1000):
    """ResNet-50 (torchvision layout: bottlenecks [3, 4, 6, 3])."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, n, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        blocks = []
        for i in range(n):
            blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
        layers.append(nn.Sequential(*blocks))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


def mobilenet_v1(num_classes=1000, width_mult=1.0):
    """MobileNet v1: depthwise-separable convolutions."""
    def c(v):
        return max(8, int(v * width_mult))

    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    layers = [_conv_bn(3, c(32), stride=2)]
    cin = c(32)
    for cout, s in cfg:
        layers.append(nn.Sequential(_conv_bn(cin, cin, stride=s, groups=cin), _conv_bn(cin, c(cout), k=1)))
        cin = c(cout)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


def unet(in_channels=3, out_channels=2, base=64, depth=4):
    """U-Net (Ronneberger et al.) with BatchNorm and padded convolutions."""
    return UNetSmall(in_channels, out_channels, base=base, depth=depth)


def transformer(vocab=1000, dim=256, heads=8, n_layers=4, seq_len=128):
    """A GPT-style encoder stack (:class:`TransformerLM`)."""
    return TransformerLM(vocab, dim, heads, n_layers, seq_len)
