r"""Selection thresholds: the knockoff filter, BH / BY, and multi-replicate aggregation.

All functions are pure ``jax.numpy`` (sort + counts), so they ``jit``; inputs
are checked eagerly when concrete. Statistics ``W`` have shape ``(..., p)``
(leading axes are independent problems) and selections are boolean masks of
the same shape; the aggregators take ``W`` of shape ``(R, p)`` (``R``
knockoff replicates of one data set) and return a ``(p,)`` mask.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks

__all__ = [
    "knockoff_threshold",
    "knockoff_select",
    "knockoff_evalues",
    "benjamini_hochberg",
    "benjamini_yekutieli",
    "ebh",
    "aggregate_ebh",
    "aggregate_frequency",
    "knockoff_min_fdr",
    "min_selecting_fdr",
]


# ----------------------------------------------------------------------------
# Knockoff filter
# ----------------------------------------------------------------------------


def knockoff_threshold(W, fdr, *, plus: bool = True):
    r"""Knockoff (``plus=False``) or knockoff+ (``plus=True``) threshold.

    .. math::

        T = \min\Big\{t > 0 :
        \frac{\mathbb{1}[\text{plus}] + \#\{j : W_j \le -t\}}{\max(1, \#\{j : W_j \ge t\})}
        \le q\Big\},

    the minimum taken over :math:`t \in \{|W_j|\} \setminus \{0\}` (the ratio
    only changes there); ``+inf`` when no ``t`` qualifies. Knockoff+ controls
    the FDR, knockoff the modified FDR (Barber & Candes 2015). Exact, in
    ``O(p log p)`` (one sort and binary searches), jittable.

    Args:
        W: ``(..., p)`` statistics.
        fdr: target level ``q`` in ``(0, 1)``.
        plus: use the knockoff+ offset of 1.

    Returns:
        ``(...)`` thresholds; NaN for a row holding a NaN statistic (eager
        calls raise on it; under ``jit`` it cannot be seen before the call, and
        ``W >= NaN`` then selects nothing).

    Example:
        >>> W = jnp.array([5.0, 4.0, 3.0, 2.0, -1.0])
        >>> float(knockoff_threshold(W, 0.5))
        1.0
    """
    _checks.check_fdr(fdr)
    W = _checks.check_statistics(W)
    return _threshold(W, _checks.call_scalar(fdr, W.dtype), plus=_checks.static_flag(plus, "plus"))


def _valid_level(fdr):
    """A target level inside ``(0, 1)`` (traced levels are checked here, concrete ones raise before)."""
    return (fdr > 0) & (fdr < 1)


def fdp_estimates(w, plus):
    """Candidate thresholds ``t = |w_j|`` and the knockoff(+) FDP estimate at each (one sort, binary searches).

    ``(plus + #{w_j <= -t}) / max(1, #{w_j >= t})`` for one row ``w``; the thresholds, the smallest
    selecting level and :class:`~jaxknock.Selection`'s explanation all read it from here.
    """
    ws = jnp.sort(w)
    t = jnp.abs(w)
    n_pos = w.shape[-1] - jnp.searchsorted(ws, t, side="left")  # #{W >= t}
    n_neg = jnp.searchsorted(ws, -t, side="right")  # #{W <= -t}
    return t, (float(plus) + n_neg) / jnp.maximum(n_pos, 1)


@functools.partial(jax.jit, static_argnames=("plus",))
def _threshold(W, fdr, *, plus):
    return _threshold_found(W, fdr, plus=plus)[0]


@functools.partial(jax.jit, static_argnames=("plus",))
def _threshold_found(W, fdr, *, plus):
    """``(T, found)``: the thresholds and whether some ``t`` qualified (``T = +inf`` either way when none did).

    Selections are ``(W >= T) & found``: ``W >= +inf`` alone would select every ``W_j = +inf`` (e.g. a
    ``-log`` p-value of 0) in a row where no threshold qualifies.
    """

    def one(w):
        t, ratio = fdp_estimates(w, plus)
        ok = (ratio <= fdr) & (t > 0)
        # a NaN statistic (a failed fit, unseen under jit) or a traced level outside (0, 1): NaN
        # threshold, so W >= T selects nothing
        bad = jnp.any(jnp.isnan(w)) | ~_valid_level(fdr)
        return jnp.where(bad, jnp.nan, jnp.min(jnp.where(ok, t, jnp.inf))), jnp.any(ok) & ~bad

    flat = W.reshape(-1, W.shape[-1])
    T, found = jax.vmap(one)(flat)
    return T.reshape(W.shape[:-1]), found.reshape(W.shape[:-1])


def knockoff_min_fdr(W, *, plus: bool = True):
    r"""Smallest target FDR at which the knockoff(+) filter selects anything.

    The filter at level :math:`q` selects a non-empty set exactly when some
    threshold :math:`t \in \{|W_j|\} \setminus \{0\}` has an estimated FDP
    at most :math:`q`, so the answer is

    .. math::

        q_{\min} = \min_{t} \frac{\mathbb{1}[\text{plus}] + \#\{j : W_j \le -t\}}
        {\max(1, \#\{j : W_j \ge t\})}

    (``+inf`` when every ``W_j = 0``). With ``plus=True`` and no negative
    statistics this is :math:`1 / \#\{j : W_j > 0\}`: knockoff+ at level
    ``q`` needs at least :math:`\lceil 1/q \rceil` positive statistics.

    Args:
        W: ``(..., p)`` statistics.
        plus: the knockoff+ offset of 1.

    Returns:
        ``(...)`` smallest levels; NaN for a row holding a NaN statistic (eager
        calls raise on it).

    Example:
        >>> float(knockoff_min_fdr(jnp.array([5.0, 4.0, 3.0, 2.0, -1.0])))
        0.25
        >>> float(knockoff_min_fdr(jnp.array([5.0, 4.0, 3.0, 2.0, -1.0]), plus=False))
        0.0
    """
    W = _checks.check_statistics(W)
    return _min_fdr(W, plus=_checks.static_flag(plus, "plus"))


@functools.partial(jax.jit, static_argnames=("plus",))
def _min_fdr(W, *, plus):
    def one(w):
        t, ratio = fdp_estimates(w, plus)
        # a NaN statistic (a failed fit, unseen under jit): NaN, not a level computed around it
        return jnp.where(jnp.any(jnp.isnan(w)), jnp.nan, jnp.min(jnp.where(t > 0, ratio, jnp.inf)))

    flat = W.reshape(-1, W.shape[-1])
    return jax.vmap(one)(flat).reshape(W.shape[:-1])


def selecting_grid(dtype):
    """The levels :func:`min_selecting_fdr` tries by default: 400 geometric levels in ``[1e-3, 0.999]``
    (neighbours ``(0.999 / 1e-3)^(1/399)``, about 1.7%, apart)."""
    return jnp.geomspace(1e-3, 0.999, 400, dtype=dtype)


def min_selecting_fdr(W, *, aggregate: str = "ebh", plus: bool = True, grid=None):
    r"""Smallest target FDR on ``grid`` at which an aggregated filter selects anything.

    For one replicate (``W`` of shape ``(p,)`` or ``(1, p)``) this is the exact
    :func:`knockoff_min_fdr`. For ``R > 1`` replicates the aggregated selection
    (:func:`aggregate_ebh` at ``alpha_kn = q / 2``, or
    :func:`aggregate_frequency`) is evaluated at every level of ``grid``
    (default: 400 levels geometric in ``[10^{-3}, 0.999]``) in one batched call,
    and the smallest selecting level is returned (``+inf`` if none does; NaN
    under ``jit`` when ``W`` holds a NaN statistic, on which eager calls raise).

    Example:
        >>> W = jnp.array([[5.0, 4.0, 3.0, 2.0, -1.0], [6.0, 1.0, 2.0, 3.0, -1.0]])
        >>> round(float(min_selecting_fdr(W)), 3) <= 0.6
        True
    """
    W = _checks.check_statistics(W)
    _checks.check_choice(aggregate, ("ebh", "frequency"), "aggregate")
    if W.ndim == 1:
        return knockoff_min_fdr(W, plus=plus)
    W = _checks.check_replicates(W)  # (R, p): a (1, R, p) batch is not R replicates flattened into one
    if W.shape[0] == 1:
        return knockoff_min_fdr(W[0], plus=plus)
    grid = selecting_grid(W.dtype) if grid is None else jnp.asarray(grid, W.dtype)

    def selects(q):
        if aggregate == "ebh":
            return jnp.any(_ebh_mask(W, q, q / 2, _checks.static_flag(plus, "plus")))
        return jnp.any(_frequency_mask(W, q, 0.5, _checks.static_flag(plus, "plus")))

    ok = jax.vmap(selects)(grid)
    return jnp.where(jnp.any(jnp.isnan(W)), jnp.nan, jnp.min(jnp.where(ok, grid, jnp.inf)))


def knockoff_select(W, fdr, *, plus: bool = True):
    """Selected features ``W_j >= T`` with ``T`` from :func:`knockoff_threshold`.

    Nothing is selected in a row where no threshold qualifies (``T = +inf``),
    not even a statistic ``W_j = +inf``.

    Returns:
        ``(..., p)`` boolean mask.

    Example:
        >>> knockoff_select(jnp.array([5.0, 4.0, 3.0, 2.0, -1.0]), 0.5).tolist()
        [True, True, True, True, False]
    """
    _checks.check_fdr(fdr)
    W = _checks.check_statistics(W)
    return _select(W, _checks.call_scalar(fdr, W.dtype), plus=_checks.static_flag(plus, "plus"))


@functools.partial(jax.jit, static_argnames=("plus",))
def _select(W, fdr, *, plus):
    T, found = _threshold_found(W, fdr, plus=plus)
    return (W >= T[..., None]) & found[..., None]


def knockoff_evalues(W, fdr, *, plus: bool = True):
    r"""Knockoff e-values (Ren & Barber 2022).

    .. math::

        e_j = \frac{p\,\mathbb{1}\{W_j \ge T\}}{1 + \#\{k : W_k \le -T\}},

    with ``T`` the knockoff(+) threshold at level ``fdr``. They are
    non-negative, average at most 1 over the nulls, and e-BH at level ``fdr``
    applied to them reproduces the knockoff+ selection.

    Returns:
        ``(..., p)`` e-values in ``W``'s floating dtype (all zero when ``T = inf``).

    Example:
        >>> knockoff_evalues(jnp.array([5.0, 4.0, 3.0, 2.0, -1.0]), 0.5).tolist()
        [2.5, 2.5, 2.5, 2.5, 0.0]
    """
    _checks.check_fdr(fdr)
    W = _checks.check_statistics(W)
    return _evalues(W, _checks.call_scalar(fdr, W.dtype), plus=_checks.static_flag(plus, "plus"))


@functools.partial(jax.jit, static_argnames=("plus",))
def _evalues(W, fdr, *, plus):
    p = W.shape[-1]
    T, found = _threshold_found(W, fdr, plus=plus)
    T, found = T[..., None], found[..., None]
    n_neg = jnp.sum(W <= -T, axis=-1, keepdims=True)
    # in W's dtype: the integer count over 1.0 + count was the default float (float64 for a float32 W, x64 on)
    e = jnp.where((W >= T) & found, jnp.asarray(p, W.dtype), 0) / (1 + n_neg).astype(W.dtype)
    return jnp.where(jnp.isnan(T), jnp.nan, e)  # NaN threshold: NaN e-values


# ----------------------------------------------------------------------------
# p-value and e-value procedures
# ----------------------------------------------------------------------------


def _check_pvalues(pvalues):
    pv = _checks.check_statistics(pvalues, "pvalues")
    if _checks.is_concrete(pv):
        a = np.asarray(pv)
        if np.any((a < 0) | (a > 1)):
            raise ValueError(f"pvalues must lie in [0, 1], got values in [{a.min():.3g}, {a.max():.3g}]")
    return pv


def benjamini_hochberg(pvalues, fdr):
    r"""Benjamini-Hochberg step-up procedure.

    Rejects :math:`H_{(1)}, \dots, H_{(k)}` with
    :math:`k = \max\{k : p_{(k)} \le k q / m\}`. Controls the FDR at
    :math:`q m_0 / m` for independent or PRDS p-values. Same rejections as
    ``scipy.stats.false_discovery_control(p, method="bh") <= q``.

    Args:
        pvalues: ``(..., m)`` p-values in ``[0, 1]``.
        fdr: level ``q`` in ``(0, 1)``.

    Returns:
        ``(..., m)`` boolean mask of rejections. Eager calls raise on a NaN or a
        value outside ``[0, 1]``; under ``jit`` such a row rejects nothing.

    Example:
        >>> benjamini_hochberg(jnp.array([0.001, 0.03, 0.04, 0.5]), 0.1).tolist()
        [True, True, True, False]
    """
    _checks.check_fdr(fdr)
    pv = _check_pvalues(pvalues)
    return _step_up(pv, _checks.call_scalar(fdr, pv.dtype), dependence=False)


def benjamini_yekutieli(pvalues, fdr):
    r"""Benjamini-Yekutieli procedure: BH at level :math:`q / c(m)`.

    :math:`c(m) = \sum_{j \le m} 1/j`, summed in float64 on the host as scipy sums it and
    rounded once to the p-values' dtype (in float32 a device sum drifted above every boundary).

    Controls the FDR under arbitrary dependence. Same rejections as
    ``scipy.stats.false_discovery_control(p, method="by") <= q`` (in float32,
    on the rounded p-values, up to a tie at the boundary).

    Example:
        >>> benjamini_yekutieli(jnp.array([0.001, 0.03, 0.04, 0.5]), 0.1).tolist()
        [True, False, False, False]
    """
    _checks.check_fdr(fdr)
    pv = _check_pvalues(pvalues)
    return _step_up(pv, _checks.call_scalar(fdr, pv.dtype), dependence=True)


@functools.partial(jax.jit, static_argnames=("dependence",))
def _step_up(pv, fdr, *, dependence):
    m = pv.shape[-1]
    k = jnp.arange(1, m + 1, dtype=pv.dtype)
    ps = jnp.sort(pv, axis=-1)
    # adjusted p-values p_(k) m / k (times c(m)) compared with q, in scipy's order of operations: the
    # rearranged p_(k) <= k q / m rounds k q / m and flips exact boundary ties (p = 0.9, k = m, q = 0.9)
    adjusted = ps * (m / k)
    if dependence:
        # c(m) in float64 on the host (m is static), rounded once: summed in float32 it came out ~1e-6 high at
        # m = 1000, above every boundary p-value, and BY rejected 0 of 1000 for float64's 998
        adjusted = adjusted * np.asarray(_harmonic(m), pv.dtype)
    ok = adjusted <= fdr
    kmax = jnp.max(jnp.where(ok, jnp.arange(1, m + 1), 0), axis=-1, keepdims=True)
    cutoff = jnp.take_along_axis(ps, jnp.maximum(kmax - 1, 0), axis=-1)
    # under jit a NaN or a value outside [0, 1], or a level outside (0, 1), cannot raise: that row rejects nothing
    valid = jnp.all((pv >= 0) & (pv <= 1), axis=-1, keepdims=True) & _valid_level(fdr)
    return (pv <= cutoff) & (kmax > 0) & valid


def _harmonic(m: int) -> float:
    r""":math:`c(m) = \sum_{j \le m} 1/j` in float64, as scipy sums it."""
    return float(np.sum(1.0 / np.arange(1, m + 1)))


def ebh(evalues, fdr):
    r"""e-BH procedure (Wang & Ramdas 2022).

    Rejects the :math:`\hat k` largest e-values,
    :math:`\hat k = \max\{k : e_{(k)} \ge m / (k q)\}` with
    :math:`e_{(1)} \ge e_{(2)} \ge \dots`. Controls the FDR at ``q`` under
    arbitrary dependence.

    Args:
        evalues: ``(..., m)`` non-negative e-values.
        fdr: level ``q`` in ``(0, 1)``.

    Returns:
        ``(..., m)`` boolean mask. Eager calls raise on a NaN or negative
        e-value; under ``jit`` such a row rejects nothing.

    Example:
        >>> ebh(jnp.array([40.0, 20.0, 1.0, 0.0]), 0.1).tolist()
        [True, True, False, False]
    """
    _checks.check_fdr(fdr)
    e = _checks.check_statistics(evalues, "evalues")
    if _checks.is_concrete(e) and np.any(np.asarray(e) < 0):
        raise ValueError("evalues must be non-negative")
    return _ebh(e, _checks.call_scalar(fdr, e.dtype))


@jax.jit
def _ebh(e, fdr):
    m = e.shape[-1]
    k = jnp.arange(1, m + 1, dtype=e.dtype)
    es = -jnp.sort(-e, axis=-1)  # decreasing
    # e_(k) >= m / (k q), with a few ulps of slack so that exact ties (e.g. the
    # knockoff e-values at the knockoff+ boundary) are not lost to rounding.
    ok = es * k * fdr >= m * (1.0 - 8 * jnp.finfo(e.dtype).eps)
    kmax = jnp.max(jnp.where(ok, jnp.arange(1, m + 1), 0), axis=-1, keepdims=True)
    cutoff = jnp.take_along_axis(es, jnp.maximum(kmax - 1, 0), axis=-1)
    # under jit a NaN or negative e-value, or a level outside (0, 1), cannot raise: that row rejects nothing
    valid = jnp.all(e >= 0, axis=-1, keepdims=True) & _valid_level(fdr)
    return (e >= cutoff) & (kmax > 0) & valid


# ----------------------------------------------------------------------------
# Aggregation across knockoff replicates
# ----------------------------------------------------------------------------


def aggregate_ebh(W, fdr, *, alpha_kn=None, plus: bool = True):
    r"""Derandomised knockoffs with e-values (Ren & Barber 2022).

    Per replicate ``r`` compute the knockoff e-values at level
    ``alpha_kn`` (:func:`knockoff_evalues`), average them,
    :math:`\bar e_j = \frac1R \sum_r e^{(r)}_j`, and run :func:`ebh` at level
    ``fdr``. Controls the FDR at ``fdr`` for any number of replicates.

    Args:
        W: ``(R, p)`` statistics, one row per knockoff replicate.
        fdr: target FDR in ``(0, 1)``.
        alpha_kn: level of the per-replicate knockoff threshold (default
            ``fdr / 2``, the recommendation of Ren & Barber).
        plus: knockoff+ threshold per replicate.

    Returns:
        ``(p,)`` boolean mask.

    Example:
        >>> W = jnp.array([[5.0, 4.0, 3.0, 2.0, -1.0], [6.0, 1.0, 2.0, 3.0, -1.0]])
        >>> aggregate_ebh(W, 0.8, alpha_kn=0.5).tolist()
        [True, True, True, True, False]
    """
    _checks.check_fdr(fdr)
    if alpha_kn is None:
        alpha_kn = _checks.traced_float(fdr) / 2 if _checks.is_concrete(fdr) else jnp.asarray(fdr) / 2
    _checks.check_fdr(alpha_kn, "alpha_kn")
    W = _checks.check_replicates(W)
    # the e-BH level in the e-values' dtype (W's), as ebh() takes it: a float32 level against float64 e-values
    # lost the exact boundary ties (p = 16, 10 at +5 and 6 at -5, fdr = 0.7 selected nothing)
    level = _checks.call_scalar(fdr, W.dtype)
    return _ebh_mask(W, level, _checks.call_scalar(alpha_kn, W.dtype), _checks.static_flag(plus, "plus"))


def aggregate_frequency(W, fdr, *, eta: float = 0.5, plus: bool = True):
    r"""Selection-frequency aggregation (derandomised knockoffs, Ren, Wei & Candes 2021).

    Runs the knockoff(+) filter at level ``fdr`` on each replicate and keeps
    features selected in at least a fraction ``eta`` of them:
    :math:`\Pi_j = \frac1R\sum_r \mathbb{1}\{W^{(r)}_j \ge T^{(r)}\} \ge \eta`.

    Ren, Wei & Candes prove PFER / k-FWER control for this aggregation with
    the Janson & Su base procedure; with the FDR-controlling base used here
    it stabilises the selection but has no formal FDR guarantee -- use
    :func:`aggregate_ebh` when FDR control is required.

    Args:
        W: ``(R, p)`` statistics.
        fdr: level of the per-replicate knockoff filter in ``(0, 1)``.
        eta: frequency threshold in ``(0, 1]`` (may be traced: outside it, nothing is selected).
        plus: knockoff+ threshold per replicate.

    Returns:
        ``(p,)`` boolean mask; under ``jit`` all ``False`` when a replicate
        holds a NaN statistic (eager calls raise).

    Example:
        >>> W = jnp.array([[5.0, 4.0, 3.0, 2.0, -1.0], [6.0, -4.0, 5.0, 4.0, 3.0]])
        >>> aggregate_frequency(W, 0.5, eta=1.0).tolist()
        [True, False, True, True, False]
    """
    _checks.check_fdr(fdr)
    eta = _check_eta(eta)
    W = _checks.check_replicates(W)
    return _frequency_mask(W, _checks.call_scalar(fdr, W.dtype), eta, _checks.static_flag(plus, "plus"))


def _check_eta(eta):
    """A frequency threshold in ``(0, 1]``: a real scalar, checked when concrete (traced ones pass)."""
    if not _checks.is_concrete(eta):
        return eta
    eta = _checks.real_setting(eta)
    if isinstance(eta, (bool, np.bool_)) or not isinstance(eta, (int, float, np.integer, np.floating)):
        raise TypeError(f"eta must be a real number in (0, 1], got {eta!r} ({type(eta).__name__})")
    if not (0 < eta <= 1):
        raise ValueError(f"eta must lie in (0, 1], got {eta}")
    return float(eta)


def _ebh_mask(W, fdr, alpha_kn, plus):
    """e-BH at ``fdr`` on the replicate-averaged knockoff e-values at ``alpha_kn`` (the core of aggregate_ebh)."""
    return _ebh(jnp.mean(_evalues(W, alpha_kn, plus=plus), axis=0), fdr)


def _frequency_mask(W, fdr, eta, plus):
    """Features selected by knockoff(+) at ``fdr`` in at least a fraction ``eta`` of the replicates."""
    T, found = _threshold_found(W, fdr, plus=plus)
    # a failed replicate (NaN threshold, unseen under jit) or a traced eta outside (0, 1] voids the
    # aggregate, as in aggregate_ebh
    valid = ~jnp.any(jnp.isnan(T)) & (eta > 0) & (eta <= 1)
    # the count against eta R, not the mean against eta: XLA's mean multiplies the sum by the rounded 1/R,
    # and a feature selected in all R = 41 replicates had a frequency below 1 (below 0.5 for 41 of R = 82).
    # eta R is rounded too (0.28 * 25 = 7.000000000000001): a relative 4 eps below it, the count meets
    # eta exactly where NumPy's count / R >= eta does (checked for every count, R <= 300 and 4000 etas)
    count = jnp.sum((W >= T[:, None]) & found[:, None], axis=0)
    dt = jnp.result_type(float)
    return (count >= jnp.asarray(eta, dt) * W.shape[0] * (1 - 4 * jnp.finfo(dt).eps)) & valid
