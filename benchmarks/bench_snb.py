"""Sparse naive Bayes side by side: accuracy as a feature selector, and scale.

Accuracy (thesis chapter 5, experiment 1). For every data set, 5 random
stratified 75/25 train/test splits (CountVectorizer counts fitted on the
training part) and every ``k``: select ``k`` features with

* ``snb``       -- jaxknock sparse multinomial naive Bayes (this library),
* ``snb-bern``  -- jaxknock sparse Bernoulli naive Bayes on ``X > 0`` (exact),
* ``chi2``      -- ``SelectKBest(chi2, k)``,
* ``tmnb``      -- thresholded multinomial NB: the ``k`` largest
  ``max_c log theta_c - min_c log theta_c`` of ``MultinomialNB``,
* ``l1-lr``     -- l1 logistic regression (liblinear), ``C`` bisected until at
  least ``k`` coefficients are non-zero, then the ``k`` largest ``|coef|``
  (its fit time includes that search),

then train ``MultinomialNB`` and ``LogisticRegression`` (on max-abs scaled
counts) on the selected columns
and report test accuracy (mean over splits) and the selector's fit time. The
``vs chi2`` columns are paired accuracy differences to ``chi2`` on the same
splits (the issue's target: ``>= 0`` at every ``k``): mean +- standard deviation
over splits, the paired t statistic and wins/ties/losses, so that a miss can be
told apart from split noise. Corpora: movie reviews (Pang & Lee 2004) and sentence
polarity (Pang & Lee 2005) from ``$JAXKNOCK_DATA`` or ``../shared/data``
(skipped when absent), and scikit-learn's digits (pixel intensities 0..16 as
counts, 10 classes; ``k`` in 10, 20, 40 since it has 64 features).

Scale. Synthetic CSR count matrices with ``m`` features and ``nnz`` non-zeros
(1e6 rows, power-law feature frequencies, two classes). Times: validation plus
class sums (``class_sums``), the dual solve alone, the full fit from the sums
(dual + primal recovery), end to end (sums + fit), scikit-learn's
``MultinomialNB().fit`` on the same matrix for reference, and a 100-point
``k``-path. jaxknock timings are after a warm-up call (compilation is printed
separately) except the path, which is timed once including its compilation.

Usage::

    python benchmarks/bench_snb.py            # full run (tens of minutes on 2 cores)
    python benchmarks/bench_snb.py --small    # smoke run, well under a minute
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import time
import zipfile
from pathlib import Path

import jax
import numpy as np

from jaxknock import SparseNaiveBayes
from jaxknock.naive_bayes import (
    class_sums,
    dual,
    sparse_naive_bayes,
    sparse_naive_bayes_path,
)

# ------------------------------------------------------------------ data


def data_dir() -> Path:
    env = os.environ.get("JAXKNOCK_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def load_movie_reviews():
    path = data_dir() / "movie_reviews.zip"
    if not path.exists():
        return None
    docs, labels = [], []
    with zipfile.ZipFile(path) as zf:
        for name in sorted(zf.namelist()):
            if name.endswith(".txt") and ("/pos/" in name or "/neg/" in name):
                docs.append(zf.read(name).decode("utf-8", errors="replace"))
                labels.append(1 if "/pos/" in name else 0)
    return docs, np.array(labels)


def load_sentence_polarity():
    path = data_dir() / "sentence_polarity.zip"
    if not path.exists():
        return None
    docs, labels = [], []
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            for label, suffix in ((1, "rt-polarity.pos"), (0, "rt-polarity.neg")):
                if name.endswith(suffix):
                    text = io.TextIOWrapper(zf.open(name), encoding="latin-1").read()
                    lines = [line for line in text.splitlines() if line.strip()]
                    docs += lines
                    labels += [label] * len(lines)
    return docs, np.array(labels)


def load_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data.astype(np.int64), d.target


# ------------------------------------------------------------------ selectors


def select_snb(X, y, k, model="multinomial"):
    if model == "bernoulli":  # the exact Bernoulli model needs binary data
        if hasattr(X, "tocsr"):
            X = X.copy()
            X.data = (X.data > 0).astype(np.float64)
        else:
            X = (X > 0).astype(np.float64)
    sel = SparseNaiveBayes(k=k, model=model, alpha=1.0).fit(X, y)
    return sel.get_support(indices=True), {"gap": sel.gap_, "psi": sel.psi_, "code": sel.result_}


def select_chi2(X, y, k):
    from sklearn.feature_selection import SelectKBest, chi2

    return SelectKBest(chi2, k=k).fit(X, y).get_support(indices=True), {}


def select_tmnb(X, y, k):
    from sklearn.naive_bayes import MultinomialNB

    logp = MultinomialNB(alpha=1.0).fit(X, y).feature_log_prob_
    score = logp.max(axis=0) - logp.min(axis=0)
    return np.argsort(-score, kind="stable")[:k], {}


def select_l1(X, y, k, max_fits=14):
    """Bisection on log C for l1 logistic regression until >= k non-zeros."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    multiclass = len(np.unique(y)) > 2

    def fit(C):
        lr = LogisticRegression(l1_ratio=1.0, solver="liblinear", C=C, max_iter=200)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            if multiclass:  # liblinear is binary: one-vs-rest, union of the supports
                ovr = OneVsRestClassifier(lr).fit(X, y)
                coef = np.vstack([e.coef_ for e in ovr.estimators_])
            else:
                coef = lr.fit(X, y).coef_
        return np.abs(coef).max(axis=0)

    lo, hi = -4.0, 2.0
    best = None
    for _ in range(max_fits):
        mid = 0.5 * (lo + hi)
        coef = fit(10.0**mid)
        nnz = int(np.sum(coef > 0))
        if nnz >= k:
            best = coef
            hi = mid
            if nnz <= 1.3 * k:
                break
        else:
            lo = mid
    if best is None:
        best = fit(10.0**hi)
    nnz = int(np.sum(best > 0))
    return np.argsort(-best, kind="stable")[:k], {"short": nnz < k}


SELECTORS = {
    "snb": lambda X, y, k: select_snb(X, y, k, "multinomial"),
    "snb-bern": lambda X, y, k: select_snb(X, y, k, "bernoulli"),
    "chi2": select_chi2,
    "tmnb": select_tmnb,
    "l1-lr": select_l1,
}


def second_stage(Xtr, ytr, Xte, yte, idx):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MaxAbsScaler

    Xtr_k, Xte_k = Xtr[:, idx], Xte[:, idx]
    acc_mnb = np.mean(MultinomialNB(alpha=1.0).fit(Xtr_k, ytr).predict(Xte_k) == yte)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # scaled (sparsity-preserving) counts: lbfgs converges in few iterations
        lr = make_pipeline(MaxAbsScaler(), LogisticRegression(max_iter=1000)).fit(Xtr_k, ytr)
    acc_lr = np.mean(lr.predict(Xte_k) == yte)
    return acc_mnb, acc_lr


# ------------------------------------------------------------------ accuracy


def accuracy_benchmark(name, make_split, ks, splits, methods):
    """make_split(seed) -> Xtr, ytr, Xte, yte."""
    res = {(mth, k): {"mnb": [], "lr": [], "time": []} for mth in methods for k in ks}
    notes = []
    for seed in range(splits):
        Xtr, ytr, Xte, yte = make_split(seed)
        if "snb" in methods or "snb-bern" in methods:  # warm-up: compile for this shape
            for mth in ("snb", "snb-bern"):
                if mth in methods:
                    SELECTORS[mth](Xtr, ytr, min(ks))
        for k in ks:
            for mth in methods:
                t0 = time.perf_counter()
                idx, info = SELECTORS[mth](Xtr, ytr, k)
                dt = time.perf_counter() - t0
                acc_mnb, acc_lr = second_stage(Xtr, ytr, Xte, yte, idx)
                r = res[(mth, k)]
                r["mnb"].append(acc_mnb)
                r["lr"].append(acc_lr)
                r["time"].append(dt)
                if info.get("short"):
                    notes.append(f"{mth} k={k} split {seed}: fewer than k non-zeros")
                if mth.startswith("snb") and info.get("code", 0) != 0:
                    notes.append(f"{mth} k={k} split {seed}: result code {info['code']}")
    print(
        f"\n== {name}: {Xtr.shape[1]} features (last split), {Xtr.shape[0]} train / "
        f"{Xte.shape[0]} test, {splits} split(s) =="
    )
    head = (
        f"{'k':>5} {'method':>9} | {'acc MNB':>15} {'vs chi2 (paired)':>22} | {'acc LR':>15} "
        f"{'vs chi2 (paired)':>22} | {'fit s':>8} {'/ snb':>7}"
    )
    print(head)
    print("-" * len(head))
    for k in ks:
        ref = res.get(("chi2", k))
        snb_t = np.median(res[("snb", k)]["time"]) if ("snb", k) in res else np.nan
        for mth in methods:
            r = res[(mth, k)]
            cells = []
            for stage in ("mnb", "lr"):
                acc = np.asarray(r[stage])
                cells.append(f"{acc.mean():.4f}+-{acc.std(ddof=1) if len(acc) > 1 else 0:.4f}")
                cells.append(paired(acc, np.asarray(ref[stage])) if ref and mth != "chi2" else "")
            t = np.median(r["time"])
            print(
                f"{k:>5} {mth:>9} | {cells[0]:>15} {cells[1]:>22} | {cells[2]:>15} {cells[3]:>22} | "
                f"{t:8.3f} {t / snb_t:7.1f}"
            )
    for n in notes:
        print("note:", n)
    return res


def paired(acc, ref):
    """Paired difference to the reference over the same splits: ``mean +- sd t=..`` and
    the sign count ``wins/ties/losses``; ``t`` is the paired t statistic (|t| > 2.78
    is significant at 5% for 5 splits)."""
    d = acc - ref
    if len(d) < 2:
        return f"{d.mean():+.4f}"
    sd = d.std(ddof=1)
    t = d.mean() / (sd / np.sqrt(len(d))) if sd > 0 else (0.0 if d.mean() == 0 else np.inf * np.sign(d.mean()))
    w, ti, lo = int(np.sum(d > 0)), int(np.sum(d == 0)), int(np.sum(d < 0))
    return f"{d.mean():+.4f}+-{sd:.4f} t={t:+.1f} {w}/{ti}/{lo}"


def text_splits(docs, y, test_size=0.25):
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.model_selection import train_test_split

    def make(seed):
        tr, te = train_test_split(np.arange(len(y)), test_size=test_size, random_state=seed, stratify=y)
        vec = CountVectorizer()
        Xtr = vec.fit_transform([docs[i] for i in tr]).astype(np.float64)
        Xte = vec.transform([docs[i] for i in te]).astype(np.float64)
        return Xtr, y[tr], Xte, y[te]

    return make


def dense_splits(X, y, test_size=0.25):
    from sklearn.model_selection import train_test_split

    def make(seed):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, random_state=seed, stratify=y)
        return Xtr, ytr, Xte, yte

    return make


# ------------------------------------------------------------------ scale


def synthetic_csr(m, nnz, n_rows, seed=0):
    """Power-law feature frequencies; class 1 re-ranks the 2000 most frequent words."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    y = (rng.random(n_rows) < 0.5).astype(np.int8)
    per_row = nnz // n_rows
    indptr = np.arange(0, per_row * n_rows + 1, per_row, dtype=np.int64)
    u = rng.random(per_row * n_rows, dtype=np.float32)
    idx = (m * u**3).astype(np.int32)  # density ~ x^(-2/3): a few very frequent words
    del u
    np.minimum(idx, m - 1, out=idx)
    rows1 = np.repeat(y.astype(bool), per_row)
    top = idx < 2000
    shift = rows1 & top
    idx[shift] = (idx[shift] + 7) % 2000
    del rows1, top, shift
    data = np.ones(idx.shape[0], np.float32)
    X = sp.csr_matrix((data, idx, indptr), shape=(n_rows, m))
    return X, y


def timed(fn, repeat=1):
    best = np.inf
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        jax.block_until_ready(jax.tree_util.tree_leaves(out)) if out is not None else None
        best = min(best, time.perf_counter() - t0)
    return best, out


def scale_benchmark(ms, nnz, n_rows, k, path_points):
    from sklearn.naive_bayes import MultinomialNB

    solve = jax.jit(dual.solve_dual, static_argnames=("max_steps",))
    rows = []
    for m in ms:
        t0 = time.perf_counter()
        X, y = synthetic_csr(int(m), int(nnz), int(n_rows))
        t_gen = time.perf_counter() - t0
        t_sums, sums = timed(lambda: class_sums(X, y, model="multinomial"))
        kk = min(k, int(m))
        t0 = time.perf_counter()
        sol = sparse_naive_bayes(sums, None, kk)
        jax.block_until_ready(sol.value.theta)
        t_first = time.perf_counter() - t0
        t_fit, sol = timed(lambda: sparse_naive_bayes(sums, None, kk), repeat=2)
        pb = dual.multinomial_problem(sums.counts, 1.0)
        jax.block_until_ready(solve(pb, kk, 1e-10, max_steps=100))
        t_dual, dsol = timed(lambda: solve(pb, kk, 1e-10, max_steps=100), repeat=2)
        t_mnb, _ = timed(lambda: MultinomialNB().fit(X, y))
        ks = np.unique(np.geomspace(1, m, path_points).astype(np.int64))
        t_path, path = timed(lambda: sparse_naive_bayes_path(sums, None, ks))
        rows.append(
            dict(
                m=int(m),
                nnz=int(X.nnz),
                gen=t_gen,
                sums=t_sums,
                dual=t_dual,
                steps=int(dsol.num_steps),
                fit=t_fit,
                first=t_first,
                e2e=t_sums + t_fit,
                mnb=t_mnb,
                path=t_path,
                npath=len(ks),
                pathsteps=int(np.max(path.stats["num_steps"])),
                gap=float(sol.stats["gap"]),
                rgap=float(sol.stats["gap"]) / abs(float(sol.stats["psi"])),
                pathgap=float(np.max(path.value.gap[ks >= 8] / np.abs(path.value.psi[ks >= 8]))),
                codes=int(np.sum(np.asarray(path.result) != 0)),
            )
        )
        del X, y, sums, pb
        gc.collect()
        r = rows[-1]
        print(f"  m={r['m']:.0e}: generated in {r['gen']:.1f}s; first fit (compile) {r['first']:.2f}s", flush=True)
    print(
        f"\n== scale: two classes, {nnz:.0e} non-zeros, {n_rows:.0e} rows, k = {k}, "
        f"CPU ({jax.devices()[0].device_kind}) =="
    )
    head = (
        f"{'m':>8} | {'sums s':>7} {'dual s':>7} {'steps':>5} {'fit s':>7} {'e2e s':>7} | "
        f"{'MNB s':>7} {'e2e/MNB':>7} | {'gap/|psi|':>9} | {'path s':>7} {'#k':>4} "
        f"{'max steps':>9} {'max gap/|psi| (k>=8)':>20} {'failed':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['m']:8.0e} | {r['sums']:7.2f} {r['dual']:7.3f} {r['steps']:5d} {r['fit']:7.3f} "
            f"{r['e2e']:7.2f} | {r['mnb']:7.2f} {r['e2e'] / r['mnb']:7.2f} | {r['rgap']:9.1e} | "
            f"{r['path']:7.1f} {r['npath']:4d} {r['pathsteps']:9d} {r['pathgap']:20.1e} "
            f"{r['codes']:6d}"
        )
    return rows


# ------------------------------------------------------------------ main


def main(argv=None):
    jax.config.update("jax_enable_x64", True)  # here, not at import: other benchmarks import the loaders
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="smoke run (well under a minute)")
    ap.add_argument("--splits", type=int, default=None)
    ap.add_argument(
        "--scale", type=float, nargs="*", default=None, help="feature counts m for the scale runs (default 1e5 1e6 1e7)"
    )
    ap.add_argument("--nnz", type=float, default=None, help="non-zeros of the scale matrices")
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    args = ap.parse_args(argv)

    small = args.small
    splits = args.splits or (1 if small else 5)
    methods = list(SELECTORS)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, data dir {data_dir()}")

    t_start = time.perf_counter()
    if not args.skip_accuracy:
        X, y = load_digits()
        accuracy_benchmark(
            "digits (8x8 pixel counts, 10 classes)",
            dense_splits(X, y),
            [10, 20] if small else [10, 20, 40],
            splits,
            methods,
        )
        sp_data = load_sentence_polarity()
        if sp_data is None:
            print("\n(sentence_polarity.zip not found: skipped)")
        else:
            if small:  # a random third of the snippets
                keep = np.random.default_rng(0).permutation(len(sp_data[1]))[:3500]
                sp_data = ([sp_data[0][i] for i in keep], sp_data[1][keep])
            ks = [10, 100] if small else [10, 100, 1000]
            accuracy_benchmark("sentence polarity (CountVectorizer)", text_splits(*sp_data), ks, splits, methods)
        if not small:
            mr = load_movie_reviews()
            if mr is None:
                print("\n(movie_reviews.zip not found: skipped)")
            else:
                accuracy_benchmark(
                    "movie reviews (CountVectorizer)", text_splits(*mr), [10, 100, 1000], splits, methods
                )
        print(f"(accuracy part: {time.perf_counter() - t_start:.0f}s)")

    if not args.skip_scale:
        t0 = time.perf_counter()
        ms = args.scale or ([1e5] if small else [1e5, 1e6, 1e7])
        nnz = args.nnz or (1e6 if small else 1e8)
        n_rows = min(1e6, nnz / 10)
        scale_benchmark(ms, nnz, n_rows, k=1000, path_points=10 if small else 100)
        print(f"(scale part: {time.perf_counter() - t0:.0f}s)")


if __name__ == "__main__":
    main()
