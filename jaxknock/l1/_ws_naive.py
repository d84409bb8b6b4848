r"""Naive-update engine of :mod:`jaxknock.l1.working_set`: logistic loss, and squared loss when ``m >> n``.

Every member ``f`` (``K`` training folds and the full data) carries 0/1 row
weights ``w_f``, its linear predictor ``eta_f`` and coefficients on a shared
working set, whose columns are gathered once into a contiguous ``(W, n)``
block. One *outer* step is a proximal Newton (IRLS) step: with
``p = sigmoid(eta)``, ``v = w p (1 - p)`` and working response
``z = eta + (y - p) / (p (1 - p))`` it solves the weighted lasso

.. math::

    \min_{\beta_0, \beta}\ \tfrac{1}{2 n_f} \sum_i v_i (z_i - \beta_0 - x_i^\top\beta)^2
        + \lambda \|\beta\|_1

by coordinate descent on the working set with ``v``-centred columns (so the
intercept stays optimal after every coordinate move), glmnet's active-set
cycling inside. For the squared loss ``v = w``, ``z = y`` and one outer step
is exact. The KKT check is ``g = X^T (w (y - mu)) / n_f`` for all features,
one ``(n x m) x (n x M)`` product for all members.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock.l1.screening import logistic_dual_probabilities

_HI = lax.Precision.HIGHEST
_VMIN = 1e-5
# Active-set Newton steps inside the coordinate descent (solve_ws, accel=True): tried after
# _NEWTON_AFTER sweeps over the active set without convergence (then 2x, 4x, ... after a try), when no
# member has more than _NEWTON_MAX_ACTIVE active columns, and once the sweeps done cost what the step
# does: _SWEEP_COST * sweeps * |A| >= c^2 for a c-column system. The ratio is not the flop ratio (~1):
# a sweep is bound by the (M, n) residual it reads and writes per column (4 us at M = 6, n = 2000 on the
# 2-core CPU), while the step's cost is its Gram product Z Z^T (10 ms of the 16-24 ms a c = 256 step takes
# there). Sessions 29 and 31, benchmarks/measured/NOTES.md.
_NEWTON_AFTER = 4
_NEWTON_MAX_ACTIVE = 384
_SWEEP_COST = 32
# active_newton: a pivot below this many machine epsilons of its diagonal entry marks a singular system
_SINGULAR_PIVOT = 1000
# inexact proximal Newton (solve_ws): each quadratic model solved to this fraction of the outer violation
_FORCING = 0.1


class NaiveData(NamedTuple):
    X: jax.Array  # (n, m)
    y: jax.Array  # (n,)
    w: jax.Array  # (M, n) training-row weights
    t: jax.Array  # (M, n) held-out-row weights (zero for the full member)
    nf: jax.Array  # (M,)
    yvar: jax.Array  # (M,) null deviance per row (Var(y) for squared loss)
    b0null: jax.Array  # (M,) null-model intercept
    ybar: jax.Array  # (M,) training mean of y
    xshift: jax.Array  # (m,) column means over all rows: the engine works on X - xshift (see naive_data)


class NaiveState(NamedTuple):
    idx: jax.Array
    size: jax.Array
    inws: jax.Array
    XW: jax.Array  # (Wc, n) gathered working-set columns
    beta: jax.Array  # (M, Wc)
    b0: jax.Array  # (M,)
    eta: jax.Array  # (M, n)
    grad: jax.Array  # (M, m)
    overflow: jax.Array


def _mean_fn(loss, eta):
    return jax.nn.sigmoid(eta) if loss == "logistic" else eta


def _dev(loss, y, eta):
    """Per-row deviance (twice the loss)."""
    if loss == "logistic":
        return 2 * (jnp.logaddexp(0.0, eta) - y * eta)
    return (y - eta) ** 2


def naive_data(X, y, rows, excl, *, loss) -> NaiveData:
    """Row weights and null-model statistics; the columns count from their means over all rows.

    The engine works on ``X - xshift`` (never formed: each product with ``X`` is
    corrected by ``xshift``, and each gathered column shifted): with columns far
    from zero the weighted variances ``E[x^2] - xbar^2`` of the coordinate
    descent cancel, and a float32 logistic CV on ``X + 1e3`` ended
    ``max_steps_reached`` at the wrong penalty (session 27). :func:`fit_stats`
    reports the intercept of ``X`` itself.
    """
    n, m = X.shape
    B = rows.shape[0]
    blk = jnp.zeros((B, n + 1), X.dtype).at[jnp.arange(B)[:, None], rows].set(1.0)[:, :n]
    has = (excl >= 0)[:, None]
    t = jnp.where(has, blk[jnp.maximum(excl, 0)], 0.0)
    w = 1.0 - t
    nf = w.sum(1)
    ybar = (w * y).sum(1) / nf
    if loss == "logistic":
        pb = jnp.clip(ybar, 1e-10, 1 - 1e-10)
        b0 = jnp.log(pb / (1 - pb))
    else:
        b0 = ybar
    yvar = (w * _dev(loss, y[None], b0[:, None])).sum(1) / nf
    return NaiveData(X, y, w, t, nf, yvar, b0, ybar, jnp.mean(X, axis=0))


def init_state(d: NaiveData, Wc: int) -> NaiveState:
    M, n = d.w.shape
    m = d.X.shape[1]
    eta = jnp.broadcast_to(d.b0null[:, None], (M, n))
    return NaiveState(
        idx=jnp.zeros((Wc,), jnp.int32),
        size=jnp.int32(0),
        inws=jnp.zeros((m,), bool),
        XW=jnp.zeros((Wc, n), d.X.dtype),
        beta=jnp.zeros((M, Wc), d.X.dtype),
        b0=d.b0null,
        eta=eta,
        grad=_times_x(d, d.w * (d.y[None] - d.ybar[:, None])) / d.nf[:, None],
        overflow=jnp.bool_(False),
    )


def _gradient(d: NaiveData, eta, loss):
    mu = jax.nn.sigmoid(eta) if loss == "logistic" else eta
    res = d.w * (d.y[None] - mu)
    return _times_x(d, res) / d.nf[:, None]


def _times_x(d: NaiveData, R):
    """``R (X - xshift)`` for ``(M, n)`` row weights ``R``, without forming the shifted design."""
    return jnp.dot(R, d.X, precision=_HI) - R.sum(1)[:, None] * d.xshift[None]


def add_features(d: NaiveData, st: NaiveState, cand, score, chunk: int, W: int) -> NaiveState:
    """Move every candidate feature into the working set, chunk by chunk (gathering its column)."""

    def pending(s):
        return cand & ~s.inws

    def cond(s):
        # only a candidate that can join (score >= 1; a NaN score never does) keeps the loop going:
        # one that cannot is left out and flagged as an overflow below, instead of looping forever
        return jnp.any(pending(s) & (score >= 1)) & (s.size < W)

    def body(s):
        val, new = lax.top_k(jnp.where(pending(s), score, -1.0), chunk)
        ok = (val >= 1.0) & (jnp.arange(chunk) < W - s.size)
        new = jnp.where(ok, new, 0).astype(jnp.int32)
        cols = d.X[:, new].T - d.xshift[new][:, None]  # the shifted columns (naive_data)
        XW = lax.dynamic_update_slice(s.XW, cols, (s.size, jnp.int32(0)))
        idx = lax.dynamic_update_slice(s.idx, new, (s.size,))
        return s._replace(idx=idx, size=s.size + ok.sum().astype(jnp.int32), inws=s.inws.at[new].max(ok), XW=XW)

    st = lax.while_loop(cond, body, st)
    return st._replace(overflow=st.overflow | jnp.any(pending(st)))


def _soft(z, t):
    return jnp.sign(z) * jnp.maximum(jnp.abs(z) - t, 0)


def _kkt_ws(g, beta, lam, mask):
    v = jnp.where(beta != 0, jnp.abs(g - lam * jnp.sign(beta)), jnp.maximum(jnp.abs(g) - lam, 0))
    return jnp.max(jnp.where(mask, v, 0), axis=-1)


def _weighted_ridge(L, HA, hd, bA, a, singular, eps):
    r"""Cholesky factors of ``H_AA + sqrt(eps) D`` for the members whose ``H_AA`` is singular (``L`` for the rest).

    ``D_jj = H_jj max_k |b_k| / |b_j|``: the step splits a direction the columns do not determine (the
    difference of two equal columns) in proportion to the coefficients, so a twin at rounding level
    (``|b_j| ~ eps``) stays where it is and the step is not cut at once by its sign change, while the
    directions the columns do determine move as the Newton step, up to ``sqrt(eps)``.
    """
    ab = jnp.abs(bA)
    ratio = jnp.max(ab, axis=1, keepdims=True) / jnp.where(a & (ab > 0), ab, 1.0)
    ridge = jnp.where(a, jnp.sqrt(eps) * hd * jnp.minimum(ratio, 1 / eps**2), 0.0)
    L2 = jnp.linalg.cholesky(HA + ridge[:, :, None] * jnp.eye(HA.shape[-1], dtype=HA.dtype)[None])
    return jnp.where(singular[:, None, None], L2, L)


def active_newton(beta, vr, g, lam, v, XW, xm, nf, sv, valid, cap: int):
    r"""One Newton step of the quadratic model on each member's active set, cut at the first sign change.

    With the signs ``s`` of the active coefficients fixed, the model is the
    quadratic :math:`q(\beta) + \lambda s^\top\beta`, whose gradient moves as
    :math:`g(\beta + \delta) = g(\beta) - H\delta` (``H`` the ``v``-weighted
    centred Gram, ``g = X_c^\top (v r) / n_f``), so
    :math:`\delta_A = H_{AA}^{-1}(g_A - \lambda s_A)` is its exact minimiser.
    Each member's ``H`` is formed on its own first ``cap`` active columns
    (``O(M n cap^2)``; the caller only steps when they are all of them). The
    step is cut where the first active coefficient reaches zero (that one is
    set to zero): along the segment the signs hold and the model is convex with
    its minimum at the full step, so every cut step decreases the objective. A
    member whose ``H_AA`` is not positive definite (a singular active set) does
    not move; coordinate descent goes on from wherever this leaves it.

    Exactly duplicated columns (twins, ``x`` and ``-x``, a knockoff equal to its
    original) make ``H_AA`` singular once both are active, and coordinate
    descent makes the second one active at rounding level (``|b| ~ 1e-15``:
    its gradient is the first one's, ``lam (1 + eps)``). The plain factor then
    has a pivot at the rounding floor: a step of ``1e15`` in opposite directions
    on the twins, cut at once, or ``NaN``; the Newton steps did nothing and
    coordinate descent crawled (18x the epochs of the design without the twins
    for the CV, ``max_steps_reached`` on the whole path, issue of session 35).
    A member with a pivot below ``_SINGULAR_PIVOT`` epsilons of its diagonal
    entry is solved with the weighted ridge of :func:`_weighted_ridge`; the
    others (every member of a design without such columns) as before.
    """
    M = beta.shape[0]
    nz = (beta != 0) & valid[None]
    cols = jnp.argsort(~nz, axis=1, stable=True)[:, :cap].astype(jnp.int32)  # (M, cap): each member's active first
    XA = jnp.take(XW, cols, axis=0)  # (M, cap, n)
    ma = jnp.take_along_axis(xm, cols, axis=1)  # (M, cap)
    bA = jnp.take_along_axis(beta, cols, axis=1)
    a = jnp.take_along_axis(nz, cols, axis=1)
    Z = jnp.sqrt(v)[:, None, :] * XA  # H = Z Z^T: one operand, a third of the time of (v XA) XA^T
    H = jnp.einsum("fwn,fun->fwu", Z, Z, precision=_HI) / nf[:, None, None]
    H = H - (sv / nf)[:, None, None] * ma[:, :, None] * ma[:, None, :]
    sgn = jnp.sign(bA)
    rhs = jnp.where(a, jnp.take_along_axis(g, cols, axis=1) - lam * sgn, 0.0)
    eye = jnp.eye(cap, dtype=beta.dtype)
    HA = jnp.where(a[:, :, None] & a[:, None, :], H, eye[None])
    L = jnp.linalg.cholesky(HA)
    # a singular system (duplicated columns both active): a pivot at the rounding floor, or none
    eps = jnp.finfo(beta.dtype).eps
    hd = jnp.diagonal(HA, axis1=1, axis2=2)
    piv = jnp.diagonal(L, axis1=1, axis2=2) ** 2
    singular = ~jnp.all(jnp.isfinite(L), axis=(1, 2)) | jnp.any(a & ~(piv > _SINGULAR_PIVOT * eps * hd), axis=1)
    L = lax.cond(jnp.any(singular), lambda: _weighted_ridge(L, HA, hd, bA, a, singular, eps), lambda: L)
    delta = jnp.where(a, jax.scipy.linalg.cho_solve((L, True), rhs[..., None])[..., 0], 0.0)
    ok = jnp.all(jnp.isfinite(delta), axis=1)
    delta = jnp.where(ok[:, None], delta, 0.0)
    cross = a & (jnp.sign(bA + delta) != sgn)
    tj = jnp.where(cross, -bA / jnp.where(cross, delta, 1.0), 1.0)
    jcut = jnp.argmin(tj, axis=1)
    t = jnp.clip(jnp.min(tj, axis=1), 0.0, 1.0)
    new = bA + t[:, None] * delta
    new = jnp.where((jnp.arange(cap)[None] == jcut[:, None]) & (t < 1)[:, None], 0.0, new)
    # the step back on the working set, and eta's change through XW: XA's only consumer stays the
    # Gram product above (a second one made XLA:CPU materialise XA and both products 3x slower)
    step = jnp.zeros_like(beta).at[jnp.arange(M)[:, None], cols].add(new - bA)
    deta = jnp.dot(step, XW, precision=_HI) - jnp.sum(step * xm, axis=1)[:, None]
    return beta + step, vr - v * deta


def solve_ws(d: NaiveData, st: NaiveState, lam, tol, max_epochs, *, loss, accel=False):
    """Proximal Newton (IRLS) outer steps, each a weighted CD solve on the working set.

    The outer loop stops when the true working-set KKT violation (and the
    intercept's gradient) is ``<= tol * lam``. It is an inexact proximal
    Newton method: each quadratic model is solved until its working-set KKT
    violation is ``<= max(tol, _FORCING * viol) * lam``, ``viol`` the true
    relative violation it started from, so an early model is not solved past
    what its own error warrants and the last ones are solved to ``tol``
    (session 29: half the epochs and time on every logistic design measured,
    the same chosen penalty and support; exact solves of every model before).
    ``max_epochs`` bounds the CD epochs of the whole call, summed over the
    Newton steps (each inner solve gets what is left), so the cost per grid
    penalty is linear in it, not quadratic.

    The working-set KKT product after a sweep reads the whole ``(W, n)``
    working set (about a third of an epoch at ``n = 5000``). It runs only
    once no member moved a coordinate by more than the model's tolerance in
    gradient units, ``h_j |delta beta_j| <= itol * lam``: a larger move means
    coordinate ``j`` violated its condition by that much when the sweep
    reached it, so the sweep was not the last. ``done`` still comes from the
    product alone (stopping on small moves returned 3x ``tol`` on
    equicorrelated columns). Session 30, l1-logistic CV, one sitting: 0.84x
    the time at n = 2000, 2p = 2000 and 0.83x at n = 5000, 2p = 10 000, the
    same penalty and support on every design measured
    (``benchmarks/measured/NOTES.md``).

    ``accel`` (static): when ``_NEWTON_AFTER`` sweeps over the active set have
    not converged (then 8, 16, ... more), the sweeps done cost what the step
    does (``_SWEEP_COST``), and no member has more than ``_NEWTON_MAX_ACTIVE``
    active columns, an exact Newton step on each member's own active set
    (:func:`active_newton`, on a system of 32, 64, 128, 192, 256 or 384 columns,
    ``O(M n c^2)``) replaces the slow tail of the coordinate descent on
    strongly correlated columns. Measured (issue 17, session 20, 2-core CPU,
    ``l1_cv`` logistic, 5 folds, warm, without / with the steps, one run each,
    ``benchmarks/measured/NOTES.md``): equicorrelated rho 0.8 at n = 500,
    m = 200: 6.34 / 1.34 s (21 268 / 4 530 epochs), at n = 1000, m = 240:
    12.6 / 4.2 s; the knockoff-augmented equicorrelated design (n = 500,
    2p = 200): 44 s and ``max_steps_reached`` / 5.2 s, converged. Session 29
    built the systems per member (one system on the union of the members'
    active sets had outgrown 256 columns on the knockoff design at
    n = 2000, 2p = 2000, so no step was taken) and dropped the per-coordinate
    updates of ``eta`` and ``b0`` (one product after the solve): that design
    7.88 / 4.95 s, n = 1000, 2p = 2000 9.5 / 2.0 s, the squared loss at
    n = 300, m = 3000 (``method="naive"``) 44.9 / 7.2 s, iid columns the same.
    Sweeps stay over the union: one row of the working set read for all
    members costs half of one row per member. Not under ``vmap`` (stability
    selection's member paths): there the ``lax.cond`` would run both branches
    on every sweep.
    """
    M, Wc = st.beta.shape
    valid = jnp.arange(Wc) < st.size
    XW = st.XW

    def ws_gradient(R):
        """``(M, Wc)`` gradients ``X_W^T R / n_f`` of the working-set columns for weighted residuals ``R``."""
        return jnp.dot(R, XW.T, precision=_HI) / d.nf[:, None]

    full_order = jnp.arange(Wc, dtype=jnp.int32)
    cap = min(Wc, _NEWTON_MAX_ACTIVE)
    newton = bool(accel) and cap > 0
    # Newton systems of a few static sizes: a small active set does not pay for the largest one
    caps = sorted({min(cap, 32), min(cap, 64), min(cap, 128), min(cap, 192), min(cap, 256), cap})

    def inner(beta, b0, eta, budget, itol):
        mu = _mean_fn(loss, eta)
        if loss == "logistic":
            v = d.w * jnp.maximum(mu * (1 - mu), _VMIN)
        else:
            v = d.w
        # working residual r = z - eta; v * r = w (y - mu)
        r = d.w * (d.y[None] - mu) / jnp.where(d.w > 0, v, 1.0)
        sv = v.sum(1)
        shift = (v * r).sum(1) / sv  # intercept Newton step
        r = r - shift[:, None]
        b0 = b0 + shift
        eta = eta + shift[:, None]
        xm = jnp.dot(v, XW.T, precision=_HI) / sv[:, None]  # (M, Wc) v-weighted means
        h = jnp.dot(v, (XW * XW).T, precision=_HI) / d.nf[:, None] - xm**2 * (sv / d.nf)[:, None]
        h = jnp.where(valid[None], jnp.maximum(h, jnp.finfo(XW.dtype).tiny), 1.0)
        vr = v * r  # carried: the weighted residual

        def sweep(beta, vr, order, count):
            """One pass over ``order[:count]``; also each member's largest move ``h_j |delta beta_j|``.

            ``order[:count]`` has no repeats, so coordinate ``j`` still holds its value from before the
            pass when the pass reaches it: it is read from ``beta`` (a constant of the loop) and written
            to the carried copy. With one array both read and updated in place, XLA copied the whole
            ``(M, Wc)`` array twice per coordinate: 3.7 us a coordinate at M = 6, n = 1000, Wc = 600
            against 2.75 us without (session 49); the logistic CV at n = 1000, 2p = 1000 took 0.7-0.85x the
            time, bit-identical.
            """

            def body(k, c):
                out, vr, moved = c
                j = order[k]
                x = XW[j]  # one row for all members: a sweep reads the working set once
                gj = jnp.dot(vr, x, precision=_HI) / d.nf
                bj = beta[:, j]
                bn = _soft(gj + h[:, j] * bj, lam) / h[:, j]
                vr = vr - v * (x[None] - xm[:, j][:, None]) * (bn - bj)[:, None]
                return out.at[:, j].set(bn), vr, jnp.maximum(moved, h[:, j] * jnp.abs(bn - bj))

            return lax.fori_loop(0, count, body, (beta, vr, jnp.zeros((M,), beta.dtype)))

        def cond(c):
            return ~c[3] & (c[4] < budget)

        def kkt_small(beta, vr, mask):
            return jnp.all(_kkt_ws(ws_gradient(vr), beta, lam, mask) <= itol * lam)

        def body(c):
            beta, vr, phase, done, k, stall, tries = c
            nz = (beta != 0) & valid[None]  # (M, Wc)
            union = jnp.any(nz, axis=0)
            act = jnp.argsort(~union, stable=True).astype(jnp.int32)
            order = jnp.where(phase == 0, full_order, act)
            count = jnp.where(phase == 0, st.size, union.sum().astype(jnp.int32))
            beta, vr, moved = sweep(beta, vr, order, count)
            mask = jnp.where(phase == 0, valid[None], union[None])
            # the KKT product (the whole working set) only once no coordinate moved by more than the
            # tolerance: a move of h_j |delta| is a violation that large when the sweep reached j
            check = jnp.all(moved <= itol * lam)
            small = lax.cond(check, lambda b, r: kkt_small(b, r, mask), lambda b, r: jnp.bool_(False), beta, vr)
            if newton:
                # when every member's active columns fit in its system, after 4, 8, 16, ... stalled sweeps
                # (a step cut short by a sign change is retried later), once the sweeps cost what the step does
                n_active = jnp.max(jnp.sum((beta != 0) & valid[None], axis=1))  # each member's own system
                sizes = jnp.asarray(caps)
                size = jnp.searchsorted(sizes, n_active)  # the smallest system that holds them
                c_sel = sizes[jnp.minimum(size, len(caps) - 1)]
                worth = _SWEEP_COST * stall * jnp.maximum(n_active, 1) >= c_sel * c_sel
                due = (stall >= _NEWTON_AFTER * 2 ** jnp.minimum(tries, 6)) & worth
                trigger = (phase == 1) & ~small & due & (n_active <= cap)

                def accelerate(a):
                    beta, vr, _ = a
                    args = (ws_gradient(vr), lam, v, XW, xm, d.nf, sv, valid)
                    steps = [lambda b, vr, c=c: active_newton(b, vr, *args, c) for c in caps]
                    beta, vr = lax.switch(size, steps, beta, vr)
                    return beta, vr, kkt_small(beta, vr, (beta != 0) & valid[None])

                beta, vr, small = lax.cond(trigger, accelerate, lambda a: a, (beta, vr, small))
                stall = jnp.where(trigger | small | (phase == 0), 0, stall + 1)
                tries = tries + trigger
            phase = jnp.where(small, 0, 1).astype(jnp.int32)
            return beta, vr, phase, (c[2] == 0) & small, k + 1, stall, tries

        c0 = (beta, vr, jnp.int32(0), jnp.bool_(False), jnp.int32(0), jnp.int32(0), jnp.int32(0))
        out, _, _, done, k, _, _ = lax.while_loop(cond, body, c0)
        # the intercept and the linear predictor move with the coefficients (every move keeps the columns
        # v-centred): one product after the solve instead of two (M, n) updates per coordinate
        step = out - beta
        moved = jnp.sum(step * xm, axis=1)
        eta = eta + jnp.dot(step, XW, precision=_HI) - moved[:, None]
        return out, b0 - moved, eta, k, done

    if loss == "squared":
        beta, b0, eta, k, done = inner(st.beta, st.b0, st.eta, max_epochs, tol)
        return st._replace(beta=beta, b0=b0, eta=eta), k, done

    def true_kkt(beta, eta):
        res = d.w * (d.y[None] - jax.nn.sigmoid(eta))
        v = _kkt_ws(ws_gradient(res), beta, lam, valid[None])
        return jnp.max(jnp.maximum(v, jnp.abs(res.sum(1)) / d.nf)) / lam  # relative violation

    def ocond(c):
        return ~c[4] & (c[3] < max_epochs)

    def obody(c):
        beta, b0, eta, k, _, viol = c
        # inexact proximal Newton: each model solved to a fraction of the violation it starts from
        itol = jnp.maximum(tol, _FORCING * viol)
        beta, b0, eta, k1, done = inner(beta, b0, eta, max_epochs - k, itol)
        viol = true_kkt(beta, eta)
        return beta, b0, eta, k + k1, done & (viol <= tol), viol

    viol0 = true_kkt(st.beta, st.eta)
    beta, b0, eta, k, done, _ = lax.while_loop(
        ocond, obody, (st.beta, st.b0, st.eta, jnp.int32(0), viol0 <= tol, viol0)
    )
    return st._replace(beta=beta, b0=b0, eta=eta), k, done


def full_gradient(d: NaiveData, st: NaiveState, *, loss):
    """``g = X^T (w (y - mu(eta))) / n_f`` for all features and members."""
    return _gradient(d, st.eta, loss)


def kkt_refresh(d: NaiveData, st: NaiveState, go, *, loss):
    """``st`` with the gradient at its coefficients (a design with ``go`` false is left as it is)."""
    return st._replace(grad=jnp.where(go, full_gradient(d, st, loss=loss), st.grad))


def fit_stats(d: NaiveData, st: NaiveState, *, loss):
    """Training deviance per row and held-out mean deviance (MSE for squared loss)."""
    dev = _dev(loss, d.y[None], st.eta)
    train = (d.w * dev).sum(1) / d.nf
    nt = d.t.sum(1)
    test = (d.t * dev).sum(1) / jnp.maximum(nt, 1)
    return train, test, st.b0 - jnp.sum(st.beta * jnp.take(d.xshift, st.idx)[None], axis=1)


def gap(X, y, b, b0, lam, *, loss):
    """Relative duality gap of the full-data fit: :func:`absolute_gap` over the null deviance's half."""
    g, null = _gap_and_null(X, y, b, b0, lam, loss=loss)
    return g / jnp.maximum(null, jnp.finfo(X.dtype).tiny)


def absolute_gap(X, y, b, b0, lam, *, loss):
    r"""Duality gap of the fit ``(b0, b)`` at ``lam``, in objective units (the classic engine's ``gap``).

    Primal :math:`\frac1n\sum_i f(\eta_i; y_i) + \lambda\|b\|_1`; dual point: the
    generalised residual made feasible for the intercept's constraint (zero mean; for the
    logistic loss :func:`jaxknock.l1.screening.logistic_dual_probabilities`), then rescaled
    into the l-infinity ball :math:`\|X_c^\top\theta\|_\infty / n \le \lambda`, so the gap is
    ``>= 0`` up to rounding. Under ``vmap`` over ``(b, b0, lam)`` (a path) its products with
    ``X`` are matrix products.
    """
    return _gap_and_null(X, y, b, b0, lam, loss=loss)[0]


def _gap_and_null(X, y, b, b0, lam, *, loss):
    n = X.shape[0]
    eta = b0 + jnp.dot(X, b, precision=_HI)
    if loss == "squared":
        res = y - eta
        r = res - res.mean()
    else:
        t, one_minus_t = logistic_dual_probabilities(jnp.ones_like(y), n, y, eta, True)
        r = y - t
    xr = (jnp.dot(r, X, precision=_HI) - X.mean(0) * r.sum()) / n
    s = jnp.minimum(1.0, lam / jnp.maximum(jnp.max(jnp.abs(xr)), jnp.finfo(X.dtype).tiny))
    theta = s * r
    if loss == "squared":
        yc = y - y.mean()
        primal = 0.5 * (res @ res) / n + lam * jnp.abs(b).sum()
        dual = (theta @ yc) / n - 0.5 * (theta @ theta) / n
        null = 0.5 * (yc @ yc) / n
    else:
        primal = jnp.mean(jnp.logaddexp(0.0, eta) - y * eta) + lam * jnp.abs(b).sum()
        a = y - theta  # = y + s (t - y), in [0, 1] for labels in {0, 1}
        one_minus_a = (1.0 - y) + s * (one_minus_t - (1.0 - y))
        ent = -(jax.scipy.special.xlogy(a, a) + jax.scipy.special.xlogy(one_minus_a, one_minus_a))
        dual = ent.mean()
        pb = jnp.clip(y.mean(), 1e-12, 1 - 1e-12)
        null = -(pb * jnp.log(pb) + (1 - pb) * jnp.log(1 - pb))
    return primal - dual, null
