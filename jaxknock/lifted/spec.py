"""What a lifted network is: its static specification, traced hyper-parameters and variables.

:class:`LiftedSpec` (hashable, a ``jit`` static argument) fixes the layer
widths, the loss and the model; :class:`LiftedHyper` holds the traced weights
``lam, rho, gamma`` (``vmap``-able over models); :class:`LiftedState` the
variables ``(W, b)``, ``X_1..X_L`` and the simplex output. :class:`Settings`
are the static solver settings of the inner block solves, built by
:func:`default_settings`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks

__all__ = [
    "LOSSES",
    "LOSS_CURVATURE",
    "MODELS",
    "LiftedHyper",
    "LiftedSpec",
    "LiftedState",
    "Settings",
    "default_settings",
    "structure",
]

LOSSES = ("mse", "cross_entropy")
MODELS = ("fenchel", "lifted")
# Curvature bound of the loss in the logits: 1 for 1/2 ||.||^2, 1/2 for softmax
# cross-entropy (Bohning's bound: Hessian diag(p) - pp^T <= I/2).
LOSS_CURVATURE = {"mse": 1.0, "cross_entropy": 0.5}


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
        sizes = _checks.as_int_tuple(self.sizes, "sizes")  # (6, 8.5, 2) is refused, not truncated
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
        lam = _checks.real_setting(self.lam)
        if isinstance(lam, (bool, np.bool_)) or not isinstance(lam, (int, float, np.integer, np.floating)):
            raise TypeError(f"lam must be a positive finite number, got {self.lam!r} ({type(self.lam).__name__})")
        if not (np.isfinite(lam) and float(lam) > 0):
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


def structure(spec: LiftedSpec) -> LiftedSpec:
    """``spec`` with the default hyper-parameters: all a compiled program takes from it statically.

    The steps and epochs take ``lam``, ``rho`` and ``gamma`` traced (:meth:`LiftedSpec.hyper`), but a spec is
    a static argument, hashed with its values: keyed by the whole spec, ``LiftedSpec(sizes, lam=3.0)`` after
    ``lam=1.0`` compiled every program again. Use it only where the hyper-parameters are passed explicitly.
    """
    return dataclasses.replace(spec, lam=1.0, rho=0.0, gamma=1.0)


class LiftedHyper(NamedTuple):
    r"""Traced hyper-parameters: ``lam`` scalar, ``rho`` and ``gamma`` of shape ``(L+1,)``.

    Their places in the training objective (Fenchel model, ``B`` the ReLU's
    Fenchel-Young gap; the lifted model has ``||X_{l+1} - U_l||_F^2`` in its
    place; see :mod:`jaxknock.lifted`):

    .. math::

        \frac1N \mathcal L(Y, U_L) + \frac{\lambda}{N}\sum_{l<L} B(X_{l+1}, U_l)
        + \sum_l \rho_l \|W_l\|_F^2 \;\Bigl[+ \sum_l \gamma_l \|\Theta_l - \Theta_l^0\|_F^2\Bigr],

    ``lam`` weighs the activation penalties, ``rho_l`` the ridge on the
    weights of layer ``l`` and ``gamma_l`` the proximal term that keeps the
    parameters ``Theta_l = (W_l, b_l)`` of a batch step near those of the
    previous batch (batched training only). Being arrays (not part of the
    static :class:`LiftedSpec`), new values do not recompile; give them a
    leading axis to train several models at once (:func:`tune_lifted`).

    Example:
        >>> h = LiftedSpec((4, 8, 3), lam=2.0, rho=1e-3).hyper()
        >>> float(h.lam), h.rho.shape, h.gamma.tolist()
        (2.0, (2,), [1.0, 1.0])
    """

    lam: jax.Array
    rho: jax.Array
    gamma: jax.Array


class LiftedState(NamedTuple):
    """Variables of the lifted training problem (a pytree).

    Block-coordinate descent alternates between the weights ``(W_l, b_l)`` and
    the lifted layer outputs ``X_l >= 0`` that replace ``relu(X_{l-1} W_{l-1} + b_{l-1})``;
    :func:`~jaxknock.lifted.init_lifted_state` starts from the feed-forward
    pass, where every Fenchel penalty is zero (the lifted model's
    ``||X_{l+1} - U_l||^2`` is not where ``U_l < 0``).

    Attributes:
      params: list of ``{"w": (p_l, p_{l+1}), "b": (p_{l+1},)}`` (an MLP pytree).
      hidden: tuple ``(X_1, ..., X_L)`` of non-negative ``N x p_l`` layer variables.
      output: the simplex output variable ``Z`` (``lifted`` + ``cross_entropy``),
        otherwise ``None``.

    Example:
        >>> from jaxknock.lifted import init_lifted_state, mlp_init
        >>> spec = LiftedSpec((4, 8, 3))
        >>> X = jnp.ones((5, 4))
        >>> state = init_lifted_state(mlp_init(jax.random.key(0), spec.sizes), X, spec)
        >>> len(state.params), state.hidden[0].shape, state.output is None
        (2, (5, 8), True)
        >>> W0, b0 = np.asarray(state.params[0]["w"]), np.asarray(state.params[0]["b"])
        >>> bool(np.allclose(state.hidden[0], np.maximum(np.ones((5, 4)) @ W0 + b0, 0), atol=1e-5))  # X_1
        True
    """

    params: list
    hidden: tuple
    output: Any = None


class Settings(NamedTuple):
    """Static settings of the inner solves (hashable: a ``jit`` static argument).

    ``inner_max_steps`` bounds each X-block solve, ``w_max_steps`` each
    iterative W-block solve, ``bisect_max_steps`` the simplex bisection of the
    lifted cross-entropy output; ``alternations`` is the number ``K`` of X/W
    alternations per batch (Algorithm 2).
    """

    inner_tol: float
    inner_max_steps: int
    w_max_steps: int
    bisect_tol: float
    bisect_max_steps: int
    alternations: int
    extrapolation: float = 0.0  # largest beta of the between-pass extrapolation (0: off)


def default_settings(
    dtype,
    *,
    inner_tol=None,
    inner_max_steps=100,
    w_max_steps=None,
    bisect_tol=None,
    bisect_max_steps=200,
    alternations=1,
    extrapolation=0.0,
) -> Settings:
    """The :class:`Settings` for training in ``dtype``, checked.

    ``inner_tol`` defaults to ``1e-6`` in float64 and ``1e-4`` in float32,
    ``w_max_steps`` to ``inner_max_steps`` and ``bisect_tol`` to ``4 eps``.
    """
    eps = float(jnp.finfo(dtype).eps)
    # int() truncated 2.5 and parsed "3"; a negative or NaN tolerance ran (never met, or met at once)
    inner_tol = (1e-6 if eps < 1e-10 else 1e-4) if inner_tol is None else inner_tol
    inner_tol = _checks.check_real(inner_tol, "inner_tol", strict=True)
    inner_max_steps = _checks.check_count(inner_max_steps, "inner_max_steps")
    w_max_steps = inner_max_steps if w_max_steps is None else _checks.check_count(w_max_steps, "w_max_steps")
    bisect_tol = _checks.check_real(4 * eps if bisect_tol is None else bisect_tol, "bisect_tol", strict=True)
    bisect_max_steps = _checks.check_count(bisect_max_steps, "bisect_max_steps")
    alternations = _checks.check_count(alternations, "alternations")
    extrapolation = _checks.check_real(extrapolation, "extrapolation")
    return Settings(inner_tol, inner_max_steps, w_max_steps, bisect_tol, bisect_max_steps, alternations, extrapolation)
