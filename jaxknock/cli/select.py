"""``jaxknock select DATA --target COL``: the model-X knockoff filter on a table."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from jaxknock._s_methods import FACTOR_SOLVERS, WIDE_DENSE_SOLVERS
from jaxknock.cli.common import CLIError, enable_x64
from jaxknock.cli.progress import Progress, Ticker, progress_enabled
from jaxknock.cli.report import device, print_table, sha256, versions, write_json
from jaxknock.cli.tables import class_like_note, load_table, preview, resolve_target

__all__ = ["METHODS", "run_select", "summarise_selection"]


def _check_design(path, names, X, j_target, *, method):
    """Raise a one-line CLIError for NaNs, constant columns and too few rows."""
    import numpy as np

    n = X.shape[0]
    bad = ~np.isfinite(X)
    if bad.any():
        cols = [names[j] for j in np.flatnonzero(bad.any(axis=0))]
        raise CLIError(
            f"{path}: {int(bad.sum())} missing/NaN/Inf value(s) in column(s) {preview(cols, 5)}; "
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
        raise CLIError(f"constant column(s) {preview(const, 5)} carry no information; drop them and rerun")
    p = len(features)
    if method not in (*FACTOR_METHODS, *WIDE_DENSE_SOLVERS) and n <= p:
        flag = {v: k for k, v in METHODS.items()}.get(method, method)
        raise CLIError(
            f"{path} has {n} rows for {p} features; --method {flag} on a dense covariance needs more rows "
            "than features: add rows or use --method mvr-factor (or sdp-factor) --rank K (K < rows), or mvr"
        )
    return X[:, features], y, [names[j] for j in features]


FACTOR_METHODS = tuple(FACTOR_SOLVERS)  # knockoff_filter's methods on a factor model of the data (its rank)
METHODS = {
    "auto": "auto",  # the library's default (jaxknock.pipeline.resolve_s_method), resolved on the table's shape
    "sdp": "sdp",
    "sdp-factor": "sdp_factor",
    "mvr-factor": "mvr_factor",
    "asdp": "asdp",
    "equi": "equicorrelated",
    "mvr": "mvr",
    "maxent": "maxent",
}


def _check_select_args(args, method) -> None:
    """Reject inconsistent ``jaxknock select`` options before any data is read."""
    if not (0 < args.fdr < 1):
        raise CLIError(f"--fdr must lie strictly between 0 and 1, got {args.fdr}")
    if args.replicates < 1:
        raise CLIError(f"--replicates must be a positive integer, got {args.replicates}")
    if args.rank is not None and method not in (*FACTOR_METHODS, "auto"):
        raise CLIError(
            "--rank only applies to --method mvr-factor or sdp-factor (or auto, which it turns into mvr-factor)"
        )
    if args.rank is not None and args.rank < 1:
        raise CLIError(f"--rank must be a positive integer, got {args.rank}")
    if args.lam is not None and args.lam <= 0:
        raise CLIError(f"--lam must be positive, got {args.lam}")
    if args.lam is not None and args.statistic != "lcd":
        raise CLIError(f"--lam only applies to --statistic lcd (the lasso penalty); {args.statistic} has none")
    if getattr(args, "knockoffs", 1) > 1 and args.replicates > 1 and args.aggregate != "frequency":
        raise CLIError("--knockoffs > 1 with --replicates > 1 needs --aggregate frequency")
    if getattr(args, "knockoffs", 1) < 1:
        raise CLIError(f"--knockoffs must be a positive integer (the number of knockoff copies), got {args.knockoffs}")
    if getattr(args, "groups", None) is not None and method in FACTOR_METHODS:
        raise CLIError("--groups needs a dense method (--method sdp, asdp, equi, mvr or maxent)")


def _load_groups(path, p):
    """``--groups FILE``: one group id per feature, text (whitespace separated) or ``.npy``.

    Ids are integers, or names (gene / pathway names: a text file whose tokens are not all numbers,
    or a ``.npy`` of strings); the report lists the selected groups by their ids or names.
    """
    import numpy as np

    if not Path(path).is_file():  # was numpy's "x.txt not found." (no option named)
        raise CLIError(f"--groups file {str(path)!r} does not exist; check the path")
    try:
        g = np.load(path) if str(path).endswith(".npy") else _read_group_tokens(path)
    except ValueError as err:
        raise CLIError(f"--groups {path}: not a list of group ids or names ({err})") from None
    g = np.asarray(g).reshape(-1)
    if g.shape[0] != p:
        raise CLIError(f"--groups {path} has {g.shape[0]} group ids but the table has {p} features")
    if g.dtype.kind not in "iufUS":
        raise CLIError(f"--groups {path} must hold integer group ids or group names, got dtype {g.dtype}")
    # inf passed g == round(g) and, as 1e19, was cast to -2^63: every such id one merged group
    bad = ~(np.isfinite(g) & (g == np.round(g)) & (np.abs(g) < 2.0**63)) if g.dtype.kind == "f" else None
    if bad is not None and bad.any():
        raise CLIError(f"--groups {path} must hold integer group ids, found {g[bad][0]!r}")
    return g.astype(np.int64) if g.dtype.kind == "f" else g


def _read_group_tokens(path):
    """The whitespace-separated tokens of a text ``--groups`` file: numbers when every token is one
    (``loadtxt``, as before), else the tokens as names (``"BRCA1 BRCA1 TP53"``; text after a ``#``
    is a comment, as for ``loadtxt``)."""
    import numpy as np

    # utf-8-sig: a byte-order mark (Windows editors) made the first id the name '\ufeff0', a group of its own
    try:
        return np.loadtxt(path, ndmin=1, encoding="utf-8-sig")
    except ValueError:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()
        tokens = [t for line in lines for t in line.split("#", 1)[0].split()]
        if not tokens:
            raise
        return np.asarray(tokens)


def _group_label(v):
    """A selected group's label for the JSON report: an int for integer ids, else its name."""
    return v.decode() if isinstance(v, bytes) else v if isinstance(v, str) else int(v)


def _resolve_method(args, method, shape):
    """``--method auto``: the library's choice for a design of ``shape`` (:func:`~jaxknock.pipeline.resolve_s_method`).

    ``mvr`` with more rows than features, ``mvr-factor`` otherwise or with ``--rank``;
    with ``--groups`` (a group law is dense) ``mvr``;
    with ``--knockoffs > 1`` and rows <= features <= 2000, ``mvr``. Any other method is kept.
    """
    if method != "auto":
        return method
    from jaxknock.pipeline import resolve_s_method

    return resolve_s_method(
        "auto", shape, groups=getattr(args, "groups", None), rank=args.rank, num_knockoffs=getattr(args, "knockoffs", 1)
    )


def _load_design(args, method):
    """Read the table and split it into ``(names, j, X, y, features, levels, method)``, checking the target.

    ``levels``: the two text labels of a binary target coded 0/1 (``None`` for a numeric target);
    ``method``: the S-vector method, ``auto`` resolved on the table's shape.
    """
    names, table, levels = load_table(args.data, target=args.target)
    j = resolve_target(names, args.target, args.data)
    method = _resolve_method(args, method, (table.shape[0], table.shape[1] - 1))
    _check_select_args(args, method)  # --knockoffs > 1 where auto chose mvr-factor
    X, y, features = _check_design(args.data, names, table, j, method=method)
    note = class_like_note(names[j], y) if levels is None else None
    if note:
        print(note, file=sys.stderr)
    n, p = X.shape
    if args.rank is not None and args.rank >= min(n, p):
        raise CLIError(f"--rank must be smaller than min(rows, features) = {min(n, p)}, got {args.rank}")
    if args.statistic == "centroid" and len(set(y.tolist())) != 2:
        raise CLIError("--statistic centroid needs a binary target (two distinct values)")
    return names, j, X, y, features, levels, method


def _run_filter(args, method, X, y):
    """Run :func:`~jaxknock.knockoff_filter` with the CLI's options under a progress bar."""
    import jax

    from jaxknock.pipeline import knockoff_filter

    bar = Progress(
        2, f"knockoff filter ({args.replicates} replicate(s))", enabled=progress_enabled(sys.stderr, args.quiet)
    )
    with bar, Ticker(bar):
        bar.update(desc=f"knockoff filter ({args.replicates} replicate(s), batched)")
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
                **_group_options(args, X.shape[1]),
            )
        except ValueError as err:
            raise CLIError(str(err)) from None
        bar.update(desc="done")
    return sel


def _group_options(args, p) -> dict:
    """``groups`` / ``num_knockoffs`` for knockoff_filter, only when asked for (the plain path otherwise)."""
    opts = {}
    if getattr(args, "groups", None) is not None:
        opts["groups"] = _load_groups(args.groups, p)
    if getattr(args, "knockoffs", 1) != 1:
        opts["num_knockoffs"] = int(args.knockoffs)
    return opts


def summarise_selection(sel, features):
    """Selected features ordered by mean ``W`` (with their selection frequency) and the S-vector summary.

    The frequency of a feature is the fraction of replicates whose own knockoff(+) filter selects it: at
    ``fdr`` (``sel.thresholds``), except under e-BH aggregation, where it is the fraction of replicates
    giving it a non-zero e-value, i.e. selecting it at the e-values' level ``fdr / 2``
    (:func:`jaxknock.filter.aggregate_ebh`): a count at ``fdr`` read "selected in 100%" for features
    that e-BH left out.
    """
    import numpy as np

    from jaxknock import RESULTS

    W = np.asarray(sel.W)
    T = np.asarray(sel.thresholds)
    T_freq = T
    if _ebh_aggregated(sel):
        from jaxknock.filter import knockoff_threshold

        T_freq = np.asarray(knockoff_threshold(W, sel.settings["fdr"] / 2, plus=sel.settings.get("plus", True)))
    if sel.selected_groups is not None:  # group-level W: each feature reports its group's statistic
        W = W[:, np.asarray(sel.settings["groups"].group_of)]
    freq = (W >= T_freq[:, None]).mean(axis=0)
    W_mean = W.mean(axis=0)
    order = sorted(sel.selected.tolist(), key=lambda i: -W_mean[i])
    selections = [
        {"name": features[i], "index": int(i), "W": float(W_mean[i]), "frequency": float(freq[i])} for i in order
    ]
    if sel.selected_groups is not None:  # each selected feature names its group (an id or a name)
        g = sel.settings["groups"]
        for entry in selections:
            entry["group"] = _group_label(g.labels[g.group_of[entry["index"]]].item())
    s_sol = sel.s_solution
    s_info = {
        "result": RESULTS(int(s_sol.result)).name,
        "sum_s": float(np.sum(np.asarray(s_sol.value.diagonal() if hasattr(s_sol.value, "blocks") else s_sol.value))),
        "num_steps": int(np.asarray(s_sol.stats.get("num_steps", 0))),
    }
    if s_sol.stats.get("gap") is not None:
        s_info["gap"] = float(s_sol.stats["gap"])
    return selections, s_info, W_mean, T


def _ebh_aggregated(sel) -> bool:
    """Whether ``sel`` aggregated several replicates by e-BH (single-knockoff path)."""
    return sel.W.shape[0] > 1 and sel.settings.get("aggregate") == "ebh" and sel.settings.get("num_knockoffs", 1) == 1


def _print_selection(args, selections, p, sel=None) -> None:
    """The selection line and table; with ``--groups`` the number of groups and a ``group`` column."""
    grouped = sel is not None and sel.selected_groups is not None
    groups = f" in {len(sel.selected_groups)} of {sel.settings['groups'].num_groups} groups" if grouped else ""
    print(
        f"selected {len(selections)} of {p} features{groups} at FDR {args.fdr}"
        + (f" (e-BH over {args.replicates} replicates)" if args.replicates > 1 and args.aggregate == "ebh" else "")
    )
    if selections:
        freq_header = f"e > 0 in (at FDR {args.fdr / 2:g})" if args.aggregate == "ebh" else "selected in"
        headers = ["feature"] + (["group"] if grouped else []) + ["W"] + ([freq_header] if args.replicates > 1 else [])
        rows = [
            [s["name"]]
            + ([str(s["group"])] if grouped else [])
            + [f"{s['W']:.4g}"]
            + ([f"{s['frequency']:.0%}"] if args.replicates > 1 else [])
            for s in selections
        ]
        print_table(rows, headers)


def _select_report(args, method, sel, design, summary, times) -> dict:
    """The JSON report of ``jaxknock select --out``."""
    names, j, features, n, p, levels = design
    selections, s_info, W_mean, T = summary
    path = Path(args.data)
    return {
        "command": "select",
        "inputs": {
            "path": str(path.resolve()),
            "sha256": sha256(path),
            "rows": n,
            "features": p,
            "target": names[j],
            "target_levels": None if levels is None else {"0": levels[0], "1": levels[1]},
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
            "groups": getattr(args, "groups", None),
            "num_knockoffs": int(getattr(args, "knockoffs", 1)),
        },
        "versions": versions(),
        "device": device(),
        "timings": times,
        "s_vector": s_info,
        "selected": selections,
        "W_mean": {features[i]: float(W_mean[i]) for i in range(p)},
        "thresholds": [float(t) for t in T],
        "explanation": sel.explanation,
        "selected_groups": None
        if sel.selected_groups is None
        else [_group_label(v) for v in sel.selected_groups.tolist()],
    }


def run_select(args) -> int:
    """``jaxknock select``: the knockoff filter on a CSV/NPZ/NPY table, a table of selections, a JSON report."""
    t_start = time.perf_counter()
    method = METHODS[args.method]
    _check_select_args(args, method)
    t0 = time.perf_counter()
    names, j, X, y, features, levels, method = _load_design(args, method)
    n, p = X.shape
    t_load = time.perf_counter() - t0

    enable_x64()
    say = (lambda *a, **k: None) if args.quiet else print
    say(
        f"{len(features)} features, {n} rows, target {names[j]!r}"
        + (f" (coded 0 = {levels[0]!r}, 1 = {levels[1]!r})" if levels else "")
        + f"; method {args.method}"
        + (f" ({method.replace('_', '-')})" if args.method == "auto" else "")
        + ", "
        f"statistic {args.statistic}, {args.replicates} replicate(s), FDR {args.fdr}"
    )
    t0 = time.perf_counter()
    sel = _run_filter(args, method, X, y)
    t_filter = time.perf_counter() - t0

    summary = summarise_selection(sel, features)
    selections, s_info = summary[0], summary[1]
    _print_selection(args, selections, p, sel)
    if not selections:
        print(sel.explanation)
    if s_info["result"] != "successful":
        say(f"note: the S-vector solver ended with result {s_info['result']!r} (the selection is still valid)")
    if args.out:
        times = {
            "load": t_load,
            **{k: float(v) for k, v in sel.timings.items()},
            "filter_total": t_filter,
            "total": time.perf_counter() - t_start,
        }
        write_json(args.out, _select_report(args, method, sel, (names, j, features, n, p, levels), summary, times))
        say(f"report written to {args.out}")
    return 0
