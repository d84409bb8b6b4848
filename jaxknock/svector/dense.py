r"""The dense knockoff SDP, :func:`~jaxknock.sdp`: validation, method dispatch and the result code.

The two methods live in :mod:`~jaxknock.svector.newton` (default) and
:mod:`~jaxknock.svector.coordinate`; both stop on the certified duality gap
of :mod:`~jaxknock.svector.certificate`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxknock import _aot, _checks, _sigma_checks
from jaxknock._deprecation import renamed_kwargs
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.svector import _common, certificate, coordinate, newton

__all__ = ["sdp"]

_SDP_METHODS = ("newton", "coordinate")


@renamed_kwargs(max_sweeps="max_steps")
def sdp(
    Sigma,
    *,
    tol: float = 1e-5,
    max_steps: int = 500,
    lam0: float | None = None,
    decay: float = 0.8,
    block_size: int | None = None,
    method: str = "newton",
    exact_min_eig: bool = False,
    num_knockoffs: int = 1,
    throw: bool = False,
) -> Solution:
    r"""Gaussian knockoff SDP: barrier path following, Newton (default) or FANOK Algorithm 4.

    Both methods follow the central path of the barrier problem (thesis eq. 4.3)

    .. math:: \max_{0 \le s \le 1}\ 1^T s + \lambda \log\det(2C - \mathrm{diag}(s))

    on the correlation matrix ``C`` while decreasing ``lam``, and both stop on
    the **certified** duality gap (:mod:`jaxknock.svector`): the solver stops when
    ``gap <= tol * 1^T s`` (relative), else after ``max_steps`` steps with
    ``RESULTS.max_steps_reached``, or with ``RESULTS.stagnated`` once the
    certificate stops improving (its rounding floor is ~1e-6 relative on
    near-singular optima; ask for ``tol >= 1e-6``). Before the Newton path
    reports ``stagnated`` it tries the subspace certificate
    (:func:`~jaxknock.svector.certificate.subspace_dual`, built on the
    near-null eigenvectors of ``2C - diag s``), which certifies degenerate
    optima (AR(1) with ``rho >= 0.98``) that the barrier dual cannot.

    ``method="newton"`` (default): primal-dual Newton steps on the barrier
    problem with the box ``0 <= s <= 1`` handled by log barriers and
    multipliers (:mod:`~jaxknock.svector.newton`; one step is
    :func:`~jaxknock.svector.newton_step`): each step solves
    ``(lam A^{-1} o A^{-1} + diag(z_0/s + z_1/(1-s))) ds = grad`` with
    ``A = 2C - diag(s)`` by Cholesky, takes 99% of the step to the box boundary
    (shortened until ``A`` is positive definite), and divides ``lam`` by 10
    once the Newton decrement is below 0.3. Each step costs ``~3 p^3`` flops
    (Cholesky, triangular inverse, product) and the step count barely depends
    on the conditioning; the certificate is built at every iterate.

    ``method="coordinate"``: cyclic exact coordinate ascent (FANOK Algorithm 4,
    :mod:`~jaxknock.svector.coordinate`; one sweep is
    :func:`~jaxknock.svector.sdp_step`), ``lam <- decay * lam`` after each
    centred sweep. The coordinate update is closed
    form (eq. 4.4 / Lemma 4): with ``sigma_j = 1 / (A^{-1})_jj`` the Schur
    complement, ``s_j <- clip(s_j + sigma_j - lam, 0, 1)``. The lower Cholesky
    factor ``L`` of ``A`` is kept current by rank-one-per-coordinate updates
    applied ``b`` coordinates at a time (``b = block_size``): for a block ``J``
    one triangular solve gives ``X = L^{-1} E_J`` and ``G = X^T X = (A^{-1})_{JJ}``;
    the ``b`` coordinate updates run sequentially on ``G`` (Sherman-Morrison on
    ``b x b``); then the ``b`` rank-one changes are folded into ``L`` by a
    blocked Gill-Golub-Murray-Saunders update (matrix products only).
    ``O(p^3)`` flops per sweep. Certification starts once
    ``lam * p <= tol * 1^T s / 4`` from a Newton-re-centred copy of the
    iterate, which then replaces it; the iterate is also Newton-re-centred
    (and ``L`` refactorised) each time ``lam`` has dropped tenfold, since pure
    coordinate ascent falls behind the central path as ``lam`` shrinks and
    jams 1e-4 to 5e-3 short of OPT (it used to end ``stagnated`` on about a
    third of small AR(1), block and Ledoit-Wolf problems); ``lam`` is only
    decreased after sweeps that found the iterate near the central path. It
    needs several times more sweeps than Newton needs steps (measured counts:
    ``benchmarks/measured/NOTES.md``), and a solve the certificate cannot
    close is reported ``RESULTS.stagnated``, which is why Newton is the default;
    the coordinate form is the one that scales to factor models
    (:func:`~jaxknock.sdp_factor`).

    Both loops are driven by :func:`jaxknock._iterate.iterative_solve`.

    Precision: float64 is required (the barrier iterates approach the PD
    boundary of ``2C - diag(s)``, where float32 Cholesky factorisations fail);
    a float32 ``Sigma`` is rejected with a ``TypeError``.

    Compilation: ``tol``, ``max_steps``, ``lam0`` and ``decay`` are traced, so
    new values reuse the compiled solver; ``method``, ``block_size``,
    ``exact_min_eig`` and the shape of ``Sigma`` are static. ``Sigma`` is
    validated once per call by one device-side reduction (a handful of scalars
    come back to the host, not the matrix).

    Args:
        Sigma: ``(p, p)`` positive definite covariance or correlation matrix,
            float64, or a batch ``(B, p, p)`` (one after another on CPU, ``vmap`` on an accelerator).
        tol: relative duality-gap tolerance.
        max_steps: maximum number of sweeps / Newton steps (``max_sweeps`` is a
            deprecated alias).
        lam0: initial barrier parameter (Newton starts at ``lam0 / p``; default
            :func:`~jaxknock.svector.newton.default_lam0`, ``max(0.5, p / 20)``; coordinate: 0.5).
        decay: barrier decrease per sweep (coordinate method), in (0, 1).
        block_size: coordinates per block (coordinate method; default 64, or
            ``~p/4`` for small p).
        method: ``"newton"`` (default) or ``"coordinate"`` (Algorithm 4).
        exact_min_eig: report the exact ``lambda_min(2C - diag s)`` in
            ``stats["min_eig"]`` (one tridiagonal reduction, ``~4/3 p^3``
            flops) instead of the certified lower bound.
        num_knockoffs: ``m >= 1`` simultaneous knockoffs (Gimenez & Zou 2019):
            the constraint becomes ``diag(s) <= c C`` with ``c = (m+1)/m``
            (see "Multiple knockoffs" below); ``m = 1`` is the problem above.
        throw: raise ``RuntimeError`` if not converged.

    Multiple knockoffs: ``max 1^T s`` s.t. ``diag(s) <= c C``, ``0 <= s <= 1``
    is solved exactly by running the machinery above on the scaled matrix
    ``C' = (c/2) C`` (so ``2C' - diag(s) = c C - diag(s)``) with the box cap
    kept at ``min(1, 2 diag C') = 1``: the same barrier problem, Newton system
    and certificate (the dual ``min c tr(Lambda C) + 1^T eta`` evaluated at
    ``Lambda = lam A^{-1}`` is again ``lam (p + sum_j s_j (A^{-1})_jj)`` with
    ``A = c C - diag(s)``). ``stats["min_eig"]`` then bounds
    ``lambda_min(c C - diag s)``. ``m`` is traced (a new value does not recompile).

    Ill-conditioned input: every positive definite ``Sigma`` (condition
    numbers up to ~1e12 and beyond, every ``p >= 1``) gives a feasible ``s``
    (``2C - diag(s)`` positive definite to rounding) with a valid certified
    gap; where the optimum sits within ~1e-13 of singularity the certificate
    cannot reach ``tol`` and the run ends ``stagnated`` or
    ``max_steps_reached``, never ``infeasible``.

    Under jit (value checks skipped): a ``Sigma`` with NaN/Inf gives
    ``nonfinite``; a non-symmetric ``Sigma`` or one with a non-positive
    diagonal gives ``infeasible``; a symmetric one whose correlation matrix has
    no Cholesky factor (indefinite or singular: no valid ``s`` exists) gives
    ``infeasible`` without iterating. In every case ``s`` is all NaN (as
    :func:`~jaxknock.svector.group.group_s_matrix`), never a plausible vector.
    Eagerly they raise ``ValueError``.

    Returns:
        :class:`~jaxknock.Solution`: ``value`` is ``s`` (covariance scale),
        ``stats`` has ``num_steps`` (sweeps or Newton steps; also
        ``sweeps`` and ``newton_steps``), ``max_steps``, ``objective``
        (``1^T s`` correlation scale), ``dual``, ``gap`` (certified),
        ``lam`` (final barrier parameter), ``min_eig``: a certified lower
        bound on ``lambda_min(2C - diag s)`` (correlation scale; within 1% of it
        when inverse iteration has converged, never above it up to Cholesky
        rounding; see :func:`~jaxknock.svector.certificate.min_eig_bound`), or
        the exact value with ``exact_min_eig=True``. The result is
        ``RESULTS.infeasible`` exactly when the Cholesky factorisation of
        ``2C - diag s`` fails (or, under jit, that of ``C``: see above). ``state`` is the
        final :class:`~jaxknock.svector.SDPState` (coordinate) or
        :class:`~jaxknock.svector.NewtonState` (Newton).

    Example:
        >>> jax.config.update("jax_enable_x64", True)
        >>> C = 0.5 * jnp.eye(4) + 0.5
        >>> s = sdp(C).value   # = min(1, 2(1 - 0.5)) = 1
        >>> bool(jnp.allclose(s, 1.0, atol=1e-4))
        True
    """
    tol, max_steps, decay, lam0 = _common.check_settings(tol, max_steps, decay, lam0)
    m = _checks.check_num_knockoffs(num_knockoffs)
    Sigma = _sigma_checks.validate_sigma(Sigma)
    p = Sigma.shape[-1]
    b = coordinate.default_block(p) if block_size is None else block_size  # 0 is an error, not the default
    if not (_checks.is_int(b) and 1 <= b):
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    b = int(min(b, p))
    if lam0 is None:
        lam0 = newton.default_lam0(p) if method == "newton" else 0.5
    if method not in _SDP_METHODS:
        raise ValueError(f"method must be one of {_SDP_METHODS}, got {method!r}")
    min_eig = "exact" if exact_min_eig else "bound"
    sol = _aot.call(_sdp_jit, Sigma, tol, max_steps, lam0, decay, (m + 1.0) / m, b=b, method=method, min_eig=min_eig)
    return raise_if_failed(_common.gate_traced_tol(sol, tol), throw)


@functools.partial(jax.jit, static_argnames=("b", "method", "min_eig"))
def _sdp_jit(Sigma, tol, max_steps, lam0, decay, c, *, b, method, min_eig):
    """:func:`solve_dense` under one ``jit``; numeric settings are traced (a stack: :func:`_common.solve_stack`)."""

    def one(S, tol, max_steps, lam0, decay, c):
        return solve_dense(S, tol, max_steps, lam0, decay, c, b=b, method=method, min_eig=min_eig)

    return _common.solve_stack(one, Sigma, tol, max_steps, lam0, decay, c)


def solve_dense(Sigma, tol, max_steps, lam0, decay, c=2.0, *, b, method="newton", min_eig="bound") -> Solution:
    """The unvalidated core of :func:`sdp` for one ``(p, p)`` matrix (traceable; shared with :func:`~jaxknock.asdp`).

    ``c = (m+1)/m`` is the constraint's factor (``diag(s) <= c C``; 2 for one
    knockoff), solved as the ``c = 2`` problem on ``(c/2) C`` with the cap kept at 1.
    ``tol``, ``max_steps``, ``lam0``, ``decay`` and ``c`` may be traced; ``b``,
    ``method`` and ``min_eig`` (``"bound"``: :func:`certificate.min_eig_bound`,
    ``"exact"``: :func:`certificate.smallest_eigenvalue`, ``"none"``: NaN) are
    structural. ``infeasible`` is reported exactly when the Cholesky
    factorisation of ``2C - diag(s)`` fails, or (``s`` then all NaN) that of
    ``C`` does (:func:`_common.reject_invalid_sigma`).
    """
    p = Sigma.shape[-1]
    # m knockoffs: the c = 2 machinery on (c/2) C is the problem diag(s) <= c C exactly;
    # the cap min(1, 2 diag C') = min(1, c) = 1 stays the box s <= 1
    # under jit an indefinite (or NaN) Sigma is infeasible with a NaN s, without iterating on it
    C, valid, max_steps_run = _common.gated_correlation(Sigma, max_steps)
    Cfull = (0.5 * c) * C
    cap = jnp.minimum(1.0, 2.0 * jnp.diagonal(Cfull))
    sweeps = newton_steps = jnp.int32(0)
    if method == "coordinate":
        it = coordinate.solve_sweeps(Cfull, lam0, b, tol, decay, max_steps_run)
        state = it.state
        s_corr, lam_end, dual, sweeps = state.s[:p], state.lam, state.dual, it.num_steps
    else:
        start = jnp.zeros(p, Cfull.dtype)
        it = newton.solve_path(Cfull, start, jnp.asarray(lam0 / p, Cfull.dtype), cap, tol, max_steps_run)
        state = it.state
        s_corr, lam_end, dual, newton_steps = state.s, state.lam, state.dual, it.num_steps
    gap = dual - jnp.sum(s_corr)
    A = 2.0 * Cfull - jnp.diag(s_corr)
    if min_eig == "none":
        feasible, min_eig_value = _common.is_pd(2.0 * Cfull, s_corr), jnp.full((), jnp.nan, A.dtype)
    else:
        feasible, min_eig_value = certificate.min_eig_bound(A)
        if min_eig == "exact":
            min_eig_value = certificate.smallest_eigenvalue(A)
    finite = jnp.all(jnp.isfinite(s_corr))
    # the final iterate may differ from the loop's (Newton snaps bound-active
    # coordinates onto the cap, which only raises 1^T s), so certification is re-checked
    converged = gap / jnp.maximum(jnp.sum(s_corr), 1e-12) <= tol
    result = jnp.where(
        ~finite,
        RESULTS.nonfinite,
        # infeasible exactly when the Cholesky factorisation of 2C - diag(s) fails
        jnp.where(~feasible, RESULTS.infeasible, jnp.where(converged, RESULTS.successful, it.result)),
    ).astype(jnp.int32)
    s, result = _common.reject_invalid_sigma(valid, Sigma, s_corr * jnp.diagonal(Sigma), result)
    stats = {
        "num_steps": sweeps + newton_steps,
        "sweeps": sweeps,
        "newton_steps": newton_steps,
        "max_steps": max_steps,
        "objective": jnp.sum(s_corr),
        "dual": dual,
        "gap": gap,
        "lam": lam_end,
        "min_eig": min_eig_value,
    }
    return Solution(s, result, stats, state)
