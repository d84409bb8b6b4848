r"""Knockoff S-vector solvers.

Gaussian model-X knockoffs need ``s`` with ``diag(s) <= 2 Sigma``; the best
(least correlated) knockoffs solve the SDP (Askari thesis eq. 4.2)

.. math::  \max_s\ 1^T s \quad \text{s.t.}\quad \mathrm{diag}(s) \preceq 2\Sigma,\ 0 \le s \le 1

for a correlation matrix ``Sigma``. Its dual is

.. math::  \min_{\Lambda \succeq 0,\ \eta \ge 0}\ 2\,\mathrm{tr}(\Lambda\Sigma) + 1^T\eta
           \quad\text{s.t.}\quad \mathrm{diag}(\Lambda) + \eta \ge 1 .

Modules (one concept each):

* :mod:`~jaxknock.svector.closed_form` - :func:`equicorrelated`, closed form
  ``s_j = min(1, 2 lambda_min(Sigma))``.
* :mod:`~jaxknock.svector.certificate` - certified duality gaps
  (:func:`sdp_dual_gap`).
* :mod:`~jaxknock.svector.dense` - :func:`sdp` on a dense ``Sigma``, by
  * :mod:`~jaxknock.svector.newton` - primal-dual barrier Newton path
    following (default; :func:`newton_init` / :func:`newton_step`), or
  * :mod:`~jaxknock.svector.coordinate` - barrier coordinate ascent (FANOK,
    thesis Algorithm 4), ``O(p^3)`` per sweep, blocked so the work is matrix
    products (:func:`sdp_init` / :func:`sdp_step`).
* :mod:`~jaxknock.svector.factor` - :func:`sdp_factor` for
  ``Sigma = D + U U^T`` with ``O(p k)`` memory, by
  * :mod:`~jaxknock.svector.factor_newton` - barrier Newton path following
    whose Newton systems (Hessian ``lam A^{-1} o A^{-1}``, diagonal plus low
    rank by Woodbury) are solved by preconditioned CG with ``O(p k^2)``
    matrix products; its sequential depth does not grow with ``p``
    (``method="newton"``, default: also the faster one on CPU), or
  * the coordinate ascent of thesis Algorithm 5, ``O(p k^2)`` per sweep
    (``method="coordinate"``; :func:`sdp_factor_init` / :func:`sdp_factor_step`);
  * :mod:`~jaxknock.svector.factor_centre` - Newton centring at fixed ``lam``
    (CG with the same ``O(p k^2)`` products): the coordinate ascent's
    iterate every 4th sweep and when it stalls.
* :mod:`~jaxknock.svector.mrc` - :func:`mvr` and :func:`maxent`
  (minimum-reconstructability objectives of Spector & Janson 2022, any
  number ``m`` of knockoffs): damped Newton with the exact Hessian
  (:mod:`~jaxknock.svector.mrc_newton`, default) or blocked coordinate
  descent (``method="coordinate"``), both with a certified Lagrange-dual gap
  (:func:`mrc_objective_and_gap`);
  :mod:`~jaxknock.svector.mrc_factor` - :func:`mvr_factor` /
  :func:`maxent_factor` for ``Sigma = D + U U^T`` in ``O(p k^2)`` per step:
  damped Newton-CG (:mod:`~jaxknock.svector.mrc_factor_newton`, default;
  sequential depth independent of ``p``) or blocked coordinate descent
  (``method="coordinate"``), same certificate.
* :mod:`~jaxknock.svector.group` - ``group_s_matrix`` (block-diagonal ``S``:
  equicorrelated, SDP, maximum entropy; MVR in
  :mod:`~jaxknock.svector.group_mvr`).
* :mod:`~jaxknock.svector.approximate` - :func:`asdp`, block-diagonal
  approximation + :func:`scale_to_feasible`.

Every iterative method is an ``init`` / ``step`` / ``terminate`` triple driven
by :func:`jaxknock._iterate.iterative_solve`, the one place that sets
``max_steps_reached`` / ``nonfinite``.

Every solver returns a :class:`~jaxknock.Solution` whose ``value`` is ``s``
and whose ``stats`` hold ``objective`` (``1^T s`` on the correlation scale;
for :func:`mvr` / :func:`maxent` and their factor versions the criterion
``f(s)`` they minimise, see :func:`mrc_objective_and_gap`),
``min_eig`` (for the dense SDP and ASDP a certified lower bound on
``lambda_min(2C - diag s)`` from Cholesky factorisations, within 1% of it once
inverse iteration has converged, exact with ``exact_min_eig=True``; exact for
:func:`equicorrelated`; NaN for :func:`sdp_factor`, :func:`mvr_factor` and
:func:`maxent_factor`, whose ``stats["feasible"]`` holds the exact inertia test) and, for
the barrier solvers, a **certified duality gap** ``stats["gap"]``: from the
barrier iterate ``A = 2 Sigma - diag(s)`` we build the dual-feasible point
``Lambda = lam A^{-1}``, ``eta = max(0, 1 - diag(Lambda))`` whose objective
upper-bounds the SDP optimum, so ``gap = dual - 1^T s >= OPT - 1^T s``.

Non-correlation input: ``Sigma`` is converted with
:func:`~jaxknock.to_correlation`, the problem is solved there and ``s`` is
mapped back by ``s_cov = s_corr * diag(Sigma)`` (the convention of knockpy
and the R ``knockoff`` package). ``objective`` and ``gap`` are reported on the
correlation scale.

Precision: the barrier solvers need float64 (enable ``jax_enable_x64``); a
float32 ``Sigma`` is rejected. :func:`equicorrelated` works in any floating dtype.

Compilation and transfers: numeric settings (``tol``, ``max_steps``, ``lam0``,
``decay``) are traced, so a new value never recompiles; structural ones
(``method``, ``block_size``, ``exact_min_eig``, shapes) are static. ``Sigma`` is
validated once per public call by one device-side reduction that returns a few
scalars; internal calls (the blocks of :func:`asdp`) are not validated again.
"""

from jaxknock.svector.approximate import asdp, scale_to_feasible
from jaxknock.svector.certificate import sdp_dual_gap
from jaxknock.svector.closed_form import equicorrelated
from jaxknock.svector.coordinate import SDPState, sdp_init, sdp_step
from jaxknock.svector.dense import sdp
from jaxknock.svector.factor import FactorSDPState, sdp_factor, sdp_factor_init, sdp_factor_step
from jaxknock.svector.mrc import MRCState, maxent, mrc_objective_and_gap, mvr
from jaxknock.svector.mrc_factor import FactorMRCState, maxent_factor, mvr_factor
from jaxknock.svector.newton import NewtonState, newton_init, newton_step

__all__ = [
    "equicorrelated",
    "sdp",
    "sdp_factor",
    "asdp",
    "scale_to_feasible",
    "sdp_dual_gap",
    "SDPState",
    "sdp_init",
    "sdp_step",
    "NewtonState",
    "newton_init",
    "newton_step",
    "FactorSDPState",
    "sdp_factor_init",
    "sdp_factor_step",
    "mvr",
    "maxent",
    "mrc_objective_and_gap",
    "MRCState",
    "mvr_factor",
    "maxent_factor",
    "FactorMRCState",
]
