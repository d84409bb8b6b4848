r"""Exact top-``k`` selection with a traced ``k`` (radix select, no sort).

The sparse naive Bayes dual needs ``s_k(z)``, the sum of the ``k`` largest
entries of a score vector, and the top-``k`` set itself, for a ``k`` that may be
traced (one compiled solver serves every ``k``; a ``k``-path is a ``vmap`` or
``lax.map`` over ``k``). :func:`kth_largest` finds the exact ``k``-th largest
value by radix select on order-preserving integer keys (``O(m)`` per 8- or
16-bit pass); :func:`top_k` builds the structure ``(lam, gt, eq, need, n_eq, s)``
from which :func:`top_k_weights` (ties share the remaining weight) and
:func:`top_k_mask` (exactly ``k`` entries, ties broken by index) follow.

Example::

    >>> import jax.numpy as jnp
    >>> t = top_k(jnp.asarray([3.0, 1.0, 2.0, 2.0]), 3)
    >>> float(t.s), top_k_mask(t).tolist()
    (7.0, [True, False, True, True])
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["TopK", "kth_largest", "top_k", "top_k_weights", "top_k_mask"]

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


def kth_largest(z, k):
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


class TopK(NamedTuple):
    lam: jax.Array  # k-th largest value
    gt: jax.Array  # mask z > lam
    eq: jax.Array  # mask z == lam (ties)
    need: jax.Array  # number of ties inside the top k
    n_eq: jax.Array
    s: jax.Array  # s_k(z), the sum of the k largest entries


def top_k(z, k):
    """Top-``k`` structure of ``z`` for a (possibly traced) ``0 <= k <= z.size``."""
    m = z.shape[-1]
    if z.dtype.itemsize < 4:
        z = z.astype(jnp.float32)
    kk = jnp.clip(jnp.asarray(k, jnp.int32), 1, m)
    lam = kth_largest(z, kk)
    gt = z > lam
    eq = z == lam
    n_gt = jnp.sum(gt, dtype=jnp.int32)
    n_eq = jnp.maximum(jnp.sum(eq, dtype=jnp.int32), 1)
    need = kk - n_gt
    s = jnp.sum(jnp.where(gt, z, 0)) + need.astype(z.dtype) * lam
    on = jnp.asarray(k) > 0
    return TopK(lam, gt & on, eq & on, need, n_eq, jnp.where(on, s, 0))


def top_k_weights(t: TopK, dtype):
    """Fractional top-k indicator: ties share the remaining weight equally."""
    w = t.need.astype(dtype) / t.n_eq.astype(dtype)
    return jnp.where(t.gt, 1, jnp.where(t.eq, w, 0)).astype(dtype)


def top_k_mask(t: TopK):
    """Boolean mask of exactly k entries (ties broken by index)."""
    split = t.need < jnp.sum(t.eq, dtype=jnp.int32)  # only then is a cumsum needed
    return lax.cond(
        split,
        lambda: t.gt | (t.eq & (jnp.cumsum(t.eq, dtype=jnp.int32) <= t.need)),
        lambda: t.gt | t.eq,
    )
