"""Paired power and FDR of the default ``knockoff_filter`` against knockpy's default filter (session 42).

Users switch from knockpy only if jaxknock's default filter is at least as
powerful with the FDR controlled. ``bench_fdr_designs.py`` checked FDR on
strained designs where both filters found nearly every signal; this script
draws design classes at *weak* amplitude (power about 0.3-0.7, where
differences show) and runs both filters on the same data sets:

* jaxknock: ``knockoff_filter(jax.random.key(seed), X, y, fdr=0.1)`` (defaults);
* knockpy 1.3.5 (own venv, ``_anchors.py``): ``KnockoffFilter(ksampler="gaussian",
  fstat="lasso").forward(X=X, y=y, fdr=0.1)`` after ``np.random.seed(seed)`` --
  its defaults with ``Sigma`` not given: Ledoit-Wolf covariance, MVR ``S``,
  scikit-learn ``LassoCV`` (``LogisticRegressionCV`` for a binary ``y``)
  coefficient difference, knockoff+.

Designs (``--designs``; ``X`` standardised where the name says ``geno``):

``geno``       genotype-like {0, 1, 2} columns (two thresholded AR(1) haplotypes; linkage blocks of
               10-30 markers with rho drawn from [0.5, 0.8]; MAF in [0.05, 0.5]), standardised; linear y
``geno_logit`` the same ``X`` with a logistic (binary) response
``logit``      AR(1) 0.5 Gaussian rows, logistic response
``t4``         multivariate t with 4 degrees of freedom on AR(1) 0.6 (Gaussian knockoffs misspecified)
``toeplitz``   Toeplitz ``0.8^k cos(2 pi k / 3)``: lag-1 -0.4, lag-2 -0.32, lag-3 +0.51 (mixed signs)
``dup``        AR(1) 0.3 with 20 columns replaced by near-duplicates (corr 0.99) of others; 5 of the
               20 signals sit on a duplicated column
``adjacent``   block-equicorrelated 0.6 (blocks of 10); the 20 signals are 5 adjacent in each of 4 blocks
``spread``     the same ``X`` law; the 20 signals at random positions
``n2p``        AR(1) 0.6, n = 2p (300 x 150)
``np50``       AR(1) 0.6, n = p + 50 (250 x 200)
``wide``       AR(1) 0.5, n < p (200 x 400; jaxknock's default is ``mvr_factor`` there)
``ar09``       AR(1) 0.9, 800 x 300 (strong neighbour correlation: knockoffs near their originals; session 48)
``small``      blocks of 10 at 0.5, 300 x 60 (a small study: 20 signals of 60; session 48)
``tall``       the same blocks, 3000 x 100 (many rows, few features; session 48)

Session 58 (designs nobody had tried; 500 x 200 unless said):

``onehot``     30 categorical variables (3-6 levels, cut from a latent AR(1) 0.5 Gaussian shared with 65 Gaussian
               columns) one-hot encoded (135 dummies, each variable's summing to 1: the centred design is exactly
               rank-deficient) + the 65 Gaussian columns; 10 signals on dummies, 10 on Gaussian columns
``signflip``   block-equicorrelated 0.7 (blocks of 10); 4 adjacent signals of alternating sign in each of 5 blocks
               (the signals cancel in the marginal correlations)
``factor``     one strong common factor (loadings U[0.8, 0.9]) plus independent noise; signals spread
``hetero``     AR(1) 0.5, heteroscedastic noise (sd proportional to ``|x_1| + 0.5``, mean sd 1); ``x_1`` is one of
               the 20 signals (y depends on it given the other columns, so it is not null)
``counts``     negative-binomial-like counts (Poisson with log-mean ``log mu_j + 0.7 z``, ``mu_j = e^U[0, 3]``,
               ``z`` AR(1) 0.5 latent Gaussian), raw counts given to the filters; y linear in standardised counts
``nonlinear``  AR(1) 0.5, monotone response ``y = sum_j beta_j tanh(2 x_j) + noise``
``scales``     AR(1) 0.5 columns multiplied by ``10^U(-4, 4)`` (wildly different units; y linear in the unit-scale
               columns)

Per design: mean power of each filter, mean FDP +- SE, the paired difference
of power (jaxknock - knockpy) +- SE over the data sets, and the median warm
time per call (the first call of each library on a design is a warm-up and is
not timed), with the ratio jaxknock / knockpy (< 1: jaxknock faster).
``--jk-option key=value`` (repeatable) passes a keyword to ``knockoff_filter``
(e.g. ``s_method=mvr``) to swap one component.

    python benchmarks/bench_power_designs.py --small     # 2 designs x 3 data sets (a smoke run, with knockpy)
    python benchmarks/bench_power_designs.py --datasets 30
    python benchmarks/bench_power_designs.py --designs geno,t4 --datasets 30 --no-knockpy --jk-option s_method=sdp
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _anchors
from bench_fdr_designs import ar1_rows

FDR = 0.1
K = 20  # signals per design


def haplotype_blocks(rng, n, p):
    """Latent N(0, 1) columns in linkage blocks of 10-30, AR(1) rho ~ U[0.5, 0.8] within a block."""
    cols, j = [], 0
    while j < p:
        b = min(int(rng.integers(10, 31)), p - j)
        cols.append(ar1_rows(rng, n, b, rng.uniform(0.5, 0.8)))
        j += b
    return np.concatenate(cols, axis=1)


def genotypes(rng, n, p):
    maf = rng.uniform(0.05, 0.5, p)
    cut = np.array([NormalDist().inv_cdf(1 - m) for m in maf])
    G = (haplotype_blocks(rng, n, p) > cut).astype(float) + (haplotype_blocks(rng, n, p) > cut).astype(float)
    sd = G.std(0)
    sd[sd == 0] = 1.0
    return (G - G.mean(0)) / sd


def signs(rng, k):
    return rng.choice([-1.0, 1.0], k)


def linear(rng, X, beta):
    return X @ beta + rng.standard_normal(X.shape[0])


def logistic(rng, X, beta):
    eta = X @ beta
    return (rng.uniform(size=X.shape[0]) < 1 / (1 + np.exp(-eta))).astype(float)


# name -> (n, p, amplitude c: |beta_j| = c / sqrt(n))
SIZES = {
    "geno": (600, 200, 3.6),
    "geno_logit": (800, 200, 9.0),
    "logit": (800, 200, 8.0),
    "t4": (500, 200, 3.6),
    "toeplitz": (500, 200, 3.4),
    "dup": (500, 200, 3.6),
    "adjacent": (500, 200, 3.6),
    "spread": (500, 200, 3.6),
    "n2p": (300, 150, 4.2),
    "np50": (250, 200, 4.6),
    "wide": (200, 400, 5.0),
    "ar09": (800, 300, 8.5),
    "small": (300, 60, 4.5),
    "tall": (3000, 100, 4.2),
    "onehot": (500, 200, 3.6),
    "signflip": (500, 200, 6.0),
    "factor": (500, 200, 8.6),
    "hetero": (500, 200, 4.0),
    "counts": (500, 200, 3.4),
    "nonlinear": (500, 200, 5.6),
    "scales": (500, 200, 4.4),
}
DESIGNS = tuple(SIZES)


ONEHOT_LEVELS = np.tile([3, 4, 5, 6], 8)[:30]  # 135 dummies; the 65 other columns Gaussian


def one_hot(rng, n, p):
    """``(X, dummy)``: the categorical variables one-hot encoded, then the Gaussian columns (``dummy`` marks
    the dummies). Each variable is its latent column cut at random quantiles (Dirichlet level frequencies)."""
    Z = ar1_rows(rng, n, len(ONEHOT_LEVELS) + p - ONEHOT_LEVELS.sum(), 0.5)
    cols = []
    for j, m in enumerate(ONEHOT_LEVELS):
        cut = [NormalDist().inv_cdf(c) for c in np.cumsum(rng.dirichlet(np.full(m, 3.0)))[:-1]]
        cols.append(np.eye(m)[np.searchsorted(cut, Z[:, j])])
    X = np.concatenate([*cols, Z[:, len(ONEHOT_LEVELS) :]], axis=1)
    return X, np.arange(p) < ONEHOT_LEVELS.sum()


def make_design(design: str, seed: int, scale: float = 1.0):
    """``(X, y, truth)`` of data set ``seed`` of ``design`` (``scale`` multiplies the amplitude)."""
    n, p, c = SIZES[design]
    amp = scale * c / np.sqrt(n)
    rng = np.random.default_rng(10_000 * (DESIGNS.index(design) + 1) + seed)
    beta = np.zeros(p)
    response = linear
    if design in ("geno", "geno_logit"):
        X = genotypes(rng, n, p)
        response = logistic if design == "geno_logit" else linear
    elif design == "logit":
        X, response = ar1_rows(rng, n, p, 0.5), logistic
    elif design == "t4":
        X = ar1_rows(rng, n, p, 0.6) / np.sqrt(rng.chisquare(4, (n, 1)) / 4)
        X = X / np.sqrt(2.0)  # var of t_4 = 4 / (4 - 2)
    elif design == "toeplitz":
        k = np.abs(np.subtract.outer(np.arange(p), np.arange(p)))
        L = np.linalg.cholesky(0.8**k * np.cos(2 * np.pi * k / 3))
        X = rng.standard_normal((n, p)) @ L.T
    elif design == "dup":
        X = ar1_rows(rng, n, p, 0.3)
        cols = rng.permutation(p)
        src, dst = cols[:20], cols[20:40]
        X[:, dst] = 0.99 * X[:, src] + np.sqrt(1 - 0.99**2) * rng.standard_normal((n, 20))
        on_dup = rng.choice(np.concatenate([src, dst]), 5, replace=False)
        rest = rng.choice(cols[40:], K - 5, replace=False)
        beta[np.concatenate([on_dup, rest])] = signs(rng, K) * amp
    elif design in ("adjacent", "spread"):
        B = np.linalg.cholesky(np.full((10, 10), 0.6) + 0.4 * np.eye(10))
        X = (rng.standard_normal((n, p // 10, 10)) @ B.T).reshape(n, p)
        if design == "adjacent":
            blocks = rng.choice(p // 10, 4, replace=False)
            start = rng.integers(0, 6, 4)
            idx = (10 * blocks + start)[:, None] + np.arange(5)
            beta[idx.ravel()] = signs(rng, K) * amp
    elif design in ("n2p", "np50"):
        X = ar1_rows(rng, n, p, 0.6)
    elif design == "wide":
        X = ar1_rows(rng, n, p, 0.5)
    elif design == "ar09":
        X = ar1_rows(rng, n, p, 0.9)
    elif design in ("small", "tall"):
        B = np.linalg.cholesky(np.full((10, 10), 0.5) + 0.5 * np.eye(10))
        X = (rng.standard_normal((n, p // 10, 10)) @ B.T).reshape(n, p)
    elif design == "onehot":
        X, dummy = one_hot(rng, n, p)
        sd = X.std(0)
        idx = np.concatenate(
            [
                rng.choice(np.flatnonzero(dummy), 10, replace=False),
                rng.choice(np.flatnonzero(~dummy), 10, replace=False),
            ]
        )
        beta[idx] = signs(rng, K) * amp / np.maximum(sd[idx], 1e-12)  # amp per unit sd of the column
    elif design == "signflip":
        B = np.linalg.cholesky(np.full((10, 10), 0.7) + 0.3 * np.eye(10))
        X = (rng.standard_normal((n, p // 10, 10)) @ B.T).reshape(n, p)
        blocks = rng.choice(p // 10, 5, replace=False)
        idx = (10 * blocks + rng.integers(0, 7, 5))[:, None] + np.arange(4)
        beta[idx.ravel()] = np.tile([1.0, -1.0, 1.0, -1.0], 5) * amp
    elif design == "factor":
        load = rng.uniform(0.8, 0.9, p)
        X = rng.standard_normal((n, 1)) * load + rng.standard_normal((n, p)) * np.sqrt(1 - load**2)
    elif design in ("hetero", "nonlinear"):
        X = ar1_rows(rng, n, p, 0.5)
        # hetero: x_1 sets the noise's spread, so it is not null (y depends on it given the rest): a signal
        first = [0] if design == "hetero" else []
        beta[first + list(rng.choice(np.arange(len(first), p), K - len(first), replace=False))] = signs(rng, K) * amp
        if design == "hetero":
            sd = np.abs(X[:, 0]) + 0.5
            return X, X @ beta + sd / sd.mean() * rng.standard_normal(n), beta != 0
        return X, np.tanh(2 * X) @ beta + rng.standard_normal(n), beta != 0
    elif design == "counts":
        mu = np.exp(rng.uniform(0, 3, p))
        X = rng.poisson(mu * np.exp(0.7 * ar1_rows(rng, n, p, 0.5) - 0.245)).astype(float)
        beta[rng.choice(p, K, replace=False)] = signs(rng, K) * amp
        Xs = (X - X.mean(0)) / X.std(0)
        return X, Xs @ beta + rng.standard_normal(n), beta != 0
    elif design == "scales":
        Z = ar1_rows(rng, n, p, 0.5)
        beta[rng.choice(p, K, replace=False)] = signs(rng, K) * amp
        return Z * 10.0 ** rng.uniform(-4, 4, p), Z @ beta + rng.standard_normal(n), beta != 0
    else:
        raise ValueError(f"unknown design {design!r}")
    if not beta.any():
        beta[rng.choice(p, K, replace=False)] = signs(rng, K) * amp
    return X, response(rng, X, beta), beta != 0


def fdp_power(mask, truth):
    sel = np.asarray(mask, bool)
    return (sel & ~truth).sum() / max(sel.sum(), 1), (sel & truth).sum() / truth.sum()


def mean_se(x):
    x = np.asarray(x, float)
    return x.mean(), x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")


KNOCKPY = """
import time, warnings; warnings.filterwarnings("ignore")
from knockpy.knockoff_filter import KnockoffFilter
X, Y = inputs["X"], inputs["Y"]
fdr = float(inputs["fdr"])
np.random.seed(12345)
KnockoffFilter(ksampler="gaussian", fstat="lasso").forward(X=X[0], y=Y[0], fdr=fdr)  # warm-up
masks, times = [], []
for i in range(X.shape[0]):
    np.random.seed(i)
    t0 = time.perf_counter()
    rej = KnockoffFilter(ksampler="gaussian", fstat="lasso").forward(X=X[i], y=Y[i], fdr=fdr)
    times.append(time.perf_counter() - t0)
    masks.append(np.asarray(rej, bool).tolist())
report({"masks": masks, "times": times})
"""


def parse_options(items):
    out = {}
    for item in items or ():
        k, v = item.split("=", 1)
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def run_jaxknock(data, seeds, options):
    import jax

    import jaxknock

    X0, y0, _ = data[0]
    jaxknock.knockoff_filter(jax.random.key(12345), X0, y0, fdr=FDR, **options)  # warm-up (compiles)
    masks, times = [], []
    for s, (X, y, _) in zip(seeds, data):
        t0 = time.perf_counter()
        sel = jaxknock.knockoff_filter(jax.random.key(s), X, y, fdr=FDR, **options)
        masks.append(np.asarray(jax.block_until_ready(sel.mask), bool))
        times.append(time.perf_counter() - t0)
    return masks, times, sel.settings.get("s_method")


def common_arguments(description, designs, datasets):
    """The options every paired power benchmark takes (this one and ``bench_power_realdata.py``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--designs", default=",".join(designs))
    ap.add_argument("--datasets", type=int, default=datasets)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every design's amplitude")
    ap.add_argument("--no-knockpy", action="store_true")
    ap.add_argument("--jk-option", action="append", help="key=value passed to knockoff_filter (repeatable)")
    return ap


def main():
    ap = common_arguments(__doc__.splitlines()[0], DESIGNS, 30)
    ap.add_argument("--small", action="store_true", help="3 data sets of n2p and logit (a smoke run)")
    args = ap.parse_args()
    if args.small:
        args.designs, args.datasets = "n2p,logit", 3
    options = parse_options(args.jk_option)

    import jax

    jax.config.update("jax_enable_x64", True)

    print(f"# fdr = {FDR}, {args.datasets} data sets per design (seeds {args.first_seed}..), amplitude x {args.scale}")
    print(f"# jaxknock knockoff_filter defaults{' + ' + str(options) if options else ''} (x64); knockpy 1.3.5 default")
    head = (
        f"{'design':11s} {'n':>4s} {'p':>4s} {'jk s':>10s} | {'power jk':>8s} {'power kp':>8s} "
        f"{'diff jk-kp':>14s} | {'FDR jk':>13s} {'FDR kp':>13s} | {'t jk':>7s} {'t kp':>7s} {'ratio':>6s}"
    )
    print(head)
    seeds = list(range(args.first_seed, args.first_seed + args.datasets))
    for design in args.designs.split(","):
        data = [make_design(design, s, args.scale) for s in seeds]
        n, p = data[0][0].shape
        truths = [d[2] for d in data]
        jk_masks, jk_times, s_method = run_jaxknock(data, seeds, options)
        X, Y = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
        row = paired_columns(jk_masks, jk_times, X, Y, truths, args.first_seed, knockpy=not args.no_knockpy)
        print(f"{design:11s} {n:4d} {p:4d} {s_method:>10s} | {row}")
        sys.stdout.flush()
    return 0


def paired_columns(jk_masks, jk_times, X, Y, truths, first_seed, *, knockpy=True, width=7):
    """One design's power / FDR / time columns: jaxknock's selections ``jk_masks`` and knockpy's default filter
    on the same data sets ``(X, Y)`` (stacked), seeded ``first_seed + i`` (``knockpy=False``: n/a)."""
    jk = np.array([fdp_power(m, t) for m, t in zip(jk_masks, truths)])
    out = None
    if knockpy:
        code = KNOCKPY.replace("np.random.seed(i)", f"np.random.seed({first_seed} + i)")
        out = _anchors.run_anchor("knockpy", code, {"X": X, "Y": Y, "fdr": np.array(FDR)})
    pj, fj = mean_se(jk[:, 1]), mean_se(jk[:, 0])
    line = f"{pj[0]:8.3f} "
    if out is None:
        line += f"{'n/a':>8s} {'':>14s} | {fj[0]:.3f} +- {fj[1]:.3f} {'n/a':>13s} | "
        return line + f"{np.median(jk_times):{width}.2f} {'n/a':>{width}s} {'':>6s}"
    kp = np.array([fdp_power(m, t) for m, t in zip(out["masks"], truths)])
    pk, fk, d = mean_se(kp[:, 1]), mean_se(kp[:, 0]), mean_se(jk[:, 1] - kp[:, 1])
    tj, tk = np.median(jk_times), np.median(out["times"])
    line += f"{pk[0]:8.3f} {d[0]:+7.3f} +- {d[1]:.3f} | {fj[0]:.3f} +- {fj[1]:.3f} "
    line += f"{fk[0]:.3f} +- {fk[1]:.3f} | "
    return line + f"{tj:{width}.2f} {tk:{width}.2f} {tj / tk:6.2f}"


if __name__ == "__main__":
    sys.exit(main())
