"""Shared problem generators and utilities for the tests (import as ``from helpers import ...``).

Each area keeps its generators under its own header; every generator is a
pure function of its arguments (seeded NumPy), so tests that share one draw
the same data as before.
"""

import contextlib
import json
import logging
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --------------------------------------------------------------------------
# core: covariance, sampling, filter, pipeline, cli
# --------------------------------------------------------------------------


def ar1_correlation(p, rho):
    """The AR(1) correlation matrix ``rho ** |i - j|`` (``p x p``, NumPy)."""
    idx = np.arange(p)
    return rho ** np.abs(np.subtract.outer(idx, idx))


def equicorrelated_s(Sigma):
    """s_j = min(1, 2 lambda_min) for a correlation matrix (the boundary: Omega singular)."""
    return np.full(Sigma.shape[0], min(1.0, 2.0 * np.linalg.eigvalsh(Sigma)[0]))


def random_factor_model(seed, p, k, dscale=1.0):
    """``(d, U)`` with ``d ~ U[0.5, 1] * dscale`` and ``U ~ N(0, 1/k)`` (``Sigma = diag(d) + U U^T``)."""
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.5, 1.0, p) * dscale
    U = rng.normal(size=(p, k)) / np.sqrt(k)
    return d, U


def factor_data(seed, n, p, k, noise=0.5):
    """``X = F + noise * E``: ``n`` rows with a rank-``k`` factor structure plus white noise."""
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((n, k)) @ rng.standard_normal((k, p))
    return F + noise * rng.standard_normal((n, p))


def ar1_regression(n=400, p=30, k=8, amp=1.0, seed=0, rho=0.3):
    """``(X, y, beta)``: AR(1)-correlated Gaussian rows, ``k`` signals of size ``+-amp``, unit noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p)) @ np.linalg.cholesky(ar1_correlation(p, rho)).T
    beta = np.zeros(p)
    beta[rng.choice(p, k, replace=False)] = amp * rng.choice([-1, 1], k)
    y = X @ beta + rng.standard_normal(n)
    return X, y, beta


def independent_regression(n=200, p=30, signals=12, seed=0):
    """``(X, y)``: independent standard normal columns, the first ``signals`` with coefficient 1."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    beta = np.zeros(p)
    beta[:signals] = 1.0
    y = X @ beta + rng.standard_normal(n)
    return X, y


@contextlib.contextmanager
def count_compiles(name=None):
    """Count the XLA compilations of jitted functions called ``name`` (any, if ``None``) inside the block.

    Yields a list that receives one entry per compilation (``jax.log_compiles``
    messages), so ``len(compiles)`` after a second call with the same shapes
    says whether it recompiled.
    """
    compiles = []

    class Handler(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if msg.startswith("Compiling") and (name is None or f"jit({name})" in msg):
                compiles.append(msg)

    handler = Handler()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles():
            yield compiles
    finally:
        logger.removeHandler(handler)


@contextlib.contextmanager
def host_reads(min_size=0):
    """Record the implicit reads of a concrete ``jax.Array`` (``min_size`` entries or more) back to the host.

    Yields a list that receives the shape of each read. On the CPU,
    ``jax.transfer_guard_device_to_host("disallow")`` never fires (a CPU array is
    read in place), so a test that only sets the guard cannot fail there; this
    records what the guard would refuse on an accelerator: NumPy conversions
    (``np.asarray``, ``np.array``, ...) and ``jax.Array._value`` (``float``,
    ``bool``, ``tolist``), but not an explicit ``jax.device_get`` nor a read
    inside ``jax.transfer_guard("allow")``. NumPy reductions applied directly to
    a JAX array (``np.sum(x)``) read through the buffer protocol and are not seen.
    """
    from jax._src import array as jax_array  # private: the Python hooks every implicit read passes
    from jax._src import config as jax_config

    reads, explicit = [], [0]
    names = ("asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray")
    originals = {name: getattr(np, name) for name in names}
    value, device_get = jax_array.ArrayImpl._value, jax.device_get

    def note(a):
        if (
            isinstance(a, jax.Array)
            and not isinstance(a, jax.core.Tracer)
            and a.size >= min_size
            and not explicit[0]
            and jax_config.transfer_guard_device_to_host.value != "allow"
        ):
            reads.append(tuple(a.shape))

    def recording(convert):
        def wrapped(a, *args, **kwargs):
            note(a)
            return convert(a, *args, **kwargs)

        return wrapped

    def recorded_value(self):
        note(self)
        return value.fget(self)

    def explicit_get(x):
        explicit[0] += 1
        try:
            return device_get(x)
        finally:
            explicit[0] -= 1

    for name in names:
        setattr(np, name, recording(originals[name]))
    jax_array.ArrayImpl._value = property(recorded_value)
    jax.device_get = explicit_get
    try:
        yield reads
    finally:
        for name in names:
            setattr(np, name, originals[name])
        jax_array.ArrayImpl._value = value
        jax.device_get = device_get


def run_json_script(code, env, *, timeout=240):
    """Run ``code`` in a fresh interpreter (``env``, in the repository root); it prints one JSON line last.

    For checks that need another process's settings (XLA flags, device count,
    x64). Returns the parsed last line; a non-zero exit fails with the tail of
    the script's stderr.
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# svector: hard (ill-conditioned but positive definite) inputs
# --------------------------------------------------------------------------


def _as_correlation(S):
    d = np.sqrt(np.diag(S))
    C = S / np.outer(d, d)
    C = (C + C.T) / 2
    np.fill_diagonal(C, 1.0)
    return C


def near_singular_ar1(p, rho):
    """AR(1) correlation with ``rho -> 1`` (condition number ~ ``(1 + rho) / (1 - rho)`` and more)."""
    return ar1_correlation(p, rho)


def near_singular_equicorrelated(p, rho):
    """``(1 - rho) I + rho 1 1^T`` with ``rho -> 1`` (smallest eigenvalue ``1 - rho``)."""
    return (1.0 - rho) * np.eye(p) + rho * np.ones((p, p))


def rank_deficient_ridge(seed, p, rank, ridge):
    """A rank-``rank`` correlation plus ``ridge`` (relative) on the diagonal, rescaled to unit diagonal."""
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((p, rank))
    S = V @ V.T
    S = S / np.mean(np.diag(S)) + ridge * np.eye(p)
    return _as_correlation(S)


def spiked_correlation(seed, p, cond, spikes=2):
    """Random eigenvectors, ``spikes`` large eigenvalues and the rest spread down to ``1 / cond``."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    ev = np.geomspace(1.0, 1.0 / cond, p)
    ev[: min(spikes, p)] = p
    return _as_correlation((Q * ev) @ Q.T)


def hard_correlations(sizes=(1, 2, 3, 10, 50)):
    """``[(name, C)]``: the family of ill-conditioned positive definite correlation matrices.

    Near-singular AR(1) (``rho`` 0.999, 0.9999), equicorrelated with ``rho -> 1``,
    rank-deficient plus a tiny ridge (1e-6 .. 1e-10), spiked spectra with
    condition numbers 1e6 .. 1e12, at every size in ``sizes``. Every matrix is
    positive definite (checked by Cholesky).
    """
    out = []
    for p in sizes:
        for rho in (0.999, 0.9999):
            out.append((f"ar1-p{p}-rho{rho}", near_singular_ar1(p, rho)))
        for rho in (0.999, 0.999999):
            out.append((f"equi-p{p}-rho{rho}", near_singular_equicorrelated(p, rho)))
        if p >= 3:
            for ridge in (1e-6, 1e-8, 1e-10):
                out.append((f"lowrank-p{p}-ridge{ridge:g}", rank_deficient_ridge(p, p, max(1, p // 3), ridge)))
        if p >= 2:
            for cond in (1e6, 1e9, 1e12):
                out.append((f"spiked-p{p}-cond{cond:g}", spiked_correlation(p + int(np.log10(cond)), p, cond)))
    for _, C in out:
        np.linalg.cholesky(C)
    return out


def hard_factor_models():
    """``[(name, d, U)]``: the smallest and most degenerate valid factor models (``k < p``)."""
    out = []
    for p in (2, 3, 10):
        for dval in (1.0, 1e-3, 1e-6, 1e-9):
            rng = np.random.default_rng(p)
            U = rng.standard_normal((p, 1))
            out.append((f"factor-p{p}-k1-d{dval:g}", np.full(p, dval), U))
    out.append(("factor-p2-k1-equal", np.full(2, 1e-6), np.ones((2, 1))))
    out.append(("factor-p10-k3-d1e-8", np.full(10, 1e-8), np.random.default_rng(3).standard_normal((10, 3))))
    return out


def near_copy_correlation(p, delta, j=3):
    """AR(1) ``rho = 0.5`` on ``p - 1`` features plus a copy of feature ``j`` at correlation ``1 - delta``."""
    q = p - 1
    C = np.eye(p)
    C[:q, :q] = 0.5 ** np.abs(np.arange(q)[:, None] - np.arange(q)[None, :])
    C[q, :q] = C[:q, q] = C[j, :q]
    C[q, j] = C[j, q] = 1.0 - delta
    return C
