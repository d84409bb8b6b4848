r"""Lasso and l1-penalised logistic regression in JAX.

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

Solvers (``solver=``):

* ``"cd"`` -- cyclic coordinate descent (``lax.fori_loop`` over coordinates
  inside a ``lax.while_loop`` over epochs), the fastest choice on CPU. For
  least squares the coordinates are visited in blocks of 16 (one ``X_B^T r``
  and one ``X_B d`` per block, the updates inside a block through the block's
  Gram matrix): the iterates are exactly those of plain cyclic CD (and of
  scikit-learn's ``Lasso``), with fewer, larger operations. For the logistic
  loss each coordinate takes a proximal Newton step, safeguarded by the
  majorisation step with curvature bound ``||x_j||^2 / (4n)``, and the
  intercept a Newton step per epoch.
* ``"fista"`` -- accelerated proximal gradient with adaptive restart. Every
  iteration is two matrix-vector products, which ``vmap`` turns into
  matrix-matrix products: the choice on GPU for large batches.
* ``"auto"`` -- ``"cd"`` on the CPU backend, ``"fista"`` otherwise.

Stopping uses the duality gap at the dual point obtained by rescaling the
residual (generalised residual :math:`-f'(z)` for the logistic loss) into the
dual feasible set :math:`\{\theta : \|X_c^\top\theta\|_\infty \le \lambda\}`;
a solve succeeds when ``gap <= tol * D0`` with ``D0`` the null-model deviance
per sample (``||y - ybar||^2 / n`` for least squares, exactly scikit-learn's
criterion). The same gap drives *dynamic GAP safe sphere screening*
(Fercoq, Gramfort & Salmon 2015; Ndiaye et al. 2017): feature ``j`` is
provably zero at the optimum and is frozen at zero when

.. math::

    |x_{c,j}^\top \theta| + r\,\|x_{c,j}\|_2 < \lambda,\qquad
    r = \sqrt{2\,\mathrm{gap} / (\gamma\, n)},

where :math:`\gamma = 1` (squared) or :math:`4` (logistic) is the strong
concavity of the scaled dual.

Everything is written for one design and batches with ``jax.vmap``: over
replicates (many ``[X, X~]`` designs), over folds (cross-validation uses 0/1
row weights, never ragged shapes) and, through ``lax.scan`` with warm starts,
along a lambda path. Matrix products use ``precision=HIGHEST``.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks
from jaxknock._solution import Solution, raise_if_failed, result_code

__all__ = [
    "LassoState",
    "lambda_max",
    "lambda_grid",
    "kfold_ids",
    "lasso",
    "lasso_init",
    "lasso_step",
    "lasso_path",
    "lasso_cv",
]

LOSSES = ("squared", "logistic")
SOLVERS = ("auto", "cd", "fista")

_HI = lax.Precision.HIGHEST
# Strong concavity of the per-sample dual (1 / Lipschitz constant of f'').
_DUAL_CURVATURE = {"squared": 1.0, "logistic": 4.0}
# Upper bound on f'' (coordinate Lipschitz constants are this times ||x_j||^2/n).
_LOSS_CURVATURE = {"squared": 1.0, "logistic": 0.25}
_CD_BLOCK = 16
_CD_UNROLL = 4
_ANDERSON_MEMORY = 5  # Anderson extrapolation of CD every 5 epochs (Bertrand & Massias 2021)
_FISTA_CHECK_EVERY = 10
_FISTA_LIPSCHITZ_MARGIN = 1.1
_POWER_ITERATIONS = 50
_DEFAULT_MAX_STEPS = {"cd": 1000, "fista": 20000}


# ----------------------------------------------------------------------------
# Problem data and state
# ----------------------------------------------------------------------------


class _Problem(NamedTuple):
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


class _Momentum(NamedTuple):
    """FISTA extrapolation memory."""

    coef_prev: jax.Array
    offset_prev: jax.Array
    z_prev: jax.Array
    t: jax.Array


class LassoState(NamedTuple):
    """Solver state for one design (a pytree; ``vmap`` adds a leading axis).

    Attributes:
        coef: ``(m,)`` coefficients.
        offset: intercept of the *centred* model, so that the linear predictor
            is ``z = (X - mu) @ coef + offset``; the intercept of the original
            model is ``offset - mu @ coef``.
        z: ``(n,)`` linear predictor for all rows (training and validation).
        active: ``(m,)`` bool, ``False`` for features removed by safe screening.
        gap: duality gap at ``coef`` (objective units).
        num_steps: int32, epochs (``cd``) or iterations (``fista``) so far.
        momentum: FISTA memory (``None`` for ``cd``).
        history: the last iterates of CD, for Anderson extrapolation
            (``None`` for ``fista``).
    """

    coef: jax.Array
    offset: jax.Array
    z: jax.Array
    active: jax.Array
    gap: jax.Array
    num_steps: jax.Array
    momentum: Any = None
    history: Any = None


class _History(NamedTuple):
    """The last ``_ANDERSON_MEMORY + 1`` CD iterates (oldest first)."""

    coefs: jax.Array
    offsets: jax.Array
    zs: jax.Array
    count: jax.Array


def _resolve_solver(solver: str) -> str:
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if solver == "auto":
        return "cd" if jax.default_backend() == "cpu" else "fista"
    return solver


def _matvec(XT, v):
    """``X @ v`` from the transposed design."""
    return jnp.matmul(v, XT, precision=_HI)


def _rmatvec(XT, u):
    """``X.T @ u`` from the transposed design."""
    return jnp.matmul(XT, u, precision=_HI)


def _loss(loss, z, y):
    if loss == "squared":
        return 0.5 * (z - y) ** 2
    return jnp.logaddexp(0.0, z) - y * z


def _dloss(loss, z, y):
    if loss == "squared":
        return z - y
    return jax.nn.sigmoid(z) - y


def _binary_entropy(t):
    return -(jax.scipy.special.xlogy(t, t) + jax.scipy.special.xlogy(1.0 - t, 1.0 - t))


def _make_problem(XT, y, w, *, loss, fit_intercept, solver) -> _Problem:
    dtype = XT.dtype
    n_w = jnp.sum(w)
    if fit_intercept:
        mu = _rmatvec(XT, w) / n_w
        y_center = jnp.dot(w, y, precision=_HI) / n_w
    else:
        mu = jnp.zeros(XT.shape[0], dtype)
        y_center = jnp.zeros((), dtype)
    col_sq = jnp.matmul((XT - mu[:, None]) ** 2, w, precision=_HI)
    lipschitz = _LOSS_CURVATURE[loss] * col_sq / n_w
    if loss == "squared":
        offset0 = y_center
        scale = jnp.dot(w, (y - y_center) ** 2, precision=_HI) / n_w
    else:
        if fit_intercept:
            ybar = jnp.clip(y_center, 1e-12, 1.0 - 1e-12)
            offset0 = jnp.log(ybar) - jnp.log1p(-ybar)
        else:
            offset0 = jnp.zeros((), dtype)
        scale = 2.0 * jnp.dot(w, _loss(loss, offset0, y), precision=_HI) / n_w
    if solver == "fista":
        lipschitz_all = _power_lipschitz(XT, w, n_w, mu) * _LOSS_CURVATURE[loss]
        lipschitz_all = _FISTA_LIPSCHITZ_MARGIN * lipschitz_all
    else:
        lipschitz_all = jnp.zeros((), dtype)
    if solver == "cd" and loss == "squared":
        idx = _block_indices(XT.shape[0])  # (nb, B)
        XcB = XT[idx] - mu[idx][..., None]  # (nb, B, n)
        gram_blocks = jnp.einsum("kbn,kcn->kbc", XcB * w, XcB, precision=_HI) / n_w
    else:
        gram_blocks = jnp.zeros((0, 0, 0), dtype)
    return _Problem(
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


def _block_indices(m):
    """Feature indices of the CD blocks; the last block is shifted to fit in ``m``."""
    B = min(_CD_BLOCK, m)
    starts = np.minimum(np.arange(-(-m // B)) * B, m - B)
    return starts[:, None] + np.arange(B)[None, :]


def _power_lipschitz(XT, w, n_w, mu):
    """Largest eigenvalue of ``X_c^T diag(w) X_c / n_w`` by power iteration."""
    m = XT.shape[0]
    v = jnp.cos(1.3 * jnp.arange(m, dtype=XT.dtype) + 0.7)
    v = v / jnp.linalg.norm(v)

    def apply(v):
        Xv = _matvec(XT, v) - jnp.dot(mu, v, precision=_HI)
        return (_rmatvec(XT, w * Xv) - mu * jnp.dot(w, Xv, precision=_HI)) / n_w

    def body(_, v):
        Av = apply(v)
        return Av / jnp.maximum(jnp.linalg.norm(Av), jnp.finfo(XT.dtype).tiny)

    v = lax.fori_loop(0, _POWER_ITERATIONS, body, v)
    return jnp.dot(v, apply(v), precision=_HI)


def _predict(prob: _Problem, coef, offset):
    """Linear predictor ``(X - mu) @ coef + offset`` for all rows."""
    return _matvec(prob.XT, coef) + (offset - jnp.dot(prob.mu, coef, precision=_HI))


def _soft(x, t):
    return jnp.sign(x) * jnp.maximum(jnp.abs(x) - t, 0.0)


# ----------------------------------------------------------------------------
# Duality gap and GAP safe screening
# ----------------------------------------------------------------------------


def _gap_and_screen(prob: _Problem, lam, coef, z, *, loss, screen: bool):
    """Duality gap at ``coef`` and the features that GAP safe rules remove.

    Returns ``(gap, keep)`` where ``keep`` is ``False`` for provably zero
    features (all ``True`` when ``screen`` is off).
    """
    g = _dloss(loss, z, prob.y)
    u = prob.w * g / prob.n_w
    grad = _rmatvec(prob.XT, u) - prob.mu * jnp.sum(u)  # X_c^T u
    dnorm = jnp.max(jnp.abs(grad))
    s = jnp.where(dnorm > lam, lam / jnp.where(dnorm > 0, dnorm, 1.0), 1.0)
    primal = jnp.dot(prob.w, _loss(loss, z, prob.y), precision=_HI) / prob.n_w
    primal = primal + lam * jnp.sum(jnp.abs(coef))
    if loss == "squared":
        # theta = -s u; D(theta) = theta^T y_c - (n/2) ||theta||^2
        dual = -s * jnp.dot(u, prob.y - prob.y_center, precision=_HI) - 0.5 * s**2 * (
            jnp.dot(prob.w, g**2, precision=_HI) / prob.n_w
        )
    else:
        # D(theta) = sum_i w_i H(y_i - n theta_i / w_i) / n, H the binary entropy
        t = prob.y + s * g
        dual = jnp.dot(prob.w, _binary_entropy(t), precision=_HI) / prob.n_w
    gap = primal - dual
    if screen:
        radius = jnp.sqrt(2.0 * jnp.maximum(gap, 0.0) / (_DUAL_CURVATURE[loss] * prob.n_w))
        keep = s * jnp.abs(grad) + radius * prob.col_norm >= lam
    else:
        keep = jnp.ones(coef.shape, bool)
    return gap, keep


def _newton_offset(prob: _Problem, offset, z, *, loss, fit_intercept):
    """One Newton step on the (unpenalised) offset; exact for least squares."""
    if not fit_intercept or loss == "squared":
        return offset, z
    p = jax.nn.sigmoid(z)
    grad = jnp.dot(prob.w, p - prob.y, precision=_HI)
    hess = jnp.dot(prob.w, p * (1.0 - p), precision=_HI)
    step = grad / jnp.maximum(hess, jnp.finfo(z.dtype).tiny)
    return offset - step, z - step


def _check(prob: _Problem, lam, state: LassoState, *, loss, fit_intercept, screen, tol):
    """Update the offset (cd), compute the gap and apply safe screening."""
    offset, z = state.offset, state.z
    if state.momentum is None:  # FISTA moves the offset by gradient steps instead
        offset, z = _newton_offset(prob, offset, z, loss=loss, fit_intercept=fit_intercept)
    gap, keep = _gap_and_screen(prob, lam, state.coef, z, loss=loss, screen=screen)
    coef = state.coef
    active = state.active
    momentum = state.momentum
    if screen:
        # Zero the newly screened coefficients, unless the iterate is already
        # certified: the returned iterate is always the one the gap refers to.
        apply = gap > tol * prob.scale
        drop = active & ~keep & apply
        delta = jnp.where(drop, -coef, 0.0)
        coef = coef + delta
        z = z + _matvec(prob.XT, delta) - jnp.dot(prob.mu, delta, precision=_HI)
        active = jnp.where(apply, active & keep, active)
        if momentum is not None:
            changed = jnp.any(drop)
            momentum = _Momentum(
                coef_prev=jnp.where(changed, coef, momentum.coef_prev),
                offset_prev=jnp.where(changed, offset, momentum.offset_prev),
                z_prev=jnp.where(changed, z, momentum.z_prev),
                t=jnp.where(changed, jnp.ones_like(momentum.t), momentum.t),
            )
    return state._replace(coef=coef, offset=offset, z=z, active=active, gap=gap, momentum=momentum)


# ----------------------------------------------------------------------------
# Iterations
# ----------------------------------------------------------------------------


def _cd_epoch(prob: _Problem, lam, coef, z, active, *, loss, fit_intercept):
    """One cyclic pass of coordinate descent for the logistic loss.

    Each coordinate takes a proximal Newton step with the exact curvature
    ``sum_i w_i p_i (1 - p_i) x_ij^2 / n``; if that does not decrease the
    objective it falls back to the majorisation step with the global bound
    ``||x_j||^2 / (4n)``, which always does. Screened features are compacted
    away (the loop runs over the first ``sum(active)`` entries of an
    active-first ordering), so screening saves work, also under ``vmap``.
    """
    del fit_intercept  # the centred columns make the offset a separate Newton step
    order = jnp.argsort(~active, stable=True)

    def objective(z):
        return jnp.dot(prob.w, _loss(loss, z, prob.y), precision=_HI) / prob.n_w

    def update(i, carry):
        coef, z, fval = carry
        j = order[i]
        xc = prob.XT[j] - prob.mu[j]
        p = jax.nn.sigmoid(z)
        g = jnp.dot(xc, prob.w * (p - prob.y), precision=_HI) / prob.n_w
        h = jnp.dot(xc * xc, prob.w * p * (1.0 - p), precision=_HI) / prob.n_w
        L = prob.lipschitz[j]
        b = coef[j]
        h = jnp.maximum(h, 1e-3 * L)
        safe_h = jnp.where(L > 0, h, 1.0)
        new = jnp.where(L > 0, _soft(b - g / safe_h, lam / safe_h), b)
        z_new = z + (new - b) * xc
        f_new = objective(z_new)

        def majorised(_):
            safe_L = jnp.where(L > 0, L, 1.0)
            new = jnp.where(L > 0, _soft(b - g / safe_L, lam / safe_L), b)
            z_new = z + (new - b) * xc
            return new, z_new, objective(z_new)

        accept = f_new + lam * jnp.abs(new) <= fval + lam * jnp.abs(b)
        new, z_new, f_new = lax.cond(accept, lambda _: (new, z_new, f_new), majorised, None)
        return coef.at[j].set(new), z_new, f_new

    coef, z, _ = lax.fori_loop(0, jnp.sum(active), update, (coef, z, objective(z)))
    return coef, z


def _cd_epoch_blocked(prob: _Problem, lam, coef, z, active):
    """One cyclic CD pass for least squares, ``_CD_BLOCK`` coordinates at a time.

    Exactly the iterates of plain cyclic coordinate descent, but the
    per-coordinate ``O(n)`` work is batched per block: one ``X_B^T r``, the
    sequential updates inside the block through the precomputed block Gram
    matrix, and one ``X_B delta`` residual update. Blocks without active
    features are skipped.
    """
    idx_all = _block_indices(coef.shape[0])
    nb, B = idx_all.shape
    own_start = np.arange(nb) * B  # coordinates below this belong to the previous block

    def block(bi, carry):
        coef, z = carry
        start = jnp.minimum(bi * B, coef.shape[0] - B)
        idx = start + jnp.arange(B)
        mine = (idx >= jnp.asarray(own_start)[bi]) & active[idx]
        XB = lax.dynamic_slice_in_dim(prob.XT, start, B, axis=0)
        muB = prob.mu[idx]
        G = prob.gram_blocks[bi]
        r = prob.w * (z - prob.y)
        grad = (jnp.matmul(XB, r, precision=_HI) - muB * jnp.sum(r)) / prob.n_w
        b = coef[idx]
        L = prob.lipschitz[idx]
        safe_L = jnp.where(L > 0, L, 1.0)

        def coordinate(k, d):
            g = grad[k] + jnp.dot(G[k], d, precision=_HI)
            new = _soft(b[k] - g / safe_L[k], lam / safe_L[k])
            new = jnp.where((L[k] > 0) & mine[k], new, b[k])
            return d.at[k].set(new - b[k])

        d = lax.fori_loop(0, B, coordinate, jnp.zeros(B, coef.dtype), unroll=_CD_UNROLL)
        coef = lax.dynamic_update_slice_in_dim(coef, b + d, start, axis=0)
        z = z + jnp.matmul(d, XB, precision=_HI) - jnp.dot(muB, d, precision=_HI)
        return coef, z

    def maybe_block(bi, carry):
        start = jnp.minimum(bi * B, coef.shape[0] - B)
        any_active = jnp.any(lax.dynamic_slice_in_dim(active, start, B))
        return lax.cond(any_active, functools.partial(block, bi), lambda c: c, carry)

    return lax.fori_loop(0, nb, maybe_block, (coef, z))


def _anderson(prob: _Problem, lam, state: LassoState, *, loss):
    """Record the CD iterate; every ``_ANDERSON_MEMORY`` epochs try an Anderson extrapolation.

    The extrapolated point is the affine combination of the last iterates
    whose differences have minimal norm (Bertrand & Massias 2021); it is kept
    only if it lowers the objective. ``z`` is linear in (coef, offset), so it is
    extrapolated from the stored predictors without a matrix product.
    """
    h = state.history
    push = lambda buf, x: jnp.concatenate([buf[1:], x[None]])
    h = _History(
        coefs=push(h.coefs, state.coef),
        offsets=push(h.offsets, state.offset),
        zs=push(h.zs, state.z),
        count=h.count + 1,
    )
    M = _ANDERSON_MEMORY

    def objective(coef, z):
        data = jnp.dot(prob.w, _loss(loss, z, prob.y), precision=_HI) / prob.n_w
        return data + lam * jnp.sum(jnp.abs(coef))

    def extrapolate(state):
        U = jnp.concatenate([jnp.diff(h.coefs, axis=0), jnp.diff(h.offsets)[:, None]], axis=1)
        G = jnp.matmul(U, U.T, precision=_HI)
        reg = 1e-10 * jnp.trace(G) + jnp.finfo(G.dtype).tiny
        chol = jnp.linalg.cholesky(G + reg * jnp.eye(M, dtype=G.dtype))
        c = jax.scipy.linalg.cho_solve((chol, True), jnp.ones(M, G.dtype))
        c = c / jnp.sum(c)
        coef = jnp.matmul(c, h.coefs[1:], precision=_HI)
        offset = jnp.dot(c, h.offsets[1:], precision=_HI)
        z = jnp.matmul(c, h.zs[1:], precision=_HI)
        new, old = objective(coef, z), objective(state.coef, state.z)
        better = due & jnp.isfinite(new) & (new < old)
        pick = lambda a, b: jnp.where(better, a, b)
        return state._replace(coef=pick(coef, state.coef), offset=pick(offset, state.offset), z=pick(z, state.z))

    # Computed every epoch and selected (cheap: O(M (n + m))); a lax.cond here
    # would be a select under vmap anyway and slows compilation down.
    due = (h.count % M == 0) & (h.count > M)
    return extrapolate(state._replace(history=h))


def _fista_iteration(prob: _Problem, lam, state: LassoState, *, loss, fit_intercept):
    mom = state.momentum
    t_next = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * mom.t**2))
    beta = (mom.t - 1.0) / t_next
    v = state.coef + beta * (state.coef - mom.coef_prev)
    v_off = state.offset + beta * (state.offset - mom.offset_prev)
    zv = state.z + beta * (state.z - mom.z_prev)
    u = prob.w * _dloss(loss, zv, prob.y) / prob.n_w
    usum = jnp.sum(u)
    grad = _rmatvec(prob.XT, u) - prob.mu * usum
    L = prob.lipschitz_all
    coef = jnp.where(state.active, _soft(v - grad / L, lam / L), 0.0)
    if loss == "logistic" and fit_intercept:
        # X_c is orthogonal to the intercept column, so a block step of
        # 1 / sup f'' = 4 is a valid majorisation for the offset.
        offset = v_off - usum / _LOSS_CURVATURE[loss]
    else:
        offset = state.offset
    z = _predict(prob, coef, offset)
    restart = jnp.dot(v - coef, coef - state.coef, precision=_HI) > 0
    momentum = _Momentum(
        coef_prev=state.coef,
        offset_prev=state.offset,
        z_prev=state.z,
        t=jnp.where(restart, jnp.ones_like(t_next), t_next),
    )
    return state._replace(coef=coef, offset=offset, z=z, momentum=momentum)


def _init_state(prob: _Problem, lam, coef, offset, *, loss, fit_intercept, solver, screen, tol):
    """State before the first gap check (``gap = inf``)."""
    del lam, loss, fit_intercept, screen, tol
    z = _predict(prob, coef, offset)
    momentum = history = None
    if solver == "fista":
        momentum = _Momentum(coef, offset, z, jnp.ones((), coef.dtype))
    else:
        k = _ANDERSON_MEMORY + 1
        history = _History(
            coefs=jnp.broadcast_to(coef, (k,) + coef.shape),
            offsets=jnp.broadcast_to(offset, (k,)),
            zs=jnp.broadcast_to(z, (k,) + z.shape),
            count=jnp.zeros((), jnp.int32),
        )
    return LassoState(
        coef=coef,
        offset=offset,
        z=z,
        active=jnp.ones(coef.shape, bool),
        gap=jnp.asarray(jnp.inf, coef.dtype),
        num_steps=jnp.zeros((), jnp.int32),
        momentum=momentum,
        history=history,
    )


def _iterate(prob: _Problem, lam, state: LassoState, *, loss, fit_intercept, solver):
    """One epoch (cd) or ``_FISTA_CHECK_EVERY`` iterations (fista), no gap check."""
    if solver == "cd":
        if loss == "squared":
            coef, z = _cd_epoch_blocked(prob, lam, state.coef, state.z, state.active)
        else:
            coef, z = _cd_epoch(prob, lam, state.coef, state.z, state.active, loss=loss, fit_intercept=fit_intercept)
        state = state._replace(coef=coef, z=z, num_steps=state.num_steps + 1)
        return _anderson(prob, lam, state, loss=loss)
    state = lax.fori_loop(
        0,
        _FISTA_CHECK_EVERY,
        lambda _, s: _fista_iteration(prob, lam, s, loss=loss, fit_intercept=fit_intercept),
        state,
    )
    return state._replace(num_steps=state.num_steps + _FISTA_CHECK_EVERY)


def _step(prob: _Problem, lam, state: LassoState, *, loss, fit_intercept, solver, screen, tol):
    """One round of iterations, then a gap check with screening (for ``lasso_step``)."""
    state = _iterate(prob, lam, state, loss=loss, fit_intercept=fit_intercept, solver=solver)
    return _check(prob, lam, state, loss=loss, fit_intercept=fit_intercept, screen=screen, tol=tol)


def _solve(prob: _Problem, lam, coef, offset, *, loss, fit_intercept, solver, screen, tol, max_steps):
    """Alternate gap checks and iterations until the gap certificate holds.

    Returns ``(state, code)``; the returned iterate is the one the gap refers to.
    """
    kw = dict(loss=loss, fit_intercept=fit_intercept, screen=screen, tol=tol)
    state = _init_state(prob, lam, coef, offset, solver=solver, **kw)
    target = tol * prob.scale

    def body(carry):
        s, _ = carry
        s = _check(prob, lam, s, **kw)
        go = (s.gap > target) & (s.num_steps < max_steps) & jnp.isfinite(s.gap)
        it = functools.partial(_iterate, prob, lam, loss=loss, fit_intercept=fit_intercept, solver=solver)
        s = lax.cond(go, it, lambda s: s, s)
        return s, go

    state, _ = lax.while_loop(lambda c: c[1], body, (state, jnp.asarray(True)))
    finite = jnp.isfinite(state.gap) & jnp.all(jnp.isfinite(state.coef))
    return state, result_code(state.gap <= target, finite)


def _intercept(prob: _Problem, state: LassoState, fit_intercept):
    if not fit_intercept:
        return jnp.zeros((), state.coef.dtype)
    return state.offset - jnp.dot(prob.mu, state.coef, precision=_HI)


def _lambda_max(prob: _Problem, loss, fit_intercept):
    if fit_intercept or loss == "squared":
        r = prob.y - prob.y_center
    else:
        r = prob.y - 0.5  # gradient of the logistic loss at z = 0
    u = prob.w * r
    grad = _rmatvec(prob.XT, u) - prob.mu * jnp.sum(u)
    return jnp.max(jnp.abs(grad)) / prob.n_w


def _default_grid(X, y, *, num, eps, loss, fit_intercept):
    """Traceable :func:`lambda_grid` for one design."""
    w = jnp.ones(X.shape[0], X.dtype)
    prob = _make_problem(X.T, y, w, loss=loss, fit_intercept=fit_intercept, solver="none")
    return _grid(_lambda_max(prob, loss, fit_intercept), num, eps)


def _grid(lam_max, num, eps):
    lam_max = jnp.maximum(lam_max, jnp.finfo(lam_max.dtype).tiny)
    return lam_max * eps ** jnp.linspace(0.0, 1.0, num, dtype=lam_max.dtype)


# ----------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------


def _prepare(X, y, *, loss, fit_intercept, name_X="X"):
    """Shape/value checks before tracing; returns float arrays (y mapped to {0,1})."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    X = _checks.as_float_array(X, name_X)
    _checks.check_ndim(X, 2, name_X, "a 2-D array of shape (n_samples, n_features)")
    y = jnp.asarray(y)
    if y.dtype == bool:
        y = y.astype(X.dtype)
    y = _checks.as_float_array(y, "y")
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
    _check_response(y, loss=loss, fit_intercept=fit_intercept)
    if loss == "logistic":
        y = (y > 0).astype(X.dtype)
    return X, y


def _check_response(y, *, loss, fit_intercept):
    """Value checks on a concrete response (no-op on tracers)."""
    if not _checks.is_concrete(y):
        return
    yv = np.asarray(y)
    if loss == "squared":
        if fit_intercept and yv.size and np.ptp(yv) == 0:
            raise ValueError(
                f"y is constant (every entry equals {yv.flat[0]!r}): with an intercept "
                "nothing is left to explain and every statistic would be zero"
            )
    else:
        labels = set(np.unique(yv).tolist())
        if not (labels <= {0.0, 1.0} or labels <= {-1.0, 1.0}):
            raise ValueError(
                f"logistic loss needs binary labels in {{0, 1}} or {{-1, 1}}, got values {sorted(labels)[:5]}"
            )
        if len(labels) < 2:
            raise ValueError(f"y holds a single class ({sorted(labels)[0]!r}); need both classes")


def _check_lam(lam, name="lam"):
    if _checks.is_concrete(lam):
        a = np.asarray(lam)
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name} must be positive and finite, got {a if a.ndim else float(a)}")


def _check_settings(tol, max_steps, solver, dtype):
    """Validate solver settings; ``tol=None`` means 1e-6 (float64) or 1e-4 (float32)."""
    if tol is None:
        tol = 1e-6 if jnp.dtype(dtype) == jnp.float64 else 1e-4
    if not (isinstance(tol, (int, float)) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    solver = _resolve_solver(solver)
    if max_steps is None:
        max_steps = _DEFAULT_MAX_STEPS[solver]
    if not (isinstance(max_steps, (int, np.integer)) and max_steps >= 0):
        raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
    return float(tol), int(max_steps), solver


def kfold_ids(n: int, folds: int) -> np.ndarray:
    """Fold index of each row for contiguous K-fold splits.

    Same splits as ``sklearn.model_selection.KFold(folds)`` (no shuffling):
    the first ``n % folds`` folds hold one extra row.

    Example:
        >>> kfold_ids(5, 2)
        array([0, 0, 0, 1, 1], dtype=int32)
    """
    if not (isinstance(folds, (int, np.integer)) and 2 <= folds <= n):
        raise ValueError(f"folds must be an integer in [2, n_samples={n}], got {folds!r}")
    sizes = np.full(folds, n // folds)
    sizes[: n % folds] += 1
    return np.repeat(np.arange(folds, dtype=np.int32), sizes)


def _fold_ids(n, folds):
    """Resolve ``folds`` (int or per-row fold ids) into (ids, K)."""
    if isinstance(folds, (int, np.integer)):
        return kfold_ids(n, int(folds)), int(folds)
    ids = np.asarray(folds)
    if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"folds must be an int or an integer array of shape ({n},), got {ids.dtype} array of shape {ids.shape}"
        )
    uniq = np.unique(ids)
    if uniq.size < 2 or uniq[0] != 0 or uniq[-1] != uniq.size - 1:
        raise ValueError(f"fold ids must be 0, 1, ..., K-1 with K >= 2, got {uniq.tolist()[:10]}")
    return ids.astype(np.int32), int(uniq.size)


def _check_init(init, m, dtype):
    if init is None:
        return jnp.zeros(m, dtype)
    init = jnp.asarray(init, dtype)
    if init.shape != (m,):
        raise ValueError(f"init must have shape ({m},) like the coefficients, got {init.shape}")
    return init


# ----------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------


def lambda_max(X, y, *, loss: str = "squared", fit_intercept: bool = True) -> jax.Array:
    r"""Smallest ``lam`` for which all coefficients are zero.

    :math:`\lambda_{\max} = \|X_c^\top (y - \bar y)\|_\infty / n` (the gradient
    of the data fit at the null model). Matches the first value of
    ``sklearn.linear_model.lasso_path``'s grid.

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
    X, y = _prepare(X, y, loss=loss, fit_intercept=fit_intercept)
    return _lambda_max_jit(X, y, loss=loss, fit_intercept=fit_intercept)


@functools.partial(jax.jit, static_argnames=("loss", "fit_intercept"))
def _lambda_max_jit(X, y, *, loss, fit_intercept):
    w = jnp.ones(X.shape[0], X.dtype)
    prob = _make_problem(X.T, y, w, loss=loss, fit_intercept=fit_intercept, solver="none")
    return _lambda_max(prob, loss, fit_intercept)


def lambda_grid(
    X, y, *, num: int = 100, eps: float = 1e-3, loss: str = "squared", fit_intercept: bool = True
) -> jax.Array:
    """Geometric grid from ``lambda_max`` down to ``eps * lambda_max`` (``num`` values).

    Same grid as scikit-learn's ``LassoCV(n_alphas=num, eps=eps)``.

    Example:
        >>> X = jnp.eye(3); y = jnp.array([1.0, 2.0, 3.0])
        >>> [round(v, 6) for v in lambda_grid(X, y, num=3, eps=0.01, fit_intercept=False).tolist()]
        [1.0, 0.1, 0.01]
    """
    _check_grid_settings(num, eps)
    return _grid(lambda_max(X, y, loss=loss, fit_intercept=fit_intercept), num, eps)


def _check_grid_settings(num, eps):
    if not (isinstance(num, (int, np.integer)) and num >= 1):
        raise ValueError(f"num_lambdas must be a positive integer, got {num!r}")
    if not (0 < eps < 1):
        raise ValueError(f"eps must lie in (0, 1), got {eps!r}")


def lasso(
    X,
    y,
    lam,
    *,
    loss: str = "squared",
    fit_intercept: bool = True,
    init=None,
    tol: float | None = None,
    max_steps: int | None = None,
    solver: str = "auto",
    screen: bool = True,
    throw: bool = False,
) -> Solution:
    r"""Solve the lasso or l1-logistic regression at one ``lam``.

    .. math::

        \min_{\beta, \beta_0} \frac1n \sum_i f(x_i^\top\beta + \beta_0; y_i)
        + \lambda\|\beta\|_1

    ``loss="squared"`` matches ``sklearn.linear_model.Lasso(alpha=lam)``;
    ``loss="logistic"`` matches
    ``LogisticRegression(l1_ratio=1, C=1/(n*lam), solver="saga")`` (labels in
    ``{0, 1}`` or ``{-1, 1}``; the intercept refers to the ``{0, 1}`` coding).

    Args:
        X: ``(n, m)`` design.
        y: ``(n,)`` response or binary labels.
        lam: penalty ``> 0`` (may be traced).
        loss: ``"squared"`` or ``"logistic"``.
        fit_intercept: fit an unpenalised intercept (columns are centred).
        init: optional ``(m,)`` warm start for the coefficients.
        tol: stop when ``gap <= tol * D0``, ``D0`` the null deviance per sample
            (default 1e-6 in float64, 1e-4 in float32).
        max_steps: epochs (``cd``, default 1000) or iterations (``fista``,
            default 20000).
        solver: ``"auto"``, ``"cd"`` or ``"fista"`` (see the module docstring).
        screen: apply dynamic GAP safe screening.
        throw: raise ``RuntimeError`` if the solve did not succeed.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` the ``(m,)`` coefficients,
        ``result`` a ``RESULTS`` code and ``stats`` holding ``intercept``,
        ``duality_gap``, ``num_steps``, ``max_steps``, ``num_screened``;
        ``state`` is the final :class:`LassoState`.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (50, 10))
        >>> y = X[:, 0] + 0.1 * jax.random.normal(jax.random.key(1), (50,))
        >>> sol = lasso(X, y, 0.1)
        >>> bool(sol.successful), int(jnp.argmax(jnp.abs(sol.value)))
        (True, 0)
    """
    X, y = _prepare(X, y, loss=loss, fit_intercept=fit_intercept)
    _check_lam(lam)
    tol, max_steps, solver = _check_settings(tol, max_steps, solver, X.dtype)
    coef0 = _check_init(init, X.shape[1], X.dtype)
    lam = jnp.asarray(lam, X.dtype)
    if lam.ndim != 0:
        raise ValueError(f"lam must be a scalar, got shape {lam.shape}; use lasso_path for a grid")
    sol = _lasso_jit(
        X,
        y,
        lam,
        coef0,
        loss=loss,
        fit_intercept=fit_intercept,
        tol=tol,
        max_steps=max_steps,
        solver=solver,
        screen=screen,
    )
    return raise_if_failed(sol, throw)


@functools.partial(jax.jit, static_argnames=("loss", "fit_intercept", "solver", "screen"))
def _lasso_jit(X, y, lam, coef0, *, loss, fit_intercept, tol, max_steps, solver, screen):
    w = jnp.ones(X.shape[0], X.dtype)
    prob = _make_problem(X.T, y, w, loss=loss, fit_intercept=fit_intercept, solver=solver)
    state, code = _solve(
        prob,
        lam,
        coef0,
        prob.offset0,
        loss=loss,
        fit_intercept=fit_intercept,
        solver=solver,
        screen=screen,
        tol=tol,
        max_steps=max_steps,
    )
    return Solution(
        value=state.coef,
        result=code,
        stats=_stats(prob, state, lam, max_steps, fit_intercept),
        state=state,
    )


def _stats(prob, state, lam, max_steps, fit_intercept):
    return {
        "intercept": _intercept(prob, state, fit_intercept),
        "duality_gap": state.gap,
        "num_steps": state.num_steps,
        "max_steps": jnp.asarray(max_steps, jnp.int32),
        "num_screened": jnp.sum(~state.active).astype(jnp.int32),
        "lam": lam,
    }


def lasso_init(
    X,
    y,
    lam,
    *,
    loss: str = "squared",
    fit_intercept: bool = True,
    init=None,
    solver: str = "auto",
    screen: bool = True,
    tol: float | None = None,
) -> LassoState:
    """Initial :class:`LassoState` (coefficients ``init`` or zeros, gap computed).

    With :func:`lasso_step` this exposes the iteration for notebooks and
    debugging; :func:`lasso` drives the same two functions in a
    ``lax.while_loop``.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (30, 5)); y = X[:, 0]
        >>> s = lasso_init(X, y, 0.1, solver="cd")
        >>> s = lasso_step(s, X, y, 0.1, solver="cd")
        >>> int(s.num_steps)
        1
    """
    X, y = _prepare(X, y, loss=loss, fit_intercept=fit_intercept)
    _check_lam(lam)
    tol, _, solver = _check_settings(tol, None, solver, X.dtype)
    coef0 = _check_init(init, X.shape[1], X.dtype)
    return _init_jit(
        X,
        y,
        jnp.asarray(lam, X.dtype),
        coef0,
        tol,
        loss=loss,
        fit_intercept=fit_intercept,
        solver=solver,
        screen=screen,
    )


@functools.partial(jax.jit, static_argnames=("loss", "fit_intercept", "solver", "screen"))
def _init_jit(X, y, lam, coef0, tol, *, loss, fit_intercept, solver, screen):
    w = jnp.ones(X.shape[0], X.dtype)
    prob = _make_problem(X.T, y, w, loss=loss, fit_intercept=fit_intercept, solver=solver)
    kw = dict(loss=loss, fit_intercept=fit_intercept, screen=screen, tol=tol)
    state = _init_state(prob, lam, coef0, prob.offset0, solver=solver, **kw)
    return _check(prob, lam, state, **kw)


def lasso_step(
    state: LassoState,
    X,
    y,
    lam,
    *,
    loss: str = "squared",
    fit_intercept: bool = True,
    solver: str = "auto",
    screen: bool = True,
    tol: float | None = None,
) -> LassoState:
    """One epoch (``cd``) or 10 iterations (``fista``) followed by a gap check and screening."""
    X, y = _prepare(X, y, loss=loss, fit_intercept=fit_intercept)
    tol, _, solver = _check_settings(tol, None, solver, X.dtype)
    return _step_jit(
        state,
        X,
        y,
        jnp.asarray(lam, X.dtype),
        tol,
        loss=loss,
        fit_intercept=fit_intercept,
        solver=solver,
        screen=screen,
    )


@functools.partial(jax.jit, static_argnames=("loss", "fit_intercept", "solver", "screen"))
def _step_jit(state, X, y, lam, tol, *, loss, fit_intercept, solver, screen):
    w = jnp.ones(X.shape[0], X.dtype)
    prob = _make_problem(X.T, y, w, loss=loss, fit_intercept=fit_intercept, solver=solver)
    return _step(
        prob,
        lam,
        state,
        loss=loss,
        fit_intercept=fit_intercept,
        solver=solver,
        screen=screen,
        tol=tol,
    )


def _path_scan(prob, lambdas, coef0, *, loss, fit_intercept, solver, screen, tol, max_steps):
    """Warm-started solves along ``lambdas`` (``lax.scan``); per-lambda outputs."""
    kw = dict(
        loss=loss,
        fit_intercept=fit_intercept,
        solver=solver,
        screen=screen,
        tol=tol,
        max_steps=max_steps,
    )

    def body(carry, lam):
        coef, offset = carry
        state, code = _solve(prob, lam, coef, offset, **kw)
        out = (state.coef, code, _stats(prob, state, lam, max_steps, fit_intercept))
        return (state.coef, state.offset), out

    _, (coefs, codes, stats) = lax.scan(body, (coef0, prob.offset0), lambdas)
    return coefs, codes, stats


def lasso_path(
    X,
    y,
    lambdas=None,
    *,
    num_lambdas: int = 100,
    eps: float = 1e-3,
    loss: str = "squared",
    fit_intercept: bool = True,
    tol: float | None = None,
    max_steps: int | None = None,
    solver: str = "auto",
    screen: bool = True,
    throw: bool = False,
) -> Solution:
    """Lasso / l1-logistic solutions along a lambda path with warm starts.

    Solves :func:`lasso` at each value of ``lambdas`` in the given order
    (give them in decreasing order), each solve starting from the previous
    solution (``lax.scan``). Safe screening restarts at every lambda.
    Matches ``sklearn.linear_model.lasso_path`` (least squares) on the same grid.

    Args:
        X, y: as in :func:`lasso`.
        lambdas: ``(L,)`` penalties; default :func:`lambda_grid` with
            ``num_lambdas`` and ``eps``.
        num_lambdas, eps: default grid, ``lambda_max * eps**(k/(L-1))``.
        loss, fit_intercept, tol, max_steps, solver, screen, throw: as in :func:`lasso`.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` of shape ``(L, m)``,
        ``result`` of shape ``(L,)`` and ``stats`` entries of shape ``(L,)``
        (``lam``, ``intercept``, ``duality_gap``, ``num_steps``, ...).

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (40, 6)); y = X[:, 1]
        >>> path = lasso_path(X, y, num_lambdas=5)
        >>> path.value.shape
        (5, 6)
    """
    X, y = _prepare(X, y, loss=loss, fit_intercept=fit_intercept)
    tol, max_steps, solver = _check_settings(tol, max_steps, solver, X.dtype)
    if lambdas is None:
        _check_grid_settings(num_lambdas, eps)
        lam_max = _lambda_max_jit(X, y, loss=loss, fit_intercept=fit_intercept)
        lambdas = _grid(lam_max, num_lambdas, eps)
    lambdas = jnp.asarray(lambdas, X.dtype)
    _checks.check_ndim(lambdas, 1, "lambdas", "a 1-D array of penalties")
    _check_lam(lambdas, "lambdas")
    sol = _path_jit(
        X,
        y,
        lambdas,
        loss=loss,
        fit_intercept=fit_intercept,
        tol=tol,
        max_steps=max_steps,
        solver=solver,
        screen=screen,
    )
    return raise_if_failed(sol, throw)


@functools.partial(jax.jit, static_argnames=("loss", "fit_intercept", "solver", "screen"))
def _path_jit(X, y, lambdas, *, loss, fit_intercept, tol, max_steps, solver, screen):
    w = jnp.ones(X.shape[0], X.dtype)
    prob = _make_problem(X.T, y, w, loss=loss, fit_intercept=fit_intercept, solver=solver)
    coefs, codes, stats = _path_scan(
        prob,
        lambdas,
        jnp.zeros(X.shape[1], X.dtype),
        loss=loss,
        fit_intercept=fit_intercept,
        solver=solver,
        screen=screen,
        tol=tol,
        max_steps=max_steps,
    )
    return Solution(value=coefs, result=codes, stats=stats)


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
    folds, same grid) for least squares.

    Args:
        X, y: as in :func:`lasso`.
        folds: number of contiguous folds ``K`` (scikit-learn's ``KFold``),
            or an ``(n,)`` integer array of fold ids ``0..K-1`` (shuffle
            them yourself for random folds).
        lambdas, num_lambdas, eps: the grid (see :func:`lasso_path`); the
            default grid is computed on the full data.
        loss, fit_intercept, tol, max_steps, solver, screen, throw: as in :func:`lasso`.
        patience: early stop along the path (glmnet-style): once the mean CV
            error has not improved on its best for ``patience`` consecutive
            lambdas, the remaining (smaller) lambdas are not solved (their
            ``cv_error`` is ``inf``). The small-lambda end of the path is by
            far the most expensive (near-interpolation when ``m >= n``) and
            rarely holds the CV minimum once the error has risen for a while.
            ``None`` (default) solves the whole grid, exactly like scikit-learn.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` the ``(m,)`` refitted
        coefficients, ``result`` the worst code over all solves and ``stats``:
        ``lam`` (chosen), ``lam_index``, ``lambdas`` ``(L,)``, ``cv_error``
        ``(L, K)``, ``cv_mean`` ``(L,)``, ``intercept``, ``duality_gap``
        (refit), ``num_steps`` (total over all solves), ``max_steps``.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (60, 8))
        >>> y = X[:, 0] - X[:, 1] + 0.5 * jax.random.normal(jax.random.key(1), (60,))
        >>> sol = lasso_cv(X, y, folds=3, num_lambdas=20)
        >>> sol.stats["cv_error"].shape
        (20, 3)
    """
    X, y = _prepare(X, y, loss=loss, fit_intercept=fit_intercept)
    tol, max_steps, solver = _check_settings(tol, max_steps, solver, X.dtype)
    fold_ids, K = _fold_ids(X.shape[0], folds)
    _check_folds_nonempty(fold_ids, K, y, loss)
    if lambdas is None:
        _check_grid_settings(num_lambdas, eps)
        lam_max = _lambda_max_jit(X, y, loss=loss, fit_intercept=fit_intercept)
        lambdas = _grid(lam_max, num_lambdas, eps)
    lambdas = jnp.asarray(lambdas, X.dtype)
    _checks.check_ndim(lambdas, 1, "lambdas", "a 1-D array of penalties")
    _check_lam(lambdas, "lambdas")
    patience = _check_patience(patience)
    sol = _cv_jit(
        X,
        y,
        jnp.asarray(fold_ids),
        lambdas,
        K=K,
        loss=loss,
        fit_intercept=fit_intercept,
        tol=tol,
        max_steps=max_steps,
        solver=solver,
        screen=screen,
        patience=patience,
    )
    return raise_if_failed(sol, throw)


def _check_patience(patience):
    if patience is None:
        return None
    if not (isinstance(patience, (int, np.integer)) and patience >= 1):
        raise ValueError(f"patience must be None or a positive integer, got {patience!r}")
    return int(patience)


def _check_folds_nonempty(fold_ids, K, y, loss):
    counts = np.bincount(fold_ids, minlength=K)
    if np.any(counts == fold_ids.size):
        raise ValueError("every fold leaves no training rows; use more folds")
    if loss == "logistic" and _checks.is_concrete(y):
        yv = np.asarray(y)
        for k in range(K):
            train = yv[fold_ids != k]
            if np.unique(train).size < 2:
                raise ValueError(
                    f"the training rows of fold {k} hold a single class; use fewer folds or shuffle the fold ids"
                )


@functools.partial(jax.jit, static_argnames=("K", "loss", "fit_intercept", "solver", "screen", "patience"))
def _cv_jit(X, y, fold_ids, lambdas, *, K, loss, fit_intercept, tol, max_steps, solver, screen, patience=None):
    return _cv_impl(
        X,
        y,
        fold_ids,
        lambdas,
        K=K,
        loss=loss,
        fit_intercept=fit_intercept,
        tol=tol,
        max_steps=max_steps,
        solver=solver,
        screen=screen,
        patience=patience,
    )


def _cv_impl(X, y, fold_ids, lambdas, *, K, loss, fit_intercept, tol, max_steps, solver, screen, patience=None):
    """Cross-validation for one design (traceable; ``vmap`` over designs)."""
    dtype = X.dtype
    XT = X.T
    # K training masks followed by the full data (the refit rides along the path).
    W = jnp.concatenate(
        [
            (fold_ids[None, :] != jnp.arange(K)[:, None]).astype(dtype),
            jnp.ones((1, X.shape[0]), dtype),
        ]
    )
    make = functools.partial(_make_problem, loss=loss, fit_intercept=fit_intercept, solver=solver)
    probs = jax.vmap(make, in_axes=(None, None, 0))(XT, y, W)
    kw = dict(
        loss=loss,
        fit_intercept=fit_intercept,
        solver=solver,
        screen=screen,
        tol=tol,
    )
    # max_steps is traced (not static), so an early-stopped lambda costs one gap check
    solve = jax.vmap(
        lambda prob, lam, c, o, ms: _solve(prob, lam, c, o, max_steps=ms, **kw),
        in_axes=(0, None, 0, 0, None),
    )
    held_out = 1.0 - W[:K]
    n_held = jnp.sum(held_out, axis=1)
    m = X.shape[1]
    L = lambdas.shape[0]

    def body(carry, xs):
        coefs, offsets, best, stall = carry
        lam, idx = xs
        stopped = jnp.asarray(False) if patience is None else stall >= patience
        states, codes = solve(probs, lam, coefs, offsets, jnp.where(stopped, 0, max_steps))
        dev = 2.0 * _loss(loss, states.z[:K], y[None, :])
        errs = jnp.sum(held_out * dev, axis=1) / n_held
        errs = jnp.where(stopped, jnp.inf, errs)
        codes = jnp.where(stopped, 0, codes)
        mean = jnp.mean(errs)
        better = mean < best["err"]
        stall = jnp.where(better, 0, stall + 1)
        full = jax.tree_util.tree_map(lambda a: a[K], states)
        full_prob = jax.tree_util.tree_map(lambda a: a[K], probs)
        candidate = {
            "err": mean,
            "index": idx,
            "coef": full.coef,
            "intercept": _intercept(full_prob, full, fit_intercept),
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
        "duality_gap": best["gap"],
        "num_steps": jnp.sum(steps),
        "max_steps": jnp.asarray(max_steps, jnp.int32),
    }
    return Solution(value=best["coef"], result=jnp.max(codes), stats=stats)
