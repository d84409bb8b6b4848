"""The ``jaxknock`` command line (also ``python -m jaxknock``).

``jaxknock demo`` runs the main job on built-in synthetic data: covariance
estimation, every S-vector solver (a table with time, sum(s), feasibility and
certified gaps) and, when the sampling / filter modules are present, knockoff
sampling and FDR-controlled selection.
"""

from __future__ import annotations

import argparse
import sys
import time


def _enable_x64():
    import jax

    jax.config.update("jax_enable_x64", True)


def _timed(fn, *args, **kwargs):
    import jax

    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


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


def _print_table(rows, headers):
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def run_demo(args) -> int:
    _enable_x64()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxknock as jk

    for name in ("n", "p", "rank", "signals", "replicates"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.rank >= min(args.n, args.p) or args.signals > args.p:
        raise ValueError("need --rank < min(--n, --p) and --signals <= --p")
    key = jax.random.key(args.seed)
    kdata, kfac = jax.random.split(key)
    n, p, k = args.n, args.p, args.rank
    print(f"jaxknock {jk.__version__} | jax {jax.__version__} on {jax.devices()[0].platform} | "
          f"synthetic factor-model data n={n}, p={p}, k={k}, {args.signals} signals")
    X, y, beta, Sigma_true = synthetic_factor_data(kdata, n, p, k, args.signals, args.amplitude)

    print("\n[1] covariance estimation")
    (Sigma_lw, delta), t_lw = _timed(jk.ledoit_wolf, X)
    Sigma_hat = jk.to_correlation(Sigma_lw)
    (model, delta_f), t_fm = _timed(jk.factor_model_from_data, kfac, X, k)
    err_lw = float(jnp.linalg.norm(Sigma_hat - Sigma_true) / jnp.linalg.norm(Sigma_true))
    err_fm = float(jnp.linalg.norm(model.dense() - Sigma_true) / jnp.linalg.norm(Sigma_true))
    _print_table(
        [["Ledoit-Wolf", f"{t_lw:.2f}", f"{float(delta):.3f}", f"{err_lw:.3f}"],
         [f"factor model (k={k}, from X)", f"{t_fm:.2f}", f"{float(delta_f):.3f}", f"{err_fm:.3f}"]],
        ["estimator", "time[s]", "shrinkage", "rel. error vs truth"],
    )

    print("\n[2] knockoff S-vector solvers (correlation scale; gap = certified duality gap)")
    solvers = [
        ("equicorrelated", lambda: jk.equicorrelated(Sigma_hat)),
        ("asdp (blocks of 50)", lambda: jk.asdp(Sigma_hat, block_size=50)),
        ("sdp (dense, Alg. 4)", lambda: jk.sdp(Sigma_hat)),
        (f"sdp_factor (k={k}, Alg. 5)", lambda: jk.sdp_factor(model)),
    ]
    rows, sols = [], {}
    for name, fn in solvers:
        sol, t = _timed(fn)
        sols[name] = sol
        gap = sol.stats.get("gap")
        me = sol.stats.get("min_eig")
        rows.append([
            name, f"{t:.2f}", str(int(sol.stats["num_steps"])), f"{float(sol.stats['objective']):.4f}",
            "-" if me is None or not np.isfinite(float(me)) else f"{float(me):.1e}",
            "-" if gap is None else f"{float(gap):.1e}", jk.RESULTS(int(sol.result)).name,
        ])
    _print_table(rows, ["method", "time[s]", "sweeps", "sum(s)", "min eig", "gap", "result"])
    print("(times include jit compilation on first use)")
    _demo_pipeline(args, X, y, beta, Sigma_hat, model, sols)
    return 0


def _demo_pipeline(args, X, y, beta, Sigma_hat, model, sols):
    """Sampling + filter stages, when those modules are installed."""
    try:
        from jaxknock import pipeline  # noqa: F401
    except ImportError:
        return
    pipeline.demo_report(args, X, y, beta, Sigma_hat, model, sols)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxknock", description="Knockoff feature selection in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the main job on built-in synthetic data")
    demo.add_argument("--n", type=int, default=1000, help="samples (default 1000)")
    demo.add_argument("--p", type=int, default=500, help="features (default 500)")
    demo.add_argument("--rank", type=int, default=50, help="factor-model rank (default 50)")
    demo.add_argument("--signals", type=int, default=50, help="non-zero coefficients (default 50)")
    demo.add_argument("--amplitude", type=float, default=4.5, help="signal amplitude (default 4.5)")
    demo.add_argument("--fdr", type=float, default=0.1, help="target FDR (default 0.1)")
    demo.add_argument("--replicates", type=int, default=5, help="knockoff replicates for aggregation")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true")
    demo.set_defaults(func=run_demo)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"jaxknock: error: {err}", file=sys.stderr)
        return 2
