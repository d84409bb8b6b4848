r"""Sparse Bernoulli naive Bayes, solved exactly (Theorem 3).

For binary ``X``, ``L = sum_c a_c' log theta_c + b_c' log(1 - theta_c)`` with
``a_c = f_c + alpha`` ones and ``b_c = n_c - f_c + alpha`` zeros. Per feature
the gain of separate class parameters over one pooled parameter is::

    gain_j = sum_c [a_cj log(a_cj / (a_cj + b_cj)) + b_cj log(b_cj / (a_cj + b_cj))]
             - [A_j log(A_j / (A_j + B_j)) + B_j log(B_j / (A_j + B_j))] >= 0,

``A = sum_c a_c``, ``B = sum_c b_c``; the optimal support is the top-``k`` of
``gain`` (``theta_cj = a_cj / (a_cj + b_cj)`` there, the pooled
``A_j / (A_j + B_j)`` elsewhere). Written as a gain it cannot favour all-zero
features (their gain is exactly zero).

Example::

    >>> import jax.numpy as jnp
    >>> counts = jnp.asarray([[9.0, 5.0, 0.0], [1.0, 5.0, 0.0]])
    >>> theta, mask, objective = fit_bernoulli(counts, jnp.asarray([10.0, 10.0]), 1, 1.0)
    >>> mask.tolist()
    [True, False, False]
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxknock.naive_bayes._math import class_sum, xlogy
from jaxknock.naive_bayes.topk import top_k, top_k_mask

__all__ = ["bernoulli_parts", "fit_bernoulli"]


def bernoulli_parts(counts, n_samples, alpha):
    """Pseudo-counts ``a`` (ones) and ``b`` (zeros), pooled log-likelihoods and per-feature gains."""
    a = counts + alpha  # pseudo-counts of ones
    b = n_samples[:, None] - counts + alpha  # pseudo-counts of zeros
    A, B = class_sum(a), class_sum(b)

    def ll(x, y):  # max_t x log t + y log(1 - t)
        t = x + y
        return xlogy(x, x) + xlogy(y, y) - xlogy(t, t)

    pooled = ll(A, B)
    gain = class_sum(ll(a, b)) - pooled
    return a, b, pooled, gain


def fit_bernoulli(counts, n_samples, k, alpha):
    """Exact sparse Bernoulli naive Bayes: ``(theta, support mask, log-likelihood)``."""
    a, b, pooled, gain = bernoulli_parts(counts, n_samples, alpha)
    top = top_k(gain, k)
    mask = top_k_mask(top)
    A, B = class_sum(a), class_sum(b)
    theta = jnp.where(mask, a / (a + b), A / (A + B))
    objective = jnp.sum(xlogy(a, theta) + xlogy(b, 1 - theta))
    return theta, mask, objective
