r"""Multiple-knockoff and group-knockoff statistics and filters.

**Multiple simultaneous knockoffs** (Gimenez & Zou 2019). With ``m``
knockoff copies ``X~1..X~m`` (:func:`jaxknock.sample_knockoffs` with
``num_knockoffs=m``) a swap-equivariant importance score gives, per feature
``j``, ``m + 1`` scores :math:`Z_j^0` (original), :math:`Z_j^1..Z_j^m`
(knockoffs), e.g. ``jaxknock.lcd(..., num_knockoffs=m).value`` of shape
``(m + 1, p)``. Then

.. math::
    \kappa_j = \arg\max_{0 \le k \le m} Z_j^k, \qquad
    \tau_j = Z_j^{(0)} - \mathrm{median}\big(Z_j^{(1)}, \dots, Z_j^{(m)}\big)

(:math:`Z^{(0)} \ge Z^{(1)} \ge \dots` the order statistics: the largest
score minus the median of the other ``m``, as Knockoffs.jl's
``MK_statistics``), and the multi-knockoff(+) threshold

.. math::
    T = \min\Big\{t \in \{\tau_j\},\ t > 0 :
    \frac{\tfrac1m\big(\mathbb 1[\text{plus}] + \#\{j : \kappa_j \ne 0,\ \tau_j \ge t\}\big)}
    {\max(1, \#\{j : \kappa_j = 0,\ \tau_j \ge t\})} \le q\Big\}

selects ``{j : kappa_j = 0, tau_j >= T}`` with FDR <= q. Under the null a
feature's ``kappa_j`` is uniform on ``{0..m}`` given ``tau`` (the copies are
exchangeable), hence the ``1/m`` factor. For ``m = 1`` with ``W = Z^0 - Z^1``
this is exactly knockoff(+) on ``W`` (``kappa = 0`` iff ``W > 0``,
``tau = |W|``).

Ties: ``kappa_j = 0`` only when the original's score is strictly larger than
every knockoff's; a tie at the top counts as a knockoff win (conservative,
keeps the null symmetry argument valid for discrete scores such as lasso
zeros, where ``tau_j = 0`` anyway).

**Group knockoffs** (Dai & Barber 2016). With group knockoffs
(:func:`jaxknock.group_s_matrix`) swapping a whole group exchanges the
group's columns with their knockoffs, so any statistic that is a sum of
per-feature flip-sign statistics over the group is a flip-sign group
statistic: :func:`group_statistics` gives
``W_g = sum_{j in g} W_j`` (for the lasso coefficient difference
``sum_{j in g} |beta_j| - |beta~_j|``), or for multiple knockoffs the
per-copy group scores ``Z_g^k = sum_{j in g} Z_j^k``. The group knockoff+
filter (:func:`group_knockoff_select`) is the knockoff+ filter on the ``G``
group statistics and controls the group-level FDR.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks, _containers
from jaxknock import filter as _filter
from jaxknock.svector.group import Groups, group_index

__all__ = [
    "multi_knockoff_statistics",
    "multi_knockoff_threshold",
    "multi_knockoff_select",
    "group_statistics",
    "group_knockoff_select",
    "expand_groups",
]


def _check_scores(Z):
    """Scores ``(..., m + 1, p)`` without NaN. ``+-inf`` are scores (a ``-log`` p-value of 0), as a ``W_j = +-inf``
    is for :func:`jaxknock.knockoff_select`: they were refused while the ``m = 1`` equivalent ``W`` ran."""
    Z = _checks.as_float_array(Z, "Z")
    if Z.ndim < 2 or Z.shape[-2] < 2 or Z.shape[-1] < 1:
        raise ValueError(
            f"Z must have shape (..., m + 1, p): the scores of the originals (row 0) and m >= 1 knockoff "
            f"copies, got shape {tuple(Z.shape)}"
        )
    return _checks.check_statistics(Z, "Z")


def _check_tau(tau):
    """A concrete ``tau`` is defined: NaN only from ``inf - inf`` (the top score and the median of the others
    both infinite, e.g. an original and its only knockoff both ``+inf``), which orders nothing."""
    if _checks.is_concrete(tau) and np.isnan(np.asarray(tau)).any():
        bad = tuple(int(i) for i in np.argwhere(np.isnan(np.asarray(tau)))[0])
        raise ValueError(
            f"Z gives feature {bad} an undefined tau (inf - inf): its largest score and the median of the "
            "other copies' scores are both infinite, so the scores do not say which copy wins"
        )


def multi_knockoff_statistics(Z):
    r"""Multi-knockoff statistics ``(kappa, tau)`` of Gimenez & Zou (2019).

    ``kappa_j`` is the index (0 = original) of the largest of the ``m + 1``
    scores of feature ``j`` (0 only when the original is strictly largest),
    ``tau_j`` the largest score minus the median of the other ``m``
    (module docstring).

    Args:
        Z: ``(..., m + 1, p)`` scores, row 0 the originals; ``+-inf`` allowed (``tau_j = +inf`` when one copy's
            score is infinite above the median of the others), NaN and an undefined ``inf - inf`` raise.

    Returns:
        ``(kappa, tau)``: ``(..., p)`` int32 and float arrays.

    Example:
        >>> Z = jnp.array([[5.0, 1.0, 0.0], [1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])
        >>> kappa, tau = multi_knockoff_statistics(Z)
        >>> kappa.tolist(), tau.tolist()
        ([0, 1, 1], [3.5, 2.5, 0.0])
    """
    kappa, tau = _mk_statistics(_check_scores(Z))
    _check_tau(tau)
    return kappa, tau


@jax.jit
def _mk_statistics(Z):
    z0 = Z[..., 0, :]
    zk = Z[..., 1:, :]
    best_k = jnp.max(zk, axis=-2)
    kappa = jnp.where(z0 > best_k, 0, 1 + jnp.argmax(zk, axis=-2)).astype(jnp.int32)
    srt = jnp.sort(Z, axis=-2)[..., ::-1, :]  # descending
    tau = srt[..., 0, :] - jnp.median(srt[..., 1:, :], axis=-2)
    return kappa, tau


def multi_knockoff_threshold(kappa, tau, fdr, *, num_knockoffs: int, plus: bool = True):
    r"""Multi-knockoff(+) threshold ``T`` (module docstring; ``+inf`` if none; NaN if ``tau`` holds a NaN).

    Exact in ``O(p log p)`` (sorts and binary searches), jittable, batched
    over leading axes.

    Args:
        kappa: ``(..., p)`` integer winners in ``0..m`` (0 = original; a traced entry outside: NaN).
        tau: ``(..., p)`` magnitudes.
        fdr: target level ``q`` in ``(0, 1)``.
        num_knockoffs: ``m >= 1``.
        plus: the ``1/m`` offset (needed for FDR control).

    Example:
        >>> kappa = jnp.array([0, 0, 0, 0, 1])
        >>> tau = jnp.array([5.0, 4.0, 3.0, 2.0, 1.0])
        >>> float(multi_knockoff_threshold(kappa, tau, 0.2, num_knockoffs=2))
        2.0
    """
    m = _checks.check_num_knockoffs(num_knockoffs)
    _checks.check_fdr(fdr)
    tau = _checks.as_float_array(tau, "tau")
    kappa = jnp.asarray(kappa)
    if kappa.shape != tau.shape or tau.ndim < 1:
        raise ValueError(f"kappa and tau must have the same shape (..., p), got {kappa.shape} and {tau.shape}")
    if not jnp.issubdtype(kappa.dtype, jnp.integer):
        raise TypeError(f"kappa must be an integer array (copy indices), got dtype {kappa.dtype}")
    if _checks.is_concrete(kappa) and kappa.size:  # on the host: jnp.min of a constant is traced under jit
        lo, hi = int(np.min(np.asarray(kappa))), int(np.max(np.asarray(kappa)))
        if lo < 0 or hi > m:
            raise ValueError(
                f"kappa must hold copy indices in 0..{m} (num_knockoffs = {m}), got values in [{lo}, {hi}]"
            )  # traced: a NaN threshold for the row (_mk_threshold)
    level = _checks.call_scalar(fdr, tau.dtype)
    return _mk_threshold(kappa, tau, level, m=m, plus=_checks.static_flag(plus, "plus"))[0]


@functools.partial(jax.jit, static_argnames=("m", "plus"))
def _mk_threshold(kappa, tau, fdr, *, m, plus):
    """``(T, found)``: the thresholds and whether some ``t`` qualified (``T = +inf`` either way when none did:
    ``tau >= T`` alone would select a ``tau_j = +inf`` where no threshold qualifies, as in knockoff_select)."""

    def one(k, t):
        p = t.shape[-1]
        orig = jnp.sort(jnp.where(k == 0, t, -jnp.inf))
        knock = jnp.sort(jnp.where(k != 0, t, -jnp.inf))
        n0 = p - jnp.searchsorted(orig, t, side="left")  # #{kappa = 0, tau >= t}
        n1 = p - jnp.searchsorted(knock, t, side="left")  # #{kappa != 0, tau >= t}
        # one division by the integer m * n0: XLA turns the division by the constant m into a product with
        # the rounded 1/m, which lost exact boundary ties (m = 5, 2 knockoff and 6 original wins, q = 0.1)
        ratio = (float(plus) + n1) / (m * jnp.maximum(n0, 1))
        ok = (ratio <= fdr) & (t > 0)
        # a NaN magnitude (a failed statistic, unseen under jit), a traced level outside (0, 1) or a
        # traced copy index outside 0..m: NaN threshold, nothing selected
        bad = jnp.any(jnp.isnan(t)) | ~((fdr > 0) & (fdr < 1))  # written so that a NaN level is bad too
        bad = bad | jnp.any((k < 0) | (k > m))
        return jnp.where(bad, jnp.nan, jnp.min(jnp.where(ok, t, jnp.inf))), jnp.any(ok) & ~bad

    flat_k = kappa.reshape(-1, kappa.shape[-1])
    flat_t = tau.reshape(-1, tau.shape[-1])
    T, found = jax.vmap(one)(flat_k, flat_t)
    return T.reshape(tau.shape[:-1]), found.reshape(tau.shape[:-1])


def multi_knockoff_select(Z, fdr, *, plus: bool = True):
    """Multi-knockoff(+) selection from the scores ``Z`` of shape ``(..., m + 1, p)``.

    Scores may be ``+-inf`` (as ``W`` in :func:`jaxknock.knockoff_select`); NaN, or an undefined
    ``tau = inf - inf`` (see :func:`multi_knockoff_statistics`), raises eagerly and selects nothing
    under ``jit``. Nothing is selected where no threshold qualifies, not even a ``tau_j = +inf``.

    Returns:
        ``(..., p)`` boolean mask ``kappa_j = 0 and tau_j >= T``.

    Example:
        >>> Z = jnp.array([[5.0, 4.0, 3.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
        >>> multi_knockoff_select(Z, 0.2).tolist()
        [True, True, True, True, False]
    """
    Z = _check_scores(Z)
    m = Z.shape[-2] - 1
    _checks.check_fdr(fdr)
    kappa, tau = _mk_statistics(Z)
    _check_tau(tau)
    level = _checks.call_scalar(fdr, tau.dtype)
    T, found = _mk_threshold(kappa, tau, level, m=m, plus=_checks.static_flag(plus, "plus"))
    return (kappa == 0) & (tau >= T[..., None]) & found[..., None]


def group_statistics(W, groups):
    r"""Group statistics: ``W_g = sum_{j in g} W_j`` over the last axis.

    ``W`` is a per-feature flip-sign statistic ``(..., p)`` (e.g. the lasso
    coefficient difference ``|beta_j| - |beta~_j|``, so that
    ``W_g = sum_{j in g} |beta_j| - |beta~_j|``), or multi-knockoff scores
    ``(..., m + 1, p)`` (then the per-copy group scores). Swapping a group with
    its knockoffs flips (permutes) exactly that group's statistic.

    Args:
        W: ``(..., p)`` statistics or scores.
        groups: ``(p,)`` group labels (integers or names) or a :class:`~jaxknock.svector.group.Groups`.

    Returns:
        ``(..., G)``, groups in the order of their sorted labels.

    Example:
        >>> group_statistics(jnp.array([1.0, -2.0, 3.0]), [7, 7, 1]).tolist()
        [3.0, -1.0]
    """
    W = _checks.as_float_array(W, "W")
    if W.ndim < 1:  # W.shape[-1] was an IndexError ("tuple index out of range")
        raise ValueError(f"W must have shape (..., p): one statistic per feature, got a scalar (shape {W.shape})")
    g = group_index(groups, W.shape[-1])
    return _segment_sum(W, jnp.asarray(g.group_of), G=g.num_groups)


@functools.partial(jax.jit, static_argnames=("G",))
def _segment_sum(W, group_of, *, G):
    out = jax.ops.segment_sum(jnp.moveaxis(W, -1, 0), group_of, num_segments=G)
    return jnp.moveaxis(out, 0, -1)


def group_knockoff_select(W_group, fdr, *, plus: bool = True):
    """Group knockoff(+) filter: groups with ``W_g >= T`` (knockoff(+) threshold on the group statistics).

    Controls the group-level FDR (expected fraction of selected groups that
    are null) at ``fdr`` with ``plus=True`` (Dai & Barber 2016).

    Returns:
        ``(..., G)`` boolean mask over groups.

    Example:
        >>> group_knockoff_select(jnp.array([5.0, 4.0, 3.0, 2.0, -1.0]), 0.5).tolist()
        [True, True, True, True, False]
    """
    return _filter.knockoff_select(W_group, fdr, plus=plus)


def expand_groups(group_mask, groups):
    """A group-level mask ``(..., G)`` as a feature-level mask ``(..., p)``.

    ``group_mask`` is boolean, or 0/1 integers (returned as booleans: an integer result used as
    ``X[:, mask]`` would index the columns ``0`` and ``1`` instead of selecting). Other values raise
    (concrete), or count as ``True`` where non-zero (traced).

    Example:
        >>> expand_groups(jnp.array([True, False]), [7, 7, 1]).tolist()
        [False, False, True]
    """
    g = groups if isinstance(groups, Groups) else group_index(groups)
    group_mask = _as_mask(group_mask, "group_mask")
    if group_mask.ndim < 1:  # group_mask.shape[-1] was an IndexError ("tuple index out of range")
        raise ValueError(f"group_mask must have shape (..., G): one entry per group, got shape {group_mask.shape}")
    if group_mask.shape[-1] != g.num_groups:
        raise ValueError(f"group_mask has {group_mask.shape[-1]} entries but there are {g.num_groups} groups")
    return group_mask[..., np.asarray(g.group_of)]


def _as_mask(mask, name: str):
    """A boolean JAX array from a boolean or 0/1 integer ``mask`` (a float, text or other integer raises)."""
    mask = _containers.host_numeric(mask, name)  # masked arrays, big-endian integers: JAX's errors named nothing
    dtype = np.dtype(mask.dtype) if hasattr(mask, "dtype") else np.asarray(mask).dtype
    if dtype.kind not in "biu":  # a float mask came back as floats, text failed in JAX's staging naming nothing
        raise TypeError(f"{name} must be a boolean mask (or 0/1 integers), got dtype {dtype}")
    mask = jnp.asarray(mask)
    if dtype.kind != "b":
        if _checks.is_concrete(mask) and mask.size and not np.isin(np.asarray(mask), (0, 1)).all():
            raise ValueError(f"{name} must be a boolean mask (or 0/1 integers), got values other than 0 and 1")
        mask = mask != 0
    return mask
