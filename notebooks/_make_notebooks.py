"""Write notebooks 02-05 as .ipynb JSON (no outputs). Run: python notebooks/_make_notebooks.py

Uses nbformat when installed (validated), plain json otherwise. Every notebook
reads ``JAXKNOCK_NOTEBOOK_SMALL=1`` (set by tests/test_notebooks.py) to run at
tiny sizes, and plots only when matplotlib is installed.
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

SETUP = """import os
from pathlib import Path
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import jaxknock as jk

SMALL = os.environ.get("JAXKNOCK_NOTEBOOK_SMALL") == "1"     # tiny sizes for the test suite
DATA = Path(os.environ.get("JAXKNOCK_DATA", Path.cwd().parent.parent / "shared" / "data"))
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
    print("matplotlib is not installed: tables only (pip install matplotlib for the plots)")"""


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text.strip("\n").splitlines(keepends=True)}


def code(text):
    return {
        "cell_type": "code",
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": text.strip("\n").splitlines(keepends=True),
    }


NB02 = [
    md("""
# Knockoffs: power and FDR against signal amplitude

Model-X knockoffs (Candes et al. 2018) control the false discovery rate at level
`q` whatever the statistic; the *power* depends on how different each knockoff
is from its original feature, i.e. on the S-vector (`diag(s) <= 2 Sigma`, larger
`s` = more power). Here we compare three S-vector methods on the same
correlated design:

* **equicorrelated**: `s_j = min(1, 2 lambda_min(Sigma))`, closed form;
* **ASDP**: SDP on diagonal blocks, rescaled to be feasible;
* **SDP**: the full SDP `max 1's s.t. diag(s) <= 2 Sigma`, certified duality gap.

For each amplitude we draw `R` knockoff replicates in **one batched call**
(`jk.sample_replicates`, `vmap`), compute the lasso coefficient difference `W`
for all replicates at once, and report the mean power and FDP of single
replicates (knockoff+) and of the **aggregated** selection (derandomised
knockoffs with e-values, e-BH; Ren & Barber 2022). On a GPU the replicate batch
is where the speed-up comes from.
"""),
    code(SETUP),
    code("""
n, p, k, num_signals = (300, 60, 6, 20) if SMALL else (1000, 200, 20, 40)
amplitudes = [4.0, 8.0] if SMALL else [2.0, 3.0, 4.0, 5.0, 6.0, 8.0]
R = 4 if SMALL else 20
fdr = 0.1
from jaxknock.cli import synthetic_factor_data

key = jax.random.key(0)
X, _, _, _ = synthetic_factor_data(key, n, p, k, num_signals, 1.0)   # correlated design
Xs = (X - X.mean(0)) / X.std(0)
Sigma = jk.to_correlation(jk.ledoit_wolf(Xs)[0])
methods = {
    "equicorrelated": jk.equicorrelated(Sigma),
    "asdp": jk.asdp(Sigma, block_size=max(10, p // 4)),
    "sdp": jk.sdp(Sigma, tol=1e-4),
}
for name, sol in methods.items():
    print(f"{name:15s} sum(s) = {float(jnp.sum(sol.value)):7.3f}   result {jk.RESULTS(int(sol.result)).name}")
"""),
    code("""
support = np.asarray(jax.random.permutation(jax.random.key(1), p)[:num_signals])
truth = np.zeros(p, bool); truth[support] = True
signs = np.where(np.asarray(jax.random.bernoulli(jax.random.key(2), 0.5, (num_signals,))), 1.0, -1.0)

def power_fdp(mask):
    mask = np.asarray(mask, bool)
    tp = (mask & truth).sum(-1)
    return tp / truth.sum(), (mask.sum(-1) - tp) / np.maximum(mask.sum(-1), 1)

rows = []
for a in amplitudes:
    beta = np.zeros(p); beta[support] = signs * a / np.sqrt(n)
    y = Xs @ beta + jax.random.normal(jax.random.fold_in(key, int(10 * a)), (n,))
    lam = 0.5 * float(jnp.std(y)) * np.sqrt(2 * np.log(2 * p) / n)
    for name, sol in methods.items():
        Xt = jk.sample_replicates(jax.random.key(3), Xs, Sigma, sol.value, R)        # (R, n, p), one call
        Xk = jnp.concatenate([jnp.broadcast_to(Xs, Xt.shape), Xt], axis=-1)
        W = jk.lcd(Xk, y, lam=lam).value                                               # (R, p), one call
        pw1, fdp1 = power_fdp(jk.knockoff_select(W, fdr))                              # each replicate
        pwA, fdpA = power_fdp(jk.aggregate_ebh(W, fdr))                                # aggregated
        rows.append((a, name, pw1.mean(), fdp1.mean(), float(pwA), float(fdpA)))

print(f"{'amplitude':>9} {'method':>15} {'power(1)':>9} {'FDP(1)':>7} {'power(e-BH)':>12} {'FDP(e-BH)':>10}")
for r in rows:
    print(f"{r[0]:9.1f} {r[1]:>15} {r[2]:9.2f} {r[3]:7.2f} {r[4]:12.2f} {r[5]:10.2f}")
"""),
    code("""
if plt is not None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name in methods:
        sub = [r for r in rows if r[1] == name]
        amp = [r[0] for r in sub]
        axes[0].plot(amp, [r[2] for r in sub], "o-", label=f"{name} (single)")
        axes[0].plot(amp, [r[4] for r in sub], "s--", label=f"{name} (e-BH, R={R})")
        axes[1].plot(amp, [r[3] for r in sub], "o-", label=f"{name} (single)")
        axes[1].plot(amp, [r[5] for r in sub], "s--", label=f"{name} (e-BH)")
    axes[1].axhline(fdr, color="k", lw=1, ls=":", label="target FDR")
    axes[0].set(xlabel="amplitude", ylabel="power", title="power")
    axes[1].set(xlabel="amplitude", ylabel="FDP", title="false discovery proportion")
    axes[0].legend(fontsize=7); axes[1].legend(fontsize=7)
    fig.tight_layout()
    plt.show()
"""),
    md("""
Reading the plot: all methods keep the FDP around or below `q` (FDR is an
*expectation*, so single draws scatter); SDP has the largest `sum(s)` and
usually the highest power, equicorrelated the lowest on correlated designs.
Aggregating replicates with e-BH removes the randomness of a single knockoff
draw at a small cost in power.
"""),
    md("""
## Equicorrelated, SDP, MVR and maximum entropy on a strongly correlated design

The SDP maximises `sum(s)`, i.e. makes each knockoff as *uncorrelated* with its
feature as possible; on strongly correlated designs that can leave `X_j`
reconstructable from the other features and the knockoffs, which costs power
(Spector & Janson 2022). **MVR** (`jk.mvr`, minimise `tr(G_S^{-1})`, knockpy's
default) and **maximum entropy** (`jk.maxent`, maximise `log det G_S`,
Knockoffs.jl's default) target that reconstructability directly. Here: a
block-equicorrelated design (blocks of 10, `rho = 0.7`) with the law known
(model-X knockoffs from the true `Sigma`), one `X`, several response draws per
amplitude and `R` knockoff draws per response in one batched call; power and
FDP are averaged over all single-replicate selections (knockoff+, LCD at a
fixed lambda). The full comparison with 20 data sets per row and knockpy's
default filter is `benchmarks/bench_filter.py --mrc-power`
(`benchmarks/measured/NOTES.md`).
"""),
    code("""
n2, p2, nsig2 = (300, 60, 12) if SMALL else (400, 100, 20)   # small: the shapes of the first panel (compiled once)
amps2 = [8.0] if SMALL else [3.0, 4.0, 5.0, 6.0]
D2, R2 = (1, 4) if SMALL else (5, 10)                       # responses per amplitude, knockoff draws each
C2 = np.kron(np.eye(p2 // 10), np.full((10, 10), 0.7)); np.fill_diagonal(C2, 1.0)
C2 = jnp.asarray(C2)
X2 = jax.random.normal(jax.random.key(10), (n2, p2)) @ jnp.linalg.cholesky(C2).T
s_methods = {
    "equicorrelated": jk.equicorrelated(C2),
    "sdp": jk.sdp(C2, tol=1e-4),
    "mvr": jk.mvr(C2, tol=1e-6),
    "maxent": jk.maxent(C2, tol=1e-6),
}
for name, sol in s_methods.items():
    print(f"{name:15s} mean s = {float(jnp.mean(sol.value)):.3f}   result {jk.RESULTS(int(sol.result)).name}")

support2 = np.asarray(jax.random.permutation(jax.random.key(11), p2)[:nsig2])
truth2 = np.zeros(p2, bool); truth2[support2] = True
lam2 = 0.5 * np.sqrt(2 * np.log(2 * p2) / n2)
curves2 = {name: [] for name in s_methods}
for a in amps2:
    beta2 = np.zeros(p2); beta2[support2] = a / np.sqrt(n2)
    for name, sol in s_methods.items():
        pw, fd = [], []
        for d in range(D2):
            y2 = X2 @ beta2 + jax.random.normal(jax.random.key(100 + d), (n2,))
            Xt2 = jk.sample_replicates(jax.random.key(200 + d), X2, C2, sol.value, R2, mu=0.0)   # (R, n, p)
            Xk2 = jnp.concatenate([jnp.broadcast_to(X2, Xt2.shape), Xt2], axis=-1)
            W2 = jk.lcd(Xk2, y2, lam=lam2 * float(jnp.std(y2))).value                       # (R, p)
            mask = np.asarray(jk.knockoff_select(W2, fdr), bool)
            tp = (mask & truth2).sum(-1)
            pw += list(tp / nsig2); fd += list((mask.sum(-1) - tp) / np.maximum(mask.sum(-1), 1))
        se = lambda v: np.std(v, ddof=1) / np.sqrt(len(v))
        curves2[name].append((a, np.mean(pw), se(pw), np.mean(fd), se(fd)))

print(f"{'amplitude':>9} {'method':>15} {'power':>14} {'FDP':>14}")
for name, rs in curves2.items():
    for a, pm, ps, fm, fs in rs:
        print(f"{a:9.1f} {name:>15} {pm:7.3f} +- {ps:.3f} {fm:7.3f} +- {fs:.3f}")
if plt is not None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, rs in curves2.items():
        a_ = [r[0] for r in rs]
        axes[0].errorbar(a_, [r[1] for r in rs], [r[2] for r in rs], fmt="o-", label=name)
        axes[1].errorbar(a_, [r[3] for r in rs], [r[4] for r in rs], fmt="o-", label=name)
    axes[1].axhline(fdr, color="k", lw=1, ls=":", label="target FDR")
    axes[0].set(xlabel="amplitude", ylabel="power", title="block-equicorrelated rho = 0.7: power")
    axes[1].set(xlabel="amplitude", ylabel="FDP", title="FDP (mean +- s.e.)")
    axes[0].legend(fontsize=8); axes[1].legend(fontsize=8)
    fig.tight_layout()
    plt.show()
"""),
    md("""
Reading the table: on a block-equicorrelated matrix the SDP optimum is known,
`s = 2(1 - rho) = 0.6`, the same as equicorrelated, which is exactly the case
Spector & Janson single out: with `s` that large, `X_j` is almost a linear
function of its block and the knockoffs. MVR and maximum entropy choose a
smaller `s` (about half) to avoid that. Whether this buys power at a given
amplitude is what the table shows; with a handful of responses per amplitude,
differences of one or two standard errors are noise (the benchmark quoted
above uses 20 data sets per row).
"""),
    md("""
## The thesis' Figure 4.5 experiment, measured against knockpy

`benchmarks/bench_filter.py --json out.json` runs the full experiment
(n = 1000, p = 500, factor-model covariance, 50 signals, many knockoff draws
per amplitude, every S-vector method, one replicate and e-BH over `R`
replicates, and knockpy's `KnockoffFilter` on the same data in the same run).
The results of the run quoted in the README are stored in
`benchmarks/measured/bench_filter.json`; this cell plots them (mean +- one
standard error over draws).
"""),
    code("""
import json
bench = Path.cwd().parent / "benchmarks" / "measured" / "bench_filter.json"
if bench.exists():
    res = json.loads(bench.read_text())
    cfg = res["config"]
    curves = {}
    for r in res["rows"]:
        curves.setdefault((r["library"], r["method"], r["R"]), []).append(r)
    print(f"n={cfg['n']} p={cfg['p']} draws={cfg['draws']} R={cfg['R']} lam={cfg['lam']} target FDR {cfg['fdr']}")
    for (lib, meth, R_), rs in curves.items():
        print(f"{lib:9s} {meth:15s} R={R_:<3d}", " ".join(
            f"a={r['amplitude']:g}: FDP {r['fdp_mean']:.3f} power {r['power_mean']:.3f}" for r in rs))
    if plt is not None:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for (lib, meth, R_), rs in curves.items():
            amp = [r["amplitude"] for r in rs]
            style = "s--" if R_ > 1 else ("^:" if lib == "knockpy" else "o-")
            label = f"{lib} {meth}" + (f" e-BH R={R_}" if R_ > 1 else "")
            axes[0].errorbar(amp, [r["power_mean"] for r in rs], [r["power_se"] for r in rs], fmt=style, label=label)
            axes[1].errorbar(amp, [r["fdp_mean"] for r in rs], [r["fdp_se"] for r in rs], fmt=style, label=label)
        axes[1].axhline(cfg["fdr"], color="k", lw=1, ls=":")
        axes[0].set(xlabel="amplitude", ylabel="power", title="power (thesis Fig. 4.5 setting)")
        axes[1].set(xlabel="amplitude", ylabel="FDP", title="FDP, mean +- s.e.")
        axes[0].legend(fontsize=6); fig.tight_layout(); plt.show()
else:
    print("run benchmarks/bench_filter.py --json benchmarks/measured/bench_filter.json to plot the full experiment")
"""),
]

NB03 = [
    md("""
# Sparse naive Bayes on movie reviews: the psi(k) elbow and accuracy vs k

Sparse naive Bayes (Askari, d'Aspremont, El Ghaoui 2020, "Naive Feature
Selection") fits a multinomial naive Bayes classifier whose class parameters
differ on at most `k` words. Its dual bound `psi(k)` is cheap to compute for a
whole path of `k` and its elbow shows how many features matter; the fitted
classifier comes with a certified gap.

Data: the Pang & Lee movie-review polarity corpus (2000 reviews) from
`shared/data/movie_reviews.zip` when present, otherwise a synthetic corpus.
"""),
    code(SETUP),
    code("""
import re, zipfile
from collections import Counter
import scipy.sparse as sp

def load_reviews(path, limit=None):
    docs, labels = [], []
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if n.endswith(".txt") and ("/pos/" in n or "/neg/" in n))
        if limit:
            rng = np.random.default_rng(0)
            names = [names[i] for i in sorted(rng.choice(len(names), limit, replace=False))]
        for name in names:
            docs.append(z.read(name).decode("latin-1"))
            labels.append(1 if "/pos/" in name else 0)
    return docs, np.array(labels)

def count_matrix(docs, min_df=2):
    tokens = [re.findall(r"[a-z']+", d.lower()) for d in docs]
    df = Counter(w for t in tokens for w in set(t))
    vocab = sorted(w for w, c in df.items() if c >= min_df)
    index = {w: j for j, w in enumerate(vocab)}
    rows, cols, vals = [], [], []
    for i, t in enumerate(tokens):
        for w, c in Counter(w for w in t if w in index).items():
            rows.append(i); cols.append(index[w]); vals.append(c)
    return sp.csr_matrix((vals, (rows, cols)), shape=(len(docs), len(vocab)), dtype=np.float64), np.array(vocab)

path = DATA / "movie_reviews.zip"
if path.exists():
    docs, y = load_reviews(path, limit=300 if SMALL else None)
    X, vocab = count_matrix(docs)
    source = f"movie reviews ({len(docs)} documents)"
else:   # synthetic fallback: 40 of the words carry the class
    rng = np.random.default_rng(0)
    n_docs, m = (300, 2000) if SMALL else (2000, 20000)
    y = rng.integers(0, 2, n_docs)
    rate = rng.gamma(0.3, 1.0, m) * 0.05
    effect = np.ones((2, m)); effect[1, :20] = 3.0; effect[0, 20:40] = 3.0
    X = sp.csr_matrix(rng.poisson(rate * effect[y]).astype(np.float64))
    vocab = np.array([f"w{j}" for j in range(m)])
    source = f"synthetic corpus ({n_docs} documents)"
print(source, "| vocabulary", X.shape[1], "| non-zeros", X.nnz)
"""),
    code("""
ks = np.unique(np.geomspace(1, min(X.shape[1], 2000 if not SMALL else 300), 12 if SMALL else 30).astype(int))
path_sol = jk.sparse_naive_bayes_path(X, y, ks)          # one pass over the data, dual for every k
psi = np.asarray(path_sol.value.psi)
obj = np.asarray(path_sol.value.objective)
for k_, a, b in zip(ks, psi, obj):
    print(f"k={k_:5d}  psi(k)={a:14.2f}  recovered objective={b:14.2f}  gap={a - b:8.2f}")
"""),
    code("""
rng = np.random.default_rng(1)
perm = rng.permutation(X.shape[0]); cut = int(0.8 * len(perm))
tr, te = perm[:cut], perm[cut:]
acc_ks = [k_ for k_ in ks if k_ <= X.shape[1]]
acc = []
for k_ in acc_ks:
    clf = jk.SparseNaiveBayes(k=int(k_)).fit(X[tr], y[tr])
    acc.append(clf.score(X[te], y[te]))
    print(f"k={k_:5d}  test accuracy {acc[-1]:.3f}")
best = jk.SparseNaiveBayes(k=int(acc_ks[int(np.argmax(acc))])).fit(X, y)
top = np.flatnonzero(best.get_support())
weights = best.coef_[1] - best.coef_[0]
order = top[np.argsort(-weights[top])]
print("most positive words:", list(vocab[order[:10]]))
print("most negative words:", list(vocab[order[::-1][:10]]))
"""),
    code("""
if plt is not None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].semilogx(ks, psi - psi[-1], "o-", label="psi(k) - psi(k_max)")
    axes[0].semilogx(ks, obj - psi[-1], "x--", label="recovered objective")
    axes[0].set(xlabel="k (features)", ylabel="log-likelihood (shifted)", title="psi(k) elbow")
    axes[0].legend()
    axes[1].semilogx(acc_ks, acc, "o-")
    axes[1].set(xlabel="k (features)", ylabel="test accuracy", title="accuracy vs k")
    fig.tight_layout()
    plt.show()
"""),
]

NB04 = [
    md("""
# Fenchel lifted network on MNIST: training curves

A ReLU network trained *without back-propagation*: the hidden activations are
variables, tied to the layers by the Fenchel-Young gap of the ReLU, so every
block (activations per sample, weights per layer) is a convex problem solved by
block-coordinate descent (Gu et al., "Fenchel lifted networks", 2020; Askari
thesis chapters 2-3). We compare its training curve with Adam on the same
network, and then fine-tune the lifted weights with Adam.

Data: `shared/data/mnist.npz` when present, otherwise scikit-learn's 8x8 digits.
"""),
    code(SETUP),
    code("""
import optax

path = DATA / "mnist.npz"
if path.exists():
    d = np.load(path)
    n_tr, n_te = (1000, 500) if SMALL else (60000, 10000)
    Xtr = d["x_train"][:n_tr].reshape(n_tr, -1).astype(np.float32) / 255.0
    Xte = d["x_test"][:n_te].reshape(n_te, -1).astype(np.float32) / 255.0
    ytr, yte = d["y_train"][:n_tr].astype(np.int32), d["y_test"][:n_te].astype(np.int32)
    source = f"MNIST ({n_tr} train / {n_te} test)"
else:
    from sklearn.datasets import load_digits
    Xd, yd = load_digits(return_X_y=True)
    Xd = (Xd / 16.0).astype(np.float32); yd = yd.astype(np.int32)
    perm = np.random.default_rng(0).permutation(len(Xd))
    Xd, yd = Xd[perm], yd[perm]
    Xtr, ytr, Xte, yte = Xd[:1400], yd[:1400], Xd[1400:], yd[1400:]
    source = "scikit-learn digits (MNIST not found)"
hidden = 32 if SMALL else 300
epochs = 2 if SMALL else 10
batch = 100 if SMALL else 500
print(source, "| hidden width", hidden, "| epochs", epochs)
"""),
    code("""
spec = jk.LiftedSpec((Xtr.shape[1], hidden, 10), loss="cross_entropy", model="fenchel",
                     lam=0.3, rho=0.0, gamma=(0.003, 0.2))
lifted = jk.fit_lifted(jax.random.key(0), Xtr, ytr, spec, epochs=epochs, batch_size=batch,
                       X_test=Xte, y_test=yte)
adam = jk.train_mlp(jax.random.key(0), Xtr, ytr, (Xtr.shape[1], hidden, 10), optimizer=optax.adam(1e-3),
                    epochs=epochs, batch_size=100, X_test=Xte, y_test=yte)
finetune = jk.train_mlp(jax.random.key(1), Xtr, ytr, jk.lifted_to_mlp(lifted), optimizer=optax.adam(1e-3),
                        epochs=epochs, batch_size=100, X_test=Xte, y_test=yte)
print("result:", jk.RESULTS(int(np.max(np.asarray(lifted.result)))).name)
print(f"{'epoch':>5} {'fenchel lifted':>15} {'adam':>8} {'lifted+adam':>12}")
for e in range(epochs):
    print(f"{e + 1:5d} {float(lifted.stats['test_accuracy'][e]):15.4f} {float(adam.stats['test_accuracy'][e]):8.4f}"
          f" {float(finetune.stats['test_accuracy'][e]):12.4f}")
"""),
    code("""
if plt is not None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ep = np.arange(1, epochs + 1)
    axes[0].plot(ep, lifted.stats["test_accuracy"], "o-", label="Fenchel lifted (BCD)")
    axes[0].plot(ep, adam.stats["test_accuracy"], "s-", label="Adam")
    axes[0].plot(ep, finetune.stats["test_accuracy"], "^-", label="lifted init + Adam")
    axes[0].set(xlabel="epoch", ylabel="test accuracy", title="test accuracy")
    axes[0].legend()
    axes[1].plot(ep, lifted.stats["objective"], "o-")
    axes[1].set(xlabel="epoch", ylabel="lifted objective (mean over batches)", title="Fenchel lifted objective")
    fig.tight_layout()
    plt.show()
"""),
]


NB05 = [
    md("""
# 05 · Stability selection and randSel

Two feature-selection systems from the Athanasakis thesis, both batched in JAX:

* **stability selection** (Meinshausen & Bühlmann 2010, with Shah & Samworth's complementary pairs):
  the lasso path on many half-samples at once; a feature's *selection probability* at each lambda is
  the fraction of half-samples whose lasso selects it. The stable set comes with a bound on the expected
  number of false selections.
* **randSel** (thesis Algorithm 6): the contribution of a feature to the HSIC between a Gaussian kernel
  on a random half of the features and the target, estimated over many random halves and row subsamples;
  the least contributing features are culled round by round. It sees interactions (XOR) that the lasso
  cannot.
"""),
    code(
        SETUP
        + """
from sklearn.datasets import load_diabetes
from jaxknock.stability import stability_selection
from jaxknock.kernels import randsel"""
    ),
    md("""
## Stability paths on scikit-learn's diabetes data

442 patients, 10 standardised baseline variables, a disease-progression score. Each curve is one
variable's selection probability along the lambda grid (largest lambda on the left).
"""),
    code("""
data = load_diabetes()
X = (data.data - data.data.mean(0)) / data.data.std(0)
y = data.target - data.target.mean()
B = 20 if SMALL else 100
# at most one false selection expected: the lambda range is cut where q (selections per half-sample) gets too large
res = stability_selection(jax.random.key(0), X, y, num_subsamples=B, num_lambdas=30 if SMALL else 50,
                          threshold=0.8, expected_false=1.0)
print(f"threshold {res.threshold}, first {res.num_lambdas_used} of {len(res.lambdas)} lambdas, "
      f"q = {res.q:.2f} selected per half-sample, E[false selections] <= {res.bound:.2f}")
for j in np.argsort(-np.asarray(res.max_probability)):
    print(f"{data.feature_names[j]:>4}  max probability {float(res.max_probability[j]):.2f}"
          f"  {'selected' if res.selected[j] else ''}")
"""),
    code("""
if plt is not None:
    fig, ax = plt.subplots(figsize=(7, 4))
    lam = np.asarray(res.lambdas)
    for j in range(X.shape[1]):
        ax.plot(lam, res.probabilities[j], "-" if res.selected[j] else ":", label=data.feature_names[j])
    ax.axhline(res.threshold, color="k", lw=0.8)
    if res.num_lambdas_used:
        ax.axvline(lam[res.num_lambdas_used - 1], color="gray", lw=0.8, ls="--")  # end of the chosen range
    ax.set(xscale="log", xlabel="lambda", ylabel="selection probability", title="stability paths (diabetes)")
    ax.invert_xaxis()
    ax.legend(ncol=2, fontsize=8)
    plt.show()
"""),
    md("""
## randSel on the XOR design (thesis Figure 4.2)

`y = sign(x1 * x2)` with two standard-normal features plus `k` irrelevant ones: each of the two
features alone is independent of `y`, so a linear method has nothing to find. We count how often
the two features are the top two of randSel's ranking and of the lasso's ranking (order of entry
along the path).
"""),
    code("""
def xor(rng, n, k):
    X = rng.standard_normal((n, 2 + k))
    return X, np.sign(X[:, 0] * X[:, 1])

def lasso_top2(X, y):
    path = np.asarray(jk.lasso_path(X, y, num_lambdas=50).value)
    nz = path != 0
    entry = np.where(nz.any(0), nz.argmax(0), len(path))
    return set(np.lexsort((-np.abs(path[-1]), entry))[:2].tolist())

ks = [5] if SMALL else [5, 15, 25]
reps = 2 if SMALL else 5
draws = 100 if SMALL else 400
rows = []
for k in ks:
    rng = np.random.default_rng(k)
    hit_rs = hit_lasso = 0
    for r in range(reps):
        X, y = xor(rng, 300, k)
        out = randsel(jax.random.key(r), X, y, num_subsamples=draws, subsample_size=100)
        hit_rs += set(out.ranking[:2].tolist()) == {0, 1}
        hit_lasso += lasso_top2(X, y) == {0, 1}
    rows.append((k, hit_rs / reps, hit_lasso / reps))
    print(f"k = {k:2d} irrelevant: randSel top-2 {hit_rs / reps:.2f}, lasso top-2 {hit_lasso / reps:.2f}")
"""),
    code("""
if plt is not None:
    ks_, rs_, la_ = map(np.array, zip(*rows))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(ks_ - 1, rs_, width=2, label="randSel")
    ax.bar(ks_ + 1, la_, width=2, label="lasso")
    ax.set(xlabel="irrelevant features k", ylabel="fraction with x1, x2 on top", ylim=(0, 1.05),
           title="XOR: the interacting pair ranked first")
    ax.legend()
    plt.show()
"""),
    md("""
The benchmark `benchmarks/bench_stability.py` runs the same XOR comparison with 20 data sets per `k`
and adds pyHSICLasso (an additive per-feature HSIC, which also cannot see the XOR pair).
"""),
]


def write(name, cells):
    nb = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    try:
        import nbformat

        for i, c in enumerate(nb["cells"]):
            c["id"] = f"{name[:2]}-{i}"
        nbformat.validate(nbformat.from_dict(nb))
    except ImportError:
        for i, c in enumerate(nb["cells"]):
            c["id"] = f"{name[:2]}-{i}"
    (HERE / name).write_text(json.dumps(nb, indent=1) + "\n")


if __name__ == "__main__":
    write("02_knockoffs_power_fdr.ipynb", NB02)
    write("03_sparse_naive_bayes.ipynb", NB03)
    write("04_lifted_mnist.ipynb", NB04)
    write("05_stability.ipynb", NB05)
