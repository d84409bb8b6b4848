r"""Sparse naive Bayes: naive Bayes with at most ``k`` discriminative features.

Given non-negative data ``X`` (``n x m``) with labels in ``C`` classes, let
``f_c = sum_{i: y_i = c} x_i`` be the class sums (``m``-vectors) and ``n_c`` the
class sizes. Laplace smoothing ``alpha`` enters as pseudo-counts, exactly as in
scikit-learn's ``MultinomialNB`` / ``BernoulliNB``. The *sparse* naive Bayes
problem (Askari, d'Aspremont, El Ghaoui, "Naive Feature Selection", thesis
chapter 5) constrains the number of features on which the class parameters
differ::

    phi(k) = max_theta  L(theta_1, ..., theta_C)
             s.t.       #{j : theta_{1j}, ..., theta_{Cj} not all equal} <= k

For two classes the constraint is ``||theta_+ - theta_-||_0 <= k``. A feature
on which all classes share one parameter drops out of the linear decision rule,
so the fitted classifier uses at most ``k`` features.

Bernoulli model (binary ``X``), exact (Theorem 3)
    ``L = sum_c a_c' log theta_c + b_c' log(1 - theta_c)`` with ``a_c = f_c +
    alpha`` ones and ``b_c = n_c - f_c + alpha`` zeros. Per feature the gain of
    separate class parameters over one pooled parameter is::

        gain_j = sum_c [a_cj log(a_cj / (a_cj + b_cj)) + b_cj log(b_cj / (a_cj + b_cj))]
                 - [A_j log(A_j / (A_j + B_j)) + B_j log(B_j / (A_j + B_j))] >= 0,

    ``A = sum_c a_c``, ``B = sum_c b_c``; ``phi(k) = sum_j pooled_j + s_k(gain)``
    where ``s_k`` sums the ``k`` largest entries, and the optimal support is the
    top-``k`` of ``gain`` (``theta_cj = a_cj / (a_cj + b_cj)`` there, the pooled
    ``A_j / (A_j + B_j)`` elsewhere). Written as a log-likelihood *gain* it
    cannot favour all-zero features (their gain is exactly zero).

Multinomial model, dual bound and primal recovery (Theorems 4 and 5)
    ``L = sum_c f_c' log theta_c`` with ``1' theta_c = 1`` (``f_c`` smoothed).
    With ``g = sum_c f_c``, ``S = 1'g`` and ``v = sum_c f_c log f_c - g log g``::

        psi(k) = K + min_{p in simplex_C} s_k(h(p)),   h(p) = v - sum_c f_c log p_c,
        K = g' log g - S log S,

    ``h_j(p) = g_j KL(f_{.j}/g_j || p) >= 0`` is convex in ``p``. For two classes
    ``p = (a, 1 - a)`` and the dual is the 1-D convex problem
    ``min_{a in [0, 1]} s_k(h(a))`` of the thesis, solved by bisection on the
    sign of the subgradient ``-A_0/a + A_1/(1 - a)`` (``A_c`` = sum of ``f_c``
    over the top-``k`` set), safeguarded and accelerated by the stationary point
    of the active piece. For ``C > 2`` classes the same dual over the simplex is
    solved by fully corrective Frank-Wolfe on its concave dual (below), which
    converges and certifies its own gap. Weak duality gives
    ``phi(k) <= psi(k)``; the Shapley-Folkman theorem (``C + 1`` coupling
    constraints: ``C`` normalisations and the cardinality) gives
    ``psi(k - C - 2) <= phi(k)``, i.e. ``psi(k - 4) <= phi(k) <= psi(k)`` for
    two classes. A primal point is recovered in closed form from a support
    ``T``, ``|T| <= k``, with ``B_c = sum_{j in T} f_cj`` and ``B = sum_c B_c``::

        theta_cj = g_j / S                (j not in T, shared by all classes)
        theta_cj = (B / S) f_cj / B_c     (j in T)

    ``T`` is the top-``k`` of ``h(p*)`` (Theorem 4) or, when it scores higher,
    the top-``k`` at a neighbouring dual point or the systematic rounding of the
    optimal mixture of those sets (at a kink of the dual, ties make the top-``k``
    ambiguous and the optimal point of the dual's dual mixes a few 0/1 sets).

Certificates
    Every dual point ``p`` gives the upper bound ``K + s_k(h(p)) >= psi(k)`` and
    every ``x`` in ``{0 <= x <= 1, 1'x <= k}`` the lower bound
    ``K + G(x) <= psi(k)`` with
    ``G(x) = x'v - sum_c A_c log(A_c / 1'A)``, ``A_c = x'f_c`` (the dual of the
    dual; for a 0/1 vector ``x = 1_T``, ``K + G(1_T)`` is exactly the objective
    of the recovered point with support ``T``). The solvers stop when the two
    bounds meet (``stats["dual_gap"]``); ``stats["gap"] = psi_upper -
    objective`` bounds how far the returned classifier is from the (unknown,
    non-convex) optimum ``phi(k)``.

Cost: the class sums are one pass over the data (``O(nnz C)``); everything after
is ``O(C m)`` time per dual step and ``O(C m)`` memory. Top-``k`` selection is an
exact radix select (``O(m)`` per 16-bit pass, no sort) that accepts a traced
``k``, so one compiled solver serves every ``k`` and a ``k``-path is a
``vmap``/``lax.map`` over ``k``.

Example::

    >>> import numpy as np, jaxknock as jk
    >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
    >>> sol = jk.sparse_naive_bayes(X, y, k=5)               # multinomial
    >>> sol.value.support.sum(), sol.stats["gap"] >= 0       # 5 features, certified
    >>> sel = jk.SparseNaiveBayes(k=5).fit(X, y)             # scikit-learn style
"""

from __future__ import annotations

import dataclasses
import numbers
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock._checks import is_concrete
from jaxknock._solution import Solution, raise_if_failed, result_code

__all__ = [
    "ClassSums",
    "class_sums",
    "NaiveBayesModel",
    "SNBPath",
    "sparse_naive_bayes",
    "sparse_naive_bayes_path",
    "SparseNaiveBayes",
]

_MODELS = ("multinomial", "bernoulli")


# --------------------------------------------------------------------------
# Exact top-k selection (radix select, traced k)
# --------------------------------------------------------------------------

_SORT_SELECT_MAX = 2048  # below this many entries, select by sorting


def _sortable_keys(z):
    """Unsigned integer keys with the same order as the floats ``z``."""
    nbits = z.dtype.itemsize * 8
    ut = jnp.uint64 if nbits == 64 else jnp.uint32
    bits = lax.bitcast_convert_type(z, ut)
    top = jnp.asarray(1, ut) << (nbits - 1)
    return jnp.where((bits & top) != 0, ~bits, bits | top)


def _key_to_value(key, dtype):
    nbits = jnp.dtype(dtype).itemsize * 8
    ut = key.dtype
    top = jnp.asarray(1, ut) << (nbits - 1)
    bits = jnp.where((key & top) != 0, key & ~top, ~key)
    return lax.bitcast_convert_type(bits, dtype)


def _bucket_of_rank(hist, remaining):
    """Largest bucket ``b`` with ``#{digit >= b} >= remaining``; also ``#{digit > b}``.

    Two levels of ``sqrt(nbins)`` buckets with masked sums instead of a cumsum
    (a long cumsum is slow to run and to compile on CPU).
    """
    nbins = hist.shape[0]
    side = 1 << (int(np.log2(nbins)) // 2)
    upper = jnp.arange(side)[None, :] >= jnp.arange(side)[:, None]  # upper[r, r'] = r' >= r

    def suffix_sums(x):
        return jnp.sum(jnp.where(upper, x[None, :], 0), axis=1, dtype=jnp.int32)

    H = hist.reshape(nbins // side, side)
    rows = jnp.sum(H, axis=1, dtype=jnp.int32)
    rows_ge = suffix_sums(rows)  # #{digit in rows >= r}
    r = jnp.sum(rows_ge >= remaining, dtype=jnp.int32) - 1
    above_row = rows_ge[r] - rows[r]
    row = H[r]
    ge = suffix_sums(row)
    c = jnp.sum(ge >= remaining - above_row, dtype=jnp.int32) - 1
    return r * side + c, above_row + ge[c] - row[c]


def _kth_largest(z, k):
    """Exact ``k``-th largest entry of the 1-D float array ``z`` (``1 <= k <= z.size``).

    Radix select on order-preserving integer keys: ``O(m)`` work per pass (8 or
    16 bits per pass), no sort, and ``k`` may be traced (so it vmaps over ``k``).
    Short vectors are simply sorted (as fast there, and quicker to compile).
    """
    m = z.shape[-1]
    if m <= _SORT_SELECT_MAX:
        return jnp.sort(z)[m - jnp.asarray(k, jnp.int32)]
    keys = _sortable_keys(z)
    ut = keys.dtype
    nbits = z.dtype.itemsize * 8
    bits = 8 if z.shape[-1] <= 1 << 16 else 16  # few elements: small histograms win
    nbins = 1 << bits

    def one_pass(j, carry):  # a loop, not unrolled: keeps compile times low
        prefix, remaining = carry
        shift = (nbits - bits * (j + 1)).astype(ut)
        digit = ((keys >> shift) & (nbins - 1)).astype(jnp.int32)
        inc = ((j == 0) | ((keys >> (shift + bits)) == prefix)).astype(jnp.int32)
        hist = jnp.zeros(nbins, jnp.int32).at[digit].add(inc)
        b, above = _bucket_of_rank(hist, remaining)
        return (prefix << bits) | b.astype(ut), remaining - above

    init = (jnp.zeros((), ut), jnp.asarray(k, jnp.int32))
    prefix, _ = lax.fori_loop(0, nbits // bits, one_pass, init)
    return _key_to_value(prefix, z.dtype)


class _TopK(NamedTuple):
    lam: jax.Array  # k-th largest value
    gt: jax.Array  # mask z > lam
    eq: jax.Array  # mask z == lam (ties)
    need: jax.Array  # number of ties inside the top k
    n_eq: jax.Array
    s: jax.Array  # s_k(z), the sum of the k largest entries


def _top_k(z, k):
    """Top-``k`` structure of ``z`` for a (possibly traced) ``0 <= k <= z.size``."""
    m = z.shape[-1]
    if z.dtype.itemsize < 4:
        z = z.astype(jnp.float32)
    kk = jnp.clip(jnp.asarray(k, jnp.int32), 1, m)
    lam = _kth_largest(z, kk)
    gt = z > lam
    eq = z == lam
    n_gt = jnp.sum(gt, dtype=jnp.int32)
    n_eq = jnp.maximum(jnp.sum(eq, dtype=jnp.int32), 1)
    need = kk - n_gt
    s = jnp.sum(jnp.where(gt, z, 0)) + need.astype(z.dtype) * lam
    on = jnp.asarray(k) > 0
    return _TopK(lam, gt & on, eq & on, need, n_eq, jnp.where(on, s, 0))


def _top_k_weights(t: _TopK, dtype):
    """Fractional top-k indicator: ties share the remaining weight equally."""
    w = t.need.astype(dtype) / t.n_eq.astype(dtype)
    return jnp.where(t.gt, 1, jnp.where(t.eq, w, 0)).astype(dtype)


def _top_k_mask(t: _TopK):
    """Boolean mask of exactly k entries (ties broken by index)."""
    split = t.need < jnp.sum(t.eq, dtype=jnp.int32)  # only then is a cumsum needed
    return lax.cond(
        split,
        lambda: t.gt | (t.eq & (jnp.cumsum(t.eq, dtype=jnp.int32) <= t.need)),
        lambda: t.gt | t.eq,
    )


# --------------------------------------------------------------------------
# Multinomial dual: problem data, evaluations, certificates
# --------------------------------------------------------------------------


class _Problem(NamedTuple):
    f: jax.Array  # (C, m) smoothed class sums
    v: jax.Array  # (m,)  sum_c f_c log f_c - g log g
    const: jax.Array  # g' log g - S log S
    totals: jax.Array  # (C,) S_c


class _Agg(NamedTuple):
    """Aggregates ``A_c = x' f_c`` and ``L = x' v`` of a point x of the dual-of-dual."""

    A: jax.Array
    L: jax.Array


def _xlogy(x, y):
    """``x log y`` with ``0 log 0 = 0`` for ``y >= 0`` that is zero only where ``x`` is.

    (``jax.scipy.special.xlogy`` is several times slower on CPU: its select
    blocks the vectorised log.)
    """
    return x * jnp.log(jnp.maximum(y, jnp.finfo(jnp.result_type(y)).tiny))


def _class_sum(x, weights=None):
    """``sum_c weights_c x[c]`` over the (small) leading class axis.

    XLA on CPU reduces a short leading axis poorly (30x slower than this), so
    the sum is unrolled for a few classes and a matrix-vector product otherwise.
    """
    C = x.shape[0]
    if C <= 16:
        terms = [x[c] if weights is None else weights[c] * x[c] for c in range(C)]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out
    w = jnp.ones((C,), x.dtype) if weights is None else weights
    return jnp.matmul(w, x, precision=lax.Precision.HIGHEST)


def _multinomial_problem(counts, alpha) -> _Problem:
    f = counts + alpha
    g = _class_sum(f)
    v = _class_sum(_xlogy(f, f)) - _xlogy(g, g)
    totals = jnp.sum(f, axis=1)
    S = jnp.sum(totals)
    const = jnp.sum(_xlogy(g, g)) - _xlogy(S, S)
    return _Problem(f, v, const, totals)


def _tiny(dtype):
    return jnp.finfo(dtype).tiny


def _scores(pb: _Problem, p):
    """``h(p) = v - sum_c f_c log p_c`` (= ``g_j KL(f_.j / g_j || p)`` >= 0)."""
    logp = jnp.log(jnp.maximum(p, _tiny(p.dtype)))
    return pb.v - _class_sum(pb.f, logp)


def _evaluate(pb: _Problem, p, k):
    """Upper bound ``s_k(h(p))`` and the aggregates of its (fractional) top-k set."""
    top = _top_k(_scores(pb, p), k)
    x = _top_k_weights(top, pb.f.dtype)
    agg = _Agg(jnp.sum(pb.f * x, axis=1), jnp.sum(pb.v * x))
    return top.s.astype(pb.f.dtype), agg


def _dual_lower(agg: _Agg):
    """``G(x) = x'v - sum_c A_c log(A_c / 1'A) <= min_p s_k(h(p))`` for feasible x."""
    T = jnp.sum(agg.A)
    return agg.L - jnp.sum(_xlogy(agg.A, agg.A)) + _xlogy(T, T)


def _agg_p(agg: _Agg, fallback):
    T = jnp.sum(agg.A)
    return jnp.where(T > 0, agg.A / jnp.where(T > 0, T, 1), fallback)


def _line_max(A0, L0, dA, dL, gmax, iters=40):
    """Maximise the concave ``gamma -> G(A0 + gamma dA, L0 + gamma dL)`` on ``[0, gmax]``."""
    tiny = _tiny(A0.dtype)

    def slope(gam):
        A = A0 + gam * dA
        logp = jnp.log(jnp.maximum(A, tiny)) - jnp.log(jnp.maximum(jnp.sum(A), tiny))
        return dL - jnp.sum(jnp.where(dA == 0, 0, dA * logp))

    def body(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        up = slope(mid) > 0
        return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

    lo, hi = lax.fori_loop(0, iters, body, (jnp.zeros_like(gmax), gmax))
    return 0.5 * (lo + hi)


def _converged(upper, lower, const, tol):
    gap = upper - lower
    scale = jnp.maximum(1.0, jnp.abs(const + upper))
    return jnp.isfinite(gap) & (gap <= tol * scale)


# ---- two classes: safeguarded bisection on a = p_0 ------------------------


class _BisectionState(NamedTuple):
    lo: jax.Array
    hi: jax.Array
    agg_lo: _Agg  # top-k aggregates at lo (subgradient <= 0)
    agg_hi: _Agg  # top-k aggregates at hi (subgradient >= 0)
    has_lo: jax.Array
    has_hi: jax.Array
    best_a: jax.Array
    upper: jax.Array  # best s_k(h(a)) seen
    lower: jax.Array  # best certified lower bound on min_a s_k(h(a))
    set_a: jax.Array  # point whose top-k set x had the largest G(x) (a primal candidate)
    set_G: jax.Array
    cand: jax.Array  # candidate for the next step
    use_cand: jax.Array
    num_steps: jax.Array


def _bisection_init(pb: _Problem, k) -> _BisectionState:
    f = pb.f
    g = _class_sum(f)
    ratio = f[0] / jnp.where(g > 0, g, 1)
    lo = jnp.min(jnp.where(g > 0, ratio, jnp.inf))
    hi = jnp.max(jnp.where(g > 0, ratio, -jnp.inf))
    # the minimiser of s_k(h(a)) lies in [min_j a_j, max_j a_j]: outside, all h_j move together
    lo, hi = jnp.minimum(lo, hi), jnp.maximum(lo, hi)
    a0 = jnp.clip(pb.totals[0] / jnp.sum(pb.totals), lo, hi)  # optimal for k = m
    dt = f.dtype
    zero = _Agg(jnp.zeros(f.shape[0], dt), jnp.zeros((), dt))
    return _BisectionState(
        lo=lo,
        hi=hi,
        agg_lo=zero,
        agg_hi=zero,
        has_lo=jnp.asarray(False),
        has_hi=jnp.asarray(False),
        best_a=a0,
        upper=jnp.asarray(jnp.inf, dt),
        lower=jnp.asarray(-jnp.inf, dt),
        set_a=a0,
        set_G=jnp.asarray(-jnp.inf, dt),
        cand=a0,
        use_cand=jnp.asarray(True),
        num_steps=jnp.asarray(0, jnp.int32),
    )


def _mixture_weight(agg_lo: _Agg, agg_hi: _Agg):
    """``theta`` maximising ``G(theta x_lo + (1 - theta) x_hi)``."""
    one = jnp.ones_like(agg_lo.L)
    return _line_max(agg_hi.A, agg_hi.L, agg_lo.A - agg_hi.A, agg_lo.L - agg_hi.L, one)


def _bisection_step(pb: _Problem, state: _BisectionState, k) -> _BisectionState:
    s = state
    width = s.hi - s.lo
    a = jnp.where(s.use_cand, s.cand, 0.5 * (s.lo + s.hi))
    U, agg = _evaluate(pb, jnp.stack([a, 1 - a]), k)
    d = -agg.A[0] / a + agg.A[1] / (1 - a)  # subgradient of s_k(h(a))
    right, left = d >= 0, d <= 0
    pick = lambda c, new, old: jax.tree_util.tree_map(lambda u, w: jnp.where(c, u, w), new, old)
    hi = jnp.where(right, a, s.hi)
    lo = jnp.where(left, a, s.lo)
    agg_hi, agg_lo = pick(right, agg, s.agg_hi), pick(left, agg, s.agg_lo)
    has_hi, has_lo = s.has_hi | right, s.has_lo | left
    better = U < s.upper
    # Lower bound: best mixture of the top-k sets on both sides of the minimiser
    # (closes the gap at a kink), else the current set alone.
    theta = _mixture_weight(agg_lo, agg_hi)
    mix = _Agg(agg_hi.A + theta * (agg_lo.A - agg_hi.A), agg_hi.L + theta * (agg_lo.L - agg_hi.L))
    both = has_lo & has_hi
    G = _dual_lower(agg)
    lb = jnp.maximum(G, jnp.where(both, _dual_lower(mix), -jnp.inf))
    better_set = G > s.set_G
    a_mix = _agg_p(mix, jnp.stack([a, 1 - a]))[0]
    a_cur = _agg_p(agg, jnp.stack([a, 1 - a]))[0]  # stationary point of the active piece
    cand = jnp.where(both, a_mix, a_cur)
    # safeguard: a candidate step that did not halve the bracket is followed by bisection
    stalled = s.use_cand & (hi - lo > 0.5 * width)
    use_cand = (cand > lo) & (cand < hi) & ~stalled
    return _BisectionState(
        lo=lo,
        hi=hi,
        agg_lo=agg_lo,
        agg_hi=agg_hi,
        has_lo=has_lo,
        has_hi=has_hi,
        best_a=jnp.where(better, a, s.best_a),
        upper=jnp.where(better, U, s.upper),
        lower=jnp.maximum(s.lower, lb),
        set_a=jnp.where(better_set, a, s.set_a),
        set_G=jnp.where(better_set, G, s.set_G),
        cand=cand,
        use_cand=use_cand,
        num_steps=s.num_steps + 1,
    )


def _bisection_done(pb, s: _BisectionState, tol):
    eps = jnp.finfo(s.lo.dtype).eps
    tight = _converged(s.upper, s.lower, pb.const, tol)
    collapsed = (s.hi - s.lo <= 4 * eps * jnp.maximum(jnp.abs(s.hi), eps)) & (s.num_steps > 0)
    return tight | collapsed


# ---- C classes: fully corrective Frank-Wolfe on the dual of the dual -------


class _FWState(NamedTuple):
    verts_A: jax.Array  # (W, C) aggregates of the top-k sets found so far
    verts_L: jax.Array  # (W,)
    verts_p: jax.Array  # (W, C) the dual points that produced them
    weights: jax.Array  # (W,) convex weights of the current point x
    count: jax.Array  # number of stored vertices
    p: jax.Array  # (C,) dual point p(x) = A(x) / 1'A(x)
    best_p: jax.Array
    upper: jax.Array
    lower: jax.Array
    num_steps: jax.Array


def _fw_inner(verts_A, verts_L, weights, count, iters):
    """Away-step Frank-Wolfe for ``max_w G(sum_j w_j vertex_j)`` over the stored vertices."""
    W = verts_L.shape[0]
    active = jnp.arange(W) < count
    tiny = _tiny(verts_A.dtype)

    def body(_, w):
        A = w @ verts_A
        L = w @ verts_L
        logp = jnp.log(jnp.maximum(A, tiny)) - jnp.log(jnp.maximum(jnp.sum(A), tiny))
        val = verts_L - verts_A @ logp  # model values F_j(p(x)); G(x) = w' val
        G = w @ val
        s = jnp.argmax(jnp.where(active, val, -jnp.inf))
        v = jnp.argmin(jnp.where(active & (w > 0), val, jnp.inf))
        fw = val[s] - G >= G - val[v]
        wv = w[v]
        dA = jnp.where(fw, verts_A[s] - A, A - verts_A[v])
        dL = jnp.where(fw, verts_L[s] - L, L - verts_L[v])
        gmax = jnp.where(fw, 1.0, wv / jnp.maximum(1 - wv, tiny)).astype(w.dtype)
        gmax = jnp.minimum(gmax, 1 / jnp.finfo(w.dtype).eps)
        gam = _line_max(A, L, dA, dL, gmax)
        w_fw = (1 - gam) * w + gam * jax.nn.one_hot(s, W, dtype=w.dtype)
        w_aw = (1 + gam) * w - gam * jax.nn.one_hot(v, W, dtype=w.dtype)
        w = jnp.where(fw, w_fw, jnp.maximum(w_aw, 0))
        return w / jnp.sum(w)

    return lax.fori_loop(0, iters, body, weights)


def _fw_init(pb: _Problem, k, max_steps) -> _FWState:
    C = pb.f.shape[0]
    W = max_steps + 1
    p0 = pb.totals / jnp.sum(pb.totals)
    U, agg = _evaluate(pb, p0, k)
    dt = pb.f.dtype
    return _FWState(
        verts_A=jnp.zeros((W, C), dt).at[0].set(agg.A),
        verts_L=jnp.zeros((W,), dt).at[0].set(agg.L),
        verts_p=jnp.zeros((W, C), dt).at[0].set(p0),
        weights=jax.nn.one_hot(0, W, dtype=dt),
        count=jnp.asarray(1, jnp.int32),
        p=_agg_p(agg, p0),
        best_p=p0,
        upper=U,
        lower=_dual_lower(agg),
        num_steps=jnp.asarray(0, jnp.int32),
    )


def _fw_step(pb: _Problem, state: _FWState, k, inner_iters=30) -> _FWState:
    s = state
    U, agg = _evaluate(pb, s.p, k)
    better = U < s.upper
    idx = jnp.minimum(s.count, s.verts_L.shape[0] - 1)
    verts_A = s.verts_A.at[idx].set(agg.A)
    verts_L = s.verts_L.at[idx].set(agg.L)
    verts_p = s.verts_p.at[idx].set(s.p)
    count = jnp.minimum(s.count + 1, s.verts_L.shape[0])
    w = _fw_inner(verts_A, verts_L, s.weights, count, inner_iters)
    x = _Agg(w @ verts_A, w @ verts_L)
    return _FWState(
        verts_A=verts_A,
        verts_L=verts_L,
        verts_p=verts_p,
        weights=w,
        count=count,
        p=_agg_p(x, s.p),
        best_p=jnp.where(better, s.p, s.best_p),
        upper=jnp.where(better, U, s.upper),
        lower=jnp.maximum(s.lower, _dual_lower(x)),
        num_steps=s.num_steps + 1,
    )


class _DualSolution(NamedTuple):
    p: jax.Array  # (C,) best dual point
    cand_p: jax.Array  # (J, C) dual points whose top-k sets are primal candidates
    mix_w: jax.Array  # (J,) weights of the (near-)optimal dual-of-dual point over those sets
    upper: jax.Array  # K + s_k(h(p)) >= psi(k)
    lower: jax.Array  # certified lower bound on psi(k)
    num_steps: jax.Array
    converged: jax.Array


def _solve_dual(pb: _Problem, k, tol, max_steps, *, method=None) -> _DualSolution:
    C = pb.f.shape[0]
    method = method or ("bisection" if C == 2 else "frank_wolfe")
    if method == "bisection":
        if C != 2:
            raise ValueError("bisection needs two classes")

        def cond(s):
            return (~_bisection_done(pb, s, tol)) & (s.num_steps < max_steps)

        s = lax.while_loop(cond, lambda s: _bisection_step(pb, s, k), _bisection_init(pb, k))
        done = _bisection_done(pb, s, tol)
        p = jnp.stack([s.best_a, 1 - s.best_a])
        a = jnp.stack([s.lo, s.hi, s.best_a, s.set_a])
        cand_p = jnp.stack([a, 1 - a], axis=1)
        theta = _mixture_weight(s.agg_lo, s.agg_hi)
        both = s.has_lo & s.has_hi
        mix_w = jnp.where(
            both, jnp.stack([theta, 1 - theta, 0 * theta, 0 * theta]), jnp.asarray([0, 0, 1.0, 0], theta.dtype)
        )
    else:

        def cond(s):
            return (~_converged(s.upper, s.lower, pb.const, tol)) & (s.num_steps < max_steps)

        s = lax.while_loop(cond, lambda s: _fw_step(pb, s, k), _fw_init(pb, k, max_steps))
        done = _converged(s.upper, s.lower, pb.const, tol)
        p = s.best_p
        J = min(C + 1, s.weights.shape[0])  # an optimal x mixes at most C + 1 vertices
        w_top, idx = lax.top_k(s.weights, J)
        cand_p = jnp.concatenate([s.verts_p[idx], p[None], s.p[None]], axis=0)
        mix_w = jnp.concatenate([w_top / jnp.sum(w_top), jnp.zeros(2, w_top.dtype)])
    return _DualSolution(p, cand_p, mix_w, pb.const + s.upper, pb.const + s.lower, s.num_steps, done)


def _systematic_round(x, k):
    """A 0/1 vector with ``sum = k`` that follows the fractional ``x`` (``sum x = k``).

    Entries with ``x = 1`` are kept, ``x = 0`` dropped, and fractional ones taken
    in proportion (systematic sampling in index order), so that the aggregates
    ``sum_j x_j f_j`` are matched as well as possible -- the Shapley-Folkman
    picture, where an optimal dual-of-dual point is a mixture of few 0/1 sets.
    """
    c = jnp.cumsum(x)
    shift = jnp.asarray(k, x.dtype) - c[-1]  # absorb rounding drift in sum x
    c = c + shift * jnp.arange(1, x.shape[0] + 1, dtype=x.dtype) / x.shape[0]
    hi = jnp.floor(c + 0.5)
    lo = jnp.concatenate([jnp.zeros(1, x.dtype), hi[:-1]])
    return hi > lo


def _theta_from_mask(pb: _Problem, mask):
    """Theorem 4's closed form for a support mask; returns theta, log theta, objective."""
    f = pb.f
    g = _class_sum(f)
    S = jnp.sum(g)
    B_c = jnp.sum(jnp.where(mask, f, 0), axis=1)
    B = jnp.sum(B_c)
    shared = g / S
    separate = (B / S) * f / jnp.where(B_c > 0, B_c, 1)[:, None]
    theta = jnp.where(mask & (B_c[:, None] > 0), separate, shared)
    log_theta = jnp.log(theta)
    return theta, log_theta, jnp.sum(jnp.where(f > 0, f * log_theta, 0))


def _recover(pb: _Problem, sol: _DualSolution, k):
    """Support ``T`` (``|T| <= k``) of the recovered primal point and its objective.

    Candidates for ``T``: the top-``k`` of ``h(p)`` at the optimal dual point
    (the thesis' choice, Theorem 4), at the other dual points the solver kept,
    and the rounding of the optimal mixture of those sets -- this matters at a
    kink of the dual, where ties in ``h`` make the top-``k`` ambiguous and the
    optimal dual-of-dual point mixes a few sets (Shapley-Folkman). Each
    candidate's exact objective is ``K + G(1_T)``; the best one is returned.
    """
    dt = pb.f.dtype
    J, m = sol.cand_p.shape[0], pb.f.shape[1]
    same = jnp.all(sol.cand_p[:, None, :] == sol.cand_p[None, :, :], axis=-1)
    first = jnp.argmax(same, axis=1)  # first candidate with the same dual point
    unique = first == jnp.arange(J)

    def mask_at(args):
        p, fresh = args
        return lax.cond(fresh, lambda: _top_k_mask(_top_k(_scores(pb, p), k)), lambda: jnp.zeros(m, bool))

    masks = lax.map(mask_at, (sol.cand_p, unique))  # (J, m), zero rows for duplicates
    w = jnp.zeros(J, dt).at[first].add(sol.mix_w.astype(dt))
    mixed = jnp.sum(w > 0) > 1
    rounded = lax.cond(  # a mixture only exists at a kink, between two or more sets
        mixed,
        lambda: _systematic_round(jnp.sum(jnp.where(masks, w[:, None], 0), axis=0), k),
        lambda: jnp.zeros(m, bool),
    )
    masks = jnp.concatenate([masks, rounded[None]], axis=0)
    fresh = jnp.concatenate([unique, mixed[None]])

    def value(args):  # the exact objective K + G(1_T) of a candidate, minus K
        mask, new = args

        def G():
            A = jnp.sum(jnp.where(mask, pb.f, 0), axis=1)
            return _dual_lower(_Agg(A, jnp.sum(jnp.where(mask, pb.v, 0)))).astype(dt)

        return lax.cond(new, G, lambda: jnp.asarray(-jnp.inf, dt))

    values = lax.map(value, (masks, fresh))
    best = jnp.argmax(values)
    return masks[best], pb.const + values[best]


# --------------------------------------------------------------------------
# Bernoulli: exact
# --------------------------------------------------------------------------


def _bernoulli_parts(counts, n_samples, alpha):
    a = counts + alpha  # pseudo-counts of ones
    b = n_samples[:, None] - counts + alpha  # pseudo-counts of zeros
    A, B = _class_sum(a), _class_sum(b)

    def ll(x, y):  # max_t x log t + y log(1 - t)
        t = x + y
        return _xlogy(x, x) + _xlogy(y, y) - _xlogy(t, t)

    pooled = ll(A, B)
    gain = _class_sum(ll(a, b)) - pooled
    return a, b, pooled, gain


def _fit_bernoulli(counts, n_samples, k, alpha):
    a, b, pooled, gain = _bernoulli_parts(counts, n_samples, alpha)
    top = _top_k(gain, k)
    mask = _top_k_mask(top)
    A, B = _class_sum(a), _class_sum(b)
    theta = jnp.where(mask, a / (a + b), A / (A + B))
    objective = jnp.sum(_xlogy(a, theta) + _xlogy(b, 1 - theta))
    return theta, mask, objective


# --------------------------------------------------------------------------
# Core (jitted): from class sums to a classifier
# --------------------------------------------------------------------------


def _classifier(theta, mask, n_samples, model, log_theta=None):
    log_prior = jnp.log(n_samples) - jnp.log(jnp.sum(n_samples))
    log_theta = jnp.log(theta) if log_theta is None else log_theta
    if model == "bernoulli":
        log1m = jnp.log1p(-theta)
        coef = jnp.where(mask, log_theta - log1m, 0)
        intercept = log_prior + jnp.sum(jnp.where(mask, log1m, 0), axis=1)
    else:
        coef = jnp.where(mask, log_theta, 0)
        intercept = log_prior
    return coef, intercept


@partial(jax.jit, static_argnames=("model", "max_steps", "method"))
def _fit_core(counts, n_samples, k, alpha, tol, *, model, max_steps, method=None):
    dt = counts.dtype
    if model == "bernoulli":
        theta, mask, objective = _fit_bernoulli(counts, n_samples, k, alpha)
        log_theta = None
        upper = lower = objective
        p = n_samples / jnp.sum(n_samples)
        num_steps = jnp.asarray(0, jnp.int32)
        converged = jnp.asarray(True)
    else:
        pb = _multinomial_problem(counts, alpha)
        sol = _solve_dual(pb, k, tol, max_steps, method=method)
        mask, _ = _recover(pb, sol, k)
        theta, log_theta, objective = _theta_from_mask(pb, mask)
        upper, lower, p = sol.upper, sol.lower, sol.p
        num_steps, converged = sol.num_steps, sol.converged
    coef, intercept = _classifier(theta, mask, n_samples, model, log_theta)
    finite = jnp.isfinite(upper) & jnp.isfinite(objective) & jnp.all(jnp.isfinite(theta))
    stats = {
        "num_steps": num_steps,
        "max_steps": jnp.asarray(max_steps if model != "bernoulli" else 0, jnp.int32),
        "gap": (upper - objective).astype(dt),
        "dual_gap": (upper - lower).astype(dt),
        "psi": upper.astype(dt),
        "psi_lower": lower.astype(dt),
        "objective": objective.astype(dt),
        "dual": p.astype(dt),
    }
    return theta, mask, coef, intercept, result_code(converged, finite), stats


@partial(jax.jit, static_argnames=("model", "max_steps", "batch_size"))
def _path_core(counts, n_samples, ks, alpha, tol, *, model, max_steps, batch_size):
    if model == "bernoulli":

        def one(k):
            _, _, objective = _fit_bernoulli(counts, n_samples, k, alpha)
            return objective, objective, objective, jnp.asarray(0, jnp.int32), jnp.asarray(True)

    else:
        pb = _multinomial_problem(counts, alpha)  # shared by every k

        def one(k):
            sol = _solve_dual(pb, k, tol, max_steps)
            _, objective = _recover(pb, sol, k)
            return sol.upper, sol.lower, objective, sol.num_steps, sol.converged

    if batch_size >= ks.shape[0]:
        upper, lower, obj, steps, conv = jax.vmap(one)(ks)
    elif batch_size == 1:  # a plain loop: no batching at all
        upper, lower, obj, steps, conv = lax.map(one, ks)
    else:
        upper, lower, obj, steps, conv = lax.map(one, ks, batch_size=batch_size)
    finite = jnp.isfinite(upper) & jnp.isfinite(obj)
    return upper, lower, obj, steps, result_code(conv, finite)


# --------------------------------------------------------------------------
# Class sums: dense, scipy.sparse, chunked / streaming, Dask
# --------------------------------------------------------------------------


def _is_sparse(X) -> bool:
    return hasattr(X, "tocsr") and hasattr(X, "nnz")


def _is_dask(X) -> bool:
    return hasattr(X, "blocks") and hasattr(X, "chunks") and hasattr(X, "compute")


def _float_dtype(dtype):
    """Dtype of the class sums: at least the default float (float64 under x64).

    Sums of many counts lose integers beyond 2**24 in float32 and the dual
    objective is a difference of large terms, so the sums are upcast; pass a
    float32 :class:`ClassSums` explicitly to fit in float32.
    """
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"X must be real, got dtype {dtype}")
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return jnp.dtype(
            jnp.promote_types(jax.dtypes.canonicalize_dtype(dtype), jnp.result_type(float))
            if np.issubdtype(dtype, np.floating)
            else jnp.result_type(float)
        )
    raise TypeError(f"X must hold numbers, got dtype {dtype}")


def _label_tuple(values) -> tuple:
    return tuple(v.item() if hasattr(v, "item") else v for v in values)


def _encode_labels(y, n, classes):
    """Map labels to codes ``0..C-1``; returns (codes, classes tuple)."""
    if not is_concrete(y):
        if classes is None:
            raise TypeError(
                "y is traced (inside jit/vmap): pass classes=... (the sorted label "
                "values) so that the labels can be encoded without inspecting y"
            )
        cls = np.asarray(classes)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y must have shape ({n},), got {tuple(y.shape)}")
        order = np.argsort(cls, kind="stable")
        codes = jnp.asarray(order)[jnp.searchsorted(jnp.asarray(cls[order]), y)]
        return codes.astype(jnp.int32), _label_tuple(cls)
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D array of labels, got shape {y.shape}")
    if y.shape[0] != n:
        raise ValueError(f"X has {n} rows but y has {y.shape[0]} labels; they must match")
    if classes is None:
        cls = np.unique(y)
    else:
        cls = np.asarray(classes)
        if cls.ndim != 1 or len(np.unique(cls)) != cls.shape[0]:
            raise ValueError(f"classes must be a 1-D sequence of distinct labels, got {classes!r}")
    order = np.argsort(cls, kind="stable")
    sorted_cls = cls[order]
    pos = np.clip(np.searchsorted(sorted_cls, y), 0, max(len(cls) - 1, 0))
    unknown = (sorted_cls[pos] != y) if len(cls) else np.ones(y.shape, bool)
    if np.any(unknown):
        bad = np.unique(y[unknown])
        raise ValueError(f"y contains label(s) {_label_tuple(bad[:10])} that are not in classes {_label_tuple(cls)}")
    return order[pos].astype(np.int32), _label_tuple(cls)


def _describe_entries(rows, cols, vals, limit=5):
    items = [
        f"X[{int(r)}, {int(c)}] = {v.item() if hasattr(v, 'item') else v!r}"
        for r, c, v in zip(rows[:limit], cols[:limit], vals[:limit])
    ]
    return ", ".join(items)


def _check_values(X, model):
    """Value checks on concrete X (dense or scipy.sparse), before any tracing."""
    if _is_sparse(X):
        Xc = X if X.format in ("csr", "csc") else X.tocsr()
        data = np.asarray(Xc.data)

        def where(bad):
            pos = np.flatnonzero(bad)
            major = np.searchsorted(Xc.indptr, pos, side="right") - 1
            minor = Xc.indices[pos]
            rows, cols = (major, minor) if Xc.format == "csr" else (minor, major)
            return rows, cols, data[pos]
    else:
        if not is_concrete(X):
            return
        data = np.asarray(X)

        def where(bad):
            idx = np.argwhere(bad)
            return idx[:, 0], idx[:, 1], data[bad]

    if data.size == 0:
        return
    if np.issubdtype(data.dtype, np.floating):
        bad = ~np.isfinite(data)
        if bad.any():
            r, c, v = where(bad)
            raise ValueError(
                f"X contains {int(bad.sum())} non-finite value(s) (NaN or Inf): {_describe_entries(r, c, v)}"
            )
    bad = data < 0
    if bad.any():
        r, c, v = where(bad)
        raise ValueError(
            f"naive Bayes needs non-negative X (counts or frequencies); found "
            f"{int(bad.sum())} negative entries: {_describe_entries(r, c, v)}" + (" ..." if bad.sum() > 5 else "")
        )
    if model == "bernoulli":
        bad = (data != 0) & (data != 1)
        if bad.any():
            r, c, v = where(bad)
            raise ValueError(
                f"model='bernoulli' needs binary X (0/1 entries); found {int(bad.sum())} "
                f"non-binary entries: {_describe_entries(r, c, v)}"
                + (" ..." if bad.sum() > 5 else "")
                + "; binarise with (X > 0) or use model='multinomial'"
            )


@partial(jax.jit, static_argnames=("num_classes", "dtype"))
def _dense_sums(X, codes, *, num_classes, dtype):
    onehot = jax.nn.one_hot(codes, num_classes, dtype=dtype)
    counts = jnp.matmul(onehot.T, X.astype(dtype), precision=lax.Precision.HIGHEST)
    return counts, jnp.sum(onehot, axis=0)


def _sparse_sums(X, codes, num_classes, dtype):
    """Class sums of a scipy.sparse matrix in O(nnz C), never densifying X."""
    if X.format not in ("csr", "csc"):
        X = X.tocsr()
    codes = np.asarray(codes)
    XT = X.T  # a free transpose (CSR <-> CSC); one sparse mat-vec per class
    counts = np.stack([XT @ (codes == c).astype(np.float64) for c in range(num_classes)])
    n = np.bincount(codes, minlength=num_classes).astype(np.float64)
    return jnp.asarray(counts, dtype), jnp.asarray(n, dtype)


@partial(
    jax.tree_util.register_dataclass,
    data_fields=["counts", "n_samples"],
    meta_fields=["classes"],
)
@dataclasses.dataclass(frozen=True)
class ClassSums:
    """Sufficient statistics of naive Bayes: per-class feature sums and class sizes.

    ``counts[c] = sum_{i: y_i = classes[c]} X[i]`` (shape ``(C, m)``) and
    ``n_samples[c] = #{i: y_i = classes[c]}``. Sums add, so data larger than
    memory is processed chunk by chunk (:meth:`update`) or in parallel pieces
    that are combined with :meth:`merge`; all fitting afterwards needs only
    ``O(C m)`` memory. A pytree (``classes`` is static), so it passes through
    ``jit``.

    Example::

        sums = ClassSums.empty(num_features=5000)
        for X_chunk, y_chunk in stream:          # dense or scipy.sparse chunks
            sums = sums.update(X_chunk, y_chunk)
        sol = sparse_naive_bayes(sums, None, k=100)
    """

    counts: Any
    n_samples: Any
    classes: tuple = ()

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def num_features(self) -> int:
        return int(self.counts.shape[-1])

    @classmethod
    def empty(cls, num_features: int, classes=(), dtype=None) -> ClassSums:
        """Zero sums for ``num_features`` features (and optionally known classes)."""
        dtype = dtype or jnp.result_type(float)
        classes = _label_tuple(np.asarray(classes)) if len(classes) else ()
        C = len(classes)
        return cls(jnp.zeros((C, num_features), dtype), jnp.zeros((C,), dtype), classes)

    def update(self, X, y, *, model: str | None = None) -> ClassSums:
        """Return the sums with one more chunk ``(X, y)`` added (new labels are appended)."""
        return self.merge(class_sums(X, y, model=model))

    def merge(self, other: ClassSums) -> ClassSums:
        """Return the sums of the union of the data behind ``self`` and ``other``."""
        if not isinstance(other, ClassSums):
            raise TypeError(f"can only merge ClassSums, got {type(other).__name__}")
        if self.num_features != other.num_features:
            raise ValueError(f"cannot merge class sums over {self.num_features} and {other.num_features} features")
        dtype = jnp.promote_types(self.counts.dtype, other.counts.dtype)
        if self.classes == other.classes:
            return ClassSums(
                self.counts.astype(dtype) + other.counts.astype(dtype),
                self.n_samples.astype(dtype) + other.n_samples.astype(dtype),
                self.classes,
            )
        union = np.unique(np.asarray(list(self.classes) + list(other.classes)))
        classes = _label_tuple(union)
        index = {c: i for i, c in enumerate(classes)}
        C, m = len(classes), self.num_features
        counts = jnp.zeros((C, m), dtype)
        n = jnp.zeros((C,), dtype)
        for part in (self, other):
            idx = jnp.asarray([index[c] for c in part.classes], jnp.int32)
            if len(part.classes):
                counts = counts.at[idx].add(part.counts.astype(dtype))
                n = n.at[idx].add(part.n_samples.astype(dtype))
        return ClassSums(counts, n, classes)


def class_sums(X, y=None, *, classes=None, model: str | None = None) -> ClassSums:
    """Per-class feature sums ``f_c = sum_{i: y_i = c} x_i`` and class sizes.

    Args:
      X: the data, one of: a dense ``(n, m)`` array (NumPy or JAX, counts or
        floats); a ``scipy.sparse`` matrix (CSR/CSC/..., summed in ``O(nnz C)``
        without densifying); a Dask array (its row blocks are computed and
        summed one at a time); or, with ``y=None``, any iterable of
        ``(X_chunk, y_chunk)`` pairs (data larger than memory).
      y: labels, shape ``(n,)`` (a Dask array is fine with a Dask ``X``).
      classes: the labels to expect, in order; default: the sorted unique labels
        of ``y``. Required when ``y`` is traced (inside ``jit``).
      model: ``"multinomial"`` or ``"bernoulli"`` to validate ``X`` for that model
        (non-negative; binary for Bernoulli); the default only checks that ``X``
        is finite and non-negative.

    Returns:
      :class:`ClassSums`, accumulated in at least the default float dtype
      (float64 when ``jax_enable_x64`` is on, also for float32 or integer ``X``).

    Example::

        sums = class_sums(X_csr, y)            # scipy.sparse, no densification
        sums = class_sums(((X[i:i+1000], y[i:i+1000]) for i in range(0, n, 1000)))
    """
    if model is not None and model not in _MODELS:
        raise ValueError(f"model must be one of {_MODELS}, got {model!r}")
    if y is None:
        if isinstance(X, ClassSums):
            return X
        if hasattr(X, "shape") and not _is_dask(X):
            raise ValueError("y is required unless X is an iterable of (X_chunk, y_chunk) pairs")
        return _sums_from_chunks(X, classes, model)
    if _is_dask(X):
        return _sums_from_dask(X, y, classes, model)
    if _is_sparse(X):
        if len(X.shape) != 2:
            raise ValueError(f"X must be a 2-D matrix, got shape {X.shape}")
        dtype = _float_dtype(X.dtype)
        _check_values(X, model)
        codes, cls = _encode_labels(y, X.shape[0], classes)
        counts, n = _sparse_sums(X, codes, len(cls), dtype)
        return ClassSums(counts, n, cls)
    if not hasattr(X, "shape"):
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {tuple(X.shape)}")
    dtype = _float_dtype(X.dtype)
    _check_values(X, model)
    codes, cls = _encode_labels(y, X.shape[0], classes)
    counts, n = _dense_sums(jnp.asarray(X), jnp.asarray(codes), num_classes=len(cls), dtype=dtype)
    return ClassSums(counts, n, cls)


def _sums_from_chunks(chunks, classes, model) -> ClassSums:
    total = None
    for i, item in enumerate(chunks):
        try:
            Xc, yc = item
        except (TypeError, ValueError):
            raise TypeError(
                f"chunk {i} is not an (X_chunk, y_chunk) pair; iterate over pairs of data and labels"
            ) from None
        part = class_sums(Xc, yc, model=model)
        total = part if total is None else total.merge(part)
    if total is None:
        raise ValueError("no chunks were given")
    if classes is not None:
        total = total.merge(ClassSums.empty(total.num_features, classes, total.counts.dtype))
        extra = set(total.classes) - set(_label_tuple(np.asarray(classes)))
        if extra:
            raise ValueError(f"labels {sorted(extra)} are not in classes {tuple(classes)}")
    return total


def _sums_from_dask(X, y, classes, model) -> ClassSums:
    row_chunks = X.chunks[0]
    if len(X.shape) != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    y_is_dask = _is_dask(y)
    if y_is_dask and tuple(y.chunks[0]) != tuple(row_chunks):
        y = y.rechunk((row_chunks,))
    if not y_is_dask:
        y = np.asarray(y)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} labels; they must match")

    def pairs():
        start = 0
        for i, rows in enumerate(row_chunks):
            Xi = X.blocks[i].compute()
            yi = y.blocks[i].compute() if y_is_dask else y[start : start + rows]
            start += rows
            yield Xi, yi

    return _sums_from_chunks(pairs(), classes, model)


# --------------------------------------------------------------------------
# Fitted model
# --------------------------------------------------------------------------


def _linear_scores(X, coef, intercept, support):
    """``X coef' + intercept``; scipy.sparse X is multiplied on the host (support columns only)."""
    if _is_sparse(X):
        idx = np.flatnonzero(np.asarray(support))
        Xs = X.tocsr()[:, idx]
        W = np.asarray(coef)[:, idx]
        return jnp.asarray(np.asarray(Xs @ W.T)) + intercept
    X = jnp.asarray(X)
    if X.ndim != 2 or X.shape[1] != coef.shape[1]:
        raise ValueError(f"X must have shape (n, {coef.shape[1]}), got {tuple(X.shape)}")
    return jnp.matmul(X.astype(coef.dtype), coef.T, precision=lax.Precision.HIGHEST) + intercept


@partial(
    jax.tree_util.register_dataclass,
    data_fields=["theta", "support", "coef", "intercept"],
    meta_fields=["classes", "model"],
)
@dataclasses.dataclass(frozen=True)
class NaiveBayesModel:
    """A fitted (sparse) naive Bayes classifier.

    Attributes:
      theta: ``(C, m)`` class parameters (multinomial: word probabilities, each
        row sums to one; Bernoulli: ``P(x_j = 1 | class)``). Outside ``support``
        all classes share one value.
      support: ``(m,)`` boolean mask of the (at most ``k``) features on which the
        classes differ -- the selected features.
      coef, intercept: the linear decision rule: the joint log-likelihood is
        ``X @ coef.T + intercept`` up to a class-independent term;
        ``coef`` is zero outside ``support``.
      classes: the class labels (static).
      model: ``"multinomial"`` or ``"bernoulli"`` (static).
    """

    theta: Any
    support: Any
    coef: Any
    intercept: Any
    classes: tuple = ()
    model: str = "multinomial"

    def joint_log_likelihood(self, X):
        """``(n, C)`` class scores ``log P(c) + log P(x | c)`` (up to a per-row constant)."""
        return _linear_scores(X, self.coef, self.intercept, self.support)

    def decision_function(self, X):
        """Log-odds ``score(classes[1]) - score(classes[0])`` for two classes, else ``(n, C)`` scores."""
        jll = self.joint_log_likelihood(X)
        return jll[:, 1] - jll[:, 0] if jll.shape[1] == 2 else jll

    def predict_log_proba(self, X):
        jll = self.joint_log_likelihood(X)
        return jll - jax.scipy.special.logsumexp(jll, axis=1, keepdims=True)

    def predict_proba(self, X):
        return jnp.exp(self.predict_log_proba(X))

    def predict_index(self, X):
        """Index (into ``classes``) of the most likely class."""
        return jnp.argmax(self.joint_log_likelihood(X), axis=1)

    def predict(self, X):
        """Most likely class labels (NumPy array of ``classes`` values)."""
        idx = self.predict_index(X)
        if not is_concrete(idx):
            return jnp.asarray(self.classes)[idx]
        return np.asarray(self.classes)[np.asarray(idx)]


class SNBPath(NamedTuple):
    """A k-path of sparse naive Bayes: bounds and recovered objectives per ``k``."""

    k: jax.Array  # (K,) sparsity levels
    psi: jax.Array  # (K,) certified upper bound psi(k) >= phi(k)
    psi_lower: jax.Array  # (K,) certified lower bound on psi(k) (dual solver accuracy)
    objective: jax.Array  # (K,) log-likelihood of the recovered k-sparse point <= phi(k)
    gap: jax.Array  # (K,) psi - objective >= phi(k) - objective


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def _check_model_alpha(model, alpha):
    if model not in _MODELS:
        raise ValueError(f"model must be one of {_MODELS}, got {model!r}")
    if is_concrete(alpha):
        a = np.asarray(alpha)
        if a.ndim != 0 or not np.isfinite(a) or a < 0:
            raise ValueError(f"alpha (Laplace smoothing) must be a finite number >= 0, got {alpha!r}")


def _check_k(k, m, name="k"):
    if isinstance(k, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {k!r}")
    if is_concrete(k):
        arr = np.asarray(k)
        if not np.issubdtype(arr.dtype, np.integer):
            if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
                arr = arr.astype(np.int64)
            else:
                raise TypeError(f"{name} must be an integer number of features, got {k!r}")
        if np.any(arr < 0) or np.any(arr > m):
            bad = arr[(arr < 0) | (arr > m)].ravel()[:5]
            raise ValueError(f"{name} must lie in [0, {m}] (the number of features), got {bad.tolist()}")
        return arr
    if not jnp.issubdtype(k.dtype, jnp.integer):
        raise TypeError(f"{name} must have an integer dtype, got {k.dtype}")
    return k


def _check_sums(sums: ClassSums, model, alpha=1.0):
    C = sums.num_classes
    if C < 2:
        raise ValueError(
            f"sparse naive Bayes needs at least two classes, got {C}"
            + (f" (only label {sums.classes[0]!r})" if C == 1 else "")
        )
    if is_concrete(sums.n_samples):
        n = np.asarray(sums.n_samples)
        empty = [c for c, v in zip(sums.classes, n) if v <= 0]
        if empty:
            raise ValueError(f"class(es) {empty} have no samples")
    if is_concrete(sums.counts):
        counts = np.asarray(sums.counts)
        if not np.all(np.isfinite(counts)):
            raise ValueError("the class sums contain NaN or Inf")
        if np.any(counts < 0):
            raise ValueError("the class sums contain negative values; X must be non-negative")
        if model == "multinomial" and is_concrete(alpha) and float(alpha) == 0:
            empty = [c for c, t in zip(sums.classes, counts.sum(axis=1)) if t <= 0]
            if empty:
                raise ValueError(
                    f"class(es) {empty} have all-zero counts, so their multinomial "
                    "parameters are undefined with alpha=0; use alpha > 0"
                )
        if model == "bernoulli" and is_concrete(sums.n_samples):
            over = counts > np.asarray(sums.n_samples)[:, None]
            if over.any():
                c, j = np.argwhere(over)[0]
                raise ValueError(
                    "model='bernoulli' needs binary X, but the class sums exceed the "
                    f"class sizes (e.g. feature {j} in class {sums.classes[c]!r}); "
                    "binarise with (X > 0) or use model='multinomial'"
                )


def _default_tol(dtype):
    return 1e-10 if jnp.dtype(dtype) == jnp.float64 else 1e-5


def _as_sums(X, y, classes, model) -> ClassSums:
    if isinstance(X, ClassSums):
        if y is not None:
            raise ValueError("pass y=None when X is a ClassSums")
        if classes is not None and tuple(_label_tuple(np.asarray(classes))) != X.classes:
            raise ValueError(f"classes {tuple(classes)} do not match the sums' classes {X.classes}")
        return X
    return class_sums(X, y, classes=classes, model=model)


def sparse_naive_bayes(
    X,
    y,
    k,
    *,
    model: str = "multinomial",
    alpha=1.0,
    classes=None,
    tol=None,
    max_steps: int = 100,
    throw: bool = False,
) -> Solution:
    r"""Naive Bayes with at most ``k`` features: exact (Bernoulli) or dual-certified (multinomial).

    Solves ``max_theta L(theta)`` s.t. the class parameters differ on at most
    ``k`` features (see the module docstring for the exact objectives):

    * ``model="bernoulli"`` (binary ``X``): exact, ``theta`` = top-``k`` of the
      per-feature log-likelihood gain of separate class parameters over pooled
      ones (Theorem 3; any number of classes).
    * ``model="multinomial"``: the dual
      ``psi(k) = K + min_{p in simplex} s_k(h(p))`` is solved (bisection on
      ``p = (a, 1 - a)`` for two classes; fully corrective Frank-Wolfe on the
      dual of the dual for ``C > 2``), then a primal point is recovered in closed
      form on ``T = top-k of h(p*)`` (Theorem 4; or, when better, a neighbouring
      top-``k`` set or the rounded optimal mixture of such sets). Certified:
      ``objective <= phi(k) <= psi(k) <= stats["psi"]`` and, by Shapley-Folkman,
      ``psi(k - C - 2) <= phi(k)`` (``psi(k-4)`` for two classes).

    Laplace smoothing ``alpha`` is applied as in scikit-learn; with ``k = m``
    the result equals ``MultinomialNB(alpha)`` / ``BernoulliNB(alpha)``.

    Args:
      X: ``(n, m)`` non-negative data (dense, ``scipy.sparse``, Dask, or an
        iterable of ``(X_chunk, y_chunk)`` with ``y=None``), or a
        :class:`ClassSums` (then ``y=None``).
      y: ``(n,)`` labels (at least two classes).
      k: number of features allowed to differ between classes, ``0 <= k <= m``
        (may be traced: no recompilation per ``k``; vmappable).
      model: ``"multinomial"`` (counts) or ``"bernoulli"`` (binary X).
      alpha: Laplace smoothing (pseudo-count), ``>= 0``.
      classes: label order (default: sorted unique labels); needed under ``jit``.
      tol: relative tolerance on the dual gap ``psi_upper - psi_lower``
        (default ``1e-10`` in float64, ``1e-5`` in float32).
      max_steps: maximum number of dual steps.
      throw: raise ``RuntimeError`` if the dual solve did not converge.

    Returns:
      :class:`~jaxknock.Solution` with ``value`` a :class:`NaiveBayesModel`
      (``theta``, ``support``, ``coef``, ``intercept``; ``predict`` ...),
      ``result`` a ``RESULTS`` code and ``stats``: ``objective`` (log-likelihood
      of the returned point), ``psi`` (upper bound on the optimum), ``gap``
      (``psi - objective``, certified sub-optimality), ``dual_gap`` (accuracy of
      the dual solve), ``psi_lower``, ``dual`` (the dual point ``p``; class
      frequencies for Bernoulli), ``num_steps``, ``max_steps``. Bernoulli is
      exact: ``gap = 0``, ``num_steps = max_steps = 0``. ``state`` holds the
      :class:`ClassSums` (reuse them for other ``k`` or a path).

    Example::

        >>> import numpy as np, jaxknock as jk
        >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
        >>> sol = jk.sparse_naive_bayes(X, y, 5)
        >>> int(sol.value.support.sum()), bool(sol.stats["gap"] >= -1e-9)
        (5, True)
        >>> labels = sol.value.predict(X)
    """
    _check_model_alpha(model, alpha)
    if not isinstance(max_steps, numbers.Integral) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    sums = _as_sums(X, y, classes, model)
    _check_sums(sums, model, alpha)
    m = sums.num_features
    k = _check_k(k, m)
    dtype = sums.counts.dtype
    tol = _default_tol(dtype) if tol is None else tol
    theta, mask, coef, intercept, code, stats = _fit_core(
        sums.counts,
        sums.n_samples,
        jnp.asarray(k, jnp.int32),
        jnp.asarray(alpha, dtype),
        jnp.asarray(tol, dtype),
        model=model,
        max_steps=int(max_steps),
    )
    value = NaiveBayesModel(theta, mask, coef, intercept, sums.classes, model)
    return raise_if_failed(Solution(value, code, stats, sums), throw)


def sparse_naive_bayes_path(
    X,
    y,
    ks,
    *,
    model: str = "multinomial",
    alpha=1.0,
    classes=None,
    tol=None,
    max_steps: int = 100,
    batch_size: int | None = None,
    throw: bool = False,
) -> Solution:
    r"""The dual bound ``psi(k)`` and the recovered objective for a whole path of ``k``.

    One call, one pass over the data: the class sums are formed once and the
    dual is solved for every ``k`` with ``vmap`` (in batches of ``batch_size``
    values of ``k`` to bound memory at ``O(batch_size * C * m)``). Plot
    ``psi`` against ``k`` and read off the elbow; by Shapley-Folkman the
    optimum satisfies ``psi(k - C - 2) <= phi(k) <= psi(k)``, and
    ``objective(k) <= phi(k)`` for the recovered point. For the Bernoulli model
    ``psi = objective = phi(k)`` exactly.

    Args:
      X, y, model, alpha, classes, tol, max_steps, throw: as in
        :func:`sparse_naive_bayes`.
      ks: 1-D integer array of sparsity levels in ``[0, m]``.
      batch_size: how many ``k`` to solve at once with ``vmap`` (the batches run
        one after another with ``lax.map``). Default: 1 on CPU, where XLA's
        batched scatter is slower than a loop; elsewhere as many as fit in about
        ``2**24`` elements per array.

    Returns:
      :class:`~jaxknock.Solution` with ``value`` an :class:`SNBPath`
      ``(k, psi, psi_lower, objective, gap)``, ``result`` a ``RESULTS`` code per
      ``k`` and ``stats`` with ``num_steps`` (per ``k``), ``max_steps``, ``gap``
      and ``dual_gap``.

    Example::

        >>> ks = np.unique(np.geomspace(1, X.shape[1], 20).astype(int))
        >>> path = jk.sparse_naive_bayes_path(X, y, ks).value
        >>> path.psi.shape == ks.shape
        True
    """
    _check_model_alpha(model, alpha)
    if not isinstance(max_steps, numbers.Integral) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    sums = _as_sums(X, y, classes, model)
    _check_sums(sums, model, alpha)
    m = sums.num_features
    ks_arr = _check_k(ks if not is_concrete(ks) else np.asarray(ks), m, "ks")
    if ks_arr.ndim != 1:
        raise ValueError(f"ks must be a 1-D array of sparsity levels, got shape {tuple(ks_arr.shape)}")
    if batch_size is None:
        # XLA:CPU runs a batched scatter (the radix histograms) slower than a loop
        # over k; accelerators vmap as many k as fit in ~2**24 elements per array.
        on_cpu = jax.default_backend() == "cpu"
        budget = 1 if on_cpu else 2**24 // max(m * sums.num_classes, 1)
        batch_size = int(max(1, min(ks_arr.shape[0], budget)))
    elif not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    dtype = sums.counts.dtype
    tol = _default_tol(dtype) if tol is None else tol
    upper, lower, obj, steps, code = _path_core(
        sums.counts,
        sums.n_samples,
        jnp.asarray(ks_arr, jnp.int32),
        jnp.asarray(alpha, dtype),
        jnp.asarray(tol, dtype),
        model=model,
        max_steps=int(max_steps),
        batch_size=int(batch_size),
    )
    value = SNBPath(jnp.asarray(ks_arr), upper, lower, obj, upper - obj)
    stats = {
        "num_steps": steps,
        "max_steps": jnp.asarray(max_steps if model != "bernoulli" else 0, jnp.int32),
        "gap": upper - obj,
        "dual_gap": upper - lower,
    }
    return raise_if_failed(Solution(value, code, stats, sums), throw)


class SparseNaiveBayes:
    """Scikit-learn style feature selector and classifier (sparse naive Bayes).

    ``fit`` solves :func:`sparse_naive_bayes`; ``transform`` keeps the selected
    columns (dense, JAX or ``scipy.sparse`` X), ``predict`` / ``predict_proba``
    / ``decision_function`` use the sparse naive Bayes classifier itself. Works
    in ``sklearn.pipeline.Pipeline`` and with ``sklearn.base.clone`` (it
    implements ``get_params`` / ``set_params``) without depending on
    scikit-learn.

    Args:
      k: number of features to select.
      model: ``"multinomial"`` or ``"bernoulli"``.
      alpha: Laplace smoothing.

    Example::

        >>> sel = SparseNaiveBayes(k=100).fit(X_train, y_train)
        >>> X_small = sel.transform(X_train)        # the 100 selected columns
        >>> acc = (sel.predict(X_test) == y_test).mean()
    """

    def __init__(self, k: int = 10, model: str = "multinomial", alpha: float = 1.0):
        self.k = k
        self.model = model
        self.alpha = alpha

    # -- scikit-learn protocol
    def get_params(self, deep: bool = True) -> dict:
        return {"k": self.k, "model": self.model, "alpha": self.alpha}

    def set_params(self, **params) -> SparseNaiveBayes:
        for name, value in params.items():
            if name not in ("k", "model", "alpha"):
                raise ValueError(f"invalid parameter {name!r} for SparseNaiveBayes")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        return f"SparseNaiveBayes(k={self.k!r}, model={self.model!r}, alpha={self.alpha!r})"

    def _check_fitted(self):
        if not hasattr(self, "solution_"):
            raise RuntimeError("this SparseNaiveBayes is not fitted yet; call fit(X, y) first")

    def fit(self, X, y=None, **fit_params) -> SparseNaiveBayes:
        sol = sparse_naive_bayes(X, y, self.k, model=self.model, alpha=self.alpha, **fit_params)
        nb = sol.value
        self.solution_ = sol
        self.model_ = nb
        self.classes_ = np.asarray(nb.classes)
        self.n_features_in_ = int(nb.theta.shape[1])
        self.support_ = np.asarray(nb.support)
        self.coef_ = np.asarray(nb.coef)
        self.intercept_ = np.asarray(nb.intercept)
        self.theta_ = np.asarray(nb.theta)
        self.objective_ = float(sol.stats["objective"])
        self.psi_ = float(sol.stats["psi"])
        self.gap_ = float(sol.stats["gap"])
        self.result_ = int(sol.result)
        return self

    def get_support(self, indices: bool = False):
        self._check_fitted()
        return np.flatnonzero(self.support_) if indices else self.support_.copy()

    def transform(self, X):
        self._check_fitted()
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but the selector was fitted on {self.n_features_in_}")
        idx = self.get_support(indices=True)
        if _is_sparse(X):
            return X.tocsr()[:, idx] if X.format not in ("csr", "csc") else X[:, idx]
        if isinstance(X, jax.Array):
            return X[:, jnp.asarray(idx)]
        return np.asarray(X)[:, idx]

    def fit_transform(self, X, y=None, **fit_params):
        return self.fit(X, y, **fit_params).transform(X)

    def decision_function(self, X):
        self._check_fitted()
        return np.asarray(self.model_.decision_function(X))

    def predict_log_proba(self, X):
        self._check_fitted()
        return np.asarray(self.model_.predict_log_proba(X))

    def predict_proba(self, X):
        self._check_fitted()
        return np.asarray(self.model_.predict_proba(X))

    def predict(self, X):
        self._check_fitted()
        return self.model_.predict(X)

    def score(self, X, y) -> float:
        return float(np.mean(self.predict(X) == np.asarray(y)))
