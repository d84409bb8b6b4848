"""FDR and power of the default ``knockoff_filter`` on designs the other benchmarks do not draw (session 34).

Model-X knockoffs control the FDR whatever the design, provided the law of
the rows is right; the filter *estimates* that law, so a design that strains
the estimate (or the S-vector method) is where a default could lose control.
Each design below strains something else:

``negar``    AR(1) with rho = -0.7 (alternating signs: every neighbour pair negatively correlated)
``equi``     all pairs correlated 0.6 (one strong factor; the SDP's ``s`` is small)
``snp``      genotype-like {0, 1, 2} columns with linkage blocks, logistic response
``t3``       multivariate t with 3 degrees of freedom (heavy tails), n = 1.5 p
``pairs``    AR(1) 0.8 with signals in adjacent pairs of opposite sign (a knockoff's hardest case)
``wide``     AR(1) 0.5 with p = 2 n (the estimated-law path at p >= n)
``gauss``    ``t3``'s Gaussian twin: the same AR(1) 0.5 rows, n, p and signals without the heavy tails

For each of ``--datasets`` data sets the default filter runs at ``fdr = 0.1``
(knockoff+); the script prints FDR +- SE (mean FDP over the data sets) and
power. Knockpy's default ``KnockoffFilter`` on the same data (its own venv,
``_anchors.py``) unless ``--no-knockpy``.

    python benchmarks/bench_fdr_designs.py --designs negar,equi --datasets 100
    python benchmarks/bench_fdr_designs.py --designs gauss --gauss-n 400 --methods auto,mvr --no-knockpy
    python benchmarks/bench_fdr_designs.py --small     # 8 data sets of two designs, no knockpy (a smoke run)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _anchors
from bench_fdr_pn import KNOCKPY, fdp_power, summary

FDR = 0.1
DESIGNS = ("negar", "equi", "snp", "t3", "pairs", "wide", "gauss")


def ar1_rows(rng, n, p, rho):
    e = rng.standard_normal((n, p))
    X = np.empty((n, p))
    X[:, 0] = e[:, 0]
    for j in range(1, p):
        X[:, j] = rho * X[:, j - 1] + np.sqrt(1 - rho**2) * e[:, j]
    return X


def random_signals(rng, p, k, amp):
    beta = np.zeros(p)
    beta[rng.choice(p, k, replace=False)] = rng.choice([-1.0, 1.0], k) * amp
    return beta


def make_design(design: str, seed: int, gauss_n: int = 300):
    """``(X, y, truth)`` of data set ``seed`` of ``design``."""
    rng = np.random.default_rng(1000 * (DESIGNS.index(design) + 1) + seed)
    if design == "negar":
        n, p = 500, 150
        X, beta = ar1_rows(rng, n, p, -0.7), random_signals(rng, p, 15, 0.35)
    elif design == "equi":
        n, p, rho = 500, 150, 0.6
        X = np.sqrt(rho) * rng.standard_normal((n, 1)) + np.sqrt(1 - rho) * rng.standard_normal((n, p))
        beta = random_signals(rng, p, 15, 0.3)
    elif design == "snp":
        n, p = 800, 150
        latent = ar1_rows(rng, n, p, 0.8)  # linkage: neighbouring markers share haplotypes
        maf = rng.uniform(0.1, 0.5, p)
        cut = np.array([NormalDist().inv_cdf(1 - m) for m in maf])  # the latent columns are N(0, 1)
        X = (latent > cut).astype(float) + (ar1_rows(rng, n, p, 0.8) > cut).astype(float)  # two haplotypes
        beta = random_signals(rng, p, 15, 0.6)
        eta = (X - X.mean(0)) @ beta
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(float)
        return X, y, beta != 0
    elif design in ("t3", "gauss"):
        n, p, df = 300 if design == "t3" else gauss_n, 200, 3
        X = ar1_rows(rng, n, p, 0.5)
        if design == "t3":
            X = X / np.sqrt(rng.chisquare(df, (n, 1)) / df)
        beta = random_signals(rng, p, 20, 0.45 * np.sqrt(300 / n))  # the same signal-to-noise at every n
    elif design == "pairs":
        n, p = 500, 150
        X = ar1_rows(rng, n, p, 0.8)
        beta = np.zeros(p)
        starts = rng.choice(np.arange(0, p - 1, 2), 8, replace=False)
        beta[starts], beta[starts + 1] = 0.5, -0.5
    elif design == "wide":
        n, p = 200, 400
        X, beta = ar1_rows(rng, n, p, 0.5), random_signals(rng, p, 20, 0.6)
    else:
        raise ValueError(f"unknown design {design!r}")
    return X, X @ beta + rng.standard_normal(n), beta != 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--datasets", type=int, default=100)
    ap.add_argument("--no-knockpy", action="store_true")
    ap.add_argument("--methods", default="auto", help="s_method values, on the same data sets and keys")
    ap.add_argument("--gauss-n", type=int, default=300, help="rows of the gauss design (p = 200)")
    ap.add_argument("--small", action="store_true", help="8 data sets of negar and snp, no knockpy (a smoke run)")
    args = ap.parse_args()
    if args.small:
        args.designs, args.datasets, args.no_knockpy = "negar,snp", 8, True
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxknock

    print(f"# fdr = {FDR}, {args.datasets} data sets per design, knockoff_filter defaults (x64)")
    for design in args.designs.split(","):
        data = [make_design(design, s, gauss_n=args.gauss_n) for s in range(args.datasets)]
        n, p = data[0][0].shape
        for method in args.methods.split(","):
            t0, rows = time.perf_counter(), []
            for s, (X, y, truth) in enumerate(data):
                sel = jaxknock.knockoff_filter(jax.random.key(s), X, y, fdr=FDR, s_method=method)
                rows.append(fdp_power(sel.mask, truth))
            resolved = sel.settings["s_method"]
            print(f"{design}: n = {n}, p = {p}, s_method {resolved} ({time.perf_counter() - t0:.0f} s)")
            summary(f"  jaxknock {'default' if method == 'auto' else resolved}", rows)
        if not args.no_knockpy:
            X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
            out = _anchors.run_anchor("knockpy", KNOCKPY, {"X": X, "Y": Y, "fdr": np.array(FDR)})
            if out is not None:
                summary("  knockpy default", [fdp_power(m, d[2]) for m, d in zip(out["masks"], data)])
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
