r"""Streaming reader of ``scipy.sparse.save_npz`` CSR files, in bounded row blocks.

:func:`iter_npz_blocks` yields CSR row blocks of a saved matrix without
loading the file: the ``indptr``, ``indices`` and ``data`` members are decoded
as streams from the zip archive (compressed or not), so a block costs
``12 nnz_block`` bytes (float64 data, int32 indices) plus a window of
``indptr``. :func:`jaxknock.naive_bayes.class_sums_npz` sums such blocks.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator

import numpy as np

from jaxknock._checks import check_count, check_npz_archive

__all__ = ["DEFAULT_BLOCK_BYTES", "iter_npz_blocks", "npz_shape"]

DEFAULT_BLOCK_BYTES = 2**28  # 256 MiB of data + indices per block
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


def iter_npz_blocks(path: str | os.PathLike, *, max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[tuple]:
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

    max_block_bytes = check_count(max_block_bytes, "max_block_bytes")  # "1" was a comparison TypeError
    path = os.fspath(path)
    check_npz_archive(path)
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


def npz_shape(path) -> tuple[int, int]:
    """``(rows, columns)`` of a ``scipy.sparse.save_npz`` CSR file, read from its header."""
    check_npz_archive(path)
    with zipfile.ZipFile(os.fspath(path)) as zf:
        return _npz_header(zf, os.fspath(path))
