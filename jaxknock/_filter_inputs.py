r"""The knockoff filter's input checks, on the host and before any program runs.

:func:`jaxknock.knockoff_filter` reads its arguments here, in this order:

1. :func:`check_options`: the solver settings (``lasso_tol``, ``rank``) against the law given;
2. :func:`check_single_device_options`: what the group / multiple-knockoff path does not support;
3. :func:`validate_inputs`: ``X``, ``y`` and the choices (``s_method``, ``statistic``, ``aggregate``,
   ``num_replicates``, ``rank``, ``lam``, ``plus``), with :func:`check_cv_rows` for the
   cross-validated statistic;
4. :func:`standardise_by_law`: ``X`` standardised by a known law (``Sigma``, ``mu``), which it checks.

The units of ``y`` need nothing here: the lasso statistics solve on a power-of-two unit scale and put the
units back into ``W`` themselves (:mod:`jaxknock.l1._units`).

Every error names the argument and says what to pass instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks, _containers, _precision, _sampling_common, _sigma_checks
from jaxknock._s_methods import FACTOR_SOLVERS, S_METHODS, WIDE_DENSE_SOLVERS
from jaxknock.covariance import FactorFit, FactorModel, to_correlation
from jaxknock.l1.folds import cv_folds

STATISTICS = ("lcd", "lsm", "correlation", "centroid")
AGGREGATES = ("ebh", "frequency")
CV_FOLDS = 5  # folds of the cross-validated lasso statistics (lam=None)


def check_options(*, lasso_tol, rank, Sigma, s_method, groups, sdp_tol=1e-4, asdp_block_size=100):
    """``lasso_tol``, ``sdp_tol``, ``asdp_block_size``, ``rank`` and the form of ``Sigma`` on the host, before
    the S solve and the sampling.

    ``rank`` is the rank of a factor model fitted to ``X``: none is fitted when a law is known
    (``Sigma``), nor when ``groups`` make ``s_method="auto"`` solve on a dense covariance. ``sdp_tol`` and
    ``asdp_block_size`` are checked whatever the method, under their own names: the solvers' messages
    said ``tol`` / ``block_size``, and a method without a tolerance (``"equicorrelated"``) took
    ``sdp_tol=-1`` without a word while the same call with ``groups`` refused it.
    """
    _checks.check_real(sdp_tol, "sdp_tol", strict=True)
    if asdp_block_size is not None:  # None: asdp's own default, as before
        _checks.check_count(asdp_block_size, "asdp_block_size")
    if _sampling_common.is_factor_pair(Sigma):  # NumPy's "inhomogeneous shape" error before, naming nothing
        raise TypeError(
            "Sigma looks like a (d, U) pair: pass the factor law as jaxknock.FactorModel(d, U) "
            "(Sigma = diag(d) + U U^T), or the dense (p, p) matrix"
        )
    if lasso_tol is not None and (
        isinstance(lasso_tol, (bool, np.bool_, str, bytes))
        or not (np.ndim(lasso_tol) == 0 and np.isfinite(lasso_tol) and lasso_tol > 0)
    ):
        raise ValueError(f"lasso_tol must be None or a positive, finite number, got {lasso_tol!r}")
    if rank is not None and Sigma is not None:  # whatever s_method: no factor model is fitted to X
        raise ValueError(
            f"rank={rank!r} is the rank of a factor model fitted to X; with a known Sigma= none is fitted (a "
            "known factor law is given as Sigma=FactorModel(d, U)): drop rank"
        )
    if s_method == "auto" and rank is not None and groups is not None:
        raise ValueError(
            f"rank={rank!r} is the rank of a factor model fitted to X (s_method='mvr_factor'); with groups= "
            "the S solve uses a dense p x p covariance: drop rank"
        )


def check_single_device_options(*, Sigma, chunk_size, devices, mesh):
    """The group / multiple-knockoff path estimates the law and runs on one device, unchunked.

    A known ``Sigma`` is refused, and so are ``chunk_size``, ``devices`` and ``mesh``: never ignored silently.
    """
    if Sigma is not None:
        raise ValueError("Sigma= (a known law) is not supported yet with groups= or num_knockoffs > 1")
    given = [name for name, v in (("chunk_size", chunk_size), ("devices", devices), ("mesh", mesh)) if v is not None]
    if given:
        raise ValueError(f"{' / '.join(given)} is not supported yet with groups= or num_knockoffs > 1")


def statistic_folds(y, binary, statistic, lam):
    """The folds of the cross-validated lasso statistic (``"lcd"`` without ``lam``); ``K`` (unused) otherwise.

    Only that statistic builds folds: the stratified ones of a binary ``y`` need ``K`` rows, and a
    fold error from a statistic that has no folds (``"correlation"`` on 4 rows) would blame a setting
    the user never passed.
    """
    return cv_folds(y, binary, K=CV_FOLDS) if statistic == "lcd" and lam is None else CV_FOLDS


def check_cv_rows(y, binary, n):
    """Enough rows for the 5-fold cross-validated lasso statistic (``lam=None``), said in the filter's terms."""
    if n < CV_FOLDS:
        raise ValueError(
            f"X has {n} rows: the cross-validated lasso statistic (lam=None) needs at least {CV_FOLDS}; "
            "pass a fixed lam= or statistic='correlation'"
        )
    if binary:
        counts = np.bincount(np.asarray(y).astype(np.int64), minlength=2)
        if counts.min() < 2:
            raise ValueError(
                f"y has {int(counts.min())} row(s) of one class: the cross-validated l1-logistic statistic "
                "(lam=None) needs at least 2 rows of each class; pass a fixed lam= or statistic='correlation'"
            )


def validate_inputs(
    X, y, fdr, s_method, statistic, aggregate, num_replicates, rank, known=False, *, lam=None, plus=True, grouped=False
):
    """``(X, y, binary, rank)``: the data and the filter's choices checked; ``y``'s labels normalised.

    ``X`` keeps its floating dtype (no upcast); ``y`` comes back in it, as 0/1 when it has two labels
    (``binary``). ``rank`` is the factor rank a factor ``s_method`` uses (its default
    ``min(50, max(1, min(n, p) // 4))`` when ``None``). ``known``: a law is given, so ``p >= n`` does
    not rule out the dense methods. ``grouped``: group knockoffs, whose S solvers are all dense (the advice
    for ``p >= n`` then names no factor method, which that path refuses).
    """
    X = _checks.as_float_array(X, "X", bools=True)
    _checks.check_ndim(X, 2, "X", "a 2-D (n_samples, n_features) array")
    _checks.check_nonempty(X, "X")
    n, p = X.shape
    # no upcast: X keeps its dtype end to end; only the S solve runs in float64 (jaxknock/_precision.py)
    _checks.check_fdr(fdr)
    y_arr = np.asarray(_containers.host_numeric(y, "y")) if _checks.is_concrete(y) else y  # a mask is not dropped
    if getattr(y_arr, "ndim", None) != 1 or y_arr.shape[0] != n:
        raise _checks.response_shape_error(np.shape(y_arr), n)
    if y_arr.dtype.kind in "iufb":
        _checks.check_finite(jnp.asarray(y_arr, X.dtype), "y")
    y_norm, binary = _checks.normalise_response(y_arr)
    if not binary:  # a y with a large mean (1e8 + e) keeps its deviations through the cast and the lasso
        y_norm = _precision.shift_response_mean(y_norm)
    y = jnp.asarray(y_norm, X.dtype)
    _checks.check_finite(X, "X")  # scanned where X is (on an accelerator: a device flag, no copy)
    _checks.check_choice(s_method, S_METHODS, "s_method")
    _checks.check_choice(statistic, STATISTICS, "statistic")
    _checks.check_choice(aggregate, AGGREGATES, "aggregate")
    if not (_checks.is_int(num_replicates) and num_replicates >= 1):
        raise ValueError(f"num_replicates must be a positive integer, got {num_replicates!r}")
    _checks.check_no_constant_columns(X, "X")
    if not isinstance(plus, (bool, np.bool_)):
        raise TypeError(f"plus must be True (knockoff+) or False (knockoff), got {plus!r}")
    if lam is not None and statistic != "lcd":  # the other statistics have no penalty: never ignore it silently
        raise ValueError(
            f"lam={lam!r} is the fixed lasso penalty of statistic='lcd'; statistic={statistic!r} does not use "
            "one: drop lam or use statistic='lcd'"
        )
    if lam is not None:  # before lcd's jnp.asarray, which made lam=True the penalty 1.0 and lam="0.1" 0.1
        _checks.check_lam(lam, "lam")
    if statistic == "lcd" and lam is None:
        check_cv_rows(y_norm, binary, n)
    if p >= n and s_method not in (*FACTOR_SOLVERS, *WIDE_DENSE_SOLVERS) and not known:
        dense = " / ".join(map(repr, WIDE_DENSE_SOLVERS))
        # with groups= the factor methods are refused: advising them sent the caller on to a second error
        factor = "" if grouped else "'mvr_factor' or 'sdp_factor' (factor model from the data) with rank < n, or "
        raise ValueError(
            f"p = {p} >= n = {n}: s_method={s_method!r} on a dense covariance estimated from fewer rows than "
            "features does not keep the FDR at its target (its larger s leans on the estimate); use "
            f"s_method={factor}{dense} on the Ledoit-Wolf estimate"
        )
    if s_method in FACTOR_SOLVERS:
        if min(n, p) < 2:
            raise ValueError(
                f"s_method={s_method!r} needs a factor rank below min(n, p) = {min(n, p)}: none exists; "
                "use s_method='sdp'"
            )
        k = rank if rank is not None else min(50, max(1, min(n, p) // 4))
        if not (_checks.is_int(k) and 1 <= k < min(n, p)):  # a bool is not a rank; a JAX integer is
            raise ValueError(f"rank must be an integer in [1, min(n, p) = {min(n, p)}), got {rank!r}")
        rank = int(k)
    elif rank is not None:
        raise ValueError(
            f"rank={rank!r} applies to s_method='mvr_factor' or 'sdp_factor' only (the factor-model rank); "
            f"s_method={s_method!r} uses the full covariance: drop rank or use a factor method"
        )
    return X, y, binary, rank


def standardise_by_law(X, Sigma, mu):
    """``(Xs, known)``: ``X`` standardised by a known law ``Sigma`` (and ``mu``), and that law on the new scale.

    The estimated law's preparation is ``jaxknock.pipeline._standardise_and_split``.
    """
    p = X.shape[1]
    if isinstance(Sigma, FactorFit):
        Sigma = Sigma.model
    if isinstance(Sigma, FactorModel):
        if Sigma.U.ndim != 2 or Sigma.U.shape[0] != p or np.shape(Sigma.d) != (p,):
            raise ValueError(
                f"Sigma (a FactorModel) must describe p = {p} features (d of shape ({p},), U of shape ({p}, k)), "
                f"got d of shape {tuple(np.shape(Sigma.d))} and U of shape {tuple(np.shape(Sigma.U))}"
            )
        _checks.check_finite(Sigma.d, "Sigma.d")
        _checks.check_finite(Sigma.U, "Sigma.U")
        if not np.all(np.asarray(Sigma.d) > 0):  # before the rescaling by the diagonal, which would hide it
            raise ValueError(
                "Sigma.d must be strictly positive (a FactorModel diag(d) + U U^T is positive definite only then), "
                f"got min(d) = {float(np.min(np.asarray(Sigma.d))):.3g}"
            )
        known, diag = _factor_correlation(jnp.asarray(Sigma.d, X.dtype), jnp.asarray(Sigma.U, X.dtype))
    else:
        # named: jnp.asarray(Sigma) of text or of a ragged nested list failed naming nothing
        Sigma = _checks.as_float_array(Sigma, "Sigma").astype(X.dtype)
        Sigma = _sigma_checks.validate_sigma(Sigma, batch_ok=False, need_x64=False)
        if Sigma.shape != (p, p):
            raise ValueError(f"Sigma must have shape ({p}, {p}) to match X's {p} columns, got {tuple(Sigma.shape)}")
        diag = jnp.diagonal(Sigma)
        known = to_correlation(Sigma)
    if mu is not None:
        mu = _checks.as_float_array(mu, "mu").astype(X.dtype)
        if mu.shape != (p,):
            raise ValueError(f"mu must have shape ({p},) to match X's {p} columns, got {tuple(mu.shape)}")
        _checks.check_finite(mu, "mu")
    return _standardise_by(X, mu, diag), known


@jax.jit  # one program each (op by op, a known law's preparation was about twenty in a first call)
def _factor_correlation(d, U):
    """The correlation ``FactorModel`` of ``diag(d) + U U^T``, and that law's diagonal."""
    diag = FactorModel(d, U).diagonal()
    return FactorModel(d / diag, U / jnp.sqrt(diag)[:, None]), diag


@jax.jit
def _standardise_by(X, mu, diag):
    """``(X - mu) / sqrt(diag)``, ``mu`` the column means of ``X`` where it is ``None``."""
    return (X - (jnp.mean(X, axis=0) if mu is None else mu)) / jnp.sqrt(diag)
