r"""End-to-end model-X knockoff filter: covariance -> S-vector -> replicates -> W -> selection.

:func:`knockoff_filter` chains the modules in the order a reader follows them
(``covariance -> sdp -> sampling -> statistics -> filter``):

1. standardise ``X`` (centre, unit variance);
2. estimate the correlation: Ledoit-Wolf (dense methods) or a factor model
   from the data (``s_method="mvr_factor"`` or ``"sdp_factor"``; never forms ``p x p``);
3. solve for ``s`` (equicorrelated, SDP, ASDP, MVR, maximum entropy, or the
   factor-model MVR / SDP);
4. draw ``R`` knockoff replicates in one batched call;
5. compute ``W`` for every replicate in one batched call;
6. select: knockoff(+) threshold for ``R = 1``; for ``R > 1`` aggregate the
   replicates with e-values (``aggregate="ebh"``, FDR-valid, Ren & Barber
   2022) or by selection frequency (``aggregate="frequency"``); that stage
   (and the multi-knockoff one) is :mod:`jaxknock._selection`.
"""

from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _aot, _checks, _memory, _mesh, _precision, _selection
from jaxknock import _filter_inputs as _inputs
from jaxknock import filter as _filter
from jaxknock import multi as _multi
from jaxknock import sampling as _sampling
from jaxknock import statistics as _stats
from jaxknock._filter_inputs import AGGREGATES, STATISTICS
from jaxknock._lapack_threads import with_one_lapack_thread
from jaxknock._s_methods import (
    DENSE_MULTI_MAX_P,
    FACTOR_SOLVERS,
    GROUP_S_METHODS,
    MULTI_S_SOLVERS,
    S_METHODS,
    resolve_s_method,
)
from jaxknock._scaling import standardise_columns
from jaxknock._shrinkage_check import inflation_bound, warn_if_inflated
from jaxknock._solution import RESULTS, Solution
from jaxknock.covariance import FactorFit, FactorModel, factor_model_from_data, ledoit_wolf_and_sample, to_correlation
from jaxknock.distributed import shard_batch
from jaxknock.l1 import cv as _cv
from jaxknock.svector import equicorrelated, mvr, sdp
from jaxknock.svector.group import group_index, group_s_matrix

__all__ = [
    "Selection",
    "knockoff_filter",
    "resolve_s_method",
    "explain_empty_selection",
    "S_METHODS",
    "DENSE_MULTI_MAX_P",
    "STATISTICS",
    "AGGREGATES",
]

# the dense solver of each s_method (a factor method given a dense known Sigma runs its dense criterion)
_DENSE_SOLVERS = {**MULTI_S_SOLVERS, "mvr_factor": mvr, "sdp_factor": sdp}


class Selection(NamedTuple):
    r"""Result of :func:`knockoff_filter`.

    Each replicate ``r`` gives antisymmetric statistics ``W_j`` (large and
    positive when feature ``j`` beats its knockoff) and the knockoff(+)
    threshold at level ``q = fdr``

    :math:`T = \min\{t > 0 : (1 + \#\{j : W_j \le -t\}) / \max(1, \#\{j : W_j \ge t\}) \le q\}`

    (without the ``1 +`` when ``plus=False``). One replicate selects
    ``{j : W_j >= T}``; several are combined by e-BH on the averaged knockoff
    e-values ``e_j = p 1{W_j >= T} / (1 + #{k : W_k <= -T})`` (thresholds at
    ``q / 2``, ``aggregate="ebh"``) or by selection frequency
    (``aggregate="frequency"``).

    Attributes:
        selected: sorted indices of the selected features (numpy int array).
        mask: ``(p,)`` boolean selection mask.
        W: ``(R, p)`` statistics, one row per replicate.
        thresholds: ``(R,)`` knockoff(+) threshold of each replicate at ``fdr``.
        s_solution: the S-vector :class:`~jaxknock.Solution`.
        statistic_solution: the statistics' :class:`~jaxknock.Solution`
            (per-replicate result codes), or ``None`` for closed forms.
        timings: seconds per stage (``covariance``, ``s_vector``,
            ``sampling``, ``statistics``, ``selection``).
        settings: the settings used.
        selected_groups: with ``groups=``, the sorted labels of the selected
            groups (``selected``/``mask`` then list every feature of them, and
            ``W``/``thresholds`` are group-level, ``(R, G)``); else ``None``.
            With ``num_knockoffs = m > 1``, ``W`` holds ``tau`` signed by
            ``kappa`` (``+tau`` where the original wins, ``-tau`` otherwise) and
            ``thresholds`` the multi-knockoff+ thresholds.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> X = rng.standard_normal((200, 10))
        >>> y = X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(200)
        >>> sel = knockoff_filter(jax.random.key(0), X, y, fdr=0.2, s_method="equicorrelated",
        ...                       statistic="correlation", num_replicates=4)
        >>> sel.thresholds.shape, sel.settings["s_method"], sorted(sel.timings)
        ((4,), 'equicorrelated', ['covariance', 's_vector', 'sampling', 'selection', 'statistics'])
        >>> bool(np.array_equal(sel.selected, np.flatnonzero(sel.mask)))
        True
        >>> print(sel.explanation[:16])  # p = 10 features are too few for q = 0.2 with e-BH
        nothing selected
    """

    selected: np.ndarray
    mask: np.ndarray
    W: jax.Array
    thresholds: jax.Array
    s_solution: Solution
    statistic_solution: Solution | None
    timings: dict
    settings: dict
    selected_groups: np.ndarray | None = None  # group labels selected (``groups=`` given), else None

    @property
    def explanation(self) -> str | None:
        """Why nothing was selected, with the smallest target FDR that selects something.

        ``None`` when the selection is non-empty. Example message: "knockoff+ at
        q = 0.1 needs at least 10 features with W_j > 0 ...; the smallest target
        FDR that selects something is 0.167".
        """
        if len(self.selected):
            return None
        return explain_empty_selection(
            self.W,
            self.settings.get("fdr"),
            plus=bool(self.settings.get("plus", True)),
            aggregate=self.settings.get("aggregate", "ebh"),
            num_knockoffs=self.settings.get("num_knockoffs", 1),
            unit="features" if self.selected_groups is None else "groups",
        )


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


def _clock(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


@jax.jit
def _lw_correlation(Xs):
    """The Ledoit-Wolf estimate of ``Xs`` as a correlation matrix, and the bound on how much it inflates the
    conditional variance of near-duplicate features (:func:`jaxknock._shrinkage_check.inflation_bound`; 0 at
    ``p >= n``), in one program."""
    (Sigma, delta), S = ledoit_wolf_and_sample(Xs)
    n, p = Xs.shape
    # at p >= n the sample covariance is singular (every conditional variance 0 to it): the shrinkage is what
    # makes a law at all, and there is nothing to compare it with
    return to_correlation(Sigma), inflation_bound(Sigma, delta if n > p else jnp.zeros_like(delta), S)


def has_low_rank(model: FactorModel) -> bool:
    """Whether the factor solvers take ``model``: ``k < p`` factors (``diag(d) + U U^T`` with ``k >= p`` is a
    valid law, but the factor solvers refuse it, naming ``model.dense()``, which a caller of
    :func:`knockoff_filter` never called: ``Sigma=FactorModel(d, U)`` with ``U`` of shape ``(8, 8)`` raised
    "factor rank k = 8 must be smaller than p = 8" under ``s_method="auto"``)."""
    return model.rank < model.p


def covariance_and_s(key, Xs, s_method, rank, asdp_block_size, sdp_tol, timings, known=None, checks=None):
    """Stages 2-3 on the standardised ``Xs``: ``(Sigma or FactorModel, s Solution)``.

    Fills ``timings["covariance"]`` and ``timings["s_vector"]``, and with a dict ``checks`` the Ledoit-Wolf
    estimate's ``checks["inflation"]`` (:func:`jaxknock._shrinkage_check.inflation_bound`). Depends on ``X``
    only, so a caller with several responses for one design (benchmarks) can
    reuse it. ``known``: a correlation matrix or unit-diagonal
    :class:`~jaxknock.FactorModel` of ``Xs`` that replaces the estimate; a factor
    model is densified for the dense methods, and for the factor methods when it has
    no low rank (:func:`has_low_rank`), which then run their dense criterion (:func:`_dense_s`).

    The covariance stays in ``Xs``'s dtype; only the S solve runs in float64
    (:func:`jaxknock._precision.solve_s_float64`), and ``s`` comes back in
    ``Xs``'s dtype.
    """
    solve = functools.partial(_precision.solve_s_float64, dtype=Xs.dtype)
    if isinstance(known, FactorModel):
        if s_method in FACTOR_SOLVERS and has_low_rank(known):
            timings["covariance"] = 0.0
            s_sol, timings["s_vector"] = _clock(solve, FACTOR_SOLVERS[s_method], known, tol=sdp_tol)
            return known, s_sol
        known = known.dense()
    if known is not None:
        Sigma, timings["covariance"] = known, 0.0
    elif s_method in FACTOR_SOLVERS:
        (model, _), timings["covariance"] = _clock(factor_model_from_data, key, Xs, rank)
        s_sol, timings["s_vector"] = _clock(solve, FACTOR_SOLVERS[s_method], model, tol=sdp_tol)
        return model, s_sol
    else:
        (Sigma, inflation), timings["covariance"] = _clock(_aot.call, _lw_correlation, Xs)
        if checks is not None:
            checks["inflation"] = inflation
    s_sol, timings["s_vector"] = _clock(_dense_s, solve, s_method, Sigma, sdp_tol, asdp_block_size=asdp_block_size)
    return Sigma, s_sol


def _dense_s(solve, s_method, Sigma, sdp_tol, *, asdp_block_size=None, **kw):
    """The dense ``s`` of ``s_method`` via ``solve``; a factor method given a dense ``Sigma`` runs its dense
    criterion (``"mvr_factor"``: :func:`~jaxknock.mvr`, the same optimum; ``"sdp_factor"``: :func:`~jaxknock.sdp`).

    ``kw`` (``num_knockoffs``) goes to every solver; ``asdp_block_size=None`` keeps :func:`~jaxknock.asdp`'s default.
    """
    if s_method == "equicorrelated":
        return solve(equicorrelated, Sigma, **kw)
    if s_method == "asdp" and asdp_block_size is not None:
        kw["block_size"] = asdp_block_size
    return solve(_DENSE_SOLVERS[s_method], Sigma, tol=sdp_tol, **kw)


@jax.jit
def _standardise_and_split(X, key):
    """``((X - mean) / std, k_fac, k_samp)``: the estimated-law path's preparation in one program.

    Each column is standardised on its exact power-of-two rescaling
    (:func:`jaxknock._scaling.standardise_columns`), so a column whose squared deviations
    leave the floating range (``|x| >~ 1e19`` or ``<~ 1e-19`` in float32, ``1e154`` /
    ``1e-154`` in float64) is standardised like any other.
    """
    k_fac, k_samp = jax.random.split(key)
    return standardise_columns(X), k_fac, k_samp


@with_one_lapack_thread
def knockoff_filter(
    key,
    X,
    y,
    *,
    fdr: float = 0.1,
    s_method: str = "auto",
    rank: int | None = None,
    statistic: str = "lcd",
    num_replicates: int = 1,
    aggregate: str = "ebh",
    plus: bool = True,
    lam=None,
    asdp_block_size: int = 100,
    sdp_tol: float = 1e-4,
    lasso_tol: float | None = 1e-4,
    cv_patience: int | None = 10,
    devices=None,
    mesh=None,
    chunk_size: int | None = None,
    Sigma=None,
    mu=None,
    groups=None,
    num_knockoffs: int = 1,
) -> Selection:
    r"""Model-X knockoff selection with FDR control at level ``fdr``.

    Gaussian knockoffs (Candes et al. 2018) built from a Ledoit-Wolf estimate
    of the correlation (or a rank-``rank`` factor model with
    ``s_method="mvr_factor"`` or ``"sdp_factor"``), ``R = num_replicates`` replicates sampled in
    one batch, statistics ``W`` for all replicates in one batch, then

    * ``R = 1``: select ``{j : W_j >= T}`` with the knockoff+ (``plus=True``)
      or knockoff threshold ``T`` at level ``fdr``;
    * ``R > 1``: ``aggregate="ebh"`` averages the replicates' knockoff
      e-values at level ``fdr/2`` and applies e-BH at ``fdr`` (FDR control
      for any ``R``, Ren & Barber 2022; knockoff+ at ``fdr/2`` selects at least
      ``2/fdr`` features or none, so with fewer signals than that (20 at ``fdr=0.1``)
      e-BH seldom selects: 0 of 10 signals in 100 data sets, session 59);
      ``aggregate="frequency"`` keeps
      features selected in at least half of the replicates (stabilises, no
      formal FDR guarantee).

    The guarantee is for knockoffs from the true law of the rows of ``X``
    (``Sigma=``); from an estimate it holds only as far as the estimate is
    good. Measured at ``fdr=0.1`` (AR(1) 0.9, 10 signals, cross-validated
    ``"lcd"``): ``n = 300, p = 50`` (Ledoit-Wolf, ``"sdp"``) FDR 0.08 +- 0.01;
    ``n = 150, p = 200``: the factor model with ``"mvr_factor"`` (the default
    there) 0.09 +- 0.01, dense ``"mvr"`` / ``"maxent"`` on the Ledoit-Wolf
    estimate 0.08 +- 0.01, with ``"sdp_factor"`` 0.13-0.16 +- 0.01 (the larger
    SDP ``s`` leans harder on the estimated law), and ``"sdp"`` with the true
    ``Sigma=`` 0.06 +- 0.01. Where the estimate is not good, it warns: when the
    Ledoit-Wolf shrinkage at least doubles the conditional variance of
    near-duplicate features (a bound from the estimate, :mod:`jaxknock._shrinkage_check`;
    null / signal pairs correlated 0.9-0.99 in an otherwise independent design
    gave FDR 0.16-0.31 at ``fdr=0.1``, knockpy's default filter the same), a
    ``UserWarning`` names the worst pair and suggests ``groups=`` or ``Sigma=``.

    A binary ``y`` (two distinct values of any type: ``{0, 1}``, ``{1, 2}``,
    ``{-1, 1}``, strings, booleans; mapped in sorted order to ``{0, 1}``)
    switches the lasso statistics to l1-logistic regression, cross-validated on
    stratified folds (scikit-learn's ``StratifiedKFold(5)``, so rows sorted by
    class still give every fold both classes); more than two
    non-numeric labels, or 3 to 20 distinct integers (class labels), are
    rejected with a ``ValueError`` (pass ``y.astype(float)`` to fit integers as
    a continuous response). ``X`` is standardised first, and a continuous ``y``
    reaches ``"lcd"`` / ``"lsm"`` scaled by an exact power of two to unit spread
    (``lam``, ``W`` and the statistic's stats stay in ``y``'s units), so the
    selection depends on the units of neither.

    Precision: float64 only in the S solve, because the SDP / ASDP / factor
    solvers work next to the boundary of feasibility (nearly singular
    ``2 Sigma - diag(s)``) where float32 loses the certificate; the covariance
    is upcast for the solve (inside ``jax.enable_x64`` when the flag is off)
    and ``s`` cast back. Sampling, statistics and selection follow ``X``'s
    dtype: a float32 ``X`` gives float32 knockoffs and a float32 ``W``
    (8-60x faster on GPUs, half the memory per replicate), float64 stays float64.
    A float64 continuous ``y`` whose mean is more than ``2^7`` times its spread
    (``1e8 + signal``) loses that mean in float64 before the cast to float32,
    which would otherwise round its deviations away (every statistic is
    invariant to a shift of ``y``).
    A float32 cross-validated lasso whose fit fails its KKT certificate (nearly
    collinear columns of ``[X, X~]``, e.g. a knockoff almost equal to its
    original) is solved again in float64 for that replicate only
    (:func:`jaxknock.l1.working_set.l1_cv`, ``stats["float64_refit"]``).

    Args:
        key: ``jax.random`` key (the result is a deterministic function of it).
        X: ``(n, p)`` design; ``y``: ``(n,)`` response.
        fdr: target FDR in (0, 1).
        s_method: ``"sdp"``, ``"mvr_factor"``, ``"sdp_factor"``, ``"asdp"``, ``"equicorrelated"``,
            ``"mvr"`` or ``"maxent"`` (:func:`~jaxknock.mvr` / :func:`~jaxknock.maxent`),
            or ``"auto"`` (default, :func:`resolve_s_method`): ``"mvr"`` when
            ``n > p`` or with a known dense ``Sigma`` (knockpy's default; the SDP's
            FDR went over the target under the estimated law, and with a known
            law its power can collapse), and ``"mvr_factor"`` when ``p >= n`` or ``rank`` is given (``"mvr"``
            with ``groups`` or, up to ``p = 2000``, ``num_knockoffs > 1``), where the
            dense Ledoit-Wolf estimate is too close to singular for the SDP's
            ``s``. At ``p >= n`` the dense methods run only as ``"mvr"`` or
            ``"maxent"`` on the Ledoit-Wolf estimate (knockpy's default is
            ``"mvr"`` there; their smaller ``s`` kept the FDR in simulation,
            ``"sdp"`` / ``"asdp"`` / ``"equicorrelated"`` did not and raise a
            ``ValueError``). ``"mvr_factor"`` / ``"sdp_factor"``: :func:`~jaxknock.mvr_factor` /
            :func:`~jaxknock.sdp_factor` on a rank-``rank`` factor model of the data
            (:func:`~jaxknock.factor_model_from_data`, never ``p x p``).
            ``Selection.settings["s_method"]`` records the method used.
        rank: factor-model rank for ``"mvr_factor"`` / ``"sdp_factor"`` (default ``min(50, max(1, min(n, p) // 4))``).
        statistic: ``"lcd"`` (lasso coefficient difference, CV lambda when
            ``lam`` is None), ``"lsm"`` (lasso signed max), ``"correlation"``
            (marginal correlation difference) or ``"centroid"`` (sparse
            centroid, binary ``y``).
        num_replicates: knockoff replicates ``R``.
        aggregate: ``"ebh"`` or ``"frequency"`` (``R > 1``).
        plus: knockoff+ thresholds.
        lam: fixed lasso penalty for ``"lcd"`` (default: cross-validation);
            a ``ValueError`` with the other statistics, which have no penalty.
        asdp_block_size: block size for ``"asdp"``.
        sdp_tol: relative certified-gap tolerance for the SDP solvers.
        lasso_tol: relative duality-gap tolerance of the lasso solves for
            ``"lcd"``/``"lsm"`` (``None``: the solver default, 1e-6 in
            float64); 1e-4 is scikit-learn's default (knockpy uses 1e-3).
        cv_patience: early stop of the cross-validated ``"lcd"`` path once
            the CV error has not improved for this many lambdas (see
            :func:`jaxknock.lasso_cv`; ``None`` solves the whole
            100-lambda grid, which costs several times more when ``2p >= n``
            because the smallest penalties nearly interpolate).
        devices, mesh: run the replicate stage (sampling and statistics of
            each replicate, fused) sharded over devices with
            :func:`jaxknock.distributed.shard_batch`: ``None`` uses every device
            (the plain single-device path when there is only one), an int the
            first ``d``, or a 1-D ``mesh``. Keys are split before sharding, so
            ``W`` equals the single-device run. In the fused stage
            ``timings["sampling"]`` holds both stages and
            ``timings["statistics"]`` is 0. With ``groups`` or
            ``num_knockoffs > 1`` the run is on one device: ``devices`` / ``mesh``
            must be ``None`` there (``None`` does not shard it).
        chunk_size: replicates per device and step of the fused stage
            (default: planned from the free memory of a device; also selects
            the fused stage on a single device, to bound memory for large ``R``;
            not with ``groups`` or ``num_knockoffs > 1``).
        Sigma: the known covariance of the rows of ``X`` (``(p, p)``), or a
            :class:`~jaxknock.FactorModel` / :class:`~jaxknock.FactorFit`:
            skips the estimation stage; ``X`` is then centred by ``mu`` (default:
            the column means) and scaled by ``sqrt(diag Sigma)`` (model-X
            knockoffs from the true law when ``mu`` is the true mean). A
            factor model is solved by :func:`~jaxknock.mvr_factor` /
            :func:`~jaxknock.sdp_factor` with ``s_method="mvr_factor"`` /
            ``"sdp_factor"`` or ``"auto"`` (``"mvr_factor"``, never ``p x p``),
            densified for the dense methods and when it has ``k >= p`` factors (no
            low rank to use: the factor methods then run their dense criterion, as below); a dense ``Sigma`` with
            ``"mvr_factor"`` / ``"sdp_factor"`` runs the dense :func:`~jaxknock.mvr`
            (the same MVR optimum) / :func:`~jaxknock.sdp`.
        mu: the known mean of the rows of ``X`` (``(p,)``; only with ``Sigma``).
        groups: ``(p,)`` group labels, integers or names: group knockoffs (block-diagonal
            ``S`` from :func:`jaxknock.group_s_matrix` with ``s_method``
            ``"equicorrelated"``, ``"sdp"``, ``"maxent"`` or ``"mvr"``; ``"asdp"`` uses
            the group SDP), group statistics ``W_g = sum_{j in g} W_j`` and the
            group knockoff+ filter at group-level FDR ``fdr`` (see
            :mod:`jaxknock.multi`; it selects at least ``1/fdr`` groups or none, so
            with few groups, e.g. 11 at ``fdr=0.1``, it seldom selects). Not with the factor methods; ``"auto"``
            runs ``"mvr"`` (the group MVR, on the Ledoit-Wolf estimate: a known
            ``Sigma`` is not supported yet with ``groups`` or ``num_knockoffs > 1``
            and raises a ``ValueError``).
        num_knockoffs: ``m`` simultaneous knockoffs (Gimenez & Zou 2019): ``S``
            solved for ``(m+1)/m Sigma - S >= 0`` (without ``groups``: the
            ``s_method`` solver called with ``num_knockoffs=m``; with
            ``"mvr_factor"`` / ``"sdp_factor"``, that solver on the rank-``rank``
            factor model, never ``p x p``), statistics with
            ``num_knockoffs=m`` and the multi-knockoff+ filter. ``m > 1`` with
            ``num_replicates > 1`` needs ``aggregate="frequency"``.

    Returns:
        :class:`Selection`.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> X = rng.standard_normal((200, 10))
        >>> y = X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(200)
        >>> sel = knockoff_filter(jax.random.key(0), X, y, fdr=0.2, s_method="equicorrelated",
        ...                       statistic="correlation", num_replicates=4)
        >>> sel.W.shape, sel.mask.shape
        ((4, 10), (10,))
    """
    _checks.require_eager(
        "knockoff_filter",
        "it reads the labels of y, picks the statistic and the solvers from the data and the selection back",
        "compose the jittable stages there: ledoit_wolf, sdp / mvr / equicorrelated, sample_knockoffs, lcd, "
        "knockoff_select",
        key=key, X=X, y=y, Sigma=Sigma, mu=mu,
    )  # fmt: skip
    _checks.check_key(key)  # before any program: an int seed fails deep inside JAX otherwise
    num_knockoffs = _checks.check_num_knockoffs(num_knockoffs)  # True == 1 took the single-knockoff path
    _cv.check_patience(cv_patience, "cv_patience")  # before the S solve and the sampling, not in the statistics
    _inputs.check_options(
        lasso_tol=lasso_tol, rank=rank, Sigma=Sigma, s_method=s_method, groups=groups, sdp_tol=sdp_tol,
        asdp_block_size=asdp_block_size,
    )  # fmt: skip
    known = "factor" if isinstance(Sigma, (FactorModel, FactorFit)) else Sigma is not None
    s_method = resolve_s_method(
        s_method, np.shape(X), known=known, groups=groups, rank=rank, num_knockoffs=num_knockoffs
    )
    if mu is not None and Sigma is None:  # every path: a mean without its law was ignored silently
        raise ValueError("mu is only used together with a known Sigma; pass Sigma too")
    X, mu = _precision.centre_before_cast(X, mu)
    if groups is not None or num_knockoffs != 1:
        _inputs.check_single_device_options(Sigma=Sigma, chunk_size=chunk_size, devices=devices, mesh=mesh)
        return _grouped_or_multi_filter(
            key,
            X,
            y,
            groups=groups,
            num_knockoffs=num_knockoffs,
            fdr=fdr,
            s_method=s_method,
            rank=rank,
            statistic=statistic,
            num_replicates=num_replicates,
            aggregate=aggregate,
            plus=plus,
            lam=lam,
            sdp_tol=sdp_tol,
            asdp_block_size=asdp_block_size,
            lasso_tol=lasso_tol,
            cv_patience=cv_patience,
        )
    X, y, binary, rank = _inputs.validate_inputs(
        X, y, fdr, s_method, statistic, aggregate, num_replicates, rank, known=Sigma is not None, lam=lam, plus=plus
    )
    if statistic == "centroid" and not binary:
        raise ValueError("statistic='centroid' needs a binary y (two distinct labels)")
    timings = {}
    estimated = Sigma is None
    if estimated:
        Xs, k_fac, k_samp = _aot.call(_standardise_and_split, X, key)  # one program (a fresh process compiles each)
        known = None
    else:
        k_fac, k_samp = jax.random.split(key)
        Xs, known = _inputs.standardise_by_law(X, Sigma, mu)
    # the covariance estimated from the validated X, and an s its solver certified, are not re-validated
    # by the stages that take them (_checks.trusted_values); a user's Sigma is, as before
    law_checks = {}
    with _checks.trusted_values(estimated):
        Sigma, s_sol = covariance_and_s(
            k_fac, Xs, s_method, rank, asdp_block_size, sdp_tol, timings, known=known, checks=law_checks
        )
    if "inflation" in law_checks:
        warn_if_inflated(law_checks["inflation"], fdr)
    s = s_sol.value
    certified = estimated and int(s_sol.result) == RESULTS.successful

    loss = "logistic" if binary else "squared"
    fused = chunk_size is not None or _mesh.wants_sharding(devices, mesh)
    with _checks.trusted_values(certified):
        W, stat_sol, stage_times = replicate_stage(
            k_samp,
            Xs,
            y,
            Sigma,
            s,
            int(num_replicates),
            statistic=statistic,
            lam=lam,
            loss=loss,
            lasso_tol=lasso_tol,
            cv_patience=cv_patience,
            folds=_inputs.statistic_folds(y, binary, statistic, lam),
            devices=devices,
            mesh=mesh,
            chunk_size=chunk_size,
        )
    settings = dict(
        fdr=fdr,
        s_method=s_method,
        rank=rank,
        statistic=statistic,
        num_replicates=int(num_replicates),
        aggregate=aggregate,
        plus=plus,
        loss=loss,
    )
    timings.update(stage_times)
    if not fused:
        settings = dict(settings, lasso_tol=lasso_tol, cv_patience=cv_patience)
    mask, thresholds = _selection.select(W, stat_sol, s_sol, timings, fdr, plus, num_replicates, aggregate)
    return Selection(np.flatnonzero(mask), mask, W, thresholds, s_sol, stat_sol, timings, settings)


def replicate_stage(
    key,
    Xs,
    y,
    Sigma,
    s,
    R,
    *,
    statistic,
    lam,
    loss,
    lasso_tol=None,
    cv_patience=None,
    devices=None,
    mesh=None,
    chunk_size=None,
    folds=5,
):
    """Stages 4-5 of :func:`knockoff_filter`: ``R`` knockoff replicates of ``Xs`` and their statistics.

    Returns ``(W, statistic Solution or None, timings)``. Everything stays on the
    device (no implicit device-to-host transfer; tested under
    ``jax.transfer_guard_device_to_host("disallow")``): the samplers and the
    statistics validate with device-side flags. With ``chunk_size`` or several
    devices the two stages are fused per replicate (``timings["sampling"]``
    holds both and ``timings["statistics"]`` is 0).
    """
    timings = {}
    if chunk_size is not None or _mesh.wants_sharding(devices, mesh):
        (W, stat_sol), timings["sampling"] = _clock(
            _fused_replicates,
            key,
            Xs,
            y,
            Sigma,
            s,
            int(R),
            statistic=statistic,
            lam=lam,
            loss=loss,
            mesh=_mesh.resolve_mesh(devices, mesh, None),
            chunk_size=chunk_size,
            lasso_tol=lasso_tol,
            cv_patience=cv_patience,
            folds=folds,
        )
        timings["statistics"] = 0.0
        return W, stat_sol, timings
    Xt, timings["sampling"] = _clock(_sampling.sample_replicates, key, Xs, Sigma, s, int(R), devices=devices)
    Xk = _augment(Xs, Xt)
    t0 = time.perf_counter()
    W, stat_sol = _statistics(
        Xk, y, lam, statistic=statistic, loss=loss, lasso_tol=lasso_tol, cv_patience=cv_patience, folds=folds
    )
    W = jax.block_until_ready(jnp.asarray(W))
    timings["statistics"] = time.perf_counter() - t0
    return W, stat_sol, timings


@jax.jit
def _augment(Xs, Xt):
    """The designs ``[X, X~]`` ``(R, n, (m + 1) p)`` of the knockoff replicates ``Xt`` (``R`` first, ``n m p``
    entries each: ``(R, n, p)``, or the ``m`` knockoffs of each replicate in a trailing axis)."""
    R, (n, p) = Xt.shape[0], Xs.shape
    return jnp.concatenate([jnp.broadcast_to(Xs, (R, n, p)), Xt.reshape(R, n, -1)], axis=-1)


def _statistics(Xk, y, lam, *, statistic, loss, lasso_tol=None, cv_patience=None, folds=5, num_knockoffs=1):
    """``(scores, Solution or None)`` of the designs ``Xk`` ``(R, n, (m + 1) p)``: the one dispatch of every path."""
    if statistic == "lcd":
        patience = cv_patience if lam is None else None
        sol = _stats.lcd(
            Xk, y, lam=lam, loss=loss, tol=lasso_tol, patience=patience, folds=folds, num_knockoffs=num_knockoffs
        )
        return sol.value, sol
    if statistic == "lsm":
        sol = _stats.lsm(Xk, y, loss=loss, tol=lasso_tol, num_knockoffs=num_knockoffs)
        return sol.value, sol
    if statistic == "correlation":
        return _stats.marginal_correlation(Xk, y, num_knockoffs=num_knockoffs), None
    return _stats.sparse_centroid(Xk, y), None


def _replicate_statistics(keys, plan, Xs, y, lam, *, statistic, loss, lasso_tol=None, cv_patience=None, folds=5):
    """Knockoffs and statistics of a batch of replicates (one device's share)."""
    Xt = jax.vmap(_sampling.draw_replicate, in_axes=(0, None))(keys, plan)
    return _statistics(
        _augment(Xs, Xt), y, lam, statistic=statistic, loss=loss, lasso_tol=lasso_tol, cv_patience=cv_patience,
        folds=folds,
    )  # fmt: skip


def _fused_replicates(
    key, Xs, y, Sigma, s, R, *, statistic, lam, loss, mesh, chunk_size, lasso_tol=None, cv_patience=None, folds=5
):
    """Sampling + statistics per replicate, sharded over ``mesh`` in memory-sized steps.

    Peak memory per replicate in flight (``b`` bytes per number): the sampler's
    workspace and the knockoffs, the design ``[X, X~]`` (``2 n p b``) and the
    statistic's workspace (``(K + 3) 2 n p b`` for the lasso statistics with
    ``K = 5`` folds, ``4 n p b`` for the closed forms; the estimates are in
    :mod:`jaxknock._memory`); shared: the sampling plan and ``X``. Only ``W``
    (``R p b``) is kept.
    """
    plan = _sampling.replicate_plan(Xs, Sigma, s)
    n, p = Xs.shape
    b = Xs.dtype.itemsize
    shared, per_rep = _sampling.plan_bytes(plan)
    per_rep += _memory.statistic_bytes(n, p, b, lasso=statistic in ("lcd", "lsm"))
    keys = jax.random.split(key, R)  # same keys as sample_replicates, split before sharding
    fn = functools.partial(
        _replicate_statistics, statistic=statistic, loss=loss, lasso_tol=lasso_tol, cv_patience=cv_patience, folds=folds
    )
    return shard_batch(
        fn,
        keys,
        broadcast=(plan, Xs, y, lam),
        mesh=mesh,
        axis_name=mesh.axis_names[0],
        vectorized=True,
        chunk_size=chunk_size,
        per_item_bytes=per_rep,
        shared_bytes=shared + (n * p + R * p) * b,
        knob="chunk_size",
    )


# ----------------------------------------------------------------------------
# Group knockoffs and multiple knockoffs (knockoff_filter(groups=..., num_knockoffs=m))
# ----------------------------------------------------------------------------


def _grouped_or_multi_filter(
    key,
    X,
    y,
    *,
    groups,
    num_knockoffs,
    fdr,
    s_method,
    statistic,
    num_replicates,
    aggregate,
    plus,
    lam,
    sdp_tol,
    lasso_tol,
    cv_patience,
    rank=None,
    asdp_block_size=None,
):
    """:func:`knockoff_filter` with ``groups`` and/or ``num_knockoffs > 1`` (see its docstring)."""
    m = _checks.check_num_knockoffs(num_knockoffs)
    allowed = GROUP_S_METHODS if groups is not None else (*MULTI_S_SOLVERS, *FACTOR_SOLVERS)
    if s_method not in allowed:
        what = "groups" if groups is not None else "num_knockoffs > 1"
        raise ValueError(f"s_method must be one of {tuple(allowed)} with {what}, got {s_method!r}")
    if statistic == "centroid":
        raise ValueError("statistic='centroid' is not supported with groups or num_knockoffs > 1")
    X, y, binary, rank = _inputs.validate_inputs(
        X, y, fdr, s_method, statistic, aggregate, num_replicates, rank, lam=lam, plus=plus, grouped=groups is not None
    )
    n, p = X.shape
    g = group_index(np.arange(p) if groups is None else groups, p)
    R = int(num_replicates)
    if m > 1 and R > 1 and aggregate != "frequency":
        raise ValueError("num_knockoffs > 1 with num_replicates > 1 needs aggregate='frequency'")
    timings = {}
    Xs, k_fac, k_samp = _aot.call(_standardise_and_split, X, key)
    if s_method in FACTOR_SOLVERS:
        # m knockoffs under a rank-`rank` factor model of the data, never p x p (as with m = 1)
        (Sigma, _), timings["covariance"] = _clock(factor_model_from_data, k_fac, Xs, rank)
        s_sol, timings["s_vector"] = _clock(
            _precision.solve_s_float64, FACTOR_SOLVERS[s_method], Sigma, num_knockoffs=m, tol=sdp_tol, dtype=X.dtype
        )
    else:
        (Sigma, inflation), timings["covariance"] = _clock(_aot.call, _lw_correlation, Xs)
        if groups is None:
            warn_if_inflated(inflation, fdr)  # (with groups= a near-duplicate pair may share its group)
            # m knockoffs of single features: the per-feature S solvers with num_knockoffs=m
            solve = functools.partial(_precision.solve_s_float64, dtype=X.dtype)
            s_sol, timings["s_vector"] = _clock(
                _dense_s, solve, s_method, Sigma, sdp_tol, asdp_block_size=asdp_block_size, num_knockoffs=m
            )
        else:
            s_sol, timings["s_vector"] = _clock(
                _precision.solve_s_float64,
                group_s_matrix,
                Sigma,
                g,
                method=GROUP_S_METHODS[s_method],
                num_knockoffs=m,
                tol=sdp_tol,
                dtype=X.dtype,
            )
    S = s_sol.value
    Xt, timings["sampling"] = _clock(_sampling.sample_replicates, k_samp, Xs, Sigma, S, R, num_knockoffs=m)
    Xk = _augment(Xs, Xt)
    loss = "logistic" if binary else "squared"
    t0 = time.perf_counter()
    # statistic is lcd, lsm or correlation here ('centroid' is refused above)
    scores, stat_sol = _statistics(
        Xk, y, lam, statistic=statistic, loss=loss, lasso_tol=lasso_tol, cv_patience=cv_patience,
        folds=_inputs.statistic_folds(y, binary, statistic, lam), num_knockoffs=m,
    )  # fmt: skip
    if groups is not None:
        scores = _multi.group_statistics(scores, g)
    scores = jax.block_until_ready(scores)
    timings["statistics"] = time.perf_counter() - t0
    settings = dict(
        fdr=fdr,
        s_method=s_method,
        statistic=statistic,
        num_replicates=R,
        aggregate=aggregate,
        plus=plus,
        loss=loss,
        num_knockoffs=m,
        groups=None if groups is None else g,
        rank=rank,
    )
    if m == 1:
        W = scores
        unit_mask, thresholds = _selection.select(scores, stat_sol, s_sol, timings, fdr, plus, R, aggregate)
    else:
        W, unit_mask, thresholds = _selection.select_multi(scores, stat_sol, s_sol, timings, fdr, plus, R, m)
    if groups is None:
        return Selection(np.flatnonzero(unit_mask), unit_mask, W, thresholds, s_sol, stat_sol, timings, settings)
    mask = np.asarray(unit_mask)[np.asarray(g.group_of)]
    return Selection(
        np.flatnonzero(mask), mask, W, thresholds, s_sol, stat_sol, timings, settings, g.labels[np.asarray(unit_mask)]
    )
