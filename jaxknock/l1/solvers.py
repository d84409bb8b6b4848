r"""The solve at one penalty: state, init/step, the convergence loop and :func:`lasso`.

Solvers (``solver=``, see :class:`~jaxknock.l1.settings.L1Settings`):

* ``"cd"`` -- cyclic coordinate descent (:mod:`jaxknock.l1.cd`): one *step*
  is one epoch over the coordinates.
* ``"fista"`` -- accelerated proximal gradient with adaptive restart
  (:mod:`jaxknock.l1.fista`), two matrix-vector products per iteration
  (matrix-matrix under ``vmap``): one *step* is ``fista.rounds_stride()`` iterations (10; :mod:`jaxknock._backend`).
* ``"auto"`` -- ``"cd"`` on the CPU backend, ``"fista"`` otherwise (why:
  ``benchmarks/measured/NOTES.md``, section l1).

Each step is followed by a *certificate*: the duality gap at the current
iterate and dynamic GAP safe screening (:mod:`jaxknock.l1.screening`). The
loop (:func:`solve`) is :func:`jaxknock._iterate.iterative_solve` with
``init = certify(init_state)``, ``step = certify . iterate`` and
``terminate = gap <= tol * D0``; :func:`lasso_init` and :func:`lasso_step`
expose the same two pieces for notebooks and debugging.

Everything is written for one design and batches with ``jax.vmap``: over
replicates (many ``[X, X~]`` designs), over folds (cross-validation uses 0/1
row weights, never ragged shapes) and, through ``lax.scan`` with warm starts,
along a lambda path. Matrix products use ``precision=HIGHEST``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks
from jaxknock._iterate import iterative_solve
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.l1 import _units, cd, fista, screening
from jaxknock.l1.problem import (
    Problem,
    centre_on_host,
    full_problem,
    intercept,
    predict,
    prepare_data,
    restore_intercept,
)
from jaxknock.l1.settings import L1Settings, make_settings

__all__ = ["LassoState", "lasso", "lasso_init", "lasso_step"]


class LassoState(NamedTuple):
    r"""Solver state for one design (a pytree; ``vmap`` adds a leading axis).

    The iterate of
    :math:`\min_{\beta, \beta_0} \frac1n \sum_i f(x_i^\top\beta + \beta_0; y_i) + \lambda\|\beta\|_1`
    in the centred parametrisation ``z = (X - mu) @ coef + offset`` (``mu``
    the training column means), with the certificate of the last check:
    ``gap`` is the duality gap ``P(coef) - D(theta) >= P(coef) - P*`` at the
    rescaled residual ``theta`` (:mod:`jaxknock.l1.screening`).

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

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (50, 10))
        >>> y = X[:, 0] + 0.1 * jax.random.normal(jax.random.key(1), (50,))
        >>> sol = lasso(X, y, 0.1)
        >>> st = sol.state  # the final LassoState
        >>> st.coef.shape, st.z.shape, st.active.shape
        ((10,), (50,), (10,))
        >>> import numpy as np
        >>> mu, coef = np.asarray(X).mean(axis=0), np.asarray(st.coef)
        >>> bool(np.isclose(float(sol.stats["intercept"]), float(st.offset) - mu @ coef, atol=1e-5))
        True
    """

    coef: jax.Array
    offset: jax.Array
    z: jax.Array
    active: jax.Array
    gap: jax.Array
    num_steps: jax.Array
    momentum: Any = None
    history: Any = None


# ----------------------------------------------------------------------------
# init / step / certify: the seams a new solver plugs into
# ----------------------------------------------------------------------------


def init_state(prob: Problem, coef, offset, settings: L1Settings) -> LassoState:
    """State before the first certificate (``gap = inf``)."""
    z = predict(prob, coef, offset)
    momentum = history = None
    if settings.solver == "fista":
        momentum = fista.init_momentum(coef, offset, z)
    else:
        history = cd.init_history(coef, offset, z)
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


def iterate(prob: Problem, lam, state: LassoState, settings: L1Settings) -> LassoState:
    """One epoch (cd) or ``fista.rounds_stride()`` iterations (fista), no gap check."""
    if settings.solver == "cd":
        return cd.cd_epoch(prob, lam, state, loss=settings.loss)
    return fista.fista_round(prob, lam, state, loss=settings.loss, fit_intercept=settings.fit_intercept)


def steps_per_round(settings: L1Settings) -> int:
    """``num_steps`` taken by one :func:`iterate` (the loop's budget is in rounds)."""
    return fista.rounds_stride() if settings.solver == "fista" else 1


def certify(prob: Problem, lam, state: LassoState, settings: L1Settings) -> LassoState:
    """Update the offset (cd), compute the duality gap and apply safe screening.

    For ``cd`` the linear predictor is first recomputed from
    ``(coef, offset)``: the epochs update ``z`` incrementally and the
    extrapolations (Anderson, line) combine stored predictors with large
    weights, so rounding drift in ``z`` would otherwise grow, the gap would
    certify a predictor the coefficients do not give, and the epochs would
    converge to the optimum of the drifted problem (with XLA:CPU's legacy
    emitters an l1-logistic solve stalled at a reported gap of 2e-10 with
    coefficients 2e-8 from the optimum; in float32 at ``tol = 1e-6`` the true
    gap was up to 8x the reported one: ``benchmarks/measured/NOTES.md``,
    session 39). One ``X @ coef`` per epoch. FISTA recomputes ``z`` at every
    iteration already.
    """
    offset, z = state.offset, state.z
    if state.momentum is None:  # FISTA moves the offset by gradient steps instead
        z = predict(prob, state.coef, offset)
        offset, z = cd.newton_offset(prob, offset, z, loss=settings.loss, fit_intercept=settings.fit_intercept)
    gap, keep = screening.gap_and_screen(prob, lam, state.coef, z, settings)
    state = state._replace(offset=offset, z=z, gap=gap)
    if settings.screen:
        state, dropped = screening.drop_screened(prob, state, keep, settings)
        if state.momentum is not None:
            state = fista.restart(state, jnp.any(dropped))
    return state


def step(prob: Problem, lam, state: LassoState, settings: L1Settings) -> LassoState:
    """One round of iterations, then a certificate (gap check with screening)."""
    return certify(prob, lam, iterate(prob, lam, state, settings), settings)


def solve(prob: Problem, lam, coef, offset, settings: L1Settings):
    """Alternate certificates and iterations until ``gap <= tol * D0``.

    Returns ``(state, code)``; the returned iterate is the one the gap refers
    to. ``settings.max_steps`` (epochs or iterations, may be traced) is
    converted into a budget of rounds, ``ceil(max_steps / steps_per_round)``.
    """
    lam = _checks.traced_lam(lam)
    target = settings.tol * prob.scale
    per = steps_per_round(settings)
    budget = jnp.asarray(settings.max_steps, jnp.int32)
    if per > 1:
        budget = (budget + (per - 1)) // per

    def terminate(s):
        return s.gap <= target, jnp.int32(RESULTS.successful)

    def finite(s):
        return jnp.isfinite(s.gap) & jnp.all(jnp.isfinite(s.coef))

    state = certify(prob, lam, init_state(prob, coef, offset, settings), settings)
    it = iterative_solve(
        state,
        lambda s: step(prob, lam, s, settings),
        terminate,
        max_steps=budget,
        finite=finite,
    )
    return it.state, it.result


def solve_stats(prob: Problem, state: LassoState, lam, settings: L1Settings) -> dict:
    """The ``stats`` of one solve (``gap``; ``duality_gap`` is its deprecated twin)."""
    return {
        "intercept": intercept(prob, state.coef, state.offset, settings.fit_intercept),
        "gap": state.gap,
        "duality_gap": state.gap,  # deprecated key, kept for one release
        "num_steps": state.num_steps,
        "max_steps": jnp.asarray(settings.max_steps, jnp.int32),
        "num_screened": jnp.sum(~state.active).astype(jnp.int32),
        "lam": lam,
    }


@jax.jit
def fit(X, y, lam, coef0, settings: L1Settings) -> Solution:
    """Jitted solve for one design at one ``lam`` from ``coef0`` (checked inputs)."""
    prob = full_problem(X, y, settings)
    state, code = solve(prob, lam, coef0, prob.offset0, settings)
    return Solution(value=state.coef, result=code, stats=solve_stats(prob, state, lam, settings), state=state)


def check_init(init, m, dtype):
    if init is None:
        return np.zeros(m, dtype)  # a host array goes in with the call (jnp.zeros was two programs in a first call)
    init = jnp.asarray(_checks.as_float_array(init, "init"), dtype)
    if init.shape != (m,):
        raise ValueError(f"init must have shape ({m},) like the coefficients, got {init.shape}")
    _checks.check_finite(init, "init")  # a NaN warm start returned `nonfinite` after the solve
    return init


# ----------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------


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
            (default 1e-6 in float64, 1e-4 in float32). The gap is computed in
            the input's precision; in float32 it is reliable to about 1e-6 relative:
            its floor is the product :math:`X_c^\top u` that scales the dual point
            (rounding ``eps sum_i |x_ij u_i|`` on gradients of size ``lambda``), not
            the loss sums, so at ``tol = 1e-6`` a float32 l1-logistic gap read up to
            0.7x the float64 value (``benchmarks/measured/NOTES.md``, session 40).
        max_steps: epochs (``cd``, default 1000) or iterations (``fista``,
            default 20000).
        solver: ``"auto"``, ``"cd"`` or ``"fista"`` (see :mod:`jaxknock.l1.solvers`).
        screen: apply dynamic GAP safe screening.
        throw: raise ``RuntimeError`` if the solve did not succeed.

    Returns:
        :class:`~jaxknock.Solution` with ``value`` the ``(m,)`` coefficients,
        ``result`` a ``RESULTS`` code and ``stats`` holding ``intercept``,
        ``gap`` (the duality gap; also under the deprecated key
        ``duality_gap``), ``num_steps``, ``max_steps``, ``num_screened``;
        ``state`` is the final :class:`LassoState`.

    Default (``solver="auto"`` on CPU): cyclic coordinate descent,
    ``beta_j <- S_{lam / L_j}(beta_j - g_j / L_j)`` in blocks of 16 coordinates (one ``X_B^T r`` and, where
    the block moved, one ``X_B d`` per block, through the block's ``16 x 16`` Gram matrix: ``16 n m`` flops of
    setup, never the whole ``X^T X``), each epoch followed by the duality gap and GAP safe screening; it stops
    at ``gap <= tol * D0``. Warm on XLA:CPU this took 1.5-5.4x the time of scikit-learn's ``Lasso(alpha=lam)``
    (1.5x on tall iid designs, most on wide ones, where the epochs' many small operations dominate;
    ``benchmarks/bench_lasso_defaults.py --single``; ``benchmarks/measured/NOTES.md``, session 63), at a
    duality gap ``tol * D0`` that is 100x tighter than scikit-learn's default ``1e-4 * D0``.

    Precision: with ``jax_enable_x64`` off, a float64 (or integer) NumPy ``X``
    would be rounded to float32 entry by entry, so an offset column (epoch
    seconds, ``1.7e9``) kept a few levels and the fit depended on the
    offset. With an intercept, the column means of such an ``X`` (and, for
    least squares, the mean of such a ``y``) are taken out in float64 on the
    host first, the solve runs on the centred float32 data, and
    ``stats["intercept"]`` is then ``b0 + mean(y) - mean(X) @ coef`` computed in
    float64 and returned as a NumPy float64 (a float32 intercept of
    ``1.7e9 * sum(coef)`` is off by up to ``64 * |sum(coef)|``); ``state`` is the
    solver's state on the centred data. Traced inputs (under ``jit`` or
    ``vmap``), device arrays and float32 input are not host float64 arrays and
    run as they are, as do x64 runs and fits without an intercept. Costs one
    float64 pass over ``X`` on the host (3 ms at ``2000 x 2000``).

    Units (least squares): the solve runs on ``X / 2^{e_X}`` and ``y / 2^{e_y}`` (``max |X|`` and ``max |y|``
    brought into ``[0.5, 1)``) at ``lam / 2^{e_X + e_y}``, and ``value``, ``stats`` and ``state``
    are scaled back (:mod:`jaxknock.l1._units`): powers of two are exact, so the answer is the same to the
    bit where the units were harmless, and ``y`` in units of ``1e-20`` (float32) or ``1e160`` (float64) no
    longer flushes to zero or overflows.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (50, 10))
        >>> y = X[:, 0] + 0.1 * jax.random.normal(jax.random.key(1), (50,))
        >>> sol = lasso(X, y, 0.1)
        >>> bool(sol.successful), int(jnp.argmax(jnp.abs(sol.value)))
        (True, 0)
    """
    X, y, shift = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    _checks.check_lam(lam)
    settings = make_settings(
        X.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol, max_steps=max_steps
    )
    coef0 = check_init(init, X.shape[1], X.dtype)
    lam = jnp.asarray(lam, X.dtype)
    if lam.ndim != 0:
        raise ValueError(f"lam must be a scalar, got shape {lam.shape}; use lasso_path for a grid")
    Xs, ys, units = _units.scale_data(X, y, settings.loss)
    sol = fit(Xs, ys, _units.to_unit(lam, units, "lam"), _units.to_unit(coef0, units, "coef"), settings)
    return raise_if_failed(restore_intercept(_units.restore(sol, units), shift), throw)


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
    debugging; :func:`lasso` drives the same two functions through
    :func:`jaxknock._iterate.iterative_solve`. Each call solves on the unit scale of :func:`lasso` and
    returns the state in the caller's units (the round trip is exact, so the steps are :func:`lasso`'s).

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (30, 5)); y = X[:, 0]
        >>> s = lasso_init(X, y, 0.1, solver="cd")
        >>> s = lasso_step(s, X, y, 0.1, solver="cd")
        >>> int(s.num_steps)
        1
    """
    X, y, _ = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)  # as lasso: the same state
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    _checks.check_lam(lam)
    settings = make_settings(X.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol)
    coef0 = check_init(init, X.shape[1], X.dtype)
    X, y, units = _units.scale_data(X, y, loss)
    lam, coef0 = _units.to_unit(jnp.asarray(lam, X.dtype), units, "lam"), _units.to_unit(coef0, units, "coef")
    return _units.state_to_user(_init_jit(X, y, lam, coef0, settings), units)


@jax.jit
def _init_jit(X, y, lam, coef0, settings):
    prob = full_problem(X, y, settings)
    lam = _checks.traced_lam(lam)
    return certify(prob, lam, init_state(prob, coef0, prob.offset0, settings), settings)


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
    r"""One epoch (``cd``) or 10 iterations (``fista``) followed by a gap check and screening.

    Exactly one step of the loop of :func:`lasso` on
    :math:`\min_{\beta, \beta_0} \frac1n \sum_i f(x_i^\top\beta + \beta_0; y_i) + \lambda\|\beta\|_1`:

    * ``cd``: one cyclic pass over the active coordinates,
      ``beta_j <- S_{lam / h_j}(beta_j - g_j / h_j)`` with ``g_j`` the partial
      derivative of the smooth part, ``h_j`` its curvature (or Lipschitz
      bound) and ``S`` :func:`~jaxknock.l1.problem.soft_threshold`, then a
      Newton step on the unpenalised offset;
    * ``fista``: 10 accelerated proximal-gradient iterations
      ``beta <- S_{lam / L}(v - grad / L)`` from the extrapolated point ``v``
      (momentum reset when ``(v - beta_new)^T (beta_new - beta) > 0``, the
      gradient restart test);

    then the certificate: the duality gap at the rescaled residual and
    dynamic GAP safe screening, which freezes at zero every feature with
    ``|x_j^T theta| + r ||x_j|| < lam``, ``r = sqrt(2 gap / (gamma n))``
    (:mod:`jaxknock.l1.screening`). :func:`lasso` stops when
    ``gap <= tol * D0`` (``D0`` the null deviance per sample).

    Args:
        state: the :class:`LassoState` of :func:`lasso_init` or a previous step.
        X, y, lam: the problem the state was started on.
        loss, fit_intercept, solver, screen, tol: as in :func:`lasso_init`
            (pass the same values).

    Returns:
        The next :class:`LassoState` (``num_steps`` advanced by 1 or 10).

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (30, 5)); y = X[:, 0]
        >>> s = lasso_init(X, y, 0.1, solver="cd")
        >>> for _ in range(3):
        ...     s = lasso_step(s, X, y, 0.1, solver="cd")
        >>> import numpy as np
        >>> coef = np.asarray(s.coef)
        >>> int(s.num_steps), np.flatnonzero(coef).tolist(), float(s.gap) <= 1e-6  # support {0}, certified
        (3, [0], True)
    """
    X, y, _ = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)  # as lasso: the same state
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    _checks.check_lam(lam)
    settings = make_settings(X.dtype, loss=loss, fit_intercept=fit_intercept, solver=solver, screen=screen, tol=tol)
    if not isinstance(state, LassoState) or jnp.shape(state.coef) != (X.shape[1],):
        # a state of another design failed inside JAX ("slice_sizes must be less than or equal to operand shape")
        got = jnp.shape(state.coef) if isinstance(state, LassoState) else type(state).__name__
        raise ValueError(
            f"state must be the LassoState of lasso_init on this X, with coef of shape ({X.shape[1]},); got {got}"
        )
    if (state.momentum is None) == (settings.solver == "fista"):  # an AttributeError of None ('t' / 'coefs')
        started = "cd" if state.momentum is None else "fista"
        raise ValueError(
            f"state was started by lasso_init with solver={started!r}; pass the same solver to lasso_step, "
            f"got solver={solver!r} (resolved to {settings.solver!r})"
        )
    # on lasso_init's unit scale (the same data gives the same exponents; the round trip is exact)
    X, y, units = _units.scale_data(X, y, loss)
    lam = _units.to_unit(jnp.asarray(lam, X.dtype), units, "lam")
    return _units.state_to_user(_step_jit(_units.state_to_unit(state, units), X, y, lam, settings), units)


@jax.jit
def _step_jit(state, X, y, lam, settings):
    return step(full_problem(X, y, settings), _checks.traced_lam(lam), state, settings)
