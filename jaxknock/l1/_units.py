r"""The units of the data: every l1 fit runs on ``X / 2^{e_X}`` and ``y / 2^{e_y}``, its answer is scaled back.

The lasso is equivariant to the units of the data: ``X -> c_X X``, ``y -> c_y y`` and
``lam -> c_X c_y lam`` give ``coef -> (c_y / c_X) coef``, ``intercept -> c_y intercept`` and
``gap`` / deviances ``-> c_y^2``. The solvers are not, at their edges: the default grid's floor
(``lambda_max <= 1e-15``, :func:`jaxknock.l1.problem.geometric_grid`) is absolute, and so are the
``tiny`` guards of the divisions and the range of the sums of squares (they overflow past ``1e154`` in
float64 and ``1e19`` in float32, and flush to zero below the reciprocals). ``y`` in units of ``1e-16``
(float64) or ``1e-20`` (float32) gave an all-zero, "successful" answer. So each entry point divides
``X`` and ``y`` by the powers of two ``2^e`` that bring ``max |X|`` and ``max |y|`` into ``[0.5, 1)``
(one reduction each; a labels ``y`` of the logistic loss keeps ``e_y = 0``), divides the penalties
by ``2^{e_X + e_y}``, solves, and multiplies every returned quantity back by its power (:data:`KINDS`).
Scaling by a power of two is exact away from the subnormal range, so on data the solvers handled
before the answer is the same to the bit; the floors now read relative to the data's magnitude.
Traceable: the exponents are traced integers (``jnp.frexp`` / :func:`jaxknock._scaling.scale_pow2`), so ``jit``
and ``vmap`` work.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks
from jaxknock._scaling import pow2_exponent, scale_pow2
from jaxknock._solution import Solution

# The power of 2 each returned quantity carries: "coef" 2^(e_y - e_X), "y" 2^e_y, "lam" 2^(e_X + e_y),
# "y2" 2^(2 e_y); keys not listed are unit-free (counts, codes, relative KKT residuals, relative gaps).
KINDS = {
    "coef": "coef",
    "coef_path": "coef",
    "intercept": "y",
    "intercept_path": "y",
    "lam": "lam",
    "lambdas": "lam",
    "entry": "lam",
    "gap": "y2",
    "duality_gap": "y2",
    "cv_error": "y2",
    "cv_mean": "y2",
    "cv_se": "y2",
    "train_loss": "y2",
}


class Units(NamedTuple):
    """The exponents of the data: ``max |X| / 2^x`` and ``max |y| / 2^y`` lie in ``[0.5, 1)`` (``0`` for all-zero)."""

    x: jax.Array
    y: jax.Array

    def power(self, kind):
        """The exponent of a quantity of the given kind (see :data:`KINDS`)."""
        return {"coef": self.y - self.x, "y": self.y, "lam": self.x + self.y, "y2": 2 * self.y}[kind]


def scale_data(X, y, loss):
    """``(X / 2^{e_X}, y / 2^{e_y}, units)``: one exponent for a whole batch of designs.

    The least-squares loss only (``units = None`` otherwise: labels have no units, and the l1-logistic
    solvers mix the coefficients with the unpenalised offset, so a scaled ``X`` moved their iterates). Called
    at the public entry points, outside their compiled solves: those then run the same program on scaled data,
    bit for bit as on data already in these units. An exponent known to be zero copies nothing.

    Concrete exponents are brought to the host (one explicit transfer of two integers): every later
    scaling of a returned quantity is then a host integer, and a zero one is no operation at all. Every
    scaling is one compiled program (:func:`_exponents`, :func:`_scale`, :func:`_ldexp_all`), not one per
    operation and shape: they were about a dozen small compilations in every first call.
    """
    if loss != "squared":
        return X, y, None
    units = Units(*_on_host_if_concrete(_exponents(X, y)))
    if _is_zero(units.x) and _is_zero(units.y):  # (vmap over y alone: X's is concrete)
        return X, y, units
    return (*_scale(X, y, -units.x, -units.y), units)


@jax.jit
def _exponents(X, y):
    return pow2_exponent(jnp.max(jnp.abs(X))), pow2_exponent(jnp.max(jnp.abs(y)))


@jax.jit
def _scale(X, y, ex, ey):
    return scale_pow2(X, ex), scale_pow2(y, ey)


@jax.jit
def _ldexp_all(arrays, exponents):
    """``a * 2^e`` for each pair (exact): the scalings of one call in one program."""
    return tuple(scale_pow2(a, e) for a, e in zip(arrays, exponents))


def _on_host_if_concrete(exponents):
    """Concrete exponents as NumPy integers (one explicit transfer); traced ones as they are."""
    if all(_checks.is_concrete(e) for e in exponents):
        return tuple(np.int32(e) for e in jax.device_get(exponents))
    return tuple(np.int32(jax.device_get(e)) if _checks.is_concrete(e) else e for e in exponents)


def _is_zero(e) -> bool:
    return isinstance(e, (int, np.integer)) and int(e) == 0


def _ldexp_many(arrays, exponents):
    """``[a * 2^e]``: nothing at all when every ``e`` is a host zero, else one program for all of them.

    The program takes every array, those whose ``e`` is zero too (``a * 2^0`` is ``a`` to the bit): passing
    only the nonzero ones made the program's signature depend on which exponents of the data were zero, so
    a warm call on data of other units (``y`` rescaled until ``e_y = e_X``) compiled a new one.
    """
    if all(_is_zero(e) for e in exponents):
        return list(arrays)
    return list(_ldexp_all(tuple(arrays), tuple(exponents)))


def to_unit(a, units: Units | None, kind):
    """``a`` (a quantity of ``kind`` in the caller's units) on the unit scale; ``None`` stays ``None``."""
    return a if a is None or units is None else _ldexp_many([a], [-units.power(kind)])[0]


def to_user(a, units: Units | None, kind):
    """``a`` on the unit scale back in the caller's units (exact)."""
    return a if units is None else _ldexp_many([a], [units.power(kind)])[0]


def restore(sol: Solution, units: Units | None, value_kind="coef", unit_free=()) -> Solution:
    """``sol`` of the unit-scale problem in the caller's units: ``value`` of ``value_kind``, each stat by :data:`KINDS`.

    ``unit_free``: keys of :data:`KINDS` that this solver reports relative (the working-set engine's ``gap``).
    A ``LassoState`` in ``sol.state`` is scaled back too (:func:`state_to_user`).
    """
    if units is None:
        return sol
    keys = [k for k, v in sol.stats.items() if k in KINDS and k not in unit_free and v is not None]
    arrays = [sol.value] + [sol.stats[k] for k in keys]
    scaled = _ldexp_many(arrays, [units.power(value_kind)] + [units.power(KINDS[k]) for k in keys])
    stats = dict(sol.stats, **dict(zip(keys, scaled[1:])))
    state = sol.state
    if state is not None and hasattr(state, "momentum"):
        state = state_to_user(state, units)
    return sol._replace(value=scaled[0], stats=stats, state=state)


@functools.partial(jax.jit, static_argnums=2)
def _scale_state(state, units: Units, sign):
    """A ``LassoState`` (with its FISTA momentum / CD history) scaled by ``2^(sign * power)`` (one program)."""

    def s(a, kind):
        return scale_pow2(a, sign * units.power(kind))

    momentum, history = state.momentum, state.history
    if momentum is not None:
        momentum = momentum._replace(
            coef_prev=s(momentum.coef_prev, "coef"),
            offset_prev=s(momentum.offset_prev, "y"),
            z_prev=s(momentum.z_prev, "y"),
        )
    if history is not None:
        history = history._replace(
            coefs=s(history.coefs, "coef"), offsets=s(history.offsets, "y"), zs=s(history.zs, "y")
        )
    return state._replace(
        coef=s(state.coef, "coef"),
        offset=s(state.offset, "y"),
        z=s(state.z, "y"),
        gap=s(state.gap, "y2"),
        momentum=momentum,
        history=history,
    )


def state_to_user(state, units: Units | None):
    """A ``LassoState`` of the unit-scale problem in the caller's units."""
    return state if units is None else _scale_state(state, units, 1)


def state_to_unit(state, units: Units | None):
    """A ``LassoState`` in the caller's units on the unit scale (the inverse of :func:`state_to_user`)."""
    return state if units is None else _scale_state(state, units, -1)
