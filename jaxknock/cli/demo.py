"""``jaxknock demo``: the main job on built-in synthetic factor-model data.

Covariance estimation, every S-vector solver (a table with time, sum(s),
feasibility and certified gaps), knockoff sampling and FDR-controlled
selection (:func:`jaxknock.knockoff_filter`); ``--plot out.png`` draws the
S-vectors and the W statistics (needs matplotlib).
"""

from __future__ import annotations

import sys

from jaxknock.cli.common import CLIError, enable_x64, timed
from jaxknock.cli.progress import Progress, Ticker, progress_enabled
from jaxknock.cli.report import check_writable, print_table

__all__ = ["power_fdp", "run_demo", "synthetic_factor_data"]


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


def run_demo(args) -> int:
    if args.plot:
        _require_matplotlib("--plot")
    enable_x64()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxknock as jk
    from jaxknock.pipeline import resolve_s_method

    for name in ("n", "p", "rank", "signals", "replicates"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.n < 10:  # as `select`: --n 4 ran the covariance and solver tables (a minute), then failed in the
        # filter's cross-validated lasso with "pass a fixed lam= or statistic='correlation'", options demo lacks
        raise CLIError(f"--n must be at least 10 (the knockoff filter's cross-validated lasso), got {args.n}")
    if args.rank >= min(args.n, args.p) or args.signals > args.p:
        raise ValueError("need --rank < min(--n, --p) and --signals <= --p")
    # before the work: --fdr 1.5 failed after the solvers' table (as knockoff_filter's fdr=), a NaN
    # amplitude as "y contains non-finite values", an unwritable --plot after everything had run
    if not 0 < args.fdr < 1:
        raise CLIError(f"--fdr must lie strictly between 0 and 1, got {args.fdr}")
    if not np.isfinite(args.amplitude):
        raise CLIError(f"--amplitude must be a finite number, got {args.amplitude}")
    if args.plot:
        check_writable(args.plot, what="the plot")
    key = jax.random.key(args.seed)
    kdata, kfac = jax.random.split(key)
    n, p, k = args.n, args.p, args.rank
    print(
        f"jaxknock {jk.__version__} | jax {jax.__version__} on {jax.devices()[0].platform} | "
        f"synthetic factor-model data n={n}, p={p}, k={k}, {args.signals} signals"
    )
    X, y, beta, Sigma_true = synthetic_factor_data(kdata, n, p, k, args.signals, args.amplitude)

    print("\n[1] covariance estimation")
    (Sigma_lw, delta), t_lw = timed(jk.ledoit_wolf, X)
    Sigma_hat = jk.to_correlation(Sigma_lw)
    (model, delta_f), t_fm = timed(jk.factor_model_from_data, kfac, X, k)
    err_lw = float(jnp.linalg.norm(Sigma_hat - Sigma_true) / jnp.linalg.norm(Sigma_true))
    err_fm = float(jnp.linalg.norm(model.dense() - Sigma_true) / jnp.linalg.norm(Sigma_true))
    print_table(
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
        (f"sdp_factor (k={k}, Newton-CG)", lambda: jk.sdp_factor(model)),
        ("mvr (minimum reconstructability)", lambda: jk.mvr(Sigma_hat)),
        ("maxent (maximum entropy)", lambda: jk.maxent(Sigma_hat)),
        (f"mvr_factor (k={k})", lambda: jk.mvr_factor(model)),
    ]
    default = resolve_s_method("auto", (n, p))  # knockoff_filter's choice for this shape
    solvers = [(f"{name}  <- default" if name.split()[0] == default else name, fn) for name, fn in solvers]
    rows, sols = [], {}
    bar = Progress(len(solvers), "S-vector solvers", enabled=progress_enabled(sys.stderr, args.quiet))
    with bar, Ticker(bar):
        for name, fn in solvers:
            bar.set_description(name)
            sol, t = timed(fn)
            bar.update()
            sols[name] = sol
            gap = sol.stats.get("gap")
            me = sol.stats.get("min_eig")
            rows.append(
                [
                    name,
                    f"{t:.2f}",
                    str(int(sol.stats["num_steps"])),
                    f"{float(np.sum(np.asarray(sol.value))):.2f}",
                    f"{float(sol.stats['objective']):.4g}",
                    "-" if me is None or not np.isfinite(float(me)) else f"{float(me):.1e}",
                    "-" if gap is None else f"{float(gap):.1e}",
                    jk.RESULTS(int(sol.result)).name,
                ]
            )
    print_table(rows, ["method", "time[s]", "steps", "sum(s)", "objective", "min eig", "gap", "result"])
    print(
        "(times include jit compilation on first use. objective: what each method optimises, sum(s) for "
        "the SDPs (maximised), the MVR's reconstruction loss and maxent's -log det (minimised); a larger "
        "sum(s) is not more power on correlated designs, where the MVR and maxent avoid the SDP's "
        "reconstruction effect)"
    )
    _pipeline_report(args, X, y, beta)
    if args.plot:
        _demo_plot(args, X, y, beta, sols)
    return 0


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxknock.pipeline import knockoff_filter

    n, p = X.shape
    sel = knockoff_filter(jax.random.key(args.seed + 1), X, y, fdr=args.fdr, s_method="sdp_factor", rank=args.rank)
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


def power_fdp(selected, beta):
    """``(power, fdp)`` of a selection against the true support ``beta != 0``.

    Example:
        >>> power_fdp([0, 1, 5], [1.0, 2.0, 0.0, 3.0, 0.0, 0.0])
        (0.6666666666666666, 0.3333333333333333)
    """
    import numpy as np

    truth = np.asarray(beta) != 0
    sel = np.zeros_like(truth)
    sel[np.asarray(selected, dtype=int)] = True
    tp = int((sel & truth).sum())
    return tp / max(int(truth.sum()), 1), (int(sel.sum()) - tp) / max(int(sel.sum()), 1)


def _pipeline_report(args, X, y, beta):
    """The pipeline part of ``jaxknock demo``: one replicate vs aggregated replicates."""
    import jax
    import numpy as np

    from jaxknock.pipeline import knockoff_filter

    # knockoff_filter's defaults: the lasso penalty of the LCD statistic is chosen by
    # 5-fold cross-validation for every replicate (the homotopy engine of jaxknock.l1)
    print(f"\n[3] knockoff filter at FDR {args.fdr} (LCD statistic, lasso penalty by 5-fold CV: the defaults)")
    rows, notes = [], []
    key = jax.random.key(args.seed + 1)
    configs = [("equicorrelated", 1), (None, 1), ("sdp_factor", 1), ("sdp_factor", args.replicates)]
    for method, R in configs:
        sel = knockoff_filter(
            key,
            X,
            y,
            fdr=args.fdr,
            **({} if method is None else dict(s_method=method)),
            rank=args.rank if method == "sdp_factor" else None,
            num_replicates=R,
            aggregate="ebh",
        )
        method = method or f"{sel.settings['s_method']} (default)"
        power, fdp = power_fdp(sel.selected, beta)
        if sel.explanation is not None:
            notes.append(f"{method}, {R} replicate(s): {sel.explanation}")
        t = sel.timings
        rows.append(
            [
                method,
                str(R),
                str(len(sel.selected)),
                f"{power:.2f}",
                f"{fdp:.2f}",
                f"{t['covariance']:.2f}",
                f"{t['s_vector']:.2f}",
                f"{t['sampling']:.2f}",
                f"{t['statistics']:.2f}",
                f"{t['selection']:.3f}",
            ]
        )
    print_table(
        rows, ["s-method", "replicates", "selected", "power", "FDP", "cov[s]", "s[s]", "sample[s]", "W[s]", "select[s]"]
    )
    print(f"truth: {int((np.asarray(beta) != 0).sum())} non-null features; replicates > 1 aggregate with e-BH")
    print(
        "(times include jit compilation on first use: the first row compiles the cross-validation engine; "
        "a second `jaxknock demo` reads it from the compilation cache)"
    )
    for note in notes:
        print(f"note ({note})")
