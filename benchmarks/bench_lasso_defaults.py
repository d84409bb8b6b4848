"""``jaxknock.lasso_cv`` / ``lasso_path`` with their defaults against scikit-learn's defaults, on plain designs.

What a user who swaps ``sklearn.linear_model.LassoCV(cv=KFold(5))`` (or
``lasso_path``) for jaxknock sees: 5 folds, 100 penalties from ``lambda_max``
to ``1e-3 lambda_max``, the whole grid (no early stop, as scikit-learn),
refit on all rows. Designs (``design``): iid Gaussian or AR(1) columns,
``max(1, m // 20)`` signals of amplitude ``+-3 / sqrt(log m + 1)``, N(0, 1)
noise; tall (``n > m``), square-ish and wide (``m > n``) shapes.

Per case, jaxknock runs in a fresh process (``first``: the first call, compile
included, after the import; ``warm``: best of ``--repeats`` later calls) and
scikit-learn in this one (best of ``--repeats``). Also printed: the chosen
penalty index of both (jaxknock's fits are exact, KKT ~1e-12 in float64;
scikit-learn's stop at its default ``tol=1e-4``, which on wide designs moves its
CV curve and its choice), and the time ratios jaxknock / scikit-learn. With
``--float32`` jaxknock runs with JAX's default x64 off (float32 engine,
certified, and solved again in float64 where the float32 path loses its
certificate: ``float64_refit``).

    python benchmarks/bench_lasso_defaults.py --small
    python benchmarks/bench_lasso_defaults.py                 # the session-46 table
    python benchmarks/bench_lasso_defaults.py --cases 4000:500:0 --float32
    python benchmarks/bench_lasso_defaults.py --single        # lasso(X, y, lam) against Lasso(alpha=lam)

``--single`` times the one-penalty solve instead: ``jaxknock.lasso(X, y, lam)``
against ``sklearn.linear_model.Lasso(alpha=lam)``, both with their defaults, at
``lam = frac * lambda_max`` for cases ``n:m:rho:frac`` (the session-47 table),
and prints both relative KKT residuals ``max_j dist(g_j, lam d|b_j|) / lam``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

CASES = ["1000:100:0", "5000:200:0", "4000:500:0", "2000:500:0.7", "600:300:0.5", "300:1000:0", "500:2000:0"]
SMALL = ["1000:100:0", "600:300:0.5"]
SINGLE = ["4000:500:0:0.1", "4000:500:0:0.01", "2000:500:0.7:0.05", "300:1000:0:0.1", "500:2000:0:0.05"]


def design(n, m, rho, seed=0):
    """``(X, y)``: iid (``rho = 0``) or AR(1) columns, ``max(1, m // 20)`` signals, N(0, 1) noise."""
    r = np.random.default_rng(seed)
    if rho > 0:
        X = np.empty((n, m))
        X[:, 0] = r.standard_normal(n)
        for j in range(1, m):
            X[:, j] = rho * X[:, j - 1] + np.sqrt(1 - rho**2) * r.standard_normal(n)
    else:
        X = r.standard_normal((n, m))
    b = np.zeros(m)
    k = max(1, m // 20)
    b[r.choice(m, k, replace=False)] = r.choice([-1, 1], k) * 3 / np.sqrt(np.log(m) + 1)
    return X, X @ b + r.standard_normal(n)


_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import jax
if sys.argv[3] == "64":
    jax.config.update("jax_enable_x64", True)
import numpy as np
import jaxknock
t_import = time.perf_counter() - t0
d = np.load(sys.argv[1]); X, y, repeats = d["X"], d["y"], int(d["repeats"])
out = {"import": t_import}
lam = float(d["lam"]) if "lam" in d else None
fits = (("lasso", lambda X, y: jaxknock.lasso(X, y, lam)),) if lam else (
    ("lasso_cv", jaxknock.lasso_cv), ("lasso_path", jaxknock.lasso_path))
for name, f in fits:
    ts = []
    for _ in range(1 + repeats):
        t = time.perf_counter(); sol = f(X, y); jax.block_until_ready(sol.value); ts.append(time.perf_counter() - t)
    out[name] = {"first": ts[0], "warm": min(ts[1:]), "result": np.asarray(sol.result).max().item()}
    if name == "lasso":
        out[name].update(coef=np.asarray(sol.value, float).tolist(), steps=int(sol.stats["num_steps"]))
    if name == "lasso_cv":
        out[name].update(index=int(sol.stats["lam_index"]), refit=bool(np.any(sol.stats.get("float64_refit", False))),
                         kkt=float(sol.stats.get("kkt", np.nan)))
json.dump(out, open(sys.argv[2], "w"))
"""


def run_jaxknock(X, y, repeats, x64, tmp, lam=None):
    data, res = os.path.join(tmp, "d.npz"), os.path.join(tmp, "r.json")
    np.savez(data, X=X, y=y, repeats=repeats, **({} if lam is None else {"lam": lam}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd()] + sys.path))
    subprocess.run([sys.executable, "-c", _CHILD, data, res, "64" if x64 else "32"], check=True, env=env)
    with open(res) as f:
        return json.load(f)


def run_sklearn(X, y, repeats):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LassoCV, lasso_path
    from sklearn.model_selection import KFold

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            model = LassoCV(cv=KFold(5)).fit(X, y)
            ts.append(time.perf_counter() - t)
        out["lasso_cv"] = {"warm": min(ts), "index": int(np.flatnonzero(model.alphas_ == model.alpha_)[0])}
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            lasso_path(X - X.mean(0), y - y.mean())  # its grid and centring, as lasso_cv's inner paths
            ts.append(time.perf_counter() - t)
        out["lasso_path"] = {"warm": min(ts)}
    return out


def kkt_residual(X, y, coef, lam):
    """``max_j dist(g_j, lam d|b_j|) / lam`` with ``g = X_c^T (y_c - X_c b) / n`` (intercept fitted)."""
    Xc = X - X.mean(0)
    g = Xc.T @ (y - y.mean() - Xc @ coef) / len(y)
    return float(np.max(np.where(coef != 0, np.abs(g - lam * np.sign(coef)), np.maximum(np.abs(g) - lam, 0))) / lam)


def run_single(cases, repeats, x64):
    """``jaxknock.lasso`` against ``sklearn.linear_model.Lasso`` at ``frac * lambda_max``, both defaults."""
    import tempfile

    from sklearn.linear_model import Lasso

    for case in cases:
        n, m, rho, frac = case.split(":")
        X, y = design(int(n), int(m), float(rho))
        lam = float(frac) * np.max(np.abs((X - X.mean(0)).T @ (y - y.mean()))) / len(y)
        with tempfile.TemporaryDirectory() as tmp:
            a = run_jaxknock(X, y, repeats, x64, tmp, lam=lam)["lasso"]
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            model = Lasso(alpha=lam).fit(X, y)
            ts.append(time.perf_counter() - t)
        coef = np.asarray(a["coef"])
        print(
            f"{case:>18} lasso jaxknock first {a['first']:6.2f} s warm {a['warm'] * 1e3:7.1f} ms result {a['result']}"
            f" epochs {a['steps']} | sklearn {min(ts) * 1e3:7.1f} ms epochs {model.n_iter_}"
            f" | ratio warm {a['warm'] / min(ts):5.2f}x | kkt {kkt_residual(X, y, coef, lam):.1e}"
            f" vs {kkt_residual(X, y, model.coef_, lam):.1e}",
            flush=True,
        )


def main(argv=None):
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="two small cases")
    ap.add_argument("--cases", nargs="*", default=None, help="n:m:rho triples (rho 0: iid)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--float32", action="store_true", help="jaxknock with x64 off (JAX's default)")
    ap.add_argument("--single", action="store_true", help="lasso at one penalty; cases n:m:rho:frac")
    args = ap.parse_args(argv)
    print(f"jaxknock {'float32 (x64 off)' if args.float32 else 'float64'}; scikit-learn float64 defaults")
    if args.single:
        return run_single(args.cases or SINGLE, max(args.repeats, 3), not args.float32)
    cases = args.cases or (SMALL if args.small else CASES)
    for case in cases:
        n, m, rho = case.split(":")
        X, y = design(int(n), int(m), float(rho))
        with tempfile.TemporaryDirectory() as tmp:
            jk = run_jaxknock(X, y, args.repeats, not args.float32, tmp)
        sk = run_sklearn(X, y, args.repeats)
        for name in ("lasso_cv", "lasso_path"):
            a, b = jk[name], sk[name]
            extra = ""
            if name == "lasso_cv":
                extra = f"  index {a['index']} vs {b['index']}  kkt {a['kkt']:.1e}  float64_refit {a['refit']}"
            print(
                f"{case:>12} {name:<10} jaxknock first {a['first']:6.2f} s warm {a['warm']:7.3f} s result {a['result']}"
                f" | sklearn {b['warm']:7.3f} s | ratio warm {a['warm'] / b['warm']:5.2f}x"
                f"  first {(jk['import'] + a['first']) / b['warm']:6.1f}x{extra}",
                flush=True,
            )


if __name__ == "__main__":
    main()
