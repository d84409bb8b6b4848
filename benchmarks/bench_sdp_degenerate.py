"""The dense SDP on degenerate AR(1) optima: result, certified gap, ``1^T s``, steps and time.

``Sigma_ij = rho^|i - j|`` with ``rho`` near 1 has a degenerate SDP optimum
(``2C - diag s`` with a few eigenvalues near zero), where the barrier dual
``t lam A^{-1}`` is a poor certificate; before session 52 the Newton path
stopped ``stagnated`` there with relative gaps of 0.2-1.2%. Times are the
faster of two calls after a compiling one (float64, CPU).

Usage::

    python benchmarks/bench_sdp_degenerate.py                 # p = 100, 200, 300, 500
    python benchmarks/bench_sdp_degenerate.py --p 100 200
    python benchmarks/bench_sdp_degenerate.py --small         # smoke run: p = 60, rho = 0.99
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxknock import RESULTS, sdp  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p", type=int, nargs="+", default=[100, 200, 300, 500])
    parser.add_argument("--rho", type=float, nargs="+", default=[0.95, 0.98, 0.99, 0.995])
    parser.add_argument("--small", action="store_true", help="smoke run: p = 60, rho = 0.99")
    args = parser.parse_args()
    if args.small:
        args.p, args.rho = [60], [0.99]
    print("| p | rho | result | gap / 1^T s | 1^T s | steps | time (s) |")
    print("|---|---|---|---|---|---|---|")
    for p in args.p:
        for rho in args.rho:
            i = np.arange(p)
            C = jnp.asarray(rho ** np.abs(i[:, None] - i[None, :]))
            jax.block_until_ready(sdp(C).value)
            best = np.inf
            for _ in range(2):
                t0 = time.perf_counter()
                sol = sdp(C)
                jax.block_until_ready(sol.value)
                best = min(best, time.perf_counter() - t0)
            obj = float(sol.stats["objective"])
            name = RESULTS(int(sol.result)).name
            gap = float(sol.stats["gap"]) / obj
            print(f"| {p} | {rho} | {name} | {gap:.1e} | {obj:.6f} | {int(sol.stats['num_steps'])} | {best:.2f} |")


if __name__ == "__main__":
    main()
