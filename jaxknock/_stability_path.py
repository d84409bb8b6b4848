r"""Lockstep homotopy (LARS-lasso) of many row subsamples of one design: supports on a grid only.

The engine of :func:`jaxknock.stability_selection` for the squared loss with an
intercept. Every subsample ``b`` (a row mask ``d_b`` of ``m`` rows of the
*shared* ``X``) follows its exact piecewise-linear lasso path

.. math::

    \beta_A(\lambda) = G_{AA}^{-1}(q_A - \lambda s_A),\qquad
    c(\lambda) = q - G_{\cdot A}\beta_A(\lambda),\qquad
    G = X_b^{c\top} X_b^c / m,\ q = X_b^{c\top} y_b^c / m

(centred on the subsample: the intercept is unpenalised), kink by kink, from
its own :math:`\lambda_{\max}` down past the smallest grid penalty. All
subsamples of a chunk take their kinks *together*: one loop iteration is one
kink of every subsample. Each subsample keeps its active columns, centred and
restricted to its ``m`` rows, in a ``(A, m)`` buffer ``X^c_A`` (a column is
written when its feature enters), so that only one product per kink touches
the whole shared ``X``:

* the Gram entries of the feature ``j`` that entered at the previous kink,
  :math:`G_{Aj} = X^{c\top}_A x^c_j / m` and :math:`G_{jj}`, from the stored
  columns (``O(A m)``; they border the inverse :math:`G_{AA}^{-1}`, a rank-one
  update; a removal is the rank-one Schur downdate, both ``O(A^2)``);
* the equiangular direction :math:`u_b = X^c_{A} v`,
  :math:`v = G_{AA}^{-1} s_A`, also from the stored columns (``O(A m)``);
* its correlations :math:`w = X^\top u_b / m` with every feature: one
  ``(C, n) x (n, p)`` product for the whole chunk on the shared ``X`` (the
  subsamples are row masks of it), from which the next event follows (an
  inactive feature reaching :math:`|c_j| = \lambda`, or an active coefficient
  crossing zero), as in :mod:`jaxknock.l1._ws_homotopy`.

Only supports are needed: the support is constant between two kinks, so
the selection counts at the grid penalties are recorded per *interval*: a
feature that entered at :math:`\lambda_{in}` and leaves at
:math:`\lambda_{out}` is counted at every grid penalty in
:math:`(\lambda_{out}, \lambda_{in}]`; no grid penalty costs an iteration,
and no coefficient is formed at a grid point. The supports are those of the
exact lasso solutions (ties between kinks have probability zero); a
subsample still running after ``max_steps`` kinks is counted as failed at the
grid penalties it has not reached. A feature in the span of the active ones
(Schur complement below ``1e-10`` of its variance) is skipped for the rest of
the path, as in the working-set engine.

Cost per kink: the one product with ``X`` (``2 n p C`` flops), two reads of
the ``(C, A, m)`` column buffers and one of the ``(C, A, A)`` inverse. (Forming
the Gram column and the direction with ``X`` too, as this engine did before
session 19, costs three such products: the stored columns made a warm call
1.4x faster at n = 500, p = 1000, see ``benchmarks/measured/NOTES.md``.) The
rank-one terms of the inverse are not written into it one by one: ``K = 16``
of them are kept apart (applied as ``Ginv0 b + X_K (a * X_K^T b)``) and folded
in with one batched product, so the whole inverse is rewritten once per 16
kinks. With ``mixed=True`` (float64 ``X``) the correlation product runs in
float32; the stored columns, the inverse and the kink arithmetic stay in
float64, and at every fold the correlations are recomputed exactly,
:math:`c = c_0 - G_{\cdot A}\beta_A` (one float64 product per 16 kinks), so
the float32 rounding of the directions' correlations does not accumulate
along the path.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._homotopy import entry_times

_HI = lax.Precision.HIGHEST
_PENDING = 16  # rank-one updates of the inverse kept apart before one batched fold


def _interval_rows(lambdas, lo, hi):
    """``(..., L)`` indicator of the grid penalties in ``(lo, hi]``."""
    return (lambdas > lo[..., None]) & (lambdas <= hi[..., None])


def _first_index(lambdas, hi):
    """Index of the first (largest) grid penalty ``<= hi``."""
    return jnp.sum(lambdas[None] > hi[:, None], axis=1).astype(jnp.int32)


def _chunk_counts(X, y, lambdas, ridx, real, max_steps, *, slots, mixed=False):
    """One chunk in lockstep; ``real`` ``(C,)`` false on padding; ``slots``: increasing capacities, one loop each.

    Selection counts ``(L, p)``, union sizes ``(L,)``, failures ``(L,)`` of the subsamples whose
    rows are ``ridx`` ``(C, m)``.
    """
    dt = X.dtype
    n, p = X.shape
    C, mr = ridx.shape
    mask = jnp.zeros((C, n), dt).at[jnp.arange(C)[:, None], ridx].set(1)
    A = slots[0]
    L = lambdas.shape[0]
    m = jnp.sum(mask[0])
    inv_m = 1 / m
    inf = jnp.asarray(jnp.inf, dt)
    rows = jnp.arange(C)
    K = _PENDING
    X32 = X.astype(jnp.float32) if mixed else X

    mu = jnp.dot(mask, X, precision=_HI) * inv_m  # (C, p) subsample means
    ybar = jnp.dot(mask, y, precision=_HI) * inv_m
    yc = mask * (y[None] - ybar[:, None])
    c0 = jnp.dot(yc, X, precision=_HI) * inv_m  # (C, p) correlations at beta = 0
    lam0 = jnp.max(jnp.abs(c0), axis=1)
    j0 = jnp.argmax(jnp.abs(c0), axis=1).astype(jnp.int32)

    state = dict(
        c=c0,
        lam=lam0,
        feat=jnp.zeros((C, A), jnp.int32),
        used=jnp.zeros((C, A), bool),
        sgn=jnp.zeros((C, A), dt),
        beta=jnp.zeros((C, A), dt),
        Ginv=jnp.zeros((C, A, A), dt),
        Xa=jnp.zeros((C, A, mr), dt),  # the centred active columns on the subsample's rows, one per slot
        Xk=jnp.zeros((C, K, A), dt),
        ak=jnp.zeros((C, K), dt),
        nk=jnp.int32(0),
        v=jnp.zeros((C, A), dt),
        lam_in=jnp.zeros((C, A), dt),
        act=jnp.zeros((C, p), bool),
        skip=jnp.zeros((C, p), bool),
        # the event to apply at the start of the next iteration: enter ``pend`` (>= 0) or drop slot ``drop`` (< A)
        pend=j0,
        pend_sgn=jnp.sign(c0[rows, j0]),
        drop=jnp.full((C,), A, jnp.int32),
        banned=jnp.full((C,), -1, jnp.int32),
        ban_sgn=jnp.zeros((C,), dt),  # the sign the banned feature had: only that re-entry is barred
        done=(lam0 <= 0) | ~real,
        counts=jnp.zeros((L, p), jnp.int32),
        first=jnp.full((C, p), L, jnp.int32),
        over=jnp.bool_(False),
        k=jnp.int32(0),
        live=jnp.zeros((C,), jnp.int32),  # iterations in which each subsample was still running
    )

    def ginv_mv(s, vec):
        """``G_AA^{-1} vec``: the stored inverse plus the pending rank-one terms ``sum_k a_k x_k x_k^T``."""
        coef = jnp.einsum("cka,ca->ck", s["Xk"], vec, precision=_HI) * s["ak"]
        return jnp.einsum("cab,cb->ca", s["Ginv"], vec, precision=_HI) + jnp.einsum(
            "cka,ck->ca", s["Xk"], coef, precision=_HI
        )

    def ginv_col(s, ic):
        """Column ``ic`` of ``G_AA^{-1}`` (a row of the symmetric stored part, plus the pending terms)."""
        coef = s["Xk"][rows, :, ic] * s["ak"]
        return s["Ginv"][rows, ic] + jnp.einsum("cka,ck->ca", s["Xk"], coef, precision=_HI)

    def gram_times(s, coef, low):
        """``G_{.A} coef`` for slot coefficients ``coef`` ``(C, A)``: ``u = X^c_A coef`` (stored), then ``X^T u``."""
        uc = jnp.einsum("cam,ca->cm", s["Xa"], jnp.where(s["used"], coef, 0), precision=_HI)
        u = jnp.zeros((C, n), dt).at[rows[:, None], ridx].set(uc)
        Xp = X32 if low else X
        return jnp.dot(u.astype(Xp.dtype), Xp, precision=_HI).astype(dt) * inv_m

    def flush(s):
        """Fold the pending rank-one terms into the stored inverse (one batched product every ``K`` kinks)."""
        upd = jnp.einsum("cka,ckb->cab", s["Xk"] * s["ak"][..., None], s["Xk"], precision=_HI)
        keep = s["used"][:, :, None] & s["used"][:, None, :]
        out = dict(s, Ginv=jnp.where(keep, s["Ginv"] + upd, 0), Xk=jnp.zeros_like(s["Xk"]),
                   ak=jnp.zeros_like(s["ak"]), nk=jnp.int32(0))  # fmt: skip
        if mixed:  # the correlations accumulated along float32 directions, recomputed exactly
            out["c"] = jnp.where(s["done"][:, None], s["c"], c0 - gram_times(s, s["beta"], low=False))
        return out

    def apply_event(s):
        """Enter ``pend`` at a free slot (bordering) or drop slot ``drop`` (Schur downdate): ``Ginv += a x x^T``."""
        A = s["used"].shape[1]
        ar = jnp.arange(A)
        pend = s["pend"]
        has = (pend >= 0) & ~s["done"]
        jj = jnp.maximum(pend, 0)
        xjc = X[ridx, jj[:, None]] - mu[rows, jj][:, None]  # (C, m) the entering column, centred, on the rows
        b = jnp.where(s["used"], jnp.einsum("cam,cm->ca", s["Xa"], xjc, precision=_HI) * inv_m, 0)
        u = jnp.where(s["used"], ginv_mv(s, b), 0)
        gjj = jnp.sum(xjc * xjc, axis=1) * inv_m
        sigma = gjj - jnp.sum(b * u, axis=1)
        sat = sigma <= 1e-10 * jnp.maximum(gjj, jnp.finfo(dt).tiny)
        slot = jnp.argmin(s["used"], axis=1).astype(jnp.int32)
        full = jnp.all(s["used"], axis=1)
        enter = has & ~sat & ~full
        e = (ar[None] == slot[:, None]).astype(dt)
        i = s["drop"]
        leave = (i < A) & ~s["done"]
        ic = jnp.minimum(i, A - 1)
        gi = jnp.where(s["used"], ginv_col(s, ic), 0)  # (C, A)
        gii = gi[rows, ic]
        x = jnp.where(leave[:, None], gi, jnp.where(enter[:, None], u - e, 0))
        alpha = jnp.where(leave, -1 / jnp.where(gii != 0, gii, 1), jnp.where(enter, 1 / jnp.where(sat, 1, sigma), 0))
        # the rank-one term joins the pending ones (its dropped row / column is zero up to rounding)
        Xk = lax.dynamic_update_index_in_dim(s["Xk"], x, s["nk"], axis=1)
        ak = lax.dynamic_update_index_in_dim(s["ak"], alpha, s["nk"], axis=1)
        dmask = leave[:, None] & (ar[None] == ic[:, None])  # the dropped slot's row and column
        add = enter[:, None] & (ar[None] == slot[:, None])
        used = (s["used"] & ~dmask) | add
        sgn = jnp.where(add, s["pend_sgn"][:, None], jnp.where(dmask, 0, s["sgn"]))
        s_for_v = jnp.where(leave[:, None], s["sgn"], sgn)
        v = jnp.where(used, s["v"] + (alpha * jnp.sum(x * s_for_v, axis=1))[:, None] * x, 0)
        feat = jnp.where(add, jj[:, None], s["feat"])
        Xa = s["Xa"].at[rows, jnp.where(enter, slot, A)].set(xjc, mode="drop")
        gone = jnp.where(leave, s["feat"][rows, ic], p)
        act = s["act"].at[rows, gone].set(False, mode="drop").at[rows, jnp.where(enter, jj, p)].set(True, mode="drop")
        skip = s["skip"].at[rows, jnp.where(has & sat, jj, p)].set(True, mode="drop")
        s = dict(
            s,
            Xk=Xk, ak=ak, nk=s["nk"] + 1, used=used, sgn=sgn, v=v, feat=feat, act=act, skip=skip, Xa=Xa,
            beta=jnp.where(used & ~add, s["beta"], 0),
            lam_in=jnp.where(add, s["lam"][:, None], s["lam_in"]),
            over=s["over"] | jnp.any(has & ~sat & full),
        )  # fmt: skip
        return lax.cond(s["nk"] == K, flush, lambda s: s, s)

    def step(s):
        """Direction, next event, move; a drop is recorded at once (its interval is known)."""
        A = s["used"].shape[1]
        w = gram_times(s, s["v"], low=mixed)  # (C, p)
        c, lam = s["c"], s["lam"]
        t_in = entry_times(c, w, lam[:, None], s["banned"][:, None], s["ban_sgn"][:, None])
        tin = jnp.where(~s["act"] & ~s["skip"], t_in, inf)
        j = jnp.argmin(tin, axis=1).astype(jnp.int32)
        tj = tin[rows, j]
        beta, v = s["beta"], s["v"]
        shrink = s["used"] & (beta * v < 0)
        tl = jnp.where(shrink, -beta / jnp.where(shrink, v, 1), inf)
        i = jnp.argmin(tl, axis=1).astype(jnp.int32)
        ti = tl[rows, i]
        t = jnp.minimum(tj, ti)
        finish = ~s["done"] & ((lam - t <= lambdas[-1]) | ~jnp.isfinite(t))
        move = ~s["done"] & ~finish
        leave = move & (ti < tj)
        enter = move & ~(ti < tj)
        tm = jnp.where(move, t, 0)
        c = c - tm[:, None] * w
        lam_new = lam - tm
        beta = jnp.where(s["used"], beta + tm[:, None] * v, 0)
        beta = jnp.where(leave[:, None] & (jnp.arange(A)[None] == i[:, None]), 0, beta)
        # record the interval (lam_new, lam_in] of a dropped feature
        fi = s["feat"][rows, i]
        hi = s["lam_in"][rows, i]
        ind = _interval_rows(lambdas, lam_new, hi) & leave[:, None]  # (C, L)
        counts = s["counts"].at[:, jnp.where(leave, fi, p)].add(ind.T.astype(jnp.int32), mode="drop")
        g0 = _first_index(lambdas, hi)
        first_new = jnp.where(jnp.any(ind, axis=1), g0, L)
        first = s["first"].at[rows, jnp.where(leave, fi, p)].min(first_new, mode="drop")
        return dict(
            s,
            c=c, lam=lam_new, beta=beta, counts=counts, first=first,
            pend=jnp.where(enter, j, -1),
            pend_sgn=jnp.sign(c[rows, j]),
            drop=jnp.where(leave, i, A),
            banned=jnp.where(leave, fi, -1),
            ban_sgn=jnp.where(leave, s["sgn"][rows, i], 0),
            done=s["done"] | finish,
            k=s["k"] + 1,
            live=s["live"] + ~s["done"],
        )  # fmt: skip

    def grow(s, A_new):
        """The same state with ``A_new`` slots (the new ones free)."""
        A_old = s["used"].shape[1]
        pad = ((0, 0), (0, A_new - A_old))
        out = {k: jnp.pad(s[k], pad) for k in ("feat", "used", "sgn", "beta", "v", "lam_in")}
        out["Ginv"] = jnp.pad(s["Ginv"], ((0, 0), (0, A_new - A_old), (0, A_new - A_old)))
        out["Xk"] = jnp.pad(s["Xk"], ((0, 0), (0, 0), (0, A_new - A_old)))
        out["Xa"] = jnp.pad(s["Xa"], ((0, 0), (0, A_new - A_old), (0, 0)))
        out["drop"] = jnp.where(s["drop"] >= A_old, A_new, s["drop"])
        return dict(s, **out)

    for ph, A_ph in enumerate(slots):
        last = ph == len(slots) - 1
        if ph:
            state = grow(flush(state), A_ph)

        def cond(s, A_ph=A_ph, last=last):
            go = ~jnp.all(s["done"]) & (s["k"] < max_steps)
            # leave a phase while one more entering (the pending one) still fits
            return go if last else go & (jnp.max(jnp.sum(s["used"], axis=1)) <= A_ph - 2)

        state = lax.while_loop(cond, lambda s: step(apply_event(s)), state)
    s = state
    A = s["used"].shape[1]
    # the last segment: every active feature is selected from lam_in down to the end of its path
    lo = jnp.where(s["done"], -inf, s["lam"])  # a subsample out of steps: not counted below its lam
    ind = _interval_rows(lambdas, jnp.broadcast_to(lo[:, None], (C, A)), s["lam_in"]) & s["used"][..., None]
    counts = (
        s["counts"]
        .at[:, jnp.where(s["used"], s["feat"], p)]
        .add(jnp.moveaxis(ind.astype(jnp.int32), 2, 0), mode="drop")
    )
    g0 = jnp.where(jnp.any(ind, axis=2), _first_index(lambdas, s["lam_in"].reshape(-1)).reshape(C, A), L)
    first = s["first"].at[rows[:, None], jnp.where(s["used"], s["feat"], p)].min(g0, mode="drop")
    hist = jnp.zeros((L + 1,), jnp.int32).at[first.reshape(-1)].add(1)
    union = jnp.cumsum(hist[:L])
    failed = jnp.sum(~s["done"][:, None] & (lambdas[None] <= s["lam"][:, None]), axis=0).astype(jnp.int32)
    return counts, union, failed, s["over"], s["live"]


def phase_slots(p: int, m: int) -> tuple:
    """Active-slot capacities of the phases: a kink costs ``O(A^2)`` per subsample, so ``A`` grows with the path.

    At most ``min(p, m)`` features can be active on ``m`` centred rows (rank ``m - 1``). Two phases:
    each one is a loop body of its own to compile (~3 CPU s at n = 500, p = 1000), and at that size
    ``(m / 2, m)`` runs as fast as four quarters ``(m / 4, ..., m)`` while compiling in half the time.
    """
    top = min(p, m)
    caps = sorted({min(top, max(8, -(-int(top * f) // 8) * 8)) for f in (0.5, 1.0)})
    return tuple(caps)


@functools.partial(jax.jit, static_argnames=("chunk", "slots", "mixed"))
def lockstep_counts(X, y, lambdas, idx, max_steps, *, chunk, slots, mixed=False):
    """Selection counts of the subsamples ``idx`` ``(B, m)`` (row indices) on the grid ``lambdas``.

    Chunks of ``chunk`` subsamples run one after another (each chunk in
    lockstep, see the module docstring; the last one padded with finished
    dummies). ``slots`` are the active-slot capacities of the phases
    (:func:`phase_slots`); ``max_steps`` (traced) bounds the kinks per chunk.
    Returns ``(counts (L, p), union (L,), failed (L,), overflow, live (B,))``: per
    grid penalty the number of subsamples selecting each feature, the summed
    sizes of the unions of the supports over ``lambdas[:k+1]``, the number of
    subsamples that did not reach it within ``max_steps`` kinks, whether a
    subsample needed more than ``slots[-1]`` active features, and the number
    of lockstep iterations in which each subsample was still running (its
    kinks; a chunk runs for the largest of its members).
    """
    n, p = X.shape
    B = idx.shape[0]
    L = lambdas.shape[0]
    nb = -(-B // chunk)
    pad = nb * chunk - B
    m = idx.shape[1]
    ridx = jnp.concatenate([idx, jnp.broadcast_to(idx[-1:], (pad, m))]).reshape(nb, chunk, m)
    real = (jnp.arange(nb * chunk) < B).reshape(nb, chunk)

    def body(b, acc):
        counts, union, failed, over, live = _chunk_counts(
            X, y, lambdas, ridx[b], real[b], max_steps, slots=slots, mixed=mixed
        )
        return (acc[0] + counts, acc[1] + union, acc[2] + failed, acc[3] | over, acc[4].at[b].set(live))

    zero = jnp.zeros((L,), jnp.int32)
    acc0 = (jnp.zeros((L, p), jnp.int32), zero, zero, jnp.bool_(False), jnp.zeros((nb, chunk), jnp.int32))
    out = lax.fori_loop(0, nb, body, acc0)
    return out[:4] + (out[4].reshape(-1)[:B],)
