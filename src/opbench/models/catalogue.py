"""The model catalogue: the workloads of the studies opbench follows, described once.

Adding a model is adding a ModelSpec here; every backend builds it with no further code.
"""

from __future__ import annotations

from opbench.models.spec import LSTM, Conv2D, Dense, Flatten, ModelSpec, Optimizer, Pool2D


def _vgg_convs(widths) -> tuple:
    layers = []
    for block in widths:
        layers += [Conv2D(w, 3, 1, 1, "relu") for w in block]
        layers.append(Pool2D("max", 2, 2))
    return tuple(layers)


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


def get(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; valid: {', '.join(MODELS)}") from None
