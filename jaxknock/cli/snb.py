"""``jaxknock snb DATA --target COL -k K``: sparse naive Bayes on a CSV or a scipy.sparse ``.npz``."""

from __future__ import annotations

import time
from pathlib import Path

from jaxknock._checks import check_class_labels, check_npz_archive
from jaxknock.cli.common import CLIError, enable_x64
from jaxknock.cli.report import device, print_table, sha256, versions, write_json
from jaxknock.cli.tables import (
    MISSING,
    TEXT_SUFFIXES,
    check_file,
    default_names,
    npy_error,
    numeric_column,
    read_csv_table,
    resolve_target,
    table_suffix,
)

__all__ = ["load_labels", "load_snb", "run_snb"]


def load_labels(path):
    import numpy as np

    if not Path(path).is_file():  # check_file called it the "data file"
        raise CLIError(f"--labels file {str(path)!r} does not exist; check the path")
    path = Path(path)
    if path.suffix.lower() == ".npy":
        try:
            labels = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise CLIError(
                npy_error(path, err, "labels as strings or numbers (numpy.asarray(labels, dtype=str))")
            ) from None
    else:
        try:
            # utf-8-sig: a byte-order mark (Windows editors) made the first label '\ufeffham', a class of its own
            text = path.read_text(encoding="utf-8-sig")
            labels = np.asarray([line.strip() for line in text.splitlines() if line.strip()])
            labels = _canonical_numbers(labels) if labels.size else labels  # 1 and 1.0: one class
        except UnicodeDecodeError:
            raise CLIError(f"{path} is not a text file of labels (one per line)") from None
    if labels.ndim != 1:
        raise CLIError(f"{path}: labels must be 1-D (one per row), got shape {labels.shape}")
    return labels


def _canonical_numbers(labels):
    """Text labels that are all whole numbers as the text of their integers (``1.0``, ``01``, ``+1``: ``1``).

    As text, ``1`` and ``1.0`` in one column were two classes (``select`` reads them as one number).
    Anything else (words, fractions, which :func:`check_class_labels` refuses) is returned as is.
    """
    import numpy as np

    try:
        num = labels.astype(np.float64)
    except ValueError:
        return labels
    if not (np.all(np.isfinite(num)) and np.all(num == np.round(num))):
        return labels
    return np.asarray([str(int(v)) for v in num])


def load_snb(args):
    """``(names, X, y)``: X dense NumPy or scipy.sparse CSR (non-negative), y labels."""
    import numpy as np

    path = check_file(args.data)
    suffix = table_suffix(path)
    if suffix == ".npz":
        try:
            import scipy.sparse as sp
        except ImportError:
            raise CLIError("reading a sparse .npz needs scipy: pip install scipy") from None
        try:
            check_npz_archive(path)
        except ValueError as err:
            raise CLIError(str(err)) from None
        try:
            M = sp.load_npz(path).tocsr()
        except (ValueError, OSError, KeyError, EOFError) as err:
            raise CLIError(
                f"{path} is not a scipy.sparse .npz (save it with scipy.sparse.save_npz): "
                f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
            ) from None
        if M.dtype.kind not in "biuf":
            raise CLIError(f"{path}: the matrix is not numeric (dtype {M.dtype})")
        names = default_names(M.shape[1])
        if args.labels:
            y = load_labels(args.labels)
            what = f"the labels in {args.labels}"
            if args.target is not None:
                raise CLIError("give either --target COLUMN_INDEX or --labels FILE, not both")
            X = M
        else:
            if args.target is None:
                raise CLIError(
                    f"{path} is a sparse matrix: give --target COLUMN_INDEX (the label column) "
                    "or --labels FILE (one label per row)"
                )
            j = resolve_target(names, args.target, path)
            y = M[:, j].toarray().ravel()
            what = f"target column {j}"
            keep = np.setdiff1d(np.arange(M.shape[1]), [j])
            X = M[:, keep]
            names = [names[i] for i in keep]
        if y.shape[0] != X.shape[0]:
            raise CLIError(f"{len(y)} labels for {X.shape[0]} rows; give one label per row")
        vals = X.data
    elif suffix in TEXT_SUFFIXES:
        if args.labels:
            raise CLIError("--labels is only for a sparse .npz; in a CSV give the label column with --target")
        if args.target is None:
            raise CLIError("give the label column with --target COL")
        header, cols = read_csv_table(path)
        if not cols[0]:
            raise CLIError(f"{path} has a header but no data rows")
        j = resolve_target(header, args.target, path)
        y = np.asarray(cols[j])  # labels may be text ("pos"/"neg")
        what = f"target column {header[j]!r}"
        if any(v.lower() in MISSING for v in cols[j]):
            raise CLIError(f"target column {header[j]!r} has missing labels; drop those rows")
        y = _canonical_numbers(y)
        names = [h for i, h in enumerate(header) if i != j]
        X = (
            np.column_stack([numeric_column(path, header[i], cols[i]) for i in range(len(header)) if i != j])
            if names
            else np.empty((len(y), 0))
        )
        vals = X
    else:
        raise CLIError(
            f"unsupported file type {suffix or '(none)'!r} for {path}; use .csv / .tsv / .txt (or .gz of one) "
            "or a scipy.sparse .npz"
        )
    if X.shape[1] == 0:
        raise CLIError(f"{path} has no feature columns besides the target")
    if not np.all(np.isfinite(vals)):
        raise CLIError(f"{path}: the features contain missing/NaN/Inf values; impute or drop them")
    if np.any(np.asarray(vals) < 0):
        raise CLIError(
            f"{path}: the features contain negative values; sparse naive Bayes needs counts or binary values (>= 0)"
        )
    if args.model == "bernoulli" and np.any((np.asarray(vals) != 0) & (np.asarray(vals) != 1)):
        raise CLIError("--model bernoulli needs binary (0/1) features; binarise them or use --model multinomial")
    if X.shape[0] < 2:
        raise CLIError(f"{path} has only {X.shape[0]} row(s); sparse naive Bayes needs rows from at least two classes")
    try:
        check_class_labels(y, what)  # a continuous target is not fitted as one class per value
    except ValueError as err:
        raise CLIError(str(err)) from None
    if len(np.unique(y)) < 2:
        raise CLIError(f"the target has a single class {np.unique(y).tolist()}; it needs at least two")
    if not (0 <= args.k <= X.shape[1]):
        raise CLIError(f"-k must lie in [0, {X.shape[1]}] (the number of features), got {args.k}")
    return names, X, y


def run_snb(args) -> int:
    t_start = time.perf_counter()
    if args.alpha < 0:
        raise CLIError(f"--alpha must be >= 0, got {args.alpha}")
    t0 = time.perf_counter()
    names, X, y = load_snb(args)
    t_load = time.perf_counter() - t0
    enable_x64()
    import numpy as np

    from jaxknock import RESULTS
    from jaxknock.naive_bayes import class_sums, sparse_naive_bayes

    say = (lambda *a, **k: None) if args.quiet else print
    try:
        t0 = time.perf_counter()
        sums = class_sums(X, y, model=args.model)
        t_sums = time.perf_counter() - t0
        t0 = time.perf_counter()
        sol = sparse_naive_bayes(sums, None, args.k, model=args.model, alpha=args.alpha)
        nb = sol.value
        support = np.asarray(nb.support)
        t_fit = time.perf_counter() - t0
    except ValueError as err:
        raise CLIError(str(err)) from None
    pred = nb.predict(X)
    acc = float(np.mean(np.asarray(pred).astype(str) == np.asarray(y).astype(str)))
    coef = np.asarray(nb.coef)
    classes = [c.item() if hasattr(c, "item") else c for c in nb.classes]
    weight = coef[1] - coef[0] if coef.shape[0] == 2 else np.max(coef, 0) - np.min(coef, 0)
    idx = np.flatnonzero(support)
    idx = idx[np.argsort(-np.abs(weight[idx]))]
    say(f"{X.shape[1]} features, {X.shape[0]} rows, classes {classes}; {args.model} sparse naive Bayes, k = {args.k}")
    print(
        f"selected {len(idx)} features; training accuracy {acc:.3f}; result {RESULTS(int(sol.result)).name}; "
        f"certified gap {float(sol.stats['gap']):.3g}"
    )
    wname = f"log-odds ({classes[1]} vs {classes[0]})" if coef.shape[0] == 2 else "max-min log weight"
    if len(idx):
        print_table([[names[i], f"{weight[i]:+.4g}"] for i in idx], ["feature", wname])
    if args.out:
        path = Path(args.data)
        report = {
            "command": "snb",
            "inputs": {
                "path": str(path.resolve()),
                "sha256": sha256(path),
                "rows": int(X.shape[0]),
                "features": int(X.shape[1]),
                "target": args.target,
                "labels": args.labels,
                "classes": classes,
                "sparse": not isinstance(X, np.ndarray),
            },
            "settings": {"k": args.k, "model": args.model, "alpha": args.alpha},
            "versions": versions(),
            "device": device(),
            "timings": {"load": t_load, "class_sums": t_sums, "fit": t_fit, "total": time.perf_counter() - t_start},
            "result": RESULTS(int(sol.result)).name,
            "objective": float(sol.stats["objective"]),
            "psi": float(sol.stats["psi"]),
            "gap": float(sol.stats["gap"]),
            "train_accuracy": acc,
            "selected": [{"name": names[i], "index": int(i), "weight": float(weight[i])} for i in idx],
        }
        write_json(args.out, report)
        say(f"report written to {args.out}")
    return 0
