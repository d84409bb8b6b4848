"""One frozen settings object for the lasso / l1-logistic engine.

:class:`L1Settings` replaces the ``(loss, fit_intercept, solver, screen, tol,
max_steps)`` bundle that every function of the engine used to pass by hand.
It is a pytree: the *structural* fields (``loss``, ``fit_intercept``,
``solver``, ``screen``) are static metadata (part of the ``jit`` cache key,
they pick the code path), while the *numeric* fields (``tol``, ``max_steps``)
are traced leaves, so a new tolerance or step budget never recompiles.

A new solver plugs in behind the ``solver`` field: add its name to
:data:`SOLVERS` and its default budget to :data:`DEFAULT_MAX_STEPS`, and
dispatch on it in :mod:`jaxknock.l1.solvers` (``init_state`` / ``iterate``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _backend, _checks

__all__ = [
    "L1Settings",
    "LOSSES",
    "SOLVERS",
    "DEFAULT_MAX_STEPS",
    "make_settings",
    "model_settings",
    "resolve_solver",
    "check_loss",
]

LOSSES = ("squared", "logistic")
SOLVERS = ("auto", "cd", "fista")
# Epochs (cd) or iterations (fista).
DEFAULT_MAX_STEPS = {"cd": 1000, "fista": 20000}
# Solver name for model-only problems (lambda_max, the default grid): no
# solver-specific precomputation (block Gram matrices, power iteration).
NO_SOLVER = "none"


@dataclasses.dataclass(frozen=True)
class L1Settings:
    """Settings of one lasso / l1-logistic solve (a pytree; build it with :func:`make_settings`).

    Attributes:
        loss: ``"squared"`` or ``"logistic"`` (static).
        fit_intercept: fit an unpenalised intercept (static).
        solver: ``"cd"`` or ``"fista"``, already resolved from ``"auto"`` (static).
        screen: apply dynamic GAP safe screening (static).
        tol: relative duality-gap tolerance (traced).
        max_steps: epochs (``cd``) or iterations (``fista``) per solve (traced).

    Example:
        >>> s = make_settings(jnp.float64, solver="cd")
        >>> s.loss, s.solver, s.max_steps
        ('squared', 'cd', 1000)
    """

    loss: str = "squared"
    fit_intercept: bool = True
    solver: str = "cd"
    screen: bool = True
    tol: float = 1e-6
    max_steps: int = 1000

    def replace(self, **changes) -> L1Settings:
        """A copy with some fields changed (e.g. a traced ``max_steps``)."""
        return dataclasses.replace(self, **changes)


jax.tree_util.register_dataclass(
    L1Settings,
    data_fields=["tol", "max_steps"],
    meta_fields=["loss", "fit_intercept", "solver", "screen"],
)


def check_loss(loss: str) -> str:
    r"""Return ``loss`` if it names a supported loss (:data:`LOSSES`), else raise ``ValueError``.

    The losses are per-sample functions of the linear predictor ``z``:
    ``"squared"``: ``f(z; y) = (y - z)^2 / 2``; ``"logistic"``:
    ``f(z; y) = log(1 + e^z) - y z`` for labels ``y in {0, 1}``
    (see :mod:`jaxknock.l1.problem`).

    Example:
        >>> check_loss("logistic")
        'logistic'
        >>> check_loss("hinge")
        Traceback (most recent call last):
            ...
        ValueError: loss must be one of ('squared', 'logistic'), got 'hinge'
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    return loss


def resolve_solver(solver: str) -> str:
    """``"auto"`` is :func:`jaxknock._backend.lasso_solver`: ``"cd"`` on CPU, ``"fista"`` otherwise."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if solver == "auto":
        return _backend.lasso_solver()
    return solver


def make_settings(
    dtype,
    *,
    loss: str = "squared",
    fit_intercept: bool = True,
    solver: str = "auto",
    screen: bool = True,
    tol: float | None = None,
    max_steps: int | None = None,
) -> L1Settings:
    """Validate user settings into an :class:`L1Settings` (before tracing).

    ``tol=None`` means 1e-6 (float64) or 1e-4 (float32); ``max_steps=None``
    the solver's default (:data:`DEFAULT_MAX_STEPS`); ``solver="auto"`` is
    resolved for the current backend.
    """
    check_loss(loss)
    if tol is None:
        tol = 1e-6 if jnp.dtype(dtype) == jnp.float64 else 1e-4
    _checks.refuse_traced(
        tol,
        "tol",
        "a concrete Python or NumPy number",
        " (the solver still takes it as data: a new value does not recompile)",
    )
    tol = _checks.traced_float(tol)  # a concrete JAX scalar too (it was refused as "not a positive number")
    if isinstance(tol, (bool, np.bool_)) or not (
        isinstance(tol, (int, float, np.integer, np.floating)) and 0 < tol < np.inf
    ):  # tol=inf certified the zero start: `successful`, every coefficient zero
        why = " (an infinite tol certifies the starting point)" if isinstance(tol, float) and tol == np.inf else ""
        raise ValueError(f"tol must be a positive number, got {tol!r}{why}")
    solver = resolve_solver(solver)
    if max_steps is None:
        max_steps = DEFAULT_MAX_STEPS[solver]
    _checks.refuse_traced(max_steps, "max_steps", "a concrete Python or NumPy integer")
    if not (_checks.is_int(max_steps) and max_steps >= 0):
        raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
    return L1Settings(
        loss=loss,
        fit_intercept=_checks.static_flag(fit_intercept, "fit_intercept"),
        solver=solver,
        screen=_checks.static_flag(screen, "screen"),
        tol=float(tol),
        max_steps=int(max_steps),
    )


def model_settings(loss: str, fit_intercept: bool) -> L1Settings:
    """Settings for model-only quantities (``lambda_max``, the default grid): no solver."""
    return L1Settings(
        loss=loss,
        fit_intercept=_checks.static_flag(fit_intercept, "fit_intercept"),
        solver=NO_SOLVER,
        screen=False,
        tol=0.0,
        max_steps=0,
    )
