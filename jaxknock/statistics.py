r"""Knockoff feature statistics ``W``.

Every statistic here is built in two steps (chapter 1 of the knockoff notes):

1. a *swap-equivariant* score :math:`[z, \tilde z] = \zeta([X, \tilde X], y)`
   of the ``2p`` columns: swapping column ``j`` with its knockoff ``j + p``
   swaps :math:`z_j` and :math:`\tilde z_j` and leaves the others unchanged;
2. an *antisymmetric* combination :math:`W_j = a(z_j, \tilde z_j)` with
   :math:`a(u, v) = -a(v, u)`.

Together they give the *flip-sign* property the knockoff filter needs:
swapping ``j`` with its knockoff flips the sign of exactly :math:`W_j`.

Shapes: designs are ``Xk = [X, X~]`` of shape ``(n, 2p)`` -- originals
first, knockoff ``j`` in column ``j + p`` -- or a batch ``(..., n, 2p)``
(e.g. ``R`` knockoff replicates) sharing one response ``y`` of shape ``(n,)``;
statistics have shape ``(..., p)``. The lasso-based statistics (:func:`lcd`,
:func:`lsm`) run every design of a batch in one jitted call and return a
:class:`~jaxknock.Solution` whose ``value`` is ``W`` and whose ``result``
holds one code per design (non-convergence is never silent).

Multiple knockoffs (Gimenez & Zou 2019): with ``num_knockoffs=m > 1`` the
design is ``[X, X~1, ..., X~m]`` of width ``(m + 1) p`` (copy ``k`` in columns
``k p .. (k+1) p - 1``) and :func:`lcd`, :func:`lsm` and
:func:`marginal_correlation` return the per-copy scores ``Z`` of shape
``(..., m + 1, p)`` (row 0: the originals) instead of ``W``; combine them with
:func:`jaxknock.multi.multi_knockoff_statistics`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _aot, _checks, _precision
from jaxknock._scaling import pow2_exponent, scale_pow2
from jaxknock._solution import Solution, raise_if_failed
from jaxknock.l1 import _units
from jaxknock.l1 import working_set as _working_set
from jaxknock.l1.cv import check_patience, cv_solve
from jaxknock.l1.folds import check_folds_nonempty, resolve_folds, void_single_class_folds
from jaxknock.l1.path import path_solve
from jaxknock.l1.problem import as_lambdas, check_grid_settings, default_grid
from jaxknock.l1.settings import check_loss, make_settings
from jaxknock.l1.solvers import fit

__all__ = [
    "antisymmetric_combine",
    "lcd",
    "lsm",
    "marginal_correlation",
    "sparse_centroid",
]

COMBINE_METHODS = ("difference", "signed_max")
_HI = lax.Precision.HIGHEST


def antisymmetric_combine(Z, *, method: str = "difference"):
    r"""Combine scores of originals and knockoffs antisymmetrically.

    With :math:`z = Z_{..., :p}` and :math:`\tilde z = Z_{..., p:}`:

    * ``"difference"``: :math:`W_j = z_j - \tilde z_j`;
    * ``"signed_max"``: :math:`W_j = \max(z_j, \tilde z_j)\,\mathrm{sign}(z_j - \tilde z_j)`.

    Both satisfy :math:`a(u, v) = -a(v, u)`, so a swap-equivariant ``Z``
    yields a flip-sign ``W``.

    Args:
        Z: ``(..., 2p)`` scores, originals first.
        method: ``"difference"`` or ``"signed_max"``.

    Returns:
        ``(..., p)`` statistics.

    Example:
        >>> antisymmetric_combine(jnp.array([3.0, 1.0, 1.0, 2.0]), method="signed_max").tolist()
        [3.0, -2.0]
    """
    if method not in COMBINE_METHODS:
        raise ValueError(f"method must be one of {COMBINE_METHODS}, got {method!r}")
    Z = _checks.as_float_array(Z, "Z")
    if Z.ndim < 1 or Z.shape[-1] % 2:
        raise ValueError(f"Z must have an even last dimension 2p (originals then knockoffs), got shape {Z.shape}")
    p = Z.shape[-1] // 2
    z, zt = Z[..., :p], Z[..., p:]
    if method == "difference":
        return z - zt
    return jnp.maximum(z, zt) * jnp.sign(z - zt)


# ----------------------------------------------------------------------------
# Input handling
# ----------------------------------------------------------------------------


def _prepare(Xk, y, *, loss="squared", fit_intercept=True, binary=False, num_knockoffs=1):
    """Checks before tracing; returns (Xk as (R, n, (m+1)p), y, batch_shape)."""
    check_loss(loss)  # first: loss="huber" with a continuous y blamed y ("y must hold binary labels")
    if _checks.static_flag(fit_intercept, "fit_intercept"):
        # every statistic here with an intercept is invariant to a shift of the columns (and, least squares
        # and the correlation, of y): with x64 off a float64 host design loses its means in float64 before
        # JAX rounds it to float32, as in lasso / lasso_cv (Xk + 1e7 moved the correlation by 0.04, lcd by 0.1)
        Xk, y, _ = _precision.centre_for_fit(Xk, y, centre_y=loss == "squared" and not binary)
    m = _checks.check_num_knockoffs(num_knockoffs)
    Xk = _checks.as_float_array(Xk, "Xk", bools=True)
    if Xk.ndim < 2:
        raise ValueError(f"Xk must be a design [X, X~] of shape (n, 2p) or a batch (..., n, 2p), got shape {Xk.shape}")
    if m > 1 and (Xk.shape[-1] % (m + 1) or Xk.shape[-1] == 0):
        raise ValueError(
            f"Xk must hold (m+1) p columns for num_knockoffs = {m} (p originals then {m} blocks of p "
            f"knockoffs), got {Xk.shape[-1]}"
        )
    if m == 1 and (Xk.shape[-1] % 2 or Xk.shape[-1] == 0):
        raise ValueError(f"Xk must hold 2p columns (p originals then their p knockoffs), got {Xk.shape[-1]}")
    if Xk.shape[-2] < 2:
        raise ValueError(f"Xk needs at least 2 rows (samples), got shape {tuple(Xk.shape)}")
    y = _checks.as_response(y, Xk.dtype)
    _checks.check_ndim(y, 1, "y", "a 1-D array of shape (n_samples,)")
    if y.shape[0] != Xk.shape[-2]:
        raise ValueError(
            f"y has {y.shape[0]} entries but Xk has {Xk.shape[-2]} rows; they must describe the same samples"
        )
    _checks.check_finite_on_device(Xk, "Xk")  # never copies the (R, n, 2p) batch to the host
    _checks.check_finite_on_device(y, "y")
    if fit_intercept and loss == "squared" and not binary:  # y = 1e8 + e: a float32 cast kept a few levels of e
        y = _precision.shift_response_mean(y)
    y = y.astype(Xk.dtype)
    if binary:
        _checks.check_model_response(y, loss="logistic", fit_intercept=True)
        y = _checks.as_binary_labels(y, Xk.dtype)
    else:
        _checks.check_model_response(y, loss=loss, fit_intercept=fit_intercept)
        if loss == "logistic":
            y = _checks.as_binary_labels(y, Xk.dtype)
    batch_shape = Xk.shape[:-2]
    return Xk.reshape((-1,) + Xk.shape[-2:]), y, batch_shape


def _over_designs(fn, xs, solver):
    """Apply ``fn`` to each design: ``vmap`` for FISTA, ``lax.map`` for CD.

    Coordinate descent is a long chain of small sequential updates, so it runs
    one design at a time (its folds are still vmapped); the matrix-product
    iterations of FISTA batch (machine notes: ``benchmarks/measured/NOTES.md``,
    section l1).
    """
    if solver == "cd":
        return lax.map(fn, xs)
    return jax.vmap(fn)(xs)


def _unflatten(tree, batch_shape):
    return jax.tree_util.tree_map(lambda a: a.reshape(batch_shape + a.shape[1:]), tree)


# seed of the fixed direction u that orders each feature's copies (any data-independent u works)
_ORDER_SEED = 20261125


@functools.partial(jax.jit, static_argnames=("copies",))
def canonical_columns(Xk3, copies):
    """Each feature's ``copies`` columns in an order that does not depend on which copy is which.

    A lasso solver breaks ties by column position: a coordinate sweep updates
    column ``j`` before ``j + p``, a homotopy step adds the first of equally
    correlated columns. With a knockoff equal (or equal to rounding) to its
    original, e.g. ``s_j = 0``, the original then wins every tie and the null
    ``W_j`` is biased positive (40 null data sets: 19 positive, 3 negative at a
    fixed ``lam``). Here the copies of feature ``j`` are sorted by
    ``u^T x`` for a fixed random ``u`` (stable sort): swapping ``X_j`` and
    ``X~_j`` gives the same sorted design, so the fit is the same and the
    statistic flips sign exactly, ties included. Under the null the copies
    are exchangeable, so each is first with probability ``1 / copies``.

    Returns ``(design in the canonical order (R, n, m), the column of Xk3 in
    each slot (R, m), ties (R, copies, copies, p): copies with equal u^T x)``.
    """
    R, n, m = Xk3.shape
    p = m // copies
    u = jax.random.normal(jax.random.key(_ORDER_SEED), (n,), Xk3.dtype)
    proj = jnp.einsum("n,rnm->rm", u, Xk3, precision=_HI).reshape(R, copies, p)
    order = jnp.argsort(proj, axis=1, stable=True)  # the copy in each canonical slot
    cols = (order * p + jnp.arange(p)).reshape(R, m)
    ties = proj[:, :, None, :] == proj[:, None, :, :]
    return jnp.take_along_axis(Xk3, cols[:, None, :], axis=2), cols, ties


@jax.jit
def restore_columns(values, cols):
    """Per-column values ``(R, m)`` of the canonical design back in the column order of ``Xk``."""
    return jnp.zeros_like(values).at[jnp.arange(values.shape[0])[:, None], cols].set(values)


@functools.partial(jax.jit, static_argnames=("copies",))
def swap_invariant_scores(values, cols, ties, copies):
    """Scores ``(R, copies, p)`` of the restored values: ``|value|``, each averaged over its tie class.

    Copies with equal ``u^T x`` (identical columns) are interchangeable, so
    the flip-sign property asks for equal scores (``W_j = 0`` for one
    knockoff equal to its original).
    """
    R, m = values.shape
    z = jnp.abs(restore_columns(values, cols)).reshape(R, copies, m // copies)
    t = ties.astype(values.dtype)
    return jnp.einsum("rabp,rbp->rap", t, z) / jnp.sum(t, axis=2)


# ----------------------------------------------------------------------------
# Lasso-based statistics
# ----------------------------------------------------------------------------


def lcd(
    Xk,
    y,
    *,
    lam=None,
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
    num_knockoffs: int = 1,
) -> Solution:
    r"""Lasso coefficient difference :math:`W_j = |\hat\beta_j| - |\hat\beta_{j+p}|`.

    :math:`\hat\beta` is the lasso (``loss="squared"``) or l1-logistic
    (``loss="logistic"``) fit of ``y`` on ``Xk = [X, X~]`` (see
    :func:`jaxknock.lasso`), at the given ``lam`` or, when ``lam`` is
    ``None``, at the lambda chosen by K-fold cross-validation and refitted on
    all rows (:func:`jaxknock.lasso_cv`; the statistic of Candes et al.
    2018). The copies of each feature are fitted in an order fixed by the
    data (:func:`canonical_columns`), so swapping ``X_j`` with ``X~_j``
    gives the same fit and ``W`` has the flip-sign property exactly, ties
    included (a knockoff equal to its original gets ``W_j = 0``).

    Args:
        Xk: ``(n, 2p)`` design or ``(..., n, 2p)`` batch of designs.
        y: ``(n,)`` response (labels for ``loss="logistic"``).
        lam: fixed penalty -- a scalar or one per design (broadcast to the
            batch shape ``...``; e.g. a fraction of each design's
            ``lambda_max``, which is swap-invariant) -- or ``None`` for
            cross-validation. With a ``lam``, the cross-validation's own settings
            (``lambdas``, ``patience``, ``folds``, ``engine="working_set"``) are refused,
            not ignored.
        folds, lambdas, num_lambdas, eps: cross-validation folds and grid
            (per design by default), see :func:`jaxknock.lasso_cv`.
        loss, fit_intercept, tol, max_steps, solver, screen: solver settings,
            see :func:`jaxknock.lasso`.
        patience: early stop of the cross-validation path (see
            :func:`jaxknock.lasso_cv`); ``None`` solves the whole grid.
            It depends on CV errors only, which are swap-invariant, so the
            flip-sign property is kept.
        engine: the cross-validation engine. ``"working_set"``: the
            working-set path engine :func:`jaxknock.l1.working_set.l1_cv`
            (exact homotopy for the squared loss when ``n >= 2p/4``, strong
            rules and a KKT check over every feature, CV-driven early stop
            with ``patience`` (default 10 there); every replicate, fold and
            the refit in one batched path; ``tol`` is its relative KKT
            tolerance, default 1e-5, and ``max_steps`` its per-solve cap,
            default 10000). ``"classic"``: the fixed-step engine
            :func:`jaxknock.lasso_cv`. ``"auto"`` (default): the same rule as
            :func:`jaxknock.lasso_cv` (:func:`jaxknock.l1.working_set.use_engine`):
            ``"working_set"`` for cross-validation with an intercept, the
            default ``solver="auto"`` and ``screen=True`` outside a ``jit``
            trace (the engine grows its working-set capacity on the host), in
            float32 as in float64; else ``"classic"``, which is also the one
            that honours an explicit ``solver`` / ``screen``. Both target the
            same lambda and support as a tight solve.
        throw: raise ``RuntimeError`` if any solve failed.
        num_knockoffs: ``m``; for ``m > 1`` ``Xk`` is ``[X, X~1..X~m]``
            (width ``(m+1) p``) and ``value`` holds the scores
            ``Z = |beta|`` reshaped to ``(..., m + 1, p)`` (module docstring).

    Returns:
        :class:`~jaxknock.Solution` with ``value`` the statistics
        ``(..., p)``, ``result`` codes ``(...)`` and ``stats`` holding
        ``coef`` ``(..., 2p)``, ``lam`` ``(...)`` (the penalty used) and
        ``num_steps`` ``(...)``; with the working-set engine (the default CV
        path) also ``float64_refit`` ``(...)``, true where a float32 design
        failed its certificate and was solved again in float64
        (:func:`jaxknock.l1.working_set.l1_cv`).

    Units (least squares): the fits run on ``Xk / 2^{e_X}``, ``y / 2^{e_y}`` (one exponent for the whole batch,
    ``max |.|`` brought into ``[0.5, 1)``, :mod:`jaxknock.l1._units`) and ``W``, ``coef``, ``lam`` come back in
    the caller's units (``W`` scales as ``c_y / c_X``), the same to the bit where the units were harmless.

    Example:
        >>> key1, key2 = jax.random.split(jax.random.key(0))
        >>> Xk = jax.random.normal(key1, (3, 80, 10))  # 3 replicates, p = 5
        >>> y = Xk[0, :, 0] + 0.1 * jax.random.normal(key2, (80,))
        >>> lcd(Xk, y, lam=0.05).value.shape
        (3, 5)
    """
    Xk3, y, batch_shape = _prepare(Xk, y, loss=loss, fit_intercept=fit_intercept, num_knockoffs=num_knockoffs)
    settings = make_settings(
        Xk3.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol, max_steps=max_steps
    )
    copies = int(num_knockoffs) + 1
    n, m = Xk3.shape[1:]
    Xk3, cols, ties = _aot.call(canonical_columns, Xk3, copies=copies)  # exact flip-sign property, ties included
    Xk3, y_unit, units = _units.scale_data(Xk3, y, loss)  # one exponent for the batch (jaxknock.l1._units)
    if lam is not None:
        # the cross-validation's settings do nothing at a given lam: refused rather than ignored
        ignored = [k for k, v in (("lambdas", lambdas), ("patience", patience)) if v is not None]
        ignored += ["engine"] if engine == "working_set" else []
        ignored += ["folds"] if not (_checks.is_int(folds) and folds == 5) else []
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)} set the cross-validation, which a given lam skips: pass lam=None to "
                f"cross-validate, or leave {', '.join(ignored)} at the default"
            )
        _checks.check_lam(lam)  # as given: jnp.asarray made lam=True the penalty 1.0 and lam="0.1" 0.1
        lam = jnp.asarray(lam, Xk3.dtype)
        try:
            lam = jnp.broadcast_to(lam, batch_shape).reshape(-1)
        except ValueError:
            raise ValueError(
                f"lam must be a scalar or broadcast to the batch shape {batch_shape}, got shape {lam.shape}"
            ) from None
        _checks.check_lam(lam)
        sol = _aot.call(_lcd_fixed_jit, Xk3, y_unit, _units.to_unit(lam, units, "lam"), settings)
    else:
        fold_ids, K = resolve_folds(n, folds, y, loss)
        check_folds_nonempty(fold_ids, K, y, loss)
        # checked for both engines: the working-set engine takes patience and num_lambdas as static settings
        # (an array was a JAX hashing error, 0 or 2.5 ran unchecked) and ran an inf penalty
        patience = check_patience(patience)
        if lambdas is None:
            num_lambdas = check_grid_settings(num_lambdas, eps)
        else:
            lambdas = as_lambdas(lambdas, Xk3.dtype)
            lambdas = _units.to_unit(lambdas, units, "lam")
        if _working_set.use_engine(engine, Xk3, fit_intercept, solver=solver, screen=screen):
            order = _working_set.descending_order(lambdas)  # the engine takes it sorted (the choice is order-free)
            if order is not None:
                lambdas = lambdas[order]
            with _checks.trusted_values():  # _prepare checked Xk and y (the engine's device check: two programs more)
                ws = _working_set.l1_cv(
                    Xk3,
                    jnp.broadcast_to(y_unit, Xk3.shape[:2]),
                    folds=fold_ids,
                    lambdas=lambdas,
                    num_lambdas=num_lambdas,
                    eps=eps,
                    loss=loss,
                    tol=1e-5 if tol is None else tol,
                    max_steps=10_000 if max_steps is None else max_steps,
                    patience=10 if patience is None else patience,
                )
            stats = {
                "lam": ws.stats["lam"],
                "num_steps": ws.stats["num_steps"],
                "float64_refit": jnp.asarray(ws.stats["float64_refit"]),
            }
            sol = Solution(value=ws.value, result=ws.result, stats=stats)
        else:
            sol = _lcd_cv_jit(
                Xk3,
                y_unit,
                jnp.asarray(fold_ids),
                lambdas,
                settings,
                K=K,
                num_lambdas=num_lambdas,
                eps=float(eps),
                patience=patience,
            )
        sol = void_single_class_folds(sol, fold_ids, K, y, loss)  # traced labels: check_folds_nonempty's twin
    sol = _units.restore(_aot.call(_lcd_statistics, sol, cols, ties, copies=copies), units)
    return raise_if_failed(_unflatten(sol, batch_shape), throw)


@functools.partial(jax.jit, static_argnames=("copies",))
def _lcd_statistics(sol, cols, ties, copies):
    """``W`` (or the per-copy scores for ``copies > 2``) from the coefficients ``sol.value`` of the canonical design."""
    Z = swap_invariant_scores(sol.value, cols, ties, copies)
    W = Z if copies > 2 else Z[:, 0] - Z[:, 1]
    return Solution(W, sol.result, {"coef": restore_columns(sol.value, cols), **sol.stats})


@jax.jit
def _lcd_fixed_jit(Xk3, y, lams, settings):
    def one(args):
        X, lam = args
        sol = fit(X, y, lam, jnp.zeros(X.shape[1], X.dtype), settings)
        return Solution(value=sol.value, result=sol.result, stats={"lam": lam, "num_steps": sol.stats["num_steps"]})

    return _over_designs(one, (Xk3, lams), settings.solver)


@functools.partial(jax.jit, static_argnames=("K", "num_lambdas", "patience"))
def _lcd_cv_jit(Xk3, y, fold_ids, lambdas, settings, *, K, num_lambdas, eps, patience=None):
    def one(X):
        grid = lambdas
        if grid is None:
            grid = default_grid(X, y, settings, num=num_lambdas, eps=eps)
        sol = cv_solve(X, y, fold_ids, grid, settings, K=K, patience=patience)
        stats = {"lam": sol.stats["lam"], "num_steps": sol.stats["num_steps"]}
        return Solution(value=sol.value, result=sol.result, stats=stats)

    return _over_designs(one, Xk3, settings.solver)


def lsm(
    Xk,
    y,
    *,
    lambdas=None,
    num_lambdas: int = 200,
    eps: float = 1e-3,
    loss: str = "squared",
    fit_intercept: bool = True,
    tol: float | None = None,
    max_steps: int | None = None,
    solver: str = "auto",
    screen: bool = True,
    throw: bool = False,
    num_knockoffs: int = 1,
    engine: str = "auto",
) -> Solution:
    r"""Lasso signed max: :math:`W_j = \max(Z_j, Z_{j+p})\,\mathrm{sign}(Z_j - Z_{j+p})`.

    :math:`Z_k = \sup\{\lambda : \hat\beta_k(\lambda) \ne 0\}` is the penalty
    at which column ``k`` enters the lasso path (Barber & Candes 2015),
    evaluated on a decreasing grid (the largest grid value with a nonzero
    coefficient; ``0`` if the column never enters). A finer grid gives fewer
    ties (``W_j = 0``).

    An entry-order statistic: on correlated designs a knockoff of a null that is
    correlated with a signal can enter the path early, and a few large negative
    ``W_j`` stop knockoff+ at ``q = 0.1`` (session 58, ``bench_power_designs.py``:
    blocks correlated 0.6-0.7, ``lsm`` selected nothing on 30 of 30 and 8 of 8 data
    sets where :func:`lcd`, the default of :func:`jaxknock.knockoff_filter`, had
    power 0.34-0.80). Prefer :func:`lcd` unless the entry order is what is wanted.

    Args:
        Xk: ``(n, 2p)`` design or ``(..., n, 2p)`` batch.
        y: ``(n,)`` response or labels.
        lambdas: decreasing ``(L,)`` grid; default ``num_lambdas`` values from
            ``lambda_max`` to ``eps * lambda_max`` per design.
        loss, fit_intercept, tol, max_steps, solver, screen, throw: see :func:`lcd`.
        num_knockoffs: ``m``; for ``m > 1`` ``value`` holds the entry
            penalties ``Z`` reshaped to ``(..., m + 1, p)``.
        engine: the path solver. ``"auto"`` (default): the working-set engine
            :func:`jaxknock.l1.working_set.l1_path` (exact homotopy for the
            squared loss, KKT-certified; ``tol`` its relative KKT tolerance,
            default 1e-5) whenever it applies: an intercept, ``solver`` /
            ``screen`` at their defaults, concrete input (under ``jit`` /
            ``vmap`` the classic engine runs). ``"classic"``: warm-started
            solves along the grid (:func:`jaxknock.lasso_path`'s classic
            engine), which on correlated designs takes up to 100x longer
            (session 59: 400 x 200 AR(1) 0.9). The default grid is the same
            for both (``lambda_max`` of each design).

    Returns:
        :class:`~jaxknock.Solution` with ``value`` ``W`` ``(..., p)``,
        ``result`` ``(...)`` (worst code along the path) and ``stats`` with
        ``entry`` ``(..., 2p)`` (the ``Z`` scores) and ``num_steps``. Fitted on the unit scale as
        :func:`lcd`; ``W`` and ``entry`` are penalties in the caller's units (``c_X c_y``).

    Example:
        >>> key1, key2 = jax.random.split(jax.random.key(0))
        >>> Xk = jax.random.normal(key1, (80, 10))
        >>> y = Xk[:, 0] + 0.1 * jax.random.normal(key2, (80,))
        >>> W = lsm(Xk, y, num_lambdas=30).value
        >>> int(jnp.argmax(W))
        0
    """
    Xk3, y, batch_shape = _prepare(Xk, y, loss=loss, fit_intercept=fit_intercept, num_knockoffs=num_knockoffs)
    settings = make_settings(
        Xk3.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol, max_steps=max_steps
    )
    if lambdas is not None:
        lambdas = as_lambdas(lambdas, Xk3.dtype)
        if _checks.is_concrete(lambdas) and np.any(np.diff(np.asarray(lambdas)) > 0):
            raise ValueError("lambdas must be in decreasing order for the signed-max statistic")
    else:
        num_lambdas = check_grid_settings(num_lambdas, eps)
    copies = int(num_knockoffs) + 1
    # exact flip-sign property, ties included (see lcd)
    Xk3, cols, ties = _aot.call(canonical_columns, Xk3, copies=copies)
    Xk3, y, units = _units.scale_data(Xk3, y, loss)  # one exponent for the batch (jaxknock.l1._units)
    lambdas = _units.to_unit(lambdas, units, "lam")
    if _working_set.use_path_engine(
        engine, Xk3, y, lambdas, fit_intercept, solver=solver, screen=screen, max_steps=max_steps
    ):
        sol = _lsm_working_set(Xk3, y, lambdas, num_lambdas, eps, loss=loss, tol=tol, max_steps=max_steps)
    else:
        sol = _aot.call(_lsm_jit, Xk3, y, lambdas, settings, float(eps), num_lambdas=num_lambdas)
    sol = _units.restore(_aot.call(_lsm_statistics, sol, cols, ties, copies=copies), units, value_kind="lam")
    return raise_if_failed(_unflatten(sol, batch_shape), throw)


@functools.partial(jax.jit, static_argnames="num_lambdas")  # eps traced: a new depth compiles nothing
def _lsm_jit(Xk3, y, lambdas, settings, eps, *, num_lambdas):
    """Entry penalties ``(R, m)`` of the columns of each design (``value``), worst code along each path."""

    def one(X):
        grid = lambdas
        if grid is None:
            grid = default_grid(X, y, settings, num=num_lambdas, eps=eps)
        path = path_solve(X, y, grid, settings)
        coefs, codes, stats = path.value, path.result, path.stats
        entry = jnp.max(jnp.where(coefs != 0, grid[:, None], 0.0), axis=0)
        return Solution(value=entry, result=jnp.max(codes), stats={"num_steps": jnp.sum(stats["num_steps"])})

    return _over_designs(one, Xk3, settings.solver)


def _lsm_working_set(Xk3, y, lambdas, num_lambdas, eps, *, loss, tol, max_steps) -> Solution:
    """Entry penalties ``(R, m)`` of the columns of each design on the working-set engine (one batched call).

    With ``lambdas=None`` the engine draws each design's default grid (``num_lambdas`` geometric steps from its
    ``lambda_max`` to ``eps`` times it, as :func:`_lsm_jit`) and reports it in ``stats["lambdas"]``.
    """
    R, n = Xk3.shape[0], Xk3.shape[1]
    with _checks.trusted_values():  # _prepare checked Xk and y (the engine's device check: two programs more)
        path = _working_set.l1_path(
            Xk3,
            jnp.broadcast_to(y, (R, n)),
            lambdas,
            num_lambdas=num_lambdas,
            eps=eps,
            loss=loss,
            tol=1e-5 if tol is None else tol,
            max_steps=10_000 if max_steps is None else max_steps,
        )
    return _path_entries(path.stats["coef_path"], path.stats["lambdas"], path.result, path.stats["steps_path"])


@jax.jit
def _path_entries(coefs, grids, result, steps):
    """``Z_k``: the largest grid penalty at which column ``k`` is nonzero (0 if never), per design."""
    entry = jnp.max(jnp.where(coefs != 0, grids[..., None], 0.0), axis=-2)
    return Solution(value=entry, result=result, stats={"num_steps": jnp.sum(steps, axis=-1)})


@functools.partial(jax.jit, static_argnames=("copies",))
def _lsm_statistics(sol, cols, ties, copies):
    """Signed-max ``W`` (or the per-copy entry penalties for ``copies > 2``) in the column order of ``Xk``."""
    Z = swap_invariant_scores(sol.value, cols, ties, copies)
    W = Z if copies > 2 else antisymmetric_combine(Z.reshape(Z.shape[0], -1), method="signed_max")
    return Solution(W, sol.result, {"entry": restore_columns(sol.value, cols), **sol.stats})


# ----------------------------------------------------------------------------
# Closed-form statistics
# ----------------------------------------------------------------------------


def marginal_correlation(Xk, y, *, method: str = "difference", num_knockoffs: int = 1):
    r"""Marginal correlation statistic :math:`W_j = a(|r_j|, |r_{j+p}|)`.

    :math:`r_k` is the Pearson correlation of column ``k`` with ``y``;
    ``a`` is :func:`antisymmetric_combine` with ``method``. Columns with zero
    variance get score 0.

    Args:
        Xk: ``(n, 2p)`` design or ``(..., n, 2p)`` batch.
        y: ``(n,)`` response (not constant).
        method: ``"difference"`` (default) or ``"signed_max"``.
        num_knockoffs: ``m``; for ``m > 1`` the scores ``|r|`` of
            ``[X, X~1..X~m]`` as ``(..., m + 1, p)`` (``method`` unused).

    Returns:
        ``(..., p)`` statistics.

    Example:
        >>> Xk = jnp.array([[1.0, 0.0], [2.0, 1.0], [3.0, 0.0]])
        >>> marginal_correlation(Xk, jnp.array([1.0, 2.0, 3.0])).round(4).tolist()
        [1.0]
    """
    Xk3, y, batch_shape = _prepare(Xk, y, num_knockoffs=num_knockoffs)
    W = _marginal_jit(Xk3, y, method=method, copies=int(num_knockoffs) + 1)
    return W.reshape(batch_shape + W.shape[1:])


@functools.partial(jax.jit, static_argnames=("method", "copies"))
def _marginal_jit(Xk3, y, *, method, copies=2):
    # the correlation does not depend on the units of a column or of y, but its sums of squares do: a column
    # (or y) in units of 1e20 or 1e-20 overflowed or flushed to zero in float32 (1e160 in float64) and scored 0;
    # each is first scaled by an exact power of two to a maximum magnitude in [0.5, 1)
    Xk3 = scale_pow2(Xk3, -pow2_exponent(jnp.max(jnp.abs(Xk3), axis=-2, keepdims=True)))
    y = scale_pow2(y, -pow2_exponent(jnp.max(jnp.abs(y))))
    Xc = Xk3 - jnp.mean(Xk3, axis=-2, keepdims=True)
    yc = y - jnp.mean(y)
    cov = jnp.einsum("rnm,n->rm", Xc, yc, precision=_HI)
    norms = jnp.linalg.norm(Xc, axis=-2) * jnp.linalg.norm(yc)
    # zero variance: 0; a NaN in y or X (unseen under jit) stays NaN instead of reading as 'no correlation'
    corr = jnp.where(norms == 0, 0.0, cov / jnp.where(norms == 0, 1.0, norms))
    if copies > 2:
        return jnp.abs(corr).reshape(corr.shape[0], copies, -1)
    return antisymmetric_combine(jnp.abs(corr), method=method)


def sparse_centroid(Xk, y):
    r"""Sparse centroid classifier statistic (eq. 4.13 of the factor-model SDP notes).

    The l0-penalised nearest-centroid problem

    .. math::

        \min_{\theta^+, \theta^-} \frac{1}{n_+}\sum_{i \in I^+}\|x_i - \theta^+\|^2
        + \frac{1}{n_-}\sum_{i \in I^-}\|x_i - \theta^-\|^2
        + \lambda \|\theta^+ - \theta^-\|_0

    separates over features: keeping :math:`\theta^+_k \ne \theta^-_k` costs
    :math:`\lambda` and saves :math:`(\bar x^+_k - \bar x^-_k)^2 / 2` (the
    shared optimum is the midpoint of the class means), so feature ``k`` is
    used exactly when :math:`\lambda < Z_k = (\bar x^+_k - \bar x^-_k)^2 / 2`.
    The statistic is :math:`W_j = |Z_j| - |Z_{j+p}|`, in squared units of
    column ``j``: computed on the pair scaled by a power of two, it is exact to
    rounding wherever it is a normal float, else the signed ``inf`` (or 0).

    Args:
        Xk: ``(n, 2p)`` design or ``(..., n, 2p)`` batch.
        y: ``(n,)`` binary labels (``{0, 1}``, ``{-1, 1}`` or bool).

    Returns:
        ``(..., p)`` statistics.

    Example:
        >>> Xk = jnp.array([[0.0, 1.0], [2.0, 1.0], [4.0, 3.0], [6.0, 3.0]])
        >>> sparse_centroid(Xk, jnp.array([0, 0, 1, 1])).tolist()
        [6.0]
    """
    Xk3, y, batch_shape = _prepare(Xk, y, binary=True)
    W = _centroid_jit(Xk3, y)
    return W.reshape(batch_shape + W.shape[1:])


@jax.jit
def _centroid_jit(Xk3, y):
    # Z is in squared units of its column: a column (with its knockoff) in units of 1e20 overflowed in float32
    # (inf - inf: W NaN), and in units of 1e-18 lost the digits of diff**2 near the smallest normal. Each pair
    # (X_j, X~_j) is scaled by one exact power of two 2^-e_j (max magnitude in [0.5, 1)) and W_j by 4^e_j after
    # the difference: the same bits where nothing over- or underflows, otherwise the sign-correct +-inf (or 0
    # below float's smallest normal)
    p = Xk3.shape[-1] // 2
    top = jnp.max(jnp.abs(Xk3), axis=-2)
    e = pow2_exponent(jnp.maximum(top[:, :p], top[:, p:]))
    Xk3 = scale_pow2(Xk3, -jnp.concatenate([e, e], axis=-1)[:, None, :])
    pos = y / jnp.sum(y)
    neg = (1.0 - y) / jnp.sum(1.0 - y)
    diff = jnp.einsum("rnm,n->rm", Xk3, pos - neg, precision=_HI)
    Z = 0.5 * diff**2
    return scale_pow2(antisymmetric_combine(jnp.abs(Z), method="difference"), 2 * e)
