"""Benchmark: knockoff sampling under a factor model, side by side with anchors.

Columns (all float64, same machine, same run):

* ``floor``   - drawing the ``n x p`` standard normals alone with
  ``jax.random.normal`` (the practical floor), times ``R``;
* ``jaxknock``- :func:`jaxknock.sampling.sample_knockoffs_factor` for ``R = 1``
  (public call: input checks, factorisation and draw; the path is chosen from
  the data, here ``C >= 0``), and :func:`jaxknock.sampling.sample_replicates` for
  ``R > 1`` (materialised when ``R n p`` fits in memory, streamed otherwise;
  chunks are consumed with ``block_until_ready``);
* ``recursive`` - the same call forced onto the blocked ``L Delta L^T`` path
  (Algorithms 6-8) that an indefinite ``C`` requires, on the same data;
* ``fanok``   - fanok 0.0.4's low-rank sampler (the seed code:
  ``low_rank_gaussian_knockoffs_sampling_parameters`` +
  ``sample_low_rank_gaussian_knockoffs``), run in its own venv via
  ``benchmarks/_anchors.py``; ``R`` replicates cost ``R`` calls, so ``R > 1`` is
  reported as ``R x`` the measured single call (marked ``*``);
* ``dense``   - a dense numpy/scipy Cholesky sampler (factorise ``Sigma`` and
  ``Omega = 2S - S Sigma^-1 S``), ``O(p^3)``; skipped where its ``p^3``
  extrapolation from the smallest ``p`` exceeds ``--dense-budget`` seconds or its
  ``~5 p^2`` floats exceed half the available memory.

Model as in the thesis (section 4.4): ``Sigma = D + V V^T``, ``D_jj ~ U[0.1, 1]``,
``V_ij ~ N(0, 1/k)``, rows of ``X ~ N(0, Sigma)``, and ``s = 0.95 gamma* diag(Sigma)``
with ``gamma*`` the largest feasible scaling (``C = 2S - S D^-1 S`` can be
negative on at most ``k`` coordinates; the run prints how many). Timings are
the best of ``--repeats`` interleaved runs after a warm-up (compilation) call,
with ``block_until_ready``.

Usage::

    python benchmarks/bench_sampling.py            # full grid (tens of minutes on 2 cores)
    python benchmarks/bench_sampling.py --small    # CI smoke test, < 1 minute
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _anchors import run_anchor  # noqa: E402

from jaxknock import _feasibility, _memory, sampling  # noqa: E402
from jaxknock.covariance import FactorModel  # noqa: E402

FANOK_CODE = """
import time
import numpy as np
from fanok.generation.gaussian import (
    low_rank_gaussian_knockoffs_sampling_parameters, sample_low_rank_gaussian_knockoffs)
d, U, s, n = inputs["d"], inputs["U"], inputs["s"], int(inputs["n"])
rng = np.random.default_rng(0)
X = rng.standard_normal((n, d.shape[0]))   # timing does not depend on X's law
np.random.seed(0)
t = time.perf_counter()
c, Z, P = low_rank_gaussian_knockoffs_sampling_parameters(d, U, np.ones(U.shape[1]), s)
Xk = sample_low_rank_gaussian_knockoffs(X, d=d, s=s, c=c, Z=Z, P=P)
elapsed = time.perf_counter() - t
report({"seconds": elapsed, "finite": bool(np.isfinite(Xk).all())})
"""


def best_time(fn, repeats):
    """Best wall time of ``repeats`` calls after one warm-up call."""
    return best_times({"f": fn}, repeats)["f"]


def best_times(fns, repeats):
    """Best wall time of each function, warm-up first, then interleaved rounds (so
    that load from other processes hits all columns alike)."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(fn())
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def factor_call(key, X, model, s, kind):
    """The public ``sample_knockoffs_factor`` call, with the path selectable:
    ``kind="factor"`` picks it from the data (``C >= 0`` here), ``"factor_recursive"``
    forces the blocked L Delta L^T recursion that indefinite ``C`` needs."""
    plan = sampling.replicate_plan(X, model, s, force_recursion=kind == "factor_recursive")
    return _draw(key, plan)


_draw = jax.jit(sampling.draw_replicate)


@jax.jit
def _rows_impl(kx, kh, d, U, H):
    return jnp.sqrt(d) * jax.random.normal(kx, (H.shape[0], d.shape[0])) + H @ U.T


def _rows(kx, kh, d, U, n):
    """Rows of X ~ N(0, D + U U^T), fused (one n x p buffer at p = 100000)."""
    return _rows_impl(kx, kh, d, U, jax.random.normal(kh, (n, U.shape[1])))


def make_problem(key, n, p, k):
    kd, kv, kx, kh = jax.random.split(key, 4)
    d = jax.random.uniform(kd, (p,), minval=0.1, maxval=1.0)
    U = jax.random.normal(kv, (p, k)) / jnp.sqrt(k)
    X = _rows(kx, kh, d, U, n)
    diag = d + jnp.sum(U**2, axis=1)
    # largest gamma with 2 Sigma - gamma diag(Sigma) >= 0, by bisection on the O(p k^2) test
    lo, hi = 0.0, 2.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        ok = bool(_feasibility.diag_plus_lowrank_is_pd(2.0 * d - mid * diag, jnp.sqrt(2.0) * U))
        lo, hi = (mid, hi) if ok else (lo, mid)
    s = 0.95 * lo * diag
    return jax.block_until_ready((X, FactorModel(d, U), s))


def dense_numpy_sampler(X, d, U, s, rng):
    import scipy.linalg as sla

    Sigma = np.diag(d) + U @ U.T
    cf = sla.cho_factor(Sigma, lower=True)
    SinvS = sla.cho_solve(cf, np.diag(s))
    Omega = 2.0 * np.diag(s) - s[:, None] * SinvS
    Omega = 0.5 * (Omega + Omega.T) + 1e-10 * np.eye(len(s))
    L = np.linalg.cholesky(Omega)
    mu = X.mean(axis=0)
    return X - (X - mu) @ SinvS + rng.standard_normal(X.shape) @ L.T


def fmt(x):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:.3g}"


def ratio(a, b):
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return "-"
    return f"{a / b:.2f}x"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="CI smoke test (< 1 minute)")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--p", type=int, nargs="*", default=None)
    ap.add_argument("--k", type=int, nargs="*", default=None)
    ap.add_argument("--R", type=int, nargs="*", default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument(
        "--cell-budget",
        type=float,
        default=None,
        help="skip a jaxknock cell whose R x (single time) estimate exceeds this",
    )
    ap.add_argument("--dense-budget", type=float, default=None)
    ap.add_argument("--fanok-budget", type=float, default=None)
    ap.add_argument("--no-fanok", action="store_true")
    args = ap.parse_args(argv)

    if args.small:
        n, ps, ks, Rs, repeats = 500, [2000], [10], [1, 4], 3
        cell_budget, dense_budget, fanok_budget = 30.0, 10.0, 20.0
    else:
        n, ps, ks, Rs, repeats = 5000, [2000, 15000, 100000], [50, 100], [1, 10, 100], 3
        cell_budget, dense_budget, fanok_budget = 300.0, 240.0, 400.0
    n = args.n or n
    ps = args.p or ps
    ks = args.k or ks
    Rs = args.R or Rs
    repeats = args.repeats or repeats
    cell_budget = args.cell_budget or cell_budget
    dense_budget = args.dense_budget or dense_budget
    fanok_budget = args.fanok_budget or fanok_budget
    anchor_dir = os.environ.get("JAXKNOCK_ANCHOR_DIR", "(default)")
    print(
        f"# bench_sampling: n={n}, p={ps}, k={ks}, R={Rs}, float64, "
        f"backend={jax.default_backend()}, devices={jax.devices()}, cpus={os.cpu_count()}, "
        f"anchors={anchor_dir}",
        flush=True,
    )

    rows = []
    fanok_ref = None  # (p k, seconds) of the last fanok run, for extrapolation (linear in p k)
    dense_ref = None  # (p, seconds) of the smallest measured dense run, for extrapolation
    key = jax.random.key(0)
    for p in ps:
        for k in ks:
            X, model, s = make_problem(jax.random.fold_in(key, p * 1000 + k), n, p, k)
            gib = n * p * 8 / 2**30
            reps_p = 1 if p >= 100_000 else repeats
            c = 2 * s - s * s / model.d
            n_neg = int(jnp.sum(c < 0))
            times = best_times(
                {
                    "floor": lambda: jax.random.normal(jax.random.key(1), (n, p), X.dtype),
                    "jk": lambda: sampling.sample_knockoffs_factor(jax.random.key(2), X, model, s),
                    "rec": lambda: factor_call(jax.random.key(2), X, model, s, "factor_recursive"),
                },
                reps_p,
            )
            floor1, t1, t1_rec = times["floor"], times["jk"], times["rec"]
            print(
                f"  p={p:>6} k={k:>3}: c < 0 on {n_neg} coordinates; floor {floor1:.3g} s, "
                f"jaxknock {t1:.3g} s (auto path), {t1_rec:.3g} s (recursive path)",
                flush=True,
            )
            # fanok (one call; R replicates = R calls)
            fanok1 = None
            if not args.no_fanok:
                fanok_mem = 7 * gib
                avail = _memory.device_memory_bytes(jax.devices()[0]) / 2**30
                if fanok_mem > 0.6 * avail:
                    fanok1 = f"skip (mem ~{fanok_mem:.0f} GiB)"
                elif fanok_ref is not None and (fanok_est := fanok_ref[1] * p * k / fanok_ref[0]) > fanok_budget:
                    fanok1 = f"skip (est. {fanok_est:.0f} s)"
                else:
                    res = run_anchor(
                        "fanok",
                        FANOK_CODE,
                        {"d": np.asarray(model.d), "U": np.asarray(model.U), "s": np.asarray(s), "n": np.array(n)},
                        timeout=fanok_budget * 3,
                    )
                    fanok1 = None if res is None else res["seconds"]
                    if fanok1 is not None:
                        fanok_ref = (p * k, fanok1)
            # dense numpy Cholesky anchor (R = 1)
            dense1 = None
            dense_mem = 5 * p * p * 8 / 2**30
            est = None if dense_ref is None else dense_ref[1] * (p / dense_ref[0]) ** 3
            if dense_mem > 0.5 * _memory.device_memory_bytes(jax.devices()[0]) / 2**30:
                dense1 = f"skip (mem {dense_mem:.0f} GiB)"
            elif est is not None and est > dense_budget:
                dense1 = f"skip (est. {est:.0f} s)"
            else:
                Xn, dn, Un, sn = (np.asarray(a) for a in (X, model.d, model.U, s))
                rng = np.random.default_rng(0)
                t = time.perf_counter()
                Xk = dense_numpy_sampler(Xn, dn, Un, sn, rng)
                dense1 = time.perf_counter() - t
                assert np.isfinite(Xk).all()
                del Xk, Xn
                if dense_ref is None:
                    dense_ref = (p, dense1)
            gc.collect()

            for R in Rs:
                note = ""
                if R == 1:
                    tR = t1
                else:
                    est = R * t1
                    if est > cell_budget:
                        tR = f"skip (est. {est:.0f} s)"
                    else:
                        budget = _memory.device_memory_bytes(jax.devices()[0]) // 2
                        stream = R * gib * 2**30 > 0.6 * budget
                        note = "stream" if stream else "array"

                        def run_R():
                            out = sampling.sample_replicates(jax.random.key(3), X, model, s, R, stream=stream)
                            if stream:
                                last = None
                                for chunk in out:
                                    last = chunk.block_until_ready()
                                return last
                            return out

                        tR = best_time(run_R, 1)
                        gc.collect()
                floorR = R * floor1
                fanokR = fanok1 if (R == 1 or not isinstance(fanok1, float)) else R * fanok1
                rows.append(
                    dict(
                        p=p,
                        k=k,
                        R=R,
                        floor=floorR,
                        jk=tR,
                        fanok=fanokR,
                        rec=t1_rec if R == 1 else "-",
                        fanok_est=(R > 1 and isinstance(fanok1, float)),
                        dense=dense1 if R == 1 else "-",
                        note=note,
                    )
                )
                r = rows[-1]
                print(
                    f"  p={p:>6} k={k:>3} R={R:>3}  floor={fmt(floorR):>8}  jaxknock={fmt(tR):>8}"
                    f"  fanok={fmt(fanokR):>8}  dense={fmt(r['dense']):>8}  {note}",
                    flush=True,
                )
            del X, model, s
            gc.collect()

    print()
    print(
        f"n = {n}, float64; seconds, best of {repeats} interleaved runs after a warm-up "
        "(p = 100000: 1 run). floor = R x jax.random.normal((n, p)). jaxknock = public call, "
        "path chosen from the data (C >= 0 here); recursive = the same call forced onto the "
        "blocked L Delta L^T path that indefinite C needs. fanok R > 1: R x one call (*)."
    )
    header = (
        "|      p |   k |   R | floor s | jaxknock s | /floor | recursive s | /floor |"
        " fanok s | fanok/jaxknock | dense np s | dense/jaxknock | R>1 mode |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for r in rows:
        fan = fmt(r["fanok"]) + ("*" if r["fanok_est"] else "")
        print(
            f"| {r['p']:>6} | {r['k']:>3} | {r['R']:>3} | {fmt(r['floor']):>7} | {fmt(r['jk']):>10} |"
            f" {ratio(r['jk'], r['floor']):>6} | {fmt(r['rec']):>11} | {ratio(r['rec'], r['floor']):>6} |"
            f" {fan:>7} | {ratio(r['fanok'], r['jk']):>14} |"
            f" {fmt(r['dense']):>10} | {ratio(r['dense'], r['jk']):>14} | {r['note']:>8} |"
        )
    return rows


if __name__ == "__main__":
    main()
