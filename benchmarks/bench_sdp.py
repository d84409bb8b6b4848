"""Knockoff S-vector solvers side by side: jaxknock vs fanok 0.0.4 vs knockpy 1.3.5.

Problems (Askari thesis section 4.4): ``Sigma = D + V Lambda V^T`` with
``D = 1e-3 I``, ``V ~ N(0, 1)`` of size ``p x ceil(0.05 p)`` (``k = 50`` for the
factor-model runs), ``Lambda_ii ~ U[0, 1]``, rescaled to a correlation matrix,
and AR(1) with ``rho = 0.5``.

For every problem: wall time (after a warm-up call, so jit compilation is not
counted; the compile time is printed separately), sweeps, ``sum(s)``,
``lambda_min(2 Sigma - diag s)``, the certified gap (jaxknock only; no anchor
offers one) and the result code. "best" is the largest ``sum(s)`` among the
feasible runs; a run is "accurate" when its ``sum(s)`` is within 1e-4 relative
of best. fanok is run at its default ``eps=1e-5`` and, if that is not
accurate, again at ``eps=1e-10``; the ratio column is
``time(jaxknock) / time(fanok at the first accurate eps)``.

Usage::

    python benchmarks/bench_sdp.py            # full table (tens of minutes on 2 cores)
    python benchmarks/bench_sdp.py --small    # smoke run, no anchors (CI)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _anchors import run_anchor  # noqa: E402

from jaxknock import FactorModel, sdp, sdp_factor  # noqa: E402


def thesis_factor(p, k, seed):
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((p, k))
    lam = rng.uniform(0, 1, k)
    U = V * np.sqrt(lam)
    diag = 1e-3 + np.sum(U**2, axis=1)
    return 1e-3 / diag, U / np.sqrt(diag)[:, None]


def dense_from_factor(d, U):
    return np.diag(d) + U @ U.T


def ar1(p, rho=0.5):
    i = np.arange(p)
    return rho ** np.abs(i[:, None] - i[None, :])


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    jax.block_until_ready(out)
    t1 = time.perf_counter()
    out = fn(*args, **kw)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t1, t1 - t0


FANOK_FULL = """
import time
from fanok.sdp.sdp import sdp_full
S = inputs["S"]
t = time.perf_counter(); s, objs = sdp_full(S, eps=float(inputs["eps"]), return_objectives=True)
el = time.perf_counter() - t
report({"time": el, "sum": float(s.sum()), "sweeps": len(objs),
        "min_eig": float(np.linalg.eigvalsh(2 * S - np.diag(s))[0]) if S.shape[0] <= 5000 else float("nan")})
"""

FANOK_LOW = """
import time
from fanok.sdp.sdp import sdp_low_rank
d, U = inputs["d"], inputs["U"]
t = time.perf_counter(); s, objs = sdp_low_rank(d, U, eps=float(inputs["eps"]), return_objectives=True)
el = time.perf_counter() - t
report({"time": el, "sum": float(s.sum()), "sweeps": len(objs), "min_eig": float("nan")})
"""

KNOCKPY = """
import time
from knockpy.smatrix import compute_smatrix
S = inputs["S"]
t = time.perf_counter(); Sm = compute_smatrix(S, method="sdp")
el = time.perf_counter() - t
s = np.diag(Sm)
report({"time": el, "sum": float(s.sum()), "sweeps": -1, "min_eig": float(np.linalg.eigvalsh(2 * S - np.diag(s))[0])})
"""


def fanok_runs(code, arrays):
    runs = []
    for eps in (1e-5, 1e-10):
        r = run_anchor("fanok", code, {**arrays, "eps": np.array(eps)})
        if r is None:
            break
        r["eps"] = eps
        runs.append(r)
    return runs


def row(name, solver, t, sweeps, total, min_eig, gap, result):
    r = dict(problem=name, solver=solver, time=t, sweeps=sweeps, sum=total, min_eig=min_eig, gap=gap, result=result)
    print(
        f"    {name} | {solver}: {t:.3f}s sweeps={sweeps} sum={total:.8f} min_eig={min_eig} gap={gap} result={result}",
        flush=True,
    )
    return r


def print_table(rows):
    hdr = (
        f"{'problem':<22}{'solver':<22}{'time[s]':>9}{'sweeps':>8}{'sum(s)':>14}"
        f"{'min_eig':>11}{'gap':>10}{'result':>8}{'ratio':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        gap = f"{r['gap']:.1e}" if r["gap"] is not None and np.isfinite(r["gap"]) else "-"
        me = f"{r['min_eig']:.1e}" if r["min_eig"] is not None and np.isfinite(r["min_eig"]) else "-"
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else ""
        print(
            f"{r['problem']:<22}{r['solver']:<22}{r['time']:>9.3f}{r['sweeps']:>8}{r['sum']:>14.8f}{me:>11}{gap:>10}{str(r['result']):>8}{ratio:>8}"
        )


def annotate_ratios(rows):
    by = {}
    for r in rows:
        by.setdefault(r["problem"], []).append(r)
    for rs in by.values():
        feas = [r["sum"] for r in rs if not (r["min_eig"] is not None and r["min_eig"] < -1e-10)]
        best = max(feas)
        for r in rs:
            r["accurate"] = abs(r["sum"] - best) <= 1e-4 * best
        fan = [r for r in rs if r["solver"].startswith("fanok") and r["accurate"]]
        if fan:
            for r in rs:
                if r["solver"].startswith("jaxknock"):
                    r["ratio"] = r["time"] / fan[0]["time"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="smoke sizes, no anchors")
    ap.add_argument("--no-anchors", action="store_true")
    ap.add_argument("--knockpy-max-p", type=int, default=1000, help="run knockpy up to this p (0: never)")
    ap.add_argument("--full-sizes", type=int, nargs="*", default=None)
    ap.add_argument("--factor-sizes", type=int, nargs="*", default=None)
    ap.add_argument(
        "--coordinate-max-p", type=int, default=300, help="also time method='coordinate' (Algorithm 4) up to this p"
    )
    args = ap.parse_args()
    anchors = not (args.small or args.no_anchors)
    full_sizes = args.full_sizes if args.full_sizes is not None else ([100] if args.small else [100, 300, 1000, 3000])
    factor_sizes = (
        args.factor_sizes if args.factor_sizes is not None else ([1000] if args.small else [1000, 10000, 50000])
    )
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({jax.devices()[0].device_kind})")
    rows = []
    for p in full_sizes:
        d, U = thesis_factor(p, math.ceil(0.05 * p), seed=p)
        problems = [(f"factor-dense p={p}", dense_from_factor(d, U)), (f"ar1 p={p}", ar1(p))]
        for name, S in problems:
            for method in ["newton"] + (["coordinate"] if p <= args.coordinate_max_p else []):
                sol, t, first = timed(sdp, S, method=method)
                print(f"  {name}: jaxknock {method} compile+run {first:.2f}s, run {t:.2f}s", flush=True)
                rows.append(
                    row(
                        name,
                        f"jaxknock.sdp {method[:5]}",
                        t,
                        int(sol.stats["num_steps"]),
                        float(sol.stats["objective"]),
                        float(sol.stats["min_eig"]),
                        float(sol.stats["gap"]),
                        int(sol.result),
                    )
                )
            if anchors:
                for r in fanok_runs(FANOK_FULL, {"S": S}):
                    rows.append(
                        row(
                            name, f"fanok eps={r['eps']:.0e}", r["time"], r["sweeps"], r["sum"], r["min_eig"], None, "-"
                        )
                    )
                if p <= args.knockpy_max_p:
                    r = run_anchor("knockpy", KNOCKPY, {"S": S})
                    if r is not None:
                        rows.append(row(name, "knockpy sdp", r["time"], r["sweeps"], r["sum"], r["min_eig"], None, "-"))
    for p in factor_sizes:
        d, U = thesis_factor(p, 50, seed=p)
        name = f"factor k=50 p={p}"
        model = FactorModel(jax.numpy.asarray(d), jax.numpy.asarray(U))
        sol, t, first = timed(sdp_factor, model)
        print(f"  {name}: jaxknock compile+run {first:.2f}s, run {t:.2f}s", flush=True)
        rows.append(
            row(
                name,
                "jaxknock.sdp_factor",
                t,
                int(sol.stats["num_steps"]),
                float(sol.stats["objective"]),
                float("nan"),
                float(sol.stats["gap"]),
                int(sol.result),
            )
        )
        if anchors:
            for r in fanok_runs(FANOK_LOW, {"d": d, "U": U}):
                rows.append(
                    row(name, f"fanok eps={r['eps']:.0e}", r["time"], r["sweeps"], r["sum"], r["min_eig"], None, "-")
                )
    annotate_ratios(rows)
    print()
    print_table(rows)
    print(
        "\nratio = time(jaxknock) / time(first fanok run within 1e-4 of the best sum(s)); result 0 = certified to tol;"
        " sweeps = coordinate sweeps or Newton steps."
    )


if __name__ == "__main__":
    main()
