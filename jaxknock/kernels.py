r"""Kernel dependence measures and kernel feature selection (Athanasakis thesis, chapters 3-4).

With ``K`` the kernel matrix of the inputs, ``L`` that of the targets and
:math:`H = I - \tfrac1n \mathbf 1\mathbf 1^\top` the centring matrix:

* centred kernel target alignment (Cortes, Mohri & Rostamizadeh 2012)
  :math:`a(K, L) = \langle HKH, HLH\rangle_F / (\|HKH\|_F \|HLH\|_F)`
  (:func:`kernel_target_alignment`);
* the biased empirical HSIC (Gretton et al. 2005)
  :math:`\mathrm{HSIC}_b = \operatorname{tr}(KHLH) / (n-1)^2` and the unbiased
  estimator of Song et al. (2012) (:func:`hsic`); the alignment is
  :math:`\mathrm{HSIC}_b` normalised by :math:`\|HKH\|_F\|HLH\|_F/(n-1)^2`;
* greedy KTA model selection over a ranked feature list (thesis Algorithm 3,
  :func:`greedy_kta_selection`);
* randSel (thesis Algorithm 6, :func:`randsel`): the contribution of each
  feature is estimated from random halves of the features on random
  subsamples of the rows, and the least contributing features are culled
  round by round.

Kernels: ``"gaussian"`` :math:`k(x, x') = \exp(-\|x - x'\|^2 / (2\sigma^2))`
with the *median heuristic* :math:`\sigma = \operatorname{median}_{i<j}\|x_i - x_j\|`
by default (``1`` if that median is 0), and ``"linear"`` :math:`k(x, x') = x^\top x'`.
Everything here is exact (no random features or Nyström); the work is kernel
matrices of the rows (``O(n^2)`` memory), batched with ``vmap``.

Every measure reads the kernels centred, so none depends on a shift of a column of ``X`` or ``y``:
with x64 off a float64 (or integer) NumPy ``X`` / ``y`` loses its column means in float64 before
JAX rounds it to float32, which then rounds the deviations, not the raw entries.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks, _containers, _memory
from jaxknock._host_cast import centre_columns
from jaxknock._scaling import pow2_exponent, scale_pow2

__all__ = [
    "RandSelResult",
    "greedy_kta_selection",
    "hsic",
    "kernel_target_alignment",
    "randsel",
    "squared_distances",
]

HI = lax.Precision.HIGHEST
KERNELS = ("gaussian", "linear")
ESTIMATORS = ("hsic", "unbiased", "kta")


# --------------------------------------------------------------------------
# Kernel matrices
# --------------------------------------------------------------------------


def squared_distances(X, weights=None):
    r"""Pairwise squared (weighted) Euclidean distances between the rows of ``X``.

    .. math::

        D_{ab} = \sum_j w_j\,(x_{aj} - x_{bj})^2,

    ``w = 1`` when ``weights`` is ``None``. Computed by one matrix product,
    :math:`D_{ab} = |\tilde x_a|_w^2 + |\tilde x_b|_w^2 - 2\,\tilde x_a^\top W \tilde x_b`
    (``O(n^2 p)``), on the *column-centred* rows :math:`\tilde x = x - \bar x`:
    the expansion cancels catastrophically when the rows lie far from the origin
    (a shift of ``1e8`` in float64 or ``1e4`` in float32 moved a Gaussian-kernel
    alignment from 0.41 to 0.17 / 0.08), while distances do not depend on the
    origin; an error in the computed mean shifts every row alike, so the result
    stays translation invariant. Rounding can make the expansion slightly
    negative: entries are clipped at 0. Works under ``jit`` and ``vmap``.

    Args:
        X: ``(n, p)`` rows.
        weights: ``(p,)`` non-negative, finite feature weights (a 0/1 mask selects a
            feature subset), or ``None``; a negative one raises ``ValueError``
            (under ``jit``: every entry NaN).

    Returns:
        ``(n, n)`` array, ``X``'s dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> X = jnp.array([[0.0, 0.0], [3.0, 4.0]]) + 1000.0
        >>> squared_distances(X).tolist(), squared_distances(X, jnp.array([1.0, 0.0])).tolist()
        ([[0.0, 25.0], [25.0, 0.0]], [[0.0, 9.0], [9.0, 0.0]])
    """
    X = _checks.as_float_array(X, "X", bools=True)
    _checks.check_ndim(X, 2, "X", "a 2-D array of shape (n_samples, n_features)")
    if weights is not None:
        w = weights if hasattr(weights, "dtype") else np.asarray(weights)
        weights = _checks.as_float_array(w.astype(X.dtype) if w.dtype == bool else w, "weights").astype(X.dtype)
        if weights.shape != X.shape[1:]:
            raise ValueError(f"weights must have shape ({X.shape[1]},), one per feature, got {tuple(weights.shape)}")
        _checks.check_vector_nonnegative_finite(weights, "weights")
    X = X - jnp.mean(X, axis=0)
    Xw = X if weights is None else X * weights
    sq = jnp.sum(Xw * X, axis=1)
    D = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * jnp.matmul(Xw, X.T, precision=HI), 0.0)
    # a point is at distance 0 from itself: the expansion left ~1e-15 there, so a narrow Gaussian kernel
    # (bandwidth 1e-10) had K_ii = exp(-1e-15 / 2e-20) = 0 instead of 1 (alignment 0.1866 for 0.1857)
    D = jnp.where(jnp.eye(D.shape[0], dtype=bool), jnp.zeros((), D.dtype), D)
    # a negative weight gave a plausible "distance" (clipped at 0 where negative): NaN under jit, as eager raises
    return D if weights is None else _checks.poison(jnp.all(weights >= 0), D)


def _centre(X):
    """``X`` less its column means, after an exact shift by its first row.

    In float32 under ``jit`` the mean of a column far from the origin (``y + 1e4``: its sum rounds to a
    spacing of ~0.1) depends on the order of the reduction, and XLA fuses (and recomputes) it into each
    consumer of the centred column separately: for a one-column target ``y`` the two sides of ``y y^T``
    got different shifts, and the default centred alignment read 0.0728 for 0.0760 at n = 150 (greedy
    alignments 3% off; a second pass of the mean did not cure it, as it too was recomputed).
    ``x_i - x_0`` is an elementwise difference, the same wherever it is recomputed (exact where the
    offset dominates the spread), and the mean of those differences is of the order of the spread.
    """
    X = X - X[:1]
    return X - jnp.mean(X, axis=0)


def _pow2_unit(X):
    """``(2^-e X, e)`` with ``2^-e max |X|`` in ``[1/2, 1)``: exact, so the squares of data in units of
    ``1e200`` or ``1e-200`` neither overflow nor underflow; a zero ``X`` stays as it is (``e = 0``)."""
    e = pow2_exponent(jnp.max(jnp.abs(X)))
    return scale_pow2(X, -e), e


def _gaussian(D, s):
    """``exp(-D / (2 s^2)) - 1``: the Gaussian kernel less the constant 1, which no measure here sees (they
    read ``K`` through ``H K H``, and the unbiased HSIC is invariant to constants too). ``expm1`` keeps
    the kernel of a wide bandwidth, ``1 - 1e-20``, which ``exp`` rounded to a constant: alignment 0. A
    width whose square underflows (``1e-170``) divides the distance, not its square (``D / 0``: 0/0 = NaN)."""
    s2 = s * s
    arg = jnp.where(s2 >= jnp.finfo(D.dtype).tiny, D / (2.0 * s2), jnp.square(jnp.sqrt(D) / s) / 2.0)
    return jnp.expm1(-arg)


def _gram(X, kernel, bandwidth, scale_free=False):
    """The kernel matrix of the rows of ``X`` (up to a constant, see :func:`_gaussian`).

    The Gaussian kernel does not depend on the unit of ``X`` (the width is the median or given in the same
    unit): its distances are taken on ``X`` scaled by a power of two (data in units of ``1e200``: NaN;
    ``1e-200``: an alignment of 0). ``scale_free``: the measure is invariant to ``K -> c K`` (the alignment),
    so the linear kernel may be scaled too.
    """
    X = _centre(X)
    if kernel == "linear":
        # on centred columns: every measure here sees K only through H K H (the unbiased HSIC is
        # invariant to K + f(x) + f(x') too), and x'x' of rows far from the origin cancelled in the
        # centring (y + 1e4 in float32 or y + 1e8 in float64 gave an alignment of ~0 for 0.32)
        if scale_free:
            X = _pow2_unit(X)[0]
        return jnp.matmul(X, X.T, precision=HI)
    X, e = _pow2_unit(X)
    D = squared_distances(X)
    return _gaussian(D, _width(D, bandwidth, e))


def _width(D, bandwidth, e):
    """The width for distances ``D`` of data scaled by ``2^-e``: the median heuristic (``1`` in the
    data's own unit when the median is 0), or ``bandwidth``, in the scaled unit."""
    if bandwidth is None:
        n = D.shape[0]
        med = jnp.median(jnp.sqrt(D[np.triu_indices(n, 1)])) if n > 1 else jnp.zeros((), D.dtype)
        return jnp.where(med > 0, med, scale_pow2(jnp.ones((), D.dtype), -e))
    return scale_pow2(jnp.asarray(bandwidth, D.dtype), -e)


def _center(K):
    return K - K.mean(0, keepdims=True) - K.mean(1, keepdims=True) + K.mean()


def _hsic_biased(K, L):
    n = K.shape[0]
    return jnp.sum(_center(K) * L) / (n - 1) ** 2


def _hsic_unbiased(K, L):
    n = K.shape[0]
    Kt = K * (1.0 - jnp.eye(n, dtype=K.dtype))
    Lt = L * (1.0 - jnp.eye(n, dtype=L.dtype))
    k1, l1 = Kt.sum(1), Lt.sum(1)
    val = jnp.sum(Kt * Lt) + k1.sum() * l1.sum() / ((n - 1) * (n - 2)) - 2.0 * jnp.dot(k1, l1) / (n - 2)
    return val / (n * (n - 3))


def _unit_scale(A):
    """``A`` times the power of two that brings its largest entry into [1/2, 1): exact, and the sums of
    squares of a tiny or huge kernel (linear kernel of data of scale 1e-6 in float32) neither underflow
    nor overflow; a zero ``A`` stays zero."""
    _, e = jnp.frexp(jnp.max(jnp.abs(A)))
    return scale_pow2(A, -e)


def _cosine(Kc, Lc):
    """``<Kc, Lc> / (|Kc| |Lc|)`` of centred kernels; 0 where either is zero (no dependence measurable)."""
    Kc, Lc = _unit_scale(Kc), _unit_scale(Lc)
    den = jnp.sqrt(jnp.sum(Kc * Kc)) * jnp.sqrt(jnp.sum(Lc * Lc))
    return jnp.sum(Kc * Lc) / jnp.maximum(den, jnp.finfo(Kc.dtype).tiny)


def _alignment(K, L):
    return _cosine(_center(K), _center(L))


def _criterion(K, L, estimator):
    if estimator == "hsic":
        return _hsic_biased(K, L)
    if estimator == "unbiased":
        return _hsic_unbiased(K, L)
    return _alignment(K, L)


def _prepare(X, y, kernel, target_kernel, name="X"):
    _checks.check_choice(kernel, KERNELS, "kernel")
    _checks.check_choice(target_kernel, KERNELS, "target_kernel")
    # every measure here reads the kernels centred (the Gaussian one through distances): with x64 off a
    # float64 host X or y loses its means in float64 before JAX rounds it to float32 (y + 1e7: greedy
    # alignments 17% off, its float32 spacing 1 against a spread of 1.3)
    X = _checks.as_float_array(centre_columns(X), name, bools=True)
    _checks.check_ndim(X, 2, name, "a 2-D array of shape (n_samples, n_features)")
    y = _containers.host_numeric(y, "y")  # a pandas Float64 y: np.dtype(y.dtype) was a TypeError naming nothing
    if not hasattr(y, "dtype") or np.dtype(y.dtype).kind in "US":
        dt = np.asarray(y).dtype
        if dt.kind in "US":  # was JAX's staging error
            raise TypeError(
                f"y holds text labels (dtype {dt}): encode them as numbers, e.g. +1 / -1 for two "
                "classes or one-hot columns (n, k)"
            )
    y = _checks.as_response(centre_columns(y, (1, 2)), X.dtype).astype(X.dtype)  # booleans: 0/1 labels
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must have shape ({X.shape[0]},) or ({X.shape[0]}, k), got {tuple(y.shape)}")
    if X.shape[0] < 4:
        raise ValueError(f"{name} needs at least 4 rows, got {X.shape[0]}")
    _checks.check_finite(X, name)
    _checks.check_finite(y, "y")
    return X, y


def _check_linear_widths(kernel, bandwidth, target_kernel, target_bandwidth):
    """A width for a linear kernel was silently ignored (the kernel has none): refused, naming it."""
    for k, bw, kname, bname in ((kernel, bandwidth, "kernel", "bandwidth"),
                                (target_kernel, target_bandwidth, "target_kernel", "target_bandwidth")):  # fmt: skip
        if k == "linear" and bw is not None:
            raise ValueError(f"{bname} only applies to {kname}='gaussian'; the linear kernel has no width: pass None")


def _as_width(bandwidth, dtype):
    return None if bandwidth is None else jnp.asarray(bandwidth, dtype)


def _check_target_varies(y):
    """Refuse a constant target (every row of ``y`` equals the first).

    Its centred target kernel is zero, so every alignment and HSIC is 0 and
    any feature set ties: a selection would be arbitrary.
    """
    yh = np.asarray(jax.device_get(y))  # n values, explicit (eager device operations: three compiled programs)
    if bool(np.all(yh == yh[0])):
        raise ValueError("y is constant (every entry equals the first): there is nothing to select features for")


def _check_bandwidth(bandwidth, name="bandwidth"):
    """Any positive real scalar (Python, NumPy or 0-d JAX; traced too) or ``None``: the traced ``ok`` flag."""
    if bandwidth is None:
        return jnp.asarray(True)
    return _checks.check_positive_scalar(bandwidth, name, what="a positive number or None (median heuristic)")


# --------------------------------------------------------------------------
# Alignment and HSIC
# --------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("kernel", "target_kernel", "estimator"))
def _measure(X, y, bandwidth, target_bandwidth, *, kernel, target_kernel, estimator):
    free = estimator == "kta"
    return _criterion(_gram(X, kernel, bandwidth, free), _gram(y, target_kernel, target_bandwidth, free), estimator)


def kernel_target_alignment(X, y, *, kernel="gaussian", bandwidth=None, target_kernel="linear", target_bandwidth=None):
    r"""Centred kernel target alignment :math:`\langle HKH, HLH\rangle_F / (\|HKH\|_F\|HLH\|_F)`.

    ``K`` is the ``kernel`` matrix of the rows of ``X`` (Gaussian with the
    median heuristic by default, see the module docstring), ``L`` the
    ``target_kernel`` matrix of ``y`` (linear by default: :math:`L = y y^\top`,
    the thesis' choice for labels). The value lies in ``[-1, 1]``; it is the
    empirical HSIC normalised by the Frobenius norms of the centred kernels.
    Where a centred kernel is zero (a constant ``y``, or rows of ``X`` that are
    all equal) the ratio is undefined and ``0`` is returned: no dependence can
    be measured.

    Args:
        X: ``(n, p)`` inputs; y: ``(n,)`` or ``(n, k)`` targets (booleans are the 0/1 labels).
        kernel, target_kernel: ``"gaussian"`` or ``"linear"``.
        bandwidth, target_bandwidth: Gaussian :math:`\sigma`, any positive real scalar (Python,
            NumPy or 0-d JAX; may be traced: a non-positive one gives NaN under ``jit``);
            ``None``: median heuristic (and the only value for a linear kernel).

    Example:
        >>> X = jnp.array([[0.0], [1.0], [2.0], [3.0]])
        >>> round(float(kernel_target_alignment(X, X[:, 0], kernel="linear")), 6)
        1.0
    """
    ok = _check_bandwidth(bandwidth) & _check_bandwidth(target_bandwidth, "target_bandwidth")
    X, y = _prepare(X, y, kernel, target_kernel)
    _check_linear_widths(kernel, bandwidth, target_kernel, target_bandwidth)
    bandwidth, target_bandwidth = _as_width(bandwidth, X.dtype), _as_width(target_bandwidth, X.dtype)
    a = _measure(X, y, bandwidth, target_bandwidth, kernel=kernel, target_kernel=target_kernel, estimator="kta")
    return _checks.poison(ok, a)  # a bad traced bandwidth: NaN


def hsic(X, y, *, kernel="gaussian", bandwidth=None, target_kernel="linear", target_bandwidth=None, unbiased=False):
    r"""Empirical Hilbert-Schmidt independence criterion.

    Biased (Gretton et al. 2005): :math:`\operatorname{tr}(KHLH)/(n-1)^2`,
    which equals the V-statistic of the population HSIC
    :math:`E[kl] + E[k]E[l] - 2E_{x,y}[E_{x'}k\,E_{y'}l]` times
    :math:`n^2/(n-1)^2`. ``unbiased=True``: the U-statistic of Song et al.
    (2012), :math:`[\operatorname{tr}(\tilde K\tilde L) + \frac{1^\top\tilde K 1\,
    1^\top\tilde L 1}{(n-1)(n-2)} - \frac{2}{n-2}1^\top\tilde K\tilde L 1]/(n(n-3))`
    with zero-diagonal :math:`\tilde K, \tilde L`. Kernels as in
    :func:`kernel_target_alignment`.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (50, 2))
        >>> bool(hsic(X, X[:, 0] ** 2) > hsic(X, jax.random.normal(jax.random.key(1), (50,))))
        True
    """
    ok = _check_bandwidth(bandwidth) & _check_bandwidth(target_bandwidth, "target_bandwidth")
    X, y = _prepare(X, y, kernel, target_kernel)
    _check_linear_widths(kernel, bandwidth, target_kernel, target_bandwidth)
    bandwidth, target_bandwidth = _as_width(bandwidth, X.dtype), _as_width(target_bandwidth, X.dtype)
    est = "unbiased" if _checks.static_flag(unbiased, "unbiased") else "hsic"
    h = _measure(X, y, bandwidth, target_bandwidth, kernel=kernel, target_kernel=target_kernel, estimator=est)
    return _checks.poison(ok, h)  # a bad traced bandwidth: NaN


# --------------------------------------------------------------------------
# Greedy KTA model selection (Algorithm 3)
# --------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("kernel", "target_kernel"))
def _prefix_alignments(X, y, ranking, bandwidth, target_bandwidth, *, kernel, target_kernel):
    Lc = _center(_gram(y, target_kernel, target_bandwidth, scale_free=True))
    n = X.shape[0]
    # as in _gram: centred, and one power of two for every column (the alignments do not depend on it)
    X, e = _pow2_unit(_centre(X))

    def step(D, j):
        col = X[:, j]
        if kernel == "linear":
            D = D + col[:, None] * col[None, :]
            K = D
        else:
            D = D + (col[:, None] - col[None, :]) ** 2
            K = _gaussian(D, _width(D, bandwidth, e))
        return D, _cosine(_center(K), Lc)

    _, a = lax.scan(step, jnp.zeros((n, n), X.dtype), ranking)
    return a


def greedy_kta_selection(
    X, y, ranking, *, kernel="gaussian", bandwidth=None, target_kernel="linear", target_bandwidth=None
):
    r"""Greedy KTA model selection over a ranked feature list (thesis Algorithm 3).

    For every ``k`` the centred alignment :math:`a_k` of the kernel on the
    top-``k`` features ``ranking[:k]`` (most important first) with the target
    kernel is computed (one ``lax.scan`` adding one feature's distances per
    step, ``O(n^2)`` memory); the chosen set is ``ranking[:k*]`` with ``k*``
    maximising :math:`a_k`, the smallest ``k`` among ties (Algorithm 3 walks the
    list from the least important feature and keeps the last
    :math:`a_i \ge a_{best}`). With ``bandwidth=None`` each prefix uses its own
    median-heuristic width.

    Args:
        X: ``(n, p)`` training inputs; y: ``(n,)`` or ``(n, k)`` training targets.
        ranking: feature indices, most important first (a permutation of a subset of ``range(p)``).
        kernel, bandwidth, target_kernel, target_bandwidth: as in :func:`kernel_target_alignment`.

    Returns:
        ``(selected, alignments)``: the chosen feature indices (a numpy array)
        and the ``(len(ranking),)`` alignments :math:`a_1, a_2, \dots`.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (60, 5))
        >>> sel, a = greedy_kta_selection(X, X[:, 3] + X[:, 1], [3, 1, 0, 2, 4], kernel="linear")
        >>> sel.tolist()
        [3, 1]
    """
    _checks.require_eager(
        "greedy_kta_selection", "it returns a variable-length array of feature indices",
        "kernel_target_alignment is jittable", X=X, y=y, ranking=ranking, bandwidth=bandwidth,
        target_bandwidth=target_bandwidth,
    )  # fmt: skip
    _check_bandwidth(bandwidth)
    _check_bandwidth(target_bandwidth, "target_bandwidth")
    X, y = _prepare(X, y, kernel, target_kernel)
    _check_linear_widths(kernel, bandwidth, target_kernel, target_bandwidth)
    bandwidth, target_bandwidth = _as_width(bandwidth, X.dtype), _as_width(target_bandwidth, X.dtype)
    r = np.asarray(_containers.host_numeric(ranking, "ranking"))  # big-endian: JAX's staging error; masked: refused
    if r.ndim != 1 or r.size == 0 or not np.issubdtype(r.dtype, np.integer):
        raise ValueError(f"ranking must be a non-empty 1-D array of feature indices, got {r!r}")
    if r.min() < 0 or r.max() >= X.shape[1] or np.unique(r).size != r.size:
        raise ValueError(f"ranking must hold distinct feature indices in [0, {X.shape[1]}), got {r.tolist()[:10]}")
    _check_target_varies(y)  # every alignment 0: ranking[:1] was "selected"
    a = _prefix_alignments(
        X, y, jnp.asarray(r), bandwidth, target_bandwidth, kernel=kernel, target_kernel=target_kernel
    )
    k = int(np.argmax(np.asarray(a))) + 1
    return r[:k], a


# --------------------------------------------------------------------------
# randSel (Algorithm 6)
# --------------------------------------------------------------------------


class RandSelResult(NamedTuple):
    """Result of :func:`randsel`.

    Attributes:
        contributions: ``(R + 1, p)`` estimated contributions :math:`\\hat c_j` of the ``R`` rounds
            (``nan`` once culled or fixed); the last row, the final feature set, is all ``nan``.
        active: ``(R + 1, p)`` bool, the features in play at the start of each round and at the end
            (fixed ones included).
        alignment: ``(R + 1,)`` centred alignment of those feature sets on the data (model selection).
        fixed: ``(p,)`` bool, features fixed (top ``keep`` fraction ``fix_after`` rounds in a row).
        ranking: ``(p,)`` feature indices, best first (fixed, then survivors by last contribution,
            then the culled ones, latest culled first).
        selected: ``(p,)`` bool, the features of the best round with positive contribution, and the fixed ones;
            when the best is the final set (``best_round == R``, no contributions estimated), all of its features.
        best_round: index of the round with the largest ``alignment``.
    """

    contributions: np.ndarray
    active: np.ndarray
    alignment: np.ndarray
    fixed: np.ndarray
    ranking: np.ndarray
    selected: np.ndarray
    best_round: int


def _draw(key, X, y, free, fixed, h, scale2, estimator, m_a):
    """One draw: rows ``B``, a random set ``V`` of ``h + 1`` free features and ``U = V`` minus one of them."""
    n, p = X.shape
    k_rows, k_feat = jax.random.split(key)
    rows = jax.random.choice(k_rows, n, (m_a,), replace=False)
    prio = jnp.where(free, jax.random.uniform(k_feat, (p,), X.dtype), jnp.inf)
    ranks = jnp.argsort(jnp.argsort(prio))
    V = (ranks <= h) & free
    U = (ranks < h) & free
    drop = jnp.argmax(ranks == h)
    Xb, yb = X[rows], y[rows]
    wV = (V | fixed).astype(X.dtype)
    D_V = squared_distances(Xb, wV)
    col = Xb[:, drop]
    D_U = jnp.maximum(D_V - (col[:, None] - col[None, :]) ** 2, 0.0)
    gamma = 1.0 / (2.0 * scale2 * jnp.sum(wV))  # one width for V and U (Proposition 4.2.3)
    L = jnp.matmul(yb, yb.T, precision=HI)
    a_V = _criterion(jnp.exp(-gamma * D_V), L, estimator)
    a_U = _criterion(jnp.exp(-gamma * D_U), L, estimator)
    return V, U, a_V, a_U


@functools.partial(jax.jit, static_argnames=("num_subsamples", "m_a", "chunk", "estimator"))
def _round(key, X, y, free, fixed, scale2, *, num_subsamples, m_a, chunk, estimator):
    """Contribution estimates of one round, ``(p,)`` (``nan`` for features not free)."""
    h = jnp.sum(free) // 2
    nb = -(-num_subsamples // chunk)
    keys = jax.random.split(key, nb * chunk).reshape(nb, chunk)
    weight = (jnp.arange(nb * chunk) < num_subsamples).astype(X.dtype).reshape(nb, chunk)
    draw = jax.vmap(lambda k: _draw(k, X, y, free, fixed, h, scale2, estimator, m_a))
    p = X.shape[1]

    def body(acc, kw):
        ks, w = kw
        V, U, a_V, a_U = draw(ks)
        V = V.astype(X.dtype) * w[:, None]
        notU = (free & ~U).astype(X.dtype) * w[:, None]
        acc = (acc[0] + a_V @ V, acc[1] + V.sum(0), acc[2] + a_U @ notU, acc[3] + notU.sum(0))
        return acc, None

    zero = jnp.zeros(p, X.dtype)
    (sV, cV, sU, cU), _ = lax.scan(body, (zero, zero, zero, zero), (keys, weight))
    c = sV / jnp.maximum(cV, 1.0) - sU / jnp.maximum(cU, 1.0)
    return jnp.where(free & (cV > 0) & (cU > 0), c, jnp.nan)


@jax.jit  # one program: as eager operations these were about fifteen compiled programs in a first call
def _randsel_units(X, y):
    """randSel's standardised ``X`` and unit-scale ``y``, and ``y``'s power of two.

    Each column is centred and scaled by a power of two first (exact): the variance of a column in units
    of 1e160 overflowed (``X / inf = 0``: every alignment 0 and another selection), of 1e-170 underflowed;
    then divided by its standard deviation (a constant column is left at 0). ``y`` is centred and scaled by
    a power of two: ``y y^T`` of a ``y`` in units of 1e200 was inf (NaN contributions, nothing selected),
    of 1e-200 zero; the HSIC contributions are reported in ``y``'s units (times ``4^e``, exact).
    """
    X = _centre(X)
    X = scale_pow2(X, -pow2_exponent(jnp.max(jnp.abs(X), axis=0)))
    sd = jnp.std(X, axis=0)
    X = X / jnp.where(sd > 0, sd, 1.0)
    y, y_exp = _pow2_unit(_centre(y))
    return X, y, y_exp


@jax.jit  # one program: NumPy-index gathers were nine eager ones
def _take_rows(X, y, rows):
    return X[rows], y[rows]


def _evaluation_rows(key, n, max_eval_rows):
    """Rows of randSel's model selection: all ``n`` in order, or ``max_eval_rows`` of them drawn without replacement.

    The draw uses its own stream of ``key`` (the rounds use ``fold_in(key, r)`` with small ``r``). It was the
    first ``max_eval_rows`` rows: a file sorted by class gave a constant target there, an alignment of 0 for
    every round and an arbitrary choice of round.
    """
    if n <= max_eval_rows:
        return np.arange(n)
    rows = jax.random.choice(jax.random.fold_in(key, 0x7FFFFFFF), n, (max_eval_rows,), replace=False)
    return np.sort(np.asarray(rows))


@jax.jit
def _set_alignment(Xe, ye, w, scale2):
    D = squared_distances(Xe, w)
    K = jnp.exp(-D / (2.0 * scale2 * jnp.maximum(jnp.sum(w), 1.0)))
    return _alignment(K, jnp.matmul(ye, ye.T, precision=HI))


def randsel(
    key,
    X,
    y,
    *,
    num_subsamples: int = 3000,
    subsample_size: int | None = None,
    drop: float = 0.25,
    keep: float = 0.1,
    fix_after: int | None = None,
    min_features: int = 2,
    bandwidth: float | None = None,
    estimator: str = "unbiased",
    chunk_size: int | None = None,
    max_eval_rows: int = 2000,
) -> RandSelResult:
    r"""randSel: randomised HSIC feature selection (thesis Algorithm 6, chapter 4).

    The contribution of feature ``j`` (thesis Definition 4.2.1) is
    :math:`c_j = E_{S\sim\mathcal S_j}A(S) - E_{S'\sim\mathcal S_{\setminus j}}A(S')`,
    with :math:`\mathcal S_j` the uniform distribution over sets of
    :math:`\lfloor n_f/2\rfloor + 1` of the :math:`n_f` features in play that
    contain ``j`` and :math:`\mathcal S_{\setminus j}` over sets of
    :math:`\lfloor n_f/2\rfloor` that do not; ``A`` is the empirical HSIC of a
    Gaussian kernel on the set's features with the linear target kernel,
    estimated on the subsample by the unbiased U-statistic of Song et al.
    (``estimator="unbiased"``, default), the thesis' biased
    :math:`\operatorname{tr}(KHLH)/(m-1)^2` (``"hsic"``) or the normalised
    alignment (``"kta"``). The default departs from the thesis on purpose: the
    bias of the biased estimator, about :math:`(1 - E k)\operatorname{var}(y)/m`,
    grows with the number of features in the set, so *every* feature,
    irrelevant ones included, gets a positive :math:`\hat c_j` of order ``1/m``
    (the ranking is unchanged, the sign is not); the U-statistic has
    :math:`E\hat c_j = c_j` exactly (the same kernel width for ``V`` and ``U``).
    Each of the ``num_subsamples`` draws takes ``subsample_size`` rows (default
    ``n // 4``, at least 4) without replacement, a uniform set ``V`` of :math:`\lfloor n_f/2\rfloor + 1` features
    and ``U = V`` minus one uniform member of ``V``; then :math:`\hat c_j` is the
    mean of :math:`A(V)` over the draws with :math:`j\in V` minus the mean of
    :math:`A(U)` over those with :math:`j \notin U` (both are exact samples of
    the two distributions). Irrelevant features (independent of the target
    and the other features) have :math:`c_j \le 0` (Proposition 4.2.3), which
    needs the same kernel width for ``V`` and ``U``: with features
    standardised to unit variance, :math:`\sigma^2 = \text{bandwidth}^2\,|V|`
    (default ``bandwidth**2 = 2``, the mean squared distance per feature, so
    :math:`\sigma^2` is about the median heuristic).

    Rounds: after each round the bottom ``drop`` fraction of the features in
    play (at least one) is culled, never going below ``min_features``; with
    ``fix_after=t`` a feature among the top ``keep`` fraction ``t`` rounds in a
    row is fixed (kept in every set from then on, never culled). The rounds
    stop when ``min_features`` features are in play. Model selection (thesis
    4.2.4): the round whose features have the largest centred alignment on
    the data (all rows, or ``max_eval_rows`` of them drawn from ``key`` when
    ``n`` is larger) is kept, and its features with a
    positive contribution (and the fixed ones) are selected; when that is
    the final set, which has no contribution estimates, all its features.

    Defaults follow the thesis' synthetic experiments: 3000 subsamples of
    ``n // 4`` rows, 25% culled per round, no fixing (``keep=0.1`` is ours; the
    thesis leaves ``a%`` open). All draws of a round are one compiled
    ``vmap`` (in chunks of ``chunk_size`` draws, from memory by default).

    Example:
        >>> kx, ky = jax.random.split(jax.random.key(0))
        >>> X = jax.random.normal(kx, (200, 8))
        >>> y = jnp.sign(X[:, 0] * X[:, 1])  # XOR of the signs
        >>> res = randsel(jax.random.key(1), X, y, num_subsamples=300, subsample_size=60)
        >>> sorted(res.ranking[:2].tolist())
        [0, 1]
    """
    _checks.require_eager(
        "randsel", "each round culls and fixes features by value", "kernel_target_alignment and hsic are jittable",
        key=key, X=X, y=y, bandwidth=bandwidth,
    )  # fmt: skip
    _checks.check_key(key)
    _checks.check_choice(estimator, ESTIMATORS, "estimator")
    _check_bandwidth(bandwidth)
    X, y = _prepare(X, y, "gaussian", "linear")
    n, p = X.shape
    drop, keep = _checks.real_setting(drop), _checks.real_setting(keep)
    num_subsamples = _checks.int_setting(num_subsamples, "num_subsamples")
    subsample_size = _checks.int_setting(subsample_size, "subsample_size")
    fix_after = _checks.int_setting(fix_after, "fix_after")
    min_features = _checks.int_setting(min_features, "min_features")
    chunk_size = _checks.int_setting(chunk_size, "chunk_size")
    max_eval_rows = _checks.int_setting(max_eval_rows, "max_eval_rows")
    if not (isinstance(drop, (int, float, np.floating)) and 0 < drop < 1):
        raise ValueError(f"drop must lie in (0, 1), got {drop!r}")
    if not (isinstance(keep, (int, float, np.floating)) and 0 < keep < 1):
        raise ValueError(f"keep must lie in (0, 1), got {keep!r}")
    if fix_after is not None and not (_checks.is_int(fix_after) and fix_after >= 1):
        raise ValueError(f"fix_after must be a positive integer or None, got {fix_after!r}")
    if not (_checks.is_int(num_subsamples) and num_subsamples >= 1):
        raise ValueError(f"num_subsamples must be a positive integer, got {num_subsamples!r}")
    if p < 2:  # before min_features: one column was "min_features must be an integer in [1, p=1), got 2"
        raise ValueError(f"X needs at least 2 features, got {p}")
    if not (_checks.is_int(min_features) and 1 <= min_features < p):
        raise ValueError(f"min_features must be an integer in [1, p={p}), got {min_features!r}")
    m_a = min(n, max(4, n // 4)) if subsample_size is None else subsample_size  # n // 4 < 4 blamed subsample_size=None
    if not (_checks.is_int(m_a) and 4 <= m_a <= n):
        raise ValueError(f"subsample_size must be an integer in [4, n={n}], got {subsample_size!r}")
    _check_target_varies(y)  # a zero target kernel: every contribution and alignment 0, an arbitrary ranking
    if chunk_size is not None and not (_checks.is_int(chunk_size) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    if not (_checks.is_int(max_eval_rows) and max_eval_rows >= 4):
        raise ValueError(f"max_eval_rows must be an integer >= 4, got {max_eval_rows!r}")
    X, y, y_exp = _randsel_units(X, y)
    scale2 = jnp.asarray(2.0 if bandwidth is None else float(bandwidth) ** 2, X.dtype)
    if chunk_size is None:
        per_draw = X.dtype.itemsize * (6 * m_a * m_a + m_a * p + 4 * p)
        chunk = _memory.plan_chunk(num_subsamples, per_draw, shared_bytes=X.dtype.itemsize * n * p, what="draw")
        chunk = int(min(chunk, 256))
    else:
        chunk = int(chunk_size)
    rows = _evaluation_rows(key, n, int(max_eval_rows))
    X_eval, y_eval = (X, y) if rows.size == n else _take_rows(X, y, rows)  # all n rows are in order

    free = np.ones(p, bool)
    fixed = np.zeros(p, bool)
    streak = np.zeros(p, int)
    culled_at = np.full(p, -1)
    contribs, actives, aligns = [], [], []
    r = 0
    while free.sum() + fixed.sum() > min_features and free.sum() >= 2:
        active = free | fixed
        actives.append(active.copy())
        aligns.append(float(_set_alignment(X_eval, y_eval, np.asarray(active, X.dtype), scale2)))
        c = np.asarray(
            _round(
                jax.random.fold_in(key, r),
                X,
                y,
                jnp.asarray(free),
                jnp.asarray(fixed),
                scale2,
                num_subsamples=int(num_subsamples),
                m_a=int(m_a),
                chunk=chunk,
                estimator=estimator,
            ),
            np.float64,
        )
        contribs.append(c)
        idx = np.flatnonzero(free)
        order = idx[np.argsort(np.nan_to_num(c[idx], nan=-np.inf), kind="stable")]  # worst first
        if fix_after is not None:
            top = order[::-1][: max(1, math.ceil(keep * idx.size))]
            hit = np.zeros(p, bool)
            hit[top] = True
            streak = np.where(hit, streak + 1, 0)
            new_fixed = free & (streak >= fix_after)
            fixed |= new_fixed
            free &= ~new_fixed
            order = order[~new_fixed[order]]
        n_drop = min(max(1, int(drop * order.size)), int(free.sum() + fixed.sum()) - min_features)
        if n_drop > 0:
            culled = order[:n_drop]
            free[culled] = False
            culled_at[culled] = r
        r += 1
    active = free | fixed
    actives.append(active.copy())
    aligns.append(float(_set_alignment(X_eval, y_eval, np.asarray(active, X.dtype), scale2)))
    contribs.append(np.full(p, np.nan))

    contributions = np.stack(contribs)
    last_c = np.full(p, -np.inf)
    for row in contributions[::-1]:  # each feature's most recent estimate
        last_c = np.where(np.isinf(last_c) & ~np.isnan(row), row, last_c)
    survivors = np.flatnonzero(free)
    survivors = survivors[np.argsort(-last_c[survivors], kind="stable")]
    gone = np.flatnonzero(culled_at >= 0)
    gone = gone[np.lexsort((-last_c[gone], -culled_at[gone]))]
    ranking = np.concatenate([np.flatnonzero(fixed), survivors, gone]).astype(np.int64)

    alignment = np.asarray(aligns)
    best = int(np.argmax(alignment))
    in_best = np.asarray(actives[best])
    if best == len(contribs) - 1:  # the final set has no contributions: its members are the survivors
        selected = in_best.copy()
    else:
        selected = (in_best & (np.nan_to_num(contributions[best], nan=-1.0) > 0)) | fixed
    if estimator != "kta":  # the HSIC is quadratic in y; the ranking and the signs above are not
        contributions = np.ldexp(contributions, 2 * int(y_exp))
    return RandSelResult(
        contributions=contributions,
        active=np.stack(actives),
        alignment=alignment,
        fixed=fixed,
        ranking=ranking,
        selected=selected,
        best_round=best,
    )
