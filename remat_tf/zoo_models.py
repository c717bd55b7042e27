"""The Keras models of the benchmark zoo, at the Checkmate paper's settings.

Classification models come from ``keras.applications`` (``weights=None``, so
nothing is downloaded) at 224x224x3 with 1000 classes. The segmentation models
follow the ``keras_segmentation`` designs the paper used (vanilla encoder:
zero-pad + 3x3 conv + batch norm + ReLU + 2x2 max-pool per level), at 416x608x3
with 19 classes (Cityscapes), ending in a per-pixel softmax.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["MODELS", "build_model", "unet", "fcn8", "segnet", "transformer_encoder"]

CLASSIFICATION_SHAPE = (224, 224, 3)
SEGMENTATION_SHAPE = (416, 608, 3)
SEGMENTATION_CLASSES = 19


def _vanilla_encoder(layers: Any, x: Any) -> list:
    """Five levels: 64, 128, 256, 256, 256 channels, each halving the resolution."""
    levels = []
    for level, filters in enumerate((64, 128, 256, 256, 256), start=1):
        x = layers.ZeroPadding2D((1, 1), name=f"enc{level}_pad")(x)
        x = layers.Conv2D(filters, (3, 3), padding="valid", name=f"enc{level}_conv")(x)
        x = layers.BatchNormalization(name=f"enc{level}_bn")(x)
        x = layers.Activation("relu", name=f"enc{level}_relu")(x)
        x = layers.MaxPooling2D((2, 2), name=f"enc{level}_pool")(x)
        levels.append(x)
    return levels


def _pad_conv_bn(layers: Any, x: Any, filters: int, tag: str) -> Any:
    x = layers.ZeroPadding2D((1, 1), name=f"{tag}_pad")(x)
    x = layers.Conv2D(filters, (3, 3), padding="valid", name=f"{tag}_conv")(x)
    return layers.BatchNormalization(name=f"{tag}_bn")(x)


def _head(layers: Any, x: Any, n_classes: int) -> Any:
    x = layers.Conv2D(n_classes, (3, 3), padding="same", name="classifier")(x)
    return layers.Activation("softmax", name="softmax")(x)


def unet(input_shape=SEGMENTATION_SHAPE, n_classes: int = SEGMENTATION_CLASSES):
    """U-Net (``keras_segmentation.models.unet.unet``): vanilla encoder, decoder from level 4 with skips."""
    import keras
    from keras import layers

    inp = keras.Input(shape=input_shape, name="image")
    f1, f2, f3, f4, _ = _vanilla_encoder(layers, inp)
    x = _pad_conv_bn(layers, f4, 512, "dec4")
    x = layers.UpSampling2D((2, 2), name="up3")(x)
    x = layers.Concatenate(name="cat3")([x, f3])
    x = _pad_conv_bn(layers, x, 256, "dec3")
    x = layers.UpSampling2D((2, 2), name="up2")(x)
    x = layers.Concatenate(name="cat2")([x, f2])
    x = _pad_conv_bn(layers, x, 128, "dec2")
    x = layers.UpSampling2D((2, 2), name="up1")(x)
    x = layers.Concatenate(name="cat1")([x, f1])
    x = _pad_conv_bn(layers, x, 64, "dec1")
    return keras.Model(inp, _head(layers, x, n_classes), name="unet")


def segnet(input_shape=SEGMENTATION_SHAPE, n_classes: int = SEGMENTATION_CLASSES):
    """SegNet (``keras_segmentation.models.segnet.segnet``): vanilla encoder, decoder from level 4, no skips."""
    import keras
    from keras import layers

    inp = keras.Input(shape=input_shape, name="image")
    _, _, _, f4, _ = _vanilla_encoder(layers, inp)
    x = _pad_conv_bn(layers, f4, 512, "dec4")
    for i, filters in enumerate((256, 128, 64)):
        x = layers.UpSampling2D((2, 2), name=f"up{3 - i}")(x)
        x = _pad_conv_bn(layers, x, filters, f"dec{3 - i}")
    return keras.Model(inp, _head(layers, x, n_classes), name="segnet")


def _crop_to(layers: Any, big: Any, small: Any, tag: str) -> Any:
    """Crop ``big`` (bottom/right) to the spatial size of ``small``."""
    dh = big.shape[1] - small.shape[1]
    dw = big.shape[2] - small.shape[2]
    if dh < 0 or dw < 0:
        raise ValueError(f"cannot crop {big.shape} to {small.shape}")
    if dh == 0 and dw == 0:
        return big
    return layers.Cropping2D(((0, dh), (0, dw)), name=f"{tag}_crop")(big)


def fcn8(input_shape=SEGMENTATION_SHAPE, n_classes: int = SEGMENTATION_CLASSES):
    """FCN-8s (``keras_segmentation.models.fcn.fcn_8``): vanilla encoder, 4096-wide head, two skip fusions."""
    import keras
    from keras import layers

    inp = keras.Input(shape=input_shape, name="image")
    _, _, f3, f4, f5 = _vanilla_encoder(layers, inp)
    o = layers.Conv2D(4096, (7, 7), activation="relu", padding="same", name="fc6")(f5)
    o = layers.Dropout(0.5, name="drop6")(o)
    o = layers.Conv2D(4096, (1, 1), activation="relu", padding="same", name="fc7")(o)
    o = layers.Dropout(0.5, name="drop7")(o)
    o = layers.Conv2D(n_classes, (1, 1), name="score5")(o)
    o = layers.Conv2DTranspose(n_classes, (4, 4), strides=(2, 2), use_bias=False, name="up5")(o)
    o2 = layers.Conv2D(n_classes, (1, 1), name="score4")(f4)
    o = _crop_to(layers, o, o2, "up5")
    o = layers.Add(name="fuse4")([o, o2])
    o = layers.Conv2DTranspose(n_classes, (4, 4), strides=(2, 2), use_bias=False, name="up4")(o)
    o2 = layers.Conv2D(n_classes, (1, 1), name="score3")(f3)
    o = _crop_to(layers, o, o2, "up4")
    o = layers.Add(name="fuse3")([o, o2])
    o = layers.Conv2DTranspose(n_classes, (16, 16), strides=(8, 8), use_bias=False, name="up3")(o)
    o = layers.Activation("softmax", name="softmax")(o)
    return keras.Model(inp, o, name="fcn8")


def _application(name: str) -> Callable[[], Any]:
    def build():
        import keras

        return getattr(keras.applications, name)(weights=None, input_shape=CLASSIFICATION_SHAPE, classes=1000)

    build.__doc__ = f"``keras.applications.{name}(weights=None)`` at 224x224x3, 1000 classes."
    return build


MODELS: dict[str, tuple[Callable[[], Any], str]] = {
    "vgg16": (_application("VGG16"), "keras.applications.VGG16(weights=None), 224x224x3, 1000 classes"),
    "vgg19": (_application("VGG19"), "keras.applications.VGG19(weights=None), 224x224x3, 1000 classes"),
    "mobilenet": (_application("MobileNet"), "keras.applications.MobileNet(weights=None), 224x224x3, 1000 classes"),
    "resnet50": (_application("ResNet50"), "keras.applications.ResNet50(weights=None), 224x224x3, 1000 classes"),
    "unet": (unet, "remat_tf.zoo_models.unet (keras_segmentation U-Net design), 416x608x3, 19 classes"),
    "fcn8": (fcn8, "remat_tf.zoo_models.fcn8 (keras_segmentation FCN-8 design), 416x608x3, 19 classes"),
    "segnet": (segnet, "remat_tf.zoo_models.segnet (keras_segmentation SegNet design), 416x608x3, 19 classes"),
}


def build_model(name: str):
    """Build the zoo model called ``name`` (a key of :data:`MODELS`)."""
    if name not in MODELS:
        raise ValueError(f"unknown zoo model {name!r}; available: {', '.join(MODELS)}")
    return MODELS[name][0]()


def transformer_encoder(seq: int = 64, width: int = 64, blocks: int = 4, name: str = "transformer"):
    """A pre-norm encoder (MultiHeadAttention, GELU MLP) over ``seq`` tokens of ``width`` features, 10 classes."""
    import keras
    from keras import layers

    inp = keras.Input((seq, width))
    x = inp
    for _ in range(blocks):
        h = layers.LayerNormalization()(x)
        x = layers.Add()([x, layers.MultiHeadAttention(num_heads=4, key_dim=width // 4)(h, h)])
        h = layers.LayerNormalization()(x)
        x = layers.Add()([x, layers.Dense(width)(layers.Dense(4 * width, activation="gelu")(h))])
    return keras.Model(inp, layers.Dense(10)(layers.GlobalAveragePooling1D()(x)), name=name)
