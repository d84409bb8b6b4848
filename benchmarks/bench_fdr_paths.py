"""FDR and power of the NON-default paths of ``knockoff_filter`` (and fixed-X) on new designs (session 59).

``bench_fdr_designs.py`` / ``bench_fdr_pn.py`` check the default filter. This
script checks the options a user switches on: multiple knockoffs, group
knockoffs (unequal groups, groups across correlated blocks, singletons mixed
with large groups), a known law (dense ``Sigma=``, a ``FactorModel``), R > 1
replicates (e-BH, frequency), the non-default statistics (``lsm``,
``correlation``, ``centroid``, l1-logistic on binary ``y``), each S method,
and fixed-X knockoffs (:func:`jaxknock.fixed_x_knockoffs`, a hand-built
pipeline: the filter has no fixed-X path). Two broken variants show that the
simulation can fail: knockoffs from the wrong law (``Sigma = I`` on AR(1) 0.9
rows) and ``W`` made positive at the nulls. ``--small`` runs one cell and
one broken variant on 4 data sets each (a smoke run, about a minute).

Designs (``n = 400, p = 100`` unless noted; signals drawn per data set):

``ar09``     AR(1) rho 0.9, 10 signals
``blocks``   blocks of sizes 1..30 (unequal), within-block rho 0.8, 10 signals
``factor2``  two factors, idiosyncratic noise of scale U(0.3, 3) per column
``snp01``    binary {0, 1} columns (thresholded AR(1) 0.6 latent, MAF 0.1-0.5), logistic response
``scales``   AR(1) 0.5 columns in units 10^U(-6, 6)
``dups``     AR(1) 0.5 with 10 exact and 5 near (r = 0.999) duplicates of null columns
``pclose``   AR(1) 0.5, n = 120, p = 100 (p close to n)

Each cell runs ``--datasets`` data sets; the selection at ``q = 0.1`` is the
filter's own, the one at ``q = 0.2`` is re-derived from the same ``W`` with the
public thresholds (and checked to reproduce the filter's at 0.1). Groups are
scored at group level (a group is null when it holds no signal). A cell is
flagged ``VIOLATION`` when its FDR exceeds ``q + 2 SE``.

Cost (session 59, 2 shared cores): most cells 0.1-1 s per data set once compiled (20-40 s of
compilation per cell); ``lsm_ar09`` took about 15 s per data set on the classic grid solver and
0.3 s since ``lsm`` runs the working-set engine (ec77728: 100 data sets in 32 s, idle); the group
cells on ``ar09`` with ``mixed`` groups about 5 s (the group MVR solve), so run those with fewer
data sets. Raw output: ``measured/bench_fdr_paths_s59.txt``.

    python -u benchmarks/bench_fdr_paths.py --datasets 100
    python -u benchmarks/bench_fdr_paths.py --cells multi2_ar09,broken_law --datasets 60
    python -u benchmarks/bench_fdr_paths.py --list
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fdr_designs import ar1_rows, random_signals

LEVELS = (0.1, 0.2)
BLOCK_SIZES = (30, 1, 2, 20, 3, 1, 12, 5, 1, 8, 17)  # sums to 100


def ar1_cov(p, rho):
    i = np.arange(p)
    return rho ** np.abs(i[:, None] - i[None, :])


def blocks_cov(sizes, rho):
    p = sum(sizes)
    S = np.eye(p)
    start = 0
    for b in sizes:
        S[start : start + b, start : start + b] = rho
        start += b
    np.fill_diagonal(S, 1.0)
    return S


def make_design(design: str, seed: int):
    """``(X, y, truth, law)``: ``law`` the true covariance (or ``FactorModel`` pieces), ``None`` if not Gaussian."""
    rng = np.random.default_rng(59_000 + 100 * hash_design(design) + seed)
    n, p = (120, 100) if design == "pclose" else (400, 100)
    law = None
    if design == "ar09":
        X, law = ar1_rows(rng, n, p, 0.9), ar1_cov(p, 0.9)
        beta = random_signals(rng, p, 10, 0.45)
    elif design == "blocks":
        law = blocks_cov(BLOCK_SIZES, 0.8)
        X = rng.standard_normal((n, p)) @ np.linalg.cholesky(law).T
        beta = random_signals(rng, p, 10, 0.4)
    elif design == "factor2":
        U = rng.standard_normal((p, 2))
        d = rng.uniform(0.3, 3.0, p) ** 2
        X = rng.standard_normal((n, 2)) @ U.T + rng.standard_normal((n, p)) * np.sqrt(d)
        law = (d, U)
        beta = random_signals(rng, p, 10, 0.4) / np.sqrt(d + (U**2).sum(1))  # signals on the unit scale
    elif design == "snp01":
        latent = ar1_rows(rng, n, p, 0.6)
        maf = rng.uniform(0.1, 0.5, p)
        cut = np.array([NormalDist().inv_cdf(1 - m) for m in maf])
        X = (latent > cut).astype(float)
        beta = random_signals(rng, p, 10, 1.2) / np.sqrt(maf * (1 - maf)) * 0.5
        eta = (X - X.mean(0)) @ beta
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(float)
        return X, y, beta != 0, None
    elif design == "scales":
        Z, law0 = ar1_rows(rng, n, p, 0.5), ar1_cov(p, 0.5)
        scale = 10.0 ** rng.uniform(-6, 6, p)
        beta = random_signals(rng, p, 10, 0.3)
        return Z * scale, Z @ beta + rng.standard_normal(n), beta != 0, law0 * np.outer(scale, scale)
    elif design == "dups":
        X = ar1_rows(rng, n, p, 0.5)
        perm = rng.permutation(p)
        sig, src, dst = perm[:10], perm[10:25], perm[25:40]
        X[:, dst[:10]] = X[:, src[:10]]  # exact duplicates of nulls
        X[:, dst[10:]] = 0.999 * X[:, src[10:]] + np.sqrt(1 - 0.999**2) * rng.standard_normal((n, 5))
        beta = np.zeros(p)
        beta[sig] = rng.choice([-1.0, 1.0], 10) * 0.35
    elif design == "pclose":
        X, law = ar1_rows(rng, n, p, 0.5), ar1_cov(p, 0.5)
        beta = random_signals(rng, p, 10, 0.6)
    else:
        raise ValueError(f"unknown design {design!r}")
    return X, X @ beta + rng.standard_normal(n), beta != 0, law


def hash_design(design):
    return sum(ord(c) * (i + 1) for i, c in enumerate(design)) % 997


# ----------------------------------------------------------------------------- selection at a second level


def select_at(sel, q):
    """The selection of ``sel`` at level ``q``, from its ``W`` and the public thresholds (units: features or groups)."""
    import jax.numpy as jnp

    import jaxknock

    st = sel.settings
    W = jnp.asarray(sel.W)
    m, R = st.get("num_knockoffs", 1), st["num_replicates"]
    if m > 1:
        kappa, tau = jnp.where(W > 0, 0, 1).astype(jnp.int32), jnp.abs(W)
        T = jaxknock.multi_knockoff_threshold(kappa, tau, q, num_knockoffs=m, plus=st["plus"])
        masks = (kappa == 0) & (tau >= T[..., None])
        unit = masks[0] if R == 1 else 2 * masks.sum(0) >= R
    elif R == 1:
        unit = jaxknock.knockoff_select(W, q, plus=st["plus"])[0]
    elif st["aggregate"] == "ebh":
        unit = jaxknock.aggregate_ebh(W, q, plus=st["plus"])
    else:
        unit = jaxknock.aggregate_frequency(W, q, plus=st["plus"])
    return np.asarray(unit, bool)


def unit_truth(truth, groups):
    if groups is None:
        return truth
    labels = np.unique(groups)
    return np.array([truth[groups == g].any() for g in labels])


def fdp_power(sel_units, truth_units):
    sel = np.asarray(sel_units, bool)
    return (sel & ~truth_units).sum() / max(sel.sum(), 1), (sel & truth_units).sum() / max(truth_units.sum(), 1)


# ----------------------------------------------------------------------------- the cells


def groups_for(kind, p):
    if kind == "blocks":  # the true blocks (unequal sizes)
        return np.repeat(np.arange(len(BLOCK_SIZES)), BLOCK_SIZES)
    if kind == "across":  # groups of 7 cutting across the blocks
        return np.arange(p) // 7
    if kind == "mixed":  # singletons mixed with groups of 10 and 25
        g = np.arange(p)
        g[:25], g[25:35], g[35:45] = 1000, 1001, 1002
        return g
    raise ValueError(kind)


def filter_cell(design, **kw):
    def run(key, X, y, truth, law):
        import jaxknock

        groups = kw.get("groups")
        sel = jaxknock.knockoff_filter(key, X, y, fdr=LEVELS[0], **kw)
        units = [select_at(sel, q) for q in LEVELS]
        unit_mask = sel.mask if groups is None else np.isin(np.unique(groups), sel.selected_groups)
        assert (units[0] == unit_mask).all(), "re-derived selection differs from the filter's"
        return units, unit_truth(truth, groups)

    return design, run


def known_law_cell(design, s_method="auto", factor=False):
    def run(key, X, y, truth, law):
        import jaxknock

        if factor:
            d, U = law
            Sigma = jaxknock.FactorModel(np.asarray(d), np.asarray(U))
        else:
            Sigma = law
        sel = jaxknock.knockoff_filter(
            key, X, y, fdr=LEVELS[0], Sigma=Sigma, mu=np.zeros(X.shape[1]), s_method=s_method
        )
        return [select_at(sel, q) for q in LEVELS], truth

    return design, run


def fixed_x_cell(design, intercept, cv):
    """Fixed-X knockoffs on the centred X: equicorrelated-free SDP s of the normalised Gram, lasso statistic."""

    def run(key, X, y, truth, law):
        import jax.numpy as jnp

        import jaxknock

        Xc = X - X.mean(0)
        Xn0 = Xc / np.linalg.norm(Xc, axis=0)
        s = jaxknock.sdp(jnp.asarray(Xn0.T @ Xn0)).value
        Xn, Xk = jaxknock.fixed_x_knockoffs(Xc, s)
        Z = jnp.concatenate([Xn, Xk], axis=1)
        yy = y if intercept else y - y.mean()
        if cv:
            W = jaxknock.lcd(Z, yy, fit_intercept=intercept).value
        else:
            lam = 0.05 * jaxknock.lambda_max(Z, yy, fit_intercept=intercept)
            W = jaxknock.lcd(Z, yy, lam=lam, fit_intercept=intercept).value
        return [np.asarray(jaxknock.knockoff_select(W, q)) for q in LEVELS], truth

    return design, run


def broken_sign_cell(design):
    """W with its sign made positive at the nulls (a statistic without the flip-sign property)."""

    def run(key, X, y, truth, law):
        import jax.numpy as jnp

        import jaxknock

        sel = jaxknock.knockoff_filter(key, X, y, fdr=LEVELS[0])
        W = jnp.where(jnp.asarray(truth), sel.W[0], jnp.abs(sel.W[0]))
        return [np.asarray(jaxknock.knockoff_select(W, q)) for q in LEVELS], truth

    return design, run


def wrong_law_cell(design):
    """Knockoffs from the wrong law: ``Sigma = I`` for correlated rows (knockoffs independent of X)."""

    def run(key, X, y, truth, law):
        import jaxknock

        sel = jaxknock.knockoff_filter(key, X, y, fdr=LEVELS[0], Sigma=np.eye(X.shape[1]), s_method="sdp")
        return [select_at(sel, q) for q in LEVELS], truth

    return design, run


CELLS = {
    # multiple knockoffs
    "multi2_ar09": filter_cell("ar09", num_knockoffs=2),
    "multi3_ar09": filter_cell("ar09", num_knockoffs=3),
    "multi2_blocks": filter_cell("blocks", num_knockoffs=2),
    "multi3_blocks_sdp": filter_cell("blocks", num_knockoffs=3, s_method="sdp"),
    "multi2_factor_mvrf": filter_cell("factor2", num_knockoffs=2, s_method="mvr_factor", rank=2),
    "multi2_R5_freq": filter_cell("ar09", num_knockoffs=2, num_replicates=5, aggregate="frequency"),
    # group knockoffs (group-level FDR)
    "group_blocks": filter_cell("blocks", groups=groups_for("blocks", 100)),
    "group_across": filter_cell("blocks", groups=groups_for("across", 100)),
    "group_mixed_ar09": filter_cell("ar09", groups=groups_for("mixed", 100)),
    "group_across_sdp": filter_cell("blocks", groups=groups_for("across", 100), s_method="sdp"),
    "group_blocks_equi": filter_cell("blocks", groups=groups_for("blocks", 100), s_method="equicorrelated"),
    "group_mixed_maxent": filter_cell("ar09", groups=groups_for("mixed", 100), s_method="maxent"),
    "group_blocks_m2": filter_cell("blocks", groups=groups_for("blocks", 100), num_knockoffs=2),
    "group_dups_corr": filter_cell("dups", groups=groups_for("across", 100), statistic="correlation"),
    # known law
    "known_ar09_sdp": known_law_cell("ar09", "sdp"),
    "known_ar09_mvr": known_law_cell("ar09"),
    "known_scales_mvr": known_law_cell("scales"),
    "known_factor2": known_law_cell("factor2", factor=True),
    "known_factor2_sdpf": known_law_cell("factor2", "sdp_factor", factor=True),
    # replicates
    "ebh_R5_ar09": filter_cell("ar09", num_replicates=5),
    "freq_R5_ar09": filter_cell("ar09", num_replicates=5, aggregate="frequency"),
    "ebh_R5_blocks_sdp": filter_cell("blocks", num_replicates=5, s_method="sdp"),
    # statistics
    "lsm_ar09": filter_cell("ar09", statistic="lsm"),
    "corr_blocks": filter_cell("blocks", statistic="correlation"),
    "logit_snp01": filter_cell("snp01"),
    "lsm_snp01": filter_cell("snp01", statistic="lsm"),
    "centroid_snp01": filter_cell("snp01", statistic="centroid"),
    "corr_snp01_m2": filter_cell("snp01", statistic="correlation", num_knockoffs=2),
    # S methods on the estimated law
    "sdp_ar09": filter_cell("ar09", s_method="sdp"),
    "equi_blocks": filter_cell("blocks", s_method="equicorrelated"),
    "maxent_factor2": filter_cell("factor2", s_method="maxent"),
    "asdp_blocks": filter_cell("blocks", s_method="asdp", asdp_block_size=25),
    "sdpf_factor2": filter_cell("factor2", s_method="sdp_factor", rank=2),
    "mvr_scales": filter_cell("scales", s_method="mvr"),
    "sdp_scales": filter_cell("scales", s_method="sdp"),
    "mvr_dups": filter_cell("dups", s_method="mvr"),
    "maxent_pclose": filter_cell("pclose", s_method="maxent"),
    "sdp_pclose": filter_cell("pclose", s_method="sdp"),
    "known_pclose_sdp": known_law_cell("pclose", "sdp"),
    "mvr_pclose": filter_cell("pclose", s_method="mvr"),
    # fixed-X (hand-built pipeline)
    "fixedx_ar09_lam": fixed_x_cell("ar09", intercept=False, cv=False),
    "fixedx_ar09_lam_icpt": fixed_x_cell("ar09", intercept=True, cv=False),
    "fixedx_blocks_cv": fixed_x_cell("blocks", intercept=True, cv=True),
    # broken variants: must be flagged
    "broken_law": wrong_law_cell("ar09"),
    "broken_sign": broken_sign_cell("ar09"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--datasets", type=int, default=100)
    ap.add_argument("--first", type=int, default=0, help="first data-set seed")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--small", action="store_true", help="smoke run: two cells (one broken), 4 data sets each")
    args = ap.parse_args()
    if args.small:
        args.cells, args.datasets = "multi2_blocks,broken_sign", 4
    if args.list:
        print("\n".join(CELLS))
        return 0
    import warnings

    import jax

    jax.config.update("jax_enable_x64", True)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=RuntimeWarning)

    print(f"# levels {LEVELS}, knockoff+, data sets {args.first}..{args.first + args.datasets - 1} per cell (x64)")
    print(
        f"{'cell':22s} {'design':8s} {'sets':>4s}  " + "  ".join(f"FDR@{q} +- SE   power" for q in LEVELS) + "  verdict"
    )
    for name in args.cells.split(","):
        design, run = CELLS[name]
        t0, rows = time.perf_counter(), []
        for s in range(args.first, args.first + args.datasets):
            X, y, truth, law = make_design(design, s)
            units, tu = run(jax.random.key(s), X, y, truth, law)
            rows.append([fdp_power(u, tu) for u in units])
        rows = np.array(rows)  # (sets, levels, 2)
        parts, flags = [], []
        for i, q in enumerate(LEVELS):
            f, pw = rows[:, i, 0], rows[:, i, 1]
            se = f.std(ddof=1) / np.sqrt(len(f))
            parts.append(f"{f.mean():.3f} +- {se:.3f}  {pw.mean():.3f}")
            if f.mean() > q + 2 * se:
                flags.append(f"VIOLATION@{q}")
        verdict = " ".join(flags) or "ok"
        print(
            f"{name:22s} {design:8s} {len(rows):4d}  "
            + "   ".join(parts)
            + f"  {verdict}  ({time.perf_counter() - t0:.0f} s)"
        )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
