"""FDR and power by simulation where p >= n: the estimated law of the default filter (session 32).

Model-X knockoffs control the FDR for the true law of the rows of ``X``. With
``p >= n`` the law is estimated from fewer rows than features, so the
S-vector method matters: a larger ``s`` (the SDP's) leans harder on the
estimate. This script draws ``--datasets`` data sets of one design, runs
``knockoff_filter`` with several S-vector methods on each (and, unless
``--no-knockpy``, knockpy's default ``KnockoffFilter`` on the same data in its
own venv, ``_anchors.py``), and prints FDR +- SE and power per method.

Designs (``--design``): ``ar`` AR(1) rho 0.9, n = 150, p = 200, 10 signals of
+-1; ``ar05`` the same with rho 0.5; ``block`` blocks of 20 with rho 0.5,
n = 200, p = 400, 20 signals of +-8 / sqrt(n) (the issue-17 design, p > n).

    python benchmarks/bench_fdr_pn.py --design ar --datasets 100
    python benchmarks/bench_fdr_pn.py --small     # 10 data sets, no knockpy (a smoke run)
    python benchmarks/bench_fdr_pn.py --group-size 2 --methods mvr,sdp   # group FDR (pairs), no knockpy
    python benchmarks/bench_fdr_pn.py --knockoffs 2 --methods mvr,mvr_factor
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _anchors

FDR = 0.1


def make_design(design: str, seed: int):
    """``(X, y, truth)`` of data set ``seed`` of ``design``."""
    if design == "block":
        n, p, block, rho, k = 200, 400, 20, 0.5, 20
        rng = np.random.default_rng(5000 + seed)
        L = np.linalg.cholesky(np.full((block, block), rho) + (1 - rho) * np.eye(block))
        X = (rng.standard_normal((n, p // block, block)) @ L.T).reshape(n, p)
        amp = 8.0 / np.sqrt(n)
    else:
        n, p, k, amp = 150, 200, 10, 1.0
        rho = 0.5 if design == "ar05" else 0.9
        rng = np.random.default_rng(1000 + seed)
        e = rng.standard_normal((n, p))
        X = np.empty((n, p))
        X[:, 0] = e[:, 0]
        for j in range(1, p):
            X[:, j] = rho * X[:, j - 1] + np.sqrt(1 - rho**2) * e[:, j]
    beta = np.zeros(p)
    beta[rng.choice(p, k, replace=False)] = rng.choice([-1.0, 1.0], k) * amp
    return X, X @ beta + rng.standard_normal(n), beta != 0


def fdp_power(selected_mask, truth):
    sel = np.asarray(selected_mask, bool)
    return (sel & ~truth).sum() / max(sel.sum(), 1), (sel & truth).sum() / truth.sum()


def summary(name, rows):
    f, pw = np.array(rows).T
    print(f"{name:28s} FDR {f.mean():.3f} +- {f.std(ddof=1) / np.sqrt(len(f)):.3f}   power {pw.mean():.3f}")


KNOCKPY = """
import warnings; warnings.filterwarnings("ignore")
from knockpy.knockoff_filter import KnockoffFilter
X, Y = inputs["X"], inputs["Y"]
masks = []
for i in range(X.shape[0]):
    np.random.seed(i)
    rej = KnockoffFilter(ksampler="gaussian", fstat="lasso").forward(X=X[i], y=Y[i], fdr=float(inputs["fdr"]))
    masks.append(np.asarray(rej, bool).tolist())
report({"masks": masks})
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", choices=("ar", "ar05", "block"), default="ar")
    ap.add_argument("--datasets", type=int, default=100)
    ap.add_argument("--methods", default="auto,sdp_factor", help="s_method values for knockoff_filter")
    ap.add_argument("--group-size", type=int, default=1, help="groups of this many adjacent features (group FDR)")
    ap.add_argument("--knockoffs", type=int, default=1, help="num_knockoffs (multiple knockoffs)")
    ap.add_argument("--no-knockpy", action="store_true")
    ap.add_argument("--small", action="store_true", help="10 data sets and no knockpy (FDR is not resolved at 10)")
    args = ap.parse_args()
    if args.small:
        args.datasets, args.no_knockpy = min(args.datasets, 10), True
    if args.group_size > 1 or args.knockoffs > 1:
        args.no_knockpy = True  # the anchor's default filter has neither

    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxknock

    data = [make_design(args.design, s) for s in range(args.datasets)]
    p = data[0][0].shape[1]
    groups = np.arange(p) // args.group_size if args.group_size > 1 else None
    extra = dict(groups=groups, num_knockoffs=args.knockoffs)
    print(
        f"design {args.design}: n, p = {data[0][0].shape}, {args.datasets} data sets, fdr {FDR}, "
        f"group size {args.group_size}, knockoffs {args.knockoffs}"
    )
    for method in args.methods.split(","):
        rows = []
        for s, (X, y, truth) in enumerate(data):
            sel = jaxknock.knockoff_filter(jax.random.key(s), X, y, fdr=FDR, s_method=method, **extra)
            if groups is None:
                rows.append(fdp_power(sel.mask, truth))
            else:  # group FDR: a group is a true discovery when one of its features is a signal
                rows.append(fdp_power(np.bincount(groups, sel.mask) > 0, np.bincount(groups, truth) > 0))
        summary(f"jaxknock {method} ({sel.settings['s_method']})", rows)
    if not args.no_knockpy:
        X = np.stack([d[0] for d in data])
        Y = np.stack([d[1] for d in data])
        out = _anchors.run_anchor("knockpy", KNOCKPY, {"X": X, "Y": Y, "fdr": np.array(FDR)})
        if out is not None:
            summary("knockpy default", [fdp_power(m, d[2]) for m, d in zip(out["masks"], data)])


if __name__ == "__main__":
    main()
