"""Factor-model S solvers, ``method="newton"`` (Newton-CG) vs ``method="coordinate"``, side by side.

Solvers (``--solvers``): ``sdp`` = :func:`~jaxknock.sdp_factor` (coordinate = FANOK Alg. 5),
``mvr`` / ``maxent`` = :func:`~jaxknock.mvr_factor` / :func:`~jaxknock.maxent_factor`
(coordinate = blocked coordinate descent; Newton = damped Newton-CG). Each runs at its
default ``tol`` unless ``--tol`` is given.

Problem: the thesis factor model (Askari section 4.4) ``Sigma = 1e-3 I + V Lambda V^T``,
``V ~ N(0, 1)`` of size ``p x k``, ``Lambda_ii ~ U[0, 1]``, rescaled to unit diagonal; or,
with ``--model spread``, ``d_j ~ U[0.01, 1]`` and Gaussian loadings with column scales
``U[0, 1]`` (less diagonal: the MVR / ME starting point is further from the optimum).

For each ``p``: both methods are compiled (warm-up call, compile time printed), then
timed alternately ``--repeats`` times in the same process (the best time of each is
reported, so both see the same machine load). Printed per method: time, Newton steps
or sweeps, ``stats["num_loop_trips"]`` (the sequential depth: Newton steps + CG
iterations + step shortenings, or one trip per coordinate update), the objective
(``sum(s)`` for the SDP, ``f(s)`` of :mod:`jaxknock.svector.mrc` for MVR / ME), the
certified gap, the result code; then ``ratio = time(newton) / time(coordinate)`` and
whether the two objectives agree within the sum of the two certified gaps.

Usage::

    python benchmarks/bench_factor.py                    # p = 10^4 and 5 * 10^4, k = 50
    python benchmarks/bench_factor.py --small            # smoke run (CI)
    python benchmarks/bench_factor.py --sizes 100000 --methods newton
    python benchmarks/bench_factor.py --solvers mvr maxent   # MVR / ME (bench_mrc_factor_newton.txt)
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxknock import FactorModel, maxent_factor, mvr_factor, sdp_factor  # noqa: E402

SOLVERS = {"sdp": sdp_factor, "mvr": mvr_factor, "maxent": maxent_factor}


def thesis_factor(p, k, seed):
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((p, k))
    U = V * np.sqrt(rng.uniform(0, 1, k))
    diag = 1e-3 + np.sum(U**2, axis=1)
    return 1e-3 / diag, U / np.sqrt(diag)[:, None]


def spread_factor(p, k, seed):
    """A less diagonal model than the thesis one: ``d_j ~ U[0.01, 1]``, Gaussian loadings with column
    scales ``U[0, 1]``, rescaled to unit diagonal (``--model spread``)."""
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.01, 1.0, p)
    U = rng.standard_normal((p, k)) * rng.uniform(0, 1, k)
    diag = d + np.sum(U**2, axis=1)
    return d / diag, U / np.sqrt(diag)[:, None]


MODELS = {"thesis": thesis_factor, "spread": spread_factor}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="smoke sizes (p = 2000, k = 20)")
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--tol", type=float, default=None, help="default: each solver's own (sdp 1e-5, mvr / maxent 1e-6)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--methods", nargs="*", default=["newton", "coordinate"])
    ap.add_argument("--model", default="thesis", choices=sorted(MODELS))
    ap.add_argument("--solvers", nargs="*", default=["sdp"], choices=sorted(SOLVERS))
    args = ap.parse_args()
    sizes = args.sizes or ([2000] if args.small else [10_000, 50_000])
    k = args.k or (20 if args.small else 50)
    dev = jax.devices()[0]
    print(
        f"jax {jax.__version__} on {dev.platform} ({dev.device_kind}); {args.model} factor model, k = {k}, "
        f"tol = {args.tol or 'solver default'}; solvers {args.solvers}"
    )
    hdr = f"{'solver':<7}{'p':>7} {'method':<11}{'time[s]':>9}{'steps':>7}{'trips':>9}{'objective':>20}"
    hdr += f"{'gap':>10}{'result':>7}"
    table = []
    for p in sizes:
        d, U = MODELS[args.model](p, k, seed=p)
        model = FactorModel(jax.numpy.asarray(d), jax.numpy.asarray(U))
        kw = {} if args.tol is None else {"tol": args.tol}
        for name in args.solvers:
            fn = SOLVERS[name]
            best, sols = {}, {}
            for m in args.methods:
                t0 = time.perf_counter()
                jax.block_until_ready(fn(model, method=m, **kw))
                print(f"  {name} p={p} {m}: compile + run {time.perf_counter() - t0:.2f}s", flush=True)
            for _ in range(args.repeats):
                for m in args.methods:
                    t0 = time.perf_counter()
                    sol = jax.block_until_ready(fn(model, method=m, **kw))
                    el = time.perf_counter() - t0
                    best[m] = min(best.get(m, np.inf), el)
                    sols[m] = sol
                    print(f"  {name} p={p} {m}: run {el:.3f}s", flush=True)
            for m in args.methods:
                sol = sols[m]
                table.append(
                    f"{name:<7}{p:>7} {m:<11}{best[m]:>9.3f}{int(sol.stats['num_steps']):>7}"
                    f"{int(sol.stats['num_loop_trips']):>9}{float(sol.stats['objective']):>20.12g}"
                    f"{float(sol.stats['gap']):>10.1e}{int(sol.result):>7}"
                )
            if {"newton", "coordinate"} <= set(sols):
                a, b = sols["newton"], sols["coordinate"]
                diff = abs(float(a.stats["objective"]) - float(b.stats["objective"]))
                within = diff <= float(a.stats["gap"]) + float(b.stats["gap"])
                table.append(
                    f"{name:<7}{p:>7} ratio newton/coordinate = {best['newton'] / best['coordinate']:.2f}; "
                    f"|objective difference| = {diff:.1e} (within the gaps: {within})"
                )
    print()
    print(hdr)
    print("-" * len(hdr))
    print("\n".join(table))
    print(
        "\ntime = best of the repeats after a warm-up call; result 0 = certified to tol; trips = sequential loop trips."
    )


if __name__ == "__main__":
    main()
