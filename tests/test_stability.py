"""Stability selection: probabilities against an explicit loop, error bounds, null / signal simulations."""

import contextlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import count_compiles

import jaxknock
from jaxknock.stability import stability_bound, stability_subsamples

N, P, B, L = 80, 20, 20, 8


def stability_selection(*args, **kwargs):
    """One solver everywhere, so the tests share compiled programs (FISTA compiles fastest)."""
    kwargs.setdefault("solver", "fista")
    return jaxknock.stability_selection(*args, **kwargs)


def _data(seed, signal=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, P))
    beta = np.zeros(P)
    if signal:
        beta[:3] = [2.0, -2.0, 1.5]
    y = X @ beta + rng.standard_normal(N)
    return X, y


def test_probabilities_equal_explicit_loop():
    X, y = _data(0)
    key = jax.random.key(3)
    lambdas = jaxknock.lambda_grid(X, y, num=L, eps=0.05)
    res = stability_selection(key, X, y, lambdas=lambdas, num_subsamples=B, threshold=0.6, expected_false=None)
    idx = np.asarray(stability_subsamples(key, N, B))
    assert idx.shape == (B, N // 2)
    counts = np.zeros((P, L))
    union = 0.0
    for ix in idx:
        coef = np.asarray(jaxknock.lasso_path(X[ix], y[ix], lambdas, tol=1e-4, solver="fista").value)
        counts += (coef != 0).T
        union += np.sum(np.any(coef != 0, axis=0))
    np.testing.assert_allclose(np.asarray(res.probabilities), counts / B, atol=1e-12)
    np.testing.assert_allclose(res.q_path[-1], union / B)
    np.testing.assert_allclose(np.asarray(res.max_probability), (counts / B).max(axis=1), atol=1e-12)
    assert res.selected.tolist() == ((counts / B).max(axis=1) >= 0.6).tolist()
    assert res.bound == pytest.approx(stability_bound(union / B, P, 0.6, num_pairs=B // 2, assumption="unimodal"))


def test_subsamples_pairs_disjoint_and_plain():
    idx = np.asarray(stability_subsamples(jax.random.key(0), 11, 6))
    assert idx.shape == (6, 5)
    for i in range(3):
        assert not set(idx[2 * i]) & set(idx[2 * i + 1])
    plain = np.asarray(stability_subsamples(jax.random.key(0), 11, 5, fraction=0.7, complementary_pairs=False))
    assert plain.shape == (5, 7) and all(len(set(r)) == 7 for r in plain)


def test_bound_formulas_known_numbers():
    # Meinshausen-Buhlmann: q^2 / ((2 pi - 1) p)
    assert stability_bound(10, 1000, 0.9) == pytest.approx(100 / 800)
    assert stability_bound(math.sqrt(800), 1000, 0.9) == pytest.approx(1.0)
    # Shah-Samworth unimodal, eq. (8): pi <= 3/4: C = 2 (2 pi - 1 - 1/(2B));
    # pi > 3/4: C = (1 + 1/B) / (4 (1 - pi + 1/(2B)))
    assert stability_bound(5, 100, 0.7, num_pairs=50, assumption="unimodal") == pytest.approx(25 / (100 * 0.78))
    assert stability_bound(10, 1000, 0.9, num_pairs=50, assumption="unimodal") == pytest.approx(0.1 * 4 * 0.11 / 1.02)
    # below 1/2 + min(theta^2, 1/(2B) + 3 theta^2 / 4) eq. (8) does not apply: the assumption-free bound remains
    assert stability_bound(50, 100, 0.55, num_pairs=50, assumption="unimodal") == pytest.approx(2500 / 10)
    # unimodal is tighter than the assumption-free bound wherever it applies
    for thr in np.linspace(0.6, 1.0, 9):
        assert stability_bound(8, 500, thr, num_pairs=50, assumption="unimodal") < stability_bound(8, 500, thr)


def test_bound_checks_its_arguments():
    """A negative or NaN ``q`` gave a "bound" (``q = -2`` that of ``q = 2``), ``p = 10.5`` was truncated to 10,
    ``num_pairs = 2.7`` to 2 and ``num_pairs = 0`` was reported as "got None"."""
    for q in (-2.0, math.nan, 11.0):
        with pytest.raises(ValueError, match="q .*must lie in"):
            stability_bound(q, 10, 0.6)
    with pytest.raises(ValueError, match="p must be a positive integer"):
        stability_bound(2, 10.5, 0.6)
    for bad in (0, 2.7):
        with pytest.raises(ValueError, match="num_pairs must be a positive integer"):
            stability_bound(2, 10, 0.9, num_pairs=bad, assumption="unimodal")
    with pytest.raises(TypeError, match="threshold must be a number"):
        stability_bound(2, 10, True)
    assert stability_bound(np.float64(2), np.int64(10), 0.75) == pytest.approx(0.8)
    assert stability_bound(0, 10, 0.9, num_pairs=np.int32(5), assumption="unimodal") == 0.0


def test_switches_refuse_text_and_none():
    """``complementary_pairs="False"`` ran the complementary pairs (text is truthy), ``None`` ran without them,
    and ``mixed_precision="no"`` ran the float32 products; they are refused before any work now."""
    X, y = _data(0)
    key = jax.random.key(0)
    for name, bad in (("complementary_pairs", "False"), ("complementary_pairs", None), ("mixed_precision", "no")):
        with pytest.raises(TypeError, match=f"{name} must be True or False"):
            jaxknock.stability_selection(key, X, y, num_subsamples=4, num_lambdas=3, **{name: bad})
    with pytest.raises(TypeError, match="complementary_pairs must be True or False"):
        stability_subsamples(key, 10, 4, complementary_pairs="False")
    plain = stability_subsamples(key, 10, 3, complementary_pairs=np.False_)
    assert plain.shape == (3, 5)


def test_expected_false_chooses_threshold_or_range():
    X, y = _data(1)
    lambdas = jaxknock.lambda_grid(X, y, num=L, eps=0.05)
    key = jax.random.key(0)
    free = stability_selection(key, X, y, lambdas=lambdas, num_subsamples=B, threshold=0.6, assumption="none")
    cut = stability_selection(
        key, X, y, lambdas=lambdas, num_subsamples=B, threshold=0.6, expected_false=0.5, assumption="none"
    )
    k = cut.num_lambdas_used
    assert cut.bound <= 0.5
    assert k == max(j for j in range(0, L + 1) if j == 0 or free.q_path[j - 1] ** 2 / (0.2 * P) <= 0.5)
    auto = stability_selection(
        key, X, y, lambdas=lambdas, num_subsamples=B, threshold=None, expected_false=5.0, assumption="none"
    )
    assert auto.bound <= 5.0
    # the smallest such threshold (grid step 1e-3)
    assert stability_bound(auto.q, P, auto.threshold - 1e-3) > 5.0 or auto.threshold <= 0.501


def test_null_designs_false_selections_within_bound_and_signals_found():
    lambdas_eps, target = 0.05, 1.0
    false_counts, bounds, loose = [], [], []
    for seed in range(8):
        X, y = _data(100 + seed, signal=False)
        lam = jaxknock.lambda_grid(X, y, num=L, eps=lambdas_eps)
        res = stability_selection(
            jax.random.key(seed), X, y, lambdas=lam, num_subsamples=B, threshold=0.7, expected_false=target
        )
        false_counts.append(int(res.selected.sum()))
        bounds.append(res.bound)
        # the unprotected rule (threshold 0.51 on the whole grid) selects noise: the check above can fail
        loose.append(int((np.asarray(res.probabilities).max(axis=1) >= 0.51).sum()))
    assert max(bounds) <= target
    assert np.mean(false_counts) <= np.mean(bounds) + 1e-12
    assert np.mean(loose) > target
    X, y = _data(7)
    whole = stability_selection(jax.random.key(1), X, y, num_subsamples=B, num_lambdas=L, eps=0.05, expected_false=None)
    assert np.all(np.asarray(whole.max_probability)[:3] >= 0.9)
    res = stability_selection(jax.random.key(1), X, y, num_subsamples=B, num_lambdas=L, eps=0.05, threshold=0.9)
    assert res.bound <= 1.0 and res.selected[:3].all()  # the default E[V] <= 1, at threshold 0.9


def test_logistic_loss_and_float32():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((N, P)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.standard_normal(N) > 0).astype(np.float32)
    res = stability_selection(jax.random.key(0), X, y, loss="logistic", num_subsamples=B, num_lambdas=L, eps=0.05)
    assert res.probabilities.dtype == jnp.float32
    assert res.max_probability[0] >= 0.9 and res.selected[0]
    assert res.num_failed.shape == (L,)


@pytest.mark.parametrize("solver", ["auto", "fista"])
def test_float64_design_far_from_origin_x64_off(solver):
    # x64 off (a user's default): a float64 NumPy X + 1e4 was rounded to float32 (spacing 1e-3) before the
    # subsamples were centred: selection probabilities up to 1.0 off against the same run at offset 0 (noise
    # features at 0.95, signals' paths changed; FISTA: 0.15 off). The means now come out in float64 on the
    # host (every fit has an intercept)
    X, y = _data(0)
    key = jax.random.key(0)
    with jax.enable_x64(False):
        ref = stability_selection(key, X, y, num_subsamples=B, num_lambdas=L, solver=solver)
        for Xs, ys in [(X + 1e4, y), (X, y + 1e6)]:
            got = stability_selection(key, Xs, ys, num_subsamples=B, num_lambdas=L, solver=solver)
            np.testing.assert_allclose(np.asarray(got.probabilities), np.asarray(ref.probabilities), atol=0.1)
            assert np.array_equal(np.asarray(got.selected), np.asarray(ref.selected))
    assert (np.asarray(ref.probabilities)[:3].max(axis=1) >= 0.9).all()  # the signals, found at offset 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(fraction=0.0), "fraction"),
        (dict(fraction=1.0), "fraction"),
        (dict(fraction=0.7), "fraction must be <= 0.5"),
        (dict(threshold=0.5), "threshold"),
        (dict(threshold=0.3), "threshold"),
        (dict(threshold=1.2), "threshold"),
        (dict(num_subsamples=7), "even"),
        (dict(expected_false=-1.0), "expected_false"),
        (dict(assumption="unimodal", complementary_pairs=False, fraction=0.5), "complementary_pairs"),
        (dict(lambdas=[0.1, 0.5]), "decreasing"),
        (dict(loss="hinge"), "loss"),
    ],
)
def test_bad_input(kwargs, match):
    X, y = _data(0)
    with pytest.raises(ValueError, match=match):
        stability_selection(jax.random.key(0), X, y, **kwargs)


def test_max_steps_zero_is_no_step_as_in_lasso_path():
    """max_steps = 0 is kept (the lasso family's rule: an integer >= 0, where 0 certifies the start): above
    lambda_max every fit converges without a step; below it every fit is reported in num_failed, never a silent
    empty selection. A negative or fractional max_steps is refused by name."""
    X, y = _data(0)
    lmax = float(jaxknock.lambda_max(X, y))
    kw = dict(num_subsamples=4, max_steps=0)
    assert stability_selection(jax.random.key(0), X, y, lambdas=[4 * lmax, 2 * lmax], **kw).num_failed.sum() == 0
    res = stability_selection(jax.random.key(0), X, y, lambdas=[0.5 * lmax, 0.2 * lmax], **kw)
    assert res.num_failed.tolist() == [4, 4] and "raise max_steps" in res.explanation
    for bad in (-1, 2.5):
        with pytest.raises(ValueError, match="max_steps must be a non-negative integer"):
            stability_selection(jax.random.key(0), X, y, num_subsamples=4, max_steps=bad)


@pytest.mark.parametrize("name", ["threshold", "expected_false"])
def test_bool_probability_settings_refused(name):
    """``threshold=True`` (a selection probability in (0.5, 1]) ran as 1.0 and ``expected_false=True`` as 1.0."""
    X, y = _data(0)
    for bad in (True, np.bool_(True)):
        with pytest.raises(TypeError, match=name):
            stability_selection(jax.random.key(0), X, y, num_subsamples=4, num_lambdas=5, **{name: bad})


def test_logistic_needs_labels():
    X, y = _data(0)
    with pytest.raises(ValueError, match="binary labels"):
        stability_selection(jax.random.key(0), X, np.round(np.abs(y)), loss="logistic")


def test_cli_stability(tmp_path, capsys):
    import json

    from jaxknock.cli import main

    X, y = _data(0)
    path = tmp_path / "d.csv"
    cols = [f"x{j}" for j in range(P)]
    np.savetxt(path, np.c_[X, y], delimiter=",", header=",".join([*cols, "y"]), comments="")
    out = tmp_path / "r.json"
    argv = [str(path), "--target", "y", "--subsamples", "40", "--lambdas", "5", "--quiet", "--out", str(out)]
    assert main(["stability", *argv, "--threshold", "auto"]) == 0  # default --expected-false 1
    report = json.loads(out.read_text())
    assert report["command"] == "stability" and {"x0", "x1"} <= {s["name"] for s in report["selected"]}
    assert report["bound"] <= 1.0 and report["settings"]["expected_false"] == 1.0
    assert main(["stability", *argv, "--expected-false", "none"]) == 0  # the whole grid at threshold 0.6
    assert json.loads(out.read_text())["num_lambdas_used"] == 5
    assert "explanation" in report  # None, or why the bound says nothing
    capsys.readouterr()
    for bad in (["--threshold", "0.5"], ["--threshold", "auto", "--expected-false", "none"]):
        assert main(["stability", str(path), "--target", "y", *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--threshold" in err[0]


# ---- the working-set (homotopy) engine: solver="auto" ------------------------------------------


def _explicit_supports(X, y, idx, lambdas, loss="squared"):
    """Per-subsample supports ``(B, L, P)`` from the engine's own lasso path on the explicit rows."""
    from jaxknock.l1.working_set import l1_path

    return np.stack(
        [np.asarray(l1_path(X[ix], y[ix], lambdas, loss=loss, tol=1e-8).stats["coef_path"]) != 0 for ix in idx]
    )


@pytest.mark.parametrize("pairs", [True, False])
def test_engine_equals_explicit_loop_and_sklearn(pairs):
    from sklearn.linear_model import lasso_path

    X, y = _data(2)
    key = jax.random.key(4)
    lambdas = np.asarray(jaxknock.lambda_grid(X, y, num=L, eps=0.05))
    kw = dict(num_subsamples=B, complementary_pairs=pairs, assumption="none", threshold=0.6)
    res = jaxknock.stability_selection(key, X, y, lambdas=lambdas, solver="auto", **kw)
    idx = np.asarray(stability_subsamples(key, N, B, complementary_pairs=pairs))
    sup = _explicit_supports(X, y, idx, lambdas)
    np.testing.assert_allclose(np.asarray(res.probabilities), sup.mean(0).T, atol=1e-12)
    # exactly count / B in float64 (the engines' float32 counts were divided before the cast: 7e-8 off)
    np.testing.assert_array_equal(np.asarray(res.probabilities), sup.sum(0).T / B)
    np.testing.assert_allclose(res.q_path, np.maximum.accumulate(sup, axis=1).sum(2).mean(0))
    assert int(res.num_failed.sum()) == 0
    # an independent reference: scikit-learn's lasso_path, solved tightly, on the same subsamples
    sk = []
    for ix in idx:
        Xs, ys = X[ix] - X[ix].mean(0), y[ix] - y[ix].mean()
        sk.append(lasso_path(Xs, ys, alphas=lambdas, tol=1e-12, max_iter=100_000)[1].T != 0)
    np.testing.assert_array_equal(sup, np.stack(sk))
    # the FISTA fallback agrees within its tolerance (a few borderline entries at most)
    fista = stability_selection(key, X, y, lambdas=lambdas, **kw)
    assert np.abs(np.asarray(fista.probabilities) - np.asarray(res.probabilities)).max() <= 2 / B


def test_working_set_engine_vmapped_chunks_equal_one_at_a_time():
    """``chunk_size > 1`` vmaps the working-set homotopy over pairs: its loops then run in lock step
    (``_iterate.lockstep_while_loop``, finished pairs gated); the counts equal one pair at a time and the
    explicit per-subsample paths."""
    X, y = _data(2)
    key = jax.random.key(5)
    lambdas = np.asarray(jaxknock.lambda_grid(X, y, num=L, eps=0.05))
    kw = dict(lambdas=lambdas, num_subsamples=B, solver="working_set", assumption="none", threshold=0.6)
    one = jaxknock.stability_selection(key, X, y, chunk_size=1, **kw)
    batched = jaxknock.stability_selection(key, X, y, chunk_size=3, **kw)  # B / 2 pairs: the last chunk is padded
    np.testing.assert_array_equal(np.asarray(batched.probabilities), np.asarray(one.probabilities))
    idx = np.asarray(stability_subsamples(key, N, B))
    np.testing.assert_array_equal(np.asarray(one.probabilities), _explicit_supports(X, y, idx, lambdas).sum(0).T / B)
    assert int(batched.num_failed.sum()) == 0


def test_working_set_engine_plans_its_batches_with_the_gram_cache(monkeypatch):
    """On an accelerator the working-set engine vmaps pairs in batches sized from memory; the plan
    counts each pair's homotopy Gram cache and inverses at the current capacity (it did not)."""
    from jaxknock import _backend, _memory, _stability_engine

    X, y = _data(0)
    kw = dict(num_subsamples=B, solver="working_set", lambdas=jaxknock.lambda_grid(X, y, num=L, eps=0.05))
    ref = jaxknock.stability_selection(jax.random.key(3), X, y, chunk_size=1, **kw)
    # "an accelerator" with room for the data and about three pairs' caches (W + 8 = 28 columns, 28 slots)
    monkeypatch.setattr(_backend, "loop_over_batch", lambda what, plat=None: False)
    rows = N  # a pair is one design of both halves' rows
    room = 8 * (4 * rows * P + 2 * L * P) + 4 * L * P + _memory.gram_cache_bytes(2, P + 8, P + 8, 8)
    free = 2 * (8 * 2 * rows * P + 3 * room + room // 2)  # the plan uses half of free memory
    monkeypatch.setattr(_memory, "device_memory_bytes", lambda devices=None: free)
    chunks = []
    engine = _stability_engine.engine_counts
    monkeypatch.setattr(
        _stability_engine, "engine_counts", lambda *a, **k: chunks.append(k["chunk"]) or engine(*a, **k)
    )
    res = jaxknock.stability_selection(jax.random.key(3), X, y, **kw)
    assert chunks and max(chunks) == 3, chunks  # of B / 2 = 10 pairs
    np.testing.assert_array_equal(np.asarray(res.probabilities), np.asarray(ref.probabilities))


def test_engine_logistic_matches_explicit_loop():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((N, P))
    y = (X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(N) > 0).astype(float)
    key = jax.random.key(1)
    lambdas = np.asarray(jaxknock.lambda_grid(X, y, num=L, eps=0.1, loss="logistic"))
    res = jaxknock.stability_selection(
        key, X, y, loss="logistic", lambdas=lambdas, num_subsamples=B, solver="working_set"
    )
    idx = np.asarray(stability_subsamples(key, N, B))
    sup = _explicit_supports(X, y, idx, lambdas, loss="logistic")
    # coordinate descent to a KKT tolerance: borderline coefficients may differ in one or two subsamples
    assert np.abs(np.asarray(res.probabilities) - sup.mean(0).T).max() <= 2 / B
    assert res.selected[:2].all()


def test_engine_choice_and_errors():
    X, y = _data(0)
    with pytest.raises(ValueError, match="fit_intercept=False"):
        jaxknock.stability_selection(jax.random.key(0), X, y, solver="working_set", fit_intercept=False)
    with pytest.raises(ValueError, match="one device"):
        jaxknock.stability_selection(jax.random.key(0), X, y, solver="working_set", devices=2)
    # solver="auto": the lockstep homotopy (squared loss) or the working-set engine (logistic) where they
    # apply, FISTA without an intercept; which one ran shows in the programs compiled
    names = ("lockstep_counts", "engine_counts", "path_counts")
    for kw, ran in [
        (dict(), "lockstep_counts"),
        (dict(loss="logistic"), "engine_counts"),
        (dict(fit_intercept=False), "path_counts"),
        (dict(solver="fista"), "path_counts"),
    ]:
        jax.clear_caches()
        with contextlib.ExitStack() as stack:
            seen = {name: stack.enter_context(count_compiles(name)) for name in names}
            target = (y > 0).astype(float) if kw.get("loss") == "logistic" else y
            jaxknock.stability_selection(
                jax.random.key(0), X, target, num_subsamples=4, num_lambdas=3, **{"solver": "auto", **kw}
            )
        assert [name for name in names if seen[name]] == [ran], kw


# ---- the lockstep homotopy (squared loss, solver="auto" / "lockstep") -------------------------


def test_lockstep_wide_chunked_equals_sklearn():
    """p > m (the path runs to near-saturation), chunks with padding, against scikit-learn solved tightly."""
    from sklearn.linear_model import lasso_path

    rng = np.random.default_rng(11)
    X = rng.standard_normal((N, 60))
    y = X[:, :3] @ np.array([2.0, -2.0, 1.5]) + rng.standard_normal(N)
    key = jax.random.key(5)
    lambdas = np.asarray(jaxknock.lambda_grid(X, y, num=L, eps=0.01))
    kw = dict(lambdas=lambdas, num_subsamples=B, threshold=0.6)
    res = jaxknock.stability_selection(key, X, y, solver="lockstep", chunk_size=7, **kw)  # 20 = 7 + 7 + 6
    idx = np.asarray(stability_subsamples(key, N, B))
    sk = []
    for ix in idx:
        Xs, ys = X[ix] - X[ix].mean(0), y[ix] - y[ix].mean()
        sk.append(lasso_path(Xs, ys, alphas=lambdas, tol=1e-12, max_iter=100_000)[1].T != 0)
    sk = np.stack(sk)
    np.testing.assert_allclose(np.asarray(res.probabilities), sk.mean(0).T, atol=1e-12)
    np.testing.assert_allclose(res.q_path, np.maximum.accumulate(sk, axis=1).sum(2).mean(0))
    assert int(res.num_failed.sum()) == 0
    # float32 direction products (the default for float64) against the all-float64 path: the same supports
    exact = jaxknock.stability_selection(key, X, y, solver="lockstep", chunk_size=7, mixed_precision=False, **kw)
    np.testing.assert_array_equal(np.asarray(exact.probabilities), np.asarray(res.probabilities))
    # out of steps: the subsamples are reported failed at the grid penalties they did not reach, never silently
    short = jaxknock.stability_selection(key, X, y, solver="lockstep", chunk_size=7, max_steps=5, **kw)
    assert short.num_failed[-1] == B and short.num_failed[0] == 0
    assert "did not converge" in short.explanation  # was None or about the selection alone
    assert np.all(np.asarray(short.probabilities)[:, -1] == 0)


def test_lockstep_sign_flip_badly_scaled_columns():
    """Column scales 1e-3..1e3: a dropped feature's correlation can cross to the other sign before the
    next event; only its same-sign re-entry may be barred (barring both missed one subsample's entry)."""
    from sklearn.linear_model import lasso_path

    rng = np.random.default_rng(0)
    Z = rng.standard_normal((200, 50))
    X = Z * np.logspace(-3, 3, 50)
    y = Z[:, :3] @ np.array([1.0, -1.0, 0.5]) + Z[:, -3:] @ np.array([1.0, -1.0, 0.5]) + rng.standard_normal(200)
    lambdas = np.asarray(jaxknock.lambda_grid(X, y, num=30, eps=1e-3))
    key = jax.random.key(1)
    sk = []
    for ix in np.asarray(stability_subsamples(key, 200, 20)):
        Xs, ys = X[ix] - X[ix].mean(0), y[ix] - y[ix].mean()
        sk.append(lasso_path(Xs, ys, alphas=lambdas, tol=1e-14, max_iter=1_000_000)[1].T != 0)
    sk = np.stack(sk).mean(0).T
    for mixed in (True, False):
        res = jaxknock.stability_selection(
            key, X, y, lambdas=lambdas, num_subsamples=20, solver="lockstep", mixed_precision=mixed
        )
        np.testing.assert_allclose(np.asarray(res.probabilities, np.float64), sk, atol=1e-6)
        assert int(res.num_failed.sum()) == 0


@pytest.mark.parametrize("scale", [1e40, 1e-40])
def test_lockstep_mixed_precision_design_outside_float32_range(scale):
    """A float64 design in units of 1e40 (1e-40) was inf (0) in the float32 products of ``mixed_precision``:
    probabilities off by 1.0 with no failure counted. The supports do not depend on a common unit of X."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 6))
    y = 2 * X[:, 0] + X[:, 1] + rng.standard_normal(80)
    kw = dict(num_subsamples=20, num_lambdas=10, expected_false=None, solver="lockstep")
    base = jaxknock.stability_selection(jax.random.key(0), X, y, **kw)
    for mixed in (True, False):
        res = jaxknock.stability_selection(jax.random.key(0), X * scale, y, mixed_precision=mixed, **kw)
        np.testing.assert_array_equal(np.asarray(res.probabilities), np.asarray(base.probabilities))
        assert int(res.num_failed.sum()) == 0


def test_lockstep_duplicated_column_is_skipped_and_the_rest_unchanged():
    """An exact copy of a column (appended last) is in the span of the active set once its twin enters:
    the Schur complement of its stored column is zero, so it is skipped, never selected, and every other
    feature's selection counts equal those on the design without the copy."""
    X, y = _data(3)
    Xd = np.concatenate([X, X[:, 1:2]], axis=1)  # column P duplicates the planted signal 1
    lambdas = np.asarray(jaxknock.lambda_grid(X, y, num=L, eps=0.01))
    key = jax.random.key(2)
    kw = dict(lambdas=lambdas, num_subsamples=B, solver="lockstep", chunk_size=4, mixed_precision=False)
    base = jaxknock.stability_selection(key, X, y, **kw)
    dup = jaxknock.stability_selection(key, Xd, y, **kw)
    np.testing.assert_array_equal(np.asarray(dup.probabilities)[:P], np.asarray(base.probabilities))
    assert np.all(np.asarray(dup.probabilities)[P] == 0) and np.asarray(base.probabilities)[1, -1] == 1
    assert int(dup.num_failed.sum()) == 0


def test_lockstep_rejects_logistic():
    X, y = _data(0)
    with pytest.raises(ValueError, match="lockstep"):
        jaxknock.stability_selection(jax.random.key(0), X, (y > 0).astype(float), loss="logistic", solver="lockstep")


def test_explanation_names_a_vacuous_bound_and_an_empty_selection():
    """p small against n: on the whole grid every feature is selected and E[V] <= bound >= the number selected."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 6))
    y = 2.0 * X[:, 0] + rng.standard_normal(200)
    key = jax.random.key(0)
    whole = stability_selection(key, X, y, num_subsamples=B, num_lambdas=L, expected_false=None)
    assert whole.selected.sum() >= 5 and whole.bound >= whole.selected.sum()
    assert whole.explanation.startswith("the error bound says nothing here")
    cut = stability_selection(key, X, y, num_subsamples=B, num_lambdas=L)  # the default: E[V] <= 1
    assert cut.expected_false == 1.0 and cut.num_lambdas_used < L
    assert cut.selected.tolist() == [True, False, False, False, False, False] and cut.bound <= 1.0
    assert cut.explanation is None
    none = stability_selection(key, X, y, num_subsamples=B, num_lambdas=L, expected_false=1e-3)
    assert not none.selected.any() and none.explanation.startswith("nothing selected: even lambdas[:1]")


def test_jax_and_numpy_scalar_settings():
    """``fraction=jnp.float32(0.5)`` / ``threshold=np.array(0.7)`` were refused as out of range; they are
    the same settings as the Python floats. A bool or a 1-D array is still refused."""
    X, y = _data(0)
    kw = dict(num_subsamples=4, num_lambdas=5)
    ref = stability_selection(jax.random.key(0), X, y, fraction=0.5, threshold=0.7, expected_false=1.0, **kw)
    res = stability_selection(
        jax.random.key(0), X, y, fraction=jnp.float32(0.5), threshold=np.array(0.7), expected_false=jnp.array(1), **kw
    )
    np.testing.assert_array_equal(res.probabilities, ref.probabilities)
    assert res.threshold == ref.threshold
    for bad in (True, np.array([0.4])):
        with pytest.raises(ValueError, match="fraction"):
            stability_selection(jax.random.key(0), X, y, fraction=bad, **kw)


def test_jax_integer_counts_and_engine_tol():
    """``num_subsamples=jnp.int32(4)`` (and num_lambdas, chunk_size, max_steps) was refused as not an integer
    while ``np.int32(4)`` passed; a traced count names itself. The lockstep / working-set engines read
    ``tol`` unchecked: tol=-1 or NaN ran, tol=None was JAX's conversion error."""
    X, y = _data(0)
    ref = stability_selection(jax.random.key(0), X, y, num_subsamples=4, num_lambdas=5)
    res = stability_selection(jax.random.key(0), X, y, num_subsamples=jnp.int32(4), num_lambdas=jnp.int64(5))
    np.testing.assert_array_equal(res.probabilities, ref.probabilities)
    with pytest.raises(TypeError, match="num_subsamples must be a concrete .* traced"):
        key = jax.random.key(0)
        jax.jit(lambda b: stability_selection(key, X, y, num_subsamples=b))(4)
    for bad in (-1.0, np.nan, "x"):
        with pytest.raises(ValueError, match="tol must be a positive number"):
            stability_selection(jax.random.key(0), X, y, num_subsamples=4, num_lambdas=5, tol=bad)


def test_subsamples_check_their_settings():
    """stability_subsamples ran unchecked: an odd count with pairs gave B - 1 subsamples (2 for 3),
    fraction 0.6 with pairs a concatenation error, fraction 0 or n = 1 a ZeroDivisionError, an integer
    seed JAX's invalid-key error; each now names its argument."""
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="even num_subsamples"):
        stability_subsamples(key, 10, 3)
    with pytest.raises(ValueError, match="fraction must be <= 0.5"):
        stability_subsamples(key, 10, 4, fraction=0.6)
    for n, fraction in ((10, 0.0), (1, 0.5), (10, 1.5)):
        with pytest.raises(ValueError, match="fraction|n "):
            stability_subsamples(key, n, 4, fraction=fraction, complementary_pairs=fraction <= 0.5)
    with pytest.raises(ValueError, match="num_subsamples"):
        stability_subsamples(key, 10, 0, complementary_pairs=False)
    with pytest.raises(TypeError, match="key"):
        stability_subsamples(0, 10, 4)
    with pytest.raises(TypeError, match="n must be"):
        jax.jit(lambda n: stability_subsamples(key, n, 4))(10)
    assert stability_subsamples(key, 10, 4).shape == (4, 5)  # unchanged where valid


def test_subsamples_and_the_default_grid_are_one_program_each():
    """``stability_subsamples`` and ``lambda_grid`` ran op by op: about seven and six eager programs more in
    a first ``stability_selection`` (31 programs in all at n = 300, p = 50; now 12). Shapes no other test
    compiles for, so every program is counted."""
    X = np.random.default_rng(0).standard_normal((23, 7))
    y = X[:, 0] + 0.1
    key = jax.random.key(1)
    with count_compiles() as compiles:
        idx = stability_subsamples(key, 29, 6)
    assert [c.split()[1] for c in compiles] == ["jit(_subsample_rows)"]
    assert idx.shape == (6, 14) and len(np.intersect1d(idx[0], idx[1])) == 0
    with count_compiles() as compiles:
        grid = jaxknock.lambda_grid(X, y, num=9)
    assert len(compiles) <= 5  # the unit scale (2), lambda_max, the grid, the scale back
    np.testing.assert_allclose(grid[-1] / grid[0], 1e-3, rtol=1e-12)


def test_a_warm_call_that_selects_nothing_compiles_nothing():
    """With no stable feature (``k = 0``) the maximum probabilities were ``jnp.zeros(p, dtype)``, an eager
    program (two, with the dtype's conversion) compiled in the first such warm call of a process; they are
    NumPy zeros put on the device now. A shape no other test compiles for."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((31, 5))
    key = jax.random.key(0)
    kw = dict(num_subsamples=6, num_lambdas=8, threshold=0.9, expected_false=None)
    first = jaxknock.stability_selection(key, X, X[:, 0] + 0.1 * X[:, 1], **kw)
    assert first.selected.any()
    with count_compiles() as compiles:
        none = jaxknock.stability_selection(key, X, rng.standard_normal(31), **dict(kw, expected_false=1e-3))
    assert not none.selected.any() and none.max_probability.dtype == X.dtype and none.q == 0.0
    assert [c.split()[1] for c in compiles] == []
