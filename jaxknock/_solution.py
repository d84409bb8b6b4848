"""The result object shared by every iterative solver in jaxknock.

Every solver returns a :class:`Solution` ``(value, result, stats, state)``:

* ``value``  - the answer (``s`` for the S-vector solvers, coefficients for the
  lasso, ...);
* ``result`` - an ``int32`` code from :class:`RESULTS` (an array, so it works
  under ``jax.vmap``: one bad replicate never aborts the others);
* ``stats``  - a dict of diagnostics, always holding ``num_steps``,
  ``max_steps`` and the final optimality measure (a duality gap or gradient
  norm) under a solver-specific key;
* ``state``  - the final solver state (useful for warm starts and debugging).

Non-convergence is never silent: a solver that exhausts ``max_steps`` without
meeting its tolerance sets ``RESULTS.max_steps_reached``; NaN/Inf iterates set
``RESULTS.nonfinite``. Solvers raise only when asked (``throw=True``).
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["RESULTS", "Solution", "result_code", "raise_if_failed"]


class RESULTS(enum.IntEnum):
    """Termination codes of the iterative solvers.

    ``RESULTS.message(code)`` gives a human-readable explanation.
    """

    successful = 0
    max_steps_reached = 1
    nonfinite = 2
    infeasible = 3
    stagnated = 4

    @staticmethod
    def message(code) -> str:
        return _MESSAGES[RESULTS(int(code))]


_MESSAGES = {
    RESULTS.successful: "the solver converged to the requested tolerance",
    RESULTS.max_steps_reached: (
        "the solver stopped at max_steps before meeting its tolerance; increase "
        "max_steps or loosen tol, and inspect Solution.stats"
    ),
    RESULTS.nonfinite: (
        "the iterates became NaN or Inf; check the input for near-singularity or "
        "enable float64 (jax.config.update('jax_enable_x64', True))"
    ),
    RESULTS.infeasible: ("the problem is infeasible for the given input (see the solver docstring)"),
    RESULTS.stagnated: (
        "the iterate stopped improving before the certified optimality gap met tol "
        "(coordinate ascent can jam on degenerate problems); the reported gap is "
        "still a valid bound - inspect Solution.stats['gap']"
    ),
}


class Solution(NamedTuple):
    """Result of an iterative solver (a pytree; vmaps to a batch of results)."""

    value: Any
    result: jax.Array
    stats: dict
    state: Any = None

    @property
    def successful(self):
        """Boolean array: ``result == RESULTS.successful``."""
        return self.result == RESULTS.successful

    def messages(self) -> list[str] | str:
        """Human-readable message(s) for ``result`` (needs concrete values)."""
        codes = np.asarray(self.result)
        if codes.ndim == 0:
            return RESULTS.message(codes)
        return [RESULTS.message(c) for c in codes.ravel()]


def result_code(converged, finite) -> jax.Array:
    """Combine convergence / finiteness flags into a ``RESULTS`` code (traceable)."""
    code = jnp.where(
        converged,
        jnp.int32(RESULTS.successful),
        jnp.int32(RESULTS.max_steps_reached),
    )
    return jnp.where(finite, code, jnp.int32(RESULTS.nonfinite))


def _raise_for_codes(codes) -> None:
    codes = np.asarray(codes).ravel()
    bad = codes[codes != RESULTS.successful]
    if bad.size:
        raise RuntimeError(f"{bad.size} of {codes.size} solve(s) failed: {RESULTS.message(bad[0])}")


def raise_if_failed(solution: Solution, throw: bool) -> Solution:
    """Raise ``RuntimeError`` if ``throw`` and the solve did not succeed.

    Eager values raise immediately. Under ``jit`` the check runs as a host
    callback, so the error surfaces when the computation executes.
    """
    if not throw:
        return solution
    if isinstance(solution.result, jax.core.Tracer):
        jax.debug.callback(_raise_for_codes, solution.result)
    else:
        _raise_for_codes(solution.result)
    return solution
