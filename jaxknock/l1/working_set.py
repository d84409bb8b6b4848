r"""A working-set lasso / l1-logistic path and K-fold cross-validation engine in pure JAX.

The default cross-validation engine of :func:`~jaxknock.lcd` (and so of
:func:`~jaxknock.knockoff_filter`); timings against adelie and scikit-learn
are in ``benchmarks/bench_statistics.py`` and ``benchmarks/measured/NOTES.md``.

Every fit solves, for a decreasing grid :math:`\lambda_1 > \dots > \lambda_L`,

.. math::

    \min_{\beta_0,\ \beta}\; \frac{1}{n_f}\sum_{i \in \mathcal{T}_f}
        f(\beta_0 + x_i^\top\beta;\ y_i) + \lambda\,\|\beta\|_1,

with the squared loss :math:`f(z; y) = \tfrac12 (y - z)^2` (scikit-learn's
``Lasso(alpha=lam)``) or the logistic loss :math:`f(z; y) = \log(1 + e^z) - y z`,
``y`` in ``{0, 1}`` (``LogisticRegression(l1_ratio=1, C=1/(n_f lam))`` with an
unpenalised intercept). The rows :math:`\mathcal{T}_f` are the ``K`` training
folds and, as member ``K``, all rows (the refit). All members run *together*
along one path, so the path loop, the strong-rule screening and the KKT checks
are shared, and every ``O(n m)`` product is one matrix-matrix product for all
folds. Design (see the notes of glmnet, adelie, celer/skglm):

* **working sets** of static capacity ``W`` (grown on the host and re-run when exceeded,
  :func:`jaxknock._capacity.next_capacity` and ``headroom``): the sequential strong rule
  :math:`|g_j(\hat\beta_{k-1})| \ge 2\lambda_k - \lambda_{k-1}` proposes features
  (the top chunk of them, and those whose gradient, extrapolated linearly
  from the last two grid solutions, comes within 3% of :math:`\lambda_k`),
  coordinate descent with active-set cycling solves the working-set problem,
  and a KKT check on *all* features (:math:`|g_j| \le \lambda`) adds the
  violators and resumes; at exit every member is KKT-optimal;
* **exact homotopy** (squared loss, every shape: the default
  ``method="homotopy"``): between two grid penalties every member follows
  its piecewise-linear solution path (LARS-lasso), one rank-one update of
  the active Gram inverse per kink, on the cached Gram block; the grid
  solutions are exact up to rounding (KKT residuals ~1e-13), see
  ``jaxknock.l1._ws_homotopy``. Its ``A`` active slots per member start at
  ``0.45 W``, at least 256 (:func:`jaxknock._capacity.slots_for`; a whole grid,
  ``early_stop=False``: at ``min(W + chunk, n + 1)``, all an active set
  can use, :func:`jaxknock._capacity.start_slots`) and grow by a quarter when a member
  fills them; a design run alone or in a sequential batch runs a grid step on half of
  them while they hold its active sets;
* **covariance updates** (``method="cov"``): only the Gram
  columns of the working set are formed, from per-fold block products (one
  product serves all ``K + 1`` members), and each coordinate update is
  ``O(W)``; the KKT check is two products with the design, ``M`` right-hand sides
  (see ``jaxknock.l1._ws_covariance``);
* **naive updates** (logistic loss; squared loss when asked for, or when the
  homotopy's ``(W + chunk)^2`` Gram cache per member would not fit in a quarter
  of free memory):
  the working-set columns are gathered once; proximal Newton (IRLS) outer
  steps, each a weighted coordinate-descent solve of the quadratic model on
  the working set; KKT check by one ``X^T R`` product for all members (see
  ``jaxknock.l1._ws_naive``);
* **early exits**: the path stops (remaining ``cv_error`` are ``inf``) when
  the full-data deviance ratio exceeds 0.999 or improves by less than a
  relative ``1e-5`` (glmnet's rule, from the 5th lambda on), and, for
  cross-validation, when the mean CV error has not improved on its best for
  ``patience`` lambdas *and* lies more than one standard error above it
  (the minimum and the one-standard-error choice cannot move after that
  unless the error curve turns down again, which a lasso CV curve past its
  minimum essentially never does). ``early_stop=False`` solves the whole grid
  exactly like scikit-learn.

Accuracy target: the same lambda and the same support as a tight solve.
The homotopy engine is exact between kinks (no tolerance to tune; after
one step of iterative refinement the result is certified by the KKT check
over all features and is ``successful`` only if the largest relative
violation is below ``max(tol, 1e-6, 1000 eps)``, ``eps`` the machine
epsilon of the design's dtype: 1.2e-4 in float32). A coordinate-descent
solve stops when, after a sweep over the whole working set, every coordinate meets its KKT condition to ``tol * lambda``
(:math:`\mathrm{dist}(g_j, \lambda\,\partial|\beta_j|) \le \mathrm{tol}\,\lambda`,
default ``tol=1e-5``); with the KKT check on the other features this
certifies every solved lambda of every member. ``stats["kkt"]`` reports the
largest relative violation over all members and solved lambdas, and
``stats["gap"]`` the duality gap of the refit at the chosen lambda (relative
to the null deviance). In the covariance engine the coordinate sweeps over
the nonzeros are followed by an *active-set Newton step*: conjugate
gradients on ``G_AA b_A = q_A - lambda s_A`` (the minimiser on the current
orthant), taken up to the first sign change, which removes coordinate
descent's slow tail on correlated designs.

Everything is written for one design: pass ``X`` of shape ``(R, n, m)`` and
``y`` of shape ``(R, n)`` for ``R`` replicates, one compiled program that
runs them one after another (``batch_mode="sequential"``, the CPU default:
each replicate's caches stay in the processor cache) or, homotopy engine, in
lock step (``"lockstep"``, the accelerator default: one path loop whose every
kink is one batched step for all replicates; the loops are
:func:`jaxknock._iterate.lockstep_while_loop`, so no carry is copied; when the
caches of all replicates would take more than a quarter of free memory, the
lock step runs on balanced chunks of replicates, one chunk after another). In a
sequential batch a replicate that outgrows the batch's capacity runs again
alone at its own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks, _containers
from jaxknock._solution import RESULTS, Solution
from jaxknock.l1 import _units
from jaxknock.l1 import _ws_driver as _driver
from jaxknock.l1._ws_driver import cache_chunk, descending_order
from jaxknock.l1.folds import (
    check_folds_nonempty,
    refuse_traced_folds,
    stratified_kfold_ids,
    void_single_class_folds,
)
from jaxknock.l1.problem import centre_on_host, check_grid_settings, restore_intercept

__all__ = [
    "cache_chunk",
    "descending_order",
    "l1_cv",
    "l1_path",
    "fold_rows",
    "member_paths",
    "use_engine",
    "use_path_engine",
]


def fold_rows(folds, n: int):
    """Fold ids and the block layout of the rows.

    ``folds`` is an integer ``K`` (contiguous folds, scikit-learn's
    ``KFold(K)``: the first ``n % K`` folds get one extra row) or an ``(n,)``
    array of fold ids ``0..K-1``. Returns ``(ids, rows)`` with ``rows`` a
    ``(K, r)`` int array of row indices per fold, padded with ``n``.
    """
    refuse_traced_folds(folds)
    if _checks.is_int(folds):
        K = int(folds)
        if K < 2 or K > n:
            raise ValueError(f"folds must be in [2, n={n}], got {K}")
        sizes = np.full(K, n // K)
        sizes[: n % K] += 1
        ids = np.repeat(np.arange(K), sizes)
    else:
        ids = np.asarray(_containers.host_numeric(folds, "folds"))  # a masked fold id is refused, not read
        if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"folds must be an int or an ({n},) integer array of fold ids, got {ids.shape}")
        K = int(ids.max()) + 1
        if ids.min() < 0 or np.any(np.bincount(ids, minlength=K) == 0):
            raise ValueError("fold ids must be 0..K-1 with every fold non-empty")
    counts = np.bincount(ids, minlength=K)
    r = int(counts.max())
    rows = np.full((K, r), n, np.int32)
    for k in range(K):
        w = np.flatnonzero(ids == k)
        rows[k, : w.size] = w
    return ids, rows


def _stratified_folds(y, folds):
    """Stratified fold ids of the labels (one ``(n,)`` row, or ``(R, n)`` equal rows)."""
    if not _checks.is_concrete(y):
        raise ValueError(
            "integer folds with loss='logistic' are stratified by the labels, which are traced here; "
            "pass an (n,) array of fold ids"
        )
    labels = np.asarray(jax.device_get(y)).reshape(-1, y.shape[-1])
    if np.any(labels != labels[:1]):
        raise ValueError(
            "integer folds with loss='logistic' are stratified by the labels, which differ between "
            "the rows of y; pass an (n,) array of fold ids"
        )
    return stratified_kfold_ids(labels[0], folds)


def _check_settings(tol, max_steps, patience, early_stop, max_features, throw):
    """The engine's host settings, checked and named (``(tol, max_steps, patience, early_stop, max_features,
    throw)``). A ``tol`` of ``inf`` certified any iterate, ``-1`` / ``NaN`` ran, ``max_steps=2.5`` /
    ``patience=0`` ran as given, ``early_stop="no"`` failed inside JAX, ``max_features=-3`` / ``2.5`` failed in
    an array update. A traced ``tol`` is data: one that is not positive and finite is solved at ``tol = 1``
    (``NaN`` or ``0`` ran every penalty to ``max_steps``) and :func:`_flag_traced_input` voids the answer."""
    if isinstance(tol, jax.core.Tracer):
        tol = jnp.where(jnp.isfinite(tol) & (tol > 0), tol, jnp.ones((), tol.dtype))
    else:
        tol = _checks.check_real(tol, "tol", strict=True)
    max_steps = _checks.check_count(max_steps, "max_steps", minimum=0)
    patience = _checks.check_count(patience, "patience")
    early_stop = _checks.static_flag(early_stop, "early_stop")
    if max_features is not None:
        max_features = _checks.check_count(max_features, "max_features")
    return tol, max_steps, patience, early_stop, max_features, _checks.static_flag(throw, "throw")


def _check_folds(folds, y, loss, n):
    """``(ids, rows)`` of :func:`fold_rows`; at least two folds and, for the logistic loss, both classes in every
    training fold (as :func:`jaxknock.lasso_cv`). One fold id (``folds=np.zeros(n)``) left its only member
    no rows (``max_steps_reached``); a training fold of one class was a `successful` CV."""
    ids, rows = fold_rows(folds, n)
    K = rows.shape[0]
    if K < 2:
        raise ValueError(f"folds must hold at least 2 distinct fold ids, got {K}")
    if loss == "logistic" and _checks.is_concrete(y):
        labels = np.asarray(jax.device_get(y)).reshape(-1, n)
        for row in {r.tobytes(): r for r in labels}.values():
            check_folds_nonempty(ids, K, row, loss)
    return ids, rows


def use_engine(engine, X, fit_intercept, *, solver="auto", screen=True) -> bool:
    """Whether a caller's ``engine`` (``"auto"``, ``"working_set"`` or ``"classic"``) picks this engine.

    ``"auto"`` picks it whenever it applies: an intercept is fitted, the classic
    solver's ``solver`` / ``screen`` are left at their defaults, and ``X`` is
    concrete (the capacity retries need values, so under ``jit`` / ``vmap`` the
    classic engine runs). ``"working_set"`` without an intercept is an error.

    Example:
        >>> X = jnp.ones((10, 3))
        >>> use_engine("auto", X, True), use_engine("auto", X, True, solver="fista"), use_engine("classic", X, True)
        (True, False, False)
    """
    _checks.check_choice(engine, ("auto", "working_set", "classic"), "engine")
    if engine == "working_set" and not fit_intercept:
        raise ValueError("engine='working_set' always fits an intercept; use engine='classic' with fit_intercept=False")
    if engine == "working_set" and (solver != "auto" or not screen):
        # the engine has its own solvers and screening: the classic solver's settings were silently ignored
        raise ValueError(
            f"engine='working_set' has its own solver and screening (solver={solver!r}, screen={screen!r} "
            "are the classic engine's); use engine='classic' for them"
        )
    if engine == "auto":
        return fit_intercept and solver == "auto" and screen and not isinstance(X, jax.core.Tracer)
    return engine == "working_set"


def use_path_engine(engine, X, y, lambdas, fit_intercept, *, solver="auto", screen=True, max_steps=1) -> bool:
    """:func:`use_engine` for a path on a caller's grid (:func:`jaxknock.lasso_path`, :func:`jaxknock.lsm`).

    ``"auto"`` also needs ``y`` and ``lambdas`` concrete (the engine sorts and checks
    the grid on the host) and ``max_steps != 0`` (``max_steps=0`` certifies the
    start, which only the classic engine reports).

    Example:
        >>> X, y = jnp.ones((10, 3)), jnp.ones(10)
        >>> use_path_engine("auto", X, y, None, True), use_path_engine("auto", X, y, None, True, max_steps=0)
        (True, False)
    """
    use = use_engine(engine, X, fit_intercept, solver=solver, screen=screen)
    if engine == "auto":
        use = use and all(_checks.is_concrete(a) for a in (y, lambdas)) and max_steps != 0
    return use


def l1_cv(
    X,
    y,
    *,
    folds=5,
    lambdas=None,
    num_lambdas: int = 100,
    eps: float = 1e-3,
    loss: str = "squared",
    rule: str = "min",
    tol: float = 1e-5,
    max_steps: int = 10_000,
    patience: int = 10,
    early_stop: bool = True,
    method: str = "auto",
    max_features: int | None = None,
    throw: bool = False,
    batch_mode: str = "auto",
) -> Solution:
    r"""K-fold cross-validated lasso / l1-logistic regression, refitted on all rows.

    Solves the problem of the module docstring for every training fold and
    for all rows along the grid ``lambdas`` (default: ``num_lambdas`` values
    from :math:`\lambda_{\max} = \|X_c^\top y_c\|_\infty / n` down to
    ``eps * lambda_max``, geometric, on the full data, as scikit-learn). The
    CV error of fold ``k`` is the mean squared error (squared loss) or the
    mean deviance ``2 * log-loss`` (logistic) on its held-out rows; the
    chosen lambda minimises the mean over folds (``rule="min"``, first index
    among ties, as ``LassoCV``) or is the largest lambda within one standard
    error of that minimum (``rule="1se"``). The value is the full-data fit at
    the chosen lambda (warm-started along the same path). Equivalent to
    ``sklearn.linear_model.LassoCV(cv=KFold(K), alphas=lambdas)`` for the
    squared loss with ``early_stop=False``.

    Args:
        X: ``(n, m)`` design, or ``(R, n, m)`` for ``R`` replicates (batched).
        y: ``(n,)`` response (``{0, 1}`` labels for ``loss="logistic"``), or ``(R, n)``.
        folds: ``K`` folds (contiguous for the squared loss, stratified by
            class for the logistic loss, as :func:`jaxknock.lasso_cv`; with
            ``(R, n)`` labels they must be the same in every row) or an
            ``(n,)`` array of fold ids (at least two; for the logistic loss every training fold must
            hold both classes, as in :func:`jaxknock.lasso_cv`).
        lambdas, num_lambdas, eps: the penalty grid (decreasing; ``lambdas`` may be
            traced, ``num_lambdas`` and ``eps`` are static). Under ``jit`` a traced
            grid that is not positive and decreasing, or a NaN in ``X`` / ``y``, gives
            ``RESULTS.nonfinite`` and NaN coefficients (eager calls raise).
        loss: ``"squared"`` or ``"logistic"``.
        rule: ``"min"`` or ``"1se"``.
        tol: relative KKT tolerance of every solve, positive and finite (may be traced: under ``jit`` a
            ``tol`` that is not gives ``RESULTS.nonfinite`` and NaN coefficients).
        max_steps: epochs per working-set solve (for the logistic loss summed over
            its proximal Newton steps; for the homotopy, kinks) and KKT rounds per lambda.
        patience, early_stop: the early exits of the module docstring.
        method: ``"auto"`` (``"homotopy"`` for the squared loss, at every
            shape, unless its Gram cache would take more than a quarter of
            free memory, then ``"naive"``), ``"homotopy"`` (exact path on
            Gram columns), ``"cov"`` (coordinate descent on Gram columns) or
            ``"naive"`` (residual updates; the logistic loss always).
        max_features: working-set capacity ``W``; ``None`` starts at 512, or at
            1024 for a path that stops early on a shape whose working set most likely
            outgrows 512, or for a whole grid at the capacity that holds ``min(m, 3 n)``,
            or at ``m`` when that is at most a quarter more
            (:func:`jaxknock._capacity.start_width`), or where
            the last call of this shape ended (one step more where it filled over
            85% after outgrowing an earlier call's capacities,
            :func:`jaxknock._capacity.headroom`) and grows, re-running the
            path, whenever it is exceeded: doubled up to 1024, then 1536, 2048,
            3072, ... (two steps at once for a whole grid, ``early_stop=False``, that
            filled it before half its penalties), with the active slots in proportion
            (:func:`jaxknock._capacity.grow`). In a sequential batch, when at most half of the replicates
            exceed its capacity, only those run again, each alone at its own.
        throw: raise ``RuntimeError`` if a solve did not succeed.
        batch_mode: how ``R`` replicates run: ``"sequential"`` (one after
            another in one program, ``lax.map``), ``"lockstep"`` (the homotopy
            engine only: one path loop for all replicates, every kink of every
            replicate in one batched step; a finished replicate idles until the
            last one is done; in balanced chunks of replicates when the whole
            batch's caches would take more than a quarter of free memory) or
            ``"auto"``: sequential on the CPU, where it is faster, lockstep on accelerators
            (:func:`jaxknock._backend.loop_over_batch`). Same results either way.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` the ``(m,)`` coefficients
        and ``stats``: ``lam``, ``lam_index`` (``lam_index_min``,
        ``lam_index_1se``), ``intercept``, ``lambdas``, ``cv_error`` ``(L, K)``
        (``inf`` past an early exit), ``cv_mean``, ``cv_se``, ``kkt``,
        ``gap``, ``num_steps``, ``max_steps``, ``num_lambdas_solved``,
        ``coef_path`` ``(L, m)`` of the full-data fit, ``nnz``; the capacity
        used: ``working_set_size`` and ``peak_active`` (largest member active set); per lambda
        ``(L,)`` (0 past the last solved one): ``kkt_path`` (largest relative KKT violation over
        the members), ``steps_path`` (epochs; homotopy: kinks) and ``working_set_path`` (its size);
        ``float64_refit``: a float32 design whose fit failed its certificate (nearly
        collinear columns; a whole grid near the rank of the folds, p > n; its float32
        path stops at the first uncertified penalty) was solved again in float64 and cast
        back (:mod:`jaxknock.l1._resolve`; not under ``jit``, where the result code says it).
        A float64 NumPy ``X`` (or squared-loss ``y``) with x64 off is centred on the host
        first, and ``intercept`` / ``intercept_path`` are then float64 NumPy arrays
        (:func:`jaxknock.l1.problem.centre_on_host`, as in :func:`~jaxknock.lasso`).

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (100, 20))
        >>> y = X[:, 0] - X[:, 1] + 0.5 * jax.random.normal(jax.random.key(1), (100,))
        >>> sol = l1_cv(X, y, folds=5, num_lambdas=30)
        >>> bool(sol.value[0] > 0)
        True
    """
    if rule not in ("min", "1se"):
        raise ValueError(f"rule must be 'min' or '1se', got {rule!r}")
    user_tol = tol
    tol, max_steps, patience, early_stop, max_features, throw = _check_settings(
        tol, max_steps, patience, early_stop, max_features, throw
    )
    X, y, shift = centre_on_host(X, y, loss=loss, fit_intercept=True)
    X, y = _driver.prepare(X, y, loss)
    n = X.shape[-2]
    if loss == "logistic" and _checks.is_int(folds):
        folds = _stratified_folds(y, folds)
    ids, rows = _check_folds(folds, y, loss, n)
    K = rows.shape[0]
    excl = np.append(np.arange(K), -1).astype(np.int32)
    num_lambdas = check_grid_settings(num_lambdas, eps) if lambdas is None else num_lambdas
    lam = _driver.validated_grid(X, y, lambdas, num_lambdas, eps)
    Xs, ys, units = _units.scale_data(X, y, loss)  # one exponent for the whole batch
    sol = _driver.run_certified(
        Xs,
        ys,
        _units.to_unit(lam, units, "lam"),
        rows,
        excl,
        loss=loss,
        method=method,
        tol=tol,
        max_steps=max_steps,
        patience=patience,
        early_stop=early_stop,
        rule=rule,
        max_features=max_features,
        throw=throw,
        grid=(eps, num_lambdas),
        batch_mode=batch_mode,
    )
    sol = _units.restore(sol, units, unit_free=("gap",))  # its gap is relative to the null deviance
    sol = void_single_class_folds(sol, ids, K, y, loss)  # traced labels: _check_folds' twin
    return restore_intercept(_flag_traced_input(sol, X, y, lam, user_tol), shift)


def l1_path(
    X,
    y,
    lambdas=None,
    *,
    num_lambdas: int = 100,
    eps: float = 1e-3,
    loss: str = "squared",
    tol: float = 1e-5,
    max_steps: int = 10_000,
    early_stop: bool = False,
    method: str = "auto",
    max_features: int | None = None,
    throw: bool = False,
) -> Solution:
    r"""The lasso / l1-logistic regularisation path on all rows (no CV).

    Solves the problem of the module docstring on every ``lambdas[k]``
    (warm-started, strong rules, KKT-checked). Matches
    ``sklearn.linear_model.lasso_path`` on centred data (squared loss).
    With ``early_stop=True`` the path ends at glmnet's deviance-ratio exit.

    ``lambdas`` may be traced; under ``jit`` a bad grid or a NaN in ``X`` / ``y``
    gives ``RESULTS.nonfinite`` and NaN coefficients, as in :func:`l1_cv`.

    Returns:
        :class:`~jaxknock.Solution`: ``value`` the coefficients at the last
        solved lambda, ``stats["coef_path"]`` ``(L, m)`` (``nan`` past an
        early exit), ``stats["intercept_path"]``, ``kkt``, ``gap`` (last
        lambda), ``num_steps``, and per lambda ``kkt_path``, ``steps_path``,
        ``working_set_path`` (as :func:`l1_cv`). :func:`jaxknock.lasso_path` runs
        this engine by default.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (50, 10))
        >>> y = X[:, 0] + 0.1 * jax.random.normal(jax.random.key(1), (50,))
        >>> l1_path(X, y, num_lambdas=10).stats["coef_path"].shape
        (10, 10)
    """
    user_tol = tol
    tol, max_steps, _, early_stop, max_features, throw = _check_settings(
        tol, max_steps, 1, early_stop, max_features, throw
    )
    X, y, shift = centre_on_host(X, y, loss=loss, fit_intercept=True)
    X, y = _driver.prepare(X, y, loss)
    n = X.shape[-2]
    rows = np.arange(n, dtype=np.int32)[None]
    excl = np.array([-1], np.int32)
    num_lambdas = check_grid_settings(num_lambdas, eps) if lambdas is None else num_lambdas
    lam = _driver.validated_grid(X, y, lambdas, num_lambdas, eps)
    Xs, ys, units = _units.scale_data(X, y, loss)
    sol = _driver.run_certified(
        Xs,
        ys,
        _units.to_unit(lam, units, "lam"),
        rows,
        excl,
        loss=loss,
        method=method,
        tol=tol,
        max_steps=max_steps,
        patience=1,
        early_stop=early_stop,
        rule="min",
        max_features=max_features,
        throw=throw,
        grid=(eps, num_lambdas),
    )
    sol = _units.restore(sol, units, unit_free=("gap",))
    return restore_intercept(_flag_traced_input(sol, X, y, lam, user_tol), shift)


def _flag_traced_input(sol, X, y, lam, tol=None):
    """``sol`` with ``RESULTS.nonfinite`` and NaN coefficients where traced input is not finite.

    Eager calls refuse such input; under ``jit`` a NaN in ``X`` or ``y`` (or a
    grid that :func:`~jaxknock.l1._ws_driver.validated_grid` voided: not
    positive and decreasing) never met the KKT test and came back as
    ``max_steps_reached`` with all-zero coefficients. A traced ``tol`` that is
    not positive and finite (eager calls refuse it) voids the answer too: ``inf``
    certified any iterate as ``successful``.
    """
    arrays = [a for a in (X, y, lam, tol) if a is not None]
    if all(_checks.is_concrete(a) for a in arrays):
        return sol
    ok = jnp.all(jnp.isfinite(X), axis=(-2, -1)) & jnp.all(jnp.isfinite(y), axis=-1)
    if lam is not None:
        ok = ok & jnp.all(jnp.isfinite(lam), axis=-1)
    if tol is not None and not _checks.is_concrete(tol):
        ok = ok & jnp.isfinite(tol) & (tol > 0)
    stats = dict(sol.stats)
    for key in ("coef_path", "intercept", "intercept_path", "lam"):
        if key in stats:
            stats[key] = _checks.poison(ok, stats[key])
    result = jnp.where(ok, sol.result, jnp.int32(RESULTS.nonfinite))
    return sol._replace(value=_checks.poison(ok, sol.value), result=result, stats=stats)


def member_paths(
    X, y, lambdas, rows, excl, tol, *, method="auto", loss="squared", W=512, slots=256, max_steps=10_000, chunk=None
):
    """Every member's coefficient path on one design: the whole grid, no early exit (traceable).

    Members as in :func:`l1_cv`: member ``f`` fits the rows of every block of
    ``rows`` ``(K, r)`` (padded with ``n``) except block ``excl[f]`` (``-1``:
    all blocks). Used by :func:`jaxknock.stability_selection` (a complementary
    pair of subsamples is one design with two blocks and ``excl = [1, 0]``).
    ``chunk`` features join the Gram-column cache at a time (default as
    :func:`l1_cv`). ``W`` / ``slots`` are the working-set / active-slot capacities; when the
    returned ``overflow`` (``slot_overflow``) flag is set, rerun with a larger
    ``W`` (``slots``), as :func:`l1_cv` does.

    Returns:
        ``(coefs, ok, overflow, slot_overflow)``: ``(L, M, m)`` coefficients,
        ``(L,)`` bool (every member converged and KKT-checked at that lambda).

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (40, 10)); y = X[:, 1]
        >>> rows = jnp.arange(40, dtype=jnp.int32).reshape(2, 20)
        >>> coefs, ok, over, _ = member_paths(X, y, jnp.array([0.5, 0.1]), rows, jnp.array([1, 0]), 1e-5)
        >>> coefs.shape, bool(ok.all()), bool(over)
        ((2, 2, 10), True, False)
    """
    m = X.shape[1]
    engine = _driver.engine_for(loss, method)
    chunk = min(chunk or cache_chunk(m), m)
    W = min(W, m)
    scale = _driver.gradient_scale(X, y, lambdas)
    st, _, out, _, _ = _driver.path_core(
        X, y, lambdas, lambdas[0], rows, excl, scale=scale, engine=engine, loss=loss, W=W, chunk=chunk,
        tol=jnp.asarray(tol, X.dtype), max_steps=max_steps, patience=1, early_stop=False,
        slots=min(slots, W + chunk) if engine == "homotopy" else 0, keep_members=True,
    )  # fmt: skip
    valid = jnp.arange(W + chunk) < st.size
    L, M = out["members"].shape[:2]
    coefs = jnp.zeros((L, M, m), X.dtype).at[:, :, st.idx].add(jnp.where(valid, out["members"], 0))
    slot_over = getattr(st, "slot_over", jnp.bool_(False))
    ok = out["ok"]
    if engine == "homotopy":
        ok = ok & (out["kkt"] <= _driver.kkt_bound(tol, X.dtype, lambdas, scale))
    return coefs, ok & ~st.overflow, st.overflow, slot_over
