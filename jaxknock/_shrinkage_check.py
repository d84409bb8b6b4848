r"""Near-duplicate features under the Ledoit-Wolf estimate: a bound on how much it inflates their conditional variance.

Gaussian knockoffs follow the law they are built from. For a feature that is
nearly a linear function of the others (a near-duplicate), the knockoff is
governed by its conditional variance ``v_j = 1 / (C^{-1})_{jj}``, which is
small. The Ledoit-Wolf estimate ``Sigma = (1 - delta) S + delta mu I``
shrinks every correlation by the same ``delta``, chosen for the Frobenius
error of the whole matrix: on a design whose bulk is nearly independent
``delta`` is large (0.16-0.44 below), and it multiplies a near-duplicate's
conditional variance many times. The knockoff of such a null feature is then
less related to the signal it duplicates than the feature itself is, and the
lasso prefers the null over its knockoff: the FDR is lost.

Measured (``benchmarks/measured/NOTES.md``, session 53; ``knockoff_filter``
defaults, ``fdr = 0.1``, p = 60, 10 signals of amplitude 12 each paired with a
null at correlation ``rho``, the other 40 features independent, 12 data sets):

======================  ==================  ==============  ========================
design                  FDR (Ledoit-Wolf)   true ``Sigma``  inflation (actual; bound)
======================  ==================  ==============  ========================
n = 300, rho = 0.9      0.16 +- 0.03        0.07 +- 0.03    5.2; 2.5
n = 300, rho = 0.99     0.31 +- 0.03        0.02 +- 0.02    46; 21
n = 1000, rho = 0.99    0.22 +- 0.03        0.02 +- 0.02    18; 8.8
n = 3000, rho = 0.99    0.19 +- 0.07                        7.1; 3.2
======================  ==================  ==============  ========================

With the true law those pairs are nearly undetectable (power 0.07 at
``rho = 0.99``): the selections that Ledoit-Wolf's knockoffs make there are
the estimate's, not the data's. On the block, AR(1) (0.9-0.99) and
equicorrelated designs (n = 300-2000) the actual inflation is 1.05-3.1 and
the bound below 1, and :func:`jaxknock.knockoff_filter` does not warn.

**The bound** (``O(p^2)``, from the estimate alone). With ``S`` the sample
covariance of the standardised columns and ``mu = tr(S) / p = tr(Sigma) / p``:
``Sigma >= delta mu I``, so the estimate's conditional variance, in correlation
units, is ``v^_j >= delta mu / Sigma_jj``; the sample's is at most the residual
variance on any single other feature, ``v_j <= 1 - max_k r_jk^2`` with
``r_jk = Sigma_jk / sqrt((Sigma_jj - delta mu)(Sigma_kk - delta mu))`` (the
sample correlation, recovered from ``Sigma``). Hence

    v^_j / v_j >= (delta mu / Sigma_jj) / (1 - max_k r_jk^2),

which :func:`inflation_bound` returns for the worst feature, with its partner
and their sample correlation. Only where ``n > p``: at ``p >= n`` the sample
covariance is singular (every ``v_j`` is 0 to it), the shrinkage is what makes a
law at all, and ``knockoff_filter`` does not compute the bound (the dense MVR on
the Ledoit-Wolf estimate kept the FDR there: 0.08 +- 0.01 at n = 150, p = 200,
AR(1) 0.9; its docstring).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["WARN_AT", "Inflation", "inflation_bound", "warn_if_inflated"]

WARN_AT = 2.0  # the bound at which knockoff_filter warns (benign designs: bound < 1, actual <= 3.1)


class Inflation(NamedTuple):
    """:func:`inflation_bound`'s result (scalars; a pytree)."""

    bound: jax.Array  # max_j of the lower bound on v^_j / v_j
    feature: jax.Array  # the j attaining it
    partner: jax.Array  # its most correlated other feature k
    correlation: jax.Array  # r_jk, their sample correlation
    count: jax.Array  # features whose bound is >= WARN_AT
    shrinkage: jax.Array  # delta


def inflation_bound(Sigma, delta, S=None) -> Inflation:
    r"""A lower bound on the factor by which a Ledoit-Wolf estimate multiplies each feature's conditional variance.

    ``Sigma = (1 - delta) S + delta mu I`` (:func:`jaxknock.ledoit_wolf` of standardised columns, ``(p, p)``),
    ``delta`` its shrinkage. Returns the largest ``(delta mu / Sigma_jj) / (1 - max_k r_jk^2)`` (the
    module docstring derives it) with the feature, its partner and their sample correlation ``r_jk``.
    The bound is 0 without shrinkage and without a second feature; a sample correlation of
    ``+-1`` to rounding gives ``inf``. Jittable.

    ``r_jk`` is recovered from ``Sigma``, which cannot hold it at ``delta = 1`` (``Sigma = mu I``; the bound
    was then 0). With the sample covariance ``S`` that ``Sigma`` shrinks (``(p, p)``, any positive scale:
    :func:`jaxknock.covariance.ledoit_wolf_and_sample` returns it at no extra cost) it is ``S``'s
    correlation, so a full shrinkage is bounded too: ``1 / (1 - r_jk^2)``. Heavy-tailed or rare-variant
    columns drive ``delta`` to 1 (their fourth moments dominate its numerator): p = 80 with 40 columns of one
    or two non-zeros and 5 signal / null pairs correlated ~0.99 gave FDR 0.175 +- 0.016 at ``fdr = 0.1``, 0 of
    30 warned without the sample's correlations (session 63).
    """
    p = Sigma.shape[-1]
    dt = Sigma.dtype
    if p < 2:
        zero, none = jnp.zeros((), dt), jnp.zeros((), jnp.int32)
        return Inflation(zero, none, none, zero, none, delta)
    mu = jnp.trace(Sigma) / p
    d = jnp.diagonal(Sigma)
    floor = delta * mu
    if S is None:  # recovered from Sigma: divides by (1 - delta) mu, so nothing is left of r at delta = 1
        sample_var = jnp.maximum(d - floor, jnp.finfo(dt).tiny)  # (1 - delta) S_jj
        r = Sigma / jnp.sqrt(sample_var[:, None] * sample_var[None, :])
    else:
        r = _correlation(S).astype(dt)
    r = jnp.where(jnp.eye(p, dtype=bool), 0.0, jnp.clip(r, -1.0, 1.0))
    partner = jnp.argmax(jnp.abs(r), axis=1)
    r_max = jnp.take_along_axis(r, partner[:, None], axis=1)[:, 0]
    residual = 1.0 - r_max * r_max  # >= v_j, the sample conditional variance
    lower = floor / d  # <= v^_j, the estimate's
    ratio = jnp.where(residual > 0, lower / jnp.where(residual > 0, residual, 1.0), jnp.inf)
    # delta = 1 without S: no correlation survives in Sigma to compare
    ratio = jnp.where((delta > 0) & ((delta < 1) | (S is not None)), ratio, 0.0)
    j = jnp.argmax(ratio)
    count = jnp.sum(ratio >= WARN_AT).astype(jnp.int32)
    return Inflation(ratio[j], j.astype(jnp.int32), partner[j].astype(jnp.int32), r_max[j], count, delta)


def _correlation(S):
    """``S_jk / sqrt(S_jj S_kk)``; a zero variance counts as the smallest normal number (its correlations are
    0, not NaN: a constant column has no partner)."""
    scale = jnp.sqrt(jnp.maximum(jnp.diagonal(S), jnp.finfo(S.dtype).tiny))
    return S / scale[:, None] / scale[None, :]


def warn_if_inflated(info: Inflation, fdr: float) -> None:
    """Warn (``UserWarning``) when :func:`inflation_bound` reached :data:`WARN_AT`: the FDR may exceed ``fdr``."""
    bound = float(info.bound)
    if not bound >= WARN_AT:  # also NaN (a NaN estimate fails elsewhere)
        return
    times = "an unbounded factor" if np.isinf(bound) else f"at least {bound:.1f}"
    warnings.warn(
        f"knockoff_filter: the Ledoit-Wolf estimate of the law of X shrinks every correlation by "
        f"{float(info.shrinkage):.0%}, which multiplies the conditional variance of {int(info.count)} "
        f"near-duplicate feature(s) by at least {WARN_AT:g} (feature {int(info.feature)}, correlated "
        f"{float(info.correlation):+.4f} with feature {int(info.partner)} in X: {times}). Knockoffs of such "
        f"features follow the estimate, not the data, and the FDR can exceed fdr = {fdr:g} (simulated at "
        "fdr = 0.1: 0.16-0.31 for null / signal pairs correlated 0.9-0.99). Select them together with "
        "groups=, or pass the law with Sigma= if it is known.",
        UserWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside the ``jaxknock`` package (the user's call), counted from
    the caller of :func:`warnings.warn`; decorators and nested stages put a varying number of frames between."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(2), 2  # the frame that calls warnings.warn is level 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level
