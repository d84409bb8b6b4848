r"""Problem precomputation for the lasso / l1-logistic engine.

Both models solve

.. math::

    \min_{\beta \in \mathbb{R}^m,\ \beta_0 \in \mathbb{R}}\;
    \frac{1}{n}\sum_{i=1}^n f(x_i^\top \beta + \beta_0;\, y_i) + \lambda \|\beta\|_1,

with the *squared* loss :math:`f(z; y) = \tfrac12 (y - z)^2` (scikit-learn's
``Lasso(alpha=lam)``) or the *logistic* loss
:math:`f(z; y) = \log(1 + e^z) - y z` for labels :math:`y \in \{0, 1\}`
(scikit-learn's ``LogisticRegression(l1_ratio=1, C=1 / (n * lam))`` with an
unpenalised intercept, i.e. ``solver='saga'``; ``liblinear`` penalises the
intercept, so it only matches with ``fit_intercept=False``). The intercept
:math:`\beta_0` is never penalised; it is handled by centring the columns of
``X`` (weighted by the training rows), so no centred copy of ``X`` is made.

A :class:`Problem` holds everything a solver needs about one (design,
training-weights) pair: the transposed design, the weighted column means and
norms, the coordinate Lipschitz constants and the stopping scale ``D0`` (null
deviance per training row). Cross-validation builds one per fold with 0/1 row
weights (never ragged shapes) and ``vmap``. This module also holds the
penalty grid (:func:`lambda_max`, :func:`lambda_grid`) and the input checks
shared by the public functions.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks, _containers, _precision
from jaxknock._solution import Solution
from jaxknock.l1 import _units
from jaxknock.l1.settings import L1Settings, check_loss, model_settings

__all__ = ["lambda_max", "lambda_grid"]

HI = lax.Precision.HIGHEST
# Upper bound on f'' (coordinate Lipschitz constants are this times ||x_j||^2/n).
LOSS_CURVATURE = {"squared": 1.0, "logistic": 0.25}
CD_BLOCK = 16
_FISTA_LIPSCHITZ_MARGIN = 1.1
_POWER_ITERATIONS = 50


class Problem(NamedTuple):
    """Precomputed quantities of one (design, training-weights) pair."""

    XT: jax.Array  # (m, n) design, transposed: a feature is a contiguous row
    y: jax.Array  # (n,) response; labels in {0, 1} for the logistic loss
    w: jax.Array  # (n,) 0/1 training weights
    n_w: jax.Array  # () number of training rows
    mu: jax.Array  # (m,) training column means (zeros without intercept)
    y_center: jax.Array  # () training mean of y (zero without intercept)
    col_norm: jax.Array  # (m,) ||x_j - mu_j|| over the training rows
    lipschitz: jax.Array  # (m,) coordinate Lipschitz constants
    lipschitz_all: jax.Array  # () Lipschitz constant of the whole gradient (FISTA)
    gram_blocks: jax.Array  # (nb, B, B) diagonal blocks of X_c^T W X_c / n_w (blocked CD)
    offset0: jax.Array  # () null-model offset (intercept of the centred model)
    scale: jax.Array  # () null deviance per training row (stopping scale)


def matvec(XT, v):
    """``X @ v`` from the transposed design."""
    return jnp.matmul(v, XT, precision=HI)


def rmatvec(XT, u):
    """``X.T @ u`` from the transposed design."""
    return jnp.matmul(XT, u, precision=HI)


def loss_value(loss, z, y):
    """Per-sample loss ``f(z; y)``."""
    if loss == "squared":
        return 0.5 * (z - y) ** 2
    return jnp.logaddexp(0.0, z) - y * z


def loss_grad(loss, z, y):
    """Per-sample derivative ``f'(z; y)``."""
    if loss == "squared":
        return z - y
    return jax.nn.sigmoid(z) - y


def soft_threshold(x, t):
    r"""Soft thresholding ``S_t(x) = sign(x) max(|x| - t, 0)``, elementwise.

    The proximal operator of ``t ||.||_1``:
    :math:`S_t(x) = \arg\min_u \tfrac12 \|u - x\|_2^2 + t \|u\|_1`. Coordinate
    descent applies it to one coordinate's gradient step ``b_j - g_j / h_j``
    with ``t = lam / h_j`` (``h_j`` the coordinate's curvature or its Lipschitz
    bound ``L_j``), FISTA to the whole step ``v - grad / L`` with ``t = lam / L``.

    Args:
        x: array of any shape.
        t: threshold ``>= 0``, a scalar or an array broadcasting against ``x``.

    Returns:
        An array of ``x``'s shape: zero where ``|x| <= t``, else ``x`` moved
        towards zero by ``t``.

    Example:
        >>> soft_threshold(jnp.array([-3.0, 0.5, 2.0]), 1.0).tolist()
        [-2.0, 0.0, 1.0]
    """
    return jnp.sign(x) * jnp.maximum(jnp.abs(x) - t, 0.0)


def make_problem(XT, y, w, settings: L1Settings) -> Problem:
    """Precompute one :class:`Problem` (traceable; ``vmap`` over weights ``w`` for folds).

    Only the fields the ``settings.solver`` uses are computed: the whole-gradient
    Lipschitz constant for ``fista``, the block Gram matrices for least-squares ``cd``.
    """
    loss, fit_intercept, solver = settings.loss, settings.fit_intercept, settings.solver
    dtype = XT.dtype
    n_w = jnp.sum(w)
    if fit_intercept:
        mu = rmatvec(XT, w) / n_w
        y_center = jnp.dot(w, y, precision=HI) / n_w
    else:
        mu = jnp.zeros(XT.shape[0], dtype)
        y_center = jnp.zeros((), dtype)
    # a fused reduction over the rows: as a product with w, XLA:CPU formed the (m, n) squares first (and
    # (folds, m, n) of them under vmap over w): 22 ms of a 4000 x 500 fit, against 2 ms here (session 63)
    col_sq = jnp.sum(w * (XT - mu[:, None]) ** 2, axis=1)
    lipschitz = LOSS_CURVATURE[loss] * col_sq / n_w
    if loss == "squared":
        offset0 = y_center
        scale = jnp.dot(w, (y - y_center) ** 2, precision=HI) / n_w
    else:
        if fit_intercept:
            ybar = jnp.clip(y_center, 1e-12, 1.0 - 1e-12)
            offset0 = jnp.log(ybar) - jnp.log1p(-ybar)
        else:
            offset0 = jnp.zeros((), dtype)
        scale = 2.0 * jnp.dot(w, loss_value(loss, offset0, y), precision=HI) / n_w
    if solver == "fista":
        lipschitz_all = _power_lipschitz(XT, w, n_w, mu) * LOSS_CURVATURE[loss]
        lipschitz_all = _FISTA_LIPSCHITZ_MARGIN * lipschitz_all
    else:
        lipschitz_all = jnp.zeros((), dtype)
    if solver == "cd" and loss == "squared":
        B = block_indices(XT.shape[0]).shape[1]

        def block_gram(start):
            XcB = lax.dynamic_slice_in_dim(XT, start, B) - lax.dynamic_slice_in_dim(mu, start, B)[:, None]
            return jnp.matmul(XcB * w, XcB.T, precision=HI)

        # one (B, n) @ (n, B) product per block, sliced in place: XLA:CPU's batched float64 dot over a
        # gathered (nb, B, n) copy took 34 ms at 4000 x 500, these 7 ms (benchmarks/measured/NOTES.md, session 47)
        gram_blocks = lax.map(block_gram, jnp.asarray(block_indices(XT.shape[0])[:, 0])) / n_w
    else:
        gram_blocks = jnp.zeros((0, 0, 0), dtype)
    return Problem(
        XT=XT,
        y=y,
        w=w,
        n_w=n_w,
        mu=mu,
        y_center=y_center,
        col_norm=jnp.sqrt(col_sq),
        lipschitz=lipschitz,
        lipschitz_all=lipschitz_all,
        offset0=offset0,
        scale=scale,
        gram_blocks=gram_blocks,
    )


def full_problem(X, y, settings: L1Settings) -> Problem:
    """:func:`make_problem` of one design with every row in the training set."""
    return make_problem(X.T, y, jnp.ones(X.shape[0], X.dtype), settings)


def block_indices(m):
    """Feature indices of the CD blocks; the last block is shifted to fit in ``m``."""
    B = min(CD_BLOCK, m)
    starts = np.minimum(np.arange(-(-m // B)) * B, m - B)
    return starts[:, None] + np.arange(B)[None, :]


def _power_lipschitz(XT, w, n_w, mu):
    """Largest eigenvalue of ``X_c^T diag(w) X_c / n_w`` by power iteration."""
    m = XT.shape[0]
    v = jnp.cos(1.3 * jnp.arange(m, dtype=XT.dtype) + 0.7)
    v = v / jnp.linalg.norm(v)

    def apply(v):
        Xv = matvec(XT, v) - jnp.dot(mu, v, precision=HI)
        return (rmatvec(XT, w * Xv) - mu * jnp.dot(w, Xv, precision=HI)) / n_w

    def body(_, v):
        Av = apply(v)
        return Av / jnp.maximum(jnp.linalg.norm(Av), jnp.finfo(XT.dtype).tiny)

    v = lax.fori_loop(0, _POWER_ITERATIONS, body, v)
    return jnp.dot(v, apply(v), precision=HI)


def predict(prob: Problem, coef, offset):
    """Linear predictor ``(X - mu) @ coef + offset`` for all rows."""
    return matvec(prob.XT, coef) + (offset - jnp.dot(prob.mu, coef, precision=HI))


def intercept(prob: Problem, coef, offset, fit_intercept):
    """Intercept of the original model, ``offset - mu @ coef`` (zero without one)."""
    if not fit_intercept:
        return jnp.zeros((), coef.dtype)
    return offset - jnp.dot(prob.mu, coef, precision=HI)


# ----------------------------------------------------------------------------
# Penalty grid
# ----------------------------------------------------------------------------


def problem_lambda_max(prob: Problem, settings: L1Settings):
    """``lambda_max`` of a precomputed problem (traceable)."""
    if settings.fit_intercept or settings.loss == "squared":
        r = prob.y - prob.y_center
    else:
        r = prob.y - 0.5  # gradient of the logistic loss at z = 0
    u = prob.w * r
    grad = rmatvec(prob.XT, u) - prob.mu * jnp.sum(u)
    return jnp.max(jnp.abs(grad)) / prob.n_w


# scikit-learn's floor (``np.finfo(np.float64).resolution``): a lambda_max at or below it (an all-zero or
# all-constant centred design) gives the constant grid at the floor, where every coefficient is zero
GRID_FLOOR = 1e-15


def geometric_grid(lam_max, num, eps):
    """``lam_max * eps**(k / (num - 1))``, ``k = 0..num-1`` (traceable; ``lam_max`` may be batched, ``(..., num)``).

    As scikit-learn's ``_alpha_grid``: ``lam_max <= 1e-15`` gives ``num`` copies of ``1e-15``
    (a grid from a rounding-level ``lam_max`` down to ``eps`` of it fitted pure rounding noise, and an
    exactly zero one underflowed to ``lambdas = 0``). The callers apply it on the unit scale
    (:mod:`jaxknock.l1._units`), so the floor is relative to the data's magnitude.
    """
    lam_max = jnp.asarray(lam_max)
    grid = lam_max[..., None] * eps ** jnp.linspace(0.0, 1.0, num, dtype=lam_max.dtype)
    return jnp.where(lam_max[..., None] <= GRID_FLOOR, jnp.asarray(GRID_FLOOR, lam_max.dtype), grid)


def default_grid(X, y, settings: L1Settings, *, num, eps):
    """Traceable :func:`lambda_grid` for one design (uses ``settings.loss``/``fit_intercept`` only).

    On data its caller brought to the unit scale (:mod:`jaxknock.l1._units`), where the floor is relative.
    """
    model = model_settings(settings.loss, settings.fit_intercept)
    return geometric_grid(problem_lambda_max(full_problem(X, y, model), model), num, eps)


def check_grid_settings(num, eps, name: str = "num_lambdas") -> int:
    """``num_lambdas`` (a Python, NumPy or concrete JAX integer >= 1) as an ``int``; ``eps`` a real number in
    (0, 1) (``eps="0.1"`` was Python's "'<' not supported" naming nothing). ``name``: what the caller calls the
    count (:func:`lambda_grid`'s is ``num``, and its error spoke of a ``num_lambdas`` it does not take)."""
    num = _checks.int_setting(num)
    if not (_checks.is_int(num) and num >= 1):
        raise ValueError(f"{name} must be a positive integer, got {num!r}")
    value = _checks.real_setting(eps)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"eps must be a real number in (0, 1), got {eps!r}")
    if not (0 < value < 1):
        raise ValueError(f"eps must lie in (0, 1), got {eps!r}")
    return num


def resolve_lambdas(X, y, lambdas, settings: L1Settings, *, num_lambdas, eps, units=None):
    """User ``lambdas`` (checked) or the default grid on the full data, as a ``(L,)`` array on the unit scale.

    ``X``, ``y``: the data on the unit scale of ``units`` (:func:`jaxknock.l1._units.scale_data`); user
    ``lambdas`` are in the caller's units and are scaled with the data.
    """
    if lambdas is None:
        num_lambdas = check_grid_settings(num_lambdas, eps)
        return _default_grid_jit(X, y, settings, num=num_lambdas, eps=float(eps))
    return _units.to_unit(as_lambdas(lambdas, X.dtype), units, "lam")


def as_lambdas(lambdas, dtype):
    """The caller's ``lambdas`` as a checked ``(L,)`` array of ``dtype`` (:func:`check_lambdas`).

    ``jnp.asarray(lambdas, dtype)`` of a masked array read each masked penalty as the value under its mask.
    """
    lambdas = jnp.asarray(_containers.host_numeric(lambdas, "lambdas"), dtype)
    check_lambdas(lambdas)
    return lambdas


def check_lambdas(lambdas):
    """A non-empty 1-D array of positive, finite penalties."""
    _checks.check_ndim(lambdas, 1, "lambdas", "a 1-D array of penalties")
    if lambdas.shape[0] == 0:
        raise ValueError("lambdas must hold at least one penalty, got an empty array")
    _checks.check_lam(lambdas, "lambdas")


# ----------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------


def centre_on_host(X, y, *, loss, fit_intercept):
    """``(X, y, shift)``: host data centred in float64 before JAX rounds it to float32.

    With x64 off, a float64 (or integer) NumPy ``X`` becomes float32 on its way
    to the device, and the cast keeps about 7 significant digits of each raw
    entry: a column of epoch seconds (``~1.7e9``, float32 spacing 128) that
    varies by minutes keeps a few levels, and the coefficients, the chosen
    penalty and the support depended on the offset. A model with
    an intercept is invariant to a shift of the columns, and least squares to a
    shift of ``y`` too, so the means come out in float64 on the host first
    (:func:`jaxknock._precision.centre_for_fit`); :func:`restore_intercept`
    puts them back into the reported intercept. Without an intercept, with x64
    on, and for device arrays or traced inputs (``jit`` / ``vmap``) nothing
    changes.
    """
    if not (_checks.static_flag(fit_intercept, "fit_intercept") and loss in ("squared", "logistic")):
        return X, y, _precision.HostShift()  # no shift invariance (or a bad loss, named by prepare_data)
    return _precision.centre_for_fit(X, y, centre_y=loss == "squared")


def restore_intercept(sol: Solution, shift) -> Solution:
    """``sol`` with ``stats["intercept"]`` (and ``"intercept_path"``) of the model on the caller's data.

    After :func:`centre_on_host` took means out: ``b0 + mean(y) - mean(X) @ coef``
    in float64 on the host, returned as a NumPy float64 array
    (:func:`jaxknock._precision.uncentred_intercept`); for a traced fit (host data with a
    traced grid, ``lam`` or ``tol`` under ``jit``) on the device, in the fit's dtype.
    """
    if not shift.applied:
        return sol
    stats = dict(sol.stats)
    stats["intercept"] = _precision.uncentred_intercept(stats["intercept"], sol.value, shift)
    if "intercept_path" in stats:
        stats["intercept_path"] = _precision.uncentred_intercept(stats["intercept_path"], stats["coef_path"], shift)
    return sol._replace(stats=stats)


def prepare_data(X, y, *, loss, fit_intercept, name_X="X"):
    """Shape/value checks before tracing; returns float arrays (y mapped to {0,1})."""
    check_loss(loss)
    _checks.static_flag(fit_intercept, "fit_intercept")
    X = _checks.as_float_array(X, name_X, bools=True)
    _checks.check_ndim(X, 2, name_X, "a 2-D array of shape (n_samples, n_features)")
    y = _checks.as_response(y, X.dtype)
    _checks.check_ndim(y, 1, "y", "a 1-D array of shape (n_samples,)")
    if y.shape[0] != X.shape[0]:
        raise ValueError(
            f"y has {y.shape[0]} entries but {name_X} has {X.shape[0]} rows; they must describe the same samples"
        )
    if X.shape[0] < 2:
        raise ValueError(f"{name_X} needs at least 2 rows, got {X.shape[0]}")
    if X.shape[1] < 1:
        raise ValueError(f"{name_X} needs at least 1 column, got shape {tuple(X.shape)}")
    _checks.check_finite(X, name_X)
    _checks.check_finite(y, "y")
    y = y.astype(X.dtype)
    _checks.check_model_response(y, loss=loss, fit_intercept=fit_intercept)
    if loss == "logistic":
        y = _checks.as_binary_labels(y, X.dtype)
    return X, y


# ----------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------


def lambda_max(X, y, *, loss: str = "squared", fit_intercept: bool = True) -> jax.Array:
    r"""Smallest ``lam`` for which all coefficients are zero.

    :math:`\lambda_{\max} = \|X_c^\top (y - \bar y)\|_\infty / n` with an
    intercept (``X_c`` the centred columns), :math:`\|X^\top y\|_\infty / n`
    without one (least squares) and :math:`\|X^\top (y - \tfrac12)\|_\infty / n`
    without one (logistic): the gradient of the data fit at the null model.
    Matches the first value of ``sklearn.linear_model.LassoCV``'s grid with
    the same ``fit_intercept`` (``sklearn.linear_model.lasso_path`` does not
    centre: its first value is the ``fit_intercept=False`` one).

    Args:
        X: ``(n, m)`` design.
        y: ``(n,)`` response (labels for ``loss="logistic"``).
        loss: ``"squared"`` or ``"logistic"``.
        fit_intercept: whether the model has an (unpenalised) intercept.

    Returns:
        Scalar array.

    Example:
        >>> X = jnp.eye(3); y = jnp.array([1.0, 2.0, 3.0])
        >>> float(lambda_max(X, y, fit_intercept=False))
        1.0
    """
    lam_max, units = _unit_lambda_max(X, y, loss, fit_intercept)
    return _units.to_user(lam_max, units, "lam")


def _unit_lambda_max(X, y, loss, fit_intercept):
    """``(lambda_max, units)``: checked data brought to the unit scale (:mod:`jaxknock.l1._units`) and its
    ``lambda_max`` there, which :func:`lambda_max` and :func:`lambda_grid` scale back."""
    X, y, _ = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)  # shift-invariant
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    X, y, units = _units.scale_data(X, y, loss)
    return _lambda_max_jit(X, y, loss=loss, fit_intercept=bool(fit_intercept)), units


@functools.partial(jax.jit, static_argnames=("loss", "fit_intercept"))
def _lambda_max_jit(X, y, *, loss, fit_intercept):
    model = model_settings(loss, fit_intercept)
    return problem_lambda_max(full_problem(X, y, model), model)


# :func:`default_grid` as one program (op by op, :func:`geometric_grid` alone was six more in a first call);
# ``settings``' tol and max_steps are data fields and ``eps`` is traced (static, every new depth compiled the
# grid again), so one program serves every tolerance and depth
_default_grid_jit = jax.jit(default_grid, static_argnames="num")
_geometric_grid_jit = jax.jit(geometric_grid, static_argnames="num")


def lambda_grid(
    X, y, *, num: int = 100, eps: float = 1e-3, loss: str = "squared", fit_intercept: bool = True
) -> jax.Array:
    """Geometric grid from ``lambda_max`` down to ``eps * lambda_max`` (``num`` values).

    Same grid as scikit-learn's ``LassoCV(alphas=num, eps=eps)`` (``n_alphas=num`` before
    scikit-learn 1.7), including its floor, which
    for least squares is relative to the units of the data: with ``2^{e_X}`` and ``2^{e_y}`` the powers of two
    that bring ``max |X|`` and ``max |y|`` into ``[0.5, 1)`` (:mod:`jaxknock.l1._units`), when
    ``lambda_max <= 1e-15 * 2^(e_X + e_y)`` (every centred column zero, or constant up to rounding)
    the grid is ``num`` copies of ``1e-15 * 2^(e_X + e_y)``, where every coefficient is zero
    (scikit-learn's absolute ``1e-15`` made ``y`` in units of ``1e-16`` read as a constant).

    Example:
        >>> X = jnp.eye(3); y = jnp.array([1.0, 2.0, 3.0])
        >>> [round(v, 6) for v in lambda_grid(X, y, num=3, eps=0.01, fit_intercept=False).tolist()]
        [1.0, 0.1, 0.01]
    """
    num = check_grid_settings(num, eps, "num")
    lam_max, units = _unit_lambda_max(X, y, loss, fit_intercept)
    return _units.to_user(_geometric_grid_jit(lam_max, num=num, eps=float(eps)), units, "lam")
