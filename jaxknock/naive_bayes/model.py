r"""The fitted sparse naive Bayes classifier and the two public solvers.

:func:`sparse_naive_bayes` forms the class sums (:mod:`~jaxknock.naive_bayes.sums`),
solves the Bernoulli problem exactly (:mod:`~jaxknock.naive_bayes.bernoulli`)
or the multinomial dual with a certified gap and recovers a primal point
(:mod:`~jaxknock.naive_bayes.dual`), and returns a :class:`NaiveBayesModel`
(a linear decision rule that uses at most ``k`` features).
:func:`sparse_naive_bayes_path` does the same for a whole path of ``k`` in one
compiled call. :func:`fit_core` / :func:`path_core` are the jitted kernels
from class sums (``k`` traced: a new ``k`` does not recompile).

Example::

    >>> import numpy as np
    >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
    >>> sol = sparse_naive_bayes(X, y, 5)
    >>> int(sol.value.support.sum()), sol.value.predict(X[:3]).shape
    (5, (3,))
"""

from __future__ import annotations

import dataclasses
import numbers
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _backend
from jaxknock._checks import combine_codes, int_setting, is_concrete, is_int, poison
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.naive_bayes._inputs import MODELS, check_values, device_array, host_data, is_sparse, label_tuple
from jaxknock.naive_bayes.bernoulli import fit_bernoulli
from jaxknock.naive_bayes.dual import multinomial_problem, recover, solve_dual, theta_from_mask
from jaxknock.naive_bayes.sums import ClassSums, class_sums

__all__ = ["NaiveBayesModel", "SNBPath", "sparse_naive_bayes", "sparse_naive_bayes_path", "fit_core", "path_core"]


def _linear_scores(X, coef, intercept, support):
    """``X coef' + intercept``; scipy.sparse X is multiplied on the host (support columns only).

    ``X`` must be ``(n, m)`` (``m`` the model's features; ``ValueError`` otherwise, dense or
    sparse) and hold finite, non-negative counts: concrete input is checked
    (``ValueError`` naming ``X`` and the entries); under ``jit`` a row with a
    NaN, Inf or negative entry gets NaN scores.
    """
    coef, intercept = _available(coef), _available(intercept)
    X = host_data(X)
    dt = np.dtype(X.dtype) if hasattr(X, "dtype") else np.asarray(X).dtype
    if dt.kind not in "biuf":  # complex X lost its imaginary part silently, text failed inside JAX
        raise TypeError(f"X must hold real counts (integer, float or bool), got dtype {dt}")
    if not is_sparse(X):
        X = device_array(X, coef.dtype)
    # scipy.sparse X too: its product reads the support columns only, so X with fewer or more
    # columns than the model's features gave plausible scores
    if len(X.shape) != 2 or X.shape[1] != coef.shape[1]:
        raise ValueError(f"X must have shape (n, {coef.shape[1]}), got {tuple(X.shape)}")
    if X.shape[0] == 0:
        raise ValueError(f"X is empty (shape {tuple(X.shape)}): nothing to predict")
    check_values(X, "multinomial")  # finite and non-negative (bernoulli models binarise nothing here)
    if is_sparse(X):
        return _sparse_scores(X, coef, intercept, support)
    return _dense_scores(X, coef, intercept)


def _available(a):
    """``a`` in the dtype JAX computes in now: a float64 model fitted with ``jax_enable_x64`` on, used after it
    was turned off, is scored in float32 (its parameters held float64 arrays, so every score failed in a
    ``lax.eq`` dtype error that named nothing). A pickled model is converted so on loading already."""
    dt = getattr(a, "dtype", None)
    if dt is not None and jax.dtypes.canonicalize_dtype(dt) != np.dtype(dt):
        return a.astype(jax.dtypes.canonicalize_dtype(dt))
    return a


def _ruled_out(coef):
    """Entries at an infinity that rule a class out, and ``coef`` with them zeroed.

    ``alpha=0`` can fit a probability of 0 (coef = -inf) or, Bernoulli, of 1 (coef = +inf, see
    ``_classifier``): such a feature contributes 0 where the data agree with it (0 * log 0 = 0, not
    NaN) and rules the class out (-inf) where they do not (x > 0, resp. x < 1); a feature at the
    same infinity in every class rules none out (a term common to all classes, dropped as off the support).
    """
    never = (coef == -jnp.inf) & ~jnp.all(coef == -jnp.inf, axis=0)
    always = (coef == jnp.inf) & ~jnp.all(coef == jnp.inf, axis=0)
    return never, always, jnp.where(jnp.isinf(coef), 0.0, coef)


def _sparse_scores(X, coef, intercept, support):
    """Scores of a scipy.sparse ``X``, multiplied on the host (support columns only)."""
    never, always, coef = _ruled_out(coef)
    idx = np.flatnonzero(np.asarray(support))
    X = X.tocsr()[:, idx]
    scores = jnp.asarray(np.asarray(X @ np.asarray(coef)[:, idx].T)) + intercept
    if np.any(np.asarray(never | always)):
        Xd = X.toarray()  # a model fitted with alpha=0: rare; the support columns only
        never_w, always_w = (np.asarray(a, np.float64)[:, idx].T for a in (never, always))
        miss = (Xd > 0) @ never_w + (Xd < 1) @ always_w
        scores = jnp.where(miss > 0, -jnp.inf, scores)
    return scores


@jax.jit
def _dense_scores(X, coef, intercept):
    """Scores of a dense ``X``: one compiled program per shape (called eagerly, a ``lax.cond``
    on closures compiled a new program at every call), NaN rows for bad counts."""
    never, always, coef = _ruled_out(coef)
    scores = jnp.matmul(X.astype(coef.dtype), coef.T, precision=lax.Precision.HIGHEST) + intercept

    def rule_out(s):
        dt = coef.dtype
        miss = jnp.matmul((X > 0).astype(dt), never.T.astype(dt)) + jnp.matmul((X < 1).astype(dt), always.T.astype(dt))
        return jnp.where(miss > 0, -jnp.inf, s)

    scores = lax.cond(jnp.any(never | always), rule_out, lambda s: s, scores)
    if jnp.issubdtype(X.dtype, jnp.floating):
        rows_ok = jnp.all(jnp.isfinite(X) & (X >= 0), axis=1)
    else:
        rows_ok = jnp.all(X >= 0, axis=1)
    return jnp.where(rows_ok[:, None], scores, jnp.nan)


@partial(
    jax.tree_util.register_dataclass,
    data_fields=["theta", "support", "coef", "intercept"],
    meta_fields=["classes", "model"],
)
@dataclasses.dataclass(frozen=True)
class NaiveBayesModel:
    """A fitted (sparse) naive Bayes classifier.

    The class scores (joint log-likelihood up to a per-row constant) are linear
    in the counts ``x``, with class priors ``pi_c = n_c / n``:

    * multinomial: ``log pi_c + x' log theta_c``, so ``coef_c = log theta_c``
      on the support and ``intercept_c = log pi_c``;
    * Bernoulli: ``log pi_c + x' log theta_c + (1 - x)' log(1 - theta_c)``, so
      ``coef_c = log(theta_c / (1 - theta_c))`` on the support and
      ``intercept_c = log pi_c + sum_{j in support} log(1 - theta_cj)``.

    Off the support ``theta_cj`` is the same for every class, so those terms
    do not depend on ``c`` and are dropped (``coef`` is zero there): the
    classifier reads at most ``k`` features.

    Attributes:
      theta: ``(C, m)`` class parameters (multinomial: word probabilities, each
        row sums to one; Bernoulli: ``P(x_j = 1 | class)``). Outside ``support``
        all classes share one value.
      support: ``(m,)`` boolean mask of the (at most ``k``) features on which the
        classes differ -- the selected features.
      coef, intercept: the linear decision rule: the joint log-likelihood is
        ``X @ coef.T + intercept`` up to a class-independent term;
        ``coef`` is zero outside ``support``. With ``alpha=0`` an entry can be
        ``-inf`` (probability 0: the class needs ``x_j = 0``) or, Bernoulli,
        ``+inf`` (probability 1: the class needs ``x_j = 1``; its ``log(1 - theta)``
        is left out of ``intercept``); the scores treat them so (``0 * log 0 = 0``).
      classes: the class labels (static).
      model: ``"multinomial"`` or ``"bernoulli"`` (static).

    Example:
        >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
        >>> model = sparse_naive_bayes(X, y, 5).value
        >>> model.theta.shape, model.classes, model.model, int(model.support.sum())
        ((2, 50), (0, 1), 'multinomial', 5)
        >>> theta, support = np.asarray(model.theta), np.asarray(model.support)
        >>> bool(np.all(support | (theta[0] == theta[1])))  # one shared theta off the support
        True
        >>> jll = np.asarray(model.joint_log_likelihood(X[:3]))
        >>> lin = X[:3] @ np.asarray(model.coef, float).T + np.asarray(model.intercept)
        >>> bool(np.allclose(jll, lin, atol=1e-3)), model.predict(X[:3]).shape
        (True, (3,))
    """

    theta: Any
    support: Any
    coef: Any
    intercept: Any
    classes: tuple = ()
    model: str = "multinomial"

    def joint_log_likelihood(self, X):
        """``(n, C)`` class scores ``log P(c) + log P(x | c)`` (up to a per-row constant)."""
        return _linear_scores(X, self.coef, self.intercept, self.support)

    def decision_function(self, X):
        """Log-odds ``score(classes[1]) - score(classes[0])`` for two classes, else ``(n, C)`` scores."""
        jll = self.joint_log_likelihood(X)
        return jll[:, 1] - jll[:, 0] if jll.shape[1] == 2 else jll

    def predict_log_proba(self, X):
        jll = self.joint_log_likelihood(X)
        return jll - jax.scipy.special.logsumexp(jll, axis=1, keepdims=True)

    def predict_proba(self, X):
        return jnp.exp(self.predict_log_proba(X))

    def predict_index(self, X):
        """Index (into ``classes``) of the most likely class; ``-1`` for a row of bad counts under jit (NaN scores)
        or a row that every class rules out (all scores ``-inf``: possible with ``alpha=0``)."""
        jll = self.joint_log_likelihood(X)
        undefined = jnp.any(jnp.isnan(jll), axis=1) | jnp.all(jll == -jnp.inf, axis=1)
        return jnp.where(undefined, -1, jnp.argmax(jll, axis=1))

    def predict(self, X):
        """Most likely class labels (NumPy array of ``classes`` values).

        ``X`` must hold finite, non-negative counts: a ``ValueError`` names the
        bad entries of ``X``. Under ``jit`` (numeric classes) a row with NaN,
        Inf or negative counts gets NaN (float labels) or ``-1`` (integer labels).
        """
        idx = self.predict_index(X)
        if not is_concrete(idx):
            if np.asarray(self.classes).dtype.kind not in "biuf":  # was JAX's "not a valid JAX array type"
                raise TypeError(
                    f"under jit / vmap predict returns the labels as a JAX array, which cannot hold the classes "
                    f"{self.classes!r}: use predict_index (indices into classes) there"
                )
            labels = jnp.asarray(self.classes)
            fill = jnp.nan if jnp.issubdtype(labels.dtype, jnp.inexact) else -1
            return jnp.take(labels, idx, mode="fill", fill_value=fill)
        idx = np.asarray(idx)
        if np.any(idx < 0):  # was classes[-1]: the last label, a plausible answer, for undefined scores
            rows = np.flatnonzero(idx < 0)
            raise ValueError(
                f"no class is possible for {rows.size} row(s) of X, e.g. row(s) {rows[:5].tolist()}: their "
                "scores are NaN (check the model's coef and intercept) or -inf for every class (a model "
                "fitted with alpha=0 gives probability 0 to counts it never saw in any class)"
            )
        return np.asarray(self.classes)[idx]


class SNBPath(NamedTuple):
    """A k-path of sparse naive Bayes: bounds and recovered objectives per ``k``.

    With ``phi(k)`` the optimal log-likelihood of naive Bayes whose classes
    differ on at most ``k`` features, every entry certifies
    ``objective <= phi(k) <= psi`` (and ``psi_lower <= psi(k) <= psi`` for the
    dual solve's accuracy), so ``gap = psi - objective`` bounds the
    sub-optimality of the recovered point. By Shapley-Folkman
    ``psi(k - C - 2) <= phi(k)`` (``psi(k - 4)`` for two classes): the bound is
    tight once adding features gains little. Built by
    :func:`sparse_naive_bayes_path`.

    Example:
        >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
        >>> ks = np.unique(np.geomspace(1, X.shape[1], 20).astype(int))
        >>> path = sparse_naive_bayes_path(X, y, ks).value
        >>> path.k[:4].tolist(), path.psi.shape == ks.shape
        ([1, 2, 3, 4], True)
        >>> bool(np.allclose(np.asarray(path.gap), np.asarray(path.psi) - np.asarray(path.objective)))
        True
    """

    k: jax.Array  # (K,) sparsity levels
    psi: jax.Array  # (K,) certified upper bound psi(k) >= phi(k)
    psi_lower: jax.Array  # (K,) certified lower bound on psi(k) (dual solver accuracy)
    objective: jax.Array  # (K,) log-likelihood of the recovered k-sparse point <= phi(k)
    gap: jax.Array  # (K,) psi - objective >= phi(k) - objective


def _classifier(theta, mask, n_samples, model, log_theta=None):
    log_prior = jnp.log(n_samples) - jnp.log(jnp.sum(n_samples))
    log_theta = jnp.log(theta) if log_theta is None else log_theta
    if model == "bernoulli":
        log1m = jnp.log1p(-theta)
        coef = jnp.where(mask, log_theta - log1m, 0)
        # theta = 1 (alpha=0): coef = +inf marks "x must be 1" for _linear_scores; its log(1 - theta)
        # = -inf kept out of the intercept (it made every score -inf + inf = NaN)
        intercept = log_prior + jnp.sum(jnp.where(mask & (theta < 1), log1m, 0), axis=1)
    else:
        coef = jnp.where(mask, log_theta, 0)
        intercept = log_prior
    return coef, intercept


def _final_code(dual_result, finite):
    """The dual solve's code, or ``nonfinite`` when the recovered classifier is not finite."""
    return jnp.where(finite, dual_result, jnp.int32(RESULTS.nonfinite)).astype(jnp.int32)


def _input_code(counts, n_samples, k, model, alpha, tol):
    """``RESULTS`` code for what :func:`_check_sums` / :func:`_check_k` / :func:`_check_model_alpha`
    cannot see under ``jit``.

    ``nonfinite`` for NaN/Inf sums (:func:`class_sums` NaN-poisons the sums of
    traced bad counts or labels) or a NaN/Inf ``alpha``, ``infeasible`` for
    negative sums, an empty class, Bernoulli sums above the class sizes, ``k``
    outside ``[0, m]`` (previously clamped silently), a negative ``alpha``
    (previously fitted and reported successful) or a ``tol`` that is not a
    finite number ``>= 0`` (``tol = inf`` certified the first dual point:
    ``successful`` with a dual gap of 3e-3; NaN ran on and reported success);
    ``successful`` for every input the eager checks accept.
    """
    finite = jnp.all(jnp.isfinite(counts)) & jnp.all(jnp.isfinite(n_samples)) & jnp.isfinite(alpha)
    valid = jnp.all(counts >= 0) & jnp.all(n_samples > 0) & (k >= 0) & (k <= counts.shape[1]) & (alpha >= 0)
    valid = valid & jnp.isfinite(tol) & (tol >= 0)
    if model == "bernoulli":
        valid = valid & jnp.all(counts <= n_samples[:, None])
    return jnp.where(~finite, RESULTS.nonfinite, jnp.where(valid, RESULTS.successful, RESULTS.infeasible)).astype(
        jnp.int32
    )


@partial(jax.jit, static_argnames=("model", "max_steps", "method"))
def fit_core(counts, n_samples, k, alpha, tol, *, model, max_steps, method=None):
    """Jitted fit from class sums: ``(theta, support, coef, intercept, result, stats)`` (``k`` traced)."""
    dt = counts.dtype
    if model == "bernoulli":
        theta, mask, objective = fit_bernoulli(counts, n_samples, k, alpha)
        log_theta = None
        upper = lower = objective
        p = n_samples / jnp.sum(n_samples)
        num_steps = jnp.asarray(0, jnp.int32)
        dual_result = jnp.int32(RESULTS.successful)
    else:
        pb = multinomial_problem(counts, alpha)
        sol = solve_dual(pb, k, tol, max_steps, method=method)
        mask, _ = recover(pb, sol, k)
        theta, log_theta, objective = theta_from_mask(pb, mask)
        upper, lower, p = sol.upper, sol.lower, sol.p
        num_steps, dual_result = sol.num_steps, sol.result
    coef, intercept = _classifier(theta, mask, n_samples, model, log_theta)
    finite = jnp.isfinite(upper) & jnp.isfinite(objective) & jnp.all(jnp.isfinite(theta))
    stats = {
        "num_steps": num_steps,
        "max_steps": jnp.asarray(max_steps if model != "bernoulli" else 0, jnp.int32),
        "gap": (upper - objective).astype(dt),
        "dual_gap": (upper - lower).astype(dt),
        "psi": upper.astype(dt),
        "psi_lower": lower.astype(dt),
        "objective": objective.astype(dt),
        "dual": p.astype(dt),
    }
    # bad input under jit: a non-success code and NaN everywhere, never a plausible model
    in_code = _input_code(counts, n_samples, k, model, alpha, tol)
    ok = in_code == RESULTS.successful
    theta, coef, intercept = poison(ok, theta, coef, intercept)
    stats = {key: poison(ok, v) for key, v in stats.items()}
    return theta, mask, coef, intercept, combine_codes(in_code, _final_code(dual_result, finite)), stats


@partial(jax.jit, static_argnames=("model", "max_steps", "batch_size"))
def path_core(counts, n_samples, ks, alpha, tol, *, model, max_steps, batch_size):
    """Jitted ``k``-path from class sums: ``(psi, psi_lower, objective, num_steps, result)`` per ``k``."""
    if model == "bernoulli":

        def one(k):
            _, _, objective = fit_bernoulli(counts, n_samples, k, alpha)
            return objective, objective, objective, jnp.asarray(0, jnp.int32), jnp.int32(RESULTS.successful)

    else:
        pb = multinomial_problem(counts, alpha)  # shared by every k

        def one(k):
            sol = solve_dual(pb, k, tol, max_steps)
            _, objective = recover(pb, sol, k)
            return sol.upper, sol.lower, objective, sol.num_steps, sol.result

    if batch_size >= ks.shape[0]:
        upper, lower, obj, steps, codes = jax.vmap(one)(ks)
    elif batch_size == 1:  # a plain loop: no batching at all
        upper, lower, obj, steps, codes = lax.map(one, ks)
    else:
        upper, lower, obj, steps, codes = lax.map(one, ks, batch_size=batch_size)
    finite = jnp.isfinite(upper) & jnp.isfinite(obj)
    in_code = jax.vmap(lambda k: _input_code(counts, n_samples, k, model, alpha, tol))(ks)
    ok = in_code == RESULTS.successful
    upper, lower, obj = poison(ok, upper, lower, obj)
    return upper, lower, obj, steps, combine_codes(in_code, _final_code(codes, finite))


def _check_real(x, name, what):
    """A real scalar setting: text, ``None``, bools and other non-numbers raise a ``TypeError`` naming ``name``."""
    if (
        x is None
        or isinstance(x, (str, bytes, bool, np.bool_))
        or not (isinstance(x, numbers.Real) or (hasattr(x, "dtype") and np.dtype(x.dtype).kind in "iuf"))
    ):
        raise TypeError(f"{name} must be {what}, got {x!r} ({type(x).__name__})")


def _check_tol(tol):
    """``tol``: a finite number >= 0 (tol=-1 or NaN ran and reported success); a traced one is taken as it is."""
    _check_real(tol, "tol", "a finite number >= 0 (relative dual gap)")
    if is_concrete(tol) and (np.ndim(tol) != 0 or not (np.isfinite(tol) and tol >= 0)):
        raise ValueError(f"tol must be a finite number >= 0 (relative dual gap), got {tol!r}")
    return tol


def _check_max_steps(max_steps):
    max_steps = int_setting(max_steps, "max_steps")
    if not (is_int(max_steps) and max_steps >= 1):
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    return max_steps


def _check_model_alpha(model, alpha):
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    _check_real(alpha, "alpha", "a finite number >= 0 (Laplace smoothing)")
    if is_concrete(alpha):
        a = np.asarray(alpha)
        if a.ndim != 0 or not np.isfinite(a) or a < 0:
            raise ValueError(f"alpha (Laplace smoothing) must be a finite number >= 0, got {alpha!r}")


def _check_k(k, m, name="k"):
    if isinstance(k, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {k!r}")
    if is_concrete(k):
        arr = np.asarray(k)
        if not np.issubdtype(arr.dtype, np.integer):
            if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
                arr = arr.astype(np.int64)
            else:
                raise TypeError(f"{name} must be an integer number of features, got {k!r}")
        if np.any(arr < 0) or np.any(arr > m):
            bad = arr[(arr < 0) | (arr > m)].ravel()[:5]
            raise ValueError(f"{name} must lie in [0, {m}] (the number of features), got {bad.tolist()}")
        return arr
    if not jnp.issubdtype(k.dtype, jnp.integer):
        raise TypeError(f"{name} must have an integer dtype, got {k.dtype}")
    return k


def _check_sums(sums: ClassSums, model, alpha=1.0):
    C = sums.num_classes
    if C < 2:
        raise ValueError(
            f"sparse naive Bayes needs at least two classes, got {C}"
            + (f" (only label {sums.classes[0]!r})" if C == 1 else "")
        )
    if is_concrete(sums.n_samples):
        n = np.asarray(sums.n_samples)
        empty = [c for c, v in zip(sums.classes, n) if v <= 0]
        if empty:
            raise ValueError(f"class(es) {empty} have no samples")
    if is_concrete(sums.counts):
        counts = np.asarray(sums.counts)
        if not np.all(np.isfinite(counts)):
            raise ValueError("the class sums contain NaN or Inf")
        if np.any(counts < 0):
            raise ValueError("the class sums contain negative values; X must be non-negative")
        if model == "multinomial" and is_concrete(alpha) and float(alpha) == 0:
            empty = [c for c, t in zip(sums.classes, counts.sum(axis=1)) if t <= 0]
            if empty:
                raise ValueError(
                    f"class(es) {empty} have all-zero counts, so their multinomial "
                    "parameters are undefined with alpha=0; use alpha > 0"
                )
        if model == "bernoulli" and is_concrete(sums.n_samples):
            over = counts > np.asarray(sums.n_samples)[:, None]
            if over.any():
                c, j = np.argwhere(over)[0]
                raise ValueError(
                    "model='bernoulli' needs binary X, but the class sums exceed the "
                    f"class sizes (e.g. feature {j} in class {sums.classes[c]!r}); "
                    "binarise with (X > 0) or use model='multinomial'"
                )


def _default_tol(dtype):
    return 1e-10 if jnp.dtype(dtype) == jnp.float64 else 1e-5


def _as_sums(X, y, classes, model) -> ClassSums:
    if isinstance(X, ClassSums):
        if y is not None:
            raise ValueError("pass y=None when X is a ClassSums")
        if classes is not None and tuple(label_tuple(np.asarray(classes))) != X.classes:
            raise ValueError(f"classes {tuple(classes)} do not match the sums' classes {X.classes}")
        return X
    return class_sums(X, y, classes=classes, model=model)


def sparse_naive_bayes(
    X,
    y,
    k,
    *,
    model: str = "multinomial",
    alpha=1.0,
    classes=None,
    tol=None,
    max_steps: int = 100,
    throw: bool = False,
) -> Solution:
    r"""Naive Bayes with at most ``k`` features: exact (Bernoulli) or dual-certified (multinomial).

    Solves ``max_theta L(theta)`` s.t. the class parameters differ on at most
    ``k`` features (see the module docstring for the exact objectives):

    * ``model="bernoulli"`` (binary ``X``): exact, ``theta`` = top-``k`` of the
      per-feature log-likelihood gain of separate class parameters over pooled
      ones (Theorem 3; any number of classes).
    * ``model="multinomial"``: the dual
      ``psi(k) = K + min_{p in simplex} s_k(h(p))`` is solved (bisection on
      ``p = (a, 1 - a)`` for two classes; fully corrective Frank-Wolfe on the
      dual of the dual for ``C > 2``), then a primal point is recovered in closed
      form on ``T = top-k of h(p*)`` (Theorem 4; or, when better, a neighbouring
      top-``k`` set or the rounded optimal mixture of such sets). Certified:
      ``objective <= phi(k) <= psi(k) <= stats["psi"]`` and, by Shapley-Folkman,
      ``psi(k - C - 2) <= phi(k)`` (``psi(k-4)`` for two classes).

    Laplace smoothing ``alpha`` is applied as in scikit-learn; with ``k = m``
    the result equals ``MultinomialNB(alpha)`` / ``BernoulliNB(alpha)``.

    Args:
      X: ``(n, m)`` non-negative data (dense, ``scipy.sparse``, Dask, or an
        iterable of ``(X_chunk, y_chunk)`` with ``y=None``), or a
        :class:`ClassSums` (then ``y=None``).
      y: ``(n,)`` labels (at least two classes).
      k: number of features allowed to differ between classes, ``0 <= k <= m``
        (may be traced: no recompilation per ``k``; vmappable). A traced ``k``
        outside ``[0, m]`` gives ``RESULTS.infeasible`` and NaN parameters.
      model: ``"multinomial"`` (counts) or ``"bernoulli"`` (binary X).
      alpha: Laplace smoothing (pseudo-count), ``>= 0`` (may be traced: a traced
        negative ``alpha`` gives ``RESULTS.infeasible`` and NaN parameters).
      classes: label order (default: sorted unique labels); needed under ``jit``.
      tol: relative tolerance on the dual gap ``psi_upper - psi_lower``
        (default ``1e-10`` in float64, ``1e-5`` in float32).
      max_steps: maximum number of dual steps.
      throw: raise ``RuntimeError`` if the dual solve did not converge.

    Returns:
      :class:`~jaxknock.Solution` with ``value`` a :class:`NaiveBayesModel`
      (``theta``, ``support``, ``coef``, ``intercept``; ``predict`` ...),
      ``result`` a ``RESULTS`` code and ``stats``: ``objective`` (log-likelihood
      of the returned point), ``psi`` (upper bound on the optimum), ``gap``
      (``psi - objective``, certified sub-optimality), ``dual_gap`` (accuracy of
      the dual solve), ``psi_lower``, ``dual`` (the dual point ``p``; class
      frequencies for Bernoulli), ``num_steps``, ``max_steps``. Bernoulli is
      exact: ``gap = 0``, ``num_steps = max_steps = 0``. ``state`` holds the
      :class:`ClassSums` (reuse them for other ``k`` or a path).

      Bad input raises ``ValueError`` when concrete; under ``jit`` it gives a
      non-success ``result`` and NaN ``theta`` / ``coef`` / ``intercept`` /
      stats: ``nonfinite`` for NaN/Inf, negative or (Bernoulli) non-binary
      ``X`` or a label outside ``classes`` (the sums are NaN-poisoned),
      ``infeasible`` for invalid :class:`ClassSums` (negative, an empty class),
      ``k`` outside ``[0, m]``, a negative ``alpha`` or a ``tol`` that is not a
      finite number ``>= 0``.

    Example::

        >>> import numpy as np, jaxknock as jk
        >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
        >>> sol = jk.sparse_naive_bayes(X, y, 5)
        >>> int(sol.value.support.sum()), bool(sol.stats["gap"] >= -1e-9)
        (5, True)
        >>> labels = sol.value.predict(X)
    """
    _check_model_alpha(model, alpha)
    max_steps = _check_max_steps(max_steps)
    sums = _as_sums(X, y, classes, model)
    _check_sums(sums, model, alpha)
    m = sums.num_features
    k = _check_k(k, m)
    if np.ndim(k) != 0:  # was a broadcasting error inside the solver
        raise ValueError(
            f"k must be a single integer, got shape {np.shape(k)}: use sparse_naive_bayes_path for several k"
        )
    dtype = sums.counts.dtype
    tol = _default_tol(dtype) if tol is None else _check_tol(tol)
    theta, mask, coef, intercept, code, stats = fit_core(
        sums.counts,
        sums.n_samples,
        jnp.asarray(k, jnp.int32),
        jnp.asarray(alpha, dtype),
        jnp.asarray(tol, dtype),
        model=model,
        max_steps=int(max_steps),
    )
    value = NaiveBayesModel(theta, mask, coef, intercept, sums.classes, model)
    return raise_if_failed(Solution(value, code, stats, sums), throw)


def sparse_naive_bayes_path(
    X,
    y,
    ks,
    *,
    model: str = "multinomial",
    alpha=1.0,
    classes=None,
    tol=None,
    max_steps: int = 100,
    batch_size: int | None = None,
    throw: bool = False,
) -> Solution:
    r"""The dual bound ``psi(k)`` and the recovered objective for a whole path of ``k``.

    One call, one pass over the data: the class sums are formed once and the
    dual is solved for every ``k`` with ``vmap`` (in batches of ``batch_size``
    values of ``k`` to bound memory at ``O(batch_size * C * m)``). Plot
    ``psi`` against ``k`` and read off the elbow; by Shapley-Folkman the
    optimum satisfies ``psi(k - C - 2) <= phi(k) <= psi(k)``, and
    ``objective(k) <= phi(k)`` for the recovered point. For the Bernoulli model
    ``psi = objective = phi(k)`` exactly.

    Args:
      X, y, model, alpha, classes, tol, max_steps, throw: as in
        :func:`sparse_naive_bayes`.
      ks: 1-D integer array of sparsity levels in ``[0, m]`` (under ``jit``, a ``k``
        outside gets ``RESULTS.infeasible`` and NaN bounds).
      batch_size: how many ``k`` to solve at once with ``vmap`` (the batches run
        one after another with ``lax.map``). Default: 1 on CPU, where XLA's
        batched scatter is slower than a loop; elsewhere as many as fit in about
        ``2**24`` elements per array.

    Returns:
      :class:`~jaxknock.Solution` with ``value`` an :class:`SNBPath`
      ``(k, psi, psi_lower, objective, gap)``, ``result`` a ``RESULTS`` code per
      ``k`` and ``stats`` with ``num_steps`` (per ``k``), ``max_steps``, ``gap``
      and ``dual_gap``.

    Example::

        >>> import numpy as np, jaxknock as jk
        >>> X = np.random.default_rng(0).poisson(1.0, (200, 50)); y = np.arange(200) % 2
        >>> ks = np.unique(np.geomspace(1, X.shape[1], 20).astype(int))
        >>> path = jk.sparse_naive_bayes_path(X, y, ks).value
        >>> path.psi.shape == ks.shape
        True
    """
    _check_model_alpha(model, alpha)
    max_steps = _check_max_steps(max_steps)
    sums = _as_sums(X, y, classes, model)
    _check_sums(sums, model, alpha)
    m = sums.num_features
    ks_arr = _check_k(ks if not is_concrete(ks) else np.asarray(ks), m, "ks")
    if ks_arr.ndim != 1:
        raise ValueError(f"ks must be a 1-D array of sparsity levels, got shape {tuple(ks_arr.shape)}")
    if batch_size is None:
        # one k at a time where a batched scatter (the radix histograms) is slower
        # than a loop (XLA:CPU, see _backend.loop_over_batch); accelerators vmap as
        # many k as fit in ~2**24 elements per array.
        budget = 1 if _backend.loop_over_batch("snb_path") else 2**24 // max(m * sums.num_classes, 1)
        batch_size = int(max(1, min(ks_arr.shape[0], budget)))
    elif not (is_int(batch_size := int_setting(batch_size, "batch_size")) and batch_size >= 1):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    dtype = sums.counts.dtype
    tol = _default_tol(dtype) if tol is None else _check_tol(tol)
    upper, lower, obj, steps, code = path_core(
        sums.counts,
        sums.n_samples,
        jnp.asarray(ks_arr, jnp.int32),
        jnp.asarray(alpha, dtype),
        jnp.asarray(tol, dtype),
        model=model,
        max_steps=int(max_steps),
        batch_size=int(batch_size),
    )
    value = SNBPath(jnp.asarray(ks_arr), upper, lower, obj, upper - obj)
    stats = {
        "num_steps": steps,
        "max_steps": jnp.asarray(max_steps if model != "bernoulli" else 0, jnp.int32),
        "gap": upper - obj,
        "dual_gap": upper - lower,
    }
    return raise_if_failed(Solution(value, code, stats, sums), throw)
