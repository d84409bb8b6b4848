"""``jaxknock stability`` and ``jaxknock randsel``: stability selection and randSel on a table."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from jaxknock.cli.common import CLIError, enable_x64, seed
from jaxknock.cli.progress import Progress, Ticker, progress_enabled
from jaxknock.cli.report import OUT_HELP, device, print_table, sha256, versions, write_json
from jaxknock.cli.tables import class_like_note, load_table, preview, resolve_target

__all__ = ["add_parsers", "run_randsel", "run_stability"]


def _float_or(word: str):
    """An argparse type: a float, or ``word`` (any case) for ``None``."""

    def parse(text: str):
        if text.strip().lower() == word:
            return None
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number or {word!r}") from None

    parse.__name__ = f"number or {word!r}"
    return parse


def add_parsers(sub) -> None:
    """Register the two subcommands on the ``jaxknock`` subparsers."""
    st = sub.add_parser(
        "stability",
        help="stability selection (lasso / l1-logistic on subsamples) on a CSV / NPZ / NPY table",
        description="Stability selection with complementary pairs: lasso paths on half-samples, "
        "selection probabilities, the stable set and its bound on E[false selections].",
    )
    st.add_argument("data", help="CSV / TSV / space-separated .txt (or .gz of one) with a header row, .npz or .npy")
    st.add_argument("--target", required=True, help="response column (name; index for unnamed arrays)")
    st.add_argument(
        "--threshold",
        type=_float_or("auto"),
        default=0.6,
        help="selection threshold in (0.5, 1] (default 0.6), or 'auto': the smallest one meeting --expected-false",
    )
    st.add_argument(
        "--expected-false",
        type=_float_or("none"),
        default=1.0,
        help="target E[V], the per-family error rate, that picks the lambda range (default 1); "
        "'none': the whole grid, whose bound can be vacuous",
    )
    st.add_argument("--subsamples", type=int, default=100, help="number of subsamples (even; default 100)")
    st.add_argument("--lambdas", type=int, default=50, help="grid size (default 50)")
    st.add_argument("--loss", choices=("auto", "squared", "logistic"), default="auto")
    st.add_argument("--seed", type=seed, default=0)
    st.add_argument("--out", default=None, metavar="RESULT.json", help=OUT_HELP)
    st.add_argument("--quiet", action="store_true", help="only the selection, no progress bar")
    st.set_defaults(func=run_stability)

    rs = sub.add_parser(
        "randsel",
        help="randSel (randomised HSIC selection, finds interactions) on a CSV / NPZ / NPY table",
        description="randSel: contributions of the features from random halves on row subsamples, "
        "culling the least contributing features round by round.",
    )
    rs.add_argument("data", help="CSV / TSV / space-separated .txt (or .gz of one) with a header row, .npz or .npy")
    rs.add_argument("--target", required=True, help="response column (name; index for unnamed arrays)")
    rs.add_argument("--subsamples", type=int, default=3000, help="draws per round (default 3000)")
    rs.add_argument("--subsample-size", type=int, default=None, help="rows per draw (default rows // 4)")
    rs.add_argument("--drop", type=float, default=0.25, help="fraction culled per round (default 0.25)")
    rs.add_argument("--top", type=int, default=None, help="also report the top K of the ranking")
    rs.add_argument("--seed", type=seed, default=0)
    rs.add_argument("--out", default=None, metavar="RESULT.json", help=OUT_HELP)
    rs.add_argument("--quiet", action="store_true", help="only the selection, no progress bar")
    rs.set_defaults(func=run_randsel)


def _load(args):
    import numpy as np

    names, table, _ = load_table(args.data, target=args.target)  # a two-label text target is coded 0/1
    j = resolve_target(names, args.target, args.data)
    bad = ~np.isfinite(table)
    if bad.any():
        cols = [names[c] for c in np.flatnonzero(bad.any(axis=0))]
        raise CLIError(f"{args.data}: missing/NaN/Inf value(s) in column(s) {preview(cols, 5)}; impute or drop them")
    features = [c for c in range(table.shape[1]) if c != j]
    if not features:
        raise CLIError(f"{args.data} has only the target column; it needs at least one feature column")
    if table.shape[0] < 8:
        raise CLIError(f"{args.data} has only {table.shape[0]} rows; need at least 8")
    y = table[:, j]
    if np.ptp(y) == 0:
        raise CLIError(f"target column {names[j]!r} is constant; there is nothing to explain")
    X = table[:, features]
    sd = X.std(axis=0)
    const = [names[features[c]] for c in np.flatnonzero(sd == 0)]
    if const:
        raise CLIError(f"constant column(s) {preview(const, 5)} carry no information; drop them and rerun")
    note = class_like_note(names[j], y)
    if note:
        print(note, file=sys.stderr)
    return names[j], [names[c] for c in features], (X - X.mean(0)) / sd, y


def _inputs(args, target, features, n):
    path = Path(args.data)
    return {
        "path": str(path.resolve()),
        "sha256": sha256(path),
        "rows": n,
        "features": len(features),
        "target": target,
        "feature_names": features,
    }


def _run(args, header, desc, fn):
    """``fn()`` in float64 under a progress bar, after printing ``header``: ``(result, seconds, say)``.

    ``say`` prints unless ``--quiet``; a ``ValueError`` from ``fn`` becomes a one-line CLI error.
    """
    enable_x64()
    say = (lambda *a, **k: None) if args.quiet else print
    say(header)
    t0 = time.perf_counter()
    bar = Progress(1, desc, enabled=progress_enabled(sys.stderr, args.quiet))
    with bar, Ticker(bar):
        try:
            out = fn()
        except ValueError as err:
            raise CLIError(str(err)) from None
        bar.update(desc="done")
    return out, time.perf_counter() - t0, say


def run_stability(args) -> int:
    """``jaxknock stability``: stability selection, a table of the stable set, a JSON report."""
    import jax
    import numpy as np

    from jaxknock.stability import stability_selection

    t_start = time.perf_counter()
    if args.threshold is not None and not 0.5 < args.threshold <= 1:
        raise CLIError(f"--threshold must lie in (0.5, 1], got {args.threshold}")
    if args.expected_false is not None and args.expected_false <= 0:
        raise CLIError(f"--expected-false must be positive, got {args.expected_false}")
    if args.subsamples < 2 or args.subsamples % 2:
        raise CLIError(f"--subsamples must be an even number >= 2 (complementary pairs), got {args.subsamples}")
    if args.lambdas < 1:
        raise CLIError(f"--lambdas must be a positive integer, got {args.lambdas}")
    target, features, X, y = _load(args)
    loss = args.loss
    if loss == "auto":
        loss = "logistic" if np.unique(y).size == 2 else "squared"
    if loss == "logistic":
        if np.unique(y).size != 2:
            raise CLIError(f"--loss logistic needs a binary target, column {target!r} has {np.unique(y).size} values")
        y = (y == y.max()).astype(np.float64)
    threshold = args.threshold
    if threshold is None and args.expected_false is None:
        raise CLIError("--threshold auto needs a number for --expected-false")
    res, t_fit, say = _run(
        args,
        f"{len(features)} features, {X.shape[0]} rows, target {target!r}; {loss} loss, {args.subsamples} subsamples",
        f"stability selection ({args.subsamples} subsamples x {args.lambdas} lambdas, batched)",
        lambda: stability_selection(
            jax.random.key(args.seed),
            X,
            y,
            num_lambdas=args.lambdas,
            num_subsamples=args.subsamples,
            threshold=threshold,
            expected_false=args.expected_false,
            loss=loss,
        ),
    )
    prob = np.asarray(res.max_probability)
    order = sorted(np.flatnonzero(res.selected).tolist(), key=lambda i: -prob[i])
    print(
        f"selected {len(order)} of {len(features)} features at threshold {res.threshold:.3g} "
        f"(E[false selections] <= {res.bound:.3g}, {res.assumption} bound)"
    )
    if res.explanation:
        print(res.explanation)
    if order:
        print_table([[features[i], f"{prob[i]:.2f}"] for i in order], ["feature", "max probability"])
    if args.out:
        write_json(
            args.out,
            {
                "command": "stability",
                "inputs": _inputs(args, target, features, X.shape[0]),
                "settings": {
                    "threshold": res.threshold,
                    "expected_false": args.expected_false,
                    "subsamples": args.subsamples,
                    "lambdas": args.lambdas,
                    "loss": loss,
                    "seed": args.seed,
                    "assumption": res.assumption,
                },
                "versions": versions(),
                "device": device(),
                "timings": {"fit": t_fit, "total": time.perf_counter() - t_start},
                "selected": [{"name": features[i], "index": int(i), "probability": float(prob[i])} for i in order],
                "bound": res.bound,
                "explanation": res.explanation,
                "q": res.q,
                "num_lambdas_used": res.num_lambdas_used,
                "lambdas": np.asarray(res.lambdas).tolist(),
                "max_probability": {features[i]: float(prob[i]) for i in range(len(features))},
            },
        )
        say(f"report written to {args.out}")
    return 0


def run_randsel(args) -> int:
    """``jaxknock randsel``: randSel, the selected features and the ranking, a JSON report."""
    import jax
    import numpy as np

    from jaxknock.kernels import randsel

    t_start = time.perf_counter()
    if args.subsamples < 1:
        raise CLIError(f"--subsamples must be a positive integer, got {args.subsamples}")
    if not 0 < args.drop < 1:
        raise CLIError(f"--drop must lie in (0, 1), got {args.drop}")
    if args.top is not None and args.top < 1:  # -2 printed all but the last two features as the "top -2"
        raise CLIError(f"--top must be a positive integer, got {args.top}")
    target, features, X, y = _load(args)
    if len(features) < 3:
        raise CLIError(f"randsel needs at least 3 feature columns, got {len(features)}")
    if args.subsample_size is not None and not 4 <= args.subsample_size <= X.shape[0]:
        raise CLIError(
            f"--subsample-size must be an integer in [4, {X.shape[0]}] (the rows), got {args.subsample_size}"
        )
    res, t_fit, say = _run(
        args,
        f"{len(features)} features, {X.shape[0]} rows, target {target!r}; {args.subsamples} draws per round",
        f"randSel ({args.subsamples} draws per round, batched)",
        lambda: randsel(
            jax.random.key(args.seed),
            X,
            y,
            num_subsamples=args.subsamples,
            subsample_size=args.subsample_size,
            drop=args.drop,
        ),
    )
    sel = np.flatnonzero(res.selected).tolist()
    rank_of = {int(f): r for r, f in enumerate(res.ranking)}
    sel.sort(key=lambda i: rank_of[i])
    print(f"selected {len(sel)} of {len(features)} features (positive contribution in round {res.best_round})")
    if sel:
        print_table([[features[i], str(rank_of[i] + 1)] for i in sel], ["feature", "rank"])
    if args.top:
        say("top " + str(args.top) + ": " + ", ".join(features[i] for i in res.ranking[: args.top]))
    if args.out:
        write_json(
            args.out,
            {
                "command": "randsel",
                "inputs": _inputs(args, target, features, X.shape[0]),
                "settings": {
                    "subsamples": args.subsamples,
                    "subsample_size": args.subsample_size,
                    "drop": args.drop,
                    "seed": args.seed,
                },
                "versions": versions(),
                "device": device(),
                "timings": {"fit": t_fit, "total": time.perf_counter() - t_start},
                "selected": [{"name": features[i], "index": int(i), "rank": rank_of[i] + 1} for i in sel],
                "ranking": [features[i] for i in res.ranking],
                "alignment": [float(a) for a in res.alignment],
                "best_round": res.best_round,
            },
        )
        say(f"report written to {args.out}")
    return 0
