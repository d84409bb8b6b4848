"""End-to-end ``knockoff_filter`` with its defaults against knockpy's *default* filter (issue 17).

Design (the issue's): block-equicorrelated ``X`` (blocks of 20, rho = 0.5,
unit variances), 20 signals of amplitude ``+-8 / sqrt(n)``, Gaussian noise,
target FDR 0.1. Both libraries start from ``(X, y)`` only:

* jaxknock: ``knockoff_filter(key, X, y)`` (library defaults);
* knockpy 1.3.5 (own venv, ``_anchors.py``): ``KnockoffFilter(ksampler="gaussian",
  fstat="lasso").forward(X=X, y=y, fdr=0.1)`` -- its defaults: Ledoit-Wolf
  covariance, MVR knockoffs, scikit-learn ``LassoCV`` coefficient difference.

Three times per library and size: ``import`` and ``first call`` in a fresh
process (the time to a first answer), and ``warm`` (best of ``--repeats``
calls after the first, in that process). jaxknock runs twice, in two fresh
processes sharing one new :func:`jaxknock.enable_compilation_cache` directory:
``jaxknock`` (empty cache: everything compiles) and ``jaxknock+cache`` (the
second process, which reads the compiled programs from disk; what a user sees
from the second run of a script on). Also the number selected, power and
FDP of the warm call. Ratios are jaxknock / knockpy (< 1: jaxknock faster).
With ``--replicates R`` (default 10) each jaxknock process also times ``R``
replicates against one in alternating warm calls (best of at least 3 each):
the issue's "R = 10 costs at most 4x one replicate".

    python benchmarks/bench_filter_default.py --small     # n=300, p=100
    python benchmarks/bench_filter_default.py             # the issue-17 table
    python benchmarks/bench_filter_default.py --sizes 300:1000   # p > n: jaxknock's mvr_factor (its default)
    python benchmarks/bench_filter_default.py --sweep            # session 45: shapes and designs (warm, interleaved)
    python benchmarks/bench_filter_default.py --sweep --small    # its first two cases

``--sweep`` (session 45; re-run in session 62, ``measured/speed_sweep_s62.txt``) times warm calls
on other shapes and designs (``SWEEP``:
small, tall, ``p ~ n``, ``p > n``, binary ``y``, AR(1) 0.9, exact duplicate
columns). Each library runs in one long-lived process fed the cases one after
another; per case jaxknock makes a compiling call first (reported as
``first``), then the two libraries' warm calls alternate (``--repeats`` each;
knockpy once where one call takes over ``--kp-long`` seconds, and not at all
once a call passes ``--kp-timeout``), so a change of machine load hits both
sides alike. Data are identical on both sides; ``uptime``'s load is printed
per case. Ratios are of the best warm times, jaxknock / knockpy. On a machine
with more runnable threads than cores, OpenBLAS's threaded LAPACK (knockpy's
numpy / scikit-learn and jaxlib's CPU ``cholesky`` / ``qr`` / ``triangular_solve``,
which go through scipy's OpenBLAS) can slow down 10-100x per call; run the sweep
also under ``OPENBLAS_NUM_THREADS=1`` (both processes inherit it) to separate
that from the libraries' own cost (``benchmarks/measured/speed_sweep_s45.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _anchors

ROOT = Path(__file__).resolve().parent.parent


def make_data(seed, n, p, *, block=20, rho=0.5, nnz=20, amplitude=8.0):
    rng = np.random.default_rng(seed)
    X = block_rows(rng, n, p, block, rho)
    beta = np.zeros(p)
    idx = rng.choice(p, nnz, replace=False)
    beta[idx] = rng.choice([-1.0, 1.0], nnz) * amplitude / np.sqrt(n)
    y = X @ beta + rng.standard_normal(n)
    return X, y, beta != 0


def block_rows(rng, n, p, block, rho):
    """Rows with equicorrelated ``rho`` blocks of ``block`` columns (the last block shorter if ``block`` does not
    divide ``p``), unit variances."""
    B = np.full((block, block), rho) + (1 - rho) * np.eye(block)
    L = np.linalg.cholesky(B)
    X = (rng.standard_normal((n, -(-p // block), block)) @ L.T).reshape(n, -1)
    return X[:, :p]


# --sweep: name -> (n, p, design, number of signals, amplitude c: |beta_j| = c / sqrt(n))
SWEEP = {
    "small": (150, 30, "block", 10, 6.0),
    "small2": (300, 60, "block", 10, 6.0),
    "tall": (5000, 100, "block", 20, 6.0),
    "tall2": (20000, 50, "block", 10, 6.0),
    "tall3": (50000, 50, "block", 10, 6.0),
    "p~n": (420, 400, "block", 20, 6.0),
    "wide": (300, 600, "block", 20, 6.0),
    "wide2": (500, 1500, "block", 20, 6.0),
    "medium": (3000, 300, "block", 20, 6.0),
    "logit": (1000, 300, "logit", 20, 12.0),
    "ar09": (800, 300, "ar09", 20, 6.0),
    "dup": (500, 200, "dup", 20, 6.0),
}


def sweep_data(name, seed=0):
    """``(X, y, truth)`` of sweep case ``name``: blocks of 10 at rho 0.5 (``block``, ``logit``: binary ``y`` from a
    logistic model), AR(1) 0.9 (``ar09``), or the blocks with 5 null columns replaced by exact copies of 5 other
    null columns (``dup``)."""
    n, p, design, k, c = SWEEP[name]
    rng = np.random.default_rng(1000 + seed)
    if design == "ar09":
        from bench_fdr_designs import ar1_rows

        X = ar1_rows(rng, n, p, 0.9)
    else:
        X = block_rows(rng, n, p, 10, 0.5)
    beta = np.zeros(p)
    idx = rng.choice(p, k, replace=False)
    if design == "dup":
        nulls = rng.permutation(np.setdiff1d(np.arange(p), idx))
        X[:, nulls[:5]] = X[:, nulls[5:10]]
    beta[idx] = rng.choice([-1.0, 1.0], k) * c / np.sqrt(n)
    eta = X @ beta
    if design == "logit":
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(float)
    else:
        y = eta + rng.standard_normal(n)
    return X, y, beta != 0


_JAXKNOCK = """
import time, json, sys
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jaxknock
if len(sys.argv) > 3:
    jaxknock.enable_compilation_cache(sys.argv[3])
t_import = time.perf_counter() - t0
d = np.load(sys.argv[1]); X, y, fdr, repeats = d["X"], d["y"], float(d["fdr"]), int(d["repeats"])
kw = {} if str(d["s_method"]) == "default" else dict(s_method=str(d["s_method"]))
def run(seed):
    return jaxknock.knockoff_filter(jax.random.key(seed), X, y, fdr=fdr, **kw)
t0 = time.perf_counter(); sel = run(0); t_first = time.perf_counter() - t0
ts = []
for r in range(repeats):
    t0 = time.perf_counter(); sel = run(r + 1); ts.append(time.perf_counter() - t0)
R, by_r = int(d["replicates"]), {}
if R > 1:  # R replicates against one, in alternating warm calls (after one call of R that compiles)
    def run_r(seed, r):
        return jaxknock.knockoff_filter(jax.random.key(seed), X, y, fdr=fdr, num_replicates=r, **kw)
    run_r(100, R)
    for i in range(max(repeats, 3)):
        for r in (1, R):
            t0 = time.perf_counter(); run_r(200 + i, r); by_r.setdefault(r, []).append(time.perf_counter() - t0)
json.dump(dict(import_=t_import, first=t_first, warm=min(ts), selected=sel.selected.tolist(),
               timings={k: float(v) for k, v in sel.timings.items()},
               replicates={str(r): min(v) for r, v in by_r.items()}), open(sys.argv[2], "w"))
"""

_KNOCKPY = """
import time, json, sys, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
import numpy as np
from knockpy.knockoff_filter import KnockoffFilter
t_import = time.perf_counter() - t0
d = np.load(sys.argv[1]); X, y, fdr, repeats = d["X"], d["y"], float(d["fdr"]), int(d["repeats"])
def run(seed):
    np.random.seed(seed)
    kf = KnockoffFilter(ksampler="gaussian", fstat="lasso")
    rej = kf.forward(X=X, y=y, fdr=fdr)
    return np.flatnonzero(rej)
t0 = time.perf_counter(); sel = run(0); t_first = time.perf_counter() - t0
ts = []
for r in range(repeats):
    t0 = time.perf_counter(); sel = run(r + 1); ts.append(time.perf_counter() - t0)
json.dump(dict(import_=t_import, first=t_first, warm=min(ts), selected=sel.tolist()), open(sys.argv[2], "w"))
"""


# the --sweep workers: one long-lived process per library reads "in.npz out.json seed" lines and answers "done"
_JAXKNOCK_WORKER = """
import sys, time, json
proto, sys.stdout = sys.stdout, sys.stderr  # the protocol's own stream: a library's prints go to stderr
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jaxknock
print("ready", file=proto, flush=True)
for line in sys.stdin:
    inp, out, seed = line.split()
    d = np.load(inp)
    t0 = time.perf_counter()
    sel = jaxknock.knockoff_filter(jax.random.key(int(seed)), d["X"], d["y"], fdr=float(d["fdr"]))
    t = time.perf_counter() - t0
    json.dump(dict(time=t, selected=sel.selected.tolist(), s_method=sel.settings["s_method"],
                   timings={k: float(v) for k, v in sel.timings.items()},
                   s_result=int(sel.s_solution.result), s_steps=int(sel.s_solution.stats.get("num_steps", -1))),
              open(out, "w"))
    print("done", file=proto, flush=True)
"""

_KNOCKPY_WORKER = """
import sys, time, json, warnings
proto, sys.stdout = sys.stdout, sys.stderr  # the protocol's own stream: a library's prints go to stderr
warnings.filterwarnings("ignore")
import numpy as np
from knockpy.knockoff_filter import KnockoffFilter
print("ready", file=proto, flush=True)
for line in sys.stdin:
    inp, out, seed = line.split()
    d = np.load(inp)
    np.random.seed(int(seed))
    t0 = time.perf_counter()
    rej = KnockoffFilter(ksampler="gaussian", fstat="lasso").forward(X=d["X"], y=d["y"], fdr=float(d["fdr"]))
    t = time.perf_counter() - t0
    json.dump(dict(time=t, selected=np.flatnonzero(rej).tolist()), open(out, "w"))
    print("done", file=proto, flush=True)
"""


class _Worker:
    """A library's long-lived process (``code`` run by ``python``), one filter call per :meth:`call`."""

    def __init__(self, python, code, tmp):
        self.python, self.code, self.tmp, self.proc = python, code, Path(tmp), None

    def start(self):
        script = self.tmp / f"worker_{id(self)}.py"
        script.write_text(textwrap.dedent(self.code))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [self.python, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{self.python} worker did not start")

    def call(self, inp, seed, timeout):
        """The worker's answer dict, or ``{"failed": why}`` when the call passed ``timeout`` s or the process died
        (the worker is then closed; the next call starts a new one)."""
        import select

        if self.proc is None:
            self.start()
        out = self.tmp / f"out_{id(self)}.json"
        self.proc.stdin.write(f"{inp} {out} {seed}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        answer = self.proc.stdout.readline().strip() if ready else "timeout"
        if answer != "done":
            self.close()
            return dict(failed=f"a call took > {timeout:.0f} s" if answer == "timeout" else "the process failed")
        return json.loads(out.read_text())

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _load():
    return os.getloadavg()[0]


def sweep(args):
    """The ``--sweep`` table (see the module docstring); returns its rows."""
    names = list(SWEEP)[:2] if args.small else (args.cases.split(",") if args.cases else list(SWEEP))
    kp_py = None if args.no_knockpy else _anchors.anchor_python("knockpy")
    rows = []
    print(f"# --sweep: jaxknock knockoff_filter defaults (x64) vs knockpy 1.3.5 default, fdr {args.fdr}")
    print(f"# warm = best of {args.repeats} interleaved calls (knockpy: 1 if a call > {args.kp_long:.0f} s)")
    with tempfile.TemporaryDirectory() as tmp:
        jk = _Worker(sys.executable, _JAXKNOCK_WORKER, tmp)
        kp = None if kp_py is None else _Worker(kp_py, _KNOCKPY_WORKER, tmp)
        if kp is not None:  # knockpy's first call in a process imports its stages: warm it up off the clock
            X, y, _ = sweep_data("small")
            np.savez(Path(tmp) / "warm.npz", X=X, y=y, fdr=np.array(args.fdr))
            kp.call(Path(tmp) / "warm.npz", 0, args.kp_timeout)
        for name in names:
            n, p, design, k, c = SWEEP[name]
            X, y, truth = sweep_data(name)
            inp = Path(tmp) / f"{name}.npz"
            np.savez(inp, X=X, y=y, fdr=np.array(args.fdr))
            load0 = _load()
            first = jk.call(inp, 0, 3 * args.kp_timeout)
            jk_runs, kp_runs, kp_note = [], [], ""
            for r in range(args.repeats):
                if kp is not None and not kp_note and (not kp_runs or kp_runs[-1]["time"] <= args.kp_long):
                    out = kp.call(inp, r + 1, args.kp_timeout)
                    if "failed" in out:
                        kp_note = f"knockpy skipped: {out['failed']}"
                    else:
                        kp_runs.append(out)
                jk_runs.append(jk.call(inp, r + 1, 3 * args.kp_timeout))
            load = max(load0, _load())
            best_jk = min(jk_runs, key=lambda o: o["time"])
            pw, fdp = power_fdp(best_jk["selected"], truth)
            row = dict(
                case=name, n=n, p=p, design=design, k=k, jk_first=first["time"], jk=best_jk["time"],
                jk_all=[o["time"] for o in jk_runs], s_method=best_jk["s_method"], jk_sel=len(best_jk["selected"]),
                jk_power=pw, jk_fdp=fdp, timings=best_jk["timings"], s_steps=best_jk["s_steps"], load=load,
            )  # fmt: skip
            line = (
                f"{name:7s} n={n:6d} p={p:5d} {design:5s} k={k:2d} | jk {row['s_method']:10s} first "
                f"{row['jk_first']:7.2f} s warm {row['jk']:7.2f} s (all {', '.join(f'{t:.2f}' for t in row['jk_all'])})"
                f" sel {row['jk_sel']:3d} power {pw:.2f} FDP {fdp:.2f}"
            )
            if kp_runs:
                best_kp = min(kp_runs, key=lambda o: o["time"])
                kpw, kfdp = power_fdp(best_kp["selected"], truth)
                row.update(kp=best_kp["time"], kp_all=[o["time"] for o in kp_runs], kp_sel=len(best_kp["selected"]),
                           kp_power=kpw, kp_fdp=kfdp, ratio=row["jk"] / best_kp["time"])  # fmt: skip
                line += (
                    f" | kp warm {row['kp']:7.2f} s (all {', '.join(f'{t:.2f}' for t in row['kp_all'])}) sel "
                    f"{row['kp_sel']:3d} power {kpw:.2f} FDP {kfdp:.2f} | ratio {row['ratio']:.2f}"
                )
            elif kp_note:
                line += f" | {kp_note}"
            stages = ", ".join(f"{k_} {v:.2f}" for k_, v in row["timings"].items())
            line += f" | load {load:.1f}\n        jk stages: {stages}; s steps {row['s_steps']}"
            print(line, flush=True)
            rows.append(row)
        jk.close()
        if kp is not None:
            kp.close()
    return rows


def fresh_process(python, code, arrays, *extra):
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.npz", Path(tmp) / "out.json"
        script = Path(tmp) / "run.py"
        script.write_text(textwrap.dedent(code))
        np.savez(inp, **arrays)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.run(
            [python, str(script), str(inp), str(out), *extra], capture_output=True, text=True, env=env
        )
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return None
        return json.loads(out.read_text())


def power_fdp(selected, truth):
    sel = np.zeros(truth.size, bool)
    sel[np.asarray(selected, int)] = True
    return sel[truth].mean(), (sel & ~truth).sum() / max(sel.sum(), 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--sizes", default="600:200,2000:1000", help="n:p pairs")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--fdr", type=float, default=0.1)
    ap.add_argument("--no-knockpy", action="store_true")
    ap.add_argument(
        "--replicates", type=int, default=10, help="also time jaxknock with this many replicates against one (1: skip)"
    )
    ap.add_argument(
        "--s-method",
        default="auto",
        help="jaxknock's s_method: 'auto' = the library default (mvr where p < n, mvr_factor where p >= n); "
        "knockpy always runs its default",
    )
    ap.add_argument("--sweep", action="store_true", help="the session-45 sweep of shapes and designs (SWEEP)")
    ap.add_argument("--cases", default=None, help="with --sweep: comma-separated SWEEP names (default: all)")
    ap.add_argument("--kp-long", type=float, default=60.0, help="--sweep: one knockpy call only past this (s)")
    ap.add_argument("--kp-timeout", type=float, default=300.0, help="--sweep: give up a call past this (s)")
    args = ap.parse_args(argv)
    if args.sweep:
        return sweep(args)
    sizes = [(300, 100)] if args.small else [tuple(map(int, s.split(":"))) for s in args.sizes.split(",")]
    kp = None if args.no_knockpy else _anchors.anchor_python("knockpy")
    rows = []
    for n, p in sizes:
        X, y, truth = make_data(0, n, p)
        s_method = args.s_method if args.s_method != "auto" else "default"
        arrays = dict(
            X=X,
            y=y,
            fdr=np.array(args.fdr),
            repeats=np.array(args.repeats),
            s_method=np.array(s_method),
            replicates=np.array(args.replicates),
        )
        print(f"n={n} p={p}: jaxknock s_method={s_method}", flush=True)
        with tempfile.TemporaryDirectory() as cache:
            res = {"jaxknock": fresh_process(sys.executable, _JAXKNOCK, arrays, cache)}
            res["jaxknock+cache"] = fresh_process(sys.executable, _JAXKNOCK, arrays, cache)
        if kp is not None:
            res["knockpy"] = fresh_process(kp, _KNOCKPY, arrays)
        for lib, r in res.items():
            if r is None:
                continue
            pw, fdp = power_fdp(r["selected"], truth)
            rows.append(dict(n=n, p=p, lib=lib, **{k: r[k] for k in ("import_", "first", "warm")}, power=pw, fdp=fdp))
            extra = f"  stages {r['timings']}" if "timings" in r else ""
            if r.get("replicates"):
                (one, t1), (many, tR) = sorted(r["replicates"].items(), key=lambda kv: int(kv[0]))
                extra += f"\n    R={many} warm {tR:.2f} s vs R={one} {t1:.2f} s (alternating calls): {tR / t1:.2f}x"
            print(
                f"n={n:5d} p={p:5d} {lib:14s} import {r['import_']:6.2f} s  first {r['first']:7.2f} s  "
                f"warm {r['warm']:7.2f} s  selected {len(r['selected']):3d}  power {pw:.2f}  FDP {fdp:.2f}{extra}",
                flush=True,
            )
        b = res.get("knockpy")
        for lib in ("jaxknock", "jaxknock+cache"):
            a = res.get(lib)
            if a and b:
                print(
                    f"    ratio {lib}/knockpy: warm {a['warm'] / b['warm']:.2f}x, "
                    f"fresh process (import + first) {(a['import_'] + a['first']) / (b['import_'] + b['first']):.2f}x",
                    flush=True,
                )
    return rows


if __name__ == "__main__":
    main()
