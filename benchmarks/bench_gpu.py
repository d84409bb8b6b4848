"""GPU-readiness benchmark (issue 20): every hot path at the sizes a GPU is for, in one run.

One command, no anchors, CPU or GPU::

    python benchmarks/bench_gpu.py              # the issue's GPU sizes (targets below)
    python benchmarks/bench_gpu.py --medium     # sizes a 2-core CPU finishes in a few minutes
    python benchmarks/bench_gpu.py --small      # smoke run (CI, tests/test_bench_gpu.py)
    python benchmarks/bench_gpu.py --only sdp,sampling --repeats 3 --json out.json
    python benchmarks/bench_gpu.py --only lcd --match working-set,lockstep   # some rows of a group

Rows (full sizes; ``--medium`` / ``--small`` scale them down):

* ``sdp``: :func:`jaxknock.sdp` (Newton) on a ``p x p`` correlation, p = 1000 / 3000 / 5000;
* ``sdp_factor``: :func:`jaxknock.sdp_factor` on ``D + U U^T``, k = 50, p = 1e4 / 1e5 / 1e6;
* ``sdp_batch``: :func:`jaxknock.sdp_batch` (``vmap`` of ``sdp``), 256 problems at p = 200;
* ``sampling``: :func:`jaxknock.sample_replicates`, R = 100, n = 1000, p = 1e4, factor model
  (k = 50) and dense ``Sigma`` (both use the feasible ``s = d``);
* ``filter``: :func:`jaxknock.knockoff_filter` with ``num_replicates`` R = 100, n = p = 1000
  (the whole replicate pipeline: Ledoit-Wolf, SDP, R knockoffs, R CV-lasso statistics, e-BH);
* ``stability``: :func:`jaxknock.stability.stability_selection` (issue 21), B = 1000
  complementary half-samples x L = 100 lambdas at n = 1000, p = 10 000 (default solver:
  the lockstep homotopy; ``code`` 1 and ``(bad)`` count subsample fits that did not finish);
* ``randsel``: :func:`jaxknock.kernels.randsel` (issue 21), 10 000 random feature subsets x
  subsamples at n = 2000 on the thesis' XOR design (y = sign(x1 x2), 25 irrelevant
  features); ``code`` 1 unless features 0 and 1 rank on top;
* ``lcd``: :func:`jaxknock.lcd` cross-validated lasso statistics on a batch of R = 10
  designs ``(R, n, 2p)``, n = 2000, 2p = 2000: the default working-set engine, then
  the classic engine with ``solver="cd"`` and ``"fista"`` side by side (the
  measurement behind ``solver="auto"``, ``jaxknock/_backend.py``), and
  :func:`jaxknock.l1.working_set.l1_cv` on the same batch with
  ``batch_mode="sequential"`` and ``"lockstep"`` (the measurement behind
  ``_backend.loop_over_batch("cv_replicates")``).

Every timing is bracketed by ``block_until_ready`` on every output leaf. Per row:
``first`` is the first call (tracing + compilation + run), ``warm`` the best of
``--repeats`` further identical calls, ``comp`` the number of XLA compilations
during the warm calls (``jax.monitoring`` ``backend_compile`` events; target 0),
``code`` the largest ``RESULTS`` code (0 = successful) and in brackets how many
batch items did not succeed, ``gap`` the largest certified duality gap where
the solver has one, ``peak`` the device's ``peak_bytes_in_use`` after the row
(a process-wide high-water mark: it never goes down, so a row's own peak is only
visible when it exceeds the earlier rows'; ``n/a`` where the backend keeps no
statistics, e.g. CPU). ``roof`` is a roofline lower bound
``max(flops / peak_flops, bytes / peak_bandwidth)`` for the work done (model
below) and ``eff`` = ``roof / warm``. Peaks: H100 SXM and H200 from the data
sheets (FP64 tensor core 67 TFLOP/s, FP32 non-tensor 67 TFLOP/s; HBM 3.35 and
4.8 TB/s); other devices (CPU) measured once at start-up with a large matmul
and a large elementwise pass.

Work models (rough, stated so that they can be checked): Newton SDP step
``11/3 p^3`` (Cholesky ``p^3/3``, triangular inverse ``p^3``, ``L^-T L^-1``
``2 p^3``, Hessian Cholesky ``p^3/3``) times ``num_steps``; factor SDP
``7 p k^2`` per step; factor sampling ``2 n p k`` flops and ``2 n p`` elements
moved per replicate, dense sampling ``2 n p^2`` flops; CV lasso ``4 n (2p)``
flops per coordinate-descent epoch or FISTA iteration (``num_steps``) -- a
lower bound, no Gram matrix counted. Rows print ``-`` where no model applies.

Each row is guarded: an exception (including out-of-memory) prints ``FAILED``
with the message and the script goes on with the next row.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxknock  # noqa: E402
from jaxknock import FactorModel  # noqa: E402
from jaxknock.kernels import randsel  # noqa: E402
from jaxknock.l1.working_set import l1_cv  # noqa: E402
from jaxknock.stability import stability_selection  # noqa: E402

# --------------------------------------------------------------------------
# sizes
# --------------------------------------------------------------------------

SIZES = {
    "full": {
        "sdp": [1000, 3000, 5000],
        "sdp_factor": [(10_000, 50), (100_000, 50), (1_000_000, 50)],
        "sdp_batch": (256, 200),
        "sampling": (100, 1000, 10_000, 50),
        "filter": (100, 1000, 1000),
        "lcd": (10, 2000, 1000),
        "stability": (1000, 100, 1000, 10_000),
        "randsel": (10_000, 2000, 27),
    },
    "medium": {
        "sdp": [300, 600],
        "sdp_factor": [(10_000, 50), (50_000, 20)],
        "sdp_batch": (64, 100),
        "sampling": (10, 500, 2000, 20),
        "filter": (5, 300, 150),
        "lcd": (2, 500, 250),
        "stability": (100, 50, 500, 1000),
        "randsel": (1000, 500, 27),
    },
    "small": {
        "sdp": [30],
        "sdp_factor": [(200, 5)],
        "sdp_batch": (4, 12),
        "sampling": (2, 40, 60, 4),
        "filter": (2, 60, 20),
        "lcd": (2, 40, 10),
        "stability": (8, 5, 40, 30),
        "randsel": (40, 60, 7),
    },
}

# issue 20's GPU targets (seconds, warm), only compared at the full sizes
TARGETS_S = {
    "sdp p=5000": 10.0,
    "sdp_factor p=1000000 k=50": 10.0,
    "sdp_batch B=256 p=200": 2.0,
    "sampling factor R=100 n=1000 p=10000": 1.0,
    "sampling dense R=100 n=1000 p=10000": 1.0,
    "filter R=100 n=1000 p=1000": 10.0,
}
# issue 21 sets no time for its GPU rows: "absolute times go in the closing note"

# (FP64 flop/s, FP32 flop/s, bytes/s) from the data sheets, matched on device_kind
PEAKS = {
    "H200": (67e12, 67e12, 4.8e12),
    "H100": (67e12, 67e12, 3.35e12),
}

# --------------------------------------------------------------------------
# measurement helpers
# --------------------------------------------------------------------------


class CompileCounter:
    """Counts XLA backend compilations (``jax.monitoring`` duration events) while active."""

    def __init__(self):
        self.count = 0

    def _listener(self, event, duration, **kwargs):
        if "backend_compile" in event:
            self.count += 1

    def __enter__(self):
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listener)


def block(out):
    """``block_until_ready`` on every array leaf of ``out`` (NamedTuples, dicts, numpy leaves)."""
    for leaf in jax.tree_util.tree_leaves(out):
        if isinstance(leaf, jax.Array):
            leaf.block_until_ready()
    return out


def peak_bytes():
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # pragma: no cover - backend without statistics
        stats = None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


_MEASURED = {}


def device_peaks():
    """``(kind, fp64 flop/s, fp32 flop/s, bytes/s, source)`` of device 0 (measured once per process)."""
    if "peaks" not in _MEASURED:
        _MEASURED["peaks"] = _device_peaks()
    return _MEASURED["peaks"]


def _device_peaks():
    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", dev.platform)
    for name, (f64, f32, bw) in PEAKS.items():
        if name in kind:
            return kind, f64, f32, bw, "data sheet"
    # measure: a large matmul per dtype and a large elementwise pass
    m = 1024 if dev.platform == "cpu" else 4096
    rates = []
    for dt in (jnp.float64, jnp.float32):
        a = jnp.ones((m, m), dt)
        f = jax.jit(lambda x: x @ x)
        block(f(a))
        t0 = time.perf_counter()
        block(f(a))
        rates.append(2 * m**3 / (time.perf_counter() - t0))
    x = jnp.ones((2**24,), jnp.float64)  # 128 MiB
    g = jax.jit(lambda v: v * 1.5 + 1.0)
    block(g(x))
    t0 = time.perf_counter()
    block(g(x))
    bw = 2 * x.nbytes / (time.perf_counter() - t0)
    return kind, rates[0], rates[1], bw, "measured"


def run_row(name, setup, call, info, *, repeats, peaks, dtype):
    """Time ``call(*setup())`` (first and best warm), count warm compiles, collect ``info(out)``."""
    row = {"name": name}
    try:
        args = block(setup())
        with CompileCounter() as c_first:
            t0 = time.perf_counter()
            out = block(call(*args))
            row["first_s"] = time.perf_counter() - t0
        row["compiles_first"] = c_first.count
        times = []
        with CompileCounter() as c_warm:
            for _ in range(repeats):
                t0 = time.perf_counter()
                out = block(call(*args))
                times.append(time.perf_counter() - t0)
        row["warm_s"] = min(times)
        row["compiles_warm"] = c_warm.count
        row.update(info(out, args))
        f = row.get("flops")
        by = row.get("bytes")
        fpeak = peaks[1] if dtype == "float64" else peaks[2]
        if f is not None or by is not None:
            row["roof_s"] = max((f or 0) / fpeak, (by or 0) / peaks[3])
        del out, args
    except Exception as exc:  # one failure (OOM included) must not stop the others
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        if "--traceback" in sys.argv:
            traceback.print_exc()
    row["peak_bytes"] = peak_bytes()
    gc.collect()
    return row


def codes(result):
    r = np.asarray(result).reshape(-1)
    return int(r.max()), int((r != 0).sum())


def solution_info(sol, flops_per_step=None):
    code, bad = codes(sol.result)
    steps = np.asarray(sol.stats["num_steps"])
    out = {"code": code, "bad": bad, "steps": int(steps.max())}
    if "gap" in sol.stats:
        out["gap"] = float(np.max(np.asarray(sol.stats["gap"])))
    if flops_per_step is not None:
        out["flops"] = float(flops_per_step * steps.sum())
    return out


# --------------------------------------------------------------------------
# problems (built on the device, outside the timings)
# --------------------------------------------------------------------------


def factor_model(key, p, k, dtype=jnp.float64):
    ku, kd = jax.random.split(key)
    U = jax.random.normal(ku, (p, k), dtype) / np.sqrt(k)
    d = jax.random.uniform(kd, (p,), dtype, 0.5, 1.0)
    return FactorModel(d, U)


def factor_correlation(key, p, k=10):
    m = factor_model(key, p, k)
    return jaxknock.to_correlation(jnp.diag(m.d) + m.U @ m.U.T)


def linear_data(key, n, p, dtype, signals=10):
    kx, ke = jax.random.split(key)
    X = jax.random.normal(kx, (n, p), dtype)
    beta = jnp.zeros((p,), dtype).at[: min(signals, p)].set(1.0)
    y = X @ beta + jax.random.normal(ke, (n,), dtype)
    return X, y


# --------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------


def rows_for(sizes, dtype):
    """``[(name, group, setup, call, info)]`` for the chosen sizes."""
    key = jax.random.key(0)
    dt = jnp.dtype(dtype)
    rows = []
    for p in sizes["sdp"]:
        rows.append(
            (
                f"sdp p={p}",
                "sdp",
                lambda p=p: (factor_correlation(key, p),),
                lambda C: jaxknock.sdp(C),
                lambda sol, a, p=p: solution_info(sol, 11 / 3 * p**3),
            )
        )
    for p, k in sizes["sdp_factor"]:
        rows.append(
            (
                f"sdp_factor p={p} k={k}",
                "sdp_factor",
                lambda p=p, k=k: (factor_model(key, p, k),),
                lambda m: jaxknock.sdp_factor(m),
                lambda sol, a, p=p, k=k: solution_info(sol, 7 * p * k**2),
            )
        )
    B, p = sizes["sdp_batch"]
    rows.append(
        (
            f"sdp_batch B={B} p={p}",
            "sdp_batch",
            lambda B=B, p=p: (jax.vmap(lambda kk: factor_correlation(kk, p, 5))(jax.random.split(key, B)),),
            lambda Cs: jaxknock.sdp_batch(Cs, method="sdp"),
            lambda sol, a, p=p: solution_info(sol, 11 / 3 * p**3),
        )
    )
    R, n, p, k = sizes["sampling"]

    def factor_setup(n=n, p=p, k=k):
        m = factor_model(key, p, k, dt)
        X = jax.random.normal(jax.random.key(1), (n, p), dt)
        return X, m, m.d  # s = d is feasible: 2 Sigma - D = D + 2 U U^T

    def dense_setup(n=n, p=p, k=k):
        X, m, s = factor_setup()
        return X, jnp.diag(m.d) + m.U @ m.U.T, s

    rows.append(
        (
            f"sampling factor R={R} n={n} p={p}",
            "sampling",
            factor_setup,
            lambda X, m, s, R=R: jaxknock.sample_replicates(jax.random.key(2), X, m, s, R),
            lambda out, a, R=R, n=n, p=p, k=k: {
                "flops": 2.0 * R * n * p * k,
                "bytes": 2.0 * R * n * p * dt.itemsize,
                "code": 0 if bool(jnp.all(jnp.isfinite(out))) else 1,
            },
        )
    )
    rows.append(
        (
            f"sampling dense R={R} n={n} p={p}",
            "sampling",
            dense_setup,
            lambda X, S, s, R=R: jaxknock.sample_replicates(jax.random.key(2), X, S, s, R),
            lambda out, a, R=R, n=n, p=p: {
                "flops": 2.0 * R * n * p * p,
                "bytes": 2.0 * R * n * p * dt.itemsize,
                "code": 0 if bool(jnp.all(jnp.isfinite(out))) else 1,
            },
        )
    )
    R, n, p = sizes["filter"]

    def filter_info(sel, a, R=R, n=n, p=p):
        out = solution_info(sel.s_solution, 11 / 3 * p**3)
        out["flops"] += 2.0 * R * n * p * p
        st = sel.statistic_solution
        if st is not None:
            c, bad = codes(st.result)
            out["code"], out["bad"] = max(out["code"], c), bad
            out["flops"] += 4.0 * n * 2 * p * float(np.sum(np.asarray(st.stats["num_steps"])))
        out["selected"] = len(sel.selected)
        return out

    rows.append(
        (
            f"filter R={R} n={n} p={p}",
            "filter",
            lambda n=n, p=p: linear_data(key, n, p, dt),
            lambda X, y, R=R: jaxknock.knockoff_filter(jax.random.key(3), X, y, num_replicates=R),
            filter_info,
        )
    )
    R, n, p = sizes["lcd"]

    def lcd_setup(R=R, n=n, p=p):
        X, y = linear_data(key, n, p, dt)
        Xt = jax.random.normal(jax.random.key(4), (R, n, p), dt)
        return jnp.concatenate([jnp.broadcast_to(X, (R, n, p)), Xt], axis=-1), y

    # the default engine (working set, which has its own inner solver), then the
    # classic engine with both lasso solvers side by side: the measurement behind
    # solver="auto" (jaxknock/_backend.py::lasso_solver) on the backend running this
    for engine, solver in (("auto", "auto"), ("classic", "cd"), ("classic", "fista")):
        label = "working-set" if engine == "auto" else f"classic {solver}"
        rows.append(
            (
                f"lcd cv {label} R={R} n={n} 2p={2 * p}",
                "lcd",
                lcd_setup,
                lambda Xk, y, engine=engine, solver=solver: jaxknock.lcd(Xk, y, engine=engine, solver=solver),
                lambda sol, a, n=n, p=p: solution_info(sol, 4.0 * n * 2 * p),
            )
        )
    # the working-set engine's two ways of running a batch (l1_cv batch_mode, _backend "cv_replicates"):
    # replicates one after another, or all in lock step (the accelerator default)
    for mode in ("sequential", "lockstep"):
        rows.append(
            (
                f"l1_cv {mode} R={R} n={n} 2p={2 * p}",
                "lcd",
                lcd_setup,
                lambda Xk, y, mode=mode: l1_cv(Xk, jnp.broadcast_to(y, Xk.shape[:2]), batch_mode=mode),
                lambda sol, a, n=n, p=p: solution_info(sol, 4.0 * n * 2 * p),
            )
        )
    B, L, n, p = sizes["stability"]
    rows.append(
        (
            f"stability B={B} L={L} n={n} p={p}",
            "stability",
            lambda n=n, p=p: linear_data(key, n, p, dt),
            lambda X, y, B=B, L=L: stability_selection(
                jax.random.key(5), X, y, lambdas=jaxknock.lambda_grid(X, y, num=L, eps=1e-2), num_subsamples=B
            ),
            lambda res, a: {
                "code": int(np.sum(np.asarray(res.num_failed)) > 0),
                "bad": int(np.sum(np.asarray(res.num_failed))),
                "selected": int(np.sum(res.selected)),
            },
        )
    )
    S, n, p = sizes["randsel"]

    def xor_setup(n=n, p=p):
        X = jax.random.normal(jax.random.key(6), (n, p), dt)
        return X, jnp.sign(X[:, 0] * X[:, 1])

    rows.append(
        (
            f"randsel subsets={S} n={n} p={p}",
            "randsel",
            xor_setup,
            lambda X, y, S=S: randsel(jax.random.key(7), X, y, num_subsamples=S),
            lambda res, a: {"code": int(set(np.asarray(res.ranking)[:2].tolist()) != {0, 1})},
        )
    )
    return rows


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------


def _fmt_s(x):
    if x is None:
        return "-"
    return f"{x * 1e3:.1f}ms" if x < 1 else f"{x:.2f}s"


def _fmt_bytes(b):
    return "n/a" if b is None else f"{b / 2**30:.2f}G"


def print_table(rows, level):
    hdr = (
        f"{'row':<38}{'first':>10}{'warm':>10}{'comp':>5}{'code':>8}{'steps':>6}{'gap':>10}"
        f"{'peak':>8}{'roof':>10}{'eff':>7}{'target':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<38}  FAILED  {r['error']}")
            continue
        gap = f"{r['gap']:.2e}" if "gap" in r else "-"
        code = f"{r.get('code', '-')}" + (f"({r['bad']})" if r.get("bad") else "")
        roof = r.get("roof_s")
        eff = f"{100 * roof / r['warm_s']:.1f}%" if roof else "-"
        tgt = TARGETS_S.get(r["name"]) if level == "full" else None
        tgt_s = "-" if tgt is None else (f"{tgt:g}s " + ("ok" if r["warm_s"] <= tgt else "MISS"))
        print(
            f"{r['name']:<38}{_fmt_s(r['first_s']):>10}{_fmt_s(r['warm_s']):>10}{r['compiles_warm']:>5}"
            f"{code:>8}{r.get('steps', '-')!s:>6}{gap:>10}{_fmt_bytes(r['peak_bytes']):>8}"
            f"{_fmt_s(roof):>10}{eff:>7}{tgt_s:>8}"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help="smoke-test sizes (CI)")
    size.add_argument("--medium", action="store_true", help="sizes for a small CPU")
    ap.add_argument("--only", default=None, help="comma-separated row groups: " + ",".join(SIZES["full"]))
    ap.add_argument("--match", default=None, help="comma-separated substrings: keep only the rows whose name holds one")
    ap.add_argument("--repeats", type=int, default=2, help="warm calls per row (best is reported)")
    ap.add_argument(
        "--dtype", default="float64", choices=["float64", "float32"], help="dtype of X (sampling, filter, lcd)"
    )
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--traceback", action="store_true", help="print the traceback of failed rows")
    args = ap.parse_args(argv)
    level = "small" if args.small else "medium" if args.medium else "full"
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    groups = None if args.only is None else {g.strip() for g in args.only.split(",") if g.strip()}
    matches = None if args.match is None else [m.strip() for m in args.match.split(",") if m.strip()]
    unknown = (groups or set()) - set(SIZES["full"])
    if unknown:
        ap.error(f"unknown row groups {sorted(unknown)}; choose from {list(SIZES['full'])}")
    peaks = device_peaks()
    kind, f64, f32, bw, src = peaks
    print(
        f"bench_gpu ({level} sizes) | jaxknock {jaxknock.__version__} | jax {jax.__version__} | "
        f"{jax.default_backend()}: {kind} x{jax.device_count()}"
    )
    print(
        f"roofline peaks ({src}): fp64 {f64 / 1e9:.1f} GFLOP/s, fp32 {f32 / 1e9:.1f} GFLOP/s, "
        f"bandwidth {bw / 1e9:.1f} GB/s | X dtype {args.dtype} (S solves in float64)"
    )
    results = []
    for name, group, setup, call, info in rows_for(SIZES[level], args.dtype):
        if groups is not None and group not in groups:
            continue
        if matches is not None and not any(m in name for m in matches):
            continue
        r = run_row(name, setup, call, info, repeats=args.repeats, peaks=peaks, dtype=args.dtype)
        results.append(r)
        status = r.get("error") or f"warm {_fmt_s(r['warm_s'])}, first {_fmt_s(r['first_s'])}"
        print(f"  .. {name}: {status}", flush=True)
    print()
    print_table(results, level)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"level": level, "device": kind, "peaks": peaks[1:4], "rows": results}, f, indent=1)
    return results


if __name__ == "__main__":
    main()
