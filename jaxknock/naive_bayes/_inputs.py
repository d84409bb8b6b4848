"""Input handling for naive Bayes (package-private): array kinds, dtypes, labels, value checks.

Shared by :mod:`jaxknock.naive_bayes.sums` and :mod:`jaxknock.naive_bayes.model`;
every check runs on concrete inputs before any tracing, with a message that
names the offending entries.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock._checks import check_class_labels, is_concrete, is_sparse
from jaxknock._containers import host_numeric

__all__ = [
    "MODELS",
    "is_sparse",
    "is_dask",
    "float_dtype",
    "host_data",
    "device_array",
    "label_tuple",
    "encode_labels",
    "check_values",
]

MODELS = ("multinomial", "bernoulli")


def is_dask(X) -> bool:
    """A Dask array (duck-typed: ``blocks``, ``chunks`` and ``compute``)."""
    return hasattr(X, "blocks") and hasattr(X, "chunks") and hasattr(X, "compute")


def float_dtype(dtype):
    """Dtype of the class sums: at least the default float (float64 under x64).

    Sums of many counts lose integers beyond 2**24 in float32 and the dual
    objective is a difference of large terms, so the sums are upcast; pass a
    float32 :class:`ClassSums` explicitly to fit in float32.
    """
    dtype = np.dtype(dtype).newbyteorder("=")  # big-endian data (a scipy.sparse '>f8' .data) sums as native
    if dtype.kind == "f" and dtype.itemsize > 8:  # long double: JAX has no such type; the host sums are float64
        dtype = np.dtype(np.float64)
    if np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"X must be real, got dtype {dtype}")
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return jnp.dtype(
            jnp.promote_types(jax.dtypes.canonicalize_dtype(dtype), jnp.result_type(float))
            if np.issubdtype(dtype, np.floating)
            else jnp.result_type(float)
        )
    raise TypeError(f"X must hold numbers, got dtype {dtype}")


def host_data(X):
    """A dense host ``X`` (list, masked array, pandas DataFrame, big-endian or long double array) as a NumPy
    array JAX can take (:func:`~jaxknock._containers.host_numeric`); scipy.sparse, Dask, JAX and traced ``X``
    pass through. A DataFrame was an ``AttributeError`` (no ``dtype``), a masked array JAX's error."""
    if is_sparse(X) or is_dask(X) or isinstance(X, jax.Array) or not is_concrete(X):
        return X
    return np.asarray(host_numeric(X, "X"))


def device_array(X, dtype):
    """``X`` as a JAX array; a host array whose dtype JAX would narrow is cast to ``dtype`` on the host first.

    Without ``jax_enable_x64`` an int64 count of ``2**32 + 5`` became ``5`` (and ``2**31`` became negative)
    in ``jnp.asarray``: class sums and scores of other data, silently (the scipy.sparse route summed on the
    host and disagreed). The float ``dtype`` of the sums / scores rounds such a count instead.
    """
    if not isinstance(X, jax.Array) and hasattr(X, "dtype"):
        if jax.dtypes.canonicalize_dtype(X.dtype) != np.dtype(X.dtype):
            X = np.asarray(X, dtype)
    return jnp.asarray(X)


def label_tuple(values) -> tuple:
    """Labels as a tuple of Python scalars (hashable, static under ``jit``)."""
    return tuple(v.item() if hasattr(v, "item") else v for v in values)


def _class_order(classes):
    """``classes`` as a 1-D numpy array of distinct labels (the same check with and without ``jit``)."""
    if not is_concrete(classes):  # was JAX's TracerArrayConversionError from np.asarray
        raise TypeError(
            "classes must be concrete (a list, or a NumPy / JAX array made outside jax.jit / jax.vmap): the "
            "labels fix the number of classes, so they cannot be traced"
        )
    cls = np.asarray(classes)
    if cls.ndim != 1 or len(np.unique(cls)) != cls.shape[0]:
        raise ValueError(f"classes must be a 1-D sequence of distinct labels, got {classes!r}")
    return cls


def _lookup(xp, cls, y):
    """Code of each label of ``y`` in ``cls`` (any order), and whether it is one of them (``xp``: numpy or jax)."""
    order = np.argsort(cls, kind="stable")
    sorted_cls = xp.asarray(cls[order])
    pos = xp.clip(xp.searchsorted(sorted_cls, y), 0, max(len(cls) - 1, 0))
    known = (sorted_cls[pos] == y) if len(cls) else xp.zeros(y.shape, bool)
    return xp.asarray(order)[pos], known


def encode_labels(y, n, classes):
    """Map labels to codes ``0..C-1``; returns (codes, classes tuple)."""
    if not is_concrete(y):
        if classes is None:
            raise TypeError(
                "y is traced (inside jit/vmap): pass classes=... (the sorted label "
                "values) so that the labels can be encoded without inspecting y"
            )
        cls = _class_order(classes)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y must have shape ({n},), got {tuple(y.shape)}")
        codes, known = _lookup(jnp, cls, y)
        # a label outside classes gets the code C (no class): class_sums NaN-poisons the sums
        return jnp.where(known, codes, len(cls)).astype(jnp.int32), label_tuple(cls)
    y = np.asarray(host_numeric(y, "y"))  # a masked label is refused, not read as the value under the mask
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D array of labels, got shape {y.shape}")
    if y.shape[0] != n:
        raise ValueError(f"X has {n} rows but y has {y.shape[0]} labels; they must match")
    if classes is None:
        check_class_labels(y, "y")
        cls = np.unique(y)
    else:
        cls = _class_order(classes)
    codes, known = _lookup(np, cls, y)
    if not np.all(known):
        bad = np.unique(y[~known])
        raise ValueError(f"y contains label(s) {label_tuple(bad[:10])} that are not in classes {label_tuple(cls)}")
    return codes.astype(np.int32), label_tuple(cls)


def _describe_entries(rows, cols, vals, limit=5):
    items = [
        f"X[{int(r)}, {int(c)}] = {v.item() if hasattr(v, 'item') else v!r}"
        for r, c, v in zip(rows[:limit], cols[:limit], vals[:limit])
    ]
    return ", ".join(items)


def _check_structure(Xc):
    """A CSR / CSC matrix whose index arrays describe it: scipy builds one from ``(data, indices, indptr)``
    (and ``iter_npz_blocks`` from a file) without checking them. A column index ``>= m`` was summed into the
    next class's first features (class sums of other data, silently); a decreasing ``indptr`` crashed in C++."""
    major, minor = Xc.shape if Xc.format == "csr" else Xc.shape[::-1]
    ip, ix = np.asarray(Xc.indptr), np.asarray(Xc.indices)
    kind = "column" if Xc.format == "csr" else "row"
    if ip.shape != (major + 1,) or (ip.size and (ip[0] != 0 or ip[-1] > ix.size)) or np.any(np.diff(ip) < 0):
        raise ValueError(
            f"X (scipy.sparse {Xc.format}) has an invalid indptr: it must start at 0, never decrease and end "
            f"at most at the {ix.size} stored entries, with {major + 1} entries"
        )
    used = ix[: int(ip[-1])] if ip.size else ix
    if used.size and (used.min() < 0 or used.max() >= minor):
        bad = used[(used < 0) | (used >= minor)]
        raise ValueError(
            f"X (scipy.sparse {Xc.format}, shape {Xc.shape}) has {bad.size} {kind} indices outside "
            f"[0, {minor}), e.g. {bad[:5].tolist()}"
        )


def check_values(X, model):
    """Value checks on concrete X (dense or scipy.sparse), before any tracing."""
    if is_sparse(X):
        Xc = X if X.format in ("csr", "csc") else X.tocsr()
        _check_structure(Xc)
        if not Xc.has_canonical_format:
            # duplicate entries add up (X[i, j] = 1 + 1 = 2): check the matrix's values, not the stored ones
            Xc = Xc.copy()
            Xc.sum_duplicates()
        data = np.asarray(Xc.data)

        def where(bad):
            pos = np.flatnonzero(bad)
            major = np.searchsorted(Xc.indptr, pos, side="right") - 1
            minor = Xc.indices[pos]
            rows, cols = (major, minor) if Xc.format == "csr" else (minor, major)
            return rows, cols, data[pos]
    else:
        if not is_concrete(X):
            return
        data = np.asarray(X)

        def where(bad):
            idx = np.argwhere(bad)
            return idx[:, 0], idx[:, 1], data[bad]

    if data.size == 0:
        return
    if np.issubdtype(data.dtype, np.floating):
        bad = ~np.isfinite(data)
        if bad.any():
            r, c, v = where(bad)
            raise ValueError(
                f"X contains {int(bad.sum())} non-finite value(s) (NaN or Inf): {_describe_entries(r, c, v)}"
            )
    bad = data < 0
    if bad.any():
        r, c, v = where(bad)
        raise ValueError(
            f"naive Bayes needs non-negative X (counts or frequencies); found "
            f"{int(bad.sum())} negative entries: {_describe_entries(r, c, v)}" + (" ..." if bad.sum() > 5 else "")
        )
    if model == "bernoulli":
        bad = (data != 0) & (data != 1)
        if bad.any():
            r, c, v = where(bad)
            raise ValueError(
                f"model='bernoulli' needs binary X (0/1 entries); found {int(bad.sum())} "
                f"non-binary entries: {_describe_entries(r, c, v)}"
                + (" ..." if bad.sum() > 5 else "")
                + "; binarise with (X > 0) or use model='multinomial'"
            )
