"""The batched fits of :func:`jaxknock.stability_selection`: selection counts over the subsamples, per engine.

Every engine returns ``(counts (L, p), union (L,), failed (L,))``: how many
subsamples select each feature at each penalty, the summed sizes of the
unions of the supports along every prefix of the grid, and the failed fits.
:mod:`jaxknock.stability` picks the engine and turns the counts into
probabilities, a range, a threshold and a bound:

* :func:`run_lockstep`: the lockstep homotopy (squared loss with an intercept),
  chunked here, the path itself in :mod:`jaxknock._stability_path`;
* :func:`run_engine`: the working-set engine of :mod:`jaxknock.l1.working_set`
  (:func:`~jaxknock.l1.working_set.member_paths`; a complementary pair is one
  design of its ``2 m`` rows, :func:`group_layout`), compiled in
  :func:`engine_counts` and re-run with larger capacities until nothing overflows;
* :func:`path_counts` / :func:`sharded_path_counts`: the warm-started path of
  :mod:`jaxknock.l1.path` on each subsample, on one device or sharded over a mesh
  (:func:`jaxknock.distributed.shard_batch`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _backend, _capacity, _memory, _stability_path
from jaxknock._scaling import scale_pow2
from jaxknock.l1 import working_set
from jaxknock.l1.path import path_solve
from jaxknock.l1.settings import L1Settings

__all__ = [
    "default_chunk",
    "engine_chunk",
    "engine_counts",
    "group_layout",
    "one_subsample",
    "path_coefs",
    "path_counts",
    "run_engine",
    "run_lockstep",
    "sharded_path_counts",
]


def run_lockstep(idx, X, y, lambdas, *, max_steps, chunk, mixed):
    """The selection counts of the lockstep homotopy (:mod:`jaxknock._stability_path`)."""
    B, m = idx.shape
    p = X.shape[1]
    slots = _stability_path.phase_slots(p, m)
    mixed = bool(mixed) and X.dtype == jnp.float64
    if mixed:
        X, lambdas, mixed = _float32_range(X, lambdas)
    if chunk is None:  # the per-backend choice and its measurement: _backend.lockstep_chunk
        chunk = _backend.lockstep_chunk(X.size * (X.dtype.itemsize + (4 if mixed else 0)))
    if chunk is None:
        per_item = X.dtype.itemsize * (2 * slots[-1] ** 2 + slots[-1] * m + 12 * p + 4 * X.shape[0])
        chunk = _memory.plan_chunk(B, per_item, shared_bytes=X.dtype.itemsize * X.size, what="subsample")
    counts, union, failed, over, _ = _stability_path.lockstep_counts(
        X, y, lambdas, idx, jnp.int32(max_steps), chunk=int(min(chunk, B)), slots=slots, mixed=mixed,
    )  # fmt: skip
    del over  # cannot happen: at most min(p, m) features are active on m centred rows
    return counts, union, failed


def _float32_range(X, lambdas):
    """``X`` and the penalties scaled by one power of two for the float32 products of ``mixed``, and whether
    those products are still faithful.

    A float64 design in units of ``1e40`` (or ``1e-40``) was ``inf`` (``0``) in float32: the directions came
    out wrong and every probability of the path could flip, with no failure counted. The lasso on
    ``(2^-e X, y)`` at penalties ``2^-e lambda`` has the same supports, and the scaling is exact, so a design
    already in float32's range gives the same bits. Columns whose largest entry is below ``2^-60`` of the
    largest one would still lose their precision in float32: those designs run every product in float64.
    """
    colmax = np.asarray(_column_max(X))
    top = float(colmax.max()) if colmax.size else 0.0
    if not top > 0:
        return X, lambdas, True
    e = int(np.frexp(top)[1])
    nonzero = colmax[colmax > 0]
    faithful = bool(np.ldexp(nonzero.min(), -e) >= 2.0**-60)
    return (*_ldexp_pair(X, lambdas, -e), faithful)


@jax.jit
def _column_max(X):
    return jnp.max(jnp.abs(X), axis=0)


@jax.jit
def _ldexp_pair(X, lambdas, e):
    return scale_pow2(X, e), scale_pow2(lambdas, e)


def path_coefs(Xs, ys, lambdas, settings: L1Settings):
    """The one seam to the l1 engine: ``(L, p)`` coefficients and ``(L,)`` result codes of one subsample."""
    sol = path_solve(Xs, ys, lambdas, settings)
    return sol.value, sol.result


def one_subsample(ix, X, y, lambdas, settings):
    """Supports ``(L, p)`` and failure flags ``(L,)`` of the path on the rows ``ix`` of one subsample."""
    coefs, codes = path_coefs(X[ix], y[ix], lambdas, settings)
    return coefs != 0, codes != 0


@functools.partial(jax.jit, static_argnames=("chunk",))
def path_counts(idx, X, y, lambdas, settings, chunk):
    """Selection counts ``(L, p)``, summed union sizes ``(L,)`` and failures ``(L,)`` over the subsamples."""

    def one(ix):
        sel, failed = one_subsample(ix, X, y, lambdas, settings)
        ever = lax.cummax(sel.astype(jnp.int32), axis=0)  # selected somewhere on lambdas[:k+1]
        return sel.astype(jnp.int32), jnp.sum(ever, axis=1), failed.astype(jnp.int32)

    sel, union, failed = lax.map(one, idx, batch_size=chunk)
    return sel.sum(0), union.sum(0), failed.sum(0)


def sharded_path_counts(idx, X, y, lambdas, settings, mesh, chunk):
    """As :func:`path_counts`, the subsamples sharded over ``mesh`` (:func:`jaxknock.distributed.shard_batch`)."""
    from jaxknock.distributed import shard_batch

    sel, failed = shard_batch(
        one_subsample,
        idx,
        broadcast=(X, y, lambdas, settings),
        mesh=mesh,
        axis_name=mesh.axis_names[0],
        chunk_size=chunk,
    )
    sel = jnp.asarray(sel, jnp.int32)
    union = jnp.sum(lax.cummax(sel, axis=1), axis=2).sum(0)
    return sel.sum(0), union, jnp.asarray(failed, jnp.int32).sum(0)


def default_chunk(B, m, p, L, itemsize, extra_bytes=0):
    """Subsamples per ``vmap`` batch: 1 on the CPU (sequential paths are fastest), else from memory.

    ``extra_bytes``: per item on top of the path's own arrays (the working-set engine's caches).
    The per-backend choice and its measurement: :func:`jaxknock._backend.loop_over_batch`.
    """
    if _backend.loop_over_batch("stability_subsamples"):
        return 1
    per_item = itemsize * (4 * m * p + 2 * L * p) + L * p * 4 + extra_bytes
    return _memory.plan_chunk(B, per_item, shared_bytes=itemsize * 2 * m * p, what="subsample", knob="chunk_size")


def group_layout(idx, complementary_pairs):
    """The subsamples as members of few-row designs for :func:`jaxknock.l1.working_set.member_paths`.

    A complementary pair is one design of ``2 m`` rows (its two halves) with two
    blocks, member ``0`` fitting block ``0`` and member ``1`` block ``1``; a plain
    subsample is a design of its ``m`` rows with one member. Returns
    ``(group_rows (G, rows), blocks (K, m), excl (M,))``; members are in subsample order.
    """
    B, m = idx.shape
    if complementary_pairs:
        return idx.reshape(B // 2, 2 * m), np.arange(2 * m, dtype=np.int32).reshape(2, m), np.array([1, 0], np.int32)
    return idx, np.arange(m, dtype=np.int32)[None], np.array([-1], np.int32)


@functools.partial(jax.jit, static_argnames=("chunk", "loss", "W", "slots", "max_steps"))
def engine_counts(gidx, X, y, lambdas, blocks, excl, tol, *, chunk, loss, W, slots, max_steps):
    """As :func:`path_counts`, on the working-set engine; also the capacity overflow flags.

    A ``fori_loop`` over chunks of ``chunk`` designs (each chunk ``vmap``-ed, none
    when ``chunk == 1``, the CPU default), the counts accumulated in the carry: on
    the CPU this measured 2x faster than ``lax.map(batch_size=1)``, whose ``vmap``
    of size 1 turns the engine's while loops into selects over the whole carry.
    """
    G = gidx.shape[0]
    nb = -(-G // chunk)
    pad = jnp.concatenate([gidx, jnp.broadcast_to(gidx[-1:], (nb * chunk - G, gidx.shape[1]))])
    gb = pad.reshape(nb, chunk, -1)
    real = (jnp.arange(nb * chunk) < G).reshape(nb, chunk)
    M = excl.shape[0]

    def one(ix, w):
        coefs, ok, over, sover = working_set.member_paths(
            X[ix], y[ix], lambdas, blocks, excl, tol, loss=loss, W=W, slots=slots, max_steps=max_steps
        )
        sel = (coefs != 0).astype(jnp.int32) * w  # (L, M, p)
        union = jnp.sum(lax.cummax(sel, axis=0), axis=(1, 2))
        return sel.sum(1), union, jnp.where(ok, 0, M * w).astype(jnp.int32), over & (w > 0), sover & (w > 0)

    def body(b, acc):
        # chunk 1: no vmap (a vmapped while loop selects its whole carry, the Gram cache, every step)
        run = jax.vmap(one) if chunk > 1 else (lambda ix, w: jax.tree.map(lambda a: a[None], one(ix[0], w[0])))
        sel, union, failed, over, sover = run(gb[b], real[b].astype(jnp.int32))
        return (
            acc[0] + sel.sum(0, dtype=jnp.int32),
            acc[1] + union.sum(0, dtype=jnp.int32),
            acc[2] + failed.sum(0, dtype=jnp.int32),
            acc[3] | jnp.any(over),
            acc[4] | jnp.any(sover),
        )

    L, p = lambdas.shape[0], X.shape[1]
    zero = jnp.zeros((L,), jnp.int32)
    acc0 = (jnp.zeros((L, p), jnp.int32), zero, zero, jnp.bool_(False), jnp.bool_(False))
    return lax.fori_loop(0, nb, body, acc0)


def engine_chunk(G, m, p, L, itemsize, *, loss, members, W, A):
    """Designs per ``vmap`` batch of the working-set engine at capacity ``(W, A)`` (:func:`default_chunk`).

    For the squared loss (the homotopy) each design also holds its Gram cache and slot
    inverses (:func:`jaxknock._memory.gram_cache_bytes`; ``W`` plus one chunk of new
    columns, as :func:`~jaxknock.l1.working_set.member_paths`, and at most that many slots).
    """
    extra = 0
    if loss == "squared":
        cache = W + working_set.cache_chunk(p)
        extra = _memory.gram_cache_bytes(members, cache, min(A, cache), itemsize)
    return default_chunk(G, m, p, L, itemsize, extra_bytes=extra)


def run_engine(idx, X, y, lambdas, *, complementary_pairs, loss, tol, max_steps, chunk):
    """The selection counts on the working-set engine, growing its capacities until nothing overflows.

    ``chunk`` (designs per ``vmap`` batch) ``None``: planned at every capacity (:func:`engine_chunk`).
    """
    gidx, blocks, excl = group_layout(idx, complementary_pairs)
    G = gidx.shape[0]
    p = X.shape[1]
    key = (gidx.shape, X.shape, str(X.dtype), loss)
    W, A = _capacity.STORE.start(("stability",) + key, (min(p, 512), 256))
    while True:
        c = chunk or engine_chunk(
            G, gidx.shape[1], p, lambdas.shape[0], X.dtype.itemsize, loss=loss, members=len(excl), W=W, A=A
        )
        counts, union, failed, over, sover = engine_counts(
            gidx, X, y, lambdas, jnp.asarray(blocks), jnp.asarray(excl), jnp.asarray(tol, X.dtype),
            chunk=int(min(c, G)), loss=loss, W=W, slots=A, max_steps=max_steps,
        )  # fmt: skip
        if bool(sover) and A < W:
            A = min(2 * A, W + 32)
        elif bool(over) and W < p:
            W = min(3 * W // 2, p)  # the cache (members x p x W) is most of the memory traffic: grow gently
        else:
            break
    _capacity.STORE.remember(("stability",) + key, W, A)
    return counts, union, failed
