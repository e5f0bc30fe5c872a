"""The NumPy references are the oracle, so they are tested themselves: convolution and pooling
against direct loops, every gradient against central finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from opbench.workloads import ops
from opbench.workloads.ops import activations, conv, pooling

DIFFERENTIABLE = [name for name, spec in ops.REGISTRY.items() if spec.differentiable]


def direct_conv2d(p, x, w):
    """Seven nested loops over the definition of a strided, zero-padded cross-correlation."""
    n, c, h, wd = x.shape
    o, k, s, pad = w.shape[0], p["k"], p["stride"], p["pad"]
    ho, wo = conv.out_size(h, k, s, pad), conv.out_size(wd, k, s, pad)
    out = np.zeros((n, o, ho, wo))
    for b in range(n):
        for f in range(o):
            for i in range(ho):
                for j in range(wo):
                    total = 0.0
                    for ch in range(c):
                        for di in range(k):
                            for dj in range(k):
                                y, xx = i * s + di - pad, j * s + dj - pad
                                if 0 <= y < h and 0 <= xx < wd:
                                    total += x[b, ch, y, xx] * w[f, ch, di, dj]
                    out[b, f, i, j] = total
    return out


def direct_pool(p, x, reduce):
    n, c, h, w = x.shape
    k, s = p["k"], p["stride"]
    ho, wo = conv.out_size(h, k, s, 0), conv.out_size(w, k, s, 0)
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = reduce(x[:, :, i * s : i * s + k, j * s : j * s + k], axis=(2, 3))
    return out


@given(p=ops.get("conv2d").small(), seed=st.integers(0, 2**16))
def test_conv2d_matches_direct_loops(p, seed):
    x, w = (a.astype(np.float64) for a in ops.get("conv2d").make(np.random.default_rng(seed), p))
    np.testing.assert_allclose(conv.conv2d(p, x, w), direct_conv2d(p, x, w), rtol=1e-10, atol=1e-10)


@given(p=ops.get("conv2d").small(), seed=st.integers(0, 2**16), dtype=st.sampled_from([np.float32, np.float64]))
def test_conv2d_keeps_the_rounding_of_its_tensordot_form(p, seed, dtype):
    """The im2col rows are built in one copy, but the GEMMs and the order the input gradient is
    added back are those of the tensordot formulation: the same bits, so the models' float32
    emulations (and every allowance derived from them) are unchanged."""
    x, w = (a.astype(dtype) for a in ops.get("conv2d").make(np.random.default_rng(seed), p))
    k, s, pad = p["k"], p["stride"], p["pad"]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = conv.out_size(x.shape[2], k, s, pad), conv.out_size(x.shape[3], k, s, pad)
    cols = conv.windows(xp, k, s, ho, wo)
    want = np.tensordot(cols, w, axes=([1, 2, 3], [1, 2, 3])).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(conv.conv2d(p, x, w), want)
    ct = np.random.default_rng(seed + 1).standard_normal(want.shape).astype(dtype)
    dcols = np.tensordot(ct, w, axes=([1], [0])).transpose(0, 3, 4, 5, 1, 2)
    dx = conv.scatter_windows(dcols, xp.shape, k, s)[:, :, pad : pad + x.shape[2], pad : pad + x.shape[3]]
    got_dx, got_dw = conv.conv2d_vjp(p, (x, w), ct)
    np.testing.assert_array_equal(got_dx, dx)
    np.testing.assert_array_equal(got_dw, np.tensordot(ct, cols, axes=([0, 2, 3], [0, 4, 5])))


@pytest.mark.parametrize("name, reduce", [("maxpool2d", np.max), ("avgpool2d", np.mean)])
@given(data=st.data())
def test_pooling_matches_direct_loops(name, reduce, data):
    spec = ops.get(name)
    p = data.draw(spec.small())
    (x,) = spec.make(np.random.default_rng(data.draw(st.integers(0, 2**16))), p)
    np.testing.assert_allclose(spec.reference(p, x.astype(np.float64)), direct_pool(p, x.astype(np.float64), reduce))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@given(data=st.data())
def test_gradient_matches_finite_differences(name, data):
    """<vjp(ct), v> equals the directional derivative of <ct, f(x)> along v, for random v."""
    spec = ops.get(name)
    p = {**data.draw(spec.small()), **spec.extra}
    r = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    xs = [a.astype(np.float64) for a in spec.make(r, p)]
    ct = r.standard_normal(spec.reference(p, *xs).shape)
    vs = [r.standard_normal(x.shape) for x in xs]
    grads = spec.vjp(p, xs, ct)
    analytic = sum(float(np.sum(g * vs[i])) for i, g in zip(spec.grad_argnums, grads, strict=True))

    def loss(t):
        return float(np.sum(ct * spec.reference(p, *[x + t * v for x, v in zip(xs, vs, strict=True)])))

    eps = 1e-6
    numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    assert math.isclose(analytic, numeric, rel_tol=1e-4, abs_tol=1e-4 * (1 + abs(numeric)))


def test_gradient_count_matches_differentiable_args():
    for name in DIFFERENTIABLE:
        spec = ops.get(name)
        p = {**spec.shapes["quick"][0], **spec.extra}
        xs = spec.make(np.random.default_rng(0), p)
        grads = spec.vjp(p, xs, np.ones(spec.reference(p, *xs).shape))
        assert len(grads) == len(spec.grad_argnums), name
        for i, g in zip(spec.grad_argnums, grads, strict=True):
            assert g.shape == xs[i].shape, name


def test_known_activation_values():
    x = np.array([[-1.0, 0.0, 1.0]])
    np.testing.assert_allclose(activations.ELEMENTWISE["gelu"][0](x), [[-0.15865525, 0.0, 0.84134475]], rtol=1e-7)
    np.testing.assert_allclose(activations.ELEMENTWISE["softplus"][0](x), [[0.31326169, 0.69314718, 1.31326169]])
    np.testing.assert_allclose(activations._softmax(x).sum(), 1.0)


def test_maxpool_gradient_goes_to_the_maximum_only():
    p = {"k": 2, "stride": 2}
    x = np.array([[[[1.0, 5.0], [2.0, 3.0]]]])
    (dx,) = pooling.maxpool2d_vjp(p, (x,), np.array([[[[7.0]]]]))
    np.testing.assert_array_equal(dx, [[[[0.0, 7.0], [0.0, 0.0]]]])


def test_every_layer_kind_has_a_forward_and_a_vjp_in_the_reference():
    """A layer kind is added with its reference rules (reference.FORWARD, reference.BACKWARD); one
    without them is an error naming the table, never a layer passed through unchanged."""
    import dataclasses

    from opbench.workloads.models import reference as ref
    from opbench.workloads.models.spec import Dense, Layer, ModelSpec, Optimizer

    kinds = set(Layer.__args__)
    assert set(ref.FORWARD) == kinds and set(ref.BACKWARD) == kinds

    @dataclasses.dataclass(frozen=True)
    class Unknown:
        units: int = 3

    model = ModelSpec("toy", (4,), (Unknown(), Dense(2)), Optimizer("sgd", 0.1), {"quick": 2, "full": 2}, "")
    with pytest.raises(TypeError, match=r"the reference has no forward for Unknown \(reference\.FORWARD\)"):
        ref.forward(model, {"1.W": np.ones((3, 2)), "1.b": np.zeros(2)}, np.ones((2, 4)))
