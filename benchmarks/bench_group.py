"""Group maximum-entropy knockoffs: ``jaxknock.group_s_matrix(method="maxent")``.

Two layouts of "1000 groups of size 5":

* ``dense``: one problem, ``p = 5 G`` (``G = 1000``: ``p = 5000``), AR(1)
  ``rho_in = 0.5`` inside each block of 5 plus a weak rank-one coupling between
  blocks (``rho_out = 0.1``), rescaled to a correlation matrix. One call; every
  step is ``O(p^3)`` (a Cholesky of ``2 Sigma - S`` and the diagonal blocks of
  its inverse), all groups updated at once on the padded ``(G, 5, 5)`` stack.
* ``batched``: ``B`` independent LD-block-sized problems of ``g`` groups each
  (``B g = G``), solved by one ``jax.vmap`` of ``group_s_matrix`` over the stack.

Anchor: Knockoffs.jl (Chu et al. 2024) reports 4.8 s for group ME at
``p = 500`` (a published number, quoted; Julia is not run here). No Python
package offers group ME, so there is no side-by-side run.

Times are after a warm-up call (compilation excluded; the first call's time is
printed too), ``block_until_ready``; ``steps``, ``gap`` (certified) and the
result code are printed.

Usage::

    python benchmarks/bench_group.py            # G = 1000 groups (p = 5000 dense; 200 x 25 batched)
    python benchmarks/bench_group.py --small    # G = 100 (CI smoke test)
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxknock  # noqa: E402
from jaxknock import RESULTS  # noqa: E402

KNOCKOFFS_JL_P500_S = 4.8  # published group-ME time at p = 500 (Chu et al. 2024), quoted


def block_sigma(G, size=5, rho_in=0.5, rho_out=0.1, seed=0):
    p = G * size
    idx = np.arange(size)
    blk = rho_in ** np.abs(np.subtract.outer(idx, idx))
    S = np.kron(np.eye(G), blk) * (1 - rho_out)
    u = np.random.default_rng(seed).uniform(0.5, 1.0, p) * np.sqrt(rho_out)
    S += np.outer(u, u)
    d = np.sqrt(np.diag(S))
    return S / np.outer(d, d), np.repeat(np.arange(G), size)


def timed(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, first, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--groups", type=int, default=None, help="total number of groups G (default 1000; 100 --small)")
    ap.add_argument("--per-problem", type=int, default=5, help="groups per problem in the batched layout")
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args()
    G = args.groups or (100 if args.small else 1000)
    rows = []

    Sigma, groups = block_sigma(G)
    sol, first, t = timed(lambda S: jaxknock.group_s_matrix(S, groups, method="maxent", tol=args.tol), Sigma)
    rows.append(
        (
            "dense",
            f"1 x p={Sigma.shape[0]}",
            first,
            t,
            int(sol.stats["num_steps"]),
            float(sol.stats["gap"]),
            RESULTS(int(sol.result)).name,
        )
    )

    g = args.per_problem
    B = G // g
    stack = np.stack([block_sigma(g, seed=b)[0] for b in range(B)])
    labels = np.repeat(np.arange(g), 5)
    batched = jax.jit(jax.vmap(lambda S: jaxknock.group_s_matrix(S, labels, method="maxent", tol=args.tol)))
    sol_b, first_b, t_b = timed(batched, stack)
    codes = np.asarray(sol_b.result)
    rows.append(
        (
            "batched",
            f"{B} x p={5 * g}",
            first_b,
            t_b,
            int(np.max(sol_b.stats["num_steps"])),
            float(np.max(sol_b.stats["gap"])),
            f"{int((codes == 0).sum())}/{B} successful",
        )
    )

    print(
        f"group maximum entropy, {G} groups of size 5 (backend {jax.default_backend()}, {jax.device_count()} device(s))"
    )
    print(
        f"{'layout':8s} {'problems':>14s} {'first call s':>13s} {'time s':>9s} {'steps':>6s} {'max gap':>10s}  result"
        f"   vs Knockoffs.jl p=500 ({KNOCKOFFS_JL_P500_S} s, quoted)"
    )
    for name, shape, first, t, steps, gap, res in rows:
        print(
            f"{name:8s} {shape:>14s} {first:13.2f} {t:9.2f} {steps:6d} {gap:10.2e}  {res}"
            f"   {t / KNOCKOFFS_JL_P500_S:.2f}x"
        )


if __name__ == "__main__":
    main()
