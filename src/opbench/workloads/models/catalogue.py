"""The model catalogue: the workloads of the studies opbench follows, described once.

Adding a model is adding a ModelSpec here; every backend builds it with no further code.
"""

from __future__ import annotations

from opbench.workloads.models.spec import (
    LSTM,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    ModelSpec,
    Optimizer,
    Pool2D,
    Residual,
)


def _vgg_convs(widths) -> tuple:
    layers = []
    for block in widths:
        layers += [Conv2D(w, 3, 1, 1, "relu") for w in block]
        layers.append(Pool2D("max", 2, 2))
    return tuple(layers)


def _conv_bn(filters: int, kernel: int, stride: int = 1, activation: str | None = "relu") -> tuple:
    """A bias-free convolution ("same" padding) and its batch norm: ResNet's unit."""
    return Conv2D(filters, kernel, stride, kernel // 2, bias=False), BatchNorm(activation=activation)


def _basic(width: int, stride: int, project: bool) -> Residual:
    """He et al.'s basic block: two 3x3 convolutions; a strided 1x1 projection where the shape changes."""
    body = (*_conv_bn(width, 3, stride), *_conv_bn(width, 3, 1, None))
    return Residual(body, _conv_bn(width, 1, stride, None) if project else ())


def _bottleneck(width: int, stride: int, project: bool) -> Residual:
    """The bottleneck block (1x1 reduce, 3x3 with the stride, as torchvision's v1.5; 1x1 expand x4)."""
    body = (*_conv_bn(width, 1), *_conv_bn(width, 3, stride), *_conv_bn(4 * width, 1, 1, None))
    return Residual(body, _conv_bn(4 * width, 1, stride, None) if project else ())


def _resnet(block, stem: int, widths: tuple, depths: tuple, expansion: int) -> tuple:
    """CIFAR-style ResNet: a 3x3 stem (no max pool), stages that halve space after the first,
    global average pooling, one dense layer to the classes."""
    layers, channels = list(_conv_bn(stem, 3)), stem
    for stage, (width, depth) in enumerate(zip(widths, depths, strict=True)):
        for i in range(depth):
            stride = 2 if stage and not i else 1
            layers.append(block(width, stride, stride != 1 or channels != expansion * width))
            channels = expansion * width
    return (*layers, GlobalAvgPool(), Dense(10))


MODELS: dict[str, ModelSpec] = {}


def register(model: ModelSpec) -> ModelSpec:
    if model.name in MODELS:
        raise ValueError(f"model {model.name!r} registered twice")
    MODELS[model.name] = model
    return model


register(ModelSpec(
    name="mlp",
    input_shape=(784,),
    layers=(Dense(128, "relu"), Dense(64, "relu"), Dense(10)),
    optimizer=Optimizer("sgd", 0.01),
    batch={"quick": 128, "full": 128},
    dataset="mnist",
    notes="784-128-64-10 feed-forward network on MNIST-shaped data, SGD 0.01",
))

register(ModelSpec(
    name="lenet",
    input_shape=(1, 28, 28),
    layers=(
        Conv2D(6, 5, 1, 0, "relu"), Pool2D("avg", 2, 2), Conv2D(16, 3, 1, 0, "relu"), Pool2D("avg", 2, 2),
        Flatten(), Dense(120, "relu"), Dense(84, "relu"), Dense(10),
    ),
    optimizer=Optimizer("adam", 0.001),
    batch={"quick": 32, "full": 200},
    dataset="mnist",
    notes="C(6,5,1)-P(2,2)-C(16,3,1)-P(2,2)-FC120-FC84-FC10, ReLU, average pooling, Adam 0.001",
))

register(ModelSpec(
    name="vgg10",
    input_shape=(3, 32, 32),
    layers=(*_vgg_convs([(64, 64), (128, 128), (256, 256, 256), (512, 512, 512)]), Flatten(),
            Dense(512, "relu"), Dense(256, "relu"), Dense(10)),
    optimizer=Optimizer("adam", 0.01),
    batch={"quick": 8, "full": 128},
    dataset="cifar10",
    notes="the study's 'VGG16': 10 conv layers, dense 512-256-10, Adam 0.01, CIFAR-10 shapes",
))

register(ModelSpec(
    name="vgg16",
    input_shape=(3, 32, 32),
    layers=(*_vgg_convs([(64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512)]), Flatten(),
            Dense(512, "relu"), Dense(512, "relu"), Dense(10)),
    optimizer=Optimizer("adam", 0.01),
    batch={"quick": 4, "full": 128},
    dataset="cifar10",
    notes="standard VGG16 (13 conv + 3 dense) adapted to 32x32 inputs: dense 512-512-10",
))

register(ModelSpec(
    name="lstm",
    input_shape=(250, 50),
    layers=(LSTM(128), Dense(2)),
    optimizer=Optimizer("adam", 0.01),
    batch={"quick": 8, "full": 128},
    dataset="imdb",
    notes="one LSTM layer of 128 units over 250x50 pre-embedded sequences (IMDB shapes), Adam 0.01",
))

register(ModelSpec(
    name="resnet20",
    input_shape=(3, 32, 32),
    layers=_resnet(_basic, 16, (16, 32, 64), (3, 3, 3), 1),
    optimizer=Optimizer("sgd", 0.1),
    batch={"quick": 8, "full": 128},
    dataset="cifar10",
    notes="He et al.'s CIFAR ResNet-20: 3 stages of 3 basic blocks, 16/32/64 channels, batch norm, "
          "1x1 projection shortcuts, SGD 0.1",
))

register(ModelSpec(
    name="resnet50",
    input_shape=(3, 32, 32),
    layers=_resnet(_bottleneck, 64, (64, 128, 256, 512), (3, 4, 6, 3), 4),
    optimizer=Optimizer("sgd", 0.1),
    batch={"quick": 2, "full": 32},  # 32, not 128: its float64 reference check alone takes minutes at 128
    dataset="cifar10",
    notes="ResNet-50 (bottleneck blocks 3-4-6-3, batch norm) on CIFAR-10 shapes with a 3x3 stem, SGD 0.1",
))


def builtin() -> tuple[str, ...]:
    """The catalogue's own models: what a benchmark not bound to a model runs."""
    return tuple(name for name, model in MODELS.items() if not model.origin)


def get(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; valid: {', '.join(MODELS)}") from None
