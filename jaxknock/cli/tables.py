"""Data loading for the subcommands: CSV / NPZ / NPY tables with one-line errors.

Every problem with the user's file (missing, not a table, text in a numeric
column, a missing target) raises :class:`~jaxknock.cli.common.CLIError` with a
message saying what to fix.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import zlib
from pathlib import Path

from jaxknock._checks import check_npz_archive
from jaxknock.cli.common import CLIError

__all__ = [
    "MISSING",
    "TEXT_SUFFIXES",
    "check_file",
    "class_like_note",
    "default_names",
    "load_table",
    "npy_error",
    "numeric_column",
    "preview",
    "read_csv_table",
    "resolve_target",
    "table_suffix",
]


def check_file(path) -> Path:
    path = Path(path)
    if not path.exists():
        raise CLIError(f"data file {str(path)!r} does not exist; check the path")
    if path.is_dir():
        raise CLIError(f"{str(path)!r} is a directory; pass a .csv, .npz or .npy file")
    return path


def _float_or_none(text):
    try:
        return float(text)
    except ValueError:
        return None


class _WHITESPACE(csv.excel):
    delimiter = " "
    skipinitialspace = True


TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz", ".txt.gz")


def table_suffix(path) -> str:
    """The file type of ``path``: its suffix, lower case, with ``.gz`` kept on a text table (``.csv.gz``)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes[-1:] == [".gz"] and len(suffixes) > 1 and f"{suffixes[-2]}.gz" in TEXT_SUFFIXES:
        return f"{suffixes[-2]}.gz"
    return Path(path).suffix.lower()


def _open_text(path):
    """A text table for reading: gzip-compressed when its name ends in ``.gz`` (``counts.tsv.gz``, as genomics
    tables ship; it was "unsupported file type '.gz'"), UTF-8 with an optional byte-order mark."""
    if str(path).lower().endswith(".gz"):
        return gzip.open(path, "rt", newline="", encoding="utf-8-sig")
    return open(path, newline="", encoding="utf-8-sig")


def read_csv_table(path):
    """``(names, columns)`` of a CSV with a header row; ``columns`` are lists of strings.

    Delimited by ``,``, ``;`` or tab (sniffed), or by runs of spaces when the header line has none of
    those. Row labels are dropped: a first column without a name (pandas' ``to_csv`` index, R's
    ``write.csv``), or a header with one name fewer than every data row (R's ``write.table``); trailing
    columns with neither a name nor data (Excel's ``a,b,y,``) too.
    """
    try:
        with _open_text(path) as fh:
            sample = fh.read(65536)
            fh.seek(0)
            first = next((line for line in sample.splitlines() if line.strip()), "")
            if not any(d in first for d in ",;\t") and len(first.split()) > 1:
                # R's write.table, numpy.savetxt, PLINK: columns separated by spaces, read as one column
                # named "g0 g1 g2 y" ("target column 'y' is not in ..."); runs of spaces are one separator
                dialect = _WHITESPACE
                fh = (line.strip() for line in fh)
            else:
                try:
                    dialect = csv.Sniffer().sniff(sample, delimiters=",;\t")
                except csv.Error:
                    dialect = csv.excel
            reader = csv.reader(fh, dialect)
            rows, lines = [], []  # the file's line of each row (blank lines are skipped below)
            for r in reader:
                rows.append(r)
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise CLIError(f"{path} is not a text CSV file (cannot decode it as UTF-8)") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise CLIError(f"{path} is not a readable gzip file ({err or type(err).__name__})") from None
    except csv.Error as err:
        raise CLIError(f"{path} is not a valid CSV file: {err}") from None
    kept = [i for i, r in enumerate(rows) if any(c.strip() for c in r)]
    rows, lines = [rows[i] for i in kept], [lines[i] for i in kept]
    if not rows:
        raise CLIError(f"{path} is empty; it needs a header row with column names and data rows")
    header = [h.strip() for h in rows[0]]
    if dialect is _WHITESPACE and header[0] == "#" and len(header) > 1:  # numpy.savetxt(header=...): "# a b y"
        header = header[1:]
    numeric = [_float_or_none(h) is not None for h in header]
    # "1.5,,3" or "1.5,NA,3": data, no header (",0,1,2", a pandas index column without a name, is a header)
    if header[0] and any(numeric) and all(f or h.lower() in MISSING for f, h in zip(numeric, header)):
        raise CLIError(f"{path} has no header row (the first row is numeric); add a row of column names")
    body = rows[1:]
    while len(header) > 1 and not header[-1] and all(not "".join(r[len(header) - 1 :]).strip() for r in body):
        # a trailing column without a name or data (Excel's "a,b,y," from formatted empty cells): it was
        # "column 4 of the header has no name; name every column"
        header = header[:-1]
        body = [r[: len(header)] if len(r) > len(header) else r for r in body]
    labels = 0  # leading fields of each row that hold row labels, not data
    if len(header) > 1 and not header[0] and all(header[1:]):
        # an unnamed first column holds row labels (pandas' to_csv index, R's write.csv row names): it was
        # "column 1 of the header has no name; name every column", and naming it made the row numbers a feature
        header, labels = header[1:], 1
    if any(not h for h in header):
        raise CLIError(f"{path}: column {header.index('') + 1} of the header has no name; name every column")
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise CLIError(f"{path}: duplicate column name(s) {dup}; make the header names unique")
    if not labels and body and all(len(r) == len(header) + 1 for r in body):
        # a header one name short of every row: the first column holds row names (R's write.table and
        # read.table's rule), not a feature; this was "line 2 has 8 fields but the header has 7"
        labels = 1
    for i, r in enumerate(body):
        if len(r) != len(header) + labels:
            raise CLIError(
                f"{path}: line {lines[i + 1]} has {len(r)} fields but the header has {len(header) + labels}; "
                "fix the row or the delimiter"
            )
    columns = [[r[j].strip() for r in body] for j in range(labels, len(header) + labels)]
    return header, columns


MISSING = {"", "na", "nan", "n/a", "null", "none", "?"}


def numeric_column(path, name, values):
    import numpy as np

    out = np.empty(len(values))
    for i, v in enumerate(values):
        if v.lower() in MISSING:
            out[i] = np.nan
            continue
        f = _float_or_none(v)
        if f is None:
            raise CLIError(
                f"{path}: column {name!r} is not numeric (row {i + 1} has {v!r}); "
                "encode it as numbers or drop the column"
            )
        out[i] = f
    return out


def default_names(p):
    return [f"x{j}" for j in range(p)]


def two_level_column(values):
    """A text column with exactly two distinct labels (e.g. ``case`` / ``control``) as 0/1, or ``None``.

    The labels are ordered as sorted strings (``0`` for the first); returns
    ``(codes, (label0, label1))``. A missing entry is NaN (reported later like
    any missing value).
    """
    import numpy as np

    present = [v for v in values if v.lower() not in MISSING]
    levels = sorted(set(present))
    if len(levels) != 2 or all(_float_or_none(v) is not None for v in present):
        return None
    codes = np.array([np.nan if v.lower() in MISSING else float(v == levels[1]) for v in values])
    return codes, tuple(levels)


def _check_text_target(path, name, values):
    """Refuse a target of text labels other than two, naming the labels (not "drop the column").

    ``y`` = ``a`` / ``b`` / ``c`` read as "column 'y' is not numeric (row 1 has 'a'); encode it as
    numbers or drop the column": the target was called a column to drop, and numbers 0, 1, 2 would be
    fitted as a measurement.
    """
    present = [v for v in values if v.lower() not in MISSING]
    if any(_float_or_none(v) is not None for v in present):  # numbers (a stray word: numeric_column names its row)
        return
    levels = sorted(set(present))
    raise CLIError(
        f"{path}: target column {name!r} holds {len(levels)} text labels ({preview(levels, 5)}); "
        "the statistics handle a numeric response or two labels (a binary target): "
        "for several classes, code one class against the rest as a two-label column"
    )


def class_like_note(name, y):
    """A note when a numeric target holds 3 to 20 distinct whole numbers (class labels ``0, 1, 2``?), else None.

    The CLI reads every column as float, so such a target is fitted as a continuous response, as
    :class:`jaxknock.sklearn.KnockoffSelector` does with a warning (:func:`~jaxknock.knockoff_filter`
    refuses integer-typed class labels): the note says so instead of running silently.
    """
    import numpy as np

    values = np.unique(y[np.isfinite(y)])
    if not (3 <= values.size <= 20 and np.all(values == np.round(values))):
        return None
    shown = ", ".join(f"{v:g}" for v in values[:5]) + (", ..." if values.size > 5 else "")
    return (
        f"note: target {name!r} holds {values.size} distinct whole numbers ({shown}), which look like class "
        "labels; it is fitted as a continuous response (the statistics handle a continuous response or two classes)"
    )


def load_table(path, target=None):
    """``(names, X, levels)`` with ``X`` a float ``(n, p)`` NumPy array, from CSV / NPZ / NPY.

    ``levels``: when the CSV column named ``target`` holds text with exactly
    two labels (a binary response such as ``case`` / ``control``), that column
    is coded 0/1 in sorted label order and ``levels`` is the pair of labels;
    otherwise ``None``.

    * CSV: a header row of column names; ``,``, ``;``, tab or space delimited (:func:`read_csv_table`).
    * NPY: a 2-D numeric array; columns are named ``x0, x1, ...``.
    * NPZ: either 1-D arrays of equal length (one per column, named by key), or
      one 2-D array (key ``X``, ``data`` or the only 2-D array) with optional
      ``columns`` / ``names`` (column names); a 1-D array named ``target`` next
      to it is its last column (``numpy.savez(path, X=X, y=y)``, ``--target y``).
    """
    import numpy as np

    path = check_file(path)
    suffix = table_suffix(path)
    if suffix in TEXT_SUFFIXES:
        names, cols = read_csv_table(path)
        if not cols[0]:
            raise CLIError(f"{path} has a header but no data rows")
        levels = None
        if target in names:
            coded = two_level_column(cols[names.index(target)])
            if coded is not None:
                cols = list(cols)
                cols[names.index(target)], levels = coded
            else:
                _check_text_target(path, target, cols[names.index(target)])
        X = np.column_stack(
            [c if isinstance(c, np.ndarray) else numeric_column(path, n, c) for n, c in zip(names, cols)]
        )
        return names, X, levels
    if suffix == ".npy":
        try:
            X = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise CLIError(npy_error(path, err, "numbers (numpy.save(path, df.to_numpy(dtype=float)))")) from None
        if X.ndim != 2:
            raise CLIError(f"{path} holds an array of shape {X.shape}; it must be 2-D (rows x columns)")
        return default_names(X.shape[1]), _as_float(path, X), None
    if suffix == ".npz":
        try:
            check_npz_archive(path)
        except ValueError as err:
            raise CLIError(str(err)) from None
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: _npz_member(path, z, k) for k in z.files}
        except (ValueError, OSError, EOFError) as err:
            raise CLIError(f"{path} is not a readable .npz archive ({err}); save it with numpy.savez") from None
        if {"indptr", "indices", "data", "shape"} <= set(arrays):
            raise CLIError(
                f"{path} is a scipy.sparse matrix; `select` needs dense columns "
                "(save a dense array with numpy.savez, or use `jaxknock snb`)"
            )
        names = None
        for key in ("columns", "names"):
            if key in arrays:
                names = [str(v) for v in arrays.pop(key).tolist()]
        two_d = {k: v for k, v in arrays.items() if v.ndim == 2}
        if two_d:
            key = next((k for k in ("X", "data") if k in two_d), None)
            if key is None:
                if len(two_d) > 1:
                    raise CLIError(f"{path} holds several 2-D arrays {sorted(two_d)}; name the table 'X' or 'data'")
                key = next(iter(two_d))
            X = two_d[key]
            names = names or default_names(X.shape[1])
            if len(names) != X.shape[1]:
                raise CLIError(f"{path}: {len(names)} column names for {X.shape[1]} columns")
            dup = sorted({h for h in names if names.count(h) > 1})
            if dup:  # as in a CSV header: the report's names (and W_mean by name) were ambiguous
                raise CLIError(f"{path}: duplicate column name(s) {dup}; make the column names unique")
            X = _as_float(path, X)
            # the target as a 1-D array next to the table (numpy.savez(path, X=X, y=y)) is its last column:
            # it was dropped, and --target y said "'y' is not in" the file (other 1-D arrays stay out)
            t = arrays.get(target) if target is not None and target not in names else None
            if t is not None and t.ndim == 1:
                if t.shape[0] != X.shape[0]:
                    raise CLIError(
                        f"{path}: the target array {target!r} has {t.shape[0]} entries for the "
                        f"{X.shape[0]} rows of {key!r}; it needs one per row"
                    )
                return names + [target], np.column_stack([X, _as_float(path, t, target)]), None
            return names, X, None
        one_d = {k: v for k, v in arrays.items() if v.ndim == 1}
        if not one_d:
            raise CLIError(f"{path} holds no 1-D or 2-D arrays; save columns with numpy.savez(path, a=..., b=...)")
        lengths = {k: v.shape[0] for k, v in one_d.items()}
        if len(set(lengths.values())) > 1:
            raise CLIError(f"{path}: the 1-D arrays have different lengths {lengths}; every column needs one per row")
        names = list(one_d)
        return names, np.column_stack([_as_float(path, one_d[k], k) for k in names]), None
    raise CLIError(
        f"unsupported file type {suffix or '(none)'!r} for {path}; "
        "use .csv, .npz or .npy (also .tsv, .txt, and a text table .gz)"
    )


def _is_object_array_error(err) -> bool:
    """Whether ``numpy.load(allow_pickle=False)`` refused an object array (not "pickled data": that is a file
    that is no .npy at all)."""
    return "Object arrays" in str(err)


def npy_error(path, err, store):
    """The message for a ``.npy`` that ``numpy.load(allow_pickle=False)`` refused; an object array says how to
    save it (``store``), not "save it with numpy.save", which the user had done."""
    if _is_object_array_error(err):
        return f"{path} holds Python objects (dtype object), which are not read (unpickling runs code); save {store}"
    return f"{path} is not a readable .npy array ({err}); save it with numpy.save"


def _npz_member(path, archive, key):
    """``archive[key]``; an object array (pandas' ``df.columns.values``, ``df.values`` of a mixed frame) is
    refused naming the array and how to store it: it read "is not a readable .npz archive (Object arrays
    cannot be loaded when allow_pickle=False); save it with numpy.savez", which the user had done."""
    try:
        return archive[key]
    except ValueError as err:
        if not _is_object_array_error(err):
            raise
        raise CLIError(
            f"{path}: array {key!r} holds Python objects (dtype object), which are not read (unpickling runs "
            "code); save column names as strings (numpy.asarray(names, dtype=str)) and the table as numbers "
            "(df.to_numpy(dtype=float))"
        ) from None


def _as_float(path, X, name=None):
    import numpy as np

    if X.dtype.kind not in "biuf":
        what = f"array {name!r}" if name else "the array"
        raise CLIError(f"{path}: {what} is not numeric (dtype {X.dtype}); store numbers only")
    return np.asarray(X, dtype=np.float64)


def resolve_target(names, target, path):
    if target in names:
        return names.index(target)
    if target.lstrip("-").isdigit() and names == default_names(len(names)):
        j = int(target)
        if -len(names) <= j < len(names):
            return j % len(names)
    close = difflib.get_close_matches(target, names, n=3)
    hint = f"; did you mean {close}?" if close else f"; available: {preview(names)}"
    raise CLIError(f"target column {target!r} is not in {path}{hint}")


def preview(names, limit=8):
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} columns)" if len(names) > limit else "")
