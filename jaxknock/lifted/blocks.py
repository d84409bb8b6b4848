r"""The X- and W-block steps of block-coordinate descent (thesis Algorithm 1, lines 5-10).

X-blocks (:func:`x_steps`), backwards from ``X_L`` to ``X_1``: per-sample
strongly convex problems over ``Z >= 0`` (eq. 2.13, 3.14, 3.15, 3.16) solved by
accelerated projected gradient (:func:`~jaxknock.lifted.inner.nonneg_apg`); the
lifted cross-entropy output first, by the exact dual bisection of thesis
section 2.8.

W-blocks (:func:`w_steps`, parallel across layers): ridge regressions in
closed form (lifted model, MSE last layer), or iterations whose every step is
a ridge regression with a fixed factorisation (:mod:`jaxknock.lifted.ridge`):
for Fenchel hidden layers (eq. 3.17) the majorise-minimise step is used as a
preconditioned gradient in nonlinear conjugate gradient with an exact line
search per output unit; for the cross-entropy last layer, majorise-minimise
with Bohning's curvature bound accelerated by Nesterov momentum with restart.
Batched training adds the proximal term ``gamma_l ||Theta_l - Theta_l^0||^2``
(eq. 3.19, 3.20). Every block is safeguarded: it is only accepted when it does
not increase its subproblem objective.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock._checks import (
    as_float_array,
    check_count,
    check_finite,
    check_ndim,
    check_real,
    combine_codes,
    is_concrete,
    poison,
)
from jaxknock._solution import RESULTS, Solution
from jaxknock.lifted._common import HI, Info, colsum, guard, mm, sum_infos
from jaxknock.lifted.inner import accelerated_mm, cg_mm, nonneg_apg, simplex_xent
from jaxknock.lifted.objective import fenchel_rows, fenchel_sum, loss_grad, loss_sum, pre_activation, xlogy_rows
from jaxknock.lifted.ridge import kernel_factor, kernel_ridge, primal_factor, primal_ridge, ridge_weights, stack_theta
from jaxknock.lifted.spec import LOSS_CURVATURE, LiftedHyper, LiftedSpec, LiftedState, Settings

__all__ = [
    "fenchel_line",
    "fenchel_relu_regression",
    "forward_state",
    "uses_kernel",
    "w_factor",
    "w_scale",
    "w_solve",
    "w_steps",
    "x_steps",
]


def fenchel_line(V, s):
    """``line`` of :func:`cg_mm` for ``s * sum B(V, U)`` (per column)."""

    def line(U, UD, t):
        Ut = U + t * UD
        up, ut = jax.nn.relu(U), jax.nn.relu(Ut)
        delta = s * colsum(0.5 * (ut - up) * (ut + up) - t * V * UD)
        d1 = s * colsum((ut - V) * UD)
        d2 = s * colsum(jnp.where(Ut > 0, UD * UD, 0.0))
        return delta, d1, d2

    return line


def _max_sq_singular(W):
    """``||W||_2^2``: the curvature of ``Z -> Z W`` (the X-steps' Lipschitz constants)."""
    p, q = W.shape
    G = jnp.matmul(W.T, W, precision=HI) if q <= p else jnp.matmul(W, W.T, precision=HI)
    return jnp.linalg.eigvalsh(G)[-1]


def w_solve(
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
    system's factorisation if precomputed (:func:`w_factor`).
    """
    c_w, c_b = ridge_weights(rho, gamma)
    shrink = gamma / jnp.where(c_w > 0, c_w, 1.0)
    W0t = shrink * W0
    if kernel:
        # Written as a product with W0 itself so that XLA shares it with the
        # forward pass (W = W0 in the first alternation of a batch).
        sysm = kernel_ridge(X, s, c_w, c_b, W0t, b0, shrink * mm(X, W0) + b0, factor)
    else:
        sysm = primal_ridge(X, s, c_w, c_b, W0t, b0, gram, factor)
    cdiag_w, cdiag_b = c_w, c_b
    theta_cur = stack_theta(W, b)
    theta0t = stack_theta(W0t, b0)
    U_cur = mm(X, W) + b

    def reg_theta(theta):
        d = theta - theta0t
        return cdiag_w * jnp.sum(d[:-1] ** 2) + cdiag_b * jnp.sum(d[-1] ** 2)

    f_cur = data_value(U_cur) + reg_theta(theta_cur)
    if exact:
        z = sysm.solve(target)
        U_new = sysm.U_of(z)
        k, conv = jnp.int32(1), jnp.asarray(True)
    elif line is not None:
        z, U_new, k, conv = cg_mm(sysm, target, line, U_cur, tol=tol, max_steps=max_steps)
    else:
        z, U_new, k, conv = accelerated_mm(sysm, target, U_cur, tol=tol, max_steps=max_steps)
    f_new = data_value(U_new) + sysm.reg_of(z)
    theta_new = sysm.theta_of(z)
    ok = f_new <= f_cur
    theta = jnp.where(ok, theta_new, theta_cur)
    U = jnp.where(ok, U_new, U_cur)
    return {"w": theta[:-1], "b": theta[-1]}, Info.one(k, conv & jnp.isfinite(f_new)), U


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
      rho: ridge weight ``>= 0`` on ``W``. init: optional ``(W, b)`` warm start.
      tol: relative step tolerance ``>= 0``. max_steps: iteration limit (a positive integer).

    Returns:
      ``Solution(value={"w", "b"}, result, stats={"num_steps", "max_steps",
      "objective", "gradient_norm"})``. Bad concrete input raises ``ValueError``;
      under ``jit`` a negative ``Y`` or ``rho`` (the problem is then unbounded below)
      gives ``RESULTS.infeasible`` and NaN weights and stats.

    Example:
      >>> X = jax.random.normal(jax.random.key(0), (50, 3))
      >>> W = jnp.array([[1.0], [-2.0], [0.5]])
      >>> sol = fenchel_relu_regression(X, jax.nn.relu(X @ W))
      >>> bool(jnp.allclose(sol.value["w"], W, atol=1e-4))
      True
    """
    X = as_float_array(X, "X", bools=True)
    check_ndim(X, 2, "X")
    Y = jnp.asarray(Y, X.dtype)
    check_ndim(Y, 2, "Y")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}")
    check_finite(X, "X")
    check_finite(Y, "Y")
    if is_concrete(Y) and np.any(np.asarray(Y) < 0):
        raise ValueError("Y must be non-negative (it is the output of a ReLU)")
    if is_concrete(rho):  # rho < 0 ran and returned W = 0 (max_steps_reached)
        check_real(rho, "rho")
    tol = check_real(tol, "tol")  # tol=-1 / NaN ran to max_steps
    max_steps = check_count(max_steps, "max_steps")  # int() truncated 2.5
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
    layer, info, _ = w_solve(
        X,
        W,
        b,
        s=1.0 / N,
        target=lambda U: Y + jnp.minimum(U, 0.0),
        line=fenchel_line(Y, 1.0 / N),
        data_value=lambda U: fenchel_sum(Y, U) / N,
        rho=rho,
        gamma=zero,
        W0=jnp.zeros_like(W),
        b0=jnp.zeros_like(b),
        kernel=False,
        exact=False,
        tol=tol,
        max_steps=max_steps,
    )
    U = mm(X, layer["w"]) + layer["b"]
    obj = fenchel_sum(Y, U) / N + rho * jnp.sum(layer["w"] ** 2)
    R = (jax.nn.relu(U) - Y) / N
    gW = mm(X.T, R) + 2 * rho * layer["w"]
    gnorm = jnp.sqrt(jnp.sum(gW**2) + jnp.sum(jnp.sum(R, 0) ** 2))
    code = jnp.where(
        jnp.isfinite(obj),
        jnp.where(info.failures == 0, jnp.int32(RESULTS.successful), jnp.int32(RESULTS.max_steps_reached)),
        jnp.int32(RESULTS.nonfinite),
    )
    # traced Y < 0 or rho < 0 (the eager checks raise): the objective is unbounded below, and the solve
    # stopped at a huge negative value it reported successful
    ok = jnp.all(Y >= 0) & (rho >= 0)
    code = combine_codes(jnp.where(ok, jnp.int32(RESULTS.successful), jnp.int32(RESULTS.infeasible)), code)
    layer = {key: poison(ok, v) for key, v in layer.items()}
    obj, gnorm = poison(ok, obj, gnorm)
    stats = {"num_steps": info.steps, "max_steps": jnp.int32(max_steps), "objective": obj, "gradient_norm": gnorm}
    return Solution(layer, code, stats)


# ----------------------------------------------------------------------------
# Block steps
# ----------------------------------------------------------------------------


def forward_state(params, X, spec: LiftedSpec, Y=None, hyper=None, settings=None) -> LiftedState:
    """The lifted variables of a feed-forward pass (the simplex output by Euclidean projection)."""
    hidden = []
    h = X
    for l in range(spec.num_hidden):
        h = jax.nn.relu(pre_activation(params, l, h))
        hidden.append(h)
    output = None
    if spec.model == "lifted" and spec.loss == "cross_entropy":
        U = pre_activation(params, spec.num_hidden, h)
        # Forward rule of the simplex activation: the Euclidean projection.
        output = simplex_xent(
            U, jnp.zeros_like(U), jnp.asarray(1.0, U.dtype), float(4 * jnp.finfo(U.dtype).eps), 200
        ).value
    return LiftedState(list(params), tuple(hidden), output)


def x_steps(params, state: LiftedState, X, Y, hyper: LiftedHyper, spec: LiftedSpec, settings: Settings):
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
        U_L = pre_activation(params, L, hidden[L - 1])
        sol = simplex_xent(U_L, Y, lam, settings.bisect_tol, settings.bisect_max_steps)
        Znew = sol.value

        def out_val(Z):
            return -jnp.sum(xlogy_rows(Y, Z)) + lam * jnp.sum((Z - U_L) ** 2)

        output, _ = guard(out_val, Znew, output)
        infos.append(Info.one(sol.stats["num_steps"], sol.result == RESULTS.successful))

    for l in range(L, 0, -1):  # X_l, l = L..1
        W, b = params[l]["w"], params[l]["b"]
        U0 = pre_activation(params, l - 1, layer_input(l - 1))
        Z0 = hidden[l - 1]
        nw2 = _max_sq_singular(W)
        if spec.model == "fenchel":
            if l == L:
                loss = spec.loss

                def val(Z, W=W, b=b, U0=U0):
                    return loss_sum(Y, mm(Z, W) + b, loss) + lam * jnp.sum(fenchel_rows(Z, U0))

                def grad(Z, W=W, b=b, U0=U0):
                    return mm(loss_grad(Y, mm(Z, W) + b, loss), W.T) + lam * (Z - U0)

                lip = LOSS_CURVATURE[loss] * nw2 + lam
            else:
                V = hidden[l]

                def val(Z, W=W, b=b, U0=U0, V=V):
                    return jnp.sum(fenchel_rows(V, mm(Z, W) + b)) + jnp.sum(fenchel_rows(Z, U0))

                def grad(Z, W=W, b=b, U0=U0, V=V):
                    return mm(jax.nn.relu(mm(Z, W) + b) - V, W.T) + (Z - U0)

                lip = nw2 + 1.0
        else:  # lifted: (a/2)||T - ZW - b||^2 + (c/2)||Z - U0||^2
            if l == L and spec.loss == "mse":
                T, a, c = Y, 1.0, 2.0 * lam
            elif l == L:
                T, a, c = output, 1.0, 1.0
            else:
                T, a, c = hidden[l], 1.0, 1.0

            def val(Z, W=W, b=b, U0=U0, T=T, a=a, c=c):
                return 0.5 * a * jnp.sum((mm(Z, W) + b - T) ** 2) + 0.5 * c * jnp.sum((Z - U0) ** 2)

            def grad(Z, W=W, b=b, U0=U0, T=T, a=a, c=c):
                return a * mm(mm(Z, W) + b - T, W.T) + c * (Z - U0)

            lip = a * nw2 + c
        Z, info = nonneg_apg(val, grad, Z0, lip, tol=tol, max_steps=ms)
        hidden[l - 1] = Z
        infos.append(info)
    return LiftedState(params, tuple(hidden), output), sum_infos(infos)


def w_scale(spec: LiftedSpec, l: int, lam, N: int):
    """Curvature ``s`` of the quadratic model of layer ``l``'s W-block data term."""
    if l < spec.num_hidden:
        return lam / N if spec.model == "fenchel" else 2.0 * lam / N
    if spec.model == "lifted" and spec.loss == "cross_entropy":
        return 2.0 * lam / N
    return LOSS_CURVATURE[spec.loss] / N  # Bohning's bound 1/2 for cross-entropy


def uses_kernel(N: int, p_in: int) -> bool:
    """Batched W-blocks use the ``N x N`` kernel form when the batch is not wider than the input."""
    return N <= p_in


def w_factor(X, hyper: LiftedHyper, spec: LiftedSpec):
    """The batched first layer's W-block factorisation for the batch ``X`` (Algorithm 2).

    It depends on the batch and the hyper-parameters only (the first layer's
    input is data), so training with fixed batches computes it once per batch.
    """
    N = X.shape[0]
    s = w_scale(spec, 0, hyper.lam, N)
    c_w, c_b = ridge_weights(hyper.rho[0], hyper.gamma[0])
    if uses_kernel(N, X.shape[1]):
        return kernel_factor(X, s, c_w, c_b)
    return primal_factor(X, s, c_w, c_b)


def w_steps(
    state: LiftedState,
    X,
    Y,
    hyper: LiftedHyper,
    spec: LiftedSpec,
    settings: Settings,
    anchor=None,
    kernel_ok=False,
    gram0=None,
    factor0=None,
):
    """All W-blocks (parallel across layers) with the X-variables fixed.

    ``gram0``: optional precomputed Gram blocks of ``[X, 1]`` (constant over the
    epochs of non-batched training); ``factor0``: optional precomputed first-layer
    factorisation of batched training (:func:`w_factor`).
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
        kernel = bool(kernel_ok and anchor is not None and uses_kernel(N, X_in.shape[1]))
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
            s=w_scale(spec, l, lam, N),
        )
        if l < L and spec.model == "fenchel":
            V = state.hidden[l]
            layer, info, U = w_solve(
                X_in,
                W,
                b,
                exact=False,
                target=lambda U, V=V: V + jnp.minimum(U, 0.0),
                data_value=lambda U, V=V: lam * fenchel_sum(V, U) / N,
                line=fenchel_line(V, lam / N),
                **common,
            )
        elif l < L or (spec.model == "lifted" and spec.loss == "cross_entropy"):
            T = state.hidden[l] if l < L else state.output
            layer, info, U = w_solve(
                X_in, W, b, exact=True, target=T, data_value=lambda U, T=T: lam * jnp.sum((T - U) ** 2) / N, **common
            )
        elif spec.loss == "mse":
            layer, info, U = w_solve(
                X_in, W, b, exact=True, target=Y, data_value=lambda U: loss_sum(Y, U, "mse") / N, **common
            )
        else:  # Fenchel cross-entropy last layer: Bohning majoriser, curvature 1/2
            layer, info, U = w_solve(
                X_in,
                W,
                b,
                exact=False,
                target=lambda U: U - 2.0 * loss_grad(Y, U, "cross_entropy"),
                data_value=lambda U: loss_sum(Y, U, "cross_entropy") / N,
                **common,
            )
        new_params.append(layer)
        infos.append(info)
        pre.append(U)
    return LiftedState(new_params, state.hidden, state.output), sum_infos(infos), tuple(pre)
