"""Benchmark: FDR and power of the knockoff filter (thesis Figure 4.5), side by side with knockpy.

Experiment (thesis section 4.4, Figure 4.5; Candes et al. 2018, Figure 5):
``Sigma = D + V V^T`` with ``D_ii ~ U[0, 1]``, ``V_ij ~ N(0, 1/k)``, rescaled to a
correlation matrix; one design ``X`` (``n`` rows ``~ N(0, Sigma)``) and one
support of ``--nnz`` coefficients with random signs are fixed; for every
amplitude ``a`` the coefficients are ``+-a / sqrt(n)`` and
``y = X beta + N(0, 1)``. The randomness averaged over is the knockoff
sampling (as in the thesis): ``--draws`` independent knockoff draws per
amplitude and method.

Columns, all on the same data in the same run:

* ``jaxknock`` with ``s_method`` in equicorrelated, asdp, sdp (full rank) and
  sdp_factor (rank ``k`` factor model estimated from ``X``), through the same
  stages as :func:`jaxknock.knockoff_filter` (the covariance and ``s`` are
  computed once per method since they depend on ``X`` only):
  - ``R=1``: one knockoff replicate per draw, knockoff+ threshold;
  - ``R=--R``: ``R`` replicates per draw aggregated with e-BH
    (:func:`jaxknock.aggregate_ebh`, FDR-valid).
* ``knockpy``: ``KnockoffFilter(ksampler='gaussian', fstat='lasso',
  knockoff_kwargs={'method': 'sdp'})`` (knockpy 1.3.5, its own venv via
  ``benchmarks/_anchors.py``), Ledoit-Wolf covariance and SDP ``S`` computed once
  by knockpy, one knockoff draw per ``forward`` call.

Statistic: LCD. ``--lam cv`` (default, what both libraries do by default)
cross-validates the lasso per replicate (jaxknock: 5 folds, 100-lambda grid,
early-stopped path; knockpy: ``LassoCV`` over its 20 default alphas);
``--lam fixed`` uses one penalty ``lam = 0.5 sqrt(2 log(2p) / n) * std(y)``
for both libraries (``Lasso(alpha=lam)`` in knockpy), much cheaper on a CPU.

Timing: one full pipeline call from raw ``X, y`` (covariance, S-vector,
sampling, LCD with CV, selection) of ``jaxknock.knockoff_filter(s_method='sdp')``
(after a warm-up call that compiles) versus knockpy's ``KnockoffFilter.forward``
with ``method='sdp'`` and ``LassoCV``, with per-stage times and ratios.

Output: a table (mean +- standard error over draws of FDP and power) and,
with ``--json PATH``, a JSON file for plotting::

    {"config": {...all settings..., "uptime": "...", "backend": "cpu"},
     "rows": [{"method": "sdp", "library": "jaxknock", "R": 1, "amplitude": 8.0,
               "fdp_mean": .., "fdp_se": .., "power_mean": .., "power_se": ..,
               "fdp": [per-draw FDPs], "power": [per-draw powers],
               "s_mean": .., "s_seconds": ..}, ...],
     "timing": {"jaxknock": {"total": .., "covariance": .., "s_vector": ..,
                             "sampling": .., "statistics": .., "selection": ..,
                             "compile_and_run": ..},
                "knockpy": {"total": .., "covariance": .., "s_vector": ..,
                            "sampling": .., "statistics": ..},
                "ratio_knockpy_over_jaxknock": {"total": .., ...}}}

``library`` is ``"jaxknock"`` or ``"knockpy"``; ``R`` is the number of
aggregated replicates (1 = single knockoff+). One line per (library, method,
R, amplitude): plot ``fdp_mean +- fdp_se`` and ``power_mean +- power_se``
against ``amplitude``, one curve per (library, method, R).

Usage::

    python benchmarks/bench_filter.py --small                  # smoke test, ~1 minute
    python benchmarks/bench_filter.py --draws 100 --json out.json   # the full experiment
    python benchmarks/bench_filter.py --lam fixed --draws 20 --amplitudes 4 8 12
    # issue 18: s_method power on correlated designs, paired with knockpy's default (same X, y)
    python benchmarks/bench_filter.py --mrc-power --datasets 40 --methods mvr \
        --designs block-0.5 block-0.7 ar1-0.8 --amplitude 0.2 0.25 0.25
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _anchors import run_anchor  # noqa: E402

from jaxknock import filter as F  # noqa: E402
from jaxknock import pipeline as P  # noqa: E402
from jaxknock import sampling  # noqa: E402
from jaxknock import statistics as S  # noqa: E402

METHODS = ("equicorrelated", "asdp", "sdp", "sdp_factor")

KNOCKPY_FDP_CODE = """
import time, warnings
import numpy as np
import knockpy
from knockpy.knockoff_filter import KnockoffFilter
warnings.filterwarnings("ignore")
X, Y, beta = inputs["X"], inputs["Y"], inputs["beta"]
draws, fdr, lams = int(inputs["draws"]), float(inputs["fdr"]), inputs["lams"]
t = time.perf_counter()
Sigma, _ = knockpy.utilities.estimate_covariance(X, tol=1e-2, shrinkage="ledoitwolf")
t_cov = time.perf_counter() - t
t = time.perf_counter()
Smat = knockpy.smatrix.compute_smatrix(Sigma, method="sdp")
t_s = time.perf_counter() - t
truth = beta != 0
rows = []
for a_i in range(Y.shape[0]):
    fdp, power = [], []
    for d in range(draws):
        np.random.seed(1000 * a_i + d)
        fk = {} if lams[a_i] <= 0 else {"alphas": [float(lams[a_i])]}
        kf = KnockoffFilter(ksampler="gaussian", fstat="lasso",
                            knockoff_kwargs={"method": "sdp", "S": Smat})
        rej = np.asarray(kf.forward(X=X, y=Y[a_i], Sigma=Sigma, fdr=fdr, fstat_kwargs=fk)) > 0
        tp = int((rej & truth).sum())
        fdp.append((int(rej.sum()) - tp) / max(int(rej.sum()), 1))
        power.append(tp / int(truth.sum()))
    rows.append({"fdp": fdp, "power": power})
report({"rows": rows, "s_mean": float(np.mean(np.diag(Smat))), "s_seconds": t_s, "cov_seconds": t_cov})
"""

KNOCKPY_TIME_CODE = """
import time, warnings
import numpy as np
import knockpy
from knockpy.knockoff_filter import KnockoffFilter
from knockpy.knockoffs import GaussianSampler
from knockpy.knockoff_stats import LassoStatistic
warnings.filterwarnings("ignore")
X, y = inputs["X"], inputs["y"]
fdr = float(inputs["fdr"])
np.random.seed(0)
t = time.perf_counter()
kf = KnockoffFilter(ksampler="gaussian", fstat="lasso", knockoff_kwargs={"method": "sdp"})
rej = kf.forward(X=X, y=y, fdr=fdr)
total = time.perf_counter() - t
# the same stages once more, separately timed
t = time.perf_counter()
Sigma, _ = knockpy.utilities.estimate_covariance(X, tol=1e-2, shrinkage="ledoitwolf")
t_cov = time.perf_counter() - t
t = time.perf_counter()
Smat = knockpy.smatrix.compute_smatrix(Sigma, method="sdp")
t_s = time.perf_counter() - t
t = time.perf_counter()
Xk = GaussianSampler(X=X, Sigma=Sigma, S=Smat).sample_knockoffs()
t_samp = time.perf_counter() - t
t = time.perf_counter()
LassoStatistic().fit(X, Xk, y)
t_stat = time.perf_counter() - t
report({"total": total, "covariance": t_cov, "s_vector": t_s, "sampling": t_samp,
        "statistics": t_stat, "selected": int(np.sum(rej))})
"""


def make_data(seed, n, p, k, nnz):
    """Thesis Figure 4.5 design: Sigma = D + V V^T (as a correlation), fixed X and support."""
    rng = np.random.default_rng(seed)
    D = rng.uniform(0.0, 1.0, p)
    V = rng.normal(0.0, np.sqrt(1.0 / k), (p, k))
    Sigma = np.diag(D) + V @ V.T
    sd = np.sqrt(np.diag(Sigma))
    Sigma = Sigma / sd[:, None] / sd[None, :]
    X = rng.standard_normal((n, p)) @ np.linalg.cholesky(Sigma).T
    support = np.zeros(p)
    support[rng.choice(p, nnz, replace=False)] = rng.choice([-1.0, 1.0], nnz)
    return X, support


def responses(X, support, amplitudes, seed):
    """One response per amplitude: coefficients ``support * a / sqrt(n)`` plus N(0, 1) noise."""
    n = X.shape[0]
    rng = np.random.default_rng(seed + 1)
    Y = np.stack([X @ (support * a / np.sqrt(n)) + rng.standard_normal(n) for a in amplitudes])
    return Y


def fixed_lambda(y, n, p):
    return 0.5 * float(np.std(y)) * float(np.sqrt(2 * np.log(2 * p) / n))


def fdp_power(mask, truth):
    """Per-row FDP and power of boolean selections ``mask (..., p)``."""
    mask = np.asarray(mask, bool)
    n_sel = mask.sum(-1)
    tp = (mask & truth).sum(-1)
    return (n_sel - tp) / np.maximum(n_sel, 1), tp / truth.sum()


def mean_se(x):
    x = np.asarray(x, float)
    se = x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else float("nan")
    return float(x.mean()), float(se)


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:  # pragma: no cover
        return "n/a"


def jaxknock_sweep(X, Y, truth, args, method, lams):
    """FDP/power of one s-method at every amplitude: ``(rows, s_info)``."""
    n, p = X.shape
    Xj = jnp.asarray(X)
    Xs = (Xj - jnp.mean(Xj, axis=0)) / jnp.std(Xj, axis=0)
    timings = {}
    Sigma, s_sol = P.covariance_and_s(
        jax.random.key(args.seed), Xs, method, args.k, args.asdp_block_size, args.sdp_tol, timings
    )
    s = s_sol.value
    s_info = dict(
        s_mean=float(jnp.mean(s)),
        s_seconds=timings["s_vector"],
        cov_seconds=timings["covariance"],
        s_result=int(s_sol.result),
    )
    R = args.R
    per_rep = 3 * n * p * 8  # knockoffs + [X, X~]
    chunk_draws = max(1, min(args.draws, int(args.chunk_gib * 2**30 // (per_rep * R))))
    rows = []
    for a_i, a in enumerate(args.amplitudes):
        y = jnp.asarray(Y[a_i])
        key = jax.random.fold_in(jax.random.key(args.seed + 7), a_i)
        Ws = []
        t0 = time.perf_counter()
        for start in range(0, args.draws, chunk_draws):
            c = min(chunk_draws, args.draws - start)
            kc = jax.random.fold_in(key, start)
            Xt = sampling.sample_replicates(kc, Xs, Sigma, s, c * R)
            Xk = jnp.concatenate([jnp.broadcast_to(Xs, Xt.shape), Xt], axis=-1)
            if args.lam == "cv":
                sol = S.lcd(Xk, y, tol=args.lasso_tol, patience=args.cv_patience)
            else:
                sol = S.lcd(Xk, y, lam=lams[a_i], tol=args.lasso_tol)
            Ws.append(np.asarray(sol.value).reshape(c, R, p))
            del Xt, Xk
        W = np.concatenate(Ws)
        seconds = time.perf_counter() - t0
        single = np.asarray(F.knockoff_select(jnp.asarray(W[:, 0]), args.fdr))
        fdp1, pow1 = fdp_power(single, truth)
        rows.append(
            dict(
                library="jaxknock",
                method=method,
                R=1,
                amplitude=float(a),
                fdp=fdp1.tolist(),
                power=pow1.tolist(),
                seconds=seconds,
                **s_info,
            )
        )
        if R > 1:
            agg = np.asarray(jax.vmap(lambda w: F.aggregate_ebh(w, args.fdr))(jnp.asarray(W)))
            fdpR, powR = fdp_power(agg, truth)
            rows.append(
                dict(
                    library="jaxknock",
                    method=method,
                    R=R,
                    amplitude=float(a),
                    fdp=fdpR.tolist(),
                    power=powR.tolist(),
                    seconds=seconds,
                    **s_info,
                )
            )
        for r in rows[-(2 if R > 1 else 1) :]:
            _print_row(r)
    return rows


def _summarise(row):
    row["fdp_mean"], row["fdp_se"] = mean_se(row["fdp"])
    row["power_mean"], row["power_se"] = mean_se(row["power"])
    return row


def _print_row(r):
    _summarise(r)
    print(
        f"  {r['library']:>8} {r['method']:>14} R={r['R']:<3} a={r['amplitude']:<5g} "
        f"FDP {r['fdp_mean']:.3f} +- {r['fdp_se']:.3f}  power {r['power_mean']:.3f} +- "
        f"{r['power_se']:.3f}",
        flush=True,
    )


def time_pipelines(X, y, args):
    """Full pipeline wall time of jaxknock (sdp, LCD with CV) and knockpy on the same data."""
    key = jax.random.key(args.seed + 3)
    t = time.perf_counter()
    P.knockoff_filter(key, X, y, fdr=args.fdr, s_method="sdp")  # compiles
    first = time.perf_counter() - t
    best = None
    for _ in range(args.timing_repeats):
        t = time.perf_counter()
        sel = P.knockoff_filter(key, X, y, fdr=args.fdr, s_method="sdp")
        total = time.perf_counter() - t
        if best is None or total < best[0]:
            best = (total, dict(sel.timings))
    ours = dict(best[1], total=best[0], compile_and_run=first, selected=int(len(sel.selected)))
    theirs = None
    if not args.no_knockpy:
        theirs = run_anchor("knockpy", KNOCKPY_TIME_CODE, {"X": X, "y": y, "fdr": np.array(args.fdr)})
    ratio = None
    if theirs is not None:
        ratio = {
            k: theirs[k] / ours[k] for k in ("total", "covariance", "s_vector", "sampling", "statistics") if ours.get(k)
        }
    return {"jaxknock": ours, "knockpy": theirs, "ratio_knockpy_over_jaxknock": ratio}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="quick smoke run (n=300, p=60, few draws)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--p", type=int, default=500)
    ap.add_argument("--k", type=int, default=50, help="factor rank of Sigma (and of sdp_factor)")
    ap.add_argument("--nnz", type=int, default=50)
    ap.add_argument("--fdr", type=float, default=0.1)
    ap.add_argument(
        "--amplitudes", type=float, nargs="*", default=[4.0, 8.0, 12.0, 16.0], help="coefficients are +-a / sqrt(n)"
    )
    ap.add_argument("--draws", type=int, default=100, help="knockoff draws per amplitude and method")
    ap.add_argument("--R", type=int, default=10, help="replicates aggregated with e-BH per draw")
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    ap.add_argument("--lam", choices=("cv", "fixed"), default="cv")
    ap.add_argument("--lasso-tol", type=float, default=1e-4)
    ap.add_argument("--cv-patience", type=int, default=10)
    ap.add_argument("--sdp-tol", type=float, default=1e-4)
    ap.add_argument("--asdp-block-size", type=int, default=100)
    ap.add_argument("--chunk-gib", type=float, default=1.0, help="memory per batch of replicates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timing-repeats", type=int, default=1)
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--no-knockpy", action="store_true")
    ap.add_argument("--knockpy-draws", type=int, default=None, help="default: --draws")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument(
        "--fdr-conditions",
        action="store_true",
        help="FDR under the conditions users create (issue 19): see fdr_conditions(); uses --fdr, --seed, --json",
    )
    ap.add_argument("--fdr-p", type=int, default=100, help="--fdr-conditions: number of features")
    ap.add_argument("--fdr-budget", type=float, default=600.0, help="--fdr-conditions: seconds for all conditions")
    ap.add_argument("--fdr-which", type=int, nargs="*", default=None, help="--fdr-conditions: indices to run")
    ap.add_argument(
        "--fdr-s-methods",
        default=None,
        help="--fdr-conditions: comma-separated s_methods run on the same data sets and keys (paired), e.g. sdp,mvr",
    )
    args = ap.parse_args(argv)
    if args.fdr_conditions:
        return fdr_conditions(
            p=args.fdr_p,
            fdr=args.fdr,
            seed=args.seed,
            budget_s=args.fdr_budget,
            json_path=args.json,
            which=args.fdr_which,
            s_methods=None if args.fdr_s_methods is None else args.fdr_s_methods.split(","),
        )
    if args.small:
        args.n, args.p, args.k, args.nnz = 300, 60, 10, 10
        args.draws, args.R, args.amplitudes = min(args.draws, 6), min(args.R, 3), [6.0, 12.0]
    kp_draws = args.knockpy_draws if args.knockpy_draws is not None else args.draws
    load = uptime()
    print(
        f"# bench_filter: n={args.n} p={args.p} k={args.k} nnz={args.nnz} fdr={args.fdr} "
        f"amplitudes={args.amplitudes} draws={args.draws} R={args.R} lam={args.lam} "
        f"backend={jax.default_backend()} cpus={os.cpu_count()}\n# {load}",
        flush=True,
    )

    X, support = make_data(args.seed, args.n, args.p, args.k, args.nnz)
    X = (X - X.mean(0)) / X.std(0)
    truth = support != 0
    Y = responses(X, support, args.amplitudes, args.seed)
    lams = [fixed_lambda(y, args.n, args.p) for y in Y] if args.lam == "fixed" else [0.0] * len(Y)

    rows = []
    for method in args.methods:
        t = time.perf_counter()
        rows += jaxknock_sweep(X, Y, truth, args, method, lams)
        print(
            f"  [{method}: s mean {rows[-1]['s_mean']:.3f}, s-vector {rows[-1]['s_seconds']:.2f} s, "
            f"sweep {time.perf_counter() - t:.1f} s]",
            flush=True,
        )
    kp_info = None
    if not args.no_knockpy and kp_draws > 0:
        t = time.perf_counter()
        res = run_anchor(
            "knockpy",
            KNOCKPY_FDP_CODE,
            {
                "X": X,
                "Y": Y,
                "beta": support,
                "draws": np.array(kp_draws),
                "fdr": np.array(args.fdr),
                "lams": np.asarray(lams),
            },
        )
        if res is not None:
            kp_info = {k: res[k] for k in ("s_mean", "s_seconds", "cov_seconds")}
            for a, r in zip(args.amplitudes, res["rows"]):
                rows.append(
                    dict(
                        library="knockpy",
                        method="sdp",
                        R=1,
                        amplitude=float(a),
                        fdp=r["fdp"],
                        power=r["power"],
                        **kp_info,
                    )
                )
                _print_row(rows[-1])
        print(f"  [knockpy sweep {time.perf_counter() - t:.1f} s]", flush=True)

    timing = None
    if not args.no_timing:
        timing = time_pipelines(X, Y[len(Y) // 2], args)

    # ------------------------------------------------------------------ table
    print(
        f"\nFDP and power, mean +- standard error over {args.draws} knockoff draws "
        f"(knockpy: {kp_draws}); target FDR {args.fdr}; LCD statistic, lam={args.lam}; "
        f"n={args.n}, p={args.p}, k={args.k}, {args.nnz} signals of amplitude a/sqrt(n)"
    )
    header = (
        "| library | s_method | R | mean s | "
        + " | ".join(f"a={a:g} FDP | a={a:g} power" for a in args.amplitudes)
        + " |"
    )
    print(header)
    print("|" + "|".join("---" for _ in header.split("|")[1:-1]) + "|")
    keys = []
    for r in rows:
        kk = (r["library"], r["method"], r["R"])
        if kk not in keys:
            keys.append(kk)
    for lib, method, R in keys:
        cells = []
        mean_s = None
        for a in args.amplitudes:
            r = next(
                (r for r in rows if (r["library"], r["method"], r["R"], r["amplitude"]) == (lib, method, R, float(a))),
                None,
            )
            if r is None:
                cells += ["-", "-"]
                continue
            mean_s = r.get("s_mean")
            cells += [f"{r['fdp_mean']:.3f}+-{r['fdp_se']:.3f}", f"{r['power_mean']:.3f}+-{r['power_se']:.3f}"]
        print(f"| {lib} | {method} | {R} | {mean_s:.3f} | " + " | ".join(cells) + " |")
    if timing is not None:
        ours, theirs, ratio = timing["jaxknock"], timing["knockpy"], timing["ratio_knockpy_over_jaxknock"]
        print(
            f"\nFull pipeline wall time, s_method='sdp', LCD with CV, one replicate, same X, y, same CPU "
            f"(jaxknock best of {args.timing_repeats} after a compiling call of {ours['compile_and_run']:.1f} s)"
        )
        print("| stage | jaxknock s | knockpy s | knockpy / jaxknock |")
        print("|---|---|---|---|")
        for st in ("covariance", "s_vector", "sampling", "statistics", "total"):
            kp = "n/a" if theirs is None else f"{theirs[st]:.3g}"
            rt = "-" if not ratio or st not in ratio else f"{ratio[st]:.2f}x"
            print(f"| {st} | {ours.get(st, float('nan')):.3g} | {kp} | {rt} |")
    end_load = uptime()
    print(f"\n# {end_load}")
    if args.json:
        cfg = {k: v for k, v in vars(args).items() if k != "json"}
        cfg.update(
            uptime_start=load,
            uptime_end=end_load,
            backend=jax.default_backend(),
            knockpy_draws=kp_draws,
            lams=lams,
            amplitude_scale="a / sqrt(n)",
        )
        with open(args.json, "w") as f:
            json.dump({"config": cfg, "rows": rows, "timing": timing}, f, indent=1)
        print(f"wrote {args.json}")
    return rows, timing


# --------------------------------------------------------------------------
# issue 18: power of the S constructions on correlated designs (--mrc-power)
# --------------------------------------------------------------------------

MRC_DESIGNS = ("block-0.5", "block-0.7", "ar1-0.7", "ar1-0.8")
MRC_METHODS = ("equicorrelated", "sdp", "mvr", "maxent")

KNOCKPY_MRC = """
import time
from knockpy.knockoff_filter import KnockoffFilter
Xs, Ys, fdr = inputs["X"], inputs["Y"], float(inputs["fdr"])
sel, secs = [], []
for X, y in zip(Xs, Ys):
    t = time.perf_counter()
    kf = KnockoffFilter(ksampler="gaussian", fstat="lasso")   # knockpy's defaults: MVR S, LassoCV
    rej = kf.forward(X=X, y=y, fdr=fdr, shrinkage="ledoitwolf")
    secs.append(time.perf_counter() - t)
    sel.append(np.asarray(rej).astype(int).tolist())
report({"sel": sel, "secs": secs})
"""


def mrc_design(name, p, block=20):
    """Correlation of the correlated designs: block-equicorrelated (blocks of 20) or AR(1)."""
    if name.startswith("block"):
        rho = float(name.split("-")[1])
        C = np.eye(p)
        for b0 in range(0, p, block):
            C[b0 : b0 + block, b0 : b0 + block] = rho
        np.fill_diagonal(C, 1.0)
        return C
    rho = float(name.split("-")[1])
    i = np.arange(p)
    return rho ** np.abs(i[:, None] - i[None, :])


def mrc_datasets(design, n, p, nnz, amplitude, num, seed):
    """``num`` data sets ``(X, y, truth)``: rows ``~ N(0, C)``, ``nnz`` random signals ``+-amplitude``."""
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(mrc_design(design, p))
    Xs, Ys, truths = [], [], []
    for _ in range(num):
        X = rng.standard_normal((n, p)) @ L.T
        beta = np.zeros(p)
        support = rng.choice(p, nnz, replace=False)
        beta[support] = amplitude * rng.choice([-1.0, 1.0], nnz)
        Xs.append(X)
        Ys.append(X @ beta + rng.standard_normal(n))
        truths.append(beta != 0)
    return np.stack(Xs), np.stack(Ys), np.stack(truths)


def mrc_power(argv=None):
    """Power / FDR of knockoff_filter with s_method in equi / SDP / MVR / ME vs knockpy's default filter.

    Both libraries run on the SAME data sets (same ``X``, ``y``); after the
    per-method table, one line per jaxknock method gives the mean PAIRED power
    difference ``jaxknock - knockpy`` over the data sets both ran, with its
    standard error (paired differences remove the data-set-to-data-set spread
    that dominates the unpaired standard errors).
    """
    ap = argparse.ArgumentParser(description="power of the S constructions on correlated designs")
    ap.add_argument("--mrc-power", action="store_true")
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--p", type=int, default=200)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument(
        "--amplitude",
        type=float,
        nargs="*",
        default=[0.2],
        help="signal amplitude: one value, or one per design (in --designs order)",
    )
    ap.add_argument("--fdr", type=float, default=0.1)
    ap.add_argument("--datasets", type=int, default=20)
    ap.add_argument("--batch", type=int, default=5, help="data sets per knockpy subprocess")
    ap.add_argument("--designs", nargs="*", default=list(MRC_DESIGNS))
    ap.add_argument("--methods", nargs="*", default=list(MRC_METHODS))
    ap.add_argument("--no-knockpy", action="store_true")
    ap.add_argument("--knockpy-datasets", type=int, default=None, help="data sets for knockpy (default: --datasets)")
    ap.add_argument("--json", default=None, help="write per-data-set results here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    amps = list(args.amplitude)
    if len(amps) == 1:
        amps = amps * len(args.designs)
    if len(amps) != len(args.designs):
        ap.error(f"--amplitude: give one value or one per design ({len(args.designs)}), got {len(amps)}")
    nkp = args.datasets if args.knockpy_datasets is None else min(args.knockpy_datasets, args.datasets)
    print(
        f"n={args.n} p={args.p} signals={args.nnz} amplitudes={dict(zip(args.designs, amps))} q={args.fdr} "
        f"data sets={args.datasets} (knockpy: first {nkp}, the same X, y); LCD statistic with CV lasso "
        f"(both libraries' default); load {uptime()}",
        flush=True,
    )
    print(f"{'design':10s} {'method':22s} {'power':>14s} {'FDR':>14s} {'s/data set':>10s}")
    out = {}
    for design, amp in zip(args.designs, amps):
        X, Y, T = mrc_datasets(design, args.n, args.p, args.nnz, amp, args.datasets, args.seed)
        rows = {}
        for method in args.methods:
            from jaxknock import knockoff_filter

            knockoff_filter(jax.random.key(0), X[0], Y[0], fdr=args.fdr, s_method=method)  # compile
            fdps, pows, secs = [], [], []
            for i in range(args.datasets):
                t = time.perf_counter()
                sel = knockoff_filter(jax.random.key(i), X[i], Y[i], fdr=args.fdr, s_method=method)
                secs.append(time.perf_counter() - t)
                fdp, pw = fdp_power(np.asarray(sel.mask), T[i])
                fdps.append(fdp)
                pows.append(pw)
            rows[f"jaxknock {method}"] = (pows, fdps, secs)
            _mrc_row(design, f"jaxknock {method}", rows[f"jaxknock {method}"])
        kp = "knockpy default (MVR)"
        if not args.no_knockpy:
            sel, secs = [], []
            for b0 in range(0, nkp, args.batch):
                b1 = min(b0 + args.batch, nkp)
                res = run_anchor("knockpy", KNOCKPY_MRC, {"X": X[b0:b1], "Y": Y[b0:b1], "fdr": np.asarray(args.fdr)})
                if res is None:
                    break
                sel += res["sel"]
                secs += res["secs"]
            if sel:
                fp = [fdp_power(np.asarray(s, bool), T[i]) for i, s in enumerate(sel)]
                rows[kp] = ([f[1] for f in fp], [f[0] for f in fp], secs)
                _mrc_row(design, kp, rows[kp])
        if kp in rows:
            for method in args.methods:
                _mrc_paired(design, method, rows[f"jaxknock {method}"][0], rows[kp][0])
        out[design] = {k: {"power": v[0], "fdp": v[1], "secs": v[2]} for k, v in rows.items()}
        out[design]["amplitude"] = amp
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f)
    return out


def _mrc_paired(design, method, pow_jk, pow_kp):
    """Mean paired power difference jaxknock - knockpy over the data sets both ran, +- its standard error."""
    m = min(len(pow_jk), len(pow_kp))
    d = np.asarray(pow_jk[:m], float) - np.asarray(pow_kp[:m], float)
    dm, ds = mean_se(d)
    z = dm / ds if ds > 0 else float("nan")
    print(
        f"{design:10s} paired power {method:>14s} - knockpy: {dm:+6.3f} +- {ds:5.3f} (z = {z:+5.2f}, n={m})",
        flush=True,
    )


def _mrc_row(design, name, row):
    pows, fdps, secs = row
    pm, ps = mean_se(pows)
    fm, fs = mean_se(fdps)
    print(
        f"{design:10s} {name:22s} {pm:6.3f} +- {ps:5.3f} {fm:6.3f} +- {fs:5.3f} {np.mean(secs):10.2f}  (n={len(pows)})",
        flush=True,
    )


# --------------------------------------------------------------------------
# FDR under the conditions users create (issue 19)
# --------------------------------------------------------------------------

FDR_CONDITIONS = (
    # (name, n / p, design, response)
    ("Gaussian, n = 2p", 2, "gaussian", "linear"),
    ("Gaussian, n = 5p", 5, "gaussian", "linear"),
    ("t(5) rows, n = 5p", 5, "t5", "linear"),
    ("Gaussian, n = 5p, logistic y", 5, "gaussian", "logistic"),
)


def fdr_condition_data(rng, n, p, design, response, *, rho=0.5, nnz=10):
    """One data set: AR(1)(rho) design, Gaussian or multivariate t(5) rows; ``nnz`` signals.

    t(5) rows are ``z / sqrt(w / 5)`` with ``z ~ N(0, Sigma)`` and ``w ~ chi^2_5``
    (heavy tails, the same correlation), so the Gaussian model behind the
    knockoffs is misspecified. Linear: ``y = X beta + N(0, 1)`` with
    ``|beta_j| = 5 / sqrt(n)``; logistic: ``y ~ Bernoulli(sigmoid(X beta))``
    with ``|beta_j| = 12 / sqrt(n)``. The covariance is never given to the
    filter: ``knockoff_filter`` estimates it (Ledoit-Wolf) from ``X``.
    """
    idx = np.arange(p)
    L = np.linalg.cholesky(rho ** np.abs(idx[:, None] - idx[None, :]))
    X = rng.standard_normal((n, p)) @ L.T
    if design == "t5":
        X = X / np.sqrt(rng.chisquare(5, size=(n, 1)) / 5)
    support = np.zeros(p)
    support[rng.choice(p, nnz, replace=False)] = rng.choice([-1.0, 1.0], nnz)
    if response == "logistic":
        eta = X @ (support * 12 / np.sqrt(n))
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(float)
    else:
        y = X @ (support * 5 / np.sqrt(n)) + rng.standard_normal(n)
    return X, y, support != 0


def fdr_conditions(*, p=100, fdr=0.1, seed=0, budget_s=600.0, json_path=None, which=None, s_methods=None):
    """Measured FDR and power of ``knockoff_filter`` (defaults) under :data:`FDR_CONDITIONS`.

    Each condition gets an equal share of ``budget_s`` (data sets are drawn
    until it is spent, at least 5); the table gives mean FDP +- standard
    error (the FDR estimate) and mean power. Measured, not promised: the
    guarantee of model-X knockoffs assumes the covariance is known, and here
    it is estimated from the same ``n`` rows (and is misspecified for t(5)).

    ``s_methods`` (e.g. ``("sdp", "mvr")``): every data set runs once per method,
    with the same knockoff key, and the table adds the paired differences of FDP
    and power against the first method (mean +- standard error of the
    per-data-set differences), which settles a comparison far sooner than two
    unpaired runs. ``None``: the filter's default only.
    """
    rows = []
    methods = tuple(s_methods) if s_methods else (None,)
    first = methods[0]  # the paired differences are against it
    print(f"# fdr_conditions: p={p} fdr={fdr} budget={budget_s:.0f}s defaults of knockoff_filter\n# {uptime()}")
    print(
        f"{'condition':32s} {'s_method':>8s} {'n':>5s} {'sets':>5s} {'FDR':>7s} {'+-se':>6s} {'power':>7s} "
        f"{'+-se':>6s} {'s/set':>6s}  paired vs first: dFDP +- se, dpower +- se"
    )
    chosen = [c for c in range(len(FDR_CONDITIONS)) if which is None or c in which]
    for c_i, (name, ratio, design, response) in enumerate(FDR_CONDITIONS):
        if c_i not in chosen:
            continue
        n = ratio * p
        rng = np.random.default_rng(seed + 1000 * c_i)
        fdps, powers = {m: [] for m in methods}, {m: [] for m in methods}
        t0 = time.perf_counter()
        while len(fdps[first]) < 5 or time.perf_counter() - t0 < budget_s / len(chosen):
            X, y, truth = fdr_condition_data(rng, n, p, design, response)
            key = jax.random.key(seed + len(fdps[first]))
            for m in methods:
                sel = P.knockoff_filter(key, X, y, fdr=fdr, **({} if m is None else dict(s_method=m)))
                mask = np.zeros(p, bool)
                mask[np.asarray(sel.selected, int)] = True
                fdp, power = fdp_power(mask, truth)
                fdps[m].append(float(fdp))
                powers[m].append(float(power))
        sets = len(fdps[first])
        per_set = (time.perf_counter() - t0) / sets
        for m in methods:
            (f_m, f_se), (p_m, p_se) = mean_se(fdps[m]), mean_se(powers[m])
            row = {
                "condition": name,
                "s_method": m or "default",
                "n": n,
                "p": p,
                "data_sets": sets,
                "fdr_mean": f_m,
                "fdr_se": f_se,
                "power_mean": p_m,
                "power_se": p_se,
                "seconds_per_set": per_set,
            }
            paired = ""
            if m != first:
                d_f = mean_se(np.subtract(fdps[m], fdps[first]))
                d_p = mean_se(np.subtract(powers[m], powers[first]))
                row.update(paired_fdp=d_f, paired_power=d_p)
                paired = f"  {d_f[0]:+.3f} +- {d_f[1]:.3f}, {d_p[0]:+.3f} +- {d_p[1]:.3f}"
            rows.append(row)
            print(
                f"{name:32s} {m or 'default':>8s} {n:5d} {sets:5d} {f_m:7.3f} {f_se:6.3f} {p_m:7.3f} {p_se:6.3f} "
                f"{per_set:6.2f}{paired}",
                flush=True,
            )
    print(f"# target FDR {fdr}; FDR = mean FDP over data sets (+- its standard error)\n# {uptime()}")
    if json_path:
        config = {"p": p, "fdr": fdr, "seed": seed, "budget_s": budget_s, "s_methods": list(s_methods or [])}
        with open(json_path, "w") as f:
            json.dump({"config": config, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    if "--mrc-power" in sys.argv:
        mrc_power()
    else:
        main()
