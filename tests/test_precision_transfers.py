"""GPU readiness (issue 20): the precision policy and no implicit device-to-host transfers.

* Precision: only the S solve runs in float64; sampling, statistics and the
  filter follow ``X``'s dtype (a float32 design gives float32 knockoffs and W,
  float64 stays float64).
* Transfers: the samplers, the statistics with a fixed penalty and the
  replicate stage of ``knockoff_filter`` run on device-resident inputs under
  ``jax.transfer_guard_device_to_host("disallow")`` (validation brings back a
  few flags explicitly; nothing else leaves the device). The guard never fires
  on the CPU, so the tests also record the reads (``helpers.host_reads``).

Tiny shapes, shared across tests, so the compiled programs are reused.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ar1_correlation, host_reads, random_factor_model

import jaxknock
from jaxknock import statistics as stats
from jaxknock.covariance import FactorModel
from jaxknock.sampling import (
    fixed_x_knockoffs,
    sample_knockoffs,
    sample_knockoffs_factor,
    sample_replicates,
)

N, P = 60, 12
F32, F64 = jnp.float32, jnp.float64


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    Sigma = ar1_correlation(P, 0.5)
    X = rng.standard_normal((N, P)) @ np.linalg.cholesky(Sigma).T
    s = np.full(P, 0.5)  # feasible: 2 lambda_min(Sigma) > 0.5 for rho = 0.5
    d, U = random_factor_model(1, P, 2)
    y = X[:, 0] - X[:, 1] + rng.standard_normal(N)
    return X, Sigma, s, FactorModel(jnp.asarray(d), jnp.asarray(U)), y


def _on_device(*arrays, dtype=None):
    return [jax.device_put(jnp.asarray(a, dtype)) for a in arrays]


# ------------------------------------------------------------------ precision


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_samplers_follow_the_dtype_of_x(problem, dtype):
    X, Sigma, s, model, _ = problem
    key = jax.random.key(0)
    Xd = jnp.asarray(X, dtype)
    # Sigma / s / the model stay float64: they must not promote a float32 design
    out = {
        "dense": sample_knockoffs(key, Xd, Sigma, s),
        "dense_m2": sample_knockoffs(key, Xd, Sigma, 0.6 * s, num_knockoffs=2),
        "factor": sample_knockoffs_factor(key, Xd, model, 0.5 * model.d),
        "factor_m2": sample_knockoffs_factor(key, Xd, model, 0.5 * model.d, num_knockoffs=2),
        "replicates": sample_replicates(key, Xd, Sigma, s, 3),
        "fixed_x": fixed_x_knockoffs(jnp.asarray(X[: 2 * P + 6], dtype), np.full(P, 0.2))[1],
    }
    for name, Xk in out.items():
        assert Xk.dtype == dtype, name
        assert bool(jnp.all(jnp.isfinite(Xk))), name


@pytest.mark.parametrize(
    "s_method, dtype, statistic",
    [("sdp", F32, "lcd"), ("sdp_factor", F32, "correlation"), ("sdp", F64, "correlation")],
    ids=["dense-float32-lcd", "factor-float32", "dense-float64"],
)
def test_knockoff_filter_keeps_the_design_dtype(problem, s_method, dtype, statistic):
    X, _, _, _, y = problem
    sel = jaxknock.knockoff_filter(
        jax.random.key(2),
        np.asarray(X, dtype),
        y,
        s_method=s_method,
        rank=2 if s_method == "sdp_factor" else None,
        statistic=statistic,
        lam=0.1 if statistic == "lcd" else None,
        num_replicates=2,
    )
    assert sel.W.dtype == dtype and sel.thresholds.dtype == dtype
    assert sel.s_solution.value.dtype == dtype  # solved in float64, cast back
    assert int(np.max(np.asarray(sel.s_solution.result))) == 0
    assert bool(jnp.all(jnp.isfinite(sel.W)))


def test_float32_filter_runs_without_x64_in_a_fresh_process():
    """With jax_enable_x64 off, a float32 design is accepted (the S solve switches x64 on locally)."""
    import subprocess
    import sys

    code = (
        "import jax, numpy as np, jaxknock\n"
        "assert not jax.config.jax_enable_x64\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.standard_normal((60, 8)).astype(np.float32)\n"
        "y = X[:, 0] + rng.standard_normal(60).astype(np.float32)\n"
        "sel = jaxknock.knockoff_filter(jax.random.key(0), X, y, s_method='sdp', statistic='correlation')\n"
        "assert sel.W.dtype == np.float32 and sel.s_solution.value.dtype == np.float32, sel.W.dtype\n"
        "assert int(sel.s_solution.result) == 0\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "JAX_ENABLE_X64"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


# ------------------------------------------------------------------ transfers


def test_samplers_make_no_implicit_device_to_host_transfers(problem):
    X, Sigma, s, model, _ = problem
    X, Sigma, s, Xf = _on_device(X, Sigma, s, X[: 2 * P + 6])
    s_fac, s_fx = _on_device(0.5 * model.d, np.full(P, 0.2))
    model = FactorModel(*_on_device(model.d, model.U))
    key = jax.random.key(3)
    calls = [
        lambda: sample_knockoffs(key, X, Sigma, s),
        lambda: sample_knockoffs(key, X, Sigma, 0.6 * s, num_knockoffs=2),
        lambda: sample_knockoffs_factor(key, X, model, s_fac),
        lambda: sample_knockoffs_factor(key, X, model, s_fac, num_knockoffs=2),
        lambda: sample_replicates(key, X, Sigma, s, 3),
        lambda: sample_replicates(key, X, model, s_fac, 3, chunk_size=2),
        lambda: fixed_x_knockoffs(Xf, s_fx)[1],
    ]
    for call in calls:
        call()  # compile outside the guard
    with jax.transfer_guard_device_to_host("disallow"), host_reads(min_size=N) as reads:
        for call in calls:
            jax.block_until_ready(call())
    assert reads == []  # the guard is silent on the CPU: no array of n entries or more came back


def test_invalid_input_still_raises_under_the_guard(problem):
    """The host checks that word an error are explicitly allowed to transfer."""
    X, Sigma, s, _, _ = problem
    X, Sigma = _on_device(X, Sigma)
    with jax.transfer_guard_device_to_host("disallow"):
        with pytest.raises(ValueError, match="s is infeasible"):
            sample_knockoffs(jax.random.key(0), X, Sigma, jnp.full(P, 3.0))
        with pytest.raises(ValueError, match="s must be non-negative"):
            sample_knockoffs(jax.random.key(0), X, Sigma, jnp.full(P, -0.1))
        with pytest.raises(ValueError, match="Xk contains"):
            stats.marginal_correlation(jnp.full((N, 2 * P), jnp.nan), jnp.arange(N, dtype=F64))


def test_statistics_with_a_fixed_penalty_make_no_implicit_transfers(problem):
    X, Sigma, s, _, y = problem
    Xk = sample_replicates(jax.random.key(4), jnp.asarray(X), Sigma, s, 2)
    Xk = jax.device_put(jnp.concatenate([jnp.broadcast_to(jnp.asarray(X), Xk.shape), Xk], axis=-1))
    (y,) = _on_device(y)
    labels = jax.device_put((y > 0).astype(F64))
    calls = [
        lambda: stats.lcd(Xk, y, lam=0.1).value,
        lambda: stats.lcd(Xk, y, lam=jnp.array([0.1, 0.2])).value,
        lambda: stats.lsm(Xk, y, num_lambdas=20).value,
        lambda: stats.marginal_correlation(Xk, y),
        lambda: stats.sparse_centroid(Xk, labels),
    ]
    for call in calls:
        call()
    with jax.transfer_guard_device_to_host("disallow"), host_reads(min_size=N) as reads:
        for call in calls:
            jax.block_until_ready(call())
    assert reads == []  # the guard is silent on the CPU: no array of n entries or more came back


@pytest.mark.parametrize("chunk_size", [None, 1], ids=["batched", "fused"])
def test_replicate_stage_of_the_filter_makes_no_implicit_transfers(problem, chunk_size):
    X, Sigma, s, _, y = problem
    Xs = (X - X.mean(0)) / X.std(0)
    Xs, Sigma, s, y = _on_device(Xs, Sigma, s, y)
    plan_args = dict(statistic="lcd", lam=0.1, loss="squared", lasso_tol=1e-4, cv_patience=None)
    from jaxknock import pipeline

    def call():
        return pipeline.replicate_stage(jax.random.key(5), Xs, y, Sigma, s, 3, chunk_size=chunk_size, **plan_args)

    W, _, _ = call()
    with jax.transfer_guard_device_to_host("disallow"), host_reads(min_size=N) as reads:
        W2, _, _ = call()
        jax.block_until_ready(W2)
    assert reads == []
    np.testing.assert_array_equal(np.asarray(W), np.asarray(W2))


# ------------------------------------------------- factor draw: batched products


def test_factor_draw_is_the_same_in_any_number_of_chunks(problem, monkeypatch):
    """Chunking (for memory) never changes the numbers; the prefix-sum draw equals the one-chunk draw."""
    from jaxknock import _sampling_factor, sampling

    rng = np.random.default_rng(3)
    p, k = 150, 3  # three blocks of 64, the last one partial (dummies before the tail)
    d = rng.uniform(0.5, 1.0, p) * 0.03  # small d: C indefinite, the recursive path
    U = rng.normal(size=(p, k)) / np.sqrt(k)
    model = FactorModel(jnp.asarray(d), jnp.asarray(U))
    X = jnp.asarray(rng.normal(size=(N, p)))
    Sigma = np.diag(d) + U @ U.T
    L = np.linalg.cholesky(Sigma)
    B = np.linalg.solve(L, np.diag(np.sqrt(np.diag(Sigma))))
    s = jnp.asarray(0.999 * 2.0 / np.linalg.eigvalsh(B.T @ B)[-1] * np.diag(Sigma))  # near the boundary
    for force, sv in ((False, s), (True, s), (False, jnp.asarray(1.5 * d))):  # the last one: C >= 0
        plan = sampling.replicate_plan(X, model, sv, force_recursion=force)
        draw = lambda key, plan: sampling.draw_replicate(key, plan)
        one = jax.jit(draw)(jax.random.key(7), plan)
        monkeypatch.setattr(_sampling_factor, "FACTOR_CHUNK_ELEMENTS", 2 * N * (64 + k))  # one block per chunk
        chunked = jax.jit(draw)(jax.random.key(7), plan)  # a new function: traced with the new chunking
        monkeypatch.undo()
        assert bool(jnp.all(jnp.isfinite(one)))
        np.testing.assert_allclose(np.asarray(chunked), np.asarray(one), rtol=0, atol=1e-12)


@pytest.mark.parametrize("value, feasible", [(0.7, True), (0.0, True), (0.9, False), (-0.1, False)])
def test_multi_knockoff_factor_sampler_poisons_infeasible_s_under_jit(value, feasible):
    """Issue 19: with m = 2 copies, (3/2) Sigma - diag(s) >= 0 is needed (s <= 0.75 here)."""
    p = 5
    Sigma = 0.5 * jnp.eye(p) + 0.5
    model = FactorModel(jnp.full(p, 0.5), jnp.full((p, 1), np.sqrt(0.5)))  # the same Sigma
    X = jax.random.normal(jax.random.key(1), (40, p))
    s = jnp.full(p, value)
    key = jax.random.key(0)
    outs = [
        jax.jit(lambda X, s: sample_knockoffs_factor(key, X, model, s, num_knockoffs=2))(X, s),
        jax.jit(lambda X, s: sample_knockoffs(key, X, Sigma, s, num_knockoffs=2))(X, s),
    ]
    for out in outs:
        assert out.shape == (40, 2, p)
        if feasible:
            assert bool(jnp.all(jnp.isfinite(out)))
        else:
            assert bool(jnp.all(jnp.isnan(out)))


# ------------------------------------------- validation of arrays on an accelerator


def test_host_reads_records_implicit_reads_only():
    """The recorder the transfer tests rely on sees what the guard refuses on an accelerator, and only that."""
    x = jax.device_put(jnp.arange(100.0))
    with host_reads() as reads:
        np.asarray(x)
        float(x[3])
        jax.device_get(x)  # explicit
        with jax.transfer_guard("allow"):  # explicitly allowed
            np.asarray(x + 1)
    assert reads == [(100,), ()]


@pytest.fixture
def on_an_accelerator(monkeypatch):
    """JAX arrays read as if they lived on an accelerator (a host read would copy them over the bus)."""
    from jaxknock import _backend

    monkeypatch.setattr(_backend, "reads_in_place", lambda x: not isinstance(x, jax.Array))


def test_validation_reduces_an_accelerator_design_where_it_is(problem, on_an_accelerator):
    """The finite / constant-column / symmetry checks read a flag, not the array, from an accelerator.

    They scanned the whole design on the host (``_checks.check_finite``; ``validate_inputs`` read ``X`` with
    ``np.asarray``): free on the CPU, an ``(n, p)`` copy over the bus per call on a GPU.
    """
    from jaxknock import covariance, l1

    X, Sigma, s, _, y = problem
    Xd, yd, Sigmad = _on_device(X, y, Sigma)
    calls = [
        lambda: covariance.ledoit_wolf(Xd),
        lambda: l1.lasso(Xd, yd, 0.1).value,
        lambda: sample_knockoffs(jax.random.key(0), Xd, Sigmad, s),
        lambda: (
            jaxknock.knockoff_filter(jax.random.key(1), Xd, yd, s_method="equicorrelated", statistic="correlation").W
        ),
    ]
    for call in calls:
        call()
    with host_reads(min_size=P * P) as reads:  # X is N x P, Sigma P x P
        for call in calls:
            jax.block_until_ready(call())
    assert reads == []


def test_validation_errors_are_the_same_for_an_accelerator_array(problem, on_an_accelerator):
    """A bad array on an accelerator comes back (explicitly) to word the same error as on the host."""
    from jaxknock import l1

    X, Sigma, s, _, y = problem
    bad = X.copy()
    bad[4, 2] = np.nan
    with pytest.raises(ValueError, match=r"X contains 1 non-finite value\(s\) \(NaN or Inf\), first at index \(4, 2\)"):
        l1.lasso(jax.device_put(bad), y, 0.1)
    const = X.copy()
    const[:, 5] = 2.0
    with pytest.raises(ValueError, match=r"X has 1 constant column\(s\) \(first: \[5\]\)"):
        jaxknock.knockoff_filter(jax.random.key(0), jax.device_put(const), y, statistic="correlation")
    skew = Sigma.copy()
    skew[0, 1] += 1e-3
    with pytest.raises(ValueError, match=re.escape("Sigma must be symmetric: max |Sigma - Sigma^T| = 0.001")):
        sample_knockoffs(jax.random.key(0), jax.device_put(X), jax.device_put(skew), s)
