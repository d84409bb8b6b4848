"""The result object shared by every iterative solver in jaxknock.

Every solver returns a :class:`Solution` ``(value, result, stats, state)``:

* ``value``  - the answer (``s`` for the S-vector solvers, coefficients for the
  lasso, ...);
* ``result`` - an ``int32`` code from :class:`RESULTS` (an array, so it works
  under ``jax.vmap``: one bad replicate never aborts the others);
* ``stats``  - a dict of diagnostics, always holding ``num_steps``; a solver's
  also ``max_steps`` and the final optimality measure (a duality gap or
  gradient norm) under a solver-specific key (the lasso statistics
  :func:`~jaxknock.lcd` / :func:`~jaxknock.lsm`, which add up many solves,
  hold ``num_steps`` and the fields they list);
* ``state``  - the final solver state (useful for warm starts and debugging).

Non-convergence is never silent: a solver that exhausts ``max_steps`` without
meeting its tolerance sets ``RESULTS.max_steps_reached``; NaN/Inf iterates set
``RESULTS.nonfinite``. Solvers raise only when asked (``throw=True``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["RESULTS", "Solution", "SolverError", "result_code", "raise_if_failed", "reraise_solver_errors"]


class RESULTS(enum.IntEnum):
    """Termination codes of the iterative solvers.

    ``RESULTS.message(code)`` gives a human-readable explanation. A
    :class:`Solution` holds the code as an ``int32`` array (one per batch
    member under ``vmap``); compare it with the members, which are ints.

    Example:
        >>> RESULTS.max_steps_reached, int(RESULTS.stagnated)
        (<RESULTS.max_steps_reached: 1>, 4)
        >>> RESULTS(2).name, RESULTS.message(0)
        ('nonfinite', 'the solver converged to the requested tolerance')
        >>> bool(jnp.array([0, 1], jnp.int32)[1] == RESULTS.max_steps_reached)
        True
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
    """Result of an iterative solver (a pytree; vmaps to a batch of results).

    Attributes:
        value: the answer (``s`` for the S-vector solvers, coefficients for the
            lasso, a model for the fits, ...).
        result: ``int32`` :class:`RESULTS` code (an array of codes for a batch).
        stats: dict of diagnostics (always ``num_steps``; ``max_steps`` for every solver,
        not for the statistics :func:`~jaxknock.lcd` / :func:`~jaxknock.lsm`).
        state: the final solver state, or other solver-specific data.

    Example:
        >>> import jaxknock
        >>> sol = jaxknock.equicorrelated(0.5 * jnp.eye(3) + 0.5)
        >>> bool(sol.successful), int(sol.result), sol.value.shape, int(sol.stats["num_steps"])
        (True, 0, (3,), 0)
        >>> sol.messages()
        'the solver converged to the requested tolerance'
    """

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


class SolverError(RuntimeError):
    """A solve asked to ``throw`` did not succeed: names the function and the ``RESULTS`` code.

    ``where`` is the public function (``"sdp"``), ``code`` the first non-success
    ``RESULTS`` member, ``failed`` / ``total`` how many of a batch failed.
    A ``RuntimeError``, so ``except RuntimeError`` keeps working. Raised by
    solvers called with ``throw=True`` (:func:`raise_if_failed`).

    Example:
        >>> import jaxknock
        >>> C = 0.5 * jnp.eye(4) + 0.5
        >>> try:
        ...     jaxknock.estimate_factor_model(C, rank=1, max_steps=1, throw=True)
        ... except jaxknock.SolverError as err:
        ...     print(err.where, err.code.name, err.failed, err.total, isinstance(err, RuntimeError))
        estimate_factor_model max_steps_reached 1 1 True
    """

    def __init__(self, message: str, *, where: str = "", code: int | None = None, failed: int = 0, total: int = 0):
        super().__init__(message)
        self.where, self.failed, self.total = where, failed, total
        self.code = None if code is None else RESULTS(int(code))


_MARKER = "SolverError: jaxknock."


def failure_message(where: str, codes) -> tuple[str, int, int, int] | None:
    """``(message, first failed code, failed, total)`` for the non-success ``RESULTS`` codes, or ``None``.

    Used by :func:`raise_if_failed` and by the warning of :func:`jaxknock.knockoff_filter`.
    """
    codes = np.asarray(codes).ravel()
    bad = codes[codes != RESULTS.successful]
    if not bad.size:
        return None
    code = RESULTS(int(bad[0]))
    what = f"{bad.size} of {codes.size} solve(s)" if codes.size > 1 else "the solve"
    msg = f"jaxknock.{where}: {what} failed with result code {int(code)} ({code.name}): {RESULTS.message(code)}"
    return msg, int(code), int(bad.size), int(codes.size)


def _raise_for_codes(codes, where: str = "solver") -> None:
    failure = failure_message(where, codes)
    if failure is not None:
        msg, code, failed, total = failure
        raise SolverError(msg, where=where, code=code, failed=failed, total=total)


def raise_if_failed(solution: Solution, throw: bool, where: str | None = None) -> Solution:
    """Raise :class:`SolverError` (a ``RuntimeError``) if ``throw`` and the solve did not succeed.

    The message names the public function (``where``; default: the calling
    function's name) and the ``RESULTS`` code, e.g. ``jaxknock.sdp: the solve
    failed with result code 3 (infeasible): ...``.

    Eager values raise immediately. Under ``jit`` the codes go to the host in
    one ``jax.debug.callback`` (a few ``int32``, never the solution), which
    raises when the computation executes. JAX then re-raises it as a
    ``jax.errors.JaxRuntimeError`` whose text is a callback traceback ending
    in ``SolverError: jaxknock.<where>: ... result code ...``; run the jitted
    function inside :func:`reraise_solver_errors` (a context manager and a
    decorator) to get the clean :class:`SolverError` back. Under ``vmap`` the
    whole batch is checked at once and the message counts the failed members.
    """
    if isinstance(throw, (str, bytes, jax.core.Tracer)):
        # throw="no" is truthy and raised on the first failure; a traced flag failed in bool() naming nothing
        raise TypeError(f"throw must be True or False (a Python bool), got {throw!r}")
    if not throw:
        return solution
    if where is None:
        where = sys._getframe(1).f_code.co_name.lstrip("_")
    if isinstance(solution.result, jax.core.Tracer):
        jax.debug.callback(lambda c: _raise_for_codes(c, where), solution.result)
    else:
        _raise_for_codes(solution.result, where)
    return solution


def _drop_solver_error_logs(record) -> bool:
    """Logging filter: JAX logs a failing callback's traceback before re-raising it; ours is re-raised cleanly."""
    info = record.exc_info
    return not (info and isinstance(info[1], SolverError))


class reraise_solver_errors(contextlib.ContextDecorator):
    """Turn a jitted ``throw=True`` failure back into a clean :class:`SolverError`.

    Under ``jax.jit`` a host callback cannot raise its own exception type: JAX
    wraps it in a ``JaxRuntimeError`` carrying the callback's traceback.
    Inside this context (or on a function decorated with it) such an error is
    re-raised as the :class:`SolverError` it holds, with its message and
    without the callback traceback (which JAX would also log to stderr); other
    errors pass through unchanged.

    Example:
        >>> import jax, jax.numpy as jnp, jaxknock
        >>> jax.config.update("jax_enable_x64", True)  # the SDP needs float64
        >>> bad = jnp.array([[1.0, 2.0], [0.5, 1.0]])  # not symmetric
        >>> f = jax.jit(lambda S: jaxknock.sdp(S, throw=True).value)
        >>> try:
        ...     with jaxknock.reraise_solver_errors():
        ...         f(bad).block_until_ready()
        ... except jaxknock.SolverError as err:
        ...     print(err.where, err.code.name)
        sdp infeasible
    """

    def __enter__(self):
        logging.getLogger("jax._src.debugging").addFilter(_drop_solver_error_logs)
        return self

    def __exit__(self, exc_type, exc, tb):
        logging.getLogger("jax._src.debugging").removeFilter(_drop_solver_error_logs)
        if exc is None or isinstance(exc, SolverError) or not isinstance(exc, RuntimeError):
            return False
        text = str(exc)
        if _MARKER not in text:
            return False
        msg = "jaxknock." + text[text.rindex(_MARKER) + len(_MARKER) :].strip().splitlines()[0]
        where = msg.split(":", 1)[0].removeprefix("jaxknock.")
        code = None
        if "result code " in msg:
            code = int(msg.split("result code ", 1)[1].split(" ", 1)[0])
        raise SolverError(msg, where=where, code=code) from None
