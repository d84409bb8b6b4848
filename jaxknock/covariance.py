"""Covariance estimation: empirical, Ledoit-Wolf, correlation, factor models.

A factor model is ``Sigma = diag(d) + U U^T`` with ``d > 0`` of shape ``(p,)``
and ``U`` of shape ``(p, k)``, ``k << p``. Everything on a
:class:`FactorModel` costs ``O(p k^2)`` time and ``O(p k)`` memory; no
``p x p`` array is formed except by :meth:`FactorModel.dense`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

HIGHEST = lax.Precision.HIGHEST


class FactorModel(NamedTuple):
    """``Sigma = diag(d) + U U^T`` as a pytree (vmaps over a leading batch axis).

    Attributes:
        d: ``(p,)`` positive diagonal.
        U: ``(p, k)`` loadings.
    """

    d: jax.Array
    U: jax.Array

    @property
    def p(self) -> int:
        return self.U.shape[-2]

    @property
    def rank(self) -> int:
        return self.U.shape[-1]

    def dense(self) -> jax.Array:
        """The ``p x p`` matrix ``diag(d) + U U^T`` (for small p / testing)."""
        return jnp.diag(self.d) + jnp.matmul(self.U, self.U.T, precision=HIGHEST)

    def diagonal(self) -> jax.Array:
        """``diag(Sigma) = d + rowsum(U**2)`` in O(p k)."""
        return self.d + jnp.sum(self.U**2, axis=-1)

    def matvec(self, v: jax.Array) -> jax.Array:
        """``Sigma @ v`` for ``v`` of shape ``(p,)`` or ``(p, m)``, in O(p k m)."""
        dv = self.d * v if v.ndim == 1 else self.d[:, None] * v
        return dv + jnp.matmul(self.U, jnp.matmul(self.U.T, v, precision=HIGHEST), precision=HIGHEST)

    def _capacitance_cholesky(self) -> jax.Array:
        """Cholesky factor of ``I_k + U^T D^{-1} U`` (k x k)."""
        Ud = self.U / self.d[:, None]
        cap = jnp.eye(self.rank, dtype=self.U.dtype) + jnp.matmul(self.U.T, Ud, precision=HIGHEST)
        return jnp.linalg.cholesky(cap)

    def solve(self, v: jax.Array) -> jax.Array:
        """``Sigma^{-1} v`` by the Woodbury identity, O(p k^2 + p k m).

        ``Sigma^{-1} = D^{-1} - D^{-1} U (I + U^T D^{-1} U)^{-1} U^T D^{-1}``.
        """
        Lc = self._capacitance_cholesky()
        dinv = 1.0 / self.d
        Dv = dinv * v if v.ndim == 1 else dinv[:, None] * v
        t = jnp.matmul(self.U.T, Dv, precision=HIGHEST)
        t = jax.scipy.linalg.cho_solve((Lc, True), t)
        corr = jnp.matmul(self.U, t, precision=HIGHEST)
        corr = dinv * corr if v.ndim == 1 else dinv[:, None] * corr
        return Dv - corr

    def logdet(self) -> jax.Array:
        """``log det Sigma = sum log d + log det(I + U^T D^{-1} U)`` (determinant lemma)."""
        Lc = self._capacitance_cholesky()
        return jnp.sum(jnp.log(self.d)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(Lc)))
