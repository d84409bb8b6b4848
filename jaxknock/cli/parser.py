"""The ``jaxknock`` argument parser and the dispatch to the subcommands."""

from __future__ import annotations

import argparse
import contextlib
import sys

from jaxknock._lapack_threads import one_lapack_thread
from jaxknock.cli.bench import run_bench
from jaxknock.cli.common import CLIError, enable_compile_cache, pipe_safe_stdout, seed
from jaxknock.cli.demo import run_demo
from jaxknock.cli.report import OUT_HELP, StdoutReport, check_writable
from jaxknock.cli.select import METHODS, run_select
from jaxknock.cli.snb import run_snb
from jaxknock.cli.stability import add_parsers as add_stability_parsers

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from jaxknock.pipeline import AGGREGATES, STATISTICS

    parser = argparse.ArgumentParser(prog="jaxknock", description="Knockoff feature selection in JAX.")
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use JAX's persistent compilation cache (default: on, in $JAXKNOCK_CACHE_DIR "
        "or ~/.cache/jaxknock/jax; also JAXKNOCK_NO_COMPILE_CACHE=1)",
    )
    from jaxknock import __version__

    # `jaxknock --version` was "the following arguments are required: command" (exit 2)
    parser.add_argument("--version", action="version", version=f"jaxknock {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the main job on built-in synthetic data")
    demo.add_argument("--n", type=int, default=1000, help="samples, at least 10 (default 1000)")
    demo.add_argument("--p", type=int, default=500, help="features (default 500)")
    demo.add_argument("--rank", type=int, default=50, help="factor-model rank (default 50)")
    demo.add_argument("--signals", type=int, default=50, help="non-zero coefficients (default 50)")
    demo.add_argument(
        "--amplitude", type=float, default=12.0, help="signal amplitude: coefficients +-amplitude/sqrt(n) (default 12)"
    )
    demo.add_argument("--fdr", type=float, default=0.1, help="target FDR (default 0.1)")
    demo.add_argument("--replicates", type=int, default=5, help="knockoff replicates for aggregation")
    demo.add_argument("--seed", type=seed, default=0)
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
        "estimate the correlation (Ledoit-Wolf, or a factor model for mvr-factor / sdp-factor), "
        "solve for s, sample knockoffs, compute W, select.",
    )
    sel.add_argument(
        "data",
        help="CSV / TSV / space-separated .txt (or .gz of one) with a header row, "
        ".npz (named columns or one 2-D array) or .npy",
    )
    sel.add_argument("--target", required=True, help="response column (name; index for unnamed arrays)")
    sel.add_argument("--fdr", type=float, default=0.1, help="target false discovery rate (default 0.1)")
    sel.add_argument(
        "--method",
        choices=sorted(METHODS),
        default="auto",
        help="S-vector method (default auto, as knockoff_filter: mvr with more rows than features, "
        "mvr-factor otherwise or with --rank; asdp is faster for thousands of features)",
    )
    sel.add_argument("--rank", type=int, default=None, help="factor-model rank for --method mvr-factor / sdp-factor")
    sel.add_argument("--replicates", type=int, default=1, help="knockoff replicates, aggregated by e-BH")
    sel.add_argument("--aggregate", choices=AGGREGATES, default="ebh", help="how replicates are combined")
    sel.add_argument("--statistic", choices=STATISTICS, default="lcd", help="feature statistic W (default lcd)")
    sel.add_argument("--lam", type=float, default=None, help="fixed lasso penalty for lcd (default: cross-validated)")
    sel.add_argument("--seed", type=seed, default=0)
    sel.add_argument(
        "--groups",
        default=None,
        metavar="FILE",
        help="group knockoffs: one group id or name per feature (text, whitespace-separated, or .npy); "
        "selects groups at group-level FDR",
    )
    sel.add_argument("--knockoffs", type=int, default=1, metavar="M", help="simultaneous knockoff copies m (default 1)")
    sel.add_argument("--out", default=None, metavar="RESULT.json", help=OUT_HELP)
    sel.add_argument("--quiet", action="store_true", help="only the selection, no progress bar")
    sel.set_defaults(func=run_select)

    snb = sub.add_parser("snb", help="sparse naive Bayes on a CSV or scipy.sparse .npz")
    snb.add_argument(
        "data",
        help="CSV / TSV / space-separated .txt (or .gz of one) with a header row, "
        "or a scipy.sparse .npz (scipy.sparse.save_npz)",
    )
    snb.add_argument("--target", default=None, help="label column (CSV name; column index for a sparse .npz)")
    snb.add_argument("--labels", default=None, help="labels file for a sparse .npz (.npy or one per line)")
    snb.add_argument("-k", type=int, required=True, help="number of features the classifier may use")
    snb.add_argument("--model", choices=("multinomial", "bernoulli"), default="multinomial")
    snb.add_argument("--alpha", type=float, default=1.0, help="Laplace smoothing (default 1)")
    snb.add_argument("--out", default=None, metavar="RESULT.json", help=OUT_HELP)
    snb.add_argument("--quiet", action="store_true")
    snb.set_defaults(func=run_snb)

    add_stability_parsers(sub)  # jaxknock stability, jaxknock randsel

    bench = sub.add_parser("bench", help="run the benchmark scripts (small sizes)")
    bench.add_argument("--only", default=None, help="comma-separated subset, e.g. sdp,snb")
    bench.add_argument("--full", action="store_true", help="full sizes (tens of minutes) instead of --small")
    bench.add_argument("--bench-dir", default=None, help="folder with bench_*.py (default: the repository's)")
    bench.add_argument("--quiet", action="store_true", help="only the summary table")
    bench.set_defaults(func=run_bench)
    return parser


def _check_not_an_input(args) -> None:
    """``--out`` naming the data (or ``--labels`` / ``--groups``) file: the report overwrote the input."""
    from pathlib import Path

    out = Path(args.out).resolve()
    for flag, value in (("DATA", getattr(args, "data", None)), ("--labels", getattr(args, "labels", None)),
                        ("--groups", getattr(args, "groups", None))):  # fmt: skip
        if value and Path(value).resolve() == out:
            raise CLIError(f"--out {args.out} is the {flag} file; the report would overwrite it: name another file")


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage + message
        return int(exc.code or 0)
    enable_compile_cache(not args.no_compile_cache)
    try:
        out = getattr(args, "out", None)
        report_to_stdout = out == "-"
        if out and not report_to_stdout:
            check_writable(args.out)  # before the work, not after it (the selection ran, then --out failed)
            _check_not_an_input(args)
        # the CLI's own process: every command's programs (jaxknock/_lapack_threads.py); a closed stdout
        # (`| head`) drops the rest of the output instead of ending the run without its --out report
        with one_lapack_thread(), pipe_safe_stdout() as stdout:
            if not report_to_stdout:
                return args.func(args)
            # `--out -` was a file named "-"; now the report is standard output's only content
            args.out = StdoutReport(stdout)
            with contextlib.redirect_stdout(sys.stderr):
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
