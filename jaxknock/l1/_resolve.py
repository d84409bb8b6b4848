"""Solving some designs of a result again: those that outgrew a batch's capacity, and uncertified float32 fits.

:func:`jaxknock.l1.working_set.l1_cv` / ``l1_path`` run the engine on one
design or a batch ``(R, n, m)``. Two kinds of designs are solved again after
the first run, and their results spliced into it, leaving the others as they
are:

* :func:`rerun_alone`: replicates of a sequential batch whose working set or
  active slots overflowed the batch's capacity run alone, each growing its own;
* :func:`refit_float64`: float32 (or lower) designs whose fit failed its
  certificate (the homotopy's float32 path stops at the first grid penalty that
  fails it, :func:`jaxknock.l1._ws_driver.path_core`). Such a fit is the homotopy's
  exact path followed in float32 arithmetic; on a design with nearly
  collinear columns (a knockoff that is almost its original, or a
  misspecified covariance model that makes many of them) its rank-one
  updated inverse carries the rounding of a condition number near ``1/eps``,
  and the KKT check catches coefficients of the wrong sign (violations of
  2, session 26). Those designs are solved again in float64 (inside
  ``jax.enable_x64``: the global flag is left alone) and the result cast back
  to the design's dtype. ``stats["float64_refit"]`` marks them. The
  certified float64 fit is the answer a tight solve gives; the float32 one
  was not, and a knockoff filter would have used it silently.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock._solution import RESULTS, Solution


def rerun_alone(sol: Solution, which, X, y, lambdas, solve) -> Solution:
    """``sol`` of a batch with the replicates ``which`` solved again one by one by ``solve(X_r, y_r, lambdas_r)``.

    A replicate runs alone exactly as inside a sequential batch (the same program), so the spliced
    results are those of a batch at a capacity that fits it. Measured (issue 17, session 17, n = 2000,
    p = 1000, R = 10): the whole batch had climbed to (W, A) = (2000, 544), its statistics 36.7-42.4 s.
    """
    for r in which:
        sol = _splice(sol, r, solve(X[r], y[r], None if lambdas is None else lambdas[r]))
    return sol


def _splice(sol: Solution, at, new: Solution) -> Solution:
    """``sol`` with the designs ``at`` (an index or an index array of the batch) replaced by ``new``."""
    return jax.tree_util.tree_map(lambda b, o: b.at[at].set(o), sol, new)


def uncertified(sol: Solution) -> np.ndarray:
    """``(R,)`` (or ``()``) bool: a failed result without a capacity overflow.

    A float32 homotopy that loses its certificate also cycles its kinks to the step budget
    (n = 500, m = 2000, whole grid: 50 650 kinks, 56 s, ``max_steps_reached``), so a spent
    budget does not tell a genuine budget failure from a rounding one; the float64 solve
    decides (and reports its own failure). This used to compare the total of
    ``num_steps`` over the path with the per-solve ``max_steps``, which skipped that case.
    """
    st = sol.stats
    code = np.asarray(sol.result)
    return (code != RESULTS.successful) & ~np.asarray(st["overflow"])


def refit_float64(sol: Solution, X, y, lambdas, solve) -> Solution:
    """``sol`` with its :func:`uncertified` float32 designs solved again in float64 by ``solve(X, y, lambdas)``.

    A float64 design, a traced result (under ``jit``, where a failure stays a
    result code) or a result without such designs comes back unchanged, with
    ``stats["float64_refit"]`` all false.
    """
    codes = sol.result
    mark = np.zeros(np.shape(codes), bool)
    if isinstance(codes, jax.core.Tracer) or jnp.finfo(X.dtype).bits >= 64 or not np.any(bad := uncertified(sol)):
        return sol._replace(stats={**sol.stats, "float64_refit": mark})
    which = np.flatnonzero(bad)
    with jax.enable_x64(True):
        up = (X, y, lambdas) if X.ndim == 2 else (X[which], y[which], None if lambdas is None else lambdas[which])
        X64, y64, lam64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), up)
        new = solve(X64, y64, lam64)
        new = jax.tree_util.tree_map(lambda o, b: jnp.asarray(o, b.dtype), new, sol)
    sol = new if X.ndim == 2 else _splice(sol, which, new)
    mark[bad] = True
    return sol._replace(stats={**sol.stats, "float64_refit": mark})
