"""Host array containers as plain NumPy arrays JAX can take (masked, pandas nullable, byte order, object numbers).

Users pass what their pipeline produced. NumPy masked arrays lose their mask in
``np.asarray`` (the value under a mask was fitted as data), pandas' nullable
dtypes and non-native byte orders are not JAX types, and a DataFrame of mixed
numeric columns is an object array. These helpers turn such containers into
the plain array of the same values, or refuse them naming the argument; every
other input passes through unchanged. pandas is never imported.
"""

from __future__ import annotations

import numpy as np

__all__ = ["host_numeric", "object_numbers_as_float", "unmasked"]


def _is_pandas(x) -> bool:
    """A pandas Series or DataFrame (duck-typed by its module; pandas is not imported)."""
    return type(x).__module__.split(".")[0] == "pandas" and hasattr(x, "to_numpy")


def _pandas_dtypes(x) -> list:
    """The column dtypes of a DataFrame, or a Series' one dtype, as a list."""
    return list(x.dtypes) if hasattr(x, "dtypes") and not hasattr(x, "dtype") else [x.dtype]


def _pandas_nullable_numeric(x) -> bool:
    """A pandas object with a nullable numeric column (``Int64``, ``Float64``, ``boolean``): NumPy sees object."""
    dtypes = _pandas_dtypes(x)
    nullable = [d for d in dtypes if not isinstance(d, np.dtype)]
    return bool(nullable) and all(getattr(d, "kind", "O") in "iufb" for d in dtypes)


def _pandas_nullable_to_numpy(x) -> np.ndarray:
    """Nullable numeric pandas data as NumPy: its own dtype (``Int64`` -> int64) without ``pd.NA``, else float64
    with NaN for each ``pd.NA``."""
    if bool(np.asarray(x.isna()).any()):
        return x.to_numpy(dtype=np.float64, na_value=np.nan)
    return x.to_numpy(dtype=np.result_type(*(getattr(d, "numpy_dtype", d) for d in _pandas_dtypes(x))))


def object_numbers_as_float(x, *, bools: bool = False):
    """An object array of real numbers (``df.to_numpy()`` of mixed int / float columns, ``np.array(v, object)``)
    as float64 (int64 when every entry is an integer that fits, so integer labels stay integers); anything
    else unchanged (booleans, ``None``, text stay object: the caller names them). ``bools=True`` (a data
    array, whose bools are 0/1): booleans count as the integers 0 / 1, so a DataFrame of genotype and
    bool indicator columns (an object array of ``np.bool_`` / ``np.int8`` / floats) is its numbers."""
    if not (isinstance(x, np.ndarray) and x.dtype == object and x.size):
        return x
    if not all(_is_number(v, bools) for v in x.flat):
        return x
    if all(isinstance(v, (int, np.integer)) for v in x.flat):
        try:
            return x.astype(np.int64)
        except OverflowError:
            pass
    return x.astype(np.float64)


def _is_number(v, bools: bool) -> bool:
    """A real number; a boolean (Python's is an ``int``) only with ``bools``."""
    if isinstance(v, (bool, np.bool_)):
        return bools
    return isinstance(v, (int, float, np.integer, np.floating))


def unmasked(x, name: str):
    """The data of a NumPy masked array none of whose entries is masked; ``ValueError`` naming ``name`` if one
    is (``np.asarray`` and JAX read the value under the mask as if it were data); anything else unchanged."""
    if not isinstance(x, np.ma.MaskedArray):
        return x
    masked = int(np.ma.count_masked(x))
    if masked:
        raise ValueError(
            f"{name} is a masked array with {masked} masked entr{'y' if masked == 1 else 'ies'}; jaxknock does "
            f"not impute missing values: drop those rows or fill them explicitly ({name}.filled(value))"
        )
    return np.ma.getdata(x)


def host_numeric(x, name: str):
    """A host array container as a plain NumPy array JAX can take; anything else (JAX arrays, lists) unchanged.

    * a masked array: its data when no entry is masked; ``ValueError`` naming ``name`` otherwise (a masked
      entry must not be read as whatever value sits under the mask);
    * a pandas object with nullable numeric columns (``Int64``, ``Float64``, ``boolean``): their NumPy dtype,
      or float64 with NaN for each ``pd.NA`` when there is one (the finiteness checks then name it);
    * a non-native byte order (``'>f8'`` on a little-endian machine) is swapped to native, and a long double
      (``np.longdouble``) becomes float64: JAX holds neither.
    """
    if isinstance(x, np.ma.MaskedArray):
        x = unmasked(x, name)
    elif _is_pandas(x) and _pandas_nullable_numeric(x):
        x = _pandas_nullable_to_numpy(x)
    if isinstance(x, np.ndarray):
        if not x.dtype.isnative:
            x = x.astype(x.dtype.newbyteorder("="))
        if x.dtype.kind in "fc" and x.dtype.itemsize > (8 if x.dtype.kind == "f" else 16):
            x = x.astype(np.float64 if x.dtype.kind == "f" else np.complex128)
    return x
