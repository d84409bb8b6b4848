r"""Out-of-core class sums for sparse naive Bayes: CSR ``.npz`` shards and Dask arrays.

Naive Bayes needs only the per-class feature sums ``f_c = sum_{i: y_i = c} x_i``
and the class sizes (:class:`jaxknock.ClassSums`); everything after them
(:func:`jaxknock.sparse_naive_bayes`, paths, ...) is unchanged. For a
Criteo-sized hashed design (tens of millions of rows, ``m = 2^24``
features) the rows never need to be in memory at once: this module streams
row blocks and accumulates on the host in float64.

* :func:`iter_npz_blocks` reads ``scipy.sparse.save_npz`` CSR files
  (compressed or not) as CSR row blocks without loading a file: the
  ``indptr``, ``indices`` and ``data`` members are decoded as streams from
  the zip archive, so a block costs ``12 nnz_block`` bytes (float64 data,
  int32 indices) plus a window of ``indptr``.
* :func:`class_sums_npz` sums a list of such shards, with labels per shard
  (arrays or ``.npy`` files, memory-mapped).
* :func:`class_sums_dask` sums a Dask array (dense or scipy.sparse blocks)
  one row block at a time (``dask`` is the optional extra ``jaxknock[dask]``).

Memory: the accumulator ``C m`` float64 numbers plus one block
(``max_block_bytes``) and its ``nnz`` flat target indices. The block sum is a
scatter-add of the non-zeros into ``counts[class of row, column]``
(``np.add.at``, ``O(nnz)`` with no ``O(m)`` term per block), bounded by
random access into the ``8 C m``-byte accumulator (~10^7 non-zeros/s).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Iterator, Sequence

import jax.numpy as jnp
import numpy as np

__all__ = ["iter_npz_blocks", "class_sums_npz", "class_sums_dask", "class_sums_blocks"]

_DEFAULT_BLOCK_BYTES = 2**28  # 256 MiB of data + indices per block
_INDPTR_WINDOW = 2**20  # rows of indptr decoded at a time


class _NpyStream:
    """Sequential reader of one ``.npy`` member of an ``.npz`` archive."""

    def __init__(self, zf: zipfile.ZipFile, name: str, path: str):
        try:
            self.f = zf.open(name)
        except KeyError:
            raise ValueError(f"{path} has no member {name!r}: not a scipy.sparse.save_npz file") from None
        version = np.lib.format.read_magic(self.f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(self.f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(self.f)
        if dtype.hasobject:
            raise ValueError(f"{path}:{name} holds Python objects; refusing to unpickle")
        self.shape, self.dtype, self.left = shape, dtype, int(np.prod(shape))

    def read(self, count: int) -> np.ndarray:
        count = int(min(count, self.left))
        out = np.empty(count, self.dtype)
        view = memoryview(out).cast("B")
        got = 0
        while got < view.nbytes:
            n = self.f.readinto(view[got:])
            if not n:
                raise ValueError("truncated .npz member")
            got += n
        self.left -= count
        return out

    def close(self):
        self.f.close()


def _npz_header(zf: zipfile.ZipFile, path: str):
    def small(name):
        s = _NpyStream(zf, name, path)
        try:
            return s.read(s.left).reshape(s.shape)
        finally:
            s.close()

    fmt = small("format.npy")
    fmt = fmt.item() if fmt.ndim == 0 else fmt
    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
    if fmt != "csr":
        raise ValueError(
            f"{path} stores a {fmt!r} matrix; row blocks need CSR: convert with scipy.sparse.save_npz(path, X.tocsr())"
        )
    shape = tuple(int(v) for v in small("shape.npy"))
    return shape


def iter_npz_blocks(path: str | os.PathLike, *, max_block_bytes: int = _DEFAULT_BLOCK_BYTES) -> Iterator[tuple]:
    """Row blocks of a CSR matrix saved with ``scipy.sparse.save_npz``, with bounded memory.

    Yields ``(row_start, block)`` with ``block`` the CSR matrix of rows
    ``row_start : row_start + block.shape[0]``, consecutive and covering all
    rows. Each block holds at most ``max_block_bytes`` of ``data`` + ``indices``
    (a single larger row is yielded alone). The archive members are decoded
    as streams, so a multi-GB shard is never loaded whole.

    Example:
        >>> import scipy.sparse as sp
        >>> sp.save_npz("/tmp/x.npz", sp.random(1000, 50, density=0.1, format="csr"))
        >>> sum(b.shape[0] for _, b in iter_npz_blocks("/tmp/x.npz", max_block_bytes=4096))
        1000
    """
    import scipy.sparse as sp

    if max_block_bytes < 1:
        raise ValueError(f"max_block_bytes must be positive, got {max_block_bytes}")
    path = os.fspath(path)
    with zipfile.ZipFile(path) as zf:
        n, m = _npz_header(zf, path)
        indptr_s = _NpyStream(zf, "indptr.npy", path)
        indices_s = _NpyStream(zf, "indices.npy", path)
        data_s = _NpyStream(zf, "data.npy", path)
        try:
            if indptr_s.left != n + 1:
                raise ValueError(f"{path}: indptr has {indptr_s.left} entries, expected {n + 1}")
            per_nnz = indices_s.dtype.itemsize + data_s.dtype.itemsize
            budget = max(1, int(max_block_bytes) // per_nnz)
            first = indptr_s.read(1)
            base = int(first[0]) if first.size else 0
            row = 0
            while row < n:
                window = np.concatenate([[base], indptr_s.read(min(_INDPTR_WINDOW, n - row))]).astype(np.int64)
                lo = 0
                while lo < window.size - 1:
                    # largest hi with window[hi] - window[lo] <= budget (at least one row)
                    hi = int(np.searchsorted(window, window[lo] + budget, side="right")) - 1
                    hi = min(max(hi, lo + 1), window.size - 1)
                    nnz = int(window[hi] - window[lo])
                    indices = indices_s.read(nnz)
                    data = data_s.read(nnz)
                    if indices.size != nnz or data.size != nnz:
                        raise ValueError(f"{path}: indices/data shorter than indptr says")
                    block = sp.csr_matrix((data, indices, window[lo : hi + 1] - window[lo]), shape=(hi - lo, m))
                    yield row + lo, block
                    lo = hi
                row += window.size - 1
                base = int(window[-1])
        finally:
            for s in (indptr_s, indices_s, data_s):
                s.close()


def _npz_shape(path) -> tuple[int, int]:
    with zipfile.ZipFile(os.fspath(path)) as zf:
        return _npz_header(zf, os.fspath(path))


class _HostSums:
    """float64 accumulator of per-class sums on the host."""

    def __init__(self, classes: tuple, num_features: int, model):
        self.classes = classes
        self.sorted = np.asarray(classes)
        self.order = np.argsort(self.sorted, kind="stable")
        self.counts = np.zeros((len(classes), int(num_features)))
        self.n = np.zeros(len(classes))
        self.model = model
        self.dtype = None

    def codes(self, y) -> np.ndarray:
        y = np.asarray(y).reshape(-1)
        cls = self.sorted[self.order]
        pos = np.clip(np.searchsorted(cls, y), 0, len(cls) - 1)
        bad = cls[pos] != y
        if bad.any():
            raise ValueError(f"labels {np.unique(y[bad])[:10].tolist()} are not in classes {self.classes}")
        return self.order[pos]

    def add(self, X, y):
        from jaxknock.naive_bayes import _check_values, _float_dtype, _is_sparse

        if X.shape[1] != self.counts.shape[1]:
            raise ValueError(f"a block has {X.shape[1]} columns, expected {self.counts.shape[1]}")
        if X.shape[0] != np.shape(y)[0]:
            raise ValueError(f"a block has {X.shape[0]} rows but {np.shape(y)[0]} labels")
        dt = _float_dtype(X.dtype)
        self.dtype = dt if self.dtype is None else jnp.promote_types(self.dtype, dt)
        _check_values(X, self.model)
        codes = self.codes(y)
        self.n += np.bincount(codes, minlength=len(self.classes))
        if _is_sparse(X):
            # scatter-add of the non-zeros at (class of the row, column): O(nnz), no O(m) work per block
            Xc = X if X.format == "csr" else X.tocsr()
            m = self.counts.shape[1]
            where = np.repeat(codes.astype(np.int64), np.diff(Xc.indptr)) * m + Xc.indices
            np.add.at(self.counts.reshape(-1), where, np.asarray(Xc.data, dtype=np.float64))
        else:
            X = np.asarray(X, dtype=np.float64)
            onehot = (codes[None, :] == np.arange(len(self.classes))[:, None]).astype(np.float64)
            self.counts += onehot @ X

    def result(self):
        from jaxknock.naive_bayes import ClassSums

        dtype = self.dtype or jnp.result_type(float)
        return ClassSums(jnp.asarray(self.counts, dtype), jnp.asarray(self.n, dtype), self.classes)


def _label_tuple(values) -> tuple:
    return tuple(v.item() if hasattr(v, "item") else v for v in values)


def _load_labels(y):
    if isinstance(y, (str, os.PathLike)):
        return np.load(os.fspath(y), mmap_mode="r")
    return np.asarray(y)


def class_sums_blocks(blocks: Iterable, *, classes: Sequence, num_features: int, model: str | None = None):
    """Class sums of an iterable of ``(X_block, y_block)`` pairs (dense or scipy.sparse),
    accumulated on the host in float64 with known ``classes``; see :mod:`jaxknock._io`.

    Example:
        >>> sums = class_sums_blocks([(np.eye(3), [0, 1, 1])], classes=[0, 1], num_features=3)
        >>> sums.n_samples.tolist()
        [1.0, 2.0]
    """
    if model is not None and model not in ("multinomial", "bernoulli"):
        raise ValueError(f"model must be 'multinomial' or 'bernoulli', got {model!r}")
    cls = np.asarray(classes)
    if cls.ndim != 1 or cls.size == 0 or np.unique(cls).size != cls.size:
        raise ValueError(f"classes must be a non-empty 1-D sequence of distinct labels, got {classes!r}")
    acc = _HostSums(_label_tuple(cls), num_features, model)
    for item in blocks:
        try:
            Xb, yb = item
        except (TypeError, ValueError):
            raise TypeError("blocks must be (X_block, y_block) pairs") from None
        acc.add(Xb, yb)
    return acc.result()


def class_sums_npz(
    paths: Sequence, y, *, classes=None, model: str | None = None, max_block_bytes: int = _DEFAULT_BLOCK_BYTES
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
        >>> sums = class_sums_npz(["part0.npz", "part1.npz"], ["y0.npy", "y1.npy"])
        >>> sol = jaxknock.sparse_naive_bayes(sums, None, k=100)
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("paths is empty")
    shapes = [_npz_shape(p) for p in paths]
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
    if classes is None:
        classes = np.unique(np.concatenate([np.unique(lab) for lab in labels]))

    def blocks():
        for p, lab in zip(paths, labels):
            for start, B in iter_npz_blocks(p, max_block_bytes=max_block_bytes):
                yield B, np.asarray(lab[start : start + B.shape[0]])

    return class_sums_blocks(blocks(), classes=classes, num_features=m, model=model)


def class_sums_dask(X, y, *, classes=None, model: str | None = None):
    r"""Naive Bayes class sums of a Dask array, one row block in memory at a time.

    ``X`` is a 2-D ``dask.array`` whose blocks are NumPy or scipy.sparse
    (e.g. ``da.from_delayed`` of ``load_npz`` shards, or ``map_blocks`` of
    ``scipy.sparse.csr_matrix``); ``y`` a 1-D Dask or NumPy array of labels.
    Each row block ``X.blocks[i]`` is computed (Dask's scheduler may read it
    in parallel) and added to a float64 host accumulator; memory is
    ``8 C m`` bytes plus one row block. Equals :func:`jaxknock.class_sums` of
    the computed array. Needs ``dask`` (``pip install jaxknock[dask]``).

    Example:
        >>> import dask.array as da
        >>> sums = class_sums_dask(da.from_array(X, chunks=(10_000, -1)), y)
    """
    if not (hasattr(X, "blocks") and hasattr(X, "chunks") and hasattr(X, "compute")):
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
    if classes is None:  # label blocks are small; one at a time all the same
        classes = (
            np.unique(np.concatenate([np.unique(np.asarray(y.blocks[i].compute())) for i in range(y.numblocks[0])]))
            if y_dask
            else np.unique(y)
        )

    def blocks():
        start = 0
        for i, r in enumerate(X.chunks[0]):
            Xi = X.blocks[i].compute()
            yi = y.blocks[i].compute() if y_dask else y[start : start + r]
            start += r
            yield Xi, yi

    return class_sums_blocks(blocks(), classes=classes, num_features=X.shape[1], model=model)
