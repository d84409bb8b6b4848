"""Shared problem generators for the tests (import as ``from helpers import ...``).

Each area keeps its generators under its own header; every generator is a
pure function of its arguments (seeded NumPy), so tests that share one draw
the same data as before.
"""

import contextlib
import logging

import jax
import numpy as np

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
def count_compiles(name):
    """Count the XLA compilations of jitted functions called ``name`` inside the block.

    Yields a list that receives one entry per compilation (``jax.log_compiles``
    messages), so ``len(compiles)`` after a second call with the same shapes
    says whether it recompiled.
    """
    compiles = []

    class Handler(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if msg.startswith("Compiling") and f"jit({name})" in msg:
                compiles.append(msg)

    handler = Handler()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles():
            yield compiles
    finally:
        logger.removeHandler(handler)
