"""The selection stage of :func:`jaxknock.knockoff_filter`: statistics ``W`` -> selected features.

* :func:`select`: the knockoff(+) threshold of every replicate and the mask (one
  replicate), or the replicates aggregated by e-BH or selection frequency, after
  :func:`warn_if_uncertified` has said which stage, if any, did not certify its solve;
* :func:`select_multi`: the multi-knockoff (``num_knockoffs = m > 1``) selection
  from the ``(kappa, tau)`` statistics of :mod:`jaxknock.multi`.

Both time themselves into ``timings["selection"]``. :mod:`jaxknock.pipeline`
wraps their masks and thresholds in a :class:`~jaxknock.Selection` (whose
``explanation``, :func:`jaxknock.pipeline.explain_empty_selection`, says why a
selection is empty).
"""

from __future__ import annotations

import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import filter as _filter
from jaxknock import multi as _multi
from jaxknock._solution import failure_message

__all__ = ["select", "select_multi", "warn_if_uncertified"]


def warn_if_uncertified(s_sol, stat_sol) -> None:
    """A ``RuntimeWarning`` naming the stage whose solver returned a code other than ``successful``.

    The selection still controls the FDR (the knockoffs' s is feasible, and a
    statistic computed on the canonical column order keeps the flip-sign
    property whatever its solver's accuracy), but it may have less power than
    the tight solve the defaults promise, so a caller should know.
    """
    for stage, field, sol in (("S-vector", "s_solution", s_sol), ("statistics", "statistic_solution", stat_sol)):
        failure = None if sol is None else failure_message(f"knockoff_filter ({stage})", sol.result)
        if failure is not None:
            warnings.warn(
                f"{failure[0]}. The selection keeps its FDR control but may lose power; see Selection.{field}.",
                RuntimeWarning,
                stacklevel=3,
            )


def select(W, stat_sol, s_sol, timings, fdr, plus, num_replicates, aggregate):
    """``(mask (p,), thresholds (R,))`` of the statistics ``W`` ``(R, p)`` at level ``fdr``.

    Warns first if ``s_sol`` or ``stat_sol`` (``None`` for a closed-form
    statistic) is uncertified (:func:`warn_if_uncertified`). ``thresholds`` are
    the knockoff(+) thresholds of every replicate; the mask is ``W >= T`` for one
    replicate, else the replicates aggregated (``aggregate``: ``"ebh"`` or
    ``"frequency"``). Sets ``timings["selection"]``.
    """
    warn_if_uncertified(s_sol, stat_sol)
    t0 = time.perf_counter()
    thresholds = jax.vmap(lambda w: _filter.knockoff_threshold(w, fdr, plus=plus))(W)
    if num_replicates == 1:
        mask = np.asarray(W)[0] >= np.asarray(thresholds)[0]
    elif aggregate == "ebh":
        mask = _filter.aggregate_ebh(W, fdr, plus=plus)
    else:
        mask = _filter.aggregate_frequency(W, fdr, plus=plus)
    mask = np.asarray(mask)
    timings["selection"] = time.perf_counter() - t0
    return mask, thresholds


def in_half_the_replicates(masks):
    """``(R, u)`` selections -> the units selected in at least half the replicates, ``2 count >= R`` in
    integers (the float mean of 41 of R = 82 was below 0.5: XLA multiplies the sum by a rounded ``1/R``)."""
    return 2 * jnp.sum(masks, axis=0) >= masks.shape[0]


def select_multi(scores, stat_sol, s_sol, timings, fdr, plus, num_replicates, num_knockoffs):
    """``(W (R, u), mask (u,), thresholds (R,))`` of the multi-knockoff filter on ``scores`` ``(R, m + 1, u)``.

    Warns first if ``s_sol`` or ``stat_sol`` is uncertified (:func:`warn_if_uncertified`), as :func:`select`.

    ``scores`` hold the originals (row 0) and the ``m = num_knockoffs``
    knockoffs of ``u`` units (features or groups). ``W`` is ``tau`` signed by
    ``kappa`` (``+tau`` where the original wins, ``-tau`` otherwise),
    ``thresholds`` the multi-knockoff(+) thresholds; a unit is selected in a
    replicate when the original wins with ``tau`` at or above the threshold, and
    overall (``R > 1``) when selected in at least half the replicates. Sets
    ``timings["selection"]``.
    """
    warn_if_uncertified(s_sol, stat_sol)  # the m > 1 path dropped a failed S or lasso solve silently
    t0 = time.perf_counter()
    kappa, tau = _multi.multi_knockoff_statistics(scores)
    thresholds = _multi.multi_knockoff_threshold(kappa, tau, fdr, num_knockoffs=num_knockoffs, plus=plus)
    masks, W = _multi_masks(kappa, tau, thresholds)
    mask = np.asarray(masks[0] if num_replicates == 1 else in_half_the_replicates(masks))
    timings["selection"] = time.perf_counter() - t0
    return W, mask, thresholds


@jax.jit  # one program (op by op: six in a first call)
def _multi_masks(kappa, tau, thresholds):
    """Per replicate, the units whose original wins at or above the threshold, and ``W = +-tau``."""
    return (kappa == 0) & (tau >= thresholds[..., None]), jnp.where(kappa == 0, tau, -tau)
