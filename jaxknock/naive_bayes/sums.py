r"""Class sums, the sufficient statistics of naive Bayes, from any kind of input.

Naive Bayes needs only ``f_c = sum_{i: y_i = c} x_i`` and the class sizes
(:class:`ClassSums`); everything after them (:func:`jaxknock.sparse_naive_bayes`,
paths, ...) is ``O(C m)``. Two routes fill them:

* a dense in-memory array (NumPy or JAX, possibly traced under ``jit``): one
  one-hot matrix product on the device (:func:`class_sums`);
* everything else goes through **one** float64 host accumulator, block by
  block, with ``8 C m`` bytes for the sums plus one block: a ``scipy.sparse``
  matrix (one block, summed in ``O(nnz)`` without densifying), an iterable of
  ``(X_chunk, y_chunk)`` pairs (:func:`class_sums` with ``y=None``,
  :func:`class_sums_blocks`), CSR ``.npz`` shards streamed from disk
  (:func:`class_sums_npz`) and Dask arrays (:func:`class_sums_dask`). Labels
  may be given (``classes=``, in that order) or discovered as the blocks come
  (sorted at the end).

A sparse block is summed as a scatter of its non-zeros at ``(class of the row,
column)`` (``np.bincount``; ``O(nnz)``, and without an ``O(C m)`` buffer when
the block is much sparser than the accumulator). For a Criteo-sized hashed
design (tens of millions of rows, ``m = 2^24`` features) the rows never need
to be in memory at once.

Example::

    >>> import numpy as np, scipy.sparse as sp
    >>> X = np.array([[1, 0, 2], [0, 3, 0], [4, 0, 0]]); y = np.array([0, 1, 0])
    >>> class_sums(X, y).counts.tolist()
    [[5.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    >>> class_sums(sp.csr_matrix(X), y).counts.tolist()
    [[5.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    >>> chunks = [(X[:2], y[:2]), (sp.csr_matrix(X[2:]), y[2:])]
    >>> class_sums(iter(chunks)).n_samples.tolist()
    [2.0, 1.0]
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock._checks import check_count, check_nonempty, is_concrete
from jaxknock.naive_bayes._inputs import (
    MODELS,
    check_values,
    device_array,
    encode_labels,
    float_dtype,
    host_data,
    is_dask,
    is_sparse,
    label_tuple,
)
from jaxknock.naive_bayes.npz import DEFAULT_BLOCK_BYTES, iter_npz_blocks, npz_shape

__all__ = ["ClassSums", "class_sums", "class_sums_blocks", "class_sums_npz", "class_sums_dask"]


@partial(jax.jit, static_argnames=("num_classes", "dtype"))
def _dense_sums(X, codes, *, num_classes, dtype):
    onehot = jax.nn.one_hot(codes, num_classes, dtype=dtype)
    counts = jnp.matmul(onehot.T, X.astype(dtype), precision=lax.Precision.HIGHEST)
    return counts, jnp.sum(onehot, axis=0)


@partial(
    jax.tree_util.register_dataclass,
    data_fields=["counts", "n_samples"],
    meta_fields=["classes"],
)
@dataclasses.dataclass(frozen=True)
class ClassSums:
    """Sufficient statistics of naive Bayes: per-class feature sums and class sizes.

    ``counts[c] = f_c = sum_{i: y_i = classes[c]} X[i]`` (shape ``(C, m)``) and
    ``n_samples[c] = n_c = #{i: y_i = classes[c]}``. These are sufficient for
    naive Bayes: the multinomial log-likelihood is
    ``sum_c (f_c' log theta_c + n_c log pi_c)`` (plus a term free of the
    parameters), the Bernoulli one
    ``sum_c (f_c' log theta_c + (n_c 1 - f_c)' log(1 - theta_c) + n_c log pi_c)``.
    Sums add over disjoint pieces of the data,
    ``f_c(A u B) = f_c(A) + f_c(B)``, so data larger than memory is processed
    chunk by chunk (:meth:`update`) or in parallel pieces that are combined
    with :meth:`merge`; all fitting afterwards needs only ``O(C m)`` memory.
    A pytree (``classes`` is static), so it passes through ``jit``.

    Example:
        >>> import numpy as np
        >>> X = np.array([[1, 0, 2], [0, 3, 0], [4, 0, 0], [0, 1, 1]])
        >>> sums = ClassSums.empty(num_features=3)
        >>> for X_chunk, y_chunk in [(X[:2], ["a", "b"]), (X[2:], ["a", "b"])]:  # dense or scipy.sparse chunks
        ...     sums = sums.update(X_chunk, y_chunk)
        >>> sums.classes, sums.counts.tolist(), sums.n_samples.tolist()
        (('a', 'b'), [[5.0, 0.0, 2.0], [0.0, 4.0, 1.0]], [2.0, 2.0])
        >>> sums.merge(sums).n_samples.tolist()  # the sums of the data twice
        [4.0, 4.0]

    ``sparse_naive_bayes(sums, None, k)`` then fits from the sums alone.
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
        classes = label_tuple(np.asarray(classes)) if len(classes) else ()
        C = len(classes)
        return cls(jnp.zeros((C, num_features), dtype), jnp.zeros((C,), dtype), classes)

    def update(self, X, y, *, model: str | None = None) -> ClassSums:
        """Return the sums with one more chunk ``(X, y)`` added (see :meth:`merge` for the class order).

        The known classes keep their order (e.g. the ``classes`` given to :meth:`empty`) and labels new
        to the sums are appended, in sorted order.
        """
        return self.merge(class_sums(X, y, model=model))

    def merge(self, other: ClassSums) -> ClassSums:
        """Return the sums of the union of the data behind ``self`` and ``other``.

        Its classes are those of ``self``, in their order, followed by those of ``other`` that ``self``
        lacks, in ``other``'s order (the given order of ``classes`` is kept: a sorted union reordered
        ``empty(m, classes=("b", "a"))`` to ``("a", "b")`` on the first chunk holding both labels).
        """
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
        classes = self.classes + tuple(c for c in other.classes if c not in self.classes)
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


class _HostSums:
    """The float64 host accumulator of per-class sums behind every blockwise route.

    With ``classes`` given, their order is kept and other labels are an error;
    without, labels are added as they appear and sorted in :meth:`result`.
    ``num_features`` may be left to the first block.
    """

    def __init__(self, num_features=None, classes=None, model=None):
        self.fixed = classes is not None
        self.classes = label_tuple(np.asarray(classes)) if self.fixed else ()
        self.m = None if num_features is None else int(num_features)
        self.counts = None if self.m is None else np.zeros((len(self.classes), self.m))
        self.n = np.zeros(len(self.classes))
        self.model = model
        self.dtype = None

    def _codes(self, y, n) -> np.ndarray:
        if self.fixed:
            return np.asarray(encode_labels(y, n, self.classes)[0])
        codes, found = encode_labels(y, n, None)
        new = [c for c in found if c not in self.classes]
        if new:  # labels seen for the first time: append rows
            self.classes = self.classes + tuple(new)
            self.counts = np.concatenate([self.counts, np.zeros((len(new), self.m))])
            self.n = np.concatenate([self.n, np.zeros(len(new))])
        index = {c: i for i, c in enumerate(self.classes)}
        return np.asarray([index[c] for c in found], np.int64)[np.asarray(codes)]

    def add(self, X, y) -> None:
        """Add the sums of one block ``(X, y)`` (dense or scipy.sparse)."""
        X = host_data(X)
        if len(X.shape) != 2:
            raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {tuple(X.shape)}")
        if self.m is None:
            self.m = int(X.shape[1])
            self.counts = np.zeros((len(self.classes), self.m))
        if X.shape[1] != self.m:
            raise ValueError(f"a block has {X.shape[1]} columns, expected {self.m}")
        dt = float_dtype(X.dtype)
        self.dtype = dt if self.dtype is None else jnp.promote_types(self.dtype, dt)
        check_values(X, self.model)
        codes = self._codes(y, X.shape[0])
        C, m = len(self.classes), self.m
        self.n += np.bincount(codes, minlength=C)
        if is_sparse(X):
            # scatter of the non-zeros at (class of the row, column), summed in row order
            Xc = X if X.format == "csr" else X.tocsr()
            flat = np.repeat(codes.astype(np.int64), np.diff(Xc.indptr)) * m + Xc.indices
            data = np.asarray(Xc.data, dtype=np.float64)
            if 8 * flat.size < C * m:  # much sparser than the sums: no O(C m) buffer per block
                where, inverse = np.unique(flat, return_inverse=True)
                self.counts.reshape(-1)[where] += np.bincount(inverse.reshape(-1), weights=data, minlength=where.size)
            else:
                self.counts += np.bincount(flat, weights=data, minlength=C * m).reshape(C, m)
        else:
            X = np.asarray(X, dtype=np.float64)
            onehot = (codes[None, :] == np.arange(C)[:, None]).astype(np.float64)
            self.counts += onehot @ X

    def result(self) -> ClassSums:
        if self.m is None:
            raise ValueError("no chunks were given")
        counts, n, classes = self.counts, self.n, self.classes
        if not self.fixed and classes:
            order = np.argsort(np.asarray(classes), kind="stable")
            counts, n, classes = counts[order], n[order], label_tuple(np.asarray(classes)[order])
        dtype = self.dtype or jnp.result_type(float)
        return ClassSums(jnp.asarray(counts, dtype), jnp.asarray(n, dtype), classes)


def _accumulate(blocks: Iterable, *, num_features=None, classes=None, model=None) -> ClassSums:
    acc = _HostSums(num_features, classes, model)
    for i, item in enumerate(blocks):
        try:
            Xb, yb = item
        except (TypeError, ValueError):
            raise TypeError(
                f"chunk {i} is not an (X_chunk, y_chunk) pair; iterate over pairs of data and labels"
            ) from None
        acc.add(Xb, yb)
    return acc.result()


def _check_model(model):
    if model is not None and model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")


def _check_classes(classes):
    if classes is None:
        return None
    cls = np.asarray(classes)
    if cls.ndim != 1 or cls.size == 0 or np.unique(cls).size != cls.size:
        raise ValueError(f"classes must be a non-empty 1-D sequence of distinct labels, got {classes!r}")
    return cls


def class_sums(X, y=None, *, classes=None, model: str | None = None) -> ClassSums:
    """Per-class feature sums ``f_c = sum_{i: y_i = c} x_i`` and class sizes.

    Args:
      X: the data, one of: a dense ``(n, m)`` array (NumPy or JAX, counts or
        floats); a ``scipy.sparse`` matrix (CSR/CSC/..., summed in ``O(nnz)``
        without densifying); a Dask array (its row blocks are computed and
        summed one at a time); or, with ``y=None``, any iterable of
        ``(X_chunk, y_chunk)`` pairs (data larger than memory).
      y: labels, shape ``(n,)`` (a Dask array is fine with a Dask ``X``).
      classes: the labels to expect, in order; default: the sorted unique labels
        of ``y``. Required when ``y`` is traced (inside ``jit``).
      model: ``"multinomial"`` or ``"bernoulli"`` to validate ``X`` for that model
        (non-negative; binary for Bernoulli); the default only checks that ``X``
        is finite and non-negative. Concrete ``X`` raises ``ValueError``
        naming the bad entries; under ``jit`` bad values (or a traced label
        outside ``classes``) make the sums NaN, so every fit on them reports
        ``RESULTS.nonfinite`` instead of a plausible model.

    Returns:
      :class:`ClassSums`, accumulated in at least the default float dtype
      (float64 when ``jax_enable_x64`` is on, also for float32 or integer ``X``).

    Example:
        >>> import numpy as np, scipy.sparse as sp
        >>> X = np.array([[1, 0, 2], [0, 3, 0], [4, 0, 0]]); y = np.array([0, 1, 0])
        >>> sums = class_sums(X, y)  # f_0 = x_1 + x_3, f_1 = x_2
        >>> sums.classes, sums.counts.tolist(), sums.n_samples.tolist()
        ((0, 1), [[5.0, 0.0, 2.0], [0.0, 3.0, 0.0]], [2.0, 1.0])
        >>> class_sums(sp.csr_matrix(X), y).counts.tolist()  # scipy.sparse, no densification
        [[5.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
        >>> class_sums((X[i : i + 2], y[i : i + 2]) for i in range(0, 3, 2)).n_samples.tolist()  # chunks
        [2.0, 1.0]
        >>> jax.jit(lambda X, y: class_sums(X, y, classes=(0, 1)).counts)(X, y).tolist()  # traced
        [[5.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    """
    _check_model(model)
    if y is None:
        if isinstance(X, ClassSums):
            return X
        if hasattr(X, "shape") and not is_dask(X):
            raise ValueError("y is required unless X is an iterable of (X_chunk, y_chunk) pairs")
        return _accumulate(X, classes=_check_classes(classes), model=model)
    if is_dask(X):
        return class_sums_dask(X, y, classes=classes, model=model)
    if is_sparse(X):
        if len(X.shape) != 2:
            raise ValueError(f"X must be a 2-D matrix, got shape {X.shape}")
        check_nonempty(X, "X")
        return _accumulate([(X, y)], num_features=X.shape[1], classes=_check_classes(classes), model=model)
    X = host_data(X)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {tuple(X.shape)}")
    check_nonempty(X, "X")
    dtype = float_dtype(X.dtype)
    check_values(X, model)
    codes, cls = encode_labels(y, X.shape[0], classes)
    counts, n = _dense_sums(device_array(X, dtype), jnp.asarray(codes), num_classes=len(cls), dtype=dtype)
    bad = jnp.zeros((), bool)
    if not is_concrete(codes):  # traced labels outside classes (code C): poisoned, not silently dropped
        bad = bad | jnp.any(codes >= len(cls))
    if not is_concrete(X):  # traced values check_values could not see: poisoned, not fitted
        bad = bad | ~_traced_values_ok(X, model)
    if not (is_concrete(codes) and is_concrete(X)):
        counts, n = jnp.where(bad, jnp.nan, counts), jnp.where(bad, jnp.nan, n)
    return ClassSums(counts, n, cls)


def _traced_values_ok(X, model):
    """Traced twin of :func:`check_values`: ``X`` finite, non-negative (and 0/1 for Bernoulli)."""
    X = jnp.asarray(X)
    ok = jnp.all(X >= 0)
    if jnp.issubdtype(X.dtype, jnp.inexact):
        ok = ok & jnp.all(jnp.isfinite(X))
    if model == "bernoulli":
        ok = ok & jnp.all((X == 0) | (X == 1))
    return ok


def class_sums_blocks(blocks: Iterable, *, classes: Sequence, num_features: int, model: str | None = None):
    """Class sums of an iterable of ``(X_block, y_block)`` pairs (dense or scipy.sparse),
    accumulated on the host in float64 with known ``classes`` (in that order).

    Example:
        >>> sums = class_sums_blocks([(np.eye(3), [0, 1, 1])], classes=[0, 1], num_features=3)
        >>> sums.n_samples.tolist()
        [1.0, 2.0]
    """
    _check_model(model)
    if classes is None:
        raise ValueError("classes is required (the labels, in order)")
    return _accumulate(blocks, num_features=num_features, classes=_check_classes(classes), model=model)


def _load_labels(y):
    if isinstance(y, (str, os.PathLike)):
        return np.load(os.fspath(y), mmap_mode="r")
    return np.asarray(y)


def class_sums_npz(
    paths: Sequence, y, *, classes=None, model: str | None = None, max_block_bytes: int = DEFAULT_BLOCK_BYTES
):
    r"""Naive Bayes class sums of CSR ``.npz`` shards, out of core.

    ``counts[c] = sum_{i: y_i = classes[c]} X[i]`` over the rows of all shards
    in order (the matrix is their vertical stack), computed block by block
    (:func:`iter_npz_blocks`) with memory ``8 C m`` bytes for the sums plus one
    block; the result equals :func:`jaxknock.class_sums` of the stacked
    matrix (to rounding of the float64 sums; exact for counts).

    Args:
        paths: the shard files (``scipy.sparse.save_npz``, CSR, same number of columns).
        y: labels: one 1-D array or ``.npy`` path per shard (``.npy`` files
            are memory-mapped), or a single 1-D array for all rows.
        classes: the labels, in order (default: sorted unique labels of ``y``).
        model: ``"multinomial"`` / ``"bernoulli"`` value checks per block.
        max_block_bytes: bytes of ``data`` + ``indices`` per block.

    Returns:
        :class:`jaxknock.ClassSums`.

    Example:
        >>> import os, tempfile, numpy as np, scipy.sparse as sp
        >>> X = np.array([[1, 0, 2], [0, 3, 0], [4, 0, 0]]); y = np.array([0, 1, 0])
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     paths = [os.path.join(tmp, f"part{i}.npz") for i in range(2)]
        ...     sp.save_npz(paths[0], sp.csr_matrix(X[:2]))  # two shards: rows 0-1 and row 2
        ...     sp.save_npz(paths[1], sp.csr_matrix(X[2:]))
        ...     sums = class_sums_npz(paths, [y[:2], y[2:]])  # labels: one array (or .npy path) per shard
        >>> sums.counts.tolist(), sums.n_samples.tolist()
        ([[5.0, 0.0, 2.0], [0.0, 3.0, 0.0]], [2.0, 1.0])

    ``jaxknock.sparse_naive_bayes(sums, None, k)`` then fits from the sums.
    """
    _check_model(model)
    max_block_bytes = check_count(max_block_bytes, "max_block_bytes")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("paths is empty")
    shapes = [npz_shape(p) for p in paths]
    m = shapes[0][1]
    if any(s[1] != m for s in shapes):
        raise ValueError(f"the shards have different numbers of columns: {[s[1] for s in shapes]}")
    rows = [s[0] for s in shapes]

    def per_shard(v):
        return isinstance(v, os.PathLike) or (isinstance(v, str) and v.endswith(".npy")) or np.ndim(v) == 1

    if isinstance(y, (list, tuple)) and len(y) == len(paths) and all(per_shard(v) for v in y):
        labels = [_load_labels(v) for v in y]
    else:
        flat = _load_labels(y)
        if flat.ndim != 1 or flat.shape[0] != sum(rows):
            raise ValueError(
                f"y must be one label array per shard or a 1-D array of {sum(rows)} labels, got shape {flat.shape}"
            )
        starts = np.concatenate([[0], np.cumsum(rows)])
        labels = [flat[a:b] for a, b in zip(starts[:-1], starts[1:])]
    for p, lab, r in zip(paths, labels, rows):
        if lab.ndim != 1 or lab.shape[0] != r:
            raise ValueError(f"{p} has {r} rows but its labels have shape {lab.shape}")

    def blocks():
        for p, lab in zip(paths, labels):
            for start, B in iter_npz_blocks(p, max_block_bytes=max_block_bytes):
                yield B, np.asarray(lab[start : start + B.shape[0]])

    return _accumulate(blocks(), num_features=m, classes=_check_classes(classes), model=model)


def class_sums_dask(X, y, *, classes=None, model: str | None = None):
    r"""Naive Bayes class sums of a Dask array, one row block in memory at a time.

    ``X`` is a 2-D ``dask.array`` whose blocks are NumPy or scipy.sparse
    (e.g. ``da.from_delayed`` of ``load_npz`` shards, or ``map_blocks`` of
    ``scipy.sparse.csr_matrix``); ``y`` a 1-D Dask or NumPy array of labels.
    Each row block ``X.blocks[i]`` is computed (Dask's scheduler may read it
    in parallel) and added to a float64 host accumulator; memory is
    ``8 C m`` bytes plus one row block. Equals :func:`jaxknock.class_sums` of
    the computed array. Needs ``dask`` (``pip install jaxknock[dask]``).

    Example (skipped when dask is not installed):
        >>> import numpy as np, pytest
        >>> da = pytest.importorskip("dask.array")
        >>> X = np.array([[1, 0, 2], [0, 3, 0], [4, 0, 0]]); y = np.array([0, 1, 0])
        >>> sums = class_sums_dask(da.from_array(X, chunks=(2, -1)), y)  # two row blocks
        >>> sums.counts.tolist(), sums.n_samples.tolist()
        ([[5.0, 0.0, 2.0], [0.0, 3.0, 0.0]], [2.0, 1.0])
    """
    _check_model(model)
    if not is_dask(X):
        raise TypeError(f"X must be a dask array, got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has unknown row-chunk sizes; call X.compute_chunk_sizes() first")
    y_dask = hasattr(y, "blocks") and hasattr(y, "compute")
    if not y_dask:
        y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must have shape ({X.shape[0]},), got {tuple(y.shape)}")
    if y_dask and tuple(y.chunks[0]) != tuple(X.chunks[0]):
        y = y.rechunk((X.chunks[0],))

    def blocks():
        start = 0
        for i, r in enumerate(X.chunks[0]):
            Xi = X.blocks[i].compute()
            yi = y.blocks[i].compute() if y_dask else y[start : start + r]
            start += r
            yield Xi, yi

    return _accumulate(blocks(), num_features=X.shape[1], classes=_check_classes(classes), model=model)
