r"""Sparse naive Bayes: naive Bayes with at most ``k`` discriminative features.

Given non-negative data ``X`` (``n x m``) with labels in ``C`` classes, let
``f_c = sum_{i: y_i = c} x_i`` be the class sums (``m``-vectors) and ``n_c`` the
class sizes. Laplace smoothing ``alpha`` enters as pseudo-counts, exactly as in
scikit-learn's ``MultinomialNB`` / ``BernoulliNB``. The *sparse* naive Bayes
problem (Askari, d'Aspremont, El Ghaoui, "Naive Feature Selection", thesis
chapter 5) constrains the number of features on which the class parameters
differ::

    phi(k) = max_theta  L(theta_1, ..., theta_C)
             s.t.       #{j : theta_{1j}, ..., theta_{Cj} not all equal} <= k

For two classes the constraint is ``||theta_+ - theta_-||_0 <= k``. A feature
on which all classes share one parameter drops out of the linear decision rule,
so the fitted classifier uses at most ``k`` features.

Bernoulli model (binary ``X``), exact (Theorem 3)
    ``L = sum_c a_c' log theta_c + b_c' log(1 - theta_c)`` with ``a_c = f_c +
    alpha`` ones and ``b_c = n_c - f_c + alpha`` zeros. Per feature the gain of
    separate class parameters over one pooled parameter is::

        gain_j = sum_c [a_cj log(a_cj / (a_cj + b_cj)) + b_cj log(b_cj / (a_cj + b_cj))]
                 - [A_j log(A_j / (A_j + B_j)) + B_j log(B_j / (A_j + B_j))] >= 0,

    ``A = sum_c a_c``, ``B = sum_c b_c``; ``phi(k) = sum_j pooled_j + s_k(gain)``
    where ``s_k`` sums the ``k`` largest entries, and the optimal support is the
    top-``k`` of ``gain`` (``theta_cj = a_cj / (a_cj + b_cj)`` there, the pooled
    ``A_j / (A_j + B_j)`` elsewhere). Written as a log-likelihood *gain* it
    cannot favour all-zero features (their gain is exactly zero).

Multinomial model, dual bound and primal recovery (Theorems 4 and 5)
    ``L = sum_c f_c' log theta_c`` with ``1' theta_c = 1`` (``f_c`` smoothed).
    With ``g = sum_c f_c``, ``S = 1'g`` and ``v = sum_c f_c log f_c - g log g``::

        psi(k) = K + min_{p in simplex_C} s_k(h(p)),   h(p) = v - sum_c f_c log p_c,
        K = g' log g - S log S,

    ``h_j(p) = g_j KL(f_{.j}/g_j || p) >= 0`` is convex in ``p``. For two classes
    ``p = (a, 1 - a)`` and the dual is the 1-D convex problem
    ``min_{a in [0, 1]} s_k(h(a))`` of the thesis, solved by bisection on the
    sign of the subgradient ``-A_0/a + A_1/(1 - a)`` (``A_c`` = sum of ``f_c``
    over the top-``k`` set), safeguarded and accelerated by the stationary point
    of the active piece. For ``C > 2`` classes the same dual over the simplex is
    solved by fully corrective Frank-Wolfe on its concave dual (below), which
    converges and certifies its own gap. Weak duality gives
    ``phi(k) <= psi(k)``; the Shapley-Folkman theorem (``C + 1`` coupling
    constraints: ``C`` normalisations and the cardinality) gives
    ``psi(k - C - 2) <= phi(k)``, i.e. ``psi(k - 4) <= phi(k) <= psi(k)`` for
    two classes. A primal point is recovered in closed form from a support
    ``T``, ``|T| <= k``, with ``B_c = sum_{j in T} f_cj`` and ``B = sum_c B_c``::

        theta_cj = g_j / S                (j not in T, shared by all classes)
        theta_cj = (B / S) f_cj / B_c     (j in T)

    ``T`` is the top-``k`` of ``h(p*)`` (Theorem 4) or, when it scores higher,
    the top-``k`` at a neighbouring dual point or the systematic rounding of the
    optimal mixture of those sets (at a kink of the dual, ties make the top-``k``
    ambiguous and the optimal point of the dual's dual mixes a few 0/1 sets).

Certificates
    Every dual point ``p`` gives the upper bound ``K + s_k(h(p)) >= psi(k)`` and
    every ``x`` in ``{0 <= x <= 1, 1'x <= k}`` the lower bound
    ``K + G(x) <= psi(k)`` with
    ``G(x) = x'v - sum_c A_c log(A_c / 1'A)``, ``A_c = x'f_c`` (the dual of the
    dual; for a 0/1 vector ``x = 1_T``, ``K + G(1_T)`` is exactly the objective
    of the recovered point with support ``T``). The solvers stop when the two
    bounds meet (``stats["dual_gap"]``); ``stats["gap"] = psi_upper -
    objective`` bounds how far the returned classifier is from the (unknown,
    non-convex) optimum ``phi(k)``.

Cost: the class sums are one pass over the data (``O(nnz C)``); everything after
is ``O(C m)`` time per dual step and ``O(C m)`` memory. Top-``k`` selection is an
exact radix select (``O(m)`` per 16-bit pass, no sort) that accepts a traced
``k``, so one compiled solver serves every ``k`` and a ``k``-path is a
``vmap``/``lax.map`` over ``k``.

Layout: :mod:`~jaxknock.naive_bayes.topk` (exact top-``k`` with a traced
``k``), :mod:`~jaxknock.naive_bayes.dual` (multinomial dual: bisection, Frank-Wolfe,
primal recovery), :mod:`~jaxknock.naive_bayes.bernoulli` (exact),
:mod:`~jaxknock.naive_bayes.model` (classifier, :func:`sparse_naive_bayes`, paths),
:mod:`~jaxknock.naive_bayes.sums` (class sums from dense, sparse, chunked, ``.npz``
and Dask inputs; one host accumulator) and :mod:`~jaxknock.naive_bayes.npz`
(streamed CSR files). The scikit-learn estimator is
:class:`jaxknock.sklearn.SparseNaiveBayes` (also ``jaxknock.SparseNaiveBayes``).

Example::

    >>> import numpy as np, jaxknock as jk
    >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
    >>> sol = jk.sparse_naive_bayes(X, y, k=5)               # multinomial
    >>> int(sol.value.support.sum()), bool(sol.stats["gap"] >= -1e-9)   # 5 features, certified
    (5, True)
    >>> sel = jk.SparseNaiveBayes(k=5).fit(X, y)             # scikit-learn style
    >>> len(sel.get_support(indices=True))
    5
"""

import warnings

from jaxknock.naive_bayes.model import NaiveBayesModel, SNBPath, sparse_naive_bayes, sparse_naive_bayes_path
from jaxknock.naive_bayes.npz import iter_npz_blocks
from jaxknock.naive_bayes.sums import ClassSums, class_sums, class_sums_blocks, class_sums_dask, class_sums_npz

__all__ = [
    "ClassSums",
    "class_sums",
    "class_sums_blocks",
    "class_sums_npz",
    "class_sums_dask",
    "iter_npz_blocks",
    "NaiveBayesModel",
    "SNBPath",
    "sparse_naive_bayes",
    "sparse_naive_bayes_path",
]


def __getattr__(name):
    # deprecated for one release: the estimator lives in jaxknock.sklearn (imported lazily: no cycle)
    if name == "SparseNaiveBayes":
        warnings.warn(
            "jaxknock.naive_bayes.SparseNaiveBayes is deprecated and will be removed in the next release; "
            "use jaxknock.SparseNaiveBayes (or jaxknock.sklearn.SparseNaiveBayes)",
            DeprecationWarning,
            stacklevel=2,
        )
        from jaxknock.sklearn import SparseNaiveBayes

        return SparseNaiveBayes
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
