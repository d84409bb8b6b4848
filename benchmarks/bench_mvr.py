"""MVR and maximum-entropy S-vectors: jaxknock (Newton, the default, and blocked coordinate descent;
certified gap) vs knockpy 1.3.5.

Problems: the Askari-thesis covariance of ``bench_sdp.py`` (``D = 1e-3 I`` plus a
rank ``ceil(0.05 p)`` factor, rescaled to a correlation matrix), AR(1)
``rho = 0.8``, and the raw sample correlation of ``n = ceil(1.04 p)`` rows of a
block law (blocks of 20 at 0.5; near singular, as a user's ``np.corrcoef`` of a
near-square design). knockpy runs ``knockpy.mrc.solve_mvr`` / ``solve_maxent`` at
their defaults in their own venv (``benchmarks/_anchors.py``), timed inside
that process. jaxknock is timed after a warm-up call (compilation printed
separately). For each run: time, objective ``f(s)`` (MVR: ``tr(G^{-1})``;
ME: ``-log det G``; both evaluated by :func:`jaxknock.mrc_objective_and_gap`,
so knockpy's ``s`` is scored by the same code), the certified gap at that ``s``
(valid for any feasible ``s``, so knockpy's answer gets one too), the relative
objective difference to a tight jaxknock solve (``tol=1e-10``) and the time
ratio jaxknock / knockpy.

Usage::

    python benchmarks/bench_mvr.py              # p = 1000
    python benchmarks/bench_mvr.py --p 200      # smaller
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _anchors import run_anchor  # noqa: E402
from bench_sdp import ar1, dense_from_factor, thesis_factor  # noqa: E402

from jaxknock import maxent, mrc_objective_and_gap, mvr  # noqa: E402

KNOCKPY = """
import time
from knockpy import mrc
C = inputs["C"]
out = {}
for name, fn in (("mvr", mrc.solve_mvr), ("maxent", mrc.solve_maxent)):
    fn(C[:20, :20])  # import / first-call overhead
    t = time.perf_counter()
    S = fn(C)
    out[name] = {"time": time.perf_counter() - t, "s": np.diag(S).tolist()}
report(out)
"""


def jax_run(fn, C, **kw):
    t = time.perf_counter()
    jax.block_until_ready(fn(C, **kw).value)
    compile_t = time.perf_counter() - t
    t = time.perf_counter()
    sol = fn(C, **kw)
    jax.block_until_ready(sol.value)
    return sol, time.perf_counter() - t, compile_t


def raw_sample_correlation(p, ratio=1.04, seed=0):
    """``np.corrcoef`` of ``ceil(ratio p)`` rows of a block-equicorrelated law (blocks of 20 at 0.5)."""
    rng = np.random.default_rng(seed)
    n, b = math.ceil(ratio * p), min(20, p)
    B = np.full((b, b), 0.5) + 0.5 * np.eye(b)
    X = (rng.standard_normal((n, -(-p // b), b)) @ np.linalg.cholesky(B).T).reshape(n, -1)[:, :p]
    return np.corrcoef(X, rowvar=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--p", type=int, default=1000)
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--small", action="store_true", help="smoke run: p = 60, no anchor")
    args = ap.parse_args()
    if args.small:
        args.p, args.no_anchor = 60, True
    p = args.p
    problems = {
        "thesis": dense_from_factor(*thesis_factor(p, math.ceil(0.05 * p), seed=p)),
        "ar1-0.8": ar1(p, 0.8),
        "sample": raw_sample_correlation(p),
    }
    print(
        f"p = {p}; time in seconds (jaxknock after warm-up); rel = (f - f_tight) / |f_tight|; "
        "ratio = time / knockpy's time"
    )
    hdr = f"{'problem':8s} {'method':7s} {'solver':10s} {'time':>8s} {'steps':>6s} {'objective':>16s} "
    hdr += f"{'gap':>10s} {'rel':>9s} {'ratio':>6s}"
    print(hdr)
    for pname, C in problems.items():
        C = jnp.asarray(C)
        kp = None if args.no_anchor else run_anchor("knockpy", KNOCKPY, {"C": np.asarray(C)})
        for method, fn in (("mvr", mvr), ("maxent", maxent)):
            tight = fn(C, tol=1e-10, max_steps=2000)
            f_t = float(tight.stats["objective"])
            for solver in ("newton", "coordinate"):
                sol, t, tc = jax_run(fn, C, method=solver)
                f = float(sol.stats["objective"])
                ratio = f"{t / kp[method]['time']:6.3f}" if kp is not None else f"{'':>6s}"
                print(
                    f"{pname:8s} {method:7s} {'jk-' + solver[:5]:10s} {t:8.3f} {int(sol.stats['num_steps']):6d} "
                    f"{f:16.8f} {float(sol.stats['gap']):10.2e} {(f - f_t) / abs(f_t):9.1e} {ratio}  "
                    f"(compile {tc:.1f}s, code {int(sol.result)})"
                )
            if kp is not None:
                s_kp = jnp.asarray(kp[method]["s"])
                fk, gk = (float(v) for v in mrc_objective_and_gap(C, s_kp, method=method))
                print(
                    f"{pname:8s} {method:7s} {'knockpy':10s} {kp[method]['time']:8.3f} {'':>6s} {fk:16.8f} "
                    f"{gk:10.2e} {(fk - f_t) / abs(f_t):9.1e} {'1.000':>6s}"
                )


if __name__ == "__main__":
    main()
