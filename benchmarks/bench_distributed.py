"""Benchmark: replicates per second vs number of devices, and out-of-core class sums.

1. Scaling. For each device count ``D`` a fresh interpreter is started with
   ``XLA_FLAGS=--xla_force_host_platform_device_count=D`` (CPU) -- or, on a
   machine with accelerators, ``--devices`` picks the first ``D`` real
   devices -- and times, after a warm-up (compilation) call, with
   ``block_until_ready``:

   * ``sample``: :func:`jaxknock.sample_replicates` (dense ``Sigma``), ``R``
     replicates of an ``n x p`` design, sharded with ``devices=D``;
   * ``filter``: the replicate stage of :func:`jaxknock.knockoff_filter`
     (knockoffs + lasso-coefficient-difference statistics at a fixed lambda
     per replicate; ``timings["sampling"] + timings["statistics"]``).

   ``D = 1`` is the plain single-device path. Simulated CPU devices share the
   host's cores, so on a 2-core machine the curve is flat by construction:
   the table shows the sharding overhead, not a speed-up; on GPUs the same
   script measures real scaling.

2. Out of core. A synthetic Criteo-like hashed design (``--rows`` rows, 39
   hashed binary features per row out of ``m = 2^24``, two classes) is written
   as uncompressed CSR ``.npz`` shards; then, each in a fresh process,
   ``peak RSS`` (``resource.getrusage(...).ru_maxrss``) and throughput of
   :func:`jaxknock.class_sums_npz` (streamed row blocks of ``--block-mb``)
   versus loading every shard and calling :func:`jaxknock.class_sums` on the
   stacked matrix, and the RSS of a process that only imports jaxknock.

Usage::

    python benchmarks/bench_distributed.py            # ~2 minutes on 2 cores
    python benchmarks/bench_distributed.py --small    # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SCALING = """
import json, time, jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
import jaxknock
D, n, p, R, Rf, real = {D}, {n}, {p}, {R}, {Rf}, {real}
devices = jax.devices()[:D] if real else None
key = jax.random.key(0)
X = jax.random.normal(jax.random.key(1), (n, p))
Sigma = 0.6 * jnp.eye(p) + 0.4
s = jaxknock.equicorrelated(Sigma).value
def sample():
    return jax.block_until_ready(jaxknock.sample_replicates(key, X, Sigma, s, R, devices=devices))
sample()
t = []
for _ in range(3):
    t0 = time.perf_counter(); sample(); t.append(time.perf_counter() - t0)
Xf = X[:, :{pf}]
y = Xf[:, :5] @ jnp.ones(5) + jax.random.normal(jax.random.key(2), (n,))
def filt():
    sel = jaxknock.knockoff_filter(key, Xf, y, s_method="equicorrelated", statistic="lcd", lam=0.1,
                                   num_replicates=Rf, devices=devices)
    return sel.timings["sampling"] + sel.timings["statistics"]
filt()
tf = [filt() for _ in range(3)]
print(json.dumps({{"D": len(jax.devices()) if not real else D, "sample_s": min(t), "filter_s": min(tf),
                   "platform": jax.devices()[0].platform}}))
"""

_SUMS = """
import json, resource, time, sys
import numpy as np
mode, paths, ypaths, block_mb = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4])
import jax
jax.config.update("jax_enable_x64", True)
import jaxknock
t0 = time.perf_counter()
rows = 0
if mode == "stream":
    sums = jaxknock.class_sums_npz(paths, ypaths, max_block_bytes=int(block_mb * 2**20))
elif mode == "memory":
    import scipy.sparse as sp
    X = sp.vstack([sp.load_npz(p) for p in paths]).tocsr()
    y = np.concatenate([np.load(p) for p in ypaths])
    sums = jaxknock.class_sums(X, y)
if mode != "import":
    jax.block_until_ready(sums.counts)
    rows = int(np.asarray(sums.n_samples).sum())
    check = float(np.asarray(sums.counts).sum())
else:
    check = 0.0
dt = time.perf_counter() - t0
print(json.dumps({"mode": mode, "seconds": dt, "rows": rows, "check": check,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(code_or_args, env=None, timeout=900):
    args = [sys.executable, "-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _env(D=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if D is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={D}"
        env["JAX_PLATFORMS"] = "cpu"
    return env


def _table(rows, header):
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).rjust(w) for v, w in zip(r, widths))
    print(line(header))
    for r in rows:
        print(line(r))


def scaling(args):
    print(
        f"\n[1] replicates/s vs devices (sample: R = {args.replicates}, n = {args.n}, p = {args.p}; "
        f"filter: R = {args.filter_replicates}, p = {args.pf}, LCD at fixed lambda)",
        flush=True,
    )
    rows, base = [], None
    for D in args.devices:
        code = textwrap.dedent(
            _SCALING.format(
                D=D, n=args.n, p=args.p, R=args.replicates, Rf=args.filter_replicates, pf=args.pf, real=args.real
            )
        )
        res = _run(code, env=_env(None if args.real else D))
        rs, rf = args.replicates / res["sample_s"], args.filter_replicates / res["filter_s"]
        base = base or (rs, rf)
        rows.append(
            [
                D,
                res["platform"],
                f"{res['sample_s']:.3f}",
                f"{rs:.1f}",
                f"{rs / base[0]:.2f}",
                f"{res['filter_s']:.3f}",
                f"{rf:.1f}",
                f"{rf / base[1]:.2f}",
            ]
        )
        print(f"  D = {D} done", flush=True)
    _table(rows, ["devices", "platform", "sample[s]", "rep/s", "x", "filter[s]", "rep/s", "x"])


def out_of_core(args):
    import numpy as np
    import scipy.sparse as sp

    m, per_row = 2**24, 39
    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="jaxknock_ooc_"))
    paths, ypaths = [], []
    rows_per = args.rows // args.shards
    t0 = time.perf_counter()
    for i in range(args.shards):
        idx = np.sort(rng.integers(0, m, (rows_per, per_row), dtype=np.int32), axis=1).ravel()
        X = sp.csr_matrix(
            (np.ones(idx.size, np.float32), idx, np.arange(0, idx.size + 1, per_row)), shape=(rows_per, m)
        )
        y = rng.integers(0, 2, rows_per).astype(np.int8)
        paths.append(str(tmp / f"part{i}.npz"))
        ypaths.append(str(tmp / f"y{i}.npy"))
        sp.save_npz(paths[-1], X, compressed=False)
        np.save(ypaths[-1], y)
        del X, idx
    size = sum(os.path.getsize(p) for p in paths) / 2**20
    print(
        f"\n[2] out-of-core class sums: {args.shards * rows_per} rows x 2^24 features, {per_row} nnz/row, "
        f"{args.shards} shards ({size:.0f} MiB on disk, written in {time.perf_counter() - t0:.1f}s); "
        f"blocks of {args.block_mb} MiB",
        flush=True,
    )
    rows = []
    res = {}
    for mode in ("import", "stream", "memory"):
        if mode == "memory" and args.skip_memory:
            continue
        res[mode] = _run(
            [sys.executable, "-c", _SUMS, mode, json.dumps(paths), json.dumps(ypaths), str(args.block_mb)], env=_env()
        )
        r = res[mode]
        rate = f"{r['rows'] / r['seconds']:.3g}" if r["rows"] else "-"
        rows.append(
            [
                mode,
                f"{r['seconds']:.2f}",
                rate,
                f"{r['maxrss_mb']:.0f}",
                f"{r['maxrss_mb'] - res['import']['maxrss_mb']:.0f}",
            ]
        )
    _table(rows, ["mode", "seconds", "rows/s", "peak RSS MiB", "over import"])
    if "memory" in res:
        assert res["stream"]["check"] == res["memory"]["check"], "streamed and in-memory sums differ"
        print("streamed sums == in-memory sums (total of counts equal)")
    for p in paths + ypaths:
        os.remove(p)
    os.rmdir(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--real", action="store_true", help="use the first D real devices instead of simulated CPUs")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--p", type=int, default=200)
    ap.add_argument("--pf", type=int, default=50)
    ap.add_argument("--replicates", type=int, default=64)
    ap.add_argument("--filter-replicates", type=int, default=16)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--block-mb", type=float, default=64.0)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    args = ap.parse_args()
    if args.small:
        args.devices, args.n, args.p, args.pf, args.replicates, args.filter_replicates = [1, 2], 100, 40, 20, 8, 4
        args.rows, args.shards, args.block_mb = 100_000, 2, 8.0
    print(f"load average {os.getloadavg()}; cpu count {os.cpu_count()}", flush=True)
    if not args.skip_scaling:
        scaling(args)
    out_of_core(args)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
