"""Side-by-side timing of the lasso / l1-logistic CV engine (``jaxknock.l1.working_set``).

Design: a knockoff-augmented design ``[X, X~]`` (``n x 2p``) with ``X`` block
equicorrelated (blocks of 20, rho = 0.5, unit variances), Gaussian
equicorrelated knockoffs (``s = 0.99 min(1, 2 lambda_min)``), 20 signals of
amplitude ``+-8 / sqrt(n)`` plus N(0, 1) noise (squared loss), or labels
``y ~ Bernoulli(sigmoid(X beta))`` (logistic). Every method runs 5-fold CV
over 100 lambdas from ``lambda_max`` to ``1e-3 lambda_max`` and refits on all
rows. Anchors, in the same run: scikit-learn ``LassoCV`` /
``LogisticRegressionCV`` (saga, l1) in this venv, and adelie ``cv_grpnet``
(+ ``fit``, the refit) in its own venv (``_anchors.py``), once with the same
grid (``min_ratio=1e-3``) and once with adelie's default (``min_ratio=0.1``).
The ``R``-replicate rows run the batch one replicate after another
(``batch_mode="sequential"``, the CPU default) and in lock step (one path
loop for all replicates, the accelerator default). Times are best of
``--repeats`` after a warm-up call; the KKT residual is
``max_j dist(g_j, lam d|b_j|) / lam`` of the returned full-data fit,
computed here in float64 for every method.

    python benchmarks/bench_statistics.py --small     # < 1 minute smoke run
    python benchmarks/bench_statistics.py             # the issue-17 table
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _anchors  # noqa: E402

from jaxknock.l1.working_set import l1_cv  # noqa: E402

_anchors.ANCHORS.setdefault("adelie", [["adelie", "scikit-learn"]])


def make_design(seed, n, p, *, loss="squared", block=20, rho=0.5, nnz=20, amplitude=8.0):
    """``([X, X~], y, support)`` for the benchmark design."""
    rng = np.random.default_rng(seed)
    B = np.full((block, block), rho) + (1 - rho) * np.eye(block)
    Lb = np.linalg.cholesky(B)
    nb = p // block
    Z = rng.standard_normal((n, nb, block))
    X = (Z @ Lb.T).reshape(n, p)
    lam_min = 1 - rho
    s = 0.99 * min(1.0, 2 * lam_min)
    # X~ = X (I - Sigma^-1 S) + U C, C^T C = 2S - S Sigma^-1 S, blockwise
    Binv = np.linalg.inv(B)
    A = np.eye(block) - s * Binv
    Cb = np.linalg.cholesky(2 * s * np.eye(block) - s * s * Binv + 1e-12 * np.eye(block))
    U = rng.standard_normal((n, nb, block))
    Xk = (X.reshape(n, nb, block) @ A.T + U @ Cb.T).reshape(n, p)
    Xa = np.concatenate([X, Xk], axis=1)
    support = np.zeros(2 * p)
    idx = rng.choice(p, nnz, replace=False)
    support[idx] = rng.choice([-1.0, 1.0], nnz)
    eta = X @ (support[:p] * amplitude / np.sqrt(n))
    if loss == "squared":
        y = eta + rng.standard_normal(n)
    else:
        y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    return Xa, y, support


def kkt(X, y, b, b0, lam, loss):
    """Relative KKT residual of a full-data fit (float64, numpy)."""
    n = X.shape[0]
    eta = b0 + X @ b
    mu = 1 / (1 + np.exp(-eta)) if loss == "logistic" else eta
    r = y - mu
    g = (X.T @ r - X.sum(0) * r.mean()) / n
    v = np.where(b != 0, np.abs(g - lam * np.sign(b)), np.maximum(np.abs(g) - lam, 0))
    return float(v.max() / lam)


def best_of(fn, repeats):
    fn()
    ts = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), out


def run_jaxknock(X, y, loss, repeats, **kw):
    # a batch of logistic replicates has different labels per row, so it cannot be stratified
    # by them: it gets the same interleaved fold ids in every row
    folds = np.arange(X.shape[-2]) % 5 if (X.ndim == 3 and loss == "logistic") else 5

    def fn():
        sol = l1_cv(X, y, folds=folds, num_lambdas=100, eps=1e-3, loss=loss, tol=1e-4, **kw)
        jax.block_until_ready(sol)
        return sol

    t, sol = best_of(fn, repeats)
    st = sol.stats
    if X.ndim == 3:
        b, b0, lam = np.asarray(sol.value[0]), float(st["intercept"][0]), float(st["lam"][0])
        idx = int(st["lam_index"][0])
        X, y = X[0], y[0]
        lam_all = np.asarray(st["lam_index"])
    else:
        b, b0, lam, idx = np.asarray(sol.value), float(st["intercept"]), float(st["lam"]), int(st["lam_index"])
        lam_all = None
    return dict(
        time=t,
        lam=lam,
        idx=idx,
        nnz=int((b != 0).sum()),
        kkt=kkt(np.asarray(X), np.asarray(y), b, b0, lam, loss),
        code=int(np.max(np.asarray(sol.result))),
        solved=int(np.max(np.asarray(st["num_lambdas_solved"]))),
        lam_all=lam_all,
    )


def run_sklearn(X, y, loss, repeats, lambdas):
    from sklearn.linear_model import LassoCV, LogisticRegressionCV
    from sklearn.model_selection import KFold

    n = X.shape[0]

    def fn():
        if loss == "squared":
            return LassoCV(alphas=lambdas, cv=KFold(5), tol=1e-4, max_iter=10_000).fit(X, y)
        return LogisticRegressionCV(
            Cs=1 / (0.8 * n * lambdas),
            cv=KFold(5),
            l1_ratios=[1.0],
            solver="saga",
            tol=1e-4,
            max_iter=1000,
            scoring="neg_log_loss",
            random_state=0,
            use_legacy_attributes=False,
        ).fit(X, y)

    t, est = best_of(fn, repeats)
    if loss == "squared":
        lam, b, b0 = float(est.alpha_), est.coef_, float(est.intercept_)
    else:
        lam, b, b0 = float(1 / (n * est.C_)), est.coef_.ravel(), float(est.intercept_.ravel()[0])
    idx = int(np.argmin(np.abs(np.log(lambdas) - np.log(lam))))
    return dict(time=t, lam=lam, idx=idx, nnz=int((b != 0).sum()), kkt=kkt(X, y, b, b0, lam, loss))


_ADELIE = """
import time
import adelie as ad
X = np.asfortranarray(inputs["X"]); y = inputs["y"]
loss = str(inputs["loss"]); repeats = int(inputs["repeats"]); min_ratio = float(inputs["min_ratio"])
def fn():
    glm = ad.glm.gaussian(y) if loss == "squared" else ad.glm.binomial(y)
    cv = ad.cv_grpnet(X, glm, n_folds=5, seed=0, min_ratio=min_ratio, lmda_path_size=100, progress_bar=False)
    st = cv.fit(X, glm, progress_bar=False)
    return cv, st
fn()
ts = []
for _ in range(repeats):
    t0 = time.perf_counter(); cv, st = fn(); ts.append(time.perf_counter() - t0)
b = st.betas[-1].toarray().ravel()
report(dict(time=min(ts), lam=float(cv.lmdas[cv.best_idx]), idx=int(cv.best_idx), b=b.tolist(),
            b0=float(st.intercepts[-1]), lmdas=cv.lmdas.tolist()))
"""


def run_adelie(X, y, loss, repeats, min_ratio):
    out = _anchors.run_anchor(
        "adelie", _ADELIE, dict(X=X, y=y, loss=np.array(loss), repeats=np.array(repeats), min_ratio=np.array(min_ratio))
    )
    if out is None:
        return None
    b = np.asarray(out["b"])
    return dict(
        time=out["time"],
        lam=out["lam"],
        idx=out["idx"],
        nnz=int((b != 0).sum()),
        kkt=kkt(X, y, b, out["b0"], out["lam"], loss),
    )


def fmt(name, r, anchor_times):
    if r is None:
        return f"  {name:<28} n/a"
    ratios = " ".join(f"{k}={r['time'] / v:.2f}x" for k, v in anchor_times.items() if v)
    return (
        f"  {name:<28} {r['time']:8.3f} s  lam={r['lam']:.4g} (idx {r['idx']:>3})  nnz={r['nnz']:>4}  "
        f"kkt={r['kkt']:.1e}  {ratios}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="< 1 minute smoke run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--losses", nargs="*", default=["squared", "logistic"])
    ap.add_argument("--sizes", nargs="*", default=None, help="n:2p pairs, e.g. 2000:2000")
    ap.add_argument("--R", type=int, default=10, help="replicates of the batched run (smallest size only)")
    ap.add_argument("--no-sklearn", action="store_true")
    ap.add_argument("--full-path", action="store_true", help="also time early_stop=False (the whole grid)")
    ap.add_argument("--no-adelie", action="store_true")
    ap.add_argument("--adelie-default-only", action="store_true", help="skip adelie on the same grid (slow)")
    ap.add_argument("--old", action="store_true", help="also time jaxknock.lasso_cv (smallest size, 60 s budget)")
    args = ap.parse_args(argv)
    if args.small:
        sizes = [(400, 400)]
        args.repeats = 1
        args.R = 4
    elif args.sizes:
        sizes = [tuple(int(v) for v in s.split(":")) for s in args.sizes]
    else:
        sizes = [(2000, 2000), (5000, 10000), (1000, 20000)]
    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}; float64; best of {args.repeats}; 5 folds x 100 lambdas"
    )
    for loss in args.losses:
        for si, (n, m) in enumerate(sizes):
            X, y, _ = make_design(0, n, m // 2, loss=loss)
            print(f"\n{loss} n={n} 2p={m}")
            r = run_jaxknock(X, y, loss, args.repeats)
            r_full = run_jaxknock(X, y, loss, args.repeats, early_stop=False) if args.full_path else None
            lmax = float(np.max(np.abs((X - X.mean(0)).T @ (y - y.mean()))) / n)
            lambdas = lmax * np.geomspace(1, 1e-3, 100)
            anchors = {}
            if not args.no_adelie:
                if not args.adelie_default_only:
                    anchors["adelie"] = run_adelie(X, y, loss, args.repeats, 1e-3)
                a10 = run_adelie(X, y, loss, args.repeats, 0.1)
                anchors["adelie(0.1)"] = a10
            if not args.no_sklearn and (n * m <= 4_000_000 or not args.small):
                anchors["sklearn"] = run_sklearn(X, y, loss, args.repeats if n * m <= 4_000_000 else 1, lambdas)
            times = {k: (v["time"] if v else None) for k, v in anchors.items()}
            print(fmt("jaxknock l1_cv", r, times) + f"  [solved {r['solved']}/100, code {r['code']}]")
            if r_full is not None:
                print(fmt("jaxknock l1_cv early_stop=0", r_full, times) + f"  [code {r_full['code']}]")
            for k, v in anchors.items():
                print(fmt(k, v, {}))
            if si == 0 and args.R > 1:
                Xs, ys = zip(*[make_design(s, n, m // 2, loss=loss)[:2] for s in range(args.R)])
                # batch_mode="auto" is sequential on the CPU; the lock step is the homotopy engine's (squared loss)
                for mode in ("sequential", "lockstep") if loss == "squared" else ("sequential",):
                    rR = run_jaxknock(np.stack(Xs), np.stack(ys), loss, args.repeats, batch_mode=mode)
                    print(fmt(f"jaxknock l1_cv R={args.R} {mode}", rR, {"R=1": r["time"]}))
            if si == 0 and args.old and loss == "squared":
                print("  jaxknock.lasso_cv (old): " + time_old(X, y))


def time_old(X, y, budget=60.0):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_old_worker, args=(X, y, q))
    p.start()
    p.join(budget)
    if p.is_alive():
        p.terminate()
        p.join()
        return "> 60 s"
    return f"{q.get():.2f} s (first call, includes compile)"


def _old_worker(X, y, q):
    jax.config.update("jax_enable_x64", True)
    from jaxknock import lasso_cv

    t0 = time.perf_counter()
    jax.block_until_ready(lasso_cv(X, y, folds=5, num_lambdas=100))
    q.put(time.perf_counter() - t0)


if __name__ == "__main__":
    main()
