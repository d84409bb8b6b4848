r"""Group knockoffs: block-diagonal ``S`` matrices (Dai & Barber 2016; Chu et al. 2024).

Group knockoffs exchange whole groups of features: with a partition of the
``p`` features into groups ``g``, ``S`` is block diagonal, ``S = blockdiag(S_g)``,
and Gaussian knockoffs need

.. math:: S_g \succeq 0 \ \text{for every } g, \qquad \tfrac{m+1}{m}\Sigma - S \succeq 0

(``m`` simultaneous knockoffs; ``m = 1`` gives ``2 Sigma - S >= 0``).

* :class:`BlockDiagonal` - the value of a group solve: the blocks padded to a
  common size ``b`` and stacked ``(G, b, b)``, with the group index;
  :meth:`BlockDiagonal.dense` builds the ``p x p`` matrix.
* :func:`group_index` - the group structure of a label vector (host side).
* :func:`group_s_matrix` - equicorrelated, SDP and maximum-entropy / MVR group
  ``S`` (see its docstring for the definitions and algorithms).

Batching: every per-group computation (block Cholesky factors, inverses,
square roots) runs on the padded ``(G, b, b)`` stack in one vmapped call; the
padding of a block smaller than ``b`` is the identity (so Cholesky factors,
inverses and log-determinants of padded blocks are exact for the real part and
trivial for the pad).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks

__all__ = ["BlockDiagonal", "Groups", "group_index"]

HIGHEST = lax.Precision.HIGHEST


def _mm(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


class Groups(NamedTuple):
    """Index of a partition of ``p`` features into ``G`` groups (see :func:`group_index`).

    Attributes:
        group_of: ``(p,)`` int, the group (``0..G-1``) of each feature.
        position: ``(p,)`` int, the slot of each feature inside its group's block.
        members: ``(G, b)`` int, the feature in each slot (``p`` marks padding).
        sizes: ``(G,)`` int, the group sizes.
        labels: ``(G,)`` the original labels of the groups (numpy, sorted).
    """

    group_of: np.ndarray
    position: np.ndarray
    members: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray

    @property
    def num_groups(self) -> int:
        return int(self.sizes.shape[0])

    @property
    def block_size(self) -> int:
        return int(self.members.shape[1])


def group_index(groups, p: int | None = None, *, name: str = "groups") -> Groups:
    """The :class:`Groups` index of a vector of integer group labels (one per feature).

    Labels are any integers (e.g. ``[3, 3, 7, 1]``); groups are numbered in the
    order of their sorted labels, features keep their order inside a group.
    A :class:`Groups` passes through unchanged (after the length check).

    Raises:
        TypeError: labels that are not integers (floats with a fractional part,
            booleans, strings).
        ValueError: not a 1-D vector, or its length differs from ``p``.

    Example:
        >>> g = group_index([5, 5, 2, 5])
        >>> g.group_of.tolist(), g.members.tolist()
        ([1, 1, 0, 1], [[2, 4, 4], [0, 1, 3]])
    """
    if isinstance(groups, Groups):
        if p is not None and groups.group_of.shape[0] != p:
            raise ValueError(f"{name} describes {groups.group_of.shape[0]} features but there are p = {p}")
        return groups
    if not _checks.is_concrete(groups):
        raise TypeError(f"{name} must be concrete (a numpy/JAX array outside jit): the group sizes fix the shapes")
    g = np.asarray(groups)
    if g.dtype == bool or g.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integer group ids, one per feature; got dtype {g.dtype}")
    if g.ndim != 1:
        raise ValueError(f"{name} must be a 1-D vector of group ids (one per feature), got shape {g.shape}")
    if g.dtype.kind == "f":
        if not np.all(np.isfinite(g)) or np.any(g != np.round(g)):
            bad = g[~np.isfinite(g) | (g != np.round(g))][0]
            raise TypeError(f"{name} must hold integer group ids, one per feature; found the non-integer {bad!r}")
        g = g.astype(np.int64)
    if p is not None and g.shape[0] != p:
        raise ValueError(f"{name} has length {g.shape[0]} but there are p = {p} features")
    if g.shape[0] == 0:
        raise ValueError(f"{name} is empty")
    n = g.shape[0]
    labels, group_of, sizes = np.unique(g, return_inverse=True, return_counts=True)
    group_of = group_of.reshape(-1)
    order = np.argsort(group_of, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    position = np.empty(n, np.int64)
    position[order] = np.arange(n) - np.repeat(starts, sizes)
    b = int(sizes.max())
    members = np.full((labels.shape[0], b), n, np.int64)
    members[group_of, position] = np.arange(n)
    return Groups(group_of.astype(np.int32), position.astype(np.int32), members.astype(np.int32), sizes, labels)


class BlockDiagonal(NamedTuple):
    r"""A block-diagonal ``p x p`` matrix stored as padded blocks (a pytree).

    Attributes:
        blocks: ``(G, b, b)``; block ``g`` holds ``S_g`` in its leading
            ``|g| x |g|`` corner and zeros elsewhere.
        members: ``(G, b)`` feature index of each slot (``p`` for padding).
        group_of: ``(p,)`` group of each feature.
        position: ``(p,)`` slot of each feature in its block.

    Example:
        >>> import jax.numpy as jnp
        >>> g = group_index([0, 1, 0])
        >>> S = BlockDiagonal(jnp.array([[[1.0, 0.5], [0.5, 1.0]], [[2.0, 0.0], [0.0, 0.0]]]),
        ...                   *map(jnp.asarray, (g.members, g.group_of, g.position)))
        >>> S.dense().tolist()
        [[1.0, 0.0, 0.5], [0.0, 2.0, 0.0], [0.5, 0.0, 1.0]]
    """

    blocks: jax.Array
    members: jax.Array
    group_of: jax.Array
    position: jax.Array

    @property
    def shape(self) -> tuple[int, int]:
        p = self.group_of.shape[-1]
        return (p, p)

    def dense(self):
        """The ``(p, p)`` matrix (``O(p^2)`` memory)."""
        g, pos = self.group_of, self.position
        vals = self.blocks[g[:, None], pos[:, None], pos[None, :]]
        return jnp.where(g[:, None] == g[None, :], vals, 0.0)

    def diagonal(self):
        """The ``(p,)`` diagonal."""
        return self.blocks[self.group_of, self.position, self.position]


def gather_blocks(A, members, pad_identity: bool = True):
    """The ``(G, b, b)`` diagonal blocks ``A[g, g]`` of a dense ``(p, p)`` matrix, padded.

    Padding slots (``members == p``) get the identity (or zeros).
    """
    p = A.shape[-1]
    valid = members < p
    idx = jnp.where(valid, members, 0)
    B = A[idx[:, :, None], idx[:, None, :]]
    mask = valid[:, :, None] & valid[:, None, :]
    b = members.shape[1]
    pad = jnp.eye(b, dtype=A.dtype) * (~valid[:, :, None]) if pad_identity else 0.0
    return jnp.where(mask, B, 0.0) + pad


def block_diagonal(blocks, groups: Groups) -> BlockDiagonal:
    """Wrap padded ``(G, b, b)`` blocks (padding zeroed) with the index of ``groups``."""
    p = groups.group_of.shape[0]
    valid = jnp.asarray(groups.members) < p
    mask = valid[:, :, None] & valid[:, None, :]
    return BlockDiagonal(
        jnp.where(mask, blocks, 0.0),
        jnp.asarray(groups.members),
        jnp.asarray(groups.group_of),
        jnp.asarray(groups.position),
    )
