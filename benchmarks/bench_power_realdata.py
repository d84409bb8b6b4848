"""Paired power and FDR of the default ``knockoff_filter`` on *real* design matrices (session 56).

``bench_power_designs.py`` draws ``X`` from synthetic laws. Users run the filter on
real data, whose columns are sparse, heavy-tailed, integer, nearly constant or
exactly duplicated. This script takes ``X`` from the real data sets in
``$JAXKNOCK_DATA`` (default ``../shared/data``; a design whose file is absent
is skipped with a note) and draws a semi-synthetic response on it:
``y = Z beta + N(0, 1)`` (``Z`` the standardised ``X``, ``k`` signals at random
columns with ``|beta_j| = c / sqrt(n)`` and random signs) or a logistic ``y``
with ``P(y = 1) = sigmoid(Z beta)``. Each data set is a fresh random subsample
of rows (and fresh signals), so the seeds differ in ``X`` as well as in ``y``.

Designs (``--designs``):

``mnist``          1000 MNIST training images, the 300 pixels of largest variance over the training set
                   (strong local correlation, many zeros); linear ``y``
``mnist_logit``    the same ``X``, logistic ``y``
``mnist_rare``     250 of those pixels plus 50 rare ones (non-zero in 1-10 of the 1000 images: nearly
                   constant columns, some of them exact duplicates of each other); linear ``y``
``reviews``        1000 of the 2000 movie reviews (Pang & Lee 2004): counts of the 300 most frequent
                   words, stop words included (heavy tails, correlated through review length); linear ``y``
``reviews_tfidf``  the same reviews: tf-idf of the 300 most frequent words that are not English stop
                   words; logistic ``y``
``polarity``       1500 of the 10662 polarity sentences (Pang & Lee 2005): presence (0/1) of the 200
                   most frequent non-stop words (very sparse: most words in 1-5% of the sentences);
                   linear ``y``
``polarity_logit`` the same ``X``, logistic ``y``

No column is constant on a subsample (the filter rejects constant columns with a
``ValueError``): the designs pick frequent words, variable pixels or pixels non-zero at least once.
jaxknock receives
``X`` as the data come (``uint8`` pixels, ``int64`` counts, ``float64`` tf-idf:
the user's path, standardised inside the filter); knockpy, which does not
standardise and fits its lasso on a fixed ``alpha`` grid, receives the
standardised ``Z``. Column ``same`` counts the data sets where jaxknock's
selection on the raw ``X`` equals its selection on ``Z`` with the same key.

Both filters as in ``bench_power_designs.py`` (whose helpers this script imports):
``knockoff_filter(jax.random.key(seed), X, y, fdr=0.1)`` against knockpy 1.3.5's
``KnockoffFilter(ksampler="gaussian", fstat="lasso")`` (Ledoit-Wolf, MVR ``S``,
``LassoCV`` / ``LogisticRegressionCV``, knockoff+), paired on the same data sets.
Per design: mean power, mean FDP +- SE, the paired power difference
(jaxknock - knockpy) +- SE, and the median warm time per call with the ratio
jaxknock / knockpy. With ``k = 15`` signals at ``fdr = 0.1`` knockoff+ needs about ten positive ``W`` ahead of the
first negative one, so one null whose knockoff enters the lasso early empties a selection (power 0 on that data
set): a single knockoff draw per data set leaves a paired difference of +-0.2 within noise. ``--draw-offset``
draws new knockoffs (both libraries) on the same data sets to tell such noise from a real gap.

    python -u benchmarks/bench_power_realdata.py --small        # 2 designs x 3 data sets (a smoke run)
    python -u benchmarks/bench_power_realdata.py --datasets 15
    python -u benchmarks/bench_power_realdata.py --designs mnist --datasets 15 --no-knockpy --jk-option s_method=sdp
    python -u benchmarks/bench_power_realdata.py --designs reviews --draw-offset 1000   # same data, new knockoffs
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_power_designs import (
    FDR,
    common_arguments,
    linear,
    logistic,
    paired_columns,
    parse_options,
    run_jaxknock,
    signs,
)
from bench_snb import data_dir, load_movie_reviews, load_sentence_polarity

K = 15  # signals per data set

# name -> (file, n, p, amplitude c: |beta_j| = c / sqrt(n), response)
SIZES = {
    "mnist": ("mnist.npz", 1000, 300, 10.0, linear),
    "mnist_logit": ("mnist.npz", 1000, 300, 24.0, logistic),
    "mnist_rare": ("mnist.npz", 1000, 300, 10.0, linear),
    "reviews": ("movie_reviews.zip", 1000, 300, 5.0, linear),
    "reviews_tfidf": ("movie_reviews.zip", 1000, 300, 8.0, logistic),
    "polarity": ("sentence_polarity.zip", 1500, 200, 3.2, linear),
    "polarity_logit": ("sentence_polarity.zip", 1500, 200, 8.0, logistic),
}
DESIGNS = tuple(SIZES)
_CACHE = {}


def mnist_pixels():
    """MNIST training images as ``uint8`` rows of 784 pixels, or None when the file is absent."""
    if "mnist" not in _CACHE:
        path = data_dir() / "mnist.npz"
        _CACHE["mnist"] = np.load(path)["x_train"].reshape(60000, -1) if path.exists() else None
    return _CACHE["mnist"]


def corpus(name):
    if name not in _CACHE:
        loaded = load_movie_reviews() if name == "movie_reviews.zip" else load_sentence_polarity()
        _CACHE[name] = None if loaded is None else loaded[0]
    return _CACHE[name]


def available(design):
    return (data_dir() / SIZES[design][0]).exists()


def text_matrix(docs, p, *, stop_words=None, kind="counts"):
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    if kind == "tfidf":
        return TfidfVectorizer(max_features=p, stop_words=stop_words).fit_transform(docs).toarray()
    X = CountVectorizer(max_features=p, stop_words=stop_words).fit_transform(docs).toarray()
    return (X > 0).astype(np.int64) if kind == "binary" else X.astype(np.int64)


def raw_design(design, rng):
    """The real ``X`` of one data set of ``design``, in the dtype the data come in."""
    _, n, p, _, _ = SIZES[design]
    if design.startswith("mnist"):
        pixels = mnist_pixels()
        top = np.argsort(-pixels.astype(np.float64).var(0), kind="stable")
        X = pixels[rng.choice(pixels.shape[0], n, replace=False)]
        if design != "mnist_rare":
            return X[:, top[:p]]
        nonzero = (X > 0).sum(0)
        rare = np.flatnonzero((nonzero >= 1) & (nonzero <= 10))
        return X[:, np.concatenate([top[: p - 50], rng.choice(rare, 50, replace=False)])]
    docs = corpus(SIZES[design][0])
    docs = [docs[i] for i in rng.choice(len(docs), n, replace=False)]
    if design == "reviews":
        return text_matrix(docs, p)
    if design == "reviews_tfidf":
        return text_matrix(docs, p, stop_words="english", kind="tfidf")
    return text_matrix(docs, p, stop_words="english", kind="binary")


def make_design(design: str, seed: int, scale: float = 1.0):
    """``(X, Z, y, truth)`` of data set ``seed``: the raw ``X`` and its standardised ``Z``."""
    _, n, _, c, response = SIZES[design]
    rng = np.random.default_rng(20_000 * (DESIGNS.index(design) + 1) + seed)
    X = raw_design(design, rng)
    Z = (X - X.mean(0)) / X.std(0)
    beta = np.zeros(X.shape[1])
    beta[rng.choice(X.shape[1], K, replace=False)] = signs(rng, K) * scale * c / np.sqrt(n)
    return X, Z, response(rng, Z, beta), beta != 0


def main():
    ap = common_arguments(__doc__.splitlines()[0], DESIGNS, 15)
    ap.add_argument(
        "--draw-offset", type=int, default=0, help="new knockoff draws on the same data sets: keys / numpy seeds + this"
    )
    ap.add_argument("--no-x64", action="store_true", help="jax_enable_x64 off: jaxknock's X becomes float32")
    ap.add_argument("--small", action="store_true", help="3 data sets of mnist and polarity_logit (a smoke run)")
    args = ap.parse_args()
    if args.small:
        args.designs, args.datasets = "mnist,polarity_logit", 3
    options = parse_options(args.jk_option)

    import jax

    jax.config.update("jax_enable_x64", not args.no_x64)

    print(
        f"# fdr = {FDR}, {args.datasets} data sets per design (seeds {args.first_seed}..), "
        f"amplitude x {args.scale}, draw offset {args.draw_offset}"
    )
    precision = "float32" if args.no_x64 else "x64"
    print(f"# jaxknock knockoff_filter defaults{' + ' + str(options) if options else ''} ({precision}) on the raw X;")
    print(f"# knockpy 1.3.5 default on the standardised X; data from {data_dir()}")
    head = (
        f"{'design':14s} {'n':>4s} {'p':>4s} {'dtype':>7s} {'jk s':>5s} {'same':>5s} {'warn':>4s} | "
        f"{'power jk':>8s} {'power kp':>8s} {'diff jk-kp':>14s} | {'FDR jk':>13s} {'FDR kp':>13s} | "
        f"{'t jk':>6s} {'t kp':>6s} {'ratio':>6s}"
    )
    print(head)
    seeds = list(range(args.first_seed, args.first_seed + args.datasets))
    keys = [s + args.draw_offset for s in seeds]  # the knockoff draws: jax.random.key(s) / np.random.seed(s)
    for design in args.designs.split(","):
        if not available(design):
            print(f"{design:14s} skipped: {SIZES[design][0]} not in {data_dir()}")
            continue
        data = [make_design(design, s, args.scale) for s in seeds]
        n, p = data[0][0].shape
        if len({d[0].shape for d in data}) > 1:  # the designs pick columns that are never constant
            raise RuntimeError(f"{design}: a subsample had a constant column, p differs between data sets")
        dtype = str(data[0][0].dtype)
        truths = [d[3] for d in data]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jk_masks, jk_times, s_method = run_jaxknock([(X, y, t) for X, _, y, t in data], keys, options)
            std_masks, _, _ = run_jaxknock([(Z, y, t) for _, Z, y, t in data], keys, options)
        # warm-up calls included; the Ledoit-Wolf near-duplicate warning is the common one on these data
        n_warn = sum(1 for w in caught if issubclass(w.category, UserWarning))
        same = sum(bool(np.array_equal(a, b)) for a, b in zip(jk_masks, std_masks))
        X, Y = np.stack([d[1] for d in data]), np.stack([d[2] for d in data])
        row = paired_columns(jk_masks, jk_times, X, Y, truths, keys[0], knockpy=not args.no_knockpy, width=6)
        print(f"{design:14s} {n:4d} {p:4d} {dtype:>7s} {s_method:>5s} {same:5d} {n_warn:4d} | {row}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
