"""The ``jaxknock`` command line (also ``python -m jaxknock``).

Subcommands:

* ``jaxknock demo`` runs the main job on built-in synthetic data: covariance
  estimation, every S-vector solver (a table with time, sum(s), feasibility and
  certified gaps), knockoff sampling and FDR-controlled selection; ``--plot
  out.png`` draws the S-vectors and the W statistics (needs matplotlib).
* ``jaxknock select DATA --target COL`` runs the model-X knockoff filter
  (:func:`jaxknock.pipeline.knockoff_filter`) on a CSV / NPZ / NPY table and
  prints the selected columns with their statistics (``--out`` writes a JSON
  report with inputs, settings, versions, device, timings and selections).
* ``jaxknock snb DATA --target COL -k K`` fits sparse naive Bayes
  (:func:`jaxknock.sparse_naive_bayes`) on a CSV or a ``scipy.sparse`` ``.npz``.
* ``jaxknock bench`` runs the scripts in ``benchmarks/`` at their small sizes.

Bad input (missing file, missing column, text in a numeric column, NaN,
constant columns, too few rows) ends with a one-line ``jaxknock: error: ...``
saying what to fix and exit code 2; no traceback.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

from jaxknock._progress import Progress, progress_enabled


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def _enable_x64():
    import jax

    jax.config.update("jax_enable_x64", True)


def _timed(fn, *args, **kwargs):
    import jax

    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def synthetic_factor_data(key, n, p, k, num_signals, amplitude):
    """``X ~ N(0, Sigma)`` with ``Sigma = D + V V^T`` (thesis Fig. 4.5 design) and a sparse linear ``y``.

    ``D_ii ~ U[0, 1]`` (floored at 0.05), ``V_ij ~ N(0, 1/k)``; ``num_signals``
    coefficients of size ``amplitude / sqrt(n)`` with random signs.
    Returns ``(X, y, beta, Sigma)``; ``Sigma`` is the population correlation.
    """
    import jax
    import jax.numpy as jnp

    kd, kv, kx, ke, ks, kp = jax.random.split(key, 6)
    d = jnp.maximum(jax.random.uniform(kd, (p,)), 0.05)
    V = jax.random.normal(kv, (p, k)) / jnp.sqrt(k)
    Z = jax.random.normal(kx, (n, k + p))
    X = Z[:, :k] @ V.T + Z[:, k:] * jnp.sqrt(d)
    scale = jnp.sqrt(d + jnp.sum(V**2, axis=1))
    X = X / scale
    Sigma = (jnp.diag(d) + V @ V.T) / jnp.outer(scale, scale)
    support = jax.random.permutation(kp, p)[:num_signals]
    signs = jnp.where(jax.random.bernoulli(ks, 0.5, (num_signals,)), 1.0, -1.0)
    beta = jnp.zeros(p).at[support].set(signs * amplitude / jnp.sqrt(n))
    y = X @ beta + jax.random.normal(ke, (n,))
    return X, y, beta, Sigma


def _print_table(rows, headers, file=None):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    print(line, file=file)
    print("-" * len(line), file=file)
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)), file=file)


class _Ticker:
    """Redraw a :class:`Progress` line every ``interval`` seconds while a long call runs.

    The knockoff filter batches all replicates into one ``vmap``-ed call, so
    there is no per-replicate event to count; on a terminal the elapsed time
    is shown instead and the bar advances by stage.
    """

    def __init__(self, bar: Progress, interval: float = 0.25):
        self.bar, self.interval = bar, interval
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.bar.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            self.bar._draw()

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return False


# --------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------


def run_demo(args) -> int:
    if args.plot:
        _require_matplotlib("--plot")
    _enable_x64()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxknock as jk

    for name in ("n", "p", "rank", "signals", "replicates"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.rank >= min(args.n, args.p) or args.signals > args.p:
        raise ValueError("need --rank < min(--n, --p) and --signals <= --p")
    key = jax.random.key(args.seed)
    kdata, kfac = jax.random.split(key)
    n, p, k = args.n, args.p, args.rank
    print(
        f"jaxknock {jk.__version__} | jax {jax.__version__} on {jax.devices()[0].platform} | "
        f"synthetic factor-model data n={n}, p={p}, k={k}, {args.signals} signals"
    )
    X, y, beta, Sigma_true = synthetic_factor_data(kdata, n, p, k, args.signals, args.amplitude)

    print("\n[1] covariance estimation")
    (Sigma_lw, delta), t_lw = _timed(jk.ledoit_wolf, X)
    Sigma_hat = jk.to_correlation(Sigma_lw)
    (model, delta_f), t_fm = _timed(jk.factor_model_from_data, kfac, X, k)
    err_lw = float(jnp.linalg.norm(Sigma_hat - Sigma_true) / jnp.linalg.norm(Sigma_true))
    err_fm = float(jnp.linalg.norm(model.dense() - Sigma_true) / jnp.linalg.norm(Sigma_true))
    _print_table(
        [
            ["Ledoit-Wolf", f"{t_lw:.2f}", f"{float(delta):.3f}", f"{err_lw:.3f}"],
            [f"factor model (k={k}, from X)", f"{t_fm:.2f}", f"{float(delta_f):.3f}", f"{err_fm:.3f}"],
        ],
        ["estimator", "time[s]", "shrinkage", "rel. error vs truth"],
    )

    print("\n[2] knockoff S-vector solvers (correlation scale; gap = certified duality gap)")
    solvers = [
        ("equicorrelated", lambda: jk.equicorrelated(Sigma_hat)),
        ("asdp (blocks of 50)", lambda: jk.asdp(Sigma_hat, block_size=50)),
        ("sdp (dense, barrier Newton)", lambda: jk.sdp(Sigma_hat)),
        (f"sdp_factor (k={k}, Alg. 5)", lambda: jk.sdp_factor(model)),
    ]
    rows, sols = [], {}
    bar = Progress(len(solvers), "S-vector solvers", enabled=progress_enabled(sys.stdout, args.quiet))
    with bar, _Ticker(bar):
        for name, fn in solvers:
            bar.set_description(name)
            sol, t = _timed(fn)
            bar.update()
            sols[name] = sol
            gap = sol.stats.get("gap")
            me = sol.stats.get("min_eig")
            rows.append(
                [
                    name,
                    f"{t:.2f}",
                    str(int(sol.stats["num_steps"])),
                    f"{float(sol.stats['objective']):.4f}",
                    "-" if me is None or not np.isfinite(float(me)) else f"{float(me):.1e}",
                    "-" if gap is None else f"{float(gap):.1e}",
                    jk.RESULTS(int(sol.result)).name,
                ]
            )
    _print_table(rows, ["method", "time[s]", "steps", "sum(s)", "min eig", "gap", "result"])
    print("(times include jit compilation on first use)")
    _demo_pipeline(args, X, y, beta, Sigma_hat, model, sols)
    if args.plot:
        _demo_plot(args, X, y, beta, sols)
    return 0


def _demo_pipeline(args, X, y, beta, Sigma_hat, model, sols):
    """Sampling + filter stages, when those modules are installed."""
    try:
        from jaxknock import pipeline
    except ImportError:
        return
    pipeline.demo_report(args, X, y, beta, Sigma_hat, model, sols)


def _require_matplotlib(option):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError(
            f"{option} needs matplotlib, which is not installed: "
            'pip install matplotlib (or pip install "jaxknock[notebook]")'
        ) from None


def _demo_plot(args, X, y, beta, sols):
    """Two panels: the S-vectors of every solver, and one replicate's W with the truth."""
    import jax
    import jax.numpy as jnp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxknock.pipeline import knockoff_filter

    n, p = X.shape
    lam = 0.5 * float(jnp.std(y)) * float(np.sqrt(2 * np.log(2 * p) / n))
    sel = knockoff_filter(
        jax.random.key(args.seed + 1), X, y, fdr=args.fdr, s_method="sdp_factor", rank=args.rank, lam=lam
    )
    W = np.asarray(sel.W[0])
    truth = np.asarray(beta) != 0
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    for name, sol in sols.items():
        ax0.plot(np.sort(np.asarray(sol.value))[::-1], label=f"{name}: sum {float(np.sum(sol.value)):.1f}")
    ax0.set(xlabel="feature (sorted)", ylabel="s_j", title="knockoff S-vectors")
    ax0.legend(fontsize=8)
    idx = np.arange(p)
    ax1.scatter(idx[~truth], W[~truth], s=8, c="tab:gray", label="null")
    ax1.scatter(idx[truth], W[truth], s=12, c="tab:red", label="non-null")
    T = float(sel.thresholds[0])
    if np.isfinite(T):
        ax1.axhline(T, ls="--", c="k", lw=1, label=f"knockoff+ threshold (FDR {args.fdr})")
    ax1.set(xlabel="feature", ylabel="W (LCD)", title=f"sdp_factor, {len(sel.selected)} selected")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(args.plot, dpi=110)
    except OSError as err:
        raise CLIError(f"cannot write the plot to {args.plot}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    print(f"\nplot written to {args.plot}")


# --------------------------------------------------------------------------
# data loading (CSV, NPZ, NPY) with one-line errors
# --------------------------------------------------------------------------


def _check_file(path) -> Path:
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


def read_csv_table(path):
    """``(names, columns)`` of a CSV with a header row; ``columns`` are lists of strings."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            sample = fh.read(65536)
            fh.seek(0)
            try:
                dialect = csv.Sniffer().sniff(sample, delimiters=",;\t")
            except csv.Error:
                dialect = csv.excel
            rows = list(csv.reader(fh, dialect))
    except UnicodeDecodeError:
        raise CLIError(f"{path} is not a text CSV file (cannot decode it as UTF-8)") from None
    except csv.Error as err:
        raise CLIError(f"{path} is not a valid CSV file: {err}") from None
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise CLIError(f"{path} is empty; it needs a header row with column names and data rows")
    header = [h.strip() for h in rows[0]]
    if all(_float_or_none(h) is not None for h in header):
        raise CLIError(f"{path} has no header row (the first row is numeric); add a row of column names")
    if any(not h for h in header):
        raise CLIError(f"{path}: column {header.index('') + 1} of the header has no name; name every column")
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise CLIError(f"{path}: duplicate column name(s) {dup}; make the header names unique")
    body = rows[1:]
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise CLIError(
                f"{path}: line {i + 2} has {len(r)} fields but the header has {len(header)}; "
                "fix the row or the delimiter"
            )
    columns = [[r[j].strip() for r in body] for j in range(len(header))]
    return header, columns


_MISSING = {"", "na", "nan", "n/a", "null", "none", "?"}


def _numeric_column(path, name, values):
    import numpy as np

    out = np.empty(len(values))
    for i, v in enumerate(values):
        if v.lower() in _MISSING:
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


def _default_names(p):
    return [f"x{j}" for j in range(p)]


def load_table(path):
    """``(names, X)`` with ``X`` a float ``(n, p)`` NumPy array, from CSV / NPZ / NPY.

    * CSV: a header row of column names; ``,``, ``;`` or tab delimited.
    * NPY: a 2-D numeric array; columns are named ``x0, x1, ...``.
    * NPZ: either 1-D arrays of equal length (one per column, named by key), or
      one 2-D array (key ``X``, ``data`` or the only 2-D array) with optional
      ``columns`` / ``names`` (column names).
    """
    import numpy as np

    path = _check_file(path)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv", ".txt"):
        names, cols = read_csv_table(path)
        if not cols[0]:
            raise CLIError(f"{path} has a header but no data rows")
        X = np.column_stack([_numeric_column(path, n, c) for n, c in zip(names, cols)])
        return names, X
    if suffix == ".npy":
        try:
            X = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise CLIError(f"{path} is not a readable .npy array ({err}); save it with numpy.save") from None
        if X.ndim != 2:
            raise CLIError(f"{path} holds an array of shape {X.shape}; it must be 2-D (rows x columns)")
        return _default_names(X.shape[1]), _as_float(path, X)
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
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
            names = names or _default_names(X.shape[1])
            if len(names) != X.shape[1]:
                raise CLIError(f"{path}: {len(names)} column names for {X.shape[1]} columns")
            return names, _as_float(path, X)
        one_d = {k: v for k, v in arrays.items() if v.ndim == 1}
        if not one_d:
            raise CLIError(f"{path} holds no 1-D or 2-D arrays; save columns with numpy.savez(path, a=..., b=...)")
        lengths = {k: v.shape[0] for k, v in one_d.items()}
        if len(set(lengths.values())) > 1:
            raise CLIError(f"{path}: the 1-D arrays have different lengths {lengths}; every column needs one per row")
        names = list(one_d)
        return names, np.column_stack([_as_float(path, one_d[k], k) for k in names])
    raise CLIError(f"unsupported file type {suffix or '(none)'!r} for {path}; use .csv, .npz or .npy")


def _as_float(path, X, name=None):
    import numpy as np

    if X.dtype.kind not in "biuf":
        what = f"array {name!r}" if name else "the array"
        raise CLIError(f"{path}: {what} is not numeric (dtype {X.dtype}); store numbers only")
    return np.asarray(X, dtype=np.float64)


def _resolve_target(names, target, path):
    if target in names:
        return names.index(target)
    if target.lstrip("-").isdigit() and names == _default_names(len(names)):
        j = int(target)
        if -len(names) <= j < len(names):
            return j % len(names)
    close = difflib.get_close_matches(target, names, n=3)
    hint = f"; did you mean {close}?" if close else f"; available: {_preview(names)}"
    raise CLIError(f"target column {target!r} is not in {path}{hint}")


def _preview(names, limit=8):
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} columns)" if len(names) > limit else "")


def _check_design(path, names, X, j_target, *, method):
    """Raise a one-line CLIError for NaNs, constant columns and too few rows."""
    import numpy as np

    n = X.shape[0]
    bad = ~np.isfinite(X)
    if bad.any():
        cols = [names[j] for j in np.flatnonzero(bad.any(axis=0))]
        raise CLIError(
            f"{path}: {int(bad.sum())} missing/NaN/Inf value(s) in column(s) {_preview(cols, 5)}; "
            "impute or drop those rows first"
        )
    features = [j for j in range(X.shape[1]) if j != j_target]
    if not features:
        raise CLIError(f"{path} has only the target column; it needs at least one feature column")
    if n < 10:
        raise CLIError(
            f"{path} has only {n} rows; the knockoff filter needs at least 10 "
            "(and more rows than feature columns for --method sdp/asdp/equi)"
        )
    y = X[:, j_target]
    if np.ptp(y) == 0:
        raise CLIError(f"target column {names[j_target]!r} is constant; there is nothing to explain")
    const = [names[j] for j in features if np.ptp(X[:, j]) == 0]
    if const:
        raise CLIError(f"constant column(s) {_preview(const, 5)} carry no information; drop them and rerun")
    p = len(features)
    if method != "sdp_factor" and n <= p:
        raise CLIError(
            f"{path} has {n} rows for {p} features; a dense covariance needs more rows than "
            "features: add rows or use --method sdp-factor --rank K (K < rows)"
        )
    return X[:, features], y, [names[j] for j in features]


def _versions():
    import jax
    import numpy as np

    import jaxknock

    out = {
        "jaxknock": jaxknock.__version__,
        "jax": jax.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    try:
        import jaxlib

        out["jaxlib"] = jaxlib.__version__
    except (ImportError, AttributeError):
        pass
    return out


def _device():
    import jax

    d = jax.devices()[0]
    return {
        "platform": d.platform,
        "device_kind": getattr(d, "device_kind", str(d)),
        "num_devices": jax.device_count(),
        "x64": bool(jax.config.jax_enable_x64),
        "machine": platform.machine(),
        "system": platform.system(),
    }


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_json(path, report):
    try:
        with open(path, "w") as fh:
            json.dump(report, fh, indent=2, default=_json_default)
            fh.write("\n")
    except OSError as err:
        raise CLIError(f"cannot write the report to {path}: {err.strerror or err}") from None


def _json_default(obj):
    import numpy as np

    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


# --------------------------------------------------------------------------
# select
# --------------------------------------------------------------------------

METHODS = {"sdp": "sdp", "sdp-factor": "sdp_factor", "asdp": "asdp", "equi": "equicorrelated"}


def run_select(args) -> int:
    t_start = time.perf_counter()
    method = METHODS[args.method]
    if not (0 < args.fdr < 1):
        raise CLIError(f"--fdr must lie strictly between 0 and 1, got {args.fdr}")
    if args.replicates < 1:
        raise CLIError(f"--replicates must be a positive integer, got {args.replicates}")
    if args.rank is not None and method != "sdp_factor":
        raise CLIError("--rank only applies to --method sdp-factor")
    if args.rank is not None and args.rank < 1:
        raise CLIError(f"--rank must be a positive integer, got {args.rank}")
    if args.lam is not None and args.lam <= 0:
        raise CLIError(f"--lam must be positive, got {args.lam}")

    t0 = time.perf_counter()
    names, table = load_table(args.data)
    j = _resolve_target(names, args.target, args.data)
    X, y, features = _check_design(args.data, names, table, j, method=method)
    n, p = X.shape
    if args.rank is not None and args.rank >= min(n, p):
        raise CLIError(f"--rank must be smaller than min(rows, features) = {min(n, p)}, got {args.rank}")
    if args.statistic == "centroid" and len(set(y.tolist())) != 2:
        raise CLIError("--statistic centroid needs a binary target (two distinct values)")
    t_load = time.perf_counter() - t0

    _enable_x64()
    import jax
    import numpy as np

    from jaxknock import RESULTS
    from jaxknock.pipeline import knockoff_filter

    say = (lambda *a, **k: None) if args.quiet else print
    say(
        f"{len(features)} features, {n} rows, target {names[j]!r}; method {args.method}, "
        f"statistic {args.statistic}, {args.replicates} replicate(s), FDR {args.fdr}"
    )
    bar = Progress(
        2, f"knockoff filter ({args.replicates} replicate(s))", enabled=progress_enabled(sys.stderr, args.quiet)
    )
    with bar, _Ticker(bar):
        bar.update(desc=f"knockoff filter ({args.replicates} replicate(s), batched)")
        t0 = time.perf_counter()
        try:
            sel = knockoff_filter(
                jax.random.key(args.seed),
                X,
                y,
                fdr=args.fdr,
                s_method=method,
                rank=args.rank,
                statistic=args.statistic,
                num_replicates=args.replicates,
                aggregate=args.aggregate,
                lam=args.lam,
            )
        except ValueError as err:
            raise CLIError(str(err)) from None
        t_filter = time.perf_counter() - t0
        bar.update(desc="done")

    W = np.asarray(sel.W)
    T = np.asarray(sel.thresholds)
    freq = (W >= T[:, None]).mean(axis=0)
    W_mean = W.mean(axis=0)
    order = sorted(sel.selected.tolist(), key=lambda i: -W_mean[i])
    selections = [
        {"name": features[i], "index": int(i), "W": float(W_mean[i]), "frequency": float(freq[i])} for i in order
    ]
    s_sol = sel.s_solution
    s_info = {
        "result": RESULTS(int(s_sol.result)).name,
        "sum_s": float(np.sum(np.asarray(s_sol.value))),
        "num_steps": int(np.asarray(s_sol.stats.get("num_steps", 0))),
    }
    if s_sol.stats.get("gap") is not None:
        s_info["gap"] = float(s_sol.stats["gap"])

    print(
        f"selected {len(order)} of {p} features at FDR {args.fdr}"
        + (f" (e-BH over {args.replicates} replicates)" if args.replicates > 1 and args.aggregate == "ebh" else "")
    )
    if order:
        headers = ["feature", "W"] + (["selected in"] if args.replicates > 1 else [])
        rows = [
            [s["name"], f"{s['W']:.4g}"] + ([f"{s['frequency']:.0%}"] if args.replicates > 1 else [])
            for s in selections
        ]
        _print_table(rows, headers)
    if s_info["result"] != "successful":
        say(f"note: the S-vector solver ended with result {s_info['result']!r} (the selection is still valid)")
    if args.out:
        path = Path(args.data)
        report = {
            "command": "select",
            "inputs": {
                "path": str(path.resolve()),
                "sha256": _sha256(path),
                "rows": n,
                "features": p,
                "target": names[j],
                "feature_names": features,
            },
            "settings": {
                "fdr": args.fdr,
                "method": args.method,
                "s_method": method,
                "rank": sel.settings.get("rank"),
                "replicates": args.replicates,
                "statistic": args.statistic,
                "aggregate": args.aggregate,
                "lam": args.lam,
                "seed": args.seed,
                "loss": sel.settings.get("loss"),
                "knockoff_plus": bool(sel.settings.get("plus", True)),
            },
            "versions": _versions(),
            "device": _device(),
            "timings": {
                "load": t_load,
                **{k: float(v) for k, v in sel.timings.items()},
                "filter_total": t_filter,
                "total": time.perf_counter() - t_start,
            },
            "s_vector": s_info,
            "selected": selections,
            "W_mean": {features[i]: float(W_mean[i]) for i in range(p)},
            "thresholds": [float(t) for t in T],
        }
        _write_json(args.out, report)
        say(f"report written to {args.out}")
    return 0


# --------------------------------------------------------------------------
# snb
# --------------------------------------------------------------------------


def _load_labels(path):
    import numpy as np

    path = _check_file(path)
    if path.suffix.lower() == ".npy":
        try:
            labels = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise CLIError(f"{path} is not a readable .npy array ({err})") from None
    else:
        try:
            labels = np.asarray([line.strip() for line in path.read_text().splitlines() if line.strip()])
        except UnicodeDecodeError:
            raise CLIError(f"{path} is not a text file of labels (one per line)") from None
    if labels.ndim != 1:
        raise CLIError(f"{path}: labels must be 1-D (one per row), got shape {labels.shape}")
    return labels


def _load_snb(args):
    """``(names, X, y)``: X dense NumPy or scipy.sparse CSR (non-negative), y labels."""
    import numpy as np

    path = _check_file(args.data)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            import scipy.sparse as sp
        except ImportError:
            raise CLIError("reading a sparse .npz needs scipy: pip install scipy") from None
        try:
            M = sp.load_npz(path).tocsr()
        except (ValueError, OSError, KeyError, EOFError) as err:
            raise CLIError(
                f"{path} is not a scipy.sparse .npz (save it with scipy.sparse.save_npz): "
                f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
            ) from None
        if M.dtype.kind not in "biuf":
            raise CLIError(f"{path}: the matrix is not numeric (dtype {M.dtype})")
        names = _default_names(M.shape[1])
        if args.labels:
            y = _load_labels(args.labels)
            if args.target is not None:
                raise CLIError("give either --target COLUMN_INDEX or --labels FILE, not both")
            X = M
        else:
            if args.target is None:
                raise CLIError(
                    f"{path} is a sparse matrix: give --target COLUMN_INDEX (the label column) "
                    "or --labels FILE (one label per row)"
                )
            j = _resolve_target(names, args.target, path)
            y = M[:, j].toarray().ravel()
            keep = np.setdiff1d(np.arange(M.shape[1]), [j])
            X = M[:, keep]
            names = [names[i] for i in keep]
        if y.shape[0] != X.shape[0]:
            raise CLIError(f"{len(y)} labels for {X.shape[0]} rows; give one label per row")
        vals = X.data
    elif suffix in (".csv", ".tsv", ".txt"):
        if args.labels:
            raise CLIError("--labels is only for a sparse .npz; in a CSV give the label column with --target")
        if args.target is None:
            raise CLIError("give the label column with --target COL")
        header, cols = read_csv_table(path)
        if not cols[0]:
            raise CLIError(f"{path} has a header but no data rows")
        j = _resolve_target(header, args.target, path)
        y = np.asarray(cols[j])  # labels may be text ("pos"/"neg")
        if any(v.lower() in _MISSING for v in cols[j]):
            raise CLIError(f"target column {header[j]!r} has missing labels; drop those rows")
        names = [h for i, h in enumerate(header) if i != j]
        X = (
            np.column_stack([_numeric_column(path, header[i], cols[i]) for i in range(len(header)) if i != j])
            if names
            else np.empty((len(y), 0))
        )
        vals = X
    else:
        raise CLIError(f"unsupported file type {suffix or '(none)'!r} for {path}; use .csv or a scipy.sparse .npz")
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
    names, X, y = _load_snb(args)
    t_load = time.perf_counter() - t0
    _enable_x64()
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
        _print_table([[names[i], f"{weight[i]:+.4g}"] for i in idx], ["feature", wname])
    if args.out:
        path = Path(args.data)
        report = {
            "command": "snb",
            "inputs": {
                "path": str(path.resolve()),
                "sha256": _sha256(path),
                "rows": int(X.shape[0]),
                "features": int(X.shape[1]),
                "target": args.target,
                "labels": args.labels,
                "classes": classes,
                "sparse": not isinstance(X, np.ndarray),
            },
            "settings": {"k": args.k, "model": args.model, "alpha": args.alpha},
            "versions": _versions(),
            "device": _device(),
            "timings": {"load": t_load, "class_sums": t_sums, "fit": t_fit, "total": time.perf_counter() - t_start},
            "result": RESULTS(int(sol.result)).name,
            "objective": float(sol.stats["objective"]),
            "psi": float(sol.stats["psi"]),
            "gap": float(sol.stats["gap"]),
            "train_accuracy": acc,
            "selected": [{"name": names[i], "index": int(i), "weight": float(weight[i])} for i in idx],
        }
        _write_json(args.out, report)
        say(f"report written to {args.out}")
    return 0


# --------------------------------------------------------------------------
# bench
# --------------------------------------------------------------------------


def _find_bench_dir(arg):
    if arg:
        d = Path(arg)
        if not d.is_dir():
            raise CLIError(f"benchmark folder {arg!r} does not exist")
        return d
    for cand in (Path(__file__).resolve().parents[1] / "benchmarks", Path.cwd() / "benchmarks"):
        if cand.is_dir() and any(cand.glob("bench_*.py")):
            return cand
    raise CLIError(
        "no benchmarks/ folder found (it ships with the source tree, not the wheel); "
        "run from a clone of the repository or pass --bench-dir"
    )


def run_bench(args) -> int:
    bench_dir = _find_bench_dir(args.bench_dir)
    scripts = sorted(bench_dir.glob("bench_*.py"))
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        known = {s.stem.removeprefix("bench_"): s for s in scripts}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise CLIError(f"unknown benchmark(s) {missing}; available: {sorted(known)}")
        scripts = [known[w] for w in wanted]
    if not scripts:
        raise CLIError(f"no bench_*.py scripts in {bench_dir}")
    extra = [] if args.full else ["--small"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1])] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    rows, failed = [], []
    bar = Progress(len(scripts), "benchmarks", enabled=progress_enabled(sys.stderr, args.quiet))
    with bar, _Ticker(bar):
        for script in scripts:
            bar.set_description(script.name)
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, str(script), *extra], capture_output=True, text=True, env=env, cwd=bench_dir.parent
            )
            dt = time.perf_counter() - t0
            bar.update()
            if not args.quiet:
                bar.close() if bar.enabled else None
                print(f"\n===== {script.name} {' '.join(extra)} ({dt:.1f}s, exit {proc.returncode}) =====")
                print(proc.stdout.rstrip())
            if proc.returncode != 0:
                failed.append(script.name)
                tail = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
                print(f"{script.name} failed: {tail[0]}", file=sys.stderr)
            rows.append([script.name, f"{dt:.1f}", "ok" if proc.returncode == 0 else f"FAILED ({proc.returncode})"])
    print()
    _print_table(rows, ["script", "time[s]", "status"])
    if failed:
        raise CLIError(f"{len(failed)} benchmark(s) failed: {', '.join(failed)} (output above)")
    return 0


# --------------------------------------------------------------------------
# parser
# --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from jaxknock.pipeline import AGGREGATES, STATISTICS

    parser = argparse.ArgumentParser(prog="jaxknock", description="Knockoff feature selection in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the main job on built-in synthetic data")
    demo.add_argument("--n", type=int, default=1000, help="samples (default 1000)")
    demo.add_argument("--p", type=int, default=500, help="features (default 500)")
    demo.add_argument("--rank", type=int, default=50, help="factor-model rank (default 50)")
    demo.add_argument("--signals", type=int, default=50, help="non-zero coefficients (default 50)")
    demo.add_argument(
        "--amplitude", type=float, default=12.0, help="signal amplitude: coefficients +-amplitude/sqrt(n) (default 12)"
    )
    demo.add_argument("--fdr", type=float, default=0.1, help="target FDR (default 0.1)")
    demo.add_argument("--replicates", type=int, default=5, help="knockoff replicates for aggregation")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--plot",
        metavar="OUT.png",
        default=None,
        help="write a PNG with the S-vectors and W statistics (needs matplotlib)",
    )
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=run_demo)

    sel = sub.add_parser(
        "select",
        help="knockoff filter on a CSV / NPZ / NPY table",
        description="Model-X knockoff selection with FDR control on a table: standardise, "
        "estimate the correlation (Ledoit-Wolf, or a factor model for sdp-factor), "
        "solve for s, sample knockoffs, compute W, select.",
    )
    sel.add_argument("data", help="CSV with a header row, .npz (named columns or one 2-D array) or .npy")
    sel.add_argument("--target", required=True, help="response column (name; index for unnamed arrays)")
    sel.add_argument("--fdr", type=float, default=0.1, help="target false discovery rate (default 0.1)")
    sel.add_argument(
        "--method",
        choices=sorted(METHODS),
        default="asdp",
        help="S-vector method (default asdp; sdp-factor for p >= n)",
    )
    sel.add_argument("--rank", type=int, default=None, help="factor-model rank for --method sdp-factor")
    sel.add_argument("--replicates", type=int, default=1, help="knockoff replicates, aggregated by e-BH")
    sel.add_argument("--aggregate", choices=AGGREGATES, default="ebh", help="how replicates are combined")
    sel.add_argument("--statistic", choices=STATISTICS, default="lcd", help="feature statistic W (default lcd)")
    sel.add_argument("--lam", type=float, default=None, help="fixed lasso penalty for lcd (default: cross-validated)")
    sel.add_argument("--seed", type=int, default=0)
    sel.add_argument("--out", default=None, metavar="RESULT.json", help="write a JSON report")
    sel.add_argument("--quiet", action="store_true", help="only the selection, no progress bar")
    sel.set_defaults(func=run_select)

    snb = sub.add_parser("snb", help="sparse naive Bayes on a CSV or scipy.sparse .npz")
    snb.add_argument("data", help="CSV with a header row, or a scipy.sparse .npz (scipy.sparse.save_npz)")
    snb.add_argument("--target", default=None, help="label column (CSV name; column index for a sparse .npz)")
    snb.add_argument("--labels", default=None, help="labels file for a sparse .npz (.npy or one per line)")
    snb.add_argument("-k", type=int, required=True, help="number of features the classifier may use")
    snb.add_argument("--model", choices=("multinomial", "bernoulli"), default="multinomial")
    snb.add_argument("--alpha", type=float, default=1.0, help="Laplace smoothing (default 1)")
    snb.add_argument("--out", default=None, metavar="RESULT.json", help="write a JSON report")
    snb.add_argument("--quiet", action="store_true")
    snb.set_defaults(func=run_snb)

    bench = sub.add_parser("bench", help="run the benchmark scripts (small sizes)")
    bench.add_argument("--only", default=None, help="comma-separated subset, e.g. sdp,snb")
    bench.add_argument("--full", action="store_true", help="full sizes (tens of minutes) instead of --small")
    bench.add_argument("--bench-dir", default=None, help="folder with bench_*.py (default: the repository's)")
    bench.add_argument("--quiet", action="store_true", help="only the summary table")
    bench.set_defaults(func=run_bench)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage + message
        return int(exc.code or 0)
    try:
        return args.func(args)
    except CLIError as err:
        msg = " ".join(str(err).split())
    except (ValueError, TypeError, FileNotFoundError, OSError) as err:
        msg = " ".join(str(err).split()) or type(err).__name__
    except KeyboardInterrupt:
        print("jaxknock: interrupted", file=sys.stderr)
        return 130
    print(f"jaxknock: error: {msg}", file=sys.stderr)
    return 2
