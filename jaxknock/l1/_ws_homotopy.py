r"""Homotopy (LARS-lasso) engine of :mod:`jaxknock.l1.working_set`: the squared loss, any shape.

Same problem, sufficient statistics and working-set Gram cache as
:mod:`jaxknock.l1._ws_covariance` (the cache of working-set columns is shared
by the ``K`` folds and the refit; one chunk of new columns costs ``2 n W B``
flops for all members together). What differs is the solver between two grid
penalties: instead of coordinate descent, every member follows the *exact*
piecewise-linear solution path.

On an active set :math:`A` with signs :math:`s_A` the lasso solution is

.. math::

    \beta_A(\lambda) = G_{AA}^{-1}(q_A - \lambda s_A),\qquad
    g_j(\lambda) = q_j - G_{jA}\beta_A(\lambda),

so as :math:`\lambda` decreases by :math:`t`, :math:`\beta_A` moves by
:math:`t\,v` (:math:`v = G_{AA}^{-1} s_A`) and the gradient by :math:`-t\,w`
(:math:`w = G_{\cdot A} v`). The next *kink* is the smallest :math:`t > 0`
at which an inactive feature reaches :math:`|g_j| = \lambda - t`
(``t = (lam -+ g_j) / (1 -+ w_j)``), an active coefficient crosses zero
(``t = -beta_i / v_i``), or the next grid penalty is reached. A kink adds or
removes one feature; :math:`G_{AA}^{-1}` is kept by a rank-one bordering /
Schur downdate (``O(|A|^2)``), and each kink costs one ``(W x A)``
product per member. The number of kinks is about the number of active-set
changes, so a grid step that does not change the active set costs one step.

Candidates for entering are the cached features (the sequential strong rule
fills the cache before each grid step); after the step a KKT check over all
``m`` features (two products with the design for all members) catches any violator
outside the cache, which joins the cache, and the grid step is redone from
the previous grid solution. Before the check, one step of iterative
refinement (:math:`\beta_A \mathrel{+}= G_{AA}^{-1}(q_A - \lambda s_A - G_{AA}\beta_A)`)
removes the rounding drift of the updated inverse. A feature in the span of the
active ones (an exact duplicate, or any feature once ``|A|`` reaches the
rank when ``n_f < m``) cannot join: its Schur complement vanishes (to
rounding: :func:`_collinear_rtol`) and it is skipped for the rest of the grid step (its gradient follows the active
ones'); the KKT check over all features still certifies the result, and
``stats["kkt"]`` reports it.

A kink costs ``O(a^2 + a W)`` per member on its ``a`` active slots, used or not.
A design that is not under ``vmap`` (alone, or one replicate after another) runs
a grid step on half of the capacity ``A`` while that holds its members' active
sets (:func:`slot_tiers`), and a member that needs a free slot in the middle of
the step hands the step on to all ``A`` slots where it stopped (:func:`_follow`).
Measured on a 2-core CPU (n = 600, m = 400, 10 replicates, float32): 0.70-0.71 s
against 0.83-0.85 s on all 256 slots, for 0.5-0.9 s more XLA compilation per
program (``benchmarks/measured/NOTES.md``, session 24). Under ``vmap`` (the lock
step of a batch) the gate of a tier would be per design, so every kink uses all ``A``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxknock._homotopy import entry_times
from jaxknock._iterate import lockstep_while_loop
from jaxknock.l1 import _ws_covariance as _cov

_HI = lax.Precision.HIGHEST
# the dtype in which the kinks of a float64 design read their Gram rows (see solve_ws) ...
FAST_ROWS = jnp.float32
# ... once its members' float64 rows (M, A, W) take more than this: smaller blocks stay in cache, where
# float64 rows cost the kinks nothing, and the program leaves out the float64 redo (a smaller compile)
FAST_ROWS_MIN_BYTES = 16 << 20
# an inactive cached feature this far (relative) above the penalty after a fast grid step: redo it exactly
_OFF_PATH_RTOL = 1e-9
# active-slot capacities from which the kinks run on quarter tiers of the slots (slot_tiers)
QUARTER_TIERS_FROM = 384

cov_data = _cov.cov_data
add_features = _cov.add_features
kkt_refresh = _cov.kkt_refresh
fit_stats = _cov.fit_stats


class Member(NamedTuple):
    """One member's position on its path (leading axis ``M`` when batched)."""

    slot_c: jax.Array  # (A,) int32 cache position of each slot
    used: jax.Array  # (A,) bool
    sgn: jax.Array  # (A,) signs of the active coefficients (0 when unused)
    sbeta: jax.Array  # (A,) active coefficients
    Ginv: jax.Array  # (A, A) inverse of G_AA on the used slots, zero elsewhere
    lam: jax.Array  # () current penalty


class HomState(NamedTuple):
    # the cache fields (names shared with _ws_covariance.CovState)
    idx: jax.Array  # (Wc,)
    size: jax.Array  # ()
    inws: jax.Array  # (m,)
    C: jax.Array  # (M, Wc, Wc)
    beta: jax.Array  # (M, Wc) coefficients in cache coordinates
    grad: jax.Array  # (M, m)
    overflow: jax.Array  # ()
    XW: jax.Array  # (B, r, Wc)
    fit: jax.Array  # (B, r, M)
    # homotopy fields
    slot_over: jax.Array  # () bool: a member needed more than A active slots
    cur: Member  # current
    anchor: Member  # at the last accepted grid penalty


def init_state(d, Wc: int, A: int) -> HomState:
    """Empty cache of capacity ``Wc`` and ``A`` active slots per member, at ``lambda_max``."""
    base = _cov.init_state(d, Wc)
    M, m = d.q.shape
    dt = d.q.dtype
    lmax = jnp.max(jnp.abs(d.q), axis=1)
    mem = Member(
        slot_c=jnp.zeros((M, A), jnp.int32),
        used=jnp.zeros((M, A), bool),
        sgn=jnp.zeros((M, A), dt),
        sbeta=jnp.zeros((M, A), dt),
        Ginv=jnp.zeros((M, A, A), dt),
        lam=lmax,
    )
    return HomState(*base, slot_over=jnp.bool_(False), cur=mem, anchor=mem)


def accept(st: HomState) -> HomState:
    """Mark the current grid solution as the restart point of the next grid step."""
    return st._replace(anchor=st.cur)


def member_kink(mem: Member, v, Cf, Gr, g, act, skip, valid, lam_t, banned, done):
    """One kink of one member: move to the next event, then add / drop one feature.

    Both an addition (bordering) and a removal (Schur downdate) are one
    symmetric rank-one update of the inverse, ``Ginv += alpha x x^T``:
    removal ``x = Ginv e_i``, ``alpha = -1 / Ginv_ii`` (which zeroes row and
    column ``i``); addition at a free slot ``k`` with ``u = Ginv b`` and
    Schur complement ``sigma = G_jj - b^T u``: ``x = u - e_k``,
    ``alpha = 1 / sigma``. The direction ``v = Ginv s`` follows in ``O(A)``:
    ``Ginv e_k = 0`` on a free slot and ``Ginv_new e_i = 0`` on a dropped one,
    so ``v_new = v + alpha x (x^T s)`` with the signs after an addition and
    before a removal (zero on the dropped slot). A member that is ``done`` does not move, nor
    one whose next event is an addition with every slot in use (the last output, ``blocked``:
    :func:`_follow` gives it more slots, or reports the overflow).
    """
    dt = g.dtype
    inf = jnp.asarray(jnp.inf, dt)
    A = mem.used.shape[0]
    lam = mem.lam
    w = jnp.dot(v.astype(Gr.dtype), Gr, precision=_HI).astype(dt)
    tg = jnp.maximum(lam - lam_t, 0)
    ban_j, ban_s = banned
    tin = jnp.where(valid & ~act & ~skip, entry_times(g, w, lam, ban_j, ban_s), inf)
    j = jnp.argmin(tin)
    # an active coefficient moving against its sign leaves where it reaches zero; one that rounding
    # left on the wrong side of zero (a refined coefficient of about eps) leaves at once
    shrink = mem.used & (mem.sgn * v < 0)
    tl = jnp.where(shrink, jnp.maximum(-mem.sbeta / jnp.where(shrink, v, 1), 0), inf)
    i = jnp.argmin(tl)
    grid = tg <= jnp.minimum(tin[j], tl[i])
    leave = ~done & ~grid & (tl[i] < tin[j])
    enter = ~done & ~grid & ~(tl[i] < tin[j])

    # the addition's Schur complement
    slot = jnp.argmin(mem.used)
    full = jnp.all(mem.used)
    col = lax.dynamic_index_in_dim(Cf, j, axis=0, keepdims=False)  # Gram row of cache feature j
    b = jnp.where(mem.used, col[mem.slot_c], 0)
    u = jnp.dot(mem.Ginv, b, precision=_HI)
    sigma = col[j] - b @ u
    sat = sigma <= _collinear_rtol(dt) * jnp.maximum(col[j], jnp.finfo(dt).tiny)
    do_enter = enter & ~sat & ~full
    blocked = enter & ~sat & full  # no free slot: stay put (the caller gives more slots, or reports the overflow)
    t = jnp.where(done | blocked, 0, jnp.minimum(tg, jnp.minimum(tin[j], tl[i])))
    ar = jnp.arange(A)
    e = (ar == slot).astype(dt)
    gi = mem.Ginv[:, i]
    x = jnp.where(leave, gi, jnp.where(do_enter, u - e, 0))
    alpha = jnp.where(leave, -1 / jnp.where(gi[i] != 0, gi[i], 1), jnp.where(do_enter, 1 / jnp.where(sat, 1, sigma), 0))
    drop, add = jnp.where(leave, i, A), jnp.where(do_enter, slot, A)  # out of range: no slot
    Ginv = mem.Ginv + alpha * jnp.outer(x, x)
    # the inverse's row and column stay scatters: with a select fused into the rank-one update, lock-step
    # chunks of two designs and the whole batch of three differed in the last bit (test_l1_working_set.py)
    Ginv = Ginv.at[drop, :].set(0, mode="drop").at[:, drop].set(0, mode="drop")
    # the vectors' updates are selects, not scatters: each scatter was a kernel of its own in every kink
    # (and in every copy of the kink loop), a select fuses with its neighbours; the values are the same bits
    at_drop, at_add = ar == drop, ar == add

    sbeta = jnp.where(mem.used, mem.sbeta + t * v, 0)
    g = g - t * w
    lam_new = jnp.where(done | blocked, lam, jnp.where(grid, lam_t, lam - t))
    used = (mem.used & ~at_drop) | at_add
    sg = jnp.where(at_add, jnp.sign(g[j]), jnp.where(at_drop, 0, mem.sgn))
    sbeta = jnp.where(at_drop, 0, sbeta)
    v = jnp.where(used, v + alpha * jnp.dot(x, jnp.where(leave, mem.sgn, sg)) * x, 0)
    slot_c = jnp.where(at_add, j.astype(jnp.int32), mem.slot_c)
    Gr = Gr.at[add, :].set(col.astype(Gr.dtype), mode="drop")  # a row of the cache: a scatter
    cw = jnp.arange(act.shape[0])
    act = (act & ~(leave & (cw == mem.slot_c[i]))) | (do_enter & (cw == j))
    banned = (
        jnp.where(leave, mem.slot_c[i], jnp.where(done | blocked, ban_j, -1)),
        jnp.where(leave, mem.sgn[i], jnp.where(done | blocked, ban_s, 0)),
    )
    # a feature in the span of the active ones (duplicates, or |A| = rank) cannot join:
    # it is skipped for the rest of this grid step (its gradient follows the active ones')
    skip = skip | (enter & sat & (cw == j))
    mem = Member(slot_c, used, sg, sbeta, Ginv, lam_new)
    return mem, v, Gr, g, act, skip, banned, done | grid, blocked


def _collinear_rtol(dtype) -> float:
    r"""The relative Schur complement ``sigma / G_jj`` below which a feature counts as in the active span.

    ``sigma = G_jj - b^T G_AA^{-1} b`` is a difference of two numbers of size
    ``G_jj``, with ``G_AA^{-1}`` carried by rank-one updates, so its rounding
    error is at least a few ``eps G_jj``. ``max(1e-10, 100 eps)``: ``1e-10`` in float64
    (exact duplicates), ``1.2e-5`` in float32, where a pair of columns equal to
    about 1e-6 (a knockoff next to its original) otherwise enters with a pivot of
    pure rounding and the path leaves the lasso solution (KKT violations of 2).

    Example:
        >>> import jax.numpy as jnp
        >>> _collinear_rtol(jnp.float64), round(_collinear_rtol(jnp.float32), 7)
        (1e-10, 1.19e-05)
    """
    return max(1e-10, 100 * float(jnp.finfo(dtype).eps))


def _refine(mem: Member, Gr, qc):
    """One step of iterative refinement of the active coefficients at ``mem.lam``."""
    # G_AA beta_A = (beta_A^T G_{A,cache})[slot_c] (G is symmetric): one pass over the rows, where a gather of
    # the (A, A) block of columns cost more than the rest of the refinement
    Gb = jnp.take(jnp.dot(mem.sbeta, Gr, precision=_HI), mem.slot_c, mode="clip")  # slot_c is always in range
    qa = jnp.take(qc, mem.slot_c, mode="clip")
    r = jnp.where(mem.used, qa - mem.lam * mem.sgn - Gb, 0)
    return mem._replace(sbeta=jnp.where(mem.used, mem.sbeta + jnp.dot(mem.Ginv, r, precision=_HI), 0))


def _follow_cond(ops, c):
    max_epochs = ops[-1]
    done, k, over = c[-3:]
    return ~jnp.all(done) & (k < max_epochs) & ~over


def _follow_body(ops, c):
    """One kink of every member; a no-op once the loop's condition fails (see ``lockstep_while_loop``)."""
    C, valid, lam, _ = ops
    mem, v, Gr, g, act, skip, banned, done, k, over = c
    go = _follow_cond(ops, c)
    kink = jax.vmap(member_kink, in_axes=(0, 0, 0, 0, 0, 0, 0, None, None, 0, 0))
    mem, v, Gr, g, act, skip, banned, done_new, full = kink(mem, v, C, Gr, g, act, skip, valid, lam, banned, done | ~go)
    return mem, v, Gr, g, act, skip, banned, jnp.where(go, done_new, done), k + go, over | (go & jnp.any(full))


def _gram_rows(C, mem: Member):
    """``(M, A, Wc)`` Gram rows of every member's active slots on the cache columns (zero on free slots)."""

    def rows(C, f, u):
        return jnp.where(u[:, None], jnp.take(C, f, axis=0, mode="clip"), 0)

    return jax.vmap(rows)(C, mem.slot_c, mem.used)


def _follow_at(st: HomState, mem: Member, valid, qc, lam, max_epochs, done0, skip0, ban0, k0, rows_dtype):
    """Every member not ``done0`` follows its path from ``mem`` towards ``lam`` on ``mem``'s slots.

    Returns the members, their active and skipped cache columns, the features they
    must not re-enter at once, ``done``, the kink count (from ``k0``) and whether a
    member stopped for want of a free slot.
    """
    Wc = st.idx.shape[0]
    Gr = _gram_rows(st.C, mem)
    g = qc - jnp.einsum("fa,faw->fw", mem.sbeta, Gr, precision=_HI)
    act = jax.vmap(lambda sc, u: jnp.zeros((Wc,), bool).at[sc].max(u))(mem.slot_c, mem.used)
    v0 = jnp.where(mem.used, jnp.einsum("fab,fb->fa", mem.Ginv, mem.sgn, precision=_HI), 0)
    c0 = (mem, v0, Gr.astype(rows_dtype), g, act, skip0, ban0, done0, k0, jnp.bool_(False))
    ops = (st.C, valid, lam, max_epochs)
    mem, _, _, _, act, skip, ban, done, k, over = lockstep_while_loop(_follow_cond, _follow_body, ops, c0)
    return mem, act, skip, ban, done, k, over


def slot_tiers(A: int) -> tuple[int, ...]:
    """The active-slot counts a sequential path runs its kinks at: half of ``A`` (in multiples of 32), then ``A``;
    quarters of ``A`` from ``QUARTER_TIERS_FROM`` slots on.

    A kink costs ``O(a^2 + a W)`` per member on ``a`` slots, used or not, and the
    active sets of a CV path stay well below their capacity ``A`` for most of it
    (n = 600, m = 400: 124-180 of 256 at the end, far fewer on the first half).
    So a grid step whose active sets fit in the first tier runs its kinks there,
    and moves up when a member needs a free slot (:func:`_follow`). Each tier
    is one more copy of the kink loop to compile (about 0.6 s on a 2-core CPU),
    so there are two for the capacities of early-stopped paths (the knockoff filter's
    256). A whole grid of a tall design fills its ``min(n, m)`` slots by its end and its
    members' ``(A, A)`` inverses leave the processor cache: at n = 4000, m = 500
    (A = 532, 774 kinks) a kink cost 1.7 ms on 532 slots and 0.4 ms on 288, and
    quarter tiers made the CV 10-20% faster than halves, for about 1 s more
    compilation in a first call (idle: 6.7-7.0 -> 7.9-8.1 s; eighths: 10% faster
    again, 8-10 s more; session 48).

    Example:
        >>> slot_tiers(256), slot_tiers(158), slot_tiers(40), slot_tiers(532)
        ((128, 256), (96, 158), (32, 40), (160, 288, 416, 532))
    """
    if A >= QUARTER_TIERS_FROM:
        return tuple(sorted({min(A, 32 * math.ceil(q * A / 128)) for q in (1, 2, 3)} | {A}))
    return tuple(sorted({min(A, 32 * math.ceil(A / 64)), A}))


def _tier(mem: Member, tiers) -> jax.Array:
    """Index of the smallest tier with a free slot above every member's highest used one."""
    A = mem.used.shape[-1]
    top = jnp.max(jnp.where(mem.used, jnp.arange(1, A + 1), 0))
    return jnp.minimum(jnp.sum(top >= jnp.asarray(tiers)), len(tiers) - 1).astype(jnp.int32)


def _slots(mem: Member, a: int) -> Member:
    """The first ``a`` slots of every member (all its used ones: see :func:`_tier`)."""
    return Member(mem.slot_c[:, :a], mem.used[:, :a], mem.sgn[:, :a], mem.sbeta[:, :a], mem.Ginv[:, :a, :a], mem.lam)


def _into(small: Member, mem: Member) -> Member:
    """``mem`` with its first slots replaced by ``small``'s (the others are unused and zero)."""
    a = small.used.shape[-1]
    return Member(
        mem.slot_c.at[:, :a].set(small.slot_c),
        mem.used.at[:, :a].set(small.used),
        mem.sgn.at[:, :a].set(small.sgn),
        mem.sbeta.at[:, :a].set(small.sbeta),
        mem.Ginv.at[:, :a, :a].set(small.Ginv),
        small.lam,
    )


def _follow(st: HomState, mem: Member, valid, qc, lam, max_epochs, done0, rows_dtype, tiers):
    """Every member not ``done0`` follows its path from ``mem`` to ``lam``, reading Gram rows in ``rows_dtype``.

    With several ``tiers`` (:func:`slot_tiers`; not under ``vmap``, where the
    tier's gate would be per design) the kinks run on the smallest tier of slots
    that holds the active sets, and go on from where they stopped on the next
    tier when a member needs a free slot; only the last tier's lack of one is
    an overflow. A tier that does not run costs nothing (neither its Gram rows
    nor a kink). Returns the members, their active and skipped cache columns,
    ``done``, the number of kinks, the slot-overflow flag and the tier reached.
    """
    M, Wc = mem.used.shape[0], st.idx.shape[0]
    skip0 = jnp.zeros((M, Wc), bool)
    ban0 = (jnp.full((M,), -1, jnp.int32), jnp.zeros((M,), qc.dtype))
    if len(tiers) == 1:
        mem, act, skip, _, done, k, over = _follow_at(
            st, mem, valid, qc, lam, max_epochs, done0, skip0, ban0, jnp.int32(0), rows_dtype
        )
        return mem, act, skip, done, k, over, jnp.int32(0)

    act = jnp.zeros((M, Wc), bool)
    skip, ban, done, k, over = skip0, ban0, done0, jnp.int32(0), jnp.bool_(False)
    pending = jnp.bool_(True)  # no tier has finished the step yet
    first = _tier(mem, tiers)
    tier = first
    for t, a in enumerate(tiers):
        # the smallest tier with a free slot runs; one that runs out of slots hands on to the next
        go = pending & (t >= first)

        def once(c, a=a):
            mem, act, skip, ban, done, k = c[1:-1]
            small, act, skip, ban, done, k, over = _follow_at(
                st, _slots(mem, a), valid, qc, lam, max_epochs, done, skip, ban, k, rows_dtype
            )
            return jnp.bool_(False), _into(small, mem), act, skip, ban, done, k, over

        # a tier that does not run costs nothing: a loop of at most one trip (a loop, not a cond: its carry is
        # updated in place, where a cond copies the inverses it passes through)
        c = (go, mem, act, skip, ban, done, k, jnp.bool_(False))
        _, mem, act, skip, ban, done, k, over = lax.while_loop(lambda c: c[0], once, c)
        tier = jnp.where(go, t, tier)
        pending = pending & ~(go & ~over)
        if t < len(tiers) - 1:
            over = jnp.bool_(False)  # a member needs a free slot: the next tier goes on from here
    return mem, act, skip, done, k, over, tier


def _settle(st: HomState, mem: Member, qc, tiers, tier):
    """The members after one step of iterative refinement, and their exact (working-precision) cache gradients.

    On the slots of ``tiers[tier]``, which hold every used one.
    """

    def on(a):
        def run(mem):
            small = _slots(mem, a)
            Gr = _gram_rows(st.C, small)
            small = jax.vmap(_refine)(small, Gr, qc)
            # only the coefficients change: a branch that returned the inverses would copy them
            sbeta = mem.sbeta.at[:, :a].set(small.sbeta)
            return sbeta, qc - jnp.einsum("fa,faw->fw", small.sbeta, Gr, precision=_HI)

        return run

    if len(tiers) == 1:
        sbeta, g = on(tiers[0])(mem)
    else:
        sbeta, g = lax.switch(tier, [on(a) for a in tiers], mem)
    return mem._replace(sbeta=sbeta), g


def off_path(mem: Member, g, act, skip, valid, lam):
    """Members whose refined grid solution breaks the path's optimality on the cache (``(M,)`` bool).

    An inactive (not skipped) cached feature above the penalty by more than a
    relative ``1e-9``, or an active coefficient whose sign is not the sign it
    entered with. The exact float64 path meets both to rounding (``~1e-13``).
    """
    above = valid & ~act & ~skip & (jnp.abs(g) > lam * (1 + _OFF_PATH_RTOL))
    return jnp.any(above, axis=1) | jnp.any(_wrong_signed(mem), axis=1)


def solve_ws(d, st: HomState, lam, tol, max_epochs, active, tiered=False):
    r"""Follow every member's path from the last accepted grid penalty to ``lam``.

    Returns the new state, the number of kinks and a flag that is false when
    the kink budget ``max_epochs`` ran out or a slot overflow occurred.
    ``active`` false (a traced flag) leaves the state as it is (the current
    point, not the anchor, and no kink): the lock step of a batch of designs
    (:func:`jaxknock._iterate.lockstep_while_loop`) runs this on designs that
    have finished.

    Mixed precision (float64 designs whose members' rows leave the cache,
    :func:`rows_dtype`): a kink is bound by reading its ``(A, W)`` Gram rows
    for :math:`w = G_{\cdot A} v`, so the kinks read a float32 copy of them
    (half the bytes); everything else (the inverse, the
    direction, the coefficients and the event times' other terms) stays in
    float64. The float32 ``w`` can only move an inactive feature's entry
    time by a rounding error, so the path reaches the grid penalty with the
    right active set except when an entry falls within that error of it. After
    the refinement the exact float64 gradients on the cache decide
    (:func:`off_path`); a member that is off the path redoes the grid step from
    its anchor with float64 rows, so the result is the exact path's either way.

    ``tiered`` (static; a design that is not under ``vmap``): the kinks run on
    the fewest active slots that hold the active sets (:func:`slot_tiers`).
    """
    del tol
    Wc = st.idx.shape[0]
    valid = jnp.arange(Wc) < st.size
    qc = jnp.take(d.q, st.idx, axis=1)
    M = st.beta.shape[0]
    exact = qc.dtype
    A = st.cur.slot_c.shape[-1]
    fast = rows_dtype(exact, M, A, Wc)
    tiers = slot_tiers(A) if tiered else (A,)

    def follow(start, done0):
        mem, act, skip, done, k, over, tier = _follow(st, start, valid, qc, lam, max_epochs, done0, fast, tiers)
        mem, g = _settle(st, mem, qc, tiers, tier)
        if fast != exact:
            redo = off_path(mem, g, act, skip, valid, lam) & done & ~done0 & ~over

            def again(_):
                mem2, _, _, done2, k2, over2, tier2 = _follow(
                    st, start, valid, qc, lam, max_epochs, ~redo, exact, tiers
                )
                mem2, _ = _settle(st, mem2, qc, tiers, tier2)
                pick = jax.tree_util.tree_map(lambda a, b: jnp.where(_bcast(redo, a), a, b), mem2, mem)
                return pick, jnp.where(redo, done2, done), k2, over2

            mem, done, k2, over2 = lax.cond(
                jnp.any(redo), again, lambda _: (mem, done, jnp.int32(0), jnp.bool_(False)), None
            )
            k, over = k + k2, over | over2
        # a coefficient that rounding left on the wrong side of zero is zero (and leaves at the next kink, member_kink)
        return mem._replace(sbeta=signed_coefficients(mem)), done, k, over

    if tiered:
        # not under vmap (there a cond runs both branches): a branch, so the path starts from the anchor itself
        # rather than from a select of the anchor and the current point (a copy of every inverse)
        def keep(_):
            return st.cur, jnp.ones((M,), bool), jnp.int32(0), jnp.bool_(False)

        mem, done, k, over = lax.cond(active, lambda _: follow(st.anchor, jnp.zeros((M,), bool)), keep, None)
    else:
        start = jax.tree_util.tree_map(lambda a, c: jnp.where(active, a, c), st.anchor, st.cur)
        mem, done, k, over = follow(start, jnp.broadcast_to(~jnp.asarray(active), (M,)))
        mem = mem._replace(sbeta=jnp.where(active, mem.sbeta, start.sbeta))
    beta = jax.vmap(lambda sc, u, b: jnp.zeros((Wc,), b.dtype).at[sc].add(jnp.where(u, b, 0)))(
        mem.slot_c, mem.used, mem.sbeta
    )
    ok = jnp.all(done) & ~over
    return st._replace(cur=mem, beta=beta, overflow=st.overflow | over, slot_over=st.slot_over | over), k, ok


def signed_coefficients(mem: Member):
    r"""The active coefficients with those of the wrong sign set to zero: ``sbeta_i = 0`` where ``sgn_i sbeta_i < 0``.

    On the exact path an active coefficient keeps the sign it entered with and
    leaves the active set where it reaches zero. A coefficient that reaches zero
    at a grid penalty, or within rounding of one, can end the grid step a few
    ``eps`` on the wrong side once the refinement (:func:`_refine`) has moved
    it; its gradient still sits at ``+lam sgn``, so the KKT check reads a
    violation of 2 (float32 knockoff filters on block-equicorrelated and AR(1)
    designs, n = 300-600: 3 of 64 failed so and were solved again in float64,
    session 27). Zero is the nearest point with the
    right sign, and the KKT check on the reported coefficients certifies the
    result (or fails it) as before.
    """
    return jnp.where(_wrong_signed(mem), 0, mem.sbeta)


def _wrong_signed(mem: Member) -> jax.Array:
    """Active slots whose coefficient has the opposite sign of the one it entered with."""
    return mem.used & (mem.sgn * mem.sbeta < 0)


def rows_dtype(exact, members: int, slots: int, width: int):
    """The dtype the kinks read Gram rows in: ``FAST_ROWS`` for float64 rows over ``FAST_ROWS_MIN_BYTES``.

    The rows are ``(members, slots, width)`` (the members' active slots on the
    cache columns); the decision is static (the shapes are known when the
    engine is traced). Other dtypes are read as they are.

    Example:
        >>> import jax.numpy as jnp
        >>> rows_dtype(jnp.float64, 6, 256, 432), rows_dtype(jnp.float64, 6, 896, 2080)
        (dtype('float64'), dtype('float32'))
    """
    exact = jnp.dtype(exact)
    big = members * slots * width * exact.itemsize > FAST_ROWS_MIN_BYTES
    return jnp.dtype(FAST_ROWS) if exact == jnp.float64 and big else exact


def _bcast(flag, a):
    """``(M,)`` ``flag`` shaped to broadcast against the member-batched leaf ``a``."""
    return flag.reshape(flag.shape + (1,) * (a.ndim - 1))
