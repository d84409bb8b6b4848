"""The SDP against the MVR S-vector at n > p, paired on the same data sets and knockoff keys (session 35).

Why ``knockoff_filter``'s default is the MVR: for each data set the filter
runs with ``s_method="sdp"`` and ``"mvr"`` on the Ledoit-Wolf estimate, and
with each method given the true ``Sigma`` (``--true-law``), at ``fdr = 0.1``
(knockoff+, lasso-CV statistic). Designs (``p = 200``, 20 signals of random
sign, amplitude scaled by ``sqrt(300 / n)``):

``ar5``  AR(1) rho 0.5 rows (amplitude 0.25)
``blk``  blocks of 20 features correlated 0.5 (amplitude 0.3); the SDP's ``s = 1`` makes
         ``2 Sigma - diag(s)`` singular here
``ar8``  AR(1) rho 0.8 rows (amplitude 0.3)

It prints FDR +- SE and power of each variant, and the paired SDP - MVR
differences of FDP and power.

    python benchmarks/bench_sdp_vs_mvr.py --designs ar5,blk --datasets 200 --n 300
    python benchmarks/bench_sdp_vs_mvr.py --designs blk --datasets 10 --n 3000 --true-law
    python benchmarks/bench_sdp_vs_mvr.py --small     # 3 data sets of ar5 at n = 300 (a smoke run)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fdr_designs import ar1_rows, random_signals
from bench_fdr_pn import fdp_power, summary

FDR = 0.1
P = 200
DESIGNS = ("ar5", "blk", "ar8")


def _ar1_cov(p, rho):
    i = np.arange(p)
    return rho ** np.abs(i[:, None] - i[None, :])


def make_design(design: str, seed: int, n: int, p: int = P):
    """``(X, y, truth, Sigma)`` of data set ``seed`` of ``design`` with ``n`` rows."""
    rng = np.random.default_rng(50_000 + 1000 * DESIGNS.index(design) + seed)
    if design == "ar5":
        X, C, amp = ar1_rows(rng, n, p, 0.5), _ar1_cov(p, 0.5), 0.25
    elif design == "ar8":
        X, C, amp = ar1_rows(rng, n, p, 0.8), _ar1_cov(p, 0.8), 0.3
    elif design == "blk":
        C = np.kron(np.eye(p // 20), np.full((20, 20), 0.5))
        np.fill_diagonal(C, 1.0)
        X, amp = rng.standard_normal((n, p)) @ np.linalg.cholesky(C).T, 0.3
    else:
        raise ValueError(f"unknown design {design!r}")
    beta = random_signals(rng, p, 20, amp * np.sqrt(300 / n))
    return X, X @ beta + rng.standard_normal(n), beta != 0, C


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", default="ar5,blk")
    ap.add_argument("--datasets", type=int, default=200)
    ap.add_argument("--n", type=int, default=300, help="rows (p = 200)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--true-law", action="store_true", help="also run both methods with the true Sigma")
    ap.add_argument("--small", action="store_true", help="3 data sets of ar5 (a smoke run)")
    args = ap.parse_args()
    if args.small:
        args.designs, args.datasets = "ar5", 3
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxknock

    variants = [("sdp", False), ("mvr", False)]
    if args.true_law:
        variants += [("sdp", True), ("mvr", True)]
    print(f"# fdr = {FDR}, p = {P}, n = {args.n}, {args.datasets} data sets per design, paired keys (x64)")
    for design in args.designs.split(","):
        rows = {v: [] for v in variants}
        t0 = time.perf_counter()
        for s in range(args.first_seed, args.first_seed + args.datasets):
            X, y, truth, C = make_design(design, s, args.n)
            for method, true_law in variants:
                sel = jaxknock.knockoff_filter(
                    jax.random.key(s), X, y, fdr=FDR, s_method=method, Sigma=C if true_law else None
                )
                rows[(method, true_law)].append(fdp_power(sel.mask, truth))
        print(f"{design}: n = {args.n}, p = {P} ({time.perf_counter() - t0:.0f} s)")
        for (method, true_law), r in rows.items():
            summary(f"  {method}{' (true Sigma)' if true_law else ''}", r)
        d = np.array(rows[("sdp", False)]) - np.array(rows[("mvr", False)])
        se = d.std(axis=0, ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.full(2, np.nan)
        fdp, power = d.mean(axis=0)
        print(f"  paired sdp - mvr: FDP {fdp:+.4f} +- {se[0]:.4f}  power {power:+.4f} +- {se[1]:.4f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
