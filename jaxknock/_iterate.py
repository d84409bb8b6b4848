"""The one iteration driver shared by every iterative solver.

Every solver in jaxknock is written as three pure pieces, in the style of
optimistix:

* ``init(...) -> state``: a ``NamedTuple`` pytree;
* ``step(state) -> state``: one iteration (exposed for notebooks and debugging);
* ``terminate(state) -> (done, code)``: whether to stop, and the
  :class:`~jaxknock._solution.RESULTS` code to report when ``done``
  (``successful``, ``stagnated``, ``infeasible``, ...).

:func:`iterative_solve` drives them with ``lax.while_loop`` and is **the single
place** that decides ``max_steps_reached`` (the step budget ran out before
``terminate`` said done) and ``nonfinite`` (the state holds NaN/Inf). The step
limit ``max_steps`` may be a traced integer, so changing it never recompiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

from jaxknock._solution import RESULTS, Solution

__all__ = ["Iteration", "iterative_solve", "all_finite", "make_solution", "lockstep_while_loop"]


class Iteration(NamedTuple):
    """What :func:`iterative_solve` returns: the final state, its code and step count."""

    state: Any
    result: jax.Array
    num_steps: jax.Array


def all_finite(tree) -> jax.Array:
    """True when every floating leaf of ``tree`` is finite (NaN/Inf free)."""
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree_util.tree_leaves(tree)
        if jnp.issubdtype(jnp.result_type(x), jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def iterative_solve(
    init: Any,
    step: Callable[[Any], Any],
    terminate: Callable[[Any], tuple[jax.Array, jax.Array]],
    *,
    max_steps,
    finite: Callable[[Any], jax.Array] | None = None,
    check_every: int = 1,
) -> Iteration:
    """Run ``state <- step(state)`` until ``terminate`` says done.

    The loop stops at the first of: ``terminate(state)[0]`` is true (result
    ``terminate(state)[1]``), ``finite(state)`` is false (``nonfinite``), or
    ``max_steps`` steps were taken (``max_steps_reached``). ``terminate`` and
    ``finite`` are evaluated before every step, so an initial state that is
    already done takes zero steps.

    Args:
      init: the initial state (a pytree).
      step: one iteration, ``state -> state`` (same structure and dtypes).
      terminate: ``state -> (done, code)`` with ``done`` a boolean scalar and
        ``code`` an ``int32`` ``RESULTS`` code reported when ``done``.
      max_steps: the step budget (a Python or traced integer).
      finite: ``state -> bool``; defaults to :func:`all_finite` of the state.
      check_every: static stride: ``terminate``/``finite`` are tested every
        ``check_every`` steps (fewer host-device synchronisations on a GPU);
        the budget ``max_steps`` is still exact.

    Returns:
      :class:`Iteration` ``(state, result, num_steps)``.
    """
    finite = all_finite if finite is None else finite
    if not (isinstance(check_every, int) and check_every >= 1):
        raise ValueError(f"check_every must be a positive integer, got {check_every!r}")
    max_steps = jnp.asarray(max_steps, jnp.int32)

    def keep_going(carry, stride):
        state, k = carry
        done, _ = terminate(state)
        return (k + stride <= max_steps) & ~done & finite(state)

    def advance(carry, stride):
        state, k = carry
        state = lax.fori_loop(0, stride, lambda _, s: step(s), state) if stride > 1 else step(state)
        return state, k + stride

    carry = (init, jnp.int32(0))
    if check_every > 1:
        carry = lax.while_loop(lambda c: keep_going(c, check_every), lambda c: advance(c, check_every), carry)
    state, k = lax.while_loop(lambda c: keep_going(c, 1), lambda c: advance(c, 1), carry)

    done, code = terminate(state)
    result = jnp.where(
        done,
        jnp.asarray(code, jnp.int32),
        jnp.where(finite(state), jnp.int32(RESULTS.max_steps_reached), jnp.int32(RESULTS.nonfinite)),
    )
    return Iteration(state, result.astype(jnp.int32), k)


def make_solution(value, iteration: Iteration, max_steps, **stats) -> Solution:
    """Package a driven solve as a :class:`Solution` with the shared stats keys.

    ``stats`` always holds ``num_steps`` and ``max_steps``; solvers add their
    optimality measure under ``gap`` (certified or duality gap) where they have one.
    """
    stats = {"num_steps": iteration.num_steps, "max_steps": max_steps, **stats}
    return Solution(value, iteration.result, stats, iteration.state)


def lockstep_while_loop(cond_fun, body_fun, operands, init):
    """``lax.while_loop`` whose ``vmap`` runs the batch in lock step *without* a select on the carry.

    Unbatched, this is ``lax.while_loop(lambda c: cond_fun(operands, c),
    lambda c: body_fun(operands, c), init)``. Under ``jax.vmap``, JAX's own
    rule for a batched predicate runs the body on every element and then
    selects, leaf by leaf, between the new and the old carry of each element:
    a full copy of the carry per iteration. For loops whose carry holds large
    caches (the lasso engine's Gram blocks and inverses) that copy costs more
    than the iteration. This rule instead loops while *any* element's
    ``cond_fun`` holds and keeps the body's output as it is, so it relies on a
    contract the caller guarantees:

        ``body_fun(operands, c) == c`` for every element whose ``cond_fun`` is false

    (a finished element is a no-op: the body gates its own updates, typically
    by a ``done`` mask it already carries). ``cond_fun`` / ``body_fun`` must not
    close over traced values: everything traced goes through ``operands``
    (a pytree, batched or not, leaf by leaf). Nested calls nest the lock step.

    Example:
        >>> def cond(n, c):
        ...     return c[0] < n
        >>> def body(n, c):  # a no-op once i >= n
        ...     go = c[0] < n
        ...     return (c[0] + go, c[1] + 2 * go)
        >>> jax.vmap(lambda n: lockstep_while_loop(cond, body, n, (0, 0)))(jnp.array([1, 3]))[1].tolist()
        [2, 6]
    """

    @custom_vmap
    def loop(operands, init):
        return lax.while_loop(lambda c: cond_fun(operands, c), lambda c: body_fun(operands, c), init)

    @loop.def_vmap
    def _rule(axis_size, in_batched, operands, init):
        ops_axes = jax.tree_util.tree_map(lambda b: 0 if b else None, in_batched[0])
        init = jax.tree_util.tree_map(
            lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), init, in_batched[1]
        )
        vcond = jax.vmap(cond_fun, in_axes=(ops_axes, 0))
        vbody = jax.vmap(body_fun, in_axes=(ops_axes, 0))
        out = lax.while_loop(lambda c: jnp.any(vcond(operands, c)), lambda c: vbody(operands, c), init)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return loop(operands, init)
