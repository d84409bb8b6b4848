"""Kernel alignment, HSIC, greedy KTA selection and randSel against direct numpy computations."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxknock.kernels import greedy_kta_selection, hsic, kernel_target_alignment, randsel, squared_distances


def _np_gauss(X, sigma=None):
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    if sigma is None:
        iu = np.triu_indices(len(X), 1)
        sigma = np.median(np.sqrt(D[iu]))
    return np.exp(-D / (2 * sigma**2))


def _xor(seed, n=200, irrelevant=8):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2 + irrelevant))
    return X, np.sign(X[:, 0] * X[:, 1])


def test_kta_matches_numpy():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 4)), rng.standard_normal(30)
    y = y + X[:, 0] ** 2
    H = np.eye(30) - 1 / 30
    for kernel, K in [("gaussian", _np_gauss(X)), ("linear", X @ X.T)]:
        Kc, Lc = H @ K @ H, H @ np.outer(y, y) @ H
        ref = (Kc * Lc).sum() / np.sqrt((Kc * Kc).sum() * (Lc * Lc).sum())
        np.testing.assert_allclose(float(kernel_target_alignment(X, y, kernel=kernel)), ref, rtol=1e-10)
    Kc, Lc = H @ _np_gauss(X, 0.7) @ H, H @ _np_gauss(y[:, None], 1.3) @ H
    ref = (Kc * Lc).sum() / np.sqrt((Kc * Kc).sum() * (Lc * Lc).sum())
    got = kernel_target_alignment(X, y, bandwidth=0.7, target_kernel="gaussian", target_bandwidth=1.3)
    np.testing.assert_allclose(float(got), ref, rtol=1e-10)


def test_hsic_matches_naive_estimators():
    rng = np.random.default_rng(1)
    n = 9
    X, y = rng.standard_normal((n, 3)), rng.standard_normal(n)
    K, L = _np_gauss(X), np.outer(y, y)
    # biased: the V-statistic E[kl] + E[k]E[l] - 2 E[k l'] with empirical means, times n^2 / (n-1)^2
    v = (
        (K * L).mean()
        + K.mean() * L.mean()
        - 2 * np.mean([K[i, j] * L[i, q] for i in range(n) for j in range(n) for q in range(n)])
    )
    np.testing.assert_allclose(float(hsic(X, y)), v * n**2 / (n - 1) ** 2, rtol=1e-10)
    # unbiased: the U-statistic over ordered distinct 4-tuples (Song et al. 2012)
    tot = 0.0
    for i, j, q, r in itertools.permutations(range(n), 4):
        tot += K[i, j] * L[i, j] + K[i, j] * L[q, r] - 2 * K[i, j] * L[i, q]
    u = tot / (n * (n - 1) * (n - 2) * (n - 3))
    np.testing.assert_allclose(float(hsic(X, y, unbiased=True)), u, rtol=1e-9)


def test_gaussian_measures_translation_invariant():
    # distances were |a|^2 + |b|^2 - 2 a.b: at X + 1e8 (float64) the alignment fell from 0.414 to 0.166,
    # at X + 1e4 (float32) to 0.077
    rng = np.random.default_rng(7)
    X = rng.standard_normal((30, 3))
    y = X[:, 0]
    H = np.eye(30) - 1 / 30

    def ref(X):
        Kc, Lc = H @ _np_gauss(X) @ H, H @ np.outer(y, y) @ H
        return (Kc * Lc).sum() / np.sqrt((Kc * Kc).sum() * (Lc * Lc).sum())

    a0, h0, u0 = float(kernel_target_alignment(X, y)), float(hsic(X, y)), float(hsic(X, y, unbiased=True))
    for shift in [1e6, 1e8, -1e8]:
        np.testing.assert_allclose(float(kernel_target_alignment(X + shift, y)), a0, rtol=1e-6)
        np.testing.assert_allclose(float(hsic(X + shift, y)), h0, rtol=1e-6)
        np.testing.assert_allclose(float(hsic(X + shift, y, unbiased=True)), u0, rtol=1e-5)
    for shift in [1e3, 1e4]:
        Xs = (X + shift).astype(np.float32)
        got = float(kernel_target_alignment(Xs, y.astype(np.float32)))
        np.testing.assert_allclose(got, ref(Xs.astype(np.float64)), rtol=1e-3)
    # the weighted distances of randSel's draws
    w = np.array([1.0, 0.0, 1.0])
    Xs = X + 1e8
    D = ((Xs[:, None, :] - Xs[None, :, :]) ** 2 * w).sum(-1)
    np.testing.assert_allclose(np.asarray(squared_distances(Xs, w)), D, rtol=1e-6, atol=1e-6)


def test_linear_kernel_offset_and_scale_invariant():
    # the linear kernel x'x was formed on the raw rows and centred afterwards: the default target kernel
    # of y + 1e4 in float32 (y + 1e8 in float64) gave an alignment of ~0.01 for 0.32 and a negative
    # biased HSIC (-1.8); a linear kernel of data of scale 1e-6 in float32 underflowed the norm product
    # and gave an "alignment" of 2.7e16
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))
    y = X[:, 0] + 0.5 * rng.standard_normal(30)
    a0, h0, u0 = float(kernel_target_alignment(X, y)), float(hsic(X, y)), float(hsic(X, y, unbiased=True))
    g0 = np.asarray(greedy_kta_selection(X, y, [0, 1], kernel="linear")[1])
    for dt, off, rtol in [(np.float64, 1e8, 1e-7), (np.float32, 1e4, 1e-3)]:
        Xd, yd = X.astype(dt), (y + off).astype(dt)
        np.testing.assert_allclose(float(kernel_target_alignment(Xd, yd)), a0, rtol=rtol)
        np.testing.assert_allclose(float(hsic(Xd, yd)), h0, rtol=10 * rtol)
        np.testing.assert_allclose(float(hsic(Xd, yd, unbiased=True)), u0, rtol=10 * rtol)
        got = greedy_kta_selection(Xd + off, yd, [0, 1], kernel="linear")[1]
        np.testing.assert_allclose(np.asarray(got), g0, rtol=10 * rtol)
    a_lin = float(kernel_target_alignment(X, y, kernel="linear"))
    tiny = (1e-6 * X).astype(np.float32), (1e-6 * y).astype(np.float32)
    np.testing.assert_allclose(float(kernel_target_alignment(*tiny, kernel="linear")), a_lin, rtol=1e-4)


def test_target_far_from_origin_float32_x64_off():
    # x64 off (a user's default): the one-column target y + 1e4 in float32 was centred by its mean, whose
    # rounding depends on the order of XLA's reduction, fused and recomputed into the two sides of y y^T
    # with different shifts: the default alignment read 0.0786 (0.0728 in a fresh process) for 0.0760, and
    # the greedy alignments were 3% off
    rng = np.random.default_rng(0)
    X = rng.standard_normal((150, 10))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.3 * rng.standard_normal(150)
    with jax.enable_x64(False):  # the float64 references below run in the suite's x64 mode
        ys = jnp.asarray(y + 1e4, jnp.float32)
        Xs = jnp.asarray(X, jnp.float32)
        got = float(kernel_target_alignment(Xs, ys))
        greedy = np.asarray(greedy_kta_selection(Xs, ys, [0, 1, 2])[1], np.float64)
    yr, Xr = np.asarray(ys, np.float64), np.asarray(Xs, np.float64)  # the data JAX holds, in float64
    np.testing.assert_allclose(got, float(kernel_target_alignment(Xr, yr)), rtol=1e-5)
    np.testing.assert_allclose(greedy, np.asarray(greedy_kta_selection(Xr, yr, [0, 1, 2])[1]), rtol=1e-5)


def test_float64_host_data_far_from_origin_x64_off():
    # x64 off: a float64 NumPy y + 1e7 (or X + 1e7) was rounded to float32 (spacing 1) before its mean came
    # out: alignment 0.063 for 0.076 (0.0728 with the exact centring), greedy alignments 17% off. The means now
    # come out in float64 on the host (every measure reads centred kernels)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((150, 10))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.3 * rng.standard_normal(150)
    with jax.enable_x64(False):
        ref = float(kernel_target_alignment(X, y)), float(hsic(X, y))
        g0 = np.asarray(greedy_kta_selection(X, y, [0, 1, 2])[1])
        for Xs, ys in [(X, y + 1e7), (X + 1e7, y)]:
            np.testing.assert_allclose(float(kernel_target_alignment(Xs, ys)), ref[0], rtol=1e-5)
            np.testing.assert_allclose(float(hsic(Xs, ys)), ref[1], rtol=1e-5)
        np.testing.assert_allclose(np.asarray(greedy_kta_selection(X + 1e7, y + 1e7, [0, 1, 2])[1]), g0, rtol=1e-5)


def test_greedy_kta_matches_prefix_loop():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((50, 6))
    y = np.sign(X[:, 2] * X[:, 4]) + 0.1 * rng.standard_normal(50)
    ranking = [2, 4, 0, 5, 1, 3]
    sel, a = greedy_kta_selection(X, y, ranking)
    H = np.eye(50) - 1 / 50
    Lc = H @ np.outer(y, y) @ H
    ref = []
    for k in range(1, 7):
        Kc = H @ _np_gauss(X[:, ranking[:k]]) @ H
        ref.append((Kc * Lc).sum() / np.sqrt((Kc * Kc).sum() * (Lc * Lc).sum()))
    np.testing.assert_allclose(np.asarray(a), ref, rtol=1e-8)
    assert sel.tolist() == ranking[: int(np.argmax(ref)) + 1]
    assert sel.tolist() == [2, 4]


def test_randsel_deterministic_given_key():
    X, y = _xor(0, n=120, irrelevant=6)
    kw = dict(num_subsamples=100, subsample_size=40)
    a = randsel(jax.random.key(3), X, y, **kw)
    b = randsel(jax.random.key(3), X, y, **kw)
    c = randsel(jax.random.key(4), X, y, **kw)
    np.testing.assert_array_equal(a.contributions, b.contributions)
    np.testing.assert_array_equal(a.ranking, b.ranking)
    assert not np.allclose(np.nan_to_num(a.contributions), np.nan_to_num(c.contributions))
    # rounds cull 25% (at least one) until two features remain
    assert a.active.sum(1).tolist() == [8, 6, 5, 4, 3, 2]
    assert a.ranking.shape == (8,) and sorted(a.ranking.tolist()) == list(range(8))


def test_irrelevant_contribution_nonpositive_proposition_423():
    # first-round contributions of 8 irrelevant features over 6 XOR data sets (same key per set for both estimators)
    irr_u, irr_b, rel_u = [], [], []
    for seed in range(6):
        X, y = _xor(seed)
        kw = dict(num_subsamples=300, subsample_size=50, min_features=9)  # a single round
        u = randsel(jax.random.key(seed), X, y, **kw).contributions[0]
        b = randsel(jax.random.key(seed), X, y, estimator="hsic", **kw).contributions[0]
        irr_u.append(u[2:].mean())
        irr_b.append(b[2:].mean())
        rel_u.append(u[:2].mean())
    se = np.std(irr_u) / np.sqrt(len(irr_u))
    assert np.mean(irr_u) <= 2 * se  # E c_j <= 0 for irrelevant j, within Monte-Carlo error
    assert np.mean(rel_u) > 5 * se + np.mean(irr_u)  # the interacting pair contributes
    # the biased estimator's size-dependent bias makes irrelevant contributions positive: the check can fail
    assert np.mean(irr_b) > 2 * np.std(irr_b) / np.sqrt(len(irr_b))


def test_xor_pair_ranks_on_top():
    hits = 0
    for seed in range(3):
        X, y = _xor(10 + seed, irrelevant=10)
        res = randsel(jax.random.key(seed), X, y, num_subsamples=200, subsample_size=50)
        hits += sorted(res.ranking[:2].tolist()) == [0, 1]
        if sorted(res.ranking[:2].tolist()) == [0, 1]:
            assert res.selected[:2].all()
    assert hits == 3


@pytest.mark.parametrize(
    "fn, kwargs, match",
    [
        (kernel_target_alignment, dict(kernel="rbf"), "kernel"),
        (hsic, dict(target_kernel="poly"), "target_kernel"),
        (kernel_target_alignment, dict(bandwidth=-1.0), "bandwidth"),
        (randsel, dict(drop=0.0), "drop"),
        (randsel, dict(drop=1.0), "drop"),
        (randsel, dict(keep=1.5), "keep"),
        (randsel, dict(subsample_size=1000), "subsample_size"),
        (randsel, dict(num_subsamples=0), "num_subsamples"),
        (randsel, dict(fix_after=0), "fix_after"),
        (randsel, dict(estimator="mmd"), "estimator"),
    ],
)
def test_bad_input(fn, kwargs, match):
    X, y = _xor(0, n=40, irrelevant=2)
    args = (jax.random.key(0), X, y) if fn is randsel else (X, y)
    with pytest.raises(ValueError, match=match):
        fn(*args, **kwargs)


def test_bandwidth_any_positive_real_scalar_and_text_labels():
    """bandwidth=np.int64(2) and a 0-d jax array were refused; text y gave JAX's staging error."""
    X, y = _xor(0, n=40, irrelevant=2)
    ref = float(kernel_target_alignment(X, y, bandwidth=2.0))
    for bw in (2, np.int64(2), np.float32(2), jax.numpy.asarray(2.0), np.asarray(2)):
        np.testing.assert_allclose(float(kernel_target_alignment(X, y, bandwidth=bw)), ref, rtol=1e-12)
        np.testing.assert_allclose(
            float(hsic(X, y, target_kernel="gaussian", target_bandwidth=bw)),
            float(hsic(X, y, target_kernel="gaussian", target_bandwidth=2.0)),
            rtol=1e-12,
        )
    assert (
        greedy_kta_selection(X, y, [0, 1, 2], bandwidth=np.int64(2))[0].tolist()
        == greedy_kta_selection(X, y, [0, 1, 2], bandwidth=2.0)[0].tolist()
    )
    # traced: the value under jit, NaN for a bad one
    kta = jax.jit(lambda b: kernel_target_alignment(X, y, bandwidth=b))
    np.testing.assert_allclose(float(kta(2.0)), ref, rtol=1e-12)
    assert np.isnan(float(kta(-2.0)))
    for bad, err in [(0.0, ValueError), (np.nan, ValueError), (np.ones(2), ValueError), ("2", TypeError),
                     (True, TypeError)]:  # fmt: skip
        with pytest.raises(err, match="bandwidth"):
            kernel_target_alignment(X, y, bandwidth=bad)
    with pytest.raises(TypeError, match="y holds text labels"):
        kernel_target_alignment(X, np.where(y > 0, "a", "b"))
    with pytest.raises(TypeError, match="y holds text labels"):
        hsic(X, list(np.where(y > 0, "a", "b")))


def test_bad_shapes_and_ranking():
    X, y = _xor(0, n=40, irrelevant=2)
    with pytest.raises(ValueError, match="y must have shape"):
        hsic(X, y[:10])
    with pytest.raises(ValueError, match="ranking"):
        greedy_kta_selection(X, y, [0, 0, 1])
    with pytest.raises(ValueError, match="ranking"):
        greedy_kta_selection(X, y, [7])


def test_cli_randsel(tmp_path, capsys):
    import json

    from jaxknock.cli import main

    X, y = _xor(0, n=120, irrelevant=4)
    path = tmp_path / "x.csv"
    cols = [f"x{j}" for j in range(6)]
    np.savetxt(path, np.c_[X, y], delimiter=",", header=",".join([*cols, "y"]), comments="")
    out = tmp_path / "r.json"
    argv = ["randsel", str(path), "--target", "y", "--subsamples", "100", "--subsample-size", "40", "--quiet"]
    assert main([*argv, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == "randsel" and report["ranking"][:2] in (["x0", "x1"], ["x1", "x0"])
    assert main(["randsel", str(path), "--target", "y", "--drop", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--drop" in err[0]
    # the flag, not the Python argument name subsample_size
    assert main(["randsel", str(path), "--target", "y", "--subsample-size", "2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--subsample-size" in err[0] and "[4, 120]" in err[0]


def test_randsel_model_selection_rows_are_drawn_not_the_first():
    """The round is chosen by the alignment on ``max_eval_rows`` rows; they were the first ones, so rows sorted
    by class gave a constant target there, an alignment of 0 for every round and round 0 (every feature) chosen."""
    X, y = _xor(1, n=400, irrelevant=6)
    order = np.argsort(y, kind="stable")  # a file sorted by class: the first 100 rows are all one class
    Xs, ys = X[order], y[order]
    kw = dict(num_subsamples=300, subsample_size=80)
    res = randsel(jax.random.key(0), Xs, ys, max_eval_rows=100, **kw)
    assert np.all(np.isfinite(res.alignment)) and np.ptp(res.alignment) > 0.01
    assert res.selected[:2].all() and res.selected.sum() <= 4
    # with every row in the evaluation (n <= max_eval_rows) the rows are all of them, in order: unchanged
    full = randsel(jax.random.key(0), Xs, ys, **kw)
    assert full.selected[:2].all()


def test_randsel_jax_scalar_drop_and_keep():
    """``drop=jnp.float32(0.25)`` was refused as "drop must lie in (0, 1)"; it is the Python float's run."""
    X, y = _xor(0, n=40, irrelevant=2)
    kw = dict(num_subsamples=20, subsample_size=20)
    ref = randsel(jax.random.key(0), X, y, drop=0.25, keep=0.5, **kw)
    res = randsel(jax.random.key(0), X, y, drop=jnp.float32(0.25), keep=np.array(0.5), **kw)
    np.testing.assert_array_equal(res.ranking, ref.ranking)
    with pytest.raises(ValueError, match="drop"):
        randsel(jax.random.key(0), X, y, drop=np.array([0.25]), **kw)


def test_randsel_counts():
    """JAX integer counts were refused (NumPy ones passed); chunk_size=0 was a ZeroDivisionError,
    chunk_size=2.5 ran as 2, max_eval_rows=2 gave an alignment of 1 for every round and None a TypeError;
    with n < 16 rows the default subsample_size (n // 4 < 4) was refused as "subsample_size ... got None"."""
    X, y = _xor(0, n=12, irrelevant=2)
    kw = dict(num_subsamples=8)
    ref = randsel(jax.random.key(0), X, y, **kw)  # default subsample_size: 4 rows
    res = randsel(jax.random.key(0), X, y, num_subsamples=jnp.int32(8), subsample_size=np.array(4))
    np.testing.assert_array_equal(res.ranking, ref.ranking)
    for bad in (dict(chunk_size=0), dict(chunk_size=2.5), dict(max_eval_rows=2), dict(max_eval_rows=None)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            randsel(jax.random.key(0), X, y, **kw, **bad)


def test_traced_unbiased_is_named():
    """``jax.jit(hsic)(X, y, unbiased=True)`` was a TracerBoolConversionError."""
    X, y = _xor(0, n=20, irrelevant=1)
    with pytest.raises(TypeError, match="unbiased must be a Python bool"):
        jax.jit(hsic)(X, y, unbiased=True)


def test_squared_distances_checks_shapes_and_takes_sequences():
    """weights as a list was Python's "unsupported operand type(s) for *", a 1-D X numpy's "axis 1 is out of
    bounds", and weights of the wrong length a broadcasting error naming neither argument."""
    X = np.array([[0.0, 0.0, 1.0], [3.0, 4.0, 1.0]])
    D = np.asarray(squared_distances(X, [1, 0, 1]))
    np.testing.assert_allclose(D, [[0.0, 9.0], [9.0, 0.0]])  # by hand: (3 - 0)^2 on the first feature only
    np.testing.assert_allclose(np.asarray(squared_distances(X, np.array([True, False, True]))), D)  # a mask
    np.testing.assert_allclose(np.asarray(squared_distances(X.tolist())), [[0.0, 25.0], [25.0, 0.0]])
    with pytest.raises(ValueError, match="X must be a 2-D"):
        squared_distances(np.ones(3))
    with pytest.raises(ValueError, match="weights"):
        squared_distances(X, [1.0, 1.0])
    jitted = jax.jit(squared_distances)(X, jnp.array([1.0, 0.0, 1.0]))
    np.testing.assert_allclose(np.asarray(jitted), D)


def test_squared_distances_refuses_negative_weights():
    """A negative weight gave a plausible "distance" (-9 + 16 = 7 here, clipped to 0 where negative)."""
    X = np.array([[0.0, 0.0], [3.0, 4.0]])
    for w in ([-1.0, 1.0], [np.nan, 1.0]):
        with pytest.raises(ValueError, match="weights"):
            squared_distances(X, w)
    assert np.isnan(np.asarray(jax.jit(squared_distances)(X, jnp.array([-1.0, 1.0])))).all()
    np.testing.assert_allclose(np.asarray(jax.jit(squared_distances)(X, jnp.array([1.0, 1.0]))), [[0, 25], [25, 0]])


def test_boolean_y_is_zero_one_labels():
    """A boolean ``y`` (numpy, JAX, a list; eager and under jit) was a TypeError ("y must be a real floating
    array"); it is the same labels as 0/1 floats, as in the knockoff statistics (``as_response``)."""
    X, y = _xor(0, n=40, irrelevant=2)  # the shapes and settings of test_randsel_jax_scalar_drop_and_keep
    yb = y > 0
    yf = yb.astype(float)
    for yy in (yb, jnp.asarray(yb), yb.tolist(), yb[:, None]):
        ref = yf[:, None] if np.ndim(yy) == 2 else yf
        assert float(kernel_target_alignment(X, yy)) == float(kernel_target_alignment(X, ref))
        assert float(hsic(X, yy)) == float(hsic(X, ref))
    # under jit the 0/1 conversion is part of the compiled program: equal up to rounding
    kta_jit = float(jax.jit(kernel_target_alignment)(X, jnp.asarray(yb)))
    np.testing.assert_allclose(kta_jit, float(kernel_target_alignment(X, yf)), rtol=1e-12)
    sel, a = greedy_kta_selection(X, yb, [0, 1, 2])
    sel_f, a_f = greedy_kta_selection(X, yf, [0, 1, 2])
    assert sel.tolist() == sel_f.tolist()
    np.testing.assert_array_equal(np.asarray(a), np.asarray(a_f))
    kw = dict(num_subsamples=20, subsample_size=20)
    res, res_f = randsel(jax.random.key(0), X, yb, **kw), randsel(jax.random.key(0), X, yf, **kw)
    np.testing.assert_array_equal(res.ranking, res_f.ranking)
    np.testing.assert_array_equal(res.contributions, res_f.contributions)


def test_randsel_refuses_a_constant_y():
    """A constant y (every column, for an ``(n, k)`` y) gave all-zero contributions and alignments, selected
    nothing and returned an arbitrary ranking; RandSelSelector and the CLI refuse it, and so does randsel."""
    X, _ = _xor(0, n=40, irrelevant=2)
    for y in (np.ones(40), np.tile([2.0, -1.0], (40, 1)), np.zeros(40, bool)):
        with pytest.raises(ValueError, match="y is constant"):
            randsel(jax.random.key(0), X, y, num_subsamples=10)
        with pytest.raises(ValueError, match="y is constant"):  # every alignment 0: ranking[:1] was selected
            greedy_kta_selection(X, y, [2, 0, 1])


@pytest.mark.parametrize("top", ["-2", "0"])
def test_cli_randsel_refuses_a_top_below_one(tmp_path, capsys, top):
    """``--top -2`` printed "top -2:" and every feature but the last two; ``--top 0`` was silently ignored."""
    from jaxknock.cli import main

    X, y = _xor(0, n=16, irrelevant=2)
    path = tmp_path / "x.csv"
    np.savetxt(path, np.c_[X, y], delimiter=",", header="a,b,c,d,y", comments="")
    argv = ["randsel", str(path), "--target", "y", "--subsamples", "4", "--top", top]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "top" not in out and len(err.strip().splitlines()) == 1 and "--top must be a positive integer" in err


def test_a_width_for_a_linear_kernel_is_refused():
    """``kernel="linear", bandwidth=2.0`` (or ``target_bandwidth`` with the default linear target kernel) was
    silently ignored: the value of the linear kernel came back as if the width were used."""
    X, y = _xor(0, n=40, irrelevant=2)
    for fn in (kernel_target_alignment, hsic, lambda X, y, **kw: greedy_kta_selection(X, y, [0, 1], **kw)):
        with pytest.raises(ValueError, match="bandwidth only applies to kernel='gaussian'"):
            fn(X, y, kernel="linear", bandwidth=2.0)
        with pytest.raises(ValueError, match="target_bandwidth only applies to target_kernel='gaussian'"):
            fn(X, y, target_bandwidth=2.0)


def test_randsel_one_feature_is_named_as_such():
    """One column was refused as "min_features must be an integer in [1, p=1), got 2", an argument not passed."""
    X, y = _xor(0, n=40, irrelevant=2)
    with pytest.raises(ValueError, match="X needs at least 2 features, got 1"):
        randsel(jax.random.key(0), X[:, :1], y, num_subsamples=4)


def test_measures_invariant_to_sample_order_and_feature_order():
    # kernels of the rows: reordering the samples (X and y together) or the features changes nothing
    rng = np.random.default_rng(7)
    X = rng.standard_normal((30, 4))  # test_kta_matches_numpy's shape: its compiled program
    X[:, 3] = X[:, 0]  # a duplicated column
    y = (X[:, 0] + rng.standard_normal(30) > 0).astype(float)
    rows, cols = rng.permutation(30), rng.permutation(4)
    for fn in (kernel_target_alignment, lambda X, y: hsic(X, y, unbiased=True)):
        ref = float(fn(X, y))
        np.testing.assert_allclose(float(fn(X[rows], y[rows])), ref, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(float(fn(X[:, cols], y)), ref, rtol=1e-12, atol=1e-15)
    # the centred alignment does not see the coding of two classes ({0, 1} or {-1, 1})
    np.testing.assert_allclose(float(kernel_target_alignment(X, 2 * y - 1)), float(kernel_target_alignment(X, y)))


def test_gaussian_measures_and_alignments_do_not_depend_on_units():
    """Data in units of 1e200 overflowed the squared distances (NaN; greedy "selected" ranking[:1] from
    NaN alignments), of 1e-200 underflowed them (alignment 0 for 0.42: "no dependence"); the default
    linear target kernel of a y in units of 1e200 gave a NaN alignment."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))  # test_kta_matches_numpy's shape
    y = X[:, 0] + 0.1 * rng.standard_normal(30)
    a0, h0 = float(kernel_target_alignment(X, y)), float(hsic(X, y, target_kernel="gaussian"))
    r = [0, 3, 1, 2]
    g0 = np.asarray(greedy_kta_selection(X, y, r)[1])
    gl0 = np.asarray(greedy_kta_selection(X, y, r, kernel="linear")[1])
    for sx, sy in [(1e200, 1.0), (1e-200, 1.0), (1.0, 1e200), (1.0, 1e-200)]:
        Xs, ys = X * sx, y * sy
        np.testing.assert_allclose(float(kernel_target_alignment(Xs, ys)), a0, rtol=1e-12)
        np.testing.assert_allclose(float(kernel_target_alignment(Xs, ys, kernel="linear")),
                                   float(kernel_target_alignment(X, y, kernel="linear")), rtol=1e-12)  # fmt: skip
        np.testing.assert_allclose(np.asarray(greedy_kta_selection(Xs, ys, r)[1]), g0, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(greedy_kta_selection(Xs, ys, r, kernel="linear")[1]), gl0, rtol=1e-12)
        if sy == 1.0:  # Gaussian kernels on both sides: HSIC is unit-free too
            np.testing.assert_allclose(float(hsic(Xs, ys, target_kernel="gaussian")), h0, rtol=1e-12)


def test_gaussian_width_edge_values():
    """A narrow width: K = I exactly (the distances' diagonal was ~1e-15, K_ii = exp(-1e-15 / 2e-20) = 0:
    0.1866 for 0.1857; a width of 1e-170, whose square underflows, gave NaN). A wide one: the alignment
    tends to the linear kernel's (exp rounded 1 - 1e-20 to 1: alignment 0)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))
    y = X[:, 0] + 0.1 * rng.standard_normal(30)
    assert np.all(np.diag(np.asarray(squared_distances(X))) == 0)
    H = np.eye(30) - 1 / 30
    Lc = H @ np.outer(y, y) @ H
    narrow = np.trace(Lc) / (np.sqrt(29) * np.linalg.norm(Lc))  # <H, Lc> / (|H| |Lc|)
    for bw in (1e-10, 1e-170, 1e-300):
        np.testing.assert_allclose(float(kernel_target_alignment(X, y, bandwidth=bw)), narrow, rtol=1e-12)
    linear = float(kernel_target_alignment(X, y, kernel="linear"))
    np.testing.assert_allclose(float(kernel_target_alignment(X, y, bandwidth=1e10)), linear, rtol=1e-8)


def test_randsel_does_not_depend_on_units():
    """randSel standardises X, but the column variances of X in units of 1e160 overflowed (X / inf = 0:
    every alignment 0, another selection) and y y^T of a y in units of 1e200 was inf (NaN contributions,
    nothing selected); 1e-200 gave zeros."""
    X, y = _xor(0, n=60, irrelevant=2)
    kw = dict(num_subsamples=50, subsample_size=20)
    base = randsel(jax.random.key(1), X, y, **kw)
    for Xs, ys, c in [(X * 1e160, y, 1.0), (X * 1e-200, y, 1.0), (X, y * 2.0**500, 2.0**1000),
                      (X, y * 2.0**-500, 2.0**-1000)]:  # fmt: skip
        res = randsel(jax.random.key(1), Xs, ys, **kw)
        np.testing.assert_array_equal(res.ranking, base.ranking)
        np.testing.assert_array_equal(res.selected, base.selected)
        np.testing.assert_allclose(res.alignment, base.alignment, rtol=1e-12)
        np.testing.assert_allclose(res.contributions / c, base.contributions, rtol=1e-9)


def test_randsel_prepares_its_data_in_one_program():
    """randSel's standardisation, target check and evaluation rows ran op by op: about thirty eager programs
    in a first call (42 programs in all at n = 300, p = 50; now 11). A shape no other test compiles for."""
    from helpers import count_compiles

    X = np.random.default_rng(0).standard_normal((21, 5))
    y = X[:, 0] + 0.3 * X[:, 1]
    key = jax.random.key(2)
    with count_compiles() as compiles:
        res = randsel(key, X, y, num_subsamples=3)
    assert len(compiles) <= 10, [c.split()[1] for c in compiles]
    assert sorted(res.ranking.tolist()) == list(range(5)) and res.selected.any()


def test_bandwidths_of_any_scalar_type_share_one_program():
    """The bandwidth's check computed its flag on the device, as eager programs of the scalar's type (and
    ``jnp.asarray`` of a NumPy scalar was a program more): ``bandwidth=np.float64(2.0)``, ``jnp.float32`` or
    ``2`` after ``2.0`` compiled two to four programs in a warm call. A concrete bandwidth is checked on the
    host now; the values are unchanged."""
    from helpers import count_compiles

    X = np.random.default_rng(0).standard_normal((17, 3))  # a shape no other test compiles for
    y = X[:, 0] ** 2
    ref = [float(kernel_target_alignment(X, y, bandwidth=2.0)), float(hsic(X, y, bandwidth=2.0))]
    typed = [np.float64(2.0), jnp.float64(2.0), 2, np.float32(2.0)]
    with count_compiles() as compiles:
        out = [[float(kernel_target_alignment(X, y, bandwidth=b)), float(hsic(X, y, bandwidth=b))] for b in typed]
    assert [c.split()[1] for c in compiles] == []
    assert out == [ref] * len(typed)


def test_pandas_nullable_and_big_endian_inputs_give_the_plain_alignment():
    # a pandas Float64 y was "Cannot interpret 'Float64Dtype()' as a data type", a big-endian X
    # "Dtype >f8 is not a valid JAX array type": neither named an argument
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 3))
    y = X[:, 0] + 0.1 * rng.standard_normal(20)
    ref = float(hsic(X, y))
    assert float(hsic(X, pd.Series(y, index=np.arange(20) + 50).astype("Float64"))) == ref
    assert float(hsic(X.astype(">f8"), y)) == ref


def test_a_big_endian_ranking_gives_the_plain_selection_and_a_masked_one_is_refused():
    # jnp.asarray of a '>i8' ranking was "Error interpreting argument to stage as a JAX value"; the mask of a
    # masked ranking was dropped, the index under it used
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 4))
    y = X[:, 0] + X[:, 1]
    ref = greedy_kta_selection(X, y, np.arange(4))
    got = greedy_kta_selection(X, y, np.arange(4).astype(">i8"))
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    with pytest.raises(ValueError, match="ranking is a masked array with 1 masked entry"):
        greedy_kta_selection(X, y, np.ma.array(np.arange(4), mask=[0, 0, 1, 0]))
