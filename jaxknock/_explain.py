"""Why the knockoff(+) filter selected nothing: :func:`explain_empty_selection` (``Selection.explanation``).

The threshold with the smallest FDP estimate, the counts of positive and negative statistics, and the
smallest target FDR that would have selected something (single and multiple knockoffs, one replicate or
an aggregate of several).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks, _selection
from jaxknock import filter as _filter
from jaxknock import multi as _multi

__all__ = ["explain_empty_selection"]


def explain_empty_selection(
    W, fdr, *, plus: bool = True, aggregate: str = "ebh", num_knockoffs: int = 1, unit: str = "features"
) -> str:
    """A one-paragraph reason why the knockoff(+) filter at level ``fdr`` selected nothing.

    Knockoff+ estimates the FDP of the set ``{W_j >= t}`` by
    ``(1 + #{W_j <= -t}) / #{W_j >= t}``, so at level ``q`` it can only select
    once at least ``ceil(1/q)`` statistics are positive, and only at a
    threshold ``t`` keeping at least ``ceil(1/q)`` of them. The message names
    the threshold with the smallest estimate: when it has no ``W_j <= -t`` the
    ``1 +`` binds (e.g. 8 strong signals and noise at ``q = 0.1``: the FDP
    estimate is at least ``1/8``); otherwise the statistics were too weak (too
    many negative ``W_j`` against the positive ones). With ``num_knockoffs = m > 1`` (``W`` the signed ``tau`` of
    :class:`Selection`) the multi-knockoff+ estimate is ``m`` times smaller,
    ``(1 + #{W_j <= -t}) / (m #{W_j >= t})``: ``ceil(1/(m q))`` positive
    statistics suffice. The smallest selecting level comes from
    :func:`~jaxknock.filter.min_selecting_fdr` (:func:`_multi_min_selecting_fdr` for ``m > 1``); for
    ``R > 1`` its grid level (levels 1.7% apart) is refined on 256 levels down to the grid level below it.
    ``unit`` names what ``W`` scores (``"groups"`` for group knockoffs).
    """
    W = np.atleast_2d(np.asarray(W))
    R = W.shape[0]
    m = _checks.check_num_knockoffs(num_knockoffs)
    aggregate = aggregate if m == 1 else "frequency"  # the multi-knockoff filter's only aggregation
    q = float(fdr)
    if m == 1:
        q_min = float(_filter.min_selecting_fdr(jnp.asarray(W), aggregate=aggregate, plus=plus))
    else:
        q_min = _multi_min_selecting_fdr(jnp.asarray(W), m, plus)
    if R > 1 and np.isfinite(q_min):
        # the aggregated levels come from a grid 1.7% apart: "the smallest target FDR that selects something is
        # 0.379" while 0.375 selected. A finer grid between the selecting level and the one below it
        # (every level on it is checked, so the answer still selects) puts the printed digits right.
        coarse = _filter.selecting_grid(jnp.asarray(W).dtype)
        fine = jnp.geomspace(q_min * coarse[0] / coarse[1], q_min, 256, dtype=coarse.dtype)
        if m == 1:
            q_fine = float(_filter.min_selecting_fdr(jnp.asarray(W), aggregate=aggregate, plus=plus, grid=fine))
        else:
            q_fine = _multi_min_selecting_fdr(jnp.asarray(W), m, plus, grid=fine)
        q_min = min(q_min, q_fine)
    n_pos = int(np.median((W > 0).sum(axis=1)))
    n_neg = int(np.median((W < 0).sum(axis=1)))
    level = q if R == 1 or aggregate == "frequency" else q / 2
    need = int(np.ceil(1.0 / (m * level) - 1e-12))
    where = "" if R == 1 else f" (median over {R} replicates)"
    per = (
        ""
        if R == 1
        else (
            f" in each replicate (e-BH runs knockoff+ at alpha_kn = q/2 = {level:.3g})"
            if aggregate == "ebh"
            else " in each replicate"
        )
    )
    name, cut, smallest = (
        ("knockoff+", f"ceil(1/{level:.3g})", "1/k")
        if m == 1
        else (f"multi-knockoff+ with {m} copies", f"ceil(1/({m} x {level:.3g}))", f"1/({m} k)")
    )
    t_best, k_best, neg_best = _best_thresholds(W, m, plus)
    if plus and n_pos < need:
        reason = (
            f"{name} at q = {q:.3g} needs at least {cut} = {need} {unit} with W_j > 0{per} "
            f"(a selection of k {unit} has an estimated FDP of at least {smallest}), but only {n_pos} statistics "
            f"are positive{where}"
        )
    elif plus and neg_best == 0:
        # the "+1" of knockoff+ binds, not the negatives: the best set has no negative W_j below -t at all
        reason = (
            f"{name} at q = {q:.3g} needs at least {cut} = {need} {unit} with W_j >= t{per} for some t "
            f"(the estimated FDP counts one negative statistic more than there are, so a selection of k "
            f"{unit} has an estimated FDP of at least {smallest}); the best threshold, t = {t_best:.3g}, keeps "
            f"{k_best} {unit} with no W_j <= -t{where} ({n_pos} statistics are positive, {n_neg} negative)"
        )
    else:
        reason = (
            f"the statistics were too weak at q = {q:.3g}: {n_pos} positive statistics are matched by {n_neg} "
            f"negative ones{where}; at the best threshold, t = {t_best:.3g}, {k_best} {unit} with W_j >= t "
            f"are matched by {neg_best} with W_j <= -t, so every threshold's estimated FDP exceeds the target"
        )
    if np.isfinite(q_min) and q_min < 1:
        tail = f"; the smallest target FDR that selects something is {q_min:.3g}"
    else:
        tail = "; no target FDR below 1 selects anything" + (
            " (all statistics are zero or negative)" if not (W > 0).any() else ""
        )
    return "nothing selected: " + reason + tail


def _best_thresholds(W, m, plus):
    """``(t, k, neg)`` of the threshold with the smallest knockoff(+) FDP estimate, median over replicates.

    For each row of ``W`` ``(R, u)``: over ``t`` in ``{|W_j| > 0}`` the estimate
    (:func:`jaxknock.filter.fdp_estimates`; the multi-knockoff one is it divided by ``m``, the same
    minimiser) is smallest at ``t`` (the smallest such ``t`` on ties: the largest set);
    ``k = #{W_j >= t}`` and ``neg = #{W_j <= -t}`` there. ``(inf, 0, 0)`` for a row without a
    non-zero statistic.
    """
    rows = []
    for row in np.asarray(W):
        w = jnp.asarray(row)  # the counts below compare in the dtype the thresholds come in (float32 without x64)
        t, est = (np.asarray(a) for a in _filter.fdp_estimates(w, plus))
        w = np.asarray(w)
        keep = np.isfinite(t) & (t > 0)
        if not keep.any():
            rows.append((np.inf, 0, 0))
            continue
        t, est = t[keep], est[keep]
        best = t[np.lexsort((t, est))[0]]  # the smallest estimate, then the smallest t
        rows.append((float(best), int(np.sum(w >= best)), int(np.sum(w <= -best))))
    t, k, neg = (np.median([r[c] for r in rows]) for c in range(3))
    return float(t), int(k), int(neg)


def _multi_min_selecting_fdr(W, m, plus, grid=None) -> float:
    r"""Smallest level at which the multi-knockoff(+) filter with ``m`` copies selects, from the signed ``tau``.

    On ``W`` ``(R, u)`` (``+tau`` where the original wins, ``-tau`` otherwise) the
    estimate at ``t`` is :math:`(1_{plus} + \#\{W_j \le -t\}) / (m\,\#\{W_j \ge t\})`,
    knockoff(+)'s divided by ``m``: one replicate gives
    :func:`~jaxknock.filter.knockoff_min_fdr` ``/ m`` exactly; for ``R > 1`` (units
    selected in at least half the replicates, as :func:`jaxknock._selection.select_multi`)
    the smallest selecting level of :func:`~jaxknock.filter.min_selecting_fdr`'s grid (or of ``grid``).
    """
    if W.shape[0] == 1:
        return float(_filter.knockoff_min_fdr(W[0], plus=plus)) / m
    kappa, tau = (W <= 0).astype(jnp.int32), jnp.abs(W)
    grid = _filter.selecting_grid(W.dtype) if grid is None else grid

    def selects(q):
        T = _multi.multi_knockoff_threshold(kappa, tau, q, num_knockoffs=m, plus=plus)
        return jnp.any(_selection.in_half_the_replicates((kappa == 0) & (tau >= T[:, None])))

    return float(jnp.min(jnp.where(jax.vmap(selects)(grid), grid, jnp.inf)))
