r"""Lifted and Fenchel lifted neural networks trained by block-coordinate descent.

A feed-forward ReLU network with ``L`` hidden layers (rows are samples,
``X_0 = X`` is ``N x p_0``)

.. math::

    X_{l+1} = \mathrm{relu}(X_l W_l + 1 b_l^T), \quad l = 0..L-1, \qquad
    \hat Y = X_L W_L + 1 b_L^T

is trained here without back-propagation: the layer outputs ``X_1..X_L`` are
kept as variables and the recursion is replaced by a penalty, so that every
block of variables solves a convex problem that is parallel across samples (the
X-blocks) or layers (the W-blocks). All objectives are per-sample means; with
``U_l = X_l W_l + 1 b_l^T``:

**Fenchel lifted network** (``model="fenchel"``, thesis chapter 3, eq. 3.9):

.. math::

    \min_{W, X \ge 0}\; \frac1N \mathcal L(Y, U_L)
      + \frac{\lambda}{N}\sum_{l<L} B(X_{l+1}, U_l) + \sum_l \rho_l \|W_l\|_F^2,
    \qquad B(v, u) = \tfrac12 v^2 + \tfrac12 \mathrm{relu}(u)^2 - uv \;(v\ge0)

``B`` is the Fenchel-Young gap of the ReLU (eq. 3.5): ``B >= 0`` with equality
iff ``v = relu(u)``, so for any weights the objective at the feed-forward ``X``
equals the standard training loss and its minimum is a lower bound of the
standard training problem (eq. 3.7-3.9). By the rescaling of section 3.6 a single
penalty weight ``lam`` suffices.

**Lifted network** (``model="lifted"``, thesis chapter 2, eq. 2.5 / 2.11 / 2.15):
the ReLU is the arg-min of a non-negative least squares, giving

.. math::

    \min_{W, X \ge 0}\; \frac1N \ell_{out}
      + \frac{\lambda}{N}\sum_{l<L} \|X_{l+1} - U_l\|_F^2 + \sum_l \rho_l\|W_l\|_F^2

with ``ell_out = 1/2 ||Y - U_L||^2`` for ``loss="mse"`` (eq. 2.5) and, for
``loss="cross_entropy"``, an output variable ``Z`` on the probability simplex
(the Euclidean simplex projection as last activation, eq. 2.14-2.15):
``ell_out = -Tr(Y^T log Z) + lam ||Z - U_L||^2``.

Block-coordinate descent (thesis Algorithm 1; :func:`lifted_bcd_step`) updates
the X-blocks backwards from ``X_L`` to ``X_1`` and then all W-blocks:

* X-steps: per-sample strongly convex problems over ``Z >= 0`` solved by
  accelerated projected gradient with adaptive restart (eq. 2.13, 3.14, 3.15,
  3.16), the stopping and restart tests made every third step (on CPU each
  test is a loop iteration and full-array reductions, which cost more than
  the step itself on an MNIST batch); the lifted cross-entropy output step is
  the exact dual bisection of thesis section 2.8
  (:func:`solve_simplex_cross_entropy`).
* W-steps: ridge regressions in closed form (lifted model, MSE last layer), or
  iterations whose every step is a ridge regression with a fixed Gram matrix:
  for Fenchel hidden layers (eq. 3.17) the majorise-minimise step is used as a
  preconditioned gradient in a nonlinear conjugate-gradient method with an
  exact line search per output unit (the penalty is a sum over units); for the
  cross-entropy last layer, majorise-minimise with Bohning's curvature bound
  accelerated by Nesterov momentum with restart. On an MNIST batch of 500
  (first layer, float64) the objective gap left by 17 (25) accelerated
  majorise-minimise steps is reached by 10 (14) conjugate-gradient steps.
  The Gram/Cholesky factor is computed once per W-step, in the primal
  ``(p+1) x (p+1)`` form or, for batches smaller than the layer width, in the
  ``N x N`` kernel (Woodbury) form (whose iterates carry their kernel
  coefficients: one ``N x N`` product per step); with ``fixed_batches`` the
  first layer's factor is computed once per batch for the whole training.

Every inexact block solve is safeguarded (a block is only accepted when it does
not increase its subproblem objective), so a non-batched pass never increases
the training objective. The batched variant (thesis Algorithm 2,
:func:`lifted_batch_step`) re-initialises X by a forward pass for each batch and
adds the proximal term ``gamma_l ||Theta_l - Theta_l^0||^2`` (weights and bias)
to the W-steps (eq. 3.13, 3.19, 3.20).

Networks train in the dtype of ``X``: float32 is fine for MNIST-sized problems
(Gram matrices use ``Precision.HIGHEST``); tests use float64.

Main entry points: :class:`LiftedSpec`, :func:`fit_lifted`,
:func:`tune_lifted` (``vmap`` over penalty weight / ridge),
:func:`predict_lifted` (feed-forward or lifted prediction, eq. 3.12),
:func:`lifted_to_mlp` and :func:`train_mlp` (optax fine-tuning, Table 2.1).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.linalg import cho_solve, solve_triangular

from jaxknock import _memory, _mesh
from jaxknock._checks import as_float_array, check_finite, check_ndim, is_concrete
from jaxknock._solution import RESULTS, Solution, raise_if_failed

__all__ = [
    "LiftedSpec",
    "LiftedHyper",
    "LiftedState",
    "fenchel_penalty",
    "fenchel_relu_regression",
    "solve_simplex_cross_entropy",
    "init_lifted_state",
    "lifted_objective",
    "lifted_bcd_step",
    "lifted_batch_step",
    "fit_lifted",
    "tune_lifted",
    "predict_lifted",
    "lifted_to_mlp",
    "mlp_init",
    "mlp_apply",
    "mlp_loss",
    "train_mlp",
]

_HI = lax.Precision.HIGHEST
LOSSES = ("mse", "cross_entropy")
MODELS = ("fenchel", "lifted")
# Curvature bound of the loss in the logits: 1 for 1/2 ||.||^2, 1/2 for softmax
# cross-entropy (Bohning's bound: Hessian diag(p) - pp^T <= I/2).
_LOSS_CURVATURE = {"mse": 1.0, "cross_entropy": 0.5}


def _colsum(A):
    """Column sums ``1^T A`` as a matrix-vector product.

    In the per-unit line searches of the W-blocks, an integrand over a
    ``500 x 300`` array and its column sum took 0.067 ms as an XLA:CPU
    reduction against 0.03-0.05 ms as elementwise pass plus product (which
    runs on all cores); full precision, so that no GPU rounds the sum through
    TF32.
    """
    return jnp.matmul(jnp.ones(A.shape[:1], A.dtype), A, precision=_HI)


# ----------------------------------------------------------------------------
# Specification, hyper-parameters, state
# ----------------------------------------------------------------------------


def _per_layer(value, n: int, name: str) -> tuple:
    arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if arr.ndim != 1 or arr.shape[0] not in (1, n):
        raise ValueError(f"{name} must be a scalar or a sequence of {n} per-layer values, got {value!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and non-negative, got {value!r}")
    return tuple(float(v) for v in np.broadcast_to(arr, (n,)))


@dataclasses.dataclass(frozen=True)
class LiftedSpec:
    """Static description of a lifted ReLU network (hashable; a ``jit`` static argument).

    Args:
      sizes: layer widths ``(p_0, p_1, ..., p_L, p)``: input dimension, ``L >= 1``
        ReLU hidden widths, output dimension (number of classes).
      loss: ``"mse"`` (``1/2 ||Y - U_L||^2``) or ``"cross_entropy"`` (softmax
        cross-entropy for ``fenchel``; simplex output variable for ``lifted``).
      model: ``"fenchel"`` (Fenchel lifted, chapter 3) or ``"lifted"``
        (original lifted, chapter 2).
      lam: penalty weight ``lambda > 0`` of the activation penalties.
      rho: ridge weights ``rho_l >= 0`` of ``||W_l||_F^2`` (scalar or one per
        weight layer; biases are not ridge-penalised).
      gamma: proximal weights ``gamma_l`` of ``||Theta_l - Theta_l^0||^2``
        between batches (Algorithm 2; must be ``> 0`` for batched training and
        is ignored by non-batched training).

    Example:
      >>> spec = LiftedSpec((784, 300, 10), loss="cross_entropy", lam=1.0, gamma=1.0)
      >>> spec.num_layers
      2
    """

    sizes: tuple
    loss: str = "cross_entropy"
    model: str = "fenchel"
    lam: float = 1.0
    rho: Any = 0.0
    gamma: Any = 1.0

    def __post_init__(self):
        try:
            sizes = tuple(int(s) for s in self.sizes)
        except TypeError as err:
            raise TypeError(f"sizes must be a sequence of ints, got {self.sizes!r}") from err
        if len(sizes) < 3:
            raise ValueError(
                "sizes must hold the input width, at least one hidden width and the "
                f"output width, e.g. (784, 300, 10); got {sizes}"
            )
        if any(s < 1 for s in sizes):
            raise ValueError(f"all layer sizes must be positive, got {sizes}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if not (np.isfinite(self.lam) and float(self.lam) > 0):
            raise ValueError(f"lam must be a positive finite number, got {self.lam!r}")
        n = len(sizes) - 1
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "lam", float(self.lam))
        object.__setattr__(self, "rho", _per_layer(self.rho, n, "rho"))
        object.__setattr__(self, "gamma", _per_layer(self.gamma, n, "gamma"))

    @property
    def num_layers(self) -> int:
        """Number of weight layers ``L + 1``."""
        return len(self.sizes) - 1

    @property
    def num_hidden(self) -> int:
        """Number of hidden (lifted) layers ``L``."""
        return len(self.sizes) - 2

    def hyper(self, dtype=None) -> LiftedHyper:
        """The spec's hyper-parameters as arrays (traceable, ``vmap``-able)."""
        dtype = dtype or jnp.result_type(float)
        return LiftedHyper(
            lam=jnp.asarray(self.lam, dtype),
            rho=jnp.asarray(self.rho, dtype),
            gamma=jnp.asarray(self.gamma, dtype),
        )


class LiftedHyper(NamedTuple):
    """Traced hyper-parameters: ``lam`` scalar, ``rho`` and ``gamma`` of shape ``(L+1,)``.

    Give them a leading axis to train several models at once (:func:`tune_lifted`).
    """

    lam: jax.Array
    rho: jax.Array
    gamma: jax.Array


class LiftedState(NamedTuple):
    """Variables of the lifted training problem (a pytree).

    Attributes:
      params: list of ``{"w": (p_l, p_{l+1}), "b": (p_{l+1},)}`` (an MLP pytree).
      hidden: tuple ``(X_1, ..., X_L)`` of non-negative ``N x p_l`` layer variables.
      output: the simplex output variable ``Z`` (``lifted`` + ``cross_entropy``),
        otherwise ``None``.
    """

    params: list
    hidden: tuple
    output: Any = None


class _Settings(NamedTuple):
    inner_tol: float
    inner_max_steps: int
    w_max_steps: int
    bisect_tol: float
    bisect_max_steps: int
    alternations: int
    extrapolation: float = 0.0  # largest beta of the between-pass extrapolation (0: off)


# ----------------------------------------------------------------------------
# Plain MLP helpers
# ----------------------------------------------------------------------------


def mlp_init(key, sizes: Sequence[int], *, dtype=None) -> list:
    """Xavier/Glorot-uniform weights and zero biases for a ReLU MLP.

    ``W_l ~ U(-a, a)``, ``a = sqrt(6 / (p_l + p_{l+1}))`` (as TensorFlow's default).

    Args:
      key: a ``jax.random`` key.
      sizes: layer widths ``(p_0, ..., p_{L+1})``.
      dtype: floating dtype (default: JAX's default float).

    Returns:
      list of ``{"w": (p_l, p_{l+1}), "b": (p_{l+1},)}``.

    Example:
      >>> params = mlp_init(jax.random.key(0), (4, 8, 3))
      >>> params[0]["w"].shape
      (4, 8)
    """
    dtype = dtype or jnp.result_type(float)
    sizes = tuple(int(s) for s in sizes)
    keys = jax.random.split(key, len(sizes) - 1)
    params = []
    for k, p_in, p_out in zip(keys, sizes[:-1], sizes[1:]):
        a = math.sqrt(6.0 / (p_in + p_out))
        w = jax.random.uniform(k, (p_in, p_out), dtype, -a, a)
        params.append({"w": w, "b": jnp.zeros((p_out,), dtype)})
    return params


def mlp_apply(params, X):
    """Feed-forward rule: ``X_{l+1} = relu(X_l W_l + b_l)``, returns ``U_L = X_L W_L + b_L``.

    For classification ``U_L`` are the logits (class scores); the predicted class
    is their arg-max.

    Example:
      >>> params = mlp_init(jax.random.key(0), (4, 8, 3))
      >>> mlp_apply(params, jnp.ones((5, 4))).shape
      (5, 3)
    """
    h = X
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    return h @ params[-1]["w"] + params[-1]["b"]


def mlp_loss(params, X, Y, *, loss: str = "cross_entropy", rho=0.0):
    """Standard training loss ``(1/N) L(Y, mlp_apply(params, X)) + sum_l rho_l ||W_l||^2``.

    ``L`` is ``1/2 ||Y - U||_F^2`` (``mse``) or softmax cross-entropy; ``Y`` is an
    ``N x p`` target / one-hot matrix. This is the problem (3.3) that the Fenchel
    objective lower-bounds.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    U = mlp_apply(params, X)
    rho = jnp.broadcast_to(jnp.asarray(rho, U.dtype), (len(params),))
    ridge = sum(rho[i] * jnp.sum(layer["w"] ** 2) for i, layer in enumerate(params))
    return _loss_sum(Y, U, loss) / X.shape[0] + ridge


def _accuracy(U, labels):
    return jnp.mean((jnp.argmax(U, axis=-1) == labels).astype(U.dtype))


# ----------------------------------------------------------------------------
# Losses and penalties
# ----------------------------------------------------------------------------


def _loss_rows(Y, U, loss):
    if loss == "mse":
        return 0.5 * jnp.sum((U - Y) ** 2, axis=-1)
    return -jnp.sum(Y * jax.nn.log_softmax(U, axis=-1), axis=-1)


def _loss_sum(Y, U, loss):
    return jnp.sum(_loss_rows(Y, U, loss))


def _loss_grad(Y, U, loss):
    if loss == "mse":
        return U - Y
    return jax.nn.softmax(U, axis=-1) - Y


def _fenchel_rows(V, U):
    # B(v, u) = 1/2 (v - u_+)^2 + v u_-  (the same as 1/2 v^2 + 1/2 u_+^2 - uv for
    # v >= 0, written without cancellation).
    up = jax.nn.relu(U)
    return jnp.sum(0.5 * (V - up) ** 2 + V * jax.nn.relu(-U), axis=-1)


def fenchel_penalty(V, U):
    r"""Fenchel-Young ReLU penalty ``B(V, U) = sum 1/2 V^2 + 1/2 relu(U)^2 - U V`` (eq. 3.5).

    Valid for ``V >= 0``; ``B >= 0`` with equality iff ``V = relu(U)``.
    It is convex in ``V`` for fixed ``U`` and convex in ``U`` for fixed ``V``.

    Example:
      >>> u = jnp.array([[-1.0, 2.0]])
      >>> float(fenchel_penalty(jax.nn.relu(u), u))
      0.0
    """
    return jnp.sum(_fenchel_rows(V, U))


def _xlogy_rows(Y, Z):
    safe = jnp.where(Y > 0, Z, 1.0)
    return jnp.sum(jnp.where(Y > 0, Y * jnp.log(safe), 0.0), axis=-1)


# ----------------------------------------------------------------------------
# Inner solvers
# ----------------------------------------------------------------------------


class _Info(NamedTuple):
    steps: jax.Array  # int32 total inner iterations
    failures: jax.Array  # int32 number of solves that missed the tolerance
    solves: jax.Array  # int32 number of solves

    @staticmethod
    def one(steps, converged):
        return _Info(
            jnp.asarray(steps, jnp.int32),
            jnp.asarray(~converged, jnp.int32),
            jnp.asarray(1, jnp.int32),
        )

    def __add__(self, other):  # type: ignore[override]
        return _Info(*(a + b for a, b in zip(self, other)))


def _zero_info():
    return _Info(jnp.int32(0), jnp.int32(0), jnp.int32(0))


def _sum_infos(infos):
    out = _zero_info()
    for i in infos:
        out = out + i
    return out


def _rel_change(new, old):
    num = jnp.sqrt(jnp.sum((new - old) ** 2))
    den = jnp.maximum(jnp.sqrt(jnp.sum(new**2)), jnp.finfo(new.dtype).tiny ** 0.5)
    return num / den


def _fista_next(t):
    """FISTA's ``t_{k+1}`` and the momentum weight ``(t_k - 1) / t_{k+1}``."""
    t_next = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t * t))
    return t_next, (t - 1.0) / t_next


_CHECK_EVERY = 3


def _accelerated(step_fn, z0, z1, *, tol, max_steps, check_every: int = _CHECK_EVERY):
    """Nesterov-accelerated fixed-point iteration ``z <- step_fn(y)`` with restart.

    ``step_fn`` is a (preconditioned, projected) gradient or majorise-minimise
    step. Momentum follows FISTA's ``t_k`` sequence and is reset whenever the
    step opposes the previous direction (O'Donoghue & Candes' gradient restart).
    Stops when the relative step ``||z_{k+1} - y_k|| / ||z_{k+1}||`` (a scaled
    gradient mapping) is at most ``tol`` or after ``max_steps`` steps.

    The stopping test and the restart test are evaluated every ``check_every``
    steps (the last of each group): each loop iteration and each full-array
    reduction is a separate kernel launch, which dominates the cost of a step
    on small problems (MNIST batch X-step on a 2-core CPU: 0.34 ms per step
    when checking every step, 0.15 ms when checking every third, for 1.06x the
    steps). A final single-step loop uses up the remaining ``max_steps`` exactly.
    Returns ``(z, steps, converged)``; NaNs stop the loop (reported as not converged).
    """
    dtype = z1.dtype
    err1 = _rel_change(z1, z0)

    def momentum_step(z, zp, t):
        t_next, beta = _fista_next(t)
        y = z + beta * (z - zp)
        return step_fn(y), y, t_next

    def group(m):
        def body(s):
            k, z, zp, t, _ = s
            for _ in range(m - 1):  # unchecked steps
                z_new, _, t = momentum_step(z, zp, t)
                z, zp = z_new, z
            z_new, y, t_next = momentum_step(z, zp, t)
            err = _rel_change(z_new, y)
            restart = jnp.vdot(y - z_new, z_new - z) > 0
            t_next = jnp.where(restart, jnp.ones_like(t_next), t_next)
            return k + m, z_new, z, t_next, err

        def cond(s):
            k, _, _, _, err = s
            return (k + m <= max_steps) & (err > tol)

        return cond, body

    state = (jnp.int32(1), z1, z0, jnp.asarray(1.0, dtype), err1)
    state = lax.while_loop(*group(max(int(check_every), 1)), state)
    if check_every > 1:
        state = lax.while_loop(*group(1), state)
    k, z, _, _, err = state
    return z, k, err <= tol


def _accelerated_mm(sysm, target, U_start, *, tol, max_steps):
    """Accelerated majorise-minimise: ``z <- solve(target(U(y)))`` with momentum and restart.

    The images ``U(z) = A Theta(z)`` of the iterates are tracked, so the
    extrapolated ``U(y)`` is a linear combination and each step costs one ridge
    solve (plus, in the primal form, one product with ``A``). Stops when the relative change of the
    predictions ``||U(z_{k+1}) - U(y_k)|| / ||U(z_{k+1})||`` is at most ``tol``.
    Returns ``(z, U(z), steps, converged)``.
    """
    z1 = sysm.solve(target(U_start))
    U1 = sysm.U_of(z1)
    err1 = _rel_change(U1, U_start)
    dtype = U1.dtype

    def cond(s):
        return (s[0] < max_steps) & (s[-1] > tol)

    def body(s):
        # The step from the extrapolated point y needs only its image U(y).
        k, z, Uz, Uzp, t, _ = s
        t_next, beta = _fista_next(t)
        Uy = Uz + beta * (Uz - Uzp)
        z_new = sysm.solve(target(Uy))
        U_new = sysm.U_of(z_new)
        err = _rel_change(U_new, Uy)
        restart = jnp.vdot(Uy - U_new, U_new - Uz) > 0
        t_next = jnp.where(restart, jnp.ones_like(t_next), t_next)
        return k + 1, z_new, U_new, Uz, t_next, err

    init = (jnp.int32(1), z1, U1, U1, jnp.asarray(1.0, dtype), err1)
    k, z, Uz, _, _, err = lax.while_loop(cond, body, init)
    return z, Uz, k, err <= tol


_LINE_NEWTON_STEPS = 3


def _line_step(line, U, UD, b, c, from_mm):
    """Per-column minimiser of ``f(t) = data(U + t UD) + reg(z + t D)`` (convex in ``t``).

    ``line(U, UD, t)`` returns per-column ``(data(U + t UD) - data(U), d/dt, d2/dt2)``
    and ``reg(z + t D) - reg(z) = 2 t b + t^2 c``. ``_LINE_NEWTON_STEPS`` (3)
    Newton steps on the piecewise-linear ``f'`` from ``t = 1`` (clipped at
    ``t >= 0``; on the 5-12-3 test network 2 steps needed 89 instead of 35
    solves to reach tol 1e-6, 4 or 6 no fewer than 3); a column keeps the safe
    step (``t = 1`` where ``from_mm``: the direction is a majorise-minimise step,
    which that step cannot increase; else ``t = 0``) unless the Newton point is
    at least as good. One pass over the data per Newton step and one for the check.
    """

    def newton(t, d1, d2):
        g = d1 + 2.0 * (b + t * c)
        h = d2 + 2.0 * c
        return jnp.maximum(t - g / jnp.where(h > 0, h, 1.0), 0.0)

    one = jnp.ones_like(b)
    delta1, d1, d2 = line(U, UD, one)
    t = newton(one, d1, d2)
    for _ in range(_LINE_NEWTON_STEPS - 1):
        _, d1, d2 = line(U, UD, t)
        t = newton(t, d1, d2)
    change = line(U, UD, t)[0] + t * (2.0 * b + t * c)
    safe_change = jnp.where(from_mm, delta1 + 2.0 * b + c, 0.0)
    take = (change <= safe_change) & jnp.isfinite(t)
    return jnp.where(take, t, jnp.where(from_mm, one, 0.0))


def _cg_mm(sysm, target, line, U_start, *, tol, max_steps):
    r"""Preconditioned nonlinear conjugate gradient with exact per-column line search.

    For W-blocks whose data term is a sum over output units (columns of ``U``),
    e.g. the Fenchel penalty of a hidden layer: the majorise-minimise step
    ``r = solve(target(U(z))) - z`` is the gradient preconditioned by the
    (fixed) ridge system, and the iterates move along
    ``D_k = r_k + beta_k D_{k-1}`` (Fletcher-Reeves, ``beta_k`` the ratio of the
    slopes ``f'(0)`` along ``r_k`` and ``r_{k-1}``; reset to ``r_k`` whenever
    ``D_k`` is not a descent direction) with the step chosen per column by
    :func:`_line_step`. Each iteration costs one ridge solve, like a
    majorise-minimise step, and never increases the objective. Starts with one
    majorise-minimise step from ``U_start``; stops when the relative change of
    the predictions that a majorise-minimise step would make is at most
    ``tol``. Returns ``(z, U(z), steps, converged)``.
    """
    z1 = sysm.solve(target(U_start))
    U1 = sysm.U_of(z1)
    err1 = _rel_change(U1, U_start)
    zero_cols = jnp.zeros(U1.shape[-1:], U1.dtype)

    def slope(z, U, D, UD):
        b, _ = sysm.reg_line(z, U, D, UD)
        return line(U, UD, zero_cols)[1] + 2.0 * b

    def cond(s):
        return (s[0] < max_steps) & (s[-1] > tol)

    def body(s):
        k, z, U, D, UD, g_prev, _ = s
        r = sysm.step(target(U), z)
        Ur = sysm.U_lin(r)
        # slopes f'(0) at z along r (negative unless the column is stationary) and
        # along the previous direction; the slope along r + beta D is linear in beta
        g, g_old = slope(z, U, r, Ur), slope(z, U, D, UD)
        moving = g < 0
        beta = jnp.where(moving & (g_prev < 0), g / jnp.where(g_prev < 0, g_prev, 1.0), 0.0)
        beta = jnp.where(g + beta * g_old < 0, beta, 0.0)
        Dn = jax.tree.map(lambda a, d: a + beta * d, r, D)
        UDn = Ur + beta * UD
        b, c = sysm.reg_line(z, U, Dn, UDn)
        t = jnp.where(moving, _line_step(line, U, UDn, b, c, beta == 0), 0.0)
        z_new = jax.tree.map(lambda a, d: a + t * d, z, Dn)
        U_new = U + t * UDn
        # Stationarity measure: the relative size of the majorise-minimise step
        # at z (a scaled gradient mapping), not of the step taken.
        err = _rel_change(U + Ur, U)
        # A column that did not move restarts from its majorise-minimise step.
        g = jnp.where(t > 0, g, 0.0)
        return k + 1, z_new, U_new, Dn, UDn, g, err

    init = (jnp.int32(1), z1, U1, jax.tree.map(jnp.zeros_like, z1), jnp.zeros_like(U1), zero_cols, err1)
    k, z, U, _, _, _, err = lax.while_loop(cond, body, init)
    return z, U, k, err <= tol


def _fenchel_line(V, s):
    """``line`` of :func:`_cg_mm` for ``s * sum B(V, U)`` (per column)."""

    def line(U, UD, t):
        Ut = U + t * UD
        up, ut = jax.nn.relu(U), jax.nn.relu(Ut)
        delta = s * _colsum(0.5 * (ut - up) * (ut + up) - t * V * UD)
        d1 = s * _colsum((ut - V) * UD)
        d2 = s * _colsum(jnp.where(Ut > 0, UD * UD, 0.0))
        return delta, d1, d2

    return line


def _guard(value_fn, z_new, z_old):
    """Keep the old block unless the new one does not increase the block objective."""
    f_new = value_fn(z_new)
    f_old = value_fn(z_old)
    ok = f_new <= f_old
    return jnp.where(ok, z_new, z_old), jnp.isfinite(f_new)


def _max_sq_singular(W):
    p, q = W.shape
    G = jnp.matmul(W.T, W, precision=_HI) if q <= p else jnp.matmul(W, W.T, precision=_HI)
    return jnp.linalg.eigvalsh(G)[-1]


def _nonneg_apg(value_fn, grad_fn, Z0, lipschitz, *, tol, max_steps):
    """min_{Z >= 0} f(Z) by accelerated projected gradient (step 1/L) + safeguard."""
    step = 1.0 / lipschitz

    def step_fn(Y):
        return jax.nn.relu(Y - step * grad_fn(Y))

    Z1 = step_fn(Z0)
    Z, k, conv = _accelerated(step_fn, Z0, Z1, tol=tol, max_steps=max_steps)
    Z, finite = _guard(value_fn, Z, Z0)
    return Z, _Info.one(k, conv & finite)


def solve_simplex_cross_entropy(X0, Y, lam, *, tol: float | None = None, max_steps: int = 200) -> Solution:
    r"""Row-wise cross-entropy / simplex proximal problem by dual bisection (thesis 2.8).

    For each row ``x^0`` of ``X0`` and ``y`` of ``Y`` (``y >= 0``) solves

    .. math::

        \min_z\; -\sum_i y_i \log z_i + \lambda \|z - x^0\|_2^2
        \quad \text{s.t.}\; z \ge 0,\; 1^T z = 1 .

    The Lagrangian stationarity condition gives, for the multiplier ``nu`` of
    ``1^T z = 1``, the unique non-negative root

    .. math::

        z_i(\nu) = \frac{a_i}{2} + \sqrt{\frac{a_i^2}{4} + \frac{y_i}{2\lambda}},
        \qquad a_i = x^0_i + \nu ,

    which is increasing in ``nu``; ``nu`` solves ``1^T z(nu) = 1`` and is found by
    bisection on ``[nu_lo, nu_hi]`` with the thesis' upper bound
    ``nu_hi = 1 - max_i (x^0_i + y_i / (2 lam))`` (where ``1^T z >= 1``) and the
    overflow-free lower bound ``nu_lo = -max_i x^0_i - 1^T y / (2 lam)`` (where
    every ``z_i <= y_i / (2 lam 1^T y)`` so ``1^T z <= 1``), instead of the
    thesis' ``exp(theta)`` bound that overflows for confident rows. With ``Y = 0``
    this is the Euclidean projection onto the simplex. All rows are bisected in
    parallel (a vector of multipliers); the result is renormalised to sum to one.

    Args:
      X0: ``(N, p)`` centres.
      Y: ``(N, p)`` non-negative weights (one-hot labels).
      lam: ``lambda > 0`` (scalar).
      tol: bisection width tolerance on ``nu`` relative to ``max(1, |nu|)``
        (default ``4 eps`` of the dtype).
      max_steps: maximum number of bisection steps.

    Returns:
      ``Solution(value=Z, result, stats={"num_steps", "max_steps", "bracket_width"})``.

    Example:
      >>> Z = solve_simplex_cross_entropy(jnp.zeros((1, 3)), jnp.eye(3)[:1], 1.0).value
      >>> bool(jnp.isclose(Z.sum(), 1.0))
      True
    """
    X0 = as_float_array(X0, "X0")
    dtype = X0.dtype
    Y = jnp.asarray(Y, dtype)
    if X0.ndim != 2 or Y.shape != X0.shape:
        raise ValueError(f"X0 and Y must be 2-D arrays of the same shape, got {X0.shape} and {Y.shape}")
    if is_concrete(lam) and not float(lam) > 0:
        raise ValueError(f"lam must be positive, got {lam}")
    tol = float(4 * jnp.finfo(dtype).eps) if tol is None else float(tol)
    return _simplex_xent(X0, Y, jnp.asarray(lam, dtype), tol, int(max_steps))


def _simplex_z(X0, Y, lam, nu):
    a = X0 + nu[:, None]
    c = 2.0 * Y / lam
    s = jnp.sqrt(a * a + c)
    # (a + s)/2 written stably for a < 0: c / (2 (s - a)).
    neg = c / (2.0 * jnp.where(a < 0, s - a, 1.0))
    return jnp.where(a >= 0, 0.5 * (a + s), jnp.where(c > 0, neg, 0.0))


def _simplex_xent(X0, Y, lam, tol, max_steps):
    ysum = jnp.sum(Y, axis=-1)
    hi = 1.0 - jnp.max(X0 + Y / (2.0 * lam), axis=-1)
    lo = -jnp.max(X0, axis=-1) - ysum / (2.0 * lam)

    def width(lo, hi):
        return jnp.max((hi - lo) / jnp.maximum(1.0, jnp.abs(0.5 * (lo + hi))))

    def cond(s):
        k, lo, hi = s
        return (k < max_steps) & (width(lo, hi) > tol)

    def body(s):
        k, lo, hi = s
        mid = 0.5 * (lo + hi)
        over = jnp.sum(_simplex_z(X0, Y, lam, mid), axis=-1) > 1.0
        return k + 1, jnp.where(over, lo, mid), jnp.where(over, mid, hi)

    k, lo, hi = lax.while_loop(cond, body, (jnp.int32(0), lo, hi))
    Z = _simplex_z(X0, Y, lam, 0.5 * (lo + hi))
    Z = Z / jnp.sum(Z, axis=-1, keepdims=True)
    w = width(lo, hi)
    finite = jnp.all(jnp.isfinite(Z))
    # Below a few ulps the bracket cannot shrink further: that is convergence too.
    converged = (w <= tol) | (k < max_steps)
    code = jnp.where(
        finite,
        jnp.where(converged, jnp.int32(RESULTS.successful), jnp.int32(RESULTS.max_steps_reached)),
        jnp.int32(RESULTS.nonfinite),
    )
    stats = {"num_steps": k, "max_steps": jnp.int32(max_steps), "bracket_width": w}
    return Solution(Z, code, stats)


# --- ridge systems for the W-steps ------------------------------------------


class _Ridge(NamedTuple):
    """``min_Theta (s/2)||A Theta - T||^2 + c_w||W - W0t||^2 + c_b||b - b0t||^2``.

    ``A = [X, 1]``; the iterate ``z`` is ``Theta = [W; b^T]`` (primal form) or
    the pair ``(z, alpha = Minv z)`` of a target offset ``z = T - U_base`` and
    its kernel coefficients, ``Theta = Theta0t + C^{-1} A^T alpha`` (Woodbury
    form, for ``N <= p``); the iterations combine iterates and directions leaf
    by leaf (``jax.tree``).
    """

    U_of: Any
    solve: Any
    reg_of: Any
    theta_of: Any
    # U_lin(D) = U(z + D) - U(z): the image of a direction (computed directly, so
    # that small directions are not differences of large predictions);
    # reg_line(z, U(z), D, U_lin(D)) -> (b, c) per column (output unit), with
    # reg(z + t D) = reg(z) + 2 t b + t^2 c.
    U_lin: Any = None
    reg_line: Any = None
    # step(T, z) = solve(T) - z, formed so that a small step is not the
    # difference of two large solutions (the kernel pair: Minv applied to the
    # difference of targets)
    step: Any = None


def _stack(W, b):
    return jnp.concatenate([W, b[None, :]], axis=0)


def _gram(X):
    """``(X^T X, X^T 1)``: the Gram blocks of ``A = [X, 1]``."""
    return jnp.matmul(X.T, X, precision=_HI), jnp.sum(X, axis=0)


def _ridge_diag(p, c_w, c_b, dtype):
    return jnp.concatenate([jnp.full((p,), c_w, dtype), jnp.reshape(c_b, (1,)).astype(dtype)])


def _primal_factor(X, s, c_w, c_b, gram=None):
    """Cholesky factor of ``s A^T A + 2 diag(c)``, ``A = [X, 1]`` (lower)."""
    N, p = X.shape
    dtype = X.dtype
    G, xs = _gram(X) if gram is None else gram
    top = jnp.concatenate([G, xs[:, None]], axis=1)
    bot = jnp.concatenate([xs, jnp.asarray([N], dtype)])[None, :]
    H = s * jnp.concatenate([top, bot], axis=0) + 2.0 * jnp.diag(_ridge_diag(p, c_w, c_b, dtype))
    # The jitter only enlarges the curvature model (still a majoriser) and keeps
    # the factorisation well defined for rank-deficient data with rho = 0.
    jitter = 10.0 * jnp.finfo(dtype).eps * jnp.trace(H) / (p + 1)
    return jnp.linalg.cholesky(H + jitter * jnp.eye(p + 1, dtype=dtype))


def _primal_ridge(X, s, c_w, c_b, W0t, b0t, gram=None, factor=None) -> _Ridge:
    p = X.shape[1]
    cdiag = _ridge_diag(p, c_w, c_b, X.dtype)
    chol = (_primal_factor(X, s, c_w, c_b, gram) if factor is None else factor, True)
    theta0 = _stack(W0t, b0t)

    def U_of(theta):
        return X @ theta[:-1] + theta[-1]

    def solve(T):
        rhs = s * jnp.concatenate([X.T @ T, jnp.sum(T, axis=0)[None]], axis=0)
        return cho_solve(chol, rhs + 2.0 * cdiag[:, None] * theta0)

    def reg_of(theta):
        return jnp.sum(cdiag[:, None] * (theta - theta0) ** 2)

    def reg_line(theta, U, D, UD):
        return (_colsum(cdiag[:, None] * (theta - theta0) * D), _colsum(cdiag[:, None] * D * D))

    return _Ridge(U_of, solve, reg_of, lambda theta: theta, U_of, reg_line, lambda T, theta: solve(T) - theta)


def _kernel_factor(X, s, c_w, c_b):
    """``Minv = (K + (2/s) I)^{-1}`` with ``K = X X^T / c_w + 1 1^T / c_b``."""
    N = X.shape[0]
    K = jnp.matmul(X, X.T, precision=_HI) / c_w + 1.0 / c_b
    eye = jnp.eye(N, dtype=X.dtype)
    # (2/s) I + K has condition number 1 + s ||K|| / 2, modest for the batch sizes
    # this form is used for, so an explicit inverse is accurate. It is formed as
    # L^{-T} L^{-1} from the Cholesky factor: one triangular solve and one
    # product (2.7x faster on CPU at N = 500 than two triangular solves against I).
    Linv = solve_triangular(jnp.linalg.cholesky(K + (2.0 / s) * eye), eye, lower=True)
    return jnp.matmul(Linv.T, Linv, precision=_HI)


def _kernel_ridge(X, s, c_w, c_b, W0t, b0t, U_base, factor=None) -> _Ridge:
    Minv = _kernel_factor(X, s, c_w, c_b) if factor is None else factor
    # The iterate is the pair (z, alpha) with z = T - U_base and alpha = Minv z
    # (the kernel coefficients); as K Minv = I - (2/s) Minv,
    # U = U_base + z - (2/s) alpha. Each solve is one N x N product, and the
    # pair is carried through the (linear) updates of the iterations, so that
    # neither U nor the weights ever need another product with Minv, and the
    # coefficients of a direction are exact (not recovered from a difference
    # of predictions).

    def U_lin(D):
        return D[0] - (2.0 / s) * D[1]

    def U_of(z):
        return U_base + U_lin(z)

    def solve(T):
        z = T - U_base
        return z, Minv @ z

    def step(T, z):
        d = T - U_base - z[0]
        return d, Minv @ d

    def reg_of(z):
        return jnp.vdot(z[1], U_lin(z))  # alpha^T K alpha

    def theta_of(z):
        alpha = z[1]
        return _stack(W0t + (X.T @ alpha) / c_w, b0t + _colsum(alpha) / c_b)

    def reg_line(z, U, D, UD):
        # reg = alpha^T K alpha with K alpha = U(z) - U_base and K alpha_D = U_lin(D):
        # a quadratic in t along z + t D with per-column coefficients
        alpha_D = D[1]
        return _colsum(alpha_D * (U - U_base)), _colsum(alpha_D * UD)

    return _Ridge(U_of, solve, reg_of, theta_of, U_lin, reg_line, step)


def _ridge_weights(rho, gamma):
    """``(c_w, c_b)``: the weights of ``||W - W0t||^2`` and ``||b - b0||^2`` in a W-block."""
    return rho + gamma, gamma


def _w_solve(
    X,
    W,
    b,
    *,
    s,
    target,
    data_value,
    rho,
    gamma,
    W0,
    b0,
    kernel,
    exact,
    tol,
    max_steps,
    gram=None,
    line=None,
    factor=None,
):
    r"""One W-block: ``min_Theta data(A Theta) + rho||W||^2 + gamma||Theta - Theta0||^2``.

    ``data`` is majorised by ``(s/2)||A Theta - target(U_k)||^2`` at ``U_k``
    (exact when ``exact``: then ``target`` is the array ``T``), so each
    majorise-minimise step is one ridge solve with a fixed factorisation.
    Returns ``(layer, info, U)`` with ``U = A Theta`` of the returned block
    (tracked by the iteration, so callers need not recompute it). ``factor``: the
    system's factorisation if precomputed (:func:`_w_factor`).
    """
    c_w, c_b = _ridge_weights(rho, gamma)
    shrink = gamma / jnp.where(c_w > 0, c_w, 1.0)
    W0t = shrink * W0
    if kernel:
        # Written as a product with W0 itself so that XLA shares it with the
        # forward pass (W = W0 in the first alternation of a batch).
        sysm = _kernel_ridge(X, s, c_w, c_b, W0t, b0, shrink * (X @ W0) + b0, factor)
    else:
        sysm = _primal_ridge(X, s, c_w, c_b, W0t, b0, gram, factor)
    cdiag_w, cdiag_b = c_w, c_b
    theta_cur = _stack(W, b)
    theta0t = _stack(W0t, b0)
    U_cur = X @ W + b

    def reg_theta(theta):
        d = theta - theta0t
        return cdiag_w * jnp.sum(d[:-1] ** 2) + cdiag_b * jnp.sum(d[-1] ** 2)

    f_cur = data_value(U_cur) + reg_theta(theta_cur)
    if exact:
        z = sysm.solve(target)
        U_new = sysm.U_of(z)
        k, conv = jnp.int32(1), jnp.asarray(True)
    elif line is not None:
        z, U_new, k, conv = _cg_mm(sysm, target, line, U_cur, tol=tol, max_steps=max_steps)
    else:
        z, U_new, k, conv = _accelerated_mm(sysm, target, U_cur, tol=tol, max_steps=max_steps)
    f_new = data_value(U_new) + sysm.reg_of(z)
    theta_new = sysm.theta_of(z)
    ok = f_new <= f_cur
    theta = jnp.where(ok, theta_new, theta_cur)
    U = jnp.where(ok, U_new, U_cur)
    return {"w": theta[:-1], "b": theta[-1]}, _Info.one(k, conv & jnp.isfinite(f_new)), U


def fenchel_relu_regression(X, Y, *, rho=0.0, init=None, tol: float = 1e-8, max_steps: int = 1000) -> Solution:
    r"""Convex one-layer ReLU regression via the Fenchel penalty (thesis section 3.7).

    Solves

    .. math::

        \min_{W, b}\; \frac1N B(Y, X W + 1 b^T) + \rho \|W\|_F^2,

    the W-subproblem (3.17) of a Fenchel lifted network. When ``Y = relu(X W* + b*)``
    the minimum is 0 and attained at ``(W*, b*)``: the convex relaxation solves the
    non-convex problem ``min ||Y - relu(XW + b)||^2`` exactly. Solved by
    nonlinear conjugate gradient preconditioned by the majorise-minimise step (a
    ridge regression with the fixed Gram matrix ``A^T A/N`` onto the target
    ``Y + min(U, 0)``), with an exact line search per output column.

    Args:
      X: ``(N, p)`` inputs. Y: ``(N, q)`` non-negative targets.
      rho: ridge weight on ``W``. init: optional ``(W, b)`` warm start.
      tol: relative step tolerance. max_steps: iteration limit.

    Returns:
      ``Solution(value={"w", "b"}, result, stats={"num_steps", "max_steps",
      "objective", "gradient_norm"})``.

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (50, 3))
      >>> W = jnp.array([[1.0], [-2.0], [0.5]])
      >>> sol = fenchel_relu_regression(X, jax.nn.relu(X @ W))
      >>> bool(jnp.allclose(sol.value["w"], W, atol=1e-4))
      True
    """
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X")
    Y = jnp.asarray(Y, X.dtype)
    check_ndim(Y, 2, "Y")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}")
    check_finite(X, "X")
    check_finite(Y, "Y")
    if is_concrete(Y) and np.any(np.asarray(Y) < 0):
        raise ValueError("Y must be non-negative (it is the output of a ReLU)")
    N, p = X.shape
    q = Y.shape[1]
    if init is None:
        W, b = jnp.zeros((p, q), X.dtype), jnp.zeros((q,), X.dtype)
    else:
        W, b = jnp.asarray(init[0], X.dtype), jnp.asarray(init[1], X.dtype)
    rho = jnp.asarray(rho, X.dtype)
    return _fenchel_regression(X, Y, W, b, rho, float(tol), int(max_steps))


@functools.partial(jax.jit, static_argnums=(5, 6))
def _fenchel_regression(X, Y, W, b, rho, tol, max_steps):
    N = X.shape[0]
    zero = jnp.zeros((), X.dtype)
    layer, info, _ = _w_solve(
        X,
        W,
        b,
        s=1.0 / N,
        target=lambda U: Y + jnp.minimum(U, 0.0),
        line=_fenchel_line(Y, 1.0 / N),
        data_value=lambda U: fenchel_penalty(Y, U) / N,
        rho=rho,
        gamma=zero,
        W0=jnp.zeros_like(W),
        b0=jnp.zeros_like(b),
        kernel=False,
        exact=False,
        tol=tol,
        max_steps=max_steps,
    )
    U = X @ layer["w"] + layer["b"]
    obj = fenchel_penalty(Y, U) / N + rho * jnp.sum(layer["w"] ** 2)
    R = (jax.nn.relu(U) - Y) / N
    gW = X.T @ R + 2 * rho * layer["w"]
    gnorm = jnp.sqrt(jnp.sum(gW**2) + jnp.sum(jnp.sum(R, 0) ** 2))
    code = jnp.where(
        jnp.isfinite(obj),
        jnp.where(info.failures == 0, jnp.int32(RESULTS.successful), jnp.int32(RESULTS.max_steps_reached)),
        jnp.int32(RESULTS.nonfinite),
    )
    stats = {"num_steps": info.steps, "max_steps": jnp.int32(max_steps), "objective": obj, "gradient_norm": gnorm}
    return Solution(layer, code, stats)


# ----------------------------------------------------------------------------
# Block steps
# ----------------------------------------------------------------------------


def _pre(params, l, X_in):
    return X_in @ params[l]["w"] + params[l]["b"]


def _forward_state(params, X, spec: LiftedSpec, Y=None, hyper=None, settings=None) -> LiftedState:
    hidden = []
    h = X
    for l in range(spec.num_hidden):
        h = jax.nn.relu(_pre(params, l, h))
        hidden.append(h)
    output = None
    if spec.model == "lifted" and spec.loss == "cross_entropy":
        U = _pre(params, spec.num_hidden, h)
        # Forward rule of the simplex activation: the Euclidean projection.
        output = _simplex_xent(
            U, jnp.zeros_like(U), jnp.asarray(1.0, U.dtype), float(4 * jnp.finfo(U.dtype).eps), 200
        ).value
    return LiftedState(list(params), tuple(hidden), output)


def _x_steps(params, state: LiftedState, X, Y, hyper: LiftedHyper, spec: LiftedSpec, settings: _Settings):
    """X-block updates backwards from X_L to X_1 (and the simplex output first)."""
    L = spec.num_hidden
    lam = hyper.lam
    hidden = list(state.hidden)
    output = state.output
    infos = []
    tol, ms = settings.inner_tol, settings.inner_max_steps

    def layer_input(l):
        return X if l == 0 else hidden[l - 1]

    if spec.model == "lifted" and spec.loss == "cross_entropy":
        U_L = _pre(params, L, hidden[L - 1])
        sol = _simplex_xent(U_L, Y, lam, settings.bisect_tol, settings.bisect_max_steps)
        Znew = sol.value

        def out_val(Z):
            return -jnp.sum(_xlogy_rows(Y, Z)) + lam * jnp.sum((Z - U_L) ** 2)

        output, _ = _guard(out_val, Znew, output)
        infos.append(_Info.one(sol.stats["num_steps"], sol.result == RESULTS.successful))

    for l in range(L, 0, -1):  # X_l, l = L..1
        W, b = params[l]["w"], params[l]["b"]
        U0 = _pre(params, l - 1, layer_input(l - 1))
        Z0 = hidden[l - 1]
        nw2 = _max_sq_singular(W)
        if spec.model == "fenchel":
            if l == L:
                loss = spec.loss

                def val(Z, W=W, b=b, U0=U0):
                    return _loss_sum(Y, Z @ W + b, loss) + lam * jnp.sum(_fenchel_rows(Z, U0))

                def grad(Z, W=W, b=b, U0=U0):
                    return _loss_grad(Y, Z @ W + b, loss) @ W.T + lam * (Z - U0)

                lip = _LOSS_CURVATURE[loss] * nw2 + lam
            else:
                V = hidden[l]

                def val(Z, W=W, b=b, U0=U0, V=V):
                    return jnp.sum(_fenchel_rows(V, Z @ W + b)) + jnp.sum(_fenchel_rows(Z, U0))

                def grad(Z, W=W, b=b, U0=U0, V=V):
                    return (jax.nn.relu(Z @ W + b) - V) @ W.T + (Z - U0)

                lip = nw2 + 1.0
        else:  # lifted: (a/2)||T - ZW - b||^2 + (c/2)||Z - U0||^2
            if l == L and spec.loss == "mse":
                T, a, c = Y, 1.0, 2.0 * lam
            elif l == L:
                T, a, c = output, 1.0, 1.0
            else:
                T, a, c = hidden[l], 1.0, 1.0

            def val(Z, W=W, b=b, U0=U0, T=T, a=a, c=c):
                return 0.5 * a * jnp.sum((Z @ W + b - T) ** 2) + 0.5 * c * jnp.sum((Z - U0) ** 2)

            def grad(Z, W=W, b=b, U0=U0, T=T, a=a, c=c):
                return a * (Z @ W + b - T) @ W.T + c * (Z - U0)

            lip = a * nw2 + c
        Z, info = _nonneg_apg(val, grad, Z0, lip, tol=tol, max_steps=ms)
        hidden[l - 1] = Z
        infos.append(info)
    return LiftedState(params, tuple(hidden), output), _sum_infos(infos)


def _w_scale(spec: LiftedSpec, l: int, lam, N: int):
    """Curvature ``s`` of the quadratic model of layer ``l``'s W-block data term."""
    if l < spec.num_hidden:
        return lam / N if spec.model == "fenchel" else 2.0 * lam / N
    if spec.model == "lifted" and spec.loss == "cross_entropy":
        return 2.0 * lam / N
    return _LOSS_CURVATURE[spec.loss] / N  # Bohning's bound 1/2 for cross-entropy


def _uses_kernel(N: int, p_in: int) -> bool:
    """Batched W-blocks use the ``N x N`` kernel form when the batch is not wider than the input."""
    return N <= p_in


def _w_factor(X, hyper: LiftedHyper, spec: LiftedSpec):
    """The batched first layer's W-block factorisation for the batch ``X`` (Algorithm 2).

    It depends on the batch and the hyper-parameters only (the first layer's
    input is data), so training with fixed batches computes it once per batch.
    """
    N = X.shape[0]
    s = _w_scale(spec, 0, hyper.lam, N)
    c_w, c_b = _ridge_weights(hyper.rho[0], hyper.gamma[0])
    if _uses_kernel(N, X.shape[1]):
        return _kernel_factor(X, s, c_w, c_b)
    return _primal_factor(X, s, c_w, c_b)


def _w_steps(
    state: LiftedState,
    X,
    Y,
    hyper: LiftedHyper,
    spec: LiftedSpec,
    settings: _Settings,
    anchor=None,
    kernel_ok=False,
    gram0=None,
    factor0=None,
):
    """All W-blocks (parallel across layers) with the X-variables fixed.

    ``gram0``: optional precomputed Gram blocks of ``[X, 1]`` (constant over the
    epochs of non-batched training); ``factor0``: optional precomputed first-layer
    factorisation of batched training (:func:`_w_factor`).
    """
    params = state.params
    L = spec.num_hidden
    N = X.shape[0]
    lam = hyper.lam
    new_params, infos, pre = [], [], []
    for l in range(L + 1):
        X_in = X if l == 0 else state.hidden[l - 1]
        W, b = params[l]["w"], params[l]["b"]
        if anchor is None:
            gamma = jnp.zeros_like(hyper.gamma[l])
            W0, b0 = jnp.zeros_like(W), jnp.zeros_like(b)
        else:
            gamma = hyper.gamma[l]
            W0, b0 = anchor[l]["w"], anchor[l]["b"]
        kernel = bool(kernel_ok and anchor is not None and _uses_kernel(N, X_in.shape[1]))
        common = dict(
            rho=hyper.rho[l],
            gamma=gamma,
            W0=W0,
            b0=b0,
            kernel=kernel,
            tol=settings.inner_tol,
            max_steps=settings.w_max_steps,
            gram=gram0 if l == 0 else None,
            factor=factor0 if l == 0 else None,
            s=_w_scale(spec, l, lam, N),
        )
        if l < L and spec.model == "fenchel":
            V = state.hidden[l]
            layer, info, U = _w_solve(
                X_in,
                W,
                b,
                exact=False,
                target=lambda U, V=V: V + jnp.minimum(U, 0.0),
                data_value=lambda U, V=V: lam * fenchel_penalty(V, U) / N,
                line=_fenchel_line(V, lam / N),
                **common,
            )
        elif l < L or (spec.model == "lifted" and spec.loss == "cross_entropy"):
            T = state.hidden[l] if l < L else state.output
            layer, info, U = _w_solve(
                X_in, W, b, exact=True, target=T, data_value=lambda U, T=T: lam * jnp.sum((T - U) ** 2) / N, **common
            )
        elif spec.loss == "mse":
            layer, info, U = _w_solve(
                X_in, W, b, exact=True, target=Y, data_value=lambda U: _loss_sum(Y, U, "mse") / N, **common
            )
        else:  # Fenchel cross-entropy last layer: Bohning majoriser, curvature 1/2
            layer, info, U = _w_solve(
                X_in,
                W,
                b,
                exact=False,
                target=lambda U: U - 2.0 * _loss_grad(Y, U, "cross_entropy"),
                data_value=lambda U: _loss_sum(Y, U, "cross_entropy") / N,
                **common,
            )
        new_params.append(layer)
        infos.append(info)
        pre.append(U)
    return LiftedState(new_params, state.hidden, state.output), _sum_infos(infos), tuple(pre)


def _objective_rows(state: LiftedState, X, Y, hyper: LiftedHyper, spec: LiftedSpec, pre=None):
    """Per-sample data term and activation-penalty term (unscaled by 1/N).

    ``pre``: the pre-activations ``U_l = X_l W_l + b_l`` if already known.
    """
    params, hidden = state.params, state.hidden
    L = spec.num_hidden
    lam = hyper.lam
    inputs = (X,) + tuple(hidden)
    U = [_pre(params, l, inputs[l]) for l in range(L + 1)] if pre is None else list(pre)
    if spec.model == "fenchel":
        data = _loss_rows(Y, U[L], spec.loss)
        pen = sum(_fenchel_rows(hidden[l], U[l]) for l in range(L))
    else:
        pen = sum(jnp.sum((hidden[l] - U[l]) ** 2, axis=-1) for l in range(L))
        if spec.loss == "mse":
            data = _loss_rows(Y, U[L], "mse")
        else:
            data = -_xlogy_rows(Y, state.output)
            pen = pen + jnp.sum((state.output - U[L]) ** 2, axis=-1)
    return data, lam * pen, U


def lifted_objective(state: LiftedState, X, Y, spec: LiftedSpec, hyper: LiftedHyper | None = None) -> dict:
    r"""Training objective of the lifted problem and its parts (per-sample means).

    Returns a dict with

    * ``objective = loss + penalty + ridge`` (eq. 3.9 for ``fenchel``, eq. 2.5 /
      2.11 for ``lifted``);
    * ``loss``: ``(1/N) L(Y, U_L)`` (or the simplex cross-entropy term);
    * ``penalty``: the weighted activation penalties ``(lam/N) sum_l B(X_{l+1}, U_l)``
      (resp. ``||X_{l+1} - U_l||^2``);
    * ``ridge``: ``sum_l rho_l ||W_l||^2``;
    * ``violation``: relative constraint violation
      ``sqrt(sum_l ||X_{l+1} - relu(U_l)||^2 / sum_l ||relu(U_l)||^2)``.

    ``Y`` is the ``N x p`` target / one-hot matrix.
    """
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    return _objective_terms(state, X, Y, hyper, spec)


def _objective_terms(state: LiftedState, X, Y, hyper: LiftedHyper, spec: LiftedSpec, pre=None) -> dict:
    N = X.shape[0]
    data, pen, U = _objective_rows(state, X, Y, hyper, spec, pre)
    ridge = sum(hyper.rho[l] * jnp.sum(state.params[l]["w"] ** 2) for l in range(spec.num_layers))
    num = sum(jnp.sum((state.hidden[l] - jax.nn.relu(U[l])) ** 2) for l in range(spec.num_hidden))
    den = sum(jnp.sum(jax.nn.relu(U[l]) ** 2) for l in range(spec.num_hidden))
    loss = jnp.sum(data) / N
    penalty = jnp.sum(pen) / N
    return {
        "objective": loss + penalty + ridge,
        "loss": loss,
        "penalty": penalty,
        "ridge": ridge,
        "violation": jnp.sqrt(num / jnp.maximum(den, jnp.finfo(X.dtype).tiny)),
    }


def _default_settings(
    dtype,
    *,
    inner_tol=None,
    inner_max_steps=100,
    w_max_steps=None,
    bisect_tol=None,
    bisect_max_steps=200,
    alternations=1,
    extrapolation=0.0,
) -> _Settings:
    eps = float(jnp.finfo(dtype).eps)
    if inner_tol is None:
        inner_tol = 1e-6 if eps < 1e-10 else 1e-4
    inner_max_steps = int(inner_max_steps)
    w_max_steps = inner_max_steps if w_max_steps is None else int(w_max_steps)
    if inner_max_steps < 1 or w_max_steps < 1:
        raise ValueError("inner_max_steps and w_max_steps must be >= 1")
    if int(alternations) < 1:
        raise ValueError(f"alternations must be >= 1, got {alternations}")
    extrapolation = float(extrapolation)
    if not (math.isfinite(extrapolation) and extrapolation >= 0):
        raise ValueError(f"extrapolation must be a finite number >= 0, got {extrapolation}")
    return _Settings(
        float(inner_tol),
        inner_max_steps,
        w_max_steps,
        float(4 * eps if bisect_tol is None else bisect_tol),
        int(bisect_max_steps),
        int(alternations),
        extrapolation,
    )


def init_lifted_state(params, X, spec: LiftedSpec) -> LiftedState:
    """Initial lifted variables: the feed-forward pass of ``params`` (Algorithm 1, lines 2-3).

    At this point every activation penalty is zero and the Fenchel objective
    equals the standard training loss.
    """
    return _forward_state(params, X, spec)


def lifted_bcd_step(
    state: LiftedState,
    X,
    Y,
    spec: LiftedSpec,
    hyper: LiftedHyper | None = None,
    *,
    inner_tol=None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
):
    r"""One pass of non-batched block-coordinate descent (thesis Algorithm 1).

    X-blocks, backwards ``l = L..1`` with the others fixed:

    * Fenchel, ``l = L``: ``min_{Z>=0} L(Y, Z W_L + b_L) + lam B(Z, U_{L-1})`` (3.15/3.16);
    * Fenchel, ``l < L``: ``min_{Z>=0} B(X_{l+1}, Z W_l + b_l) + B(Z, U_{l-1})`` (3.14);
    * lifted: the non-negative least squares (2.13) and, for cross-entropy, first
      the simplex output by bisection (2.15/2.16);

    each by accelerated projected gradient with step ``1/Lip`` (``Lip`` from
    ``||W_l||_2^2``) to relative tolerance ``inner_tol``. W-blocks, all layers:

    * Fenchel ``l < L``: ``min (lam/N) B(X_{l+1}, A_l Theta) + rho_l ||W||^2`` (3.17);
    * last layer: ridge regression (MSE) or ridge-penalised softmax regression
      (3.18); lifted: ridge regressions onto ``X_{l+1}`` (section 2.6);

    solved in closed form or by accelerated majorise-minimise with the fixed
    factorised Gram matrix of ``[X_l, 1]``. Each block is safeguarded, so the
    objective :func:`lifted_objective` does not increase.

    Returns:
      ``(new_state, info)`` where ``info`` counts inner steps and inner solves
      that missed their tolerance.
    """
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    _check_hyper_values(hyper, batched=False)
    settings = _default_settings(X.dtype, inner_tol=inner_tol, inner_max_steps=inner_max_steps, w_max_steps=w_max_steps)
    state, info, _ = _bcd_pass(state, X, Y, hyper, spec, settings)
    return state, info


def _bcd_pass(state, X, Y, hyper, spec, settings, gram0=None):
    state, xinfo = _x_steps(state.params, state, X, Y, hyper, spec, settings)
    state, winfo, pre = _w_steps(state, X, Y, hyper, spec, settings, gram0=gram0)
    return state, (xinfo + winfo)._asdict(), pre


class _Extrapolated(NamedTuple):
    """Non-batched training carry: the iterate and the current extrapolation weight."""

    state: LiftedState
    beta: Any


_BETA_START, _BETA_GROW, _BETA_SHRINK = 0.5, 1.5, 0.5
# Largest extrapolation weight used by default for non-batched training: on
# MNIST 784-300-10 (Fenchel, MSE) a cap of 4 reached 0.954 test accuracy after
# 30 passes, a cap of 1 0.951, none 0.945 (benchmarks/bench_lifted.py).
_DEFAULT_EXTRAPOLATION = 4.0


def _extrapolated_pass(carry: _Extrapolated, X, Y, hyper, spec, settings, gram0=None):
    r"""One BCD pass followed by a safeguarded extrapolation step.

    With ``x_k`` the iterate before the pass and ``x_{k+1}`` after it, the
    candidate ``x_{k+1} + beta (x_{k+1} - x_k)`` (weights and biases as they are,
    hidden ``X_l`` projected onto ``X_l >= 0``, the simplex output of the
    lifted cross-entropy model not extrapolated) replaces ``x_{k+1}`` only if
    its objective is strictly lower; ``beta`` then grows by 1.5 (at most
    ``settings.extrapolation``), otherwise it halves. The objective therefore
    never increases, and block-convex problems (here, as in non-negative
    matrix factorisation, Ang & Gillis 2019) typically need far fewer passes.
    """
    state, beta = carry
    new, info, pre = _bcd_pass(state, X, Y, hyper, spec, settings, gram0)
    terms = _objective_terms(new, X, Y, hyper, spec, pre)

    def extend(a, b):
        return a + beta.astype(a.dtype) * (a - b)

    cand = LiftedState(
        jax.tree_util.tree_map(extend, new.params, state.params),
        tuple(jax.nn.relu(extend(a, b)) for a, b in zip(new.hidden, state.hidden)),
        new.output,
    )
    cand_terms = _objective_terms(cand, X, Y, hyper, spec)
    take = cand_terms["objective"] < terms["objective"]

    def pick(a, b):
        return jnp.where(take, a, b)

    new = jax.tree_util.tree_map(pick, cand, new)
    terms = jax.tree_util.tree_map(pick, cand_terms, terms)
    beta = jnp.where(take, jnp.minimum(_BETA_GROW * beta, settings.extrapolation), _BETA_SHRINK * beta)
    return _Extrapolated(new, beta), dict(terms, **info, extrapolated=take.astype(jnp.int32))


def lifted_batch_step(
    params,
    X,
    Y,
    spec: LiftedSpec,
    hyper: LiftedHyper | None = None,
    *,
    alternations: int = 1,
    inner_tol=None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
):
    r"""Algorithm 2 on one batch: forward re-initialisation of X, then K alternations.

    With ``Theta^0`` the weights at entry, each alternation does the X-steps of
    :func:`lifted_bcd_step` and the W-steps with the proximal term (3.19, 3.20)

    .. math::

        \min_\Theta\; \text{data}(A_l \Theta) + \rho_l \|W\|_F^2
        + \gamma_l \|\Theta - \Theta^0_l\|_F^2 ,

    which for batches smaller than the layer width is solved in the ``N x N``
    kernel (Woodbury) form ``Theta = Theta~0 + C^{-1} A^T alpha``.

    Returns:
      ``(new_params, metrics)``; metrics hold the batch ``objective`` (without the
      proximal term), ``penalty``, ``violation`` and inner-solver counts.
    """
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    _check_hyper_values(hyper, batched=True)
    settings = _default_settings(
        X.dtype,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        alternations=alternations,
    )
    return _batch_update(params, X, Y, hyper, spec, settings)


def _batch_update(params, X, Y, hyper, spec, settings, factor0=None):
    anchor = params
    state = _forward_state(params, X, spec)
    info = _zero_info()
    if factor0 is None:  # shared by the alternations
        factor0 = _w_factor(X, hyper, spec)
    for _ in range(settings.alternations):
        state, xinfo = _x_steps(state.params, state, X, Y, hyper, spec, settings)
        state, winfo, pre = _w_steps(state, X, Y, hyper, spec, settings, anchor=anchor, kernel_ok=True, factor0=factor0)
        info = info + xinfo + winfo
    terms = _objective_terms(state, X, Y, hyper, spec, pre)
    metrics = dict(terms, **info._asdict())
    return state.params, metrics


# ----------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------


def _prepare_xy(X, y, spec: LiftedSpec, xname="X", yname="y"):
    X = as_float_array(X, xname)
    check_ndim(X, 2, xname, "a 2-D (samples x features) array")
    N, p0 = X.shape
    if p0 != spec.sizes[0]:
        raise ValueError(
            f"spec.sizes[0] = {spec.sizes[0]} but {xname} has {p0} features per row "
            f"(shape {tuple(X.shape)}); the first layer size must equal the input dimension"
        )
    check_finite(X, xname)
    p = spec.sizes[-1]
    if not hasattr(y, "dtype"):
        y = np.asarray(y)
    if y.ndim == 1:
        if not jnp.issubdtype(y.dtype, jnp.integer):
            raise TypeError(
                f"{yname} must hold integer class labels (1-D) or be a 2-D target matrix, got 1-D dtype {y.dtype}"
            )
        if y.shape[0] != N:
            raise ValueError(f"{yname} has {y.shape[0]} labels but {xname} has {N} rows")
        if is_concrete(y) and N:
            lo, hi = int(np.min(np.asarray(y))), int(np.max(np.asarray(y)))
            if lo < 0 or hi >= p:
                raise ValueError(
                    f"{yname} labels must lie in [0, {p}) (spec.sizes[-1] = {p} classes), got labels in [{lo}, {hi}]"
                )
        labels = jnp.asarray(y, jnp.int32)
        Y = jax.nn.one_hot(labels, p, dtype=X.dtype)
        return X, Y, labels
    if y.ndim != 2:
        raise ValueError(f"{yname} must be 1-D labels or a 2-D (N, {p}) target matrix, got shape {tuple(y.shape)}")
    Y = as_float_array(y, yname).astype(X.dtype)
    if Y.shape != (N, p):
        raise ValueError(
            f"{yname} must have shape ({N}, {p}) to match {xname} and spec.sizes[-1], got {tuple(Y.shape)}"
        )
    check_finite(Y, yname)
    if spec.loss == "cross_entropy":
        if is_concrete(Y):
            a = np.asarray(Y)
            if np.any(a < 0) or np.max(np.abs(a.sum(1) - 1)) > 1e-4:
                raise ValueError(
                    f"for cross_entropy the rows of {yname} must be probability "
                    "vectors (non-negative, summing to 1); pass integer labels instead"
                )
        return X, Y, jnp.argmax(Y, axis=-1).astype(jnp.int32)
    return X, Y, None


def _check_hyper_values(hyper: LiftedHyper, batched: bool):
    if not all(is_concrete(h) for h in hyper):
        return
    lam, rho, gamma = (np.asarray(h) for h in hyper)
    if not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(f"lam must be positive and finite, got {lam}")
    if not np.all(np.isfinite(rho)) or np.any(rho < 0):
        raise ValueError(f"rho must be non-negative and finite, got {rho}")
    if not np.all(np.isfinite(gamma)) or np.any(gamma < 0):
        raise ValueError(f"gamma must be non-negative and finite, got {gamma}")
    if batched and np.any(gamma <= 0):
        raise ValueError(
            "batched training (Algorithm 2) needs gamma > 0 for every layer: the proximal "
            f"term gamma ||Theta - Theta0||^2 keeps each batch's W-steps well posed; got {gamma}"
        )


def _check_params(params, spec: LiftedSpec, dtype):
    if len(params) != spec.num_layers:
        raise ValueError(f"init has {len(params)} layers but spec.sizes implies {spec.num_layers}")
    out = []
    for l, layer in enumerate(params):
        w, b = jnp.asarray(layer["w"], dtype), jnp.asarray(layer["b"], dtype)
        want = (spec.sizes[l], spec.sizes[l + 1])
        if w.shape != want or b.shape != (want[1],):
            raise ValueError(
                f"init layer {l}: expected w {want} and b ({want[1]},), got {tuple(w.shape)} and {tuple(b.shape)}"
            )
        out.append({"w": w, "b": b})
    return out


# ----------------------------------------------------------------------------
# Training drivers
# ----------------------------------------------------------------------------


@functools.cache
def _epoch_fn(spec: LiftedSpec, settings: _Settings, batch_size, vmapped: bool, fixed: bool = False):
    """Jitted epoch: one Algorithm-1 pass, or one Algorithm-2 sweep over shuffled batches.

    The signature is ``(carry, X, Y, hyper, perm, aux)``: ``aux`` is the Gram
    blocks of ``[X, 1]`` (non-batched), ``None`` (batched: ``perm`` shuffles the
    rows) or, with ``fixed`` batches, ``(parts, factors)``: the ``(nb, B)`` row
    indices of the batches and their first-layer factorisations, visited in the
    order ``perm`` (a permutation of the ``nb`` batches).
    """

    if batch_size is None and settings.extrapolation > 0:

        def epoch(carry, X, Y, hyper, perm, gram0):
            return _extrapolated_pass(carry, X, Y, hyper, spec, settings, gram0)

    elif batch_size is None:

        def epoch(state, X, Y, hyper, perm, gram0):
            state, info, pre = _bcd_pass(state, X, Y, hyper, spec, settings, gram0)
            metrics = dict(_objective_terms(state, X, Y, hyper, spec, pre), **info)
            return state, metrics

    else:

        def epoch(state, X, Y, hyper, perm, aux):
            if fixed:
                parts, factors = aux

                def body(params, i):
                    ix = parts[i]
                    return _batch_update(params, X[ix], Y[ix], hyper, spec, settings, factors[i])

                params, metrics = lax.scan(body, state.params, perm)
            else:
                nb = X.shape[0] // batch_size
                idx = perm[: nb * batch_size].reshape(nb, batch_size)

                def body(params, ix):
                    return _batch_update(params, X[ix], Y[ix], hyper, spec, settings)

                params, metrics = lax.scan(body, state.params, idx)
            agg = {k: (jnp.sum(v) if jnp.issubdtype(v.dtype, jnp.integer) else jnp.mean(v)) for k, v in metrics.items()}
            return LiftedState(params, (), None), agg

    if vmapped:
        epoch = jax.vmap(epoch, in_axes=(0, None, None, 0, None, (None, 0) if fixed else None))
    return jax.jit(epoch)


def _fixed_partition(key, N: int, batch_size: int):
    """``(nb, B)`` row indices: a random partition, the last batch filled up with
    rows of the first one when ``B`` does not divide ``N`` (every row is used)."""
    perm = jax.random.permutation(key, N)
    nb = -(-N // batch_size)
    return jnp.concatenate([perm, perm[: nb * batch_size - N]]).reshape(nb, batch_size)


@functools.cache
def _factors_fn(spec: LiftedSpec, vmapped: bool):
    """Jitted first-layer factorisations of all fixed batches (one model or a stack)."""

    def factors(X, parts, hyper):
        return lax.map(lambda ix: _w_factor(X[ix], hyper, spec), parts)

    if vmapped:
        factors = jax.vmap(factors, in_axes=(None, None, 0))
    return jax.jit(factors)


def _factor_bytes(spec: LiftedSpec, N: int, batch_size: int, itemsize: int) -> int:
    """Memory of the cached first-layer factorisations of one model (fixed batches)."""
    d = batch_size if _uses_kernel(batch_size, spec.sizes[0]) else spec.sizes[0] + 1
    return -(-N // batch_size) * d * d * itemsize


_gram_jit = jax.jit(_gram)


def _sequential_models(step):
    """Apply a single-model epoch to each model of a stacked state / hyper batch."""

    def run(state, X, Y, hyper, perm, gram0):
        outs = []
        for i in range(hyper.lam.shape[0]):
            pick = functools.partial(lambda a, i: a[i], i=i)
            outs.append(
                step(jax.tree_util.tree_map(pick, state), X, Y, jax.tree_util.tree_map(pick, hyper), perm, gram0)
            )
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)

    return run


@functools.cache
def _eval_fn(loss: str, vmapped: bool):
    def ev(params, X, Y, labels):
        U = mlp_apply(params, X)
        out = {"loss": _loss_sum(Y, U, loss) / X.shape[0]}
        if labels is not None:
            out["accuracy"] = _accuracy(U, labels)
        return out

    if vmapped:
        ev = jax.vmap(ev, in_axes=(0, None, None, None))
    return jax.jit(ev)


def _result_code(nonfinite: np.ndarray, converged: np.ndarray) -> np.ndarray:
    code = np.where(converged, RESULTS.successful, RESULTS.max_steps_reached)
    return np.where(nonfinite, RESULTS.nonfinite, code).astype(np.int32)


def _train(
    key,
    X,
    y,
    spec,
    hyper,
    *,
    vmapped,
    epochs,
    batch_size,
    alternations,
    init,
    X_test,
    y_test,
    tol,
    inner_tol,
    inner_max_steps,
    w_max_steps,
    throw,
    verbose,
    mesh=None,
    extrapolation=None,
    fixed_batches=False,
):
    if not isinstance(spec, LiftedSpec):
        raise TypeError(f"spec must be a LiftedSpec, got {type(spec).__name__}")
    X, Y, labels = _prepare_xy(X, y, spec)
    N = X.shape[0]
    dtype = X.dtype
    if int(epochs) < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if batch_size is not None:
        batch_size = int(batch_size)
        if not 1 <= batch_size <= N:
            raise ValueError(f"batch_size must lie in [1, {N}] (the number of samples), got {batch_size}")
    if tol is not None and batch_size is not None:
        raise ValueError("tol (stop on relative objective decrease) applies to non-batched training only")
    fixed_batches = bool(fixed_batches)
    if fixed_batches and batch_size is None:
        raise ValueError("fixed_batches applies to batched training (Algorithm 2): give a batch_size")
    if extrapolation is None:
        extrapolation = _DEFAULT_EXTRAPOLATION if batch_size is None else 0.0
    elif batch_size is not None and extrapolation != 0:
        raise ValueError(
            "extrapolation (between full passes) applies to non-batched training only; "
            f"got extrapolation={extrapolation} with batch_size={batch_size}"
        )
    test = None
    if X_test is not None or y_test is not None:
        if X_test is None or y_test is None:
            raise ValueError("pass both X_test and y_test, or neither")
        Xt, Yt, lt = _prepare_xy(X_test, y_test, spec, "X_test", "y_test")
        test = (Xt, Yt, lt)
    _check_hyper_values(hyper, batch_size is not None)
    settings = _default_settings(
        dtype,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        alternations=alternations,
        extrapolation=extrapolation,
    )
    k_init, k_perm = jax.random.split(key)
    params = mlp_init(k_init, spec.sizes, dtype=dtype) if init is None else _check_params(init, spec, dtype)
    H = hyper.lam.shape[0] if vmapped else None
    if vmapped:
        params = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (H,) + a.shape), params)
    if batch_size is not None:  # X is re-initialised per batch: keep only the weights
        state = LiftedState(params, (), None)
    elif vmapped:
        state = jax.vmap(lambda p: _forward_state(p, X, spec))(params)
    else:
        state = _forward_state(params, X, spec)
    # what the epoch function carries: the state, or the state and its extrapolation weight
    extrapolate = settings.extrapolation > 0
    carry = state
    if extrapolate:
        beta0 = jnp.full((H,) if vmapped else (), min(_BETA_START, settings.extrapolation), dtype)
        carry = _Extrapolated(state, beta0)
    if vmapped and batch_size is None and jax.default_backend() == "cpu":
        # XLA:CPU (jaxlib 0.10) can deadlock on the second execution of the
        # vmapped non-batched epoch for MNIST-sized layers; there the models are
        # run one after the other through the same compiled single-model epoch
        # (identical results; the batched mode and other backends use vmap).
        step = _sequential_models(_epoch_fn(spec, settings, batch_size, False))
    else:
        step = _epoch_fn(spec, settings, batch_size, vmapped, fixed_batches)
        if mesh is not None and vmapped:  # models split over the mesh's devices (GSPMD partitions the vmap)
            models = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(mesh.axis_names[0]))
            carry, hyper = jax.device_put((carry, hyper), models)
    evaluate = _eval_fn(spec.loss, vmapped)
    setup_time = 0.0
    if batch_size is None:
        # Algorithm 1 sees the same input every pass: factor its Gram matrix once.
        aux = _gram_jit(X)
    elif fixed_batches:
        # The first layer's W-block system depends only on its batch: factor each once.
        k_part, k_perm = jax.random.split(k_perm)
        if not vmapped:  # tune_lifted counts the factorisations in its per-device estimate
            need = _factor_bytes(spec, N, batch_size, jnp.dtype(dtype).itemsize)
            free = _memory.device_memory_bytes(None)
            if need > free:
                raise ValueError(
                    f"fixed_batches keeps one first-layer factorisation per batch, about "
                    f"{need / 2**30:.3g} GiB here, but {free / 2**30:.3g} GiB are free; "
                    "use fixed_batches=False"
                )
        t_setup = time.perf_counter()
        parts = _fixed_partition(k_part, N, batch_size)
        factors = _factors_fn(spec, vmapped)(X, parts, hyper)
        if mesh is not None and vmapped:
            factors = jax.device_put(factors, models)
        aux = (parts, jax.block_until_ready(factors))
        setup_time = time.perf_counter() - t_setup
    else:
        aux = None

    hist: dict[str, list] = {}

    def record(name, value):
        hist.setdefault(name, []).append(np.asarray(value))

    prev_obj = None
    converged = np.zeros((H,) if vmapped else (), bool)
    nonfinite = np.zeros((H,) if vmapped else (), bool)
    for epoch in range(int(epochs)):
        perm = jax.random.permutation(jax.random.fold_in(k_perm, epoch), aux[0].shape[0] if fixed_batches else N)
        t0, c0 = time.perf_counter(), time.process_time()
        carry, metrics = step(carry, X, Y, hyper, perm, aux)
        state = carry.state if extrapolate else carry
        jax.block_until_ready(state.params)
        # the first epoch includes compilation and the one-off factorisations
        record("epoch_time", time.perf_counter() - t0 + (setup_time if epoch == 0 else 0.0))
        record("epoch_cpu_time", time.process_time() - c0)
        for k_, v in metrics.items():
            record("inner_" + k_ if k_ in ("steps", "failures", "solves") else k_, v)
        tr = evaluate(state.params, X, Y, labels)
        record("train_loss", tr["loss"])
        if "accuracy" in tr:
            record("train_accuracy", tr["accuracy"])
        if test is not None:
            te = evaluate(state.params, *test)
            record("test_loss", te["loss"])
            if "accuracy" in te:
                record("test_accuracy", te["accuracy"])
        obj = np.asarray(metrics["objective"])
        nonfinite = nonfinite | ~np.isfinite(obj) | ~np.isfinite(np.asarray(tr["loss"]))
        if verbose:
            msg = f"epoch {epoch + 1}: objective {obj} time {hist['epoch_time'][-1]:.2f}s"
            if test is not None and "test_accuracy" in hist:
                msg += f" test acc {hist['test_accuracy'][-1]}"
            print(msg, flush=True)
        if tol is not None and prev_obj is not None:
            converged = converged | (prev_obj - obj <= tol * np.abs(prev_obj))
        prev_obj = obj
        if np.all(nonfinite | converged):
            break
    if tol is None:
        converged = np.ones_like(converged)
    stats = {k_: np.stack(v) for k_, v in hist.items()}
    if vmapped:  # history with the model axis first
        stats = {k_: (np.moveaxis(v, 0, 1) if v.ndim == 2 else v) for k_, v in stats.items()}
    stats["num_steps"] = np.int32(len(hist["epoch_time"]))
    stats["max_steps"] = np.int32(epochs)
    stats["setup_time"] = np.float64(setup_time)
    code = _result_code(nonfinite, converged)
    sol = Solution(state.params, jnp.asarray(code), stats, state)
    return raise_if_failed(sol, throw)


def fit_lifted(
    key,
    X,
    y,
    spec: LiftedSpec,
    *,
    epochs: int = 10,
    batch_size: int | None = None,
    alternations: int = 1,
    hyper: LiftedHyper | None = None,
    init=None,
    X_test=None,
    y_test=None,
    tol: float | None = None,
    inner_tol: float | None = None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
    extrapolation: float | None = None,
    fixed_batches: bool = False,
    throw: bool = False,
    verbose: bool = False,
) -> Solution:
    r"""Train a (Fenchel) lifted network by block-coordinate descent.

    ``batch_size=None`` runs thesis Algorithm 1 (one BCD pass over all data per
    epoch, :func:`lifted_bcd_step`); otherwise Algorithm 2: each epoch shuffles
    the data and, for each batch of ``batch_size`` rows (a trailing partial batch
    is dropped), re-initialises X by a forward pass and runs ``alternations``
    X/W alternations with the proximal term ``gamma_l ||Theta_l - Theta_l^0||^2``
    (:func:`lifted_batch_step`). The per-epoch work is one jitted call (a
    ``lax.scan`` over batches); the Python loop only runs over epochs.

    Args:
      key: ``jax.random`` key (initialisation and shuffling).
      X: ``(N, p_0)`` inputs (train in float32 or float64; the dtype of ``X`` is used).
      y: ``(N,)`` integer labels in ``[0, p)`` or an ``(N, p)`` target matrix.
      spec: :class:`LiftedSpec`.
      epochs: number of epochs (BCD passes for non-batched training).
      batch_size: ``None`` (non-batched) or the batch size of Algorithm 2.
      alternations: ``K``, X/W alternations per batch.
      hyper: optional :class:`LiftedHyper` overriding the spec's ``lam, rho, gamma``.
      init: optional MLP params (default Xavier-uniform, zero biases).
      X_test, y_test: optional held-out data evaluated after every epoch.
      tol: (non-batched only) stop when the relative objective decrease of a pass
        is at most ``tol``; without it all ``epochs`` are run.
      inner_tol, inner_max_steps, w_max_steps: tolerance and step limits of the
        inner solvers (``w_max_steps`` for the iterative W-steps, default
        ``inner_max_steps``). Solves that miss the tolerance are counted in
        ``stats["inner_failures"]``.
      extrapolation: (non-batched only) largest weight ``beta`` of the
        safeguarded extrapolation between passes: after each pass the point
        ``x_{k+1} + beta (x_{k+1} - x_k)`` (hidden variables projected onto
        ``>= 0``) is kept only if it lowers the objective, so the objective
        still never increases; ``beta`` starts at 0.5, grows by 1.5 after an
        accepted step and halves after a rejected one. ``None`` means 4 for
        non-batched and 0 (off) for batched training; 0 runs plain Algorithm 1.
        ``stats["extrapolated"]`` flags the passes whose step was accepted.
      fixed_batches: (batched only) partition the data into batches once (the
        last batch filled up with rows of the first when ``batch_size`` does
        not divide ``N``) and visit them in a new random order every epoch,
        instead of reshuffling the rows. The first layer's W-block system then
        depends on the batch only, so its factorisation (the ``B x B`` kernel
        inverse, or the ``(p_0+1)^2`` Cholesky factor when ``B > p_0``) is
        computed once per batch and reused: ``ceil(N/B)`` such matrices are kept
        (``N B`` numbers in the kernel form, 120 MB in float32 for MNIST with
        ``B = 500``). Their one-off cost is included in the first epoch's time
        and reported as ``stats["setup_time"]``.
      throw: raise ``RuntimeError`` if the result is not successful.
      verbose: print one line per epoch.

    Returns:
      ``Solution(value=params, result, stats, state)`` with ``params`` an MLP
      pytree (see :func:`mlp_apply`) and per-epoch arrays in ``stats``:
      ``objective, loss, penalty, ridge, violation`` (for batched training the
      mean over batches), ``train_loss``/``train_accuracy`` (feed-forward rule on
      the whole training set), ``test_loss``/``test_accuracy``, ``epoch_time``
      (seconds, training only), ``epoch_cpu_time`` (process CPU seconds of the
      same work, less sensitive to other load on shared machines), ``inner_steps``, ``inner_failures``,
      ``inner_solves``; and ``num_steps`` (epochs run), ``max_steps``, ``setup_time``.
      ``result`` is ``nonfinite`` if the objective diverged (training stops),
      ``max_steps_reached`` if ``tol`` was given and not met.

    Example:
      >>> X = jax.random.normal(jax.random.key(1), (64, 5))
      >>> y = (X[:, 0] > 0).astype(jnp.int32)
      >>> spec = LiftedSpec((5, 16, 2), lam=1.0, rho=1e-3)
      >>> sol = fit_lifted(jax.random.key(0), X, y, spec, epochs=3)
      >>> sol.stats["train_accuracy"].shape
      (3,)
    """
    if hyper is None:
        hyper = spec.hyper(as_float_array(X, "X").dtype) if isinstance(spec, LiftedSpec) else None
    return _train(
        key,
        X,
        y,
        spec,
        hyper,
        vmapped=False,
        epochs=epochs,
        batch_size=batch_size,
        alternations=alternations,
        init=init,
        X_test=X_test,
        y_test=y_test,
        tol=tol,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        throw=throw,
        verbose=verbose,
        extrapolation=extrapolation,
        fixed_batches=fixed_batches,
    )


def tune_lifted(
    key,
    X,
    y,
    spec: LiftedSpec,
    *,
    lam=None,
    rho=None,
    gamma=None,
    epochs: int = 10,
    batch_size: int | None = None,
    alternations: int = 1,
    init=None,
    X_test=None,
    y_test=None,
    inner_tol: float | None = None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
    extrapolation: float | None = None,
    fixed_batches: bool = False,
    throw: bool = False,
    verbose: bool = False,
    devices=None,
    mesh=None,
) -> Solution:
    r"""Train several lifted networks with different hyper-parameters in one ``vmap``-ed call.

    ``lam`` has shape ``(H,)``; ``rho`` and ``gamma`` shape ``(H,)`` (same value
    for every layer) or ``(H, L+1)``; omitted ones are taken from ``spec``. All
    models start from the same initialisation and see the same batches, so the
    ``H`` runs equal ``H`` separate :func:`fit_lifted` calls (one compiled
    program, one pass over the data per epoch for all models). ``extrapolation``
    is as in :func:`fit_lifted`, with one ``beta`` per model; ``fixed_batches``
    too, with one set of first-layer factorisations per model.

    ``devices`` / ``mesh`` split the ``H`` models over devices (the model axis
    of the state and hyper-parameters is placed with a ``NamedSharding``, ``H``
    padded to a multiple of the device count by repeating the last model and
    unpadded after; see :mod:`jaxknock.distributed`): ``None`` uses every
    device, an int the first ``d``. Each model's numbers do not depend on the
    device count. On CPU the non-batched mode (``batch_size=None``) keeps its
    sequential fallback and runs on one device. Peak memory is estimated as
    ``4 (N' sum(widths) + #weights)`` numbers per model (``N'`` the batch size
    or ``N``), plus the factorisations kept with ``fixed_batches``; a
    ``ValueError`` names ``devices`` when a device cannot hold its share of the
    models.

    Returns:
      :func:`fit_lifted`'s ``Solution`` with a leading model axis on ``value``,
      ``result`` and the per-epoch ``stats`` (shape ``(H, epochs)``). One diverging
      model gets ``RESULTS.nonfinite`` without stopping the others.

    Example:
      >>> X = jax.random.normal(jax.random.key(1), (64, 5))
      >>> y = (X[:, 0] > 0).astype(jnp.int32)
      >>> spec = LiftedSpec((5, 16, 2))
      >>> sol = tune_lifted(jax.random.key(0), X, y, spec, lam=jnp.array([0.5, 2.0]), epochs=2)
      >>> sol.stats["objective"].shape
      (2, 2)
    """
    if not isinstance(spec, LiftedSpec):
        raise TypeError(f"spec must be a LiftedSpec, got {type(spec).__name__}")
    dtype = as_float_array(X, "X").dtype
    base = spec.hyper(dtype)
    n = spec.num_layers
    given = [a for a in (lam, rho, gamma) if a is not None]
    if not given:
        raise ValueError("give at least one of lam, rho, gamma as a 1-D array of hyper-parameter values")
    sizes = {int(jnp.shape(a)[0]) for a in given if jnp.ndim(a) >= 1}
    if len(sizes) != 1 or any(jnp.ndim(a) == 0 for a in given):
        raise ValueError(
            "lam, rho and gamma must be arrays with the same leading length H, "
            f"got shapes {[tuple(jnp.shape(a)) for a in given]}"
        )
    H = sizes.pop()

    def per_layer(a, default, name):
        if a is None:
            return jnp.broadcast_to(default, (H, n))
        a = jnp.asarray(a, dtype)
        if a.ndim == 1:
            return jnp.broadcast_to(a[:, None], (H, n))
        if a.shape != (H, n):
            raise ValueError(f"{name} must have shape ({H},) or ({H}, {n}), got {tuple(a.shape)}")
        return a

    lam_arr = jnp.broadcast_to(base.lam, (H,)) if lam is None else jnp.asarray(lam, dtype)
    if lam_arr.shape != (H,):
        raise ValueError(f"lam must have shape ({H},), got {tuple(lam_arr.shape)}")
    hyper = LiftedHyper(lam_arr, per_layer(rho, base.rho, "rho"), per_layer(gamma, base.gamma, "gamma"))
    # the CPU fallback of the non-batched mode runs the models one by one on one device
    sequential = batch_size is None and jax.default_backend() == "cpu"
    shard = _mesh.wants_sharding(devices, mesh) and not sequential
    mesh = _mesh.resolve_mesh(devices, mesh, None) if shard else None
    D = int(mesh.shape[mesh.axis_names[0]]) if shard else 1
    rows = int(jnp.shape(X)[0]) if batch_size is None else int(batch_size)
    per_model = 4 * (rows * sum(spec.sizes[1:]) + sum(a * b for a, b in zip(spec.sizes, spec.sizes[1:])))
    per_model *= jnp.dtype(dtype).itemsize
    if fixed_batches and batch_size is not None:
        per_model += _factor_bytes(spec, int(jnp.shape(X)[0]), int(batch_size), jnp.dtype(dtype).itemsize)
    free = _memory.device_memory_bytes(mesh)
    if -(-H // D) * per_model > free:
        raise ValueError(
            f"{-(-H // D)} models per device need about {-(-H // D) * per_model / 2**30:.3g} GiB "
            f"but a device has {free / 2**30:.3g} GiB free; pass more devices= (or fewer "
            "hyper-parameter values per call, or a batch_size)"
        )
    Hp = -(-H // D) * D
    if Hp != H:  # pad with copies of the last model; dropped below
        hyper = jax.tree_util.tree_map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], Hp - H, axis=0)]), hyper)
    sol = _train(
        key,
        X,
        y,
        spec,
        hyper,
        vmapped=True,
        epochs=epochs,
        batch_size=batch_size,
        alternations=alternations,
        init=init,
        X_test=X_test,
        y_test=y_test,
        tol=None,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        throw=throw,
        verbose=verbose,
        mesh=mesh,
        extrapolation=extrapolation,
        fixed_batches=fixed_batches,
    )
    if Hp == H:
        return sol

    def cut(a):
        return a[:H]

    stats = {k_: (v[:H] if np.ndim(v) == 2 else v) for k_, v in sol.stats.items()}
    return Solution(
        jax.tree_util.tree_map(cut, sol.value), sol.result[:H], stats, jax.tree_util.tree_map(cut, sol.state)
    )


# ----------------------------------------------------------------------------
# Prediction and export
# ----------------------------------------------------------------------------


def predict_lifted(
    params,
    X,
    spec: LiftedSpec,
    *,
    method: str = "feedforward",
    hyper: LiftedHyper | None = None,
    passes: int = 20,
    inner_tol: float | None = None,
    inner_max_steps: int = 500,
):
    r"""Predict with trained weights.

    ``method="feedforward"``: the standard rule, returns ``U_L`` (logits or
    regression outputs) from :func:`mlp_apply`.

    ``method="lifted"``: the lifted prediction rule (eq. 3.12 / 2.12)

    .. math::

        \hat y = \arg\min_{y, (x_l)} \mathcal L(y, W_L x_L + b_L)
          + \lambda \sum_{l<L} B_l(x_{l+1}, W_l x_l + b_l), \quad x_0 = x .

    For ``mse`` the minimum is the feed-forward output (``y = U_L`` and the
    forward ``x_l`` make every term zero), which is returned. For
    ``cross_entropy`` ``y`` ranges over the labels: for each class ``c`` the
    X-problem with ``y = e_c`` is solved by ``passes`` sweeps of the X-steps of
    :func:`lifted_bcd_step` (one sweep is exact when a single block is free) and
    the returned scores are ``-value_c`` (so ``argmax`` gives the predicted class).

    Returns:
      ``(N, p)`` outputs / class scores.

    Example:
      >>> spec = LiftedSpec((4, 8, 3))
      >>> params = mlp_init(jax.random.key(0), spec.sizes)
      >>> predict_lifted(params, jnp.ones((2, 4)), spec, method="lifted").shape
      (2, 3)
    """
    X = as_float_array(X, "X")
    check_ndim(X, 2, "X")
    if X.shape[1] != spec.sizes[0]:
        raise ValueError(f"spec.sizes[0] = {spec.sizes[0]} but X has {X.shape[1]} features per row")
    check_finite(X, "X")
    params = _check_params(params, spec, X.dtype)
    if method == "feedforward" or (method == "lifted" and spec.loss == "mse"):
        return mlp_apply(params, X)
    if method != "lifted":
        raise ValueError(f"method must be 'feedforward' or 'lifted', got {method!r}")
    hyper = spec.hyper(X.dtype) if hyper is None else hyper
    settings = _default_settings(X.dtype, inner_tol=inner_tol, inner_max_steps=inner_max_steps)
    return _lifted_scores(params, X, hyper, spec, settings, int(passes))


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _lifted_scores(params, X, hyper, spec, settings, passes):
    p = spec.sizes[-1]
    # A single X-block (Fenchel, one hidden layer) is solved exactly by one sweep.
    single_block = spec.model == "fenchel" and spec.num_hidden == 1
    sweeps = 1 if single_block else passes

    def value_for_class(c):
        Y = jnp.broadcast_to(jax.nn.one_hot(c, p, dtype=X.dtype), (X.shape[0], p))
        state = _forward_state(params, X, spec)

        def sweep(_, st):
            return _x_steps(params, st, X, Y, hyper, spec, settings)[0]

        state = lax.fori_loop(0, sweeps, sweep, state)
        data, pen, _ = _objective_rows(state, X, Y, hyper, spec)
        return data + pen

    values = jax.vmap(value_for_class)(jnp.arange(p))  # (p, N)
    return -values.T


def lifted_to_mlp(params_or_solution, *, index: int | None = None, dtype=None) -> list:
    """Export trained weights as a plain MLP parameter pytree.

    Args:
      params_or_solution: the ``Solution`` of :func:`fit_lifted` /
        :func:`tune_lifted` or its ``value``.
      index: for :func:`tune_lifted` results, which model to export.
      dtype: optional dtype to cast to (e.g. ``jnp.float32``).

    Returns:
      list of ``{"w": (p_l, p_{l+1}), "b": (p_{l+1},)}`` usable with
      :func:`mlp_apply` and as ``init`` of :func:`train_mlp`.
    """
    params = params_or_solution.value if isinstance(params_or_solution, Solution) else params_or_solution
    if index is not None:
        params = jax.tree_util.tree_map(lambda a: a[index], params)
    if params[0]["w"].ndim != 2:
        raise ValueError("params hold several models (from tune_lifted): pass index=")
    return [{"w": jnp.asarray(layer["w"], dtype), "b": jnp.asarray(layer["b"], dtype)} for layer in params]


# ----------------------------------------------------------------------------
# optax training of the equivalent standard network
# ----------------------------------------------------------------------------


@functools.cache
def _mlp_epoch_fn(optimizer, loss: str, batch_size: int, weight_decay: float):
    def objective(params, xb, yb):
        ridge = sum(jnp.sum(layer["w"] ** 2) for layer in params)
        return _loss_sum(yb, mlp_apply(params, xb), loss) / xb.shape[0] + weight_decay * ridge

    grad_fn = jax.value_and_grad(objective)

    def epoch(params, opt_state, X, Y, perm):
        nb = X.shape[0] // batch_size
        idx = perm[: nb * batch_size].reshape(nb, batch_size)

        def body(carry, ix):
            params, opt_state = carry
            value, g = grad_fn(params, X[ix], Y[ix])
            updates, opt_state = optimizer.update(g, opt_state, params)
            params = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
            return (params, opt_state), value

        (params, opt_state), values = lax.scan(body, (params, opt_state), idx)
        return params, opt_state, jnp.mean(values)

    return jax.jit(epoch)


def train_mlp(
    key,
    X,
    y,
    init,
    *,
    optimizer,
    loss: str = "cross_entropy",
    epochs: int = 10,
    batch_size: int = 100,
    weight_decay: float = 0.0,
    X_test=None,
    y_test=None,
    throw: bool = False,
    verbose: bool = False,
) -> Solution:
    r"""Train the standard ReLU network with an optax optimizer (mini-batch, shuffled).

    Minimises ``(1/|B|) L(Y_B, mlp_apply(params, X_B)) + weight_decay sum ||W_l||^2``
    over mini-batches; each epoch is one jitted ``lax.scan``. Use it for the
    Adam/SGD baselines (``init=sizes``: Xavier initialisation) and for the
    thesis' Table 2.1 experiment (``init=lifted_to_mlp(solution)``: a network
    initialised with lifted weights).

    Args:
      key: ``jax.random`` key (initialisation when ``init`` is a size tuple, shuffling).
      X, y: ``(N, p_0)`` inputs and ``(N,)`` integer labels or ``(N, p)`` targets.
      init: layer sizes (Xavier init) or an MLP params pytree.
      optimizer: an ``optax.GradientTransformation`` (e.g. ``optax.adam(1e-3)``).
      loss: ``"cross_entropy"`` or ``"mse"``.
      epochs, batch_size, weight_decay: training settings.
      X_test, y_test: optional held-out data evaluated after every epoch.

    Returns:
      ``Solution(value=params, result, stats)`` with per-epoch ``train_loss``,
      ``test_accuracy``/``test_loss`` (if given), ``epoch_time`` and ``epoch_cpu_time``;
      ``result`` is ``nonfinite`` if the loss diverged.

    Example:
      >>> import optax
      >>> X = jax.random.normal(jax.random.key(1), (64, 5))
      >>> y = (X[:, 0] > 0).astype(jnp.int32)
      >>> sol = train_mlp(jax.random.key(0), X, y, (5, 16, 2), optimizer=optax.adam(1e-2),
      ...                 epochs=2, batch_size=16)
      >>> sol.stats["train_loss"].shape
      (2,)
    """
    if isinstance(init, (tuple, list)) and init and not isinstance(init[0], dict):
        sizes = tuple(int(s) for s in init)
        params = None
    else:
        sizes = tuple([init[0]["w"].shape[0]] + [layer["w"].shape[1] for layer in init])
        params = init
    spec = LiftedSpec(sizes, loss=loss)
    X, Y, labels = _prepare_xy(X, y, spec)
    N = X.shape[0]
    batch_size = int(batch_size)
    if not 1 <= batch_size <= N:
        raise ValueError(f"batch_size must lie in [1, {N}], got {batch_size}")
    if int(epochs) < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    k_init, k_perm = jax.random.split(key)
    params = mlp_init(k_init, sizes, dtype=X.dtype) if params is None else _check_params(params, spec, X.dtype)
    test = None
    if X_test is not None or y_test is not None:
        if X_test is None or y_test is None:
            raise ValueError("pass both X_test and y_test, or neither")
        test = _prepare_xy(X_test, y_test, spec, "X_test", "y_test")
    opt_state = optimizer.init(params)
    step = _mlp_epoch_fn(optimizer, loss, batch_size, float(weight_decay))
    evaluate = _eval_fn(loss, False)
    hist: dict[str, list] = {}
    nonfinite = False
    for epoch in range(int(epochs)):
        perm = jax.random.permutation(jax.random.fold_in(k_perm, epoch), N)
        t0, c0 = time.perf_counter(), time.process_time()
        params, opt_state, value = step(params, opt_state, X, Y, perm)
        jax.block_until_ready(params)
        hist.setdefault("epoch_time", []).append(time.perf_counter() - t0)
        hist.setdefault("epoch_cpu_time", []).append(time.process_time() - c0)
        hist.setdefault("train_loss", []).append(float(value))
        if test is not None:
            te = evaluate(params, *test)
            hist.setdefault("test_loss", []).append(float(te["loss"]))
            if "accuracy" in te:
                hist.setdefault("test_accuracy", []).append(float(te["accuracy"]))
        if verbose:
            print(f"epoch {epoch + 1}: loss {float(value):.4f}", flush=True)
        if not np.isfinite(float(value)):
            nonfinite = True
            break
    stats = {k_: np.asarray(v) for k_, v in hist.items()}
    stats["num_steps"] = np.int32(len(hist["epoch_time"]))
    stats["max_steps"] = np.int32(epochs)
    code = RESULTS.nonfinite if nonfinite else RESULTS.successful
    return raise_if_failed(Solution(params, jnp.asarray(code, jnp.int32), stats), throw)
