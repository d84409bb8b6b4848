r"""Covariance ("Gram") engine of :mod:`jaxknock.l1.working_set`: squared loss, ``n >= ~m/4``.

Every member ``f`` of the batch (the ``K`` training folds and the full data)
solves, along a decreasing grid of penalties,

.. math::

    \min_\beta \tfrac{1}{2 n_f} \|y_c - X_c \beta\|^2 + \lambda \|\beta\|_1,
    \qquad g(\beta) = q - C\beta,\quad q = X_c^\top y_c / n_f,\ C = X_c^\top X_c / n_f,

with ``X_c, y_c`` centred on the member's rows (the unpenalised intercept).
Only the ``W x W`` block of ``C`` on a *working set* (shared by all members,
capacity ``W``, indexed by cache position) is ever formed, as a ``(M, W, W)``
array, next to the design columns of the working set ``X_W``: the rows of the
design are sorted into the ``K`` fold blocks once, the block products
``X_{b,W}^T X_b[:, new]`` are computed for a chunk of new features, and every
member's columns are "all blocks minus its held-out block", so a chunk costs
``2 n W B`` flops for all ``K + 1`` members together (a chunk of a quarter
size when few features join). Along the path:

* the sequential strong rule ``|g_j(\beta_{k-1})| >= 2\lambda_k - \lambda_{k-1}``
  (any member) proposes features for the working set;
* cyclic coordinate descent on the working set (``O(W)`` per coordinate
  through the cached Gram block), glmnet's active-set cycling (sweeps over the
  nonzero coordinates until they settle, then one sweep over the working set);
* a KKT check on all ``m`` features, ``g = q - X^T(t_f \odot X_W \beta_W)/n_f + \dots``
  from the design (two products with ``M`` right-hand sides for all members);
  violators join the working set and the solve resumes.

Held-out errors are the residuals of the held-out rows, from the fitted values
``X_W \beta`` that the KKT check computes anyway (:func:`kkt_refresh`), so the CV
statistics cost ``O(n M)`` per grid point.

A tall design (``n >= 2 m``, ``m <= 1024``: :func:`use_gram`) keeps the per-block
Gram matrices ``G_b = X_b^T X_b`` instead (``n m^2`` flops once): the KKT check is
``\sum_{b \in t_f} G_b[:, W] \beta`` (``O(B M m W)``, no pass over the rows), new
cache columns are read from ``G``, and the held-out errors come from held-out sums and
the product ``G_{e_f} \beta_f`` of that check (float64; float32 reads the design once per
grid point). At ``n = 20 000, m = 100`` the filter's CV went from 0.95 to 0.33 s
(session 45); from ``n >= 2 m`` instead of ``8 m``, a path at 2000 x 500 went 2.6x
faster (session 48).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._iterate import lockstep_while_loop

_HI = lax.Precision.HIGHEST
NEWTON = True


class CovData(NamedTuple):
    """Per-member sufficient statistics (``M`` members, ``m`` features)."""

    Xb: jax.Array  # (B, rows, m) design rows sorted into blocks, zero padded
    excl: jax.Array  # (M,) held-out block of each member, -1 for none
    nf: jax.Array  # (M,) training rows
    mu: jax.Array  # (M, m) column means
    q: jax.Array  # (M, m) X_c^T y_c / n_f
    yvar: jax.Array  # (M,) ||y_c||^2 / n_f
    ybar: jax.Array  # (M,)
    # held-out block statistics (indexed by member; zeros for the full member)
    nt: jax.Array  # (M,) held-out rows
    yb: jax.Array  # (B, rows) the response less yshift in the block layout, zero padded
    real: jax.Array  # (B, rows) bool: a row of the data (not padding)
    yshift: jax.Array  # () the mean of y over all rows, taken out before the sums (see cov_data)
    xshift: jax.Array  # (m,) the column means over all rows, taken out of X likewise
    # (B, m, m) per-block Gram matrices X_b^T X_b of a tall design (cov_data's ``gram``), else None
    G: jax.Array | None = None
    # float64 with G: each member's held-out sums (column sums (M, m), X^T y (M, m), sum y, sum y^2 (M,)),
    # from which fit_stats forms the held-out errors without reading the rows (else None)
    held: tuple | None = None


class CovState(NamedTuple):
    idx: jax.Array  # (Wc,) int32 working-set features (valid for t < size)
    size: jax.Array  # () int32
    inws: jax.Array  # (m,) bool
    C: jax.Array  # (M, Wc, Wc) Gram block of the working set, in cache positions
    beta: jax.Array  # (M, Wc)
    grad: jax.Array  # (M, m) full gradient q - C beta at the last check
    overflow: jax.Array  # () bool: a feature could not join (capacity W)
    XW: jax.Array  # (B, r, Wc) design columns of the working set, in the block layout
    fit: jax.Array  # (B, r, M) X_W beta of every member on every row, at the last KKT check (with G: see init_state)


def cov_data(X, y, rows, excl, gram: bool = False, held_sums: bool = False) -> CovData:
    """Sufficient statistics from the block layout ``rows`` ``(B, r)`` (``n`` = padding).

    ``gram``: also the per-block Gram matrices ``X_b^T X_b`` (``B m^2`` numbers, ``n m^2`` flops once), so
    that the KKT checks and the held-out errors never read the ``n`` rows again (:func:`use_gram`).
    ``held_sums`` (with ``gram``, float64): the held-out errors from sums (:func:`fit_stats`); not for
    a design under ``vmap``, where the KKT product's rounding (which they share) depends on the batch
    and a batch run in chunks would not give the held-out errors of the whole batch to the bit.

    The means of ``y`` and of the columns of ``X`` over all rows are taken out first
    (``yshift``, ``xshift``; :func:`fit_stats` gives the intercepts of the data as
    they came): ``mu``, ``q``, ``yvar`` and the members' Gram matrices are differences
    of sums, and with ``y`` or a column far from zero they cancel. A float32 response
    of ``1e6 + O(1)`` gave the lasso CV a KKT violation of 0.36 that its own (equally
    cancelled) check called optimal (session 27); float64 columns offset by ``1e4``
    ended ``max_steps_reached``, and by ``1e8`` at a penalty ten times too small
    (session 50).
    """
    n, m = X.shape
    yshift = jnp.mean(y)
    xshift = jnp.mean(X, axis=0)
    Xz = jnp.concatenate([X - xshift, jnp.zeros((1, m), X.dtype)])
    yz = jnp.concatenate([y - yshift, jnp.zeros((1,), y.dtype)])
    Xb = Xz[rows]
    yb = yz[rows]
    cnt = (rows < n).sum(1).astype(X.dtype)
    s = Xb.sum(1)
    u = jnp.einsum("brm,br->bm", Xb, yb, precision=_HI)
    sy = yb.sum(1)
    syy = (yb * yb).sum(1)
    has = excl >= 0
    e = jnp.maximum(excl, 0)

    def held(a):
        return jnp.where(has.reshape((-1,) + (1,) * (a.ndim - 1)), a[e], 0)

    nt, st, ut, syt, syyt = held(cnt), held(s), held(u), held(sy), held(syy)
    nf = cnt.sum() - nt
    mu = (s.sum(0) - st) / nf[:, None]
    ybar = (sy.sum() - syt) / nf
    q = (u.sum(0) - ut) / nf[:, None] - mu * ybar[:, None]
    yvar = (syy.sum() - syyt) / nf - ybar**2
    G = jnp.einsum("brm,brk->bmk", Xb, Xb, precision=_HI) if gram else None
    held = (st, ut, syt, syyt) if gram and held_sums and jnp.finfo(X.dtype).bits >= 64 else None
    return CovData(Xb, excl, nf, mu, q, yvar, ybar, nt, yb, rows < n, yshift, xshift, G, held)


# a design with at least this many rows per feature (and at most GRAM_MAX_FEATURES features) keeps the
# per-block Gram matrices: its KKT check then costs O(B M m W) instead of two passes over the n rows
GRAM_ROWS_PER_FEATURE = 2
GRAM_MAX_FEATURES = 1024


def use_gram(n: int, m: int) -> bool:
    """Whether :func:`cov_data` should keep the per-block Gram matrices of an ``n x m`` design (static).

    They cost ``n m^2`` flops once and ``B m^2`` numbers; a KKT check reads ``n (m + W) M`` numbers
    without them, and the path makes hundreds of checks, so designs with ``n >= 2 m`` gain (measured,
    session 48, warm float64: ``lasso_path`` 2000 x 500 AR(1) 2.6x and 1000 x 500 2.1x faster, the
    5-fold CV 18% and within noise; the knockoff filter's ``[X, X_k]`` at n = 600, p = 200 is
    1.5 rows per feature and keeps reading the design).

    Example:
        >>> use_gram(1000, 500), use_gram(600, 400), use_gram(100_000, 2000)
        (True, False, False)
    """
    return n >= GRAM_ROWS_PER_FEATURE * m and m <= GRAM_MAX_FEATURES


def init_state(d: CovData, Wc: int) -> CovState:
    M, m = d.q.shape
    dt = d.q.dtype
    return CovState(
        idx=jnp.zeros((Wc,), jnp.int32),
        size=jnp.int32(0),
        inws=jnp.zeros((m,), bool),
        C=jnp.zeros((M, Wc, Wc), dt),
        beta=jnp.zeros((M, Wc), dt),
        grad=d.q,
        overflow=jnp.bool_(False),
        # with the Gram matrices no design columns are kept (empty), and ``fit`` is each member's held-out
        # block Gram times its coefficients, G_{e_f} b_f (M, m), which the KKT check computes anyway
        XW=jnp.zeros(d.Xb.shape[:2] + (0 if d.G is not None else Wc,), dt),
        fit=jnp.zeros((M, m) if d.G is not None else d.Xb.shape[:2] + (M,), dt),
    )


def _top_candidates(score, k: int):
    """Up to ``k`` entries with ``score >= 1`` (the highest first when there are more): ``(values, indices)``.

    With at most ``k`` candidates (the common case along a path) they are taken
    in index order without a sort; otherwise ``lax.top_k``.
    """
    cnt = jnp.sum(score >= 1.0)

    def by_index(s):
        idx = jnp.nonzero(s >= 1.0, size=k, fill_value=0)[0].astype(jnp.int32)
        return jnp.where(jnp.arange(k) < cnt, s[idx], -1.0), idx

    return lax.cond(cnt <= k, by_index, lambda s: tuple(lax.top_k(s, k)), score)


def _chunk_columns(d: CovData, st: CovState, score, k: int, W: int):
    """The ``k`` best candidates (``score >= 1``, room permitting), their design columns
    ``(B, r, k)`` and their Gram columns on the cache positions, themselves included ``(M, Wc, k)``.
    """
    val, new = _top_candidates(score, k)
    ok = (val >= 1.0) & (jnp.arange(k) < W - st.size)
    new = jnp.where(ok, new, 0).astype(jnp.int32)
    zero = jnp.int32(0)
    Wc = st.idx.shape[0]
    pos_ok = jnp.arange(Wc) < st.size + ok.sum()
    if d.G is not None:  # the block products are read from the Gram matrices; no design columns kept
        idx = lax.dynamic_update_slice(st.idx, new, (st.size,))
        P = jnp.take(jnp.take(d.G, idx, axis=1), new, axis=2)  # (B, Wc, k)
        P = jnp.where(pos_ok[:, None] & ok[None, :], P, 0)
        cols = jnp.zeros(d.Xb.shape[:2] + (0,), d.Xb.dtype)
    else:
        cols = jnp.where(ok, d.Xb[:, :, new], 0)  # (B, r, k)
        # old cache columns (zero beyond size) against the new ones, then the new block itself
        P = jnp.einsum("brw,brc->bwc", st.XW, cols, precision=_HI)
        new_block = jnp.einsum("brc,brd->bcd", cols, cols, precision=_HI)
        P = lax.dynamic_update_slice(P, new_block, (zero, st.size, zero))
    tot = P.sum(0)
    has = (d.excl >= 0)[:, None, None]
    Ptr = tot[None] - jnp.where(has, P[jnp.maximum(d.excl, 0)], 0)
    mu_new = jnp.where(ok, d.mu[:, new], 0)  # (M, k)
    mu_w = jnp.where(pos_ok, lax.dynamic_update_slice(jnp.take(d.mu, st.idx, axis=1), mu_new, (zero, st.size)), 0)
    Cnew = Ptr / d.nf[:, None, None] - mu_w[:, :, None] * mu_new[:, None, :]
    return new, ok, Cnew, cols


def _add_chunk(d: CovData, st: CovState, score, chunk: int, W: int) -> CovState:
    """Add the ``chunk`` highest-scoring candidates (score >= 1) to the working set.

    When at most ``chunk // 4`` candidates are pending, only that many Gram
    columns are formed (the padding columns are zeros beyond ``size``).
    """
    small = chunk // 4

    def part(k):
        def f(score):
            new, ok, Cnew, cols = _chunk_columns(d, st, score, k, W)
            pad = chunk - k
            return (
                jnp.pad(new, (0, pad)),
                jnp.pad(ok, (0, pad)),
                jnp.pad(Cnew, ((0, 0), (0, 0), (0, pad))),
                jnp.pad(cols, ((0, 0), (0, 0), (0, pad if cols.shape[2] else 0))),
            )

        return f

    if small >= 1:
        few = jnp.sum(score >= 1.0) <= small
        new, ok, Cnew, cols = lax.cond(few, part(small), part(chunk), score)
    else:
        new, ok, Cnew, cols = part(chunk)(score)
    zero = jnp.int32(0)
    C = lax.dynamic_update_slice(st.C, Cnew, (zero, zero, st.size))  # new columns
    C = lax.dynamic_update_slice(C, jnp.swapaxes(Cnew, 1, 2), (zero, st.size, zero))  # and rows
    XW = st.XW if d.G is not None else lax.dynamic_update_slice(st.XW, cols, (zero, zero, st.size))
    idx = lax.dynamic_update_slice(st.idx, new, (st.size,))
    nadd = ok.sum().astype(jnp.int32)
    inws = st.inws.at[new].max(ok)
    return st._replace(idx=idx, size=st.size + nadd, inws=inws, C=C, XW=XW)


# jitted (inlined by XLA) so that its two call sites per penalty share one trace: tracing is most
# of a fresh process's first call of the engine
@functools.partial(jax.jit, static_argnums=(4, 5))
def add_features(d: CovData, st: CovState, cand, score, chunk: int, W: int) -> CovState:
    """Move every candidate feature (``cand``) into the working set, chunk by chunk.

    A design with no candidate left (or a full working set) is left as it is by
    a chunk step (nothing joins; zeros are written onto the zero columns past
    ``size``), so a batch of designs runs in lock step without copying its
    caches (:func:`jaxknock._iterate.lockstep_while_loop`).
    """

    def cond(ops, s):
        _, cand, score = ops
        # only a candidate that can join (score >= 1; a NaN score never does) keeps the loop going:
        # one that cannot is left out and flagged as an overflow below, instead of looping forever
        return jnp.any(cand & ~s.inws & (score >= 1)) & (s.size < W)

    def body(ops, s):
        dd, cand, score = ops
        return _add_chunk(dd, s, jnp.where(cand & ~s.inws, score, -1.0), chunk, W)

    st = lockstep_while_loop(cond, body, (d, cand, score), st)
    return st._replace(overflow=st.overflow | jnp.any(cand & ~st.inws))


def _soft(z, t):
    return jnp.sign(z) * jnp.maximum(jnp.abs(z) - t, 0)


def kkt_ws(gw, beta, lam, mask):
    """Largest KKT violation ``dist(g_j, lam * d|beta_j|)`` over ``mask`` (per member)."""
    v = jnp.where(beta != 0, jnp.abs(gw - lam * jnp.sign(beta)), jnp.maximum(jnp.abs(gw) - lam, 0))
    return jnp.max(jnp.where(mask, v, 0), axis=-1)


def _cg(H, rhs, x0, steps):
    """Batched conjugate gradients for SPD ``H x = rhs`` (fixed number of steps)."""

    def mv(v):
        return jnp.einsum("fij,fj->fi", H, v, precision=_HI)

    r = rhs - mv(x0)
    p = r
    rr = (r * r).sum(1)

    def body(_, c):
        x, r, p, rr = c
        Hp = mv(p)
        a = rr / jnp.maximum((p * Hp).sum(1), jnp.finfo(H.dtype).tiny)
        x = x + a[:, None] * p
        r = r - a[:, None] * Hp
        rr1 = (r * r).sum(1)
        p = r + (rr1 / jnp.maximum(rr, jnp.finfo(H.dtype).tiny))[:, None] * p
        return x, r, p, rr1

    return lax.fori_loop(0, steps, body, (x0, r, p, rr))[0]


def solve_ws(d: CovData, st: CovState, lam, tol, max_epochs, newton_cap: int = 256, cg_steps: int = 25):
    """Coordinate descent on the working set with active-set cycling.

    Returns the new state, the number of epochs and a convergence flag.
    Converged when, after a sweep over the whole working set, every
    coordinate satisfies its KKT condition to ``tol * lam``
    (the working-set gradient ``q_W - G_WW beta_W`` is maintained exactly).
    """
    M, Wc = st.beta.shape
    G = st.C  # (M, Wc, Wc)
    valid = jnp.arange(Wc) < st.size
    diag = jnp.where(valid[None], jnp.diagonal(G, axis1=1, axis2=2), 1.0)
    diag = jnp.maximum(diag, jnp.finfo(G.dtype).tiny)
    qw = jnp.take(d.q, st.idx, axis=1)
    gw = qw - jnp.einsum("fij,fj->fi", G, st.beta, precision=_HI)
    full_order = jnp.arange(Wc, dtype=jnp.int32)

    def sweep(beta, gw, order, count):
        # order[:count] has no repeats: coordinate j is read from the pass's start (a loop constant) and
        # written to the carried copy, which XLA then updates in place (_ws_naive.solve_ws's sweep)
        def body(t, c):
            out, gw = c
            j = order[t]
            dj = diag[:, j]
            bj = beta[:, j]
            bn = _soft(gw[:, j] + dj * bj, lam) / dj
            delta = bn - bj
            gw = gw - G[:, j, :] * delta[:, None]
            return out.at[:, j].set(bn), gw

        return lax.fori_loop(0, count, body, (beta, gw))

    A = min(Wc, newton_cap)

    def newton(beta, gw):
        # Active-set Newton step: the minimiser on the current orthant solves
        # G_AA b_A = q_A - lam s_A. Move towards it up to the first sign change
        # (the objective is a convex quadratic on the segment, so it decreases).
        nz = beta != 0  # (M, Wc)
        cnt = nz.sum(1)
        pos = jnp.argsort(~nz, axis=1, stable=True)[:, :A]  # active first
        am = jnp.take_along_axis(nz, pos, 1)
        Gs = jnp.take_along_axis(jnp.take_along_axis(G, pos[:, :, None], 1), pos[:, None, :], 2)
        eye = jnp.eye(A, dtype=G.dtype)
        H = jnp.where(am[:, :, None] & am[:, None, :], Gs, 0) + jnp.where(am[:, :, None], 0, eye)
        b = jnp.take_along_axis(beta, pos, 1)
        rhs = jnp.where(am, jnp.take_along_axis(qw, pos, 1) - lam * jnp.sign(b), 0)
        # conjugate gradients from b (XLA's CPU Cholesky is slow for batched blocks); every CG
        # iterate lowers the orthant quadratic, which is all the segment step below needs
        bn = _cg(H, rhs, b, cg_steps)
        d = jnp.where(am, bn - b, 0)
        # largest step in [0, 1] keeping every active sign
        cross = am & (jnp.sign(bn) != jnp.sign(b))
        tj = jnp.where(cross, b / jnp.where(cross, b - bn, 1), jnp.inf)
        t = jnp.clip(jnp.min(tj, axis=1), 0, 1)
        ok = (cnt <= A) & jnp.all(jnp.isfinite(bn), axis=1)
        t = jnp.where(ok, t, 0)
        bnew = b + t[:, None] * d
        bnew = jnp.where(am & (jnp.abs(bnew) <= 1e-14 * jnp.abs(b) + (tj <= t[:, None]) * jnp.inf), 0, bnew)
        bnew = jnp.where(jnp.sign(bnew) == jnp.sign(b), bnew, 0)
        beta = jax.vmap(lambda x, p, v: x.at[p].set(v))(
            beta, pos, jnp.where(am, bnew, jnp.take_along_axis(beta, pos, 1))
        )
        gw = qw - jnp.einsum("fij,fj->fi", G, beta, precision=_HI)
        return beta, gw

    # phase 0: sweep the working set; phase 1: sweep the nonzeros only
    def cond(c):
        _, _, phase, done, k = c
        return ~done & (k < max_epochs)

    def body(c):
        beta, gw, phase, done, k = c
        nz = jnp.any(beta != 0, axis=0) & valid
        act_order = jnp.argsort(~nz, stable=True).astype(jnp.int32)
        order = jnp.where(phase == 0, full_order, act_order)
        count = jnp.where(phase == 0, st.size, nz.sum().astype(jnp.int32))
        beta, gw = sweep(beta, gw, order, count)
        if NEWTON:
            beta, gw = lax.cond(phase == 1, newton, lambda b, g: (b, g), beta, gw)
        mask = jnp.where(phase == 0, valid, nz)
        small = jnp.all(kkt_ws(gw, beta, lam, mask[None]) <= tol * lam)
        done = (phase == 0) & small
        phase = jnp.where(small, 0, 1).astype(jnp.int32)
        return beta, gw, phase, done, k + 1

    beta, gw, _, done, k = lax.while_loop(cond, body, (st.beta, gw, jnp.int32(0), jnp.bool_(False), jnp.int32(0)))
    return st._replace(beta=beta), k, done


def coefs_on_all_features(st, m: int):
    """``(M, m)``: each member's working-set coefficients ``st.beta`` scattered to its ``m`` features.

    The working set's slots beyond ``st.size`` are zeroed first (the cache is zero there, as ``XW`` is).
    """
    M, Wc = st.beta.shape
    b = jnp.where(jnp.arange(Wc) < st.size, st.beta, 0)
    return jnp.zeros((M, m), st.beta.dtype).at[:, st.idx].add(b)


def _gradient_and_fit(d: CovData, st: CovState):
    r"""``g = q - C b`` for all ``m`` features and members, from the design, and the fitted values ``X_W b``.

    ``C_f b = X^T (t_f \odot X_W b) / n_f - \mu_f (\mu_{f,W}^\top b)`` with
    ``t_f`` the member's training rows: two products with ``M`` right-hand
    sides (``n m + n W`` numbers read), so the cache only holds the
    ``W x W`` block of the working set. The fitted values are ``(B, r, M)``.
    With the per-block Gram matrices (``d.G``) ``X^T (t_f \odot X_W b) = \sum_{b \in t_f} G_b[:, W] b``
    and instead of fitted values each member's held-out block product ``G_{e_f} b_f`` ``(M, m)`` is returned
    (a part of the same product), from which :func:`fit_stats` forms the held-out errors in float64.
    """
    B, r, m = d.Xb.shape
    M, Wc = st.beta.shape
    train = jnp.arange(B)[:, None] != d.excl[None, :]  # (B, M): block b is in member f's training rows
    mub = (jnp.take(d.mu, st.idx, axis=1) * st.beta).sum(1)  # (M,) mu_{f,W} . b_f
    if d.G is not None:
        # G_b[:, W] b_W = G_b b with b scattered to all m features: one read of G as an (B m, m) matrix
        # (a gather of G's W columns copied them first: 3 ms of each check at B = 5, m = 500)
        bm = coefs_on_all_features(st, m)
        P = lax.dot_general(d.G.reshape(B * m, m), bm, (((1,), (1,)), ((), ())), precision=_HI)  # (B m, M)
        P = P.reshape(B, m, M)
        XtR = jnp.einsum("bmf,bf->fm", P, train.astype(P.dtype), precision=_HI)
        # (M, m): G_{e_f} b_f, read by fit_stats only with the held-out sums (float64, not under vmap)
        held = P[jnp.maximum(d.excl, 0), :, jnp.arange(M)] if d.held is not None else st.fit
        return d.q - (XtR / d.nf[:, None] - d.mu * mub[:, None]), held
    # X_W b of every member on every row, zeroed outside the member's training blocks: (B r, M)
    eta = jnp.dot(st.XW.reshape(B * r, Wc), st.beta.T, precision=_HI).reshape(B, r, M)
    R = (eta * train[:, None, :]).reshape(B * r, M)
    XtR = lax.dot_general(R, d.Xb.reshape(B * r, m), (((0,), (0,)), ((), ())), precision=_HI)  # (M, m)
    return d.q - (XtR / d.nf[:, None] - d.mu * mub[:, None]), eta


def kkt_refresh(d: CovData, st: CovState, go):
    """``st`` with the gradient and fitted values at ``st.beta`` (a design with ``go`` false is left as it is)."""
    g, eta = _gradient_and_fit(d, st)
    return st._replace(grad=jnp.where(go, g, st.grad), fit=jnp.where(go, eta, st.fit))


def fit_stats(d: CovData, st: CovState):
    """Per member: training loss ``||y_c - X_c b||^2 / n_f`` and held-out mean squared error.

    ``st.grad`` must be the gradient ``q - C b`` at ``st.beta`` and ``st.fit``
    the fitted values ``X_W b`` (:func:`kkt_refresh` leaves them so): the
    training loss is ``var(y) - 2 b^T q + b^T C b`` with ``C b = q - g`` on the
    working set, and the held-out error is the mean squared residual of the
    member's held-out rows, ``y_i - b_0 - x_i^T b``: expanded into the held-out
    sums and ``G_{e_f} b_f`` when ``d.held`` is kept (float64, per-block Gram
    matrices: no pass over the rows), else computed from the residuals as they
    are (no difference of large sums, which cancels in float32).
    """
    b = st.beta
    Cbw = jnp.take(d.q - st.grad, st.idx, axis=1)  # own Gram times b, on the working set
    bGb = (b * Cbw).sum(1)
    qw = jnp.take(d.q, st.idx, axis=1)
    bq = (b * qw).sum(1)
    train = d.yvar - 2 * bq + bGb
    mu_w = jnp.take(d.mu, st.idx, axis=1)
    b0 = d.ybar - (b * mu_w).sum(1)  # the intercept for y less yshift and X less xshift
    shift = d.yshift - (b * jnp.take(d.xshift, st.idx)).sum(1)  # what the data as they came add to it
    M = b.shape[0]
    e = jnp.maximum(d.excl, 0)
    if d.held is not None:
        # float64 with the Gram matrices: sum_i (y_i - b0 - x_i^T b)^2 over the held-out rows, expanded into the
        # held-out sums and G_{e_f} b_f (st.fit, from the KKT check): no pass over the rows per penalty (at
        # n = 4000, m = 500 that pass was 6% of the CV). The expansion is a difference of sums of size
        # ||y_e||^2; in float64 its rounding (~1e-16 ||y_e||^2) is far below any held-out error, and float32
        # keeps the residuals as they are (below)
        hs, hu, hsy, hsyy = d.held
        bm = coefs_on_all_features(st, d.q.shape[1])
        sse = (
            hsyy - 2 * b0 * hsy - 2 * (bm * hu).sum(1) + d.nt * b0**2 + 2 * b0 * (bm * hs).sum(1) + (bm * st.fit).sum(1)
        )
        test = jnp.where(d.excl >= 0, jnp.maximum(sse, 0) / jnp.maximum(d.nt, 1), 0)
        return train, test, b0 + shift
    if d.G is None:
        fit = st.fit[e, :, jnp.arange(M)]  # (M, r): each member's fitted values on its held-out rows
    else:  # float32: formed here, once per penalty (the design read once)
        B, _, m = d.Xb.shape
        bw = jnp.where(jnp.arange(b.shape[1]) < st.size, b, 0)
        # block e_f gets member f's coefficients (the full member holds out nothing)
        blk = jnp.where(d.excl >= 0, e, B)
        bm = jnp.zeros((B + 1, m), b.dtype).at[blk[:, None], st.idx[None, :]].add(bw)[:B]
        fit = jnp.einsum("brm,bm->br", d.Xb, bm, precision=_HI)[e]
    res = d.yb[e] - b0[:, None] - fit
    sse = jnp.sum(jnp.where(d.real[e], res * res, 0), axis=1)
    test = jnp.where(d.excl >= 0, sse / jnp.maximum(d.nt, 1), 0)
    return train, test, b0 + shift
