"""The homotopy (LARS-lasso) event arithmetic shared by the path engines.

Used by the working-set engine's kinks (:mod:`jaxknock.l1._ws_homotopy`) and the
stability selection lockstep (:mod:`jaxknock._stability_path`), which follow the
same exact piecewise-linear lasso path on different data layouts.
"""

from __future__ import annotations

import jax.numpy as jnp


def entry_times(g, w, lam, ban_j, ban_s):
    r"""Step ``t`` at which an inactive correlation ``g - t w`` meets ``+-(lam - t)`` (``inf``: never).

    With ``t1`` it rises to ``lam - t`` (entry with sign +1, needs ``w < 1``); with
    ``t2`` it falls to ``-(lam - t)`` (sign -1, needs ``w > -1``); the earlier one is
    returned. The feature dropped at the previous kink (index ``ban_j``, its sign
    ``ban_s``; ``-1`` / ``0`` for none) sits at ``g = ban_s lam``: its re-entry with
    the same sign (``t = 0`` up to rounding) is barred, its entry with the opposite
    sign is not (a correlation can cross from ``s lam`` to ``-s lam`` before the
    next event). ``g``, ``w`` are ``(..., m)``; ``lam``, ``ban_j``, ``ban_s``
    broadcast against them (scalars, or ``(..., 1)``).
    """
    inf = jnp.asarray(jnp.inf, g.dtype)
    up, lo = 1 - w, 1 + w
    was = jnp.arange(g.shape[-1]) == ban_j
    t1 = jnp.where(up > 0, jnp.maximum(lam - g, 0) / jnp.where(up > 0, up, 1), inf)
    t2 = jnp.where(lo > 0, jnp.maximum(lam + g, 0) / jnp.where(lo > 0, lo, 1), inf)
    t1 = jnp.where(was & (ban_s > 0), inf, t1)
    t2 = jnp.where(was & (ban_s < 0), inf, t2)
    return jnp.minimum(t1, t2)
