"""K-fold cross-validation along the lambda path, refitted on all rows.

The ``K`` training folds and the full data are ``K + 1`` problems that differ
only in their 0/1 row weights (:func:`jaxknock.l1.problem.make_problem` under
``vmap``); they are solved together at every lambda of the grid and warm
started along it by ``lax.scan`` (:func:`cv_solve`). The folds come from
:mod:`jaxknock.l1.folds` (re-exported here: ``cv_folds``, ``kfold_ids``,
``stratified_kfold_ids``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks
from jaxknock._solution import Solution, raise_if_failed
from jaxknock.l1 import _units, working_set
from jaxknock.l1.folds import (
    check_folds_nonempty,
    cv_folds,
    kfold_ids,
    resolve_folds,
    stratified_kfold_ids,
    void_single_class_folds,
)
from jaxknock.l1.problem import (
    centre_on_host,
    intercept,
    loss_value,
    make_problem,
    prepare_data,
    resolve_lambdas,
    restore_intercept,
)
from jaxknock.l1.settings import L1Settings, make_settings
from jaxknock.l1.solvers import solve

__all__ = ["cv_folds", "kfold_ids", "lasso_cv", "stratified_kfold_ids"]


def check_patience(patience, name: str = "patience"):
    if patience is None:
        return None
    if not (_checks.is_int(patience) and patience >= 1):
        raise ValueError(f"{name} must be None or a positive integer, got {patience!r}")
    return int(patience)


def cv_solve(X, y, fold_ids, lambdas, settings: L1Settings, *, K, patience=None) -> Solution:
    """Cross-validation for one design (traceable; ``vmap`` / ``lax.map`` over designs).

    ``K`` and ``patience`` are static; ``settings.max_steps`` is traced, so an
    early-stopped lambda costs one gap check.
    """
    dtype = X.dtype
    XT = X.T
    # K training masks followed by the full data (the refit rides along the path).
    W = jnp.concatenate(
        [
            (fold_ids[None, :] != jnp.arange(K)[:, None]).astype(dtype),
            jnp.ones((1, X.shape[0]), dtype),
        ]
    )
    probs = jax.vmap(make_problem, in_axes=(None, None, 0, None))(XT, y, W, settings)
    solve_all = jax.vmap(
        lambda prob, lam, c, o, ms: solve(prob, lam, c, o, settings.replace(max_steps=ms)),
        in_axes=(0, None, 0, 0, None),
    )
    held_out = 1.0 - W[:K]
    n_held = jnp.sum(held_out, axis=1)
    m = X.shape[1]
    L = lambdas.shape[0]
    max_steps = settings.max_steps

    def body(carry, xs):
        coefs, offsets, best, stall = carry
        lam, idx = xs
        stopped = jnp.asarray(False) if patience is None else stall >= patience
        states, codes = solve_all(probs, lam, coefs, offsets, jnp.where(stopped, 0, max_steps))
        dev = 2.0 * loss_value(settings.loss, states.z[:K], y[None, :])
        errs = jnp.sum(held_out * dev, axis=1) / n_held
        errs = jnp.where(stopped, jnp.inf, errs)
        codes = jnp.where(stopped, 0, codes)
        mean = jnp.mean(errs)
        improved = mean < best["err"]
        # ties go to the largest lambda, in any grid order: scanning an increasing grid (np.logspace), the first
        # of the tied all-zero fits above every fold's lambda_max was the smallest of them
        better = improved | (jnp.isfinite(mean) & (mean == best["err"]) & (lam > lambdas[best["index"]]))
        stall = jnp.where(improved, 0, stall + 1)
        full = jax.tree_util.tree_map(lambda a: a[K], states)
        full_prob = jax.tree_util.tree_map(lambda a: a[K], probs)
        candidate = {
            "err": mean,
            "index": idx,
            "coef": full.coef,
            "intercept": intercept(full_prob, full.coef, full.offset, settings.fit_intercept),
            "gap": full.gap,
        }
        best = jax.tree_util.tree_map(lambda new, old: jnp.where(better, new, old), candidate, best)
        out = (errs, jnp.max(codes), jnp.sum(states.num_steps))
        return (states.coef, states.offset, best, stall), out

    best0 = {
        "err": jnp.asarray(jnp.inf, dtype),
        "index": jnp.zeros((), jnp.int32),
        "coef": jnp.zeros(m, dtype),
        "intercept": jnp.zeros((), dtype),
        "gap": jnp.zeros((), dtype),
    }
    init = (jnp.zeros((K + 1, m), dtype), probs.offset0, best0, jnp.zeros((), jnp.int32))
    (_, _, best, _), (errs, codes, steps) = lax.scan(body, init, (lambdas, jnp.arange(L, dtype=jnp.int32)))
    stats = {
        "lam": lambdas[best["index"]],
        "lam_index": best["index"],
        "lambdas": lambdas,
        "cv_error": errs,
        "cv_mean": jnp.mean(errs, axis=1),
        "intercept": best["intercept"],
        "gap": best["gap"],
        "duality_gap": best["gap"],  # deprecated key, kept for one release
        "num_steps": jnp.sum(steps),
        "max_steps": jnp.asarray(max_steps, jnp.int32),
    }
    return Solution(value=best["coef"], result=jnp.max(codes), stats=stats)


@functools.partial(jax.jit, static_argnames=("K", "patience"))
def _cv_jit(X, y, fold_ids, lambdas, settings, *, K, patience=None):
    return cv_solve(X, y, fold_ids, lambdas, settings, K=K, patience=patience)


def lasso_cv(
    X,
    y,
    *,
    folds=5,
    lambdas=None,
    num_lambdas: int = 100,
    eps: float = 1e-3,
    loss: str = "squared",
    fit_intercept: bool = True,
    tol: float | None = None,
    max_steps: int | None = None,
    solver: str = "auto",
    screen: bool = True,
    patience: int | None = None,
    engine: str = "auto",
    throw: bool = False,
) -> Solution:
    r"""K-fold cross-validated lasso / l1-logistic regression, refitted on all rows.

    For every lambda of the grid (largest first) the ``K`` training folds and
    the full data are solved together (``vmap`` over 0/1 row weights, warm
    started along the path by ``lax.scan``). The validation error of fold
    ``k`` is the mean deviance on its held-out rows (mean squared error for
    least squares, twice the mean log-loss for logistic); the chosen lambda
    minimises the mean over folds (the largest one among ties), and the
    returned coefficients are the full-data solution at that lambda.
    Equivalent to ``sklearn.linear_model.LassoCV(cv=K)`` (same contiguous
    folds, same grid) for least squares; for the logistic loss the folds are
    those of ``LogisticRegressionCV(cv=K)`` (stratified).

    Args:
        X, y: as in :func:`~jaxknock.lasso`.
        folds: number of folds ``K``: contiguous for least squares
            (:func:`kfold_ids`, scikit-learn's ``KFold``), stratified by
            class for the logistic loss (:func:`stratified_kfold_ids`,
            ``StratifiedKFold``, as ``LogisticRegressionCV`` and
            :func:`~jaxknock.knockoff_filter` use: contiguous folds of rows
            sorted by class would hold out a single class); or an ``(n,)``
            integer array of fold ids ``0..K-1`` (shuffle them yourself for
            random folds).
        lambdas, num_lambdas, eps: the grid (see :func:`~jaxknock.lasso_path`);
            the default grid is computed on the full data. A grid in any order is
            answered in that order (``cv_error`` rows, ``lam_index``); the
            working-set engine solves it sorted, largest first.
        loss, fit_intercept, tol, max_steps, solver, screen, throw: as in :func:`~jaxknock.lasso`.
        patience: early stop along the path (glmnet-style): once the mean CV
            error has not improved on its best for ``patience`` consecutive
            lambdas, the remaining (smaller) lambdas are not solved (their
            ``cv_error`` is ``inf``). The small-lambda end of the path is by
            far the most expensive (near-interpolation when ``m >= n``) and
            rarely holds the CV minimum once the error has risen for a while.
            ``None`` (default) solves the whole grid, exactly like scikit-learn.
            On dense designs that tail dominates: on a knockoff-augmented
            block design with n = 2000, m = 2000 the whole grid took 46-48 s
            warm (scikit-learn's ``LassoCV``: 14.3 s), ``patience=10`` 0.65 s
            with the same chosen lambda (``benchmarks/measured/NOTES.md``,
            session 53); pass ``patience=10`` when only the CV choice matters.
            (With the working-set engine, ``patience`` turns on that engine's
            early exits: the CV error must also lie more than one standard
            error above its best, and glmnet's deviance-ratio exit applies;
            see :mod:`jaxknock.l1.working_set`.)
        engine: ``"auto"`` (default): the working-set engine
            (:func:`jaxknock.l1.working_set.l1_cv`: exact homotopy on Gram
            columns for least squares, strong rules and a KKT
            certificate over all features) whenever it applies, that is with
            ``fit_intercept=True``, ``solver="auto"``, ``screen=True`` and
            concrete (not traced) inputs; otherwise ``"classic"``, the solver of
            :func:`~jaxknock.lasso` along the path (the one that runs under
            ``jit`` / ``vmap``). With the working-set engine ``tol`` is its
            relative KKT tolerance (default ``1e-5``; the homotopy is exact
            between kinks and certified by the KKT check) and ``max_steps`` its
            per-solve cap; the stats also hold ``kkt``, ``cv_se``,
            ``coef_path`` and ``num_lambdas_solved``.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` the ``(m,)`` refitted
        coefficients, ``result`` the worst code over all solves and ``stats``:
        ``lam`` (chosen), ``lam_index``, ``lambdas`` ``(L,)``, ``cv_error``
        ``(L, K)``, ``cv_mean`` ``(L,)``, ``intercept``, ``gap`` (refit; also
        under the deprecated key ``duality_gap``), ``num_steps`` (total over
        all solves), ``max_steps``. A float64 NumPy ``X`` (or ``y``) with x64
        off is centred on the host first, and ``intercept`` (``intercept_path``)
        is then a float64 NumPy array, as in :func:`~jaxknock.lasso`.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (60, 8))
        >>> y = X[:, 0] - X[:, 1] + 0.5 * jax.random.normal(jax.random.key(1), (60,))
        >>> sol = lasso_cv(X, y, folds=3, num_lambdas=20)
        >>> sol.stats["cv_error"].shape
        (20, 3)
    """
    X, y, shift = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    settings = make_settings(
        X.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol, max_steps=max_steps
    )
    fold_ids, K = resolve_folds(X.shape[0], folds, y, loss)
    check_folds_nonempty(fold_ids, K, y, loss)
    X, y, units = _units.scale_data(X, y, loss)  # solved on the unit scale (jaxknock.l1._units)
    lambdas = resolve_lambdas(X, y, lambdas, settings, num_lambdas=num_lambdas, eps=eps, units=units)
    patience = check_patience(patience)
    if working_set.use_engine(engine, X, fit_intercept, solver=solver, screen=screen):
        sol = _working_set_cv(X, y, fold_ids, lambdas, loss=loss, tol=tol, max_steps=max_steps, patience=patience)
        sol = _units.restore(sol, units, unit_free=("gap", "duality_gap"))  # relative to the null deviance
    else:
        sol = _cv_jit(X, y, jnp.asarray(fold_ids), lambdas, settings, K=K, patience=patience)
        sol = _units.restore(sol, units)
    sol = void_single_class_folds(sol, fold_ids, K, y, loss)  # traced labels: check_folds_nonempty's twin
    return raise_if_failed(restore_intercept(sol, shift), throw)


# the working-set engine's stats with one entry per penalty (first axis), and its indices into the grid
_PER_LAMBDA = (
    "lambdas", "cv_error", "cv_mean", "cv_se", "coef_path", "intercept_path",
    "kkt_path", "steps_path", "working_set_path", "train_loss", "nnz",
)  # fmt: skip
_GRID_INDICES = ("lam_index", "lam_index_min", "lam_index_1se")


def _working_set_cv(X, y, fold_ids, lambdas, *, loss, tol, max_steps, patience) -> Solution:
    """:func:`lasso_cv` on the working-set engine, with :func:`lasso_cv`'s stats keys.

    The engine takes a decreasing grid: a concrete grid in another order (``np.logspace`` is increasing) is
    solved sorted, and its per-penalty stats and grid indices are returned in the given order, as the classic
    engine returns them (it was refused with "lambdas must be decreasing").
    """
    order = working_set.descending_order(lambdas)
    if order is not None:
        lambdas = lambdas[order]
    with _checks.trusted_values():  # lasso_cv checked X and y (the engine's device check was two programs more)
        sol = working_set.l1_cv(
            X,
            y,
            folds=np.asarray(fold_ids),
            lambdas=lambdas,
            loss=loss,
            tol=1e-5 if tol is None else tol,
            max_steps=10_000 if max_steps is None else max_steps,
            patience=10 if patience is None else patience,
            early_stop=patience is not None,
        )
    stats = dict(sol.stats, duality_gap=sol.stats["gap"])  # deprecated key, kept for one release
    if order is not None:
        inv = jnp.asarray(np.argsort(order))
        stats.update({k: stats[k][inv] for k in _PER_LAMBDA if k in stats})
        stats.update({k: jnp.asarray(order, jnp.int32)[stats[k]] for k in _GRID_INDICES if k in stats})
    return Solution(sol.value, sol.result, stats, sol.state)
