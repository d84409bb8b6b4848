r"""scikit-learn estimators: :class:`KnockoffSelector`, :class:`SparseNaiveBayes`,
:class:`StabilitySelector` and :class:`RandSelSelector`.

These are the only estimators of jaxknock. scikit-learn is an optional
dependency (``pip install "jaxknock[sklearn]"``) and ``import jaxknock`` does
not import this module; ``jaxknock.SparseNaiveBayes`` loads it on first use.
With scikit-learn installed all four estimators pass
``sklearn.utils.estimator_checks.check_estimator`` (given
``expected_failed_checks=expected_failed_checks(est)``: one known failure of
:class:`SparseNaiveBayes`, which refuses negative counts) and work inside
``Pipeline`` and ``GridSearchCV``::

    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.linear_model import LinearRegression
    >>> from jaxknock.sklearn import KnockoffSelector
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((300, 20)); y = X[:, :8].sum(1) + rng.standard_normal(300)
    >>> selector = KnockoffSelector(fdr=0.2, method="equicorrelated", statistic="correlation", random_state=0)
    >>> pipe = make_pipeline(selector, LinearRegression())
    >>> pipe.fit(X, y).predict(X).shape
    (300,)

Without scikit-learn, :class:`SparseNaiveBayes` still works (a minimal
``get_params`` / ``set_params`` / ``transform`` / ``score`` base stands in for
scikit-learn's mixins and input validation is left to
:func:`jaxknock.sparse_naive_bayes`); :class:`KnockoffSelector` needs it.

Fits run in float64 (``jax.enable_x64`` is switched on for the duration of
``fit`` only) because the SDP solvers need double precision; the fitted
attributes are NumPy arrays, so fitted estimators pickle and clone cleanly.
"""

from __future__ import annotations

import inspect
import numbers
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse

from jaxknock import _checks, _containers
from jaxknock.naive_bayes.model import sparse_naive_bayes
from jaxknock.naive_bayes.sums import ClassSums
from jaxknock.pipeline import AGGREGATES, S_METHODS, STATISTICS, Selection, knockoff_filter
from jaxknock.svector.group import Groups

try:
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.exceptions import ConvergenceWarning, NotFittedError
    from sklearn.feature_selection import SelectorMixin
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, check_non_negative, validate_data

    HAVE_SKLEARN = True
except ImportError:  # scikit-learn missing (or older than 1.6): minimal stand-ins for SparseNaiveBayes
    HAVE_SKLEARN = False

    class NotFittedError(ValueError, AttributeError):
        """An estimator was used before ``fit`` (scikit-learn's exception when installed)."""

    class BaseEstimator:
        """``get_params`` / ``set_params`` / ``repr`` from the ``__init__`` signature, as in scikit-learn."""

        @classmethod
        def _get_param_names(cls):
            sig = inspect.signature(cls.__init__)
            return sorted(p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD)

        def get_params(self, deep: bool = True) -> dict:
            return {name: getattr(self, name) for name in self._get_param_names()}

        def set_params(self, **params):
            valid = self._get_param_names()
            for name, value in params.items():
                if name not in valid:
                    raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid: {valid}")
                setattr(self, name, value)
            return self

        def __repr__(self) -> str:
            defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
            changed = [
                f"{k}={v!r}" for k, v in self.get_params().items() if v is not defaults.get(k) and v != defaults.get(k)
            ]
            return f"{type(self).__name__}({', '.join(changed)})"

    class ClassifierMixin:
        def score(self, X, y, sample_weight=None) -> float:
            """Mean accuracy of ``predict(X)`` against ``y``."""
            return float(np.average(np.asarray(self.predict(X)) == np.asarray(y), weights=sample_weight))

    class SelectorMixin:
        def get_support(self, indices: bool = False):
            mask = self._get_support_mask()
            return np.flatnonzero(mask) if indices else mask.copy()

        def transform(self, X):
            """The selected columns of ``X`` (NumPy, JAX or scipy.sparse)."""
            mask = self._get_support_mask()
            if X.shape[1] != mask.shape[0]:
                raise ValueError(f"X has {X.shape[1]} features, but the selector was fitted on {mask.shape[0]}")
            idx = np.flatnonzero(mask)
            if scipy.sparse.issparse(X):
                return X.tocsr()[:, idx] if X.format not in ("csr", "csc") else X[:, idx]
            if isinstance(X, jax.Array):
                return X[:, jnp.asarray(idx)]
            return np.asarray(X)[:, idx]

        def fit_transform(self, X, y=None, **fit_params):
            return self.fit(X, y, **fit_params).transform(X)


def _validate_unmasked(estimator, X, y="no_validation", **kwargs):
    """scikit-learn's ``validate_data``, after refusing a NumPy masked ``X`` or ``y`` with a masked entry.

    ``check_array`` reads a masked array through ``np.asarray``: the value under each mask was fitted as data.
    """
    X = _containers.unmasked(X, "X")
    if isinstance(y, str) and y == "no_validation":  # scikit-learn's default: validate X alone
        return validate_data(estimator, X, **kwargs)
    return validate_data(estimator, X, _containers.unmasked(y, "y"), **kwargs)


__all__ = ["KnockoffSelector", "RandSelSelector", "SparseNaiveBayes", "StabilitySelector", "expected_failed_checks"]

_SKLEARN_MISSING = (
    "jaxknock.sklearn.{name} needs scikit-learn >= 1.6, which is not installed: "
    'pip install scikit-learn (or pip install "jaxknock[sklearn]")'
)


class _NotFitted(NotFittedError, RuntimeError):
    """``predict`` / ``transform`` before ``fit`` (scikit-learn's NotFittedError, also a RuntimeError)."""


_METHOD_ALIASES = {"equi": "equicorrelated", "sdp-factor": "sdp_factor", "mvr-factor": "mvr_factor"}


def _key_from_random_state(random_state):
    """A ``jax.random`` key from ``None`` (fresh entropy), an int or a ``RandomState``/``Generator``."""
    if random_state is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    elif isinstance(random_state, numbers.Integral):
        seed = int(random_state)
        if not -(2**63) <= seed < 2**63:  # jax.random.key's range: beyond it NumPy's OverflowError, deep in JAX
            raise ValueError(f"random_state must be an integer in [-2**63, 2**63), got {seed}")
    elif isinstance(random_state, np.random.RandomState):
        seed = int(random_state.randint(np.iinfo(np.int32).max))
    elif isinstance(random_state, np.random.Generator):
        seed = int(random_state.integers(np.iinfo(np.int32).max))
    else:
        raise ValueError(f"random_state must be None, an int, a RandomState or a Generator, got {random_state!r}")
    return jax.random.key(seed)


def _to_numpy(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a) if isinstance(a, jax.Array) else a, tree)


class _RandomisedSelector(SelectorMixin, BaseEstimator):
    """Shared tags of the selectors that draw random numbers (dense ``X``, a target, ``random_state``)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        tags.non_deterministic = self.random_state is None
        return tags


class KnockoffSelector(_RandomisedSelector):
    r"""Model-X knockoff feature selection with false discovery rate control.

    ``fit(X, y)`` runs :func:`jaxknock.knockoff_filter`: standardise ``X``,
    estimate its correlation (Ledoit-Wolf; a factor model for
    ``method="mvr_factor"`` / ``"sdp_factor"``), solve for the knockoff S-vector
    (``diag(s) <= 2 Sigma``), sample ``num_replicates`` Gaussian knockoffs
    ``X~`` in one batch, compute the statistics ``W_j`` (e.g. LCD:
    ``|beta_j| - |beta_{j+p}|`` of a lasso on ``[X, X~]``) and select
    ``{j : W_j >= T}`` with the knockoff+ threshold

    .. math::  T = \min\{t > 0 : (1 + \#\{j: W_j \le -t\}) / \max(1, \#\{j: W_j \ge t\}) \le q\},

    which controls ``E[#false / #selected] <= q = fdr`` (Barber & Candes 2015;
    Candes et al. 2018). Several replicates are combined by e-BH on averaged
    knockoff e-values (Ren & Barber 2022), still at level ``fdr``.
    A binary ``y`` switches the lasso statistics to l1-logistic regression;
    non-numeric binary labels are encoded as 0/1. Any other numeric ``y`` is
    a continuous response (as in scikit-learn's regression selectors), also
    integer class labels, with a warning (:func:`~jaxknock.knockoff_filter`
    itself refuses 3 to 20 integer classes).

    Args:
        fdr: target false discovery rate in (0, 1).
        method: S-vector method: ``"auto"`` (default, as :func:`~jaxknock.knockoff_filter`
            and the CLI: ``"mvr"``, or ``"mvr_factor"`` when ``p >= n`` or with ``rank``; see
            :func:`jaxknock.pipeline.resolve_s_method`), ``"asdp"`` (faster for thousands
            of features), ``"sdp"``, ``"mvr_factor"``, ``"sdp_factor"``, ``"mvr"``, ``"maxent"`` or
            ``"equicorrelated"`` (aliases ``"equi"``, ``"mvr-factor"``, ``"sdp-factor"``).
        statistic: ``"lcd"``, ``"lsm"``, ``"correlation"`` or ``"centroid"``.
        num_replicates: knockoff replicates (aggregated by ``aggregate``).
        random_state: ``None``, int, ``RandomState`` or ``Generator``.
        aggregate: ``"ebh"`` (FDR-valid) or ``"frequency"``.
        rank: factor-model rank for ``"mvr_factor"`` / ``"sdp_factor"``.
        lam: fixed lasso penalty for ``"lcd"`` (default: cross-validated).
        asdp_block_size: block size for ``"asdp"``.
        groups: ``(n_features,)`` group labels, integers or names (or a
            :class:`~jaxknock.svector.group.Groups` index): group knockoffs at
            group-level FDR (``support_`` keeps every feature of the selected
            groups; ``statistics_`` is then per group, ``selection_.selected_groups``
            the selected labels). See :func:`jaxknock.knockoff_filter`.
        num_knockoffs: simultaneous knockoff copies ``m`` (multi-knockoff filter).

    Attributes:
        statistics_: ``(n_features,)`` W statistics (mean over replicates; per group with ``groups``).
        statistics_replicates_: ``(num_replicates, n_features)`` W.
        thresholds_: ``(num_replicates,)`` knockoff(+) thresholds.
        support_: boolean mask of the selected features.
        selected_: indices of the selected features.
        selection_: the full :class:`jaxknock.Selection` (NumPy arrays).
        n_features_in_, feature_names_in_: as in scikit-learn.

    Example::

        sel = KnockoffSelector(fdr=0.1, method="equicorrelated", random_state=0).fit(X, y)
        sel.get_support(indices=True), sel.statistics_[sel.get_support()]
        X_sel = sel.transform(X)
    """

    def __init__(
        self,
        fdr=0.1,
        method="auto",
        statistic="lcd",
        num_replicates=1,
        random_state=None,
        *,
        aggregate="ebh",
        rank=None,
        lam=None,
        asdp_block_size=100,
        groups=None,
        num_knockoffs=1,
    ):
        self.fdr = fdr
        self.method = method
        self.statistic = statistic
        self.num_replicates = num_replicates
        self.random_state = random_state
        self.aggregate = aggregate
        self.rank = rank
        self.lam = lam
        self.asdp_block_size = asdp_block_size
        self.groups = groups
        self.num_knockoffs = num_knockoffs

    def _check_params(self):
        fdr = _checks.real_setting(self.fdr)  # a 0-d NumPy / JAX number (jnp.float32(0.1)) as a float
        if isinstance(fdr, (bool, np.bool_)) or not isinstance(fdr, numbers.Real) or not (0 < fdr < 1):
            raise ValueError(f"fdr must lie in (0, 1), got {self.fdr!r}")
        method = _METHOD_ALIASES.get(self.method, self.method)
        if method not in S_METHODS:
            raise ValueError(f"method must be one of {S_METHODS}, got {self.method!r}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {self.statistic!r}")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {AGGREGATES}, got {self.aggregate!r}")
        if not (_checks.is_int(self.num_replicates) and self.num_replicates >= 1):
            raise ValueError(f"num_replicates must be a positive integer, got {self.num_replicates!r}")
        if not _checks.is_int(self.num_knockoffs):
            raise TypeError(f"num_knockoffs must be a positive integer, got {self.num_knockoffs!r}")
        if self.num_knockoffs < 1:
            raise ValueError(f"num_knockoffs must be a positive integer, got {self.num_knockoffs!r}")
        return method

    def fit(self, X, y):
        """Run the knockoff filter on ``(X, y)`` and store the selection."""
        method = self._check_params()
        X, y = _validate_unmasked(self, X, y, dtype=np.float64, y_numeric=False, ensure_min_samples=2)
        y = np.asarray(y)
        if y.dtype.kind in "iu" and 3 <= np.unique(y).size <= 20:
            warnings.warn(
                f"y holds {np.unique(y).size} distinct integers, which look like class labels; "
                "KnockoffSelector fits them as a continuous response (the knockoff statistics handle a "
                "continuous response or two classes)",
                UserWarning,
                stacklevel=2,
            )
        if y.dtype.kind not in "biuf":
            try:
                y = y.astype(np.float64)  # numbers stored as objects
            except (TypeError, ValueError):
                labels = np.unique(y)
                if labels.size != 2:
                    raise ValueError(
                        f"Unknown label type: a non-numeric y must have exactly two labels "
                        f"(binary selection), got {labels.size}; encode the response as numbers"
                    ) from None
                y = (y == labels[1]).astype(np.float64)
        key = _key_from_random_state(self.random_state)
        with jax.enable_x64(True):
            sel = knockoff_filter(
                key,
                X,
                np.asarray(y, np.float64),
                fdr=float(self.fdr),
                s_method=method,
                rank=self.rank,
                statistic=self.statistic,
                num_replicates=int(self.num_replicates),
                aggregate=self.aggregate,
                lam=self.lam,
                asdp_block_size=self.asdp_block_size,
                **({} if self.groups is None else {"groups": _group_labels(self.groups)}),
                **({} if self.num_knockoffs == 1 else {"num_knockoffs": int(self.num_knockoffs)}),
            )
            sel = Selection(*_to_numpy(tuple(sel)))
        self.selection_ = sel
        self.statistics_replicates_ = np.asarray(sel.W)
        self.statistics_ = self.statistics_replicates_.mean(axis=0)
        self.thresholds_ = np.asarray(sel.thresholds)
        self.support_ = np.asarray(sel.mask, dtype=bool)
        self.selected_ = np.flatnonzero(self.support_)
        return self

    def _get_support_mask(self):
        check_is_fitted(self, "support_")
        return self.support_


def _group_labels(groups):
    """``groups`` for :func:`~jaxknock.knockoff_filter`: a :class:`~jaxknock.svector.group.Groups` index
    as it is (``np.asarray`` of one was NumPy's "inhomogeneous shape"), anything else as an array."""
    return groups if isinstance(groups, Groups) else np.asarray(groups)


def _streamed(X, y) -> bool:
    """Inputs that are not one array to validate: ClassSums, Dask arrays, iterables of (X, y) chunks."""
    if isinstance(X, ClassSums) or (hasattr(X, "blocks") and hasattr(X, "chunks") and hasattr(X, "compute")):
        return True
    if y is not None or hasattr(X, "shape") or hasattr(X, "__array__"):
        return False
    if isinstance(X, (list, tuple)):  # a list of (X_chunk, y_chunk) pairs, not nested lists of numbers
        return len(X) > 0 and all(isinstance(p, tuple) and len(p) == 2 and hasattr(p[0], "shape") for p in X)
    return True  # a generator / iterator of chunks


class SparseNaiveBayes(ClassifierMixin, SelectorMixin, BaseEstimator):
    r"""Sparse naive Bayes as a classifier and feature selector (scikit-learn API).

    ``fit`` solves :func:`jaxknock.sparse_naive_bayes`: naive Bayes whose class
    parameters differ on at most ``k`` features (Askari et al. 2020), exact for
    ``model="bernoulli"`` and with a certified gap for ``"multinomial"``.
    ``transform`` keeps the selected columns (dense or ``scipy.sparse``);
    ``predict`` / ``predict_proba`` / ``decision_function`` use the sparse
    classifier itself. ``fit`` also accepts what :func:`~jaxknock.sparse_naive_bayes`
    accepts beyond one array: a :class:`~jaxknock.ClassSums`, a Dask array, or an
    iterable of ``(X_chunk, y_chunk)`` pairs (with ``y=None``), and forwards
    keyword arguments (``max_steps``, ``tol``, ``classes``) to it.

    With scikit-learn installed it passes ``check_estimator`` (input validation,
    tags, ``feature_names_in_``, ``NotFittedError``); without it a minimal base
    provides ``get_params`` / ``set_params`` / ``transform`` / ``score``.

    Args:
        k: number of features the classifier may use (``<= n_features``).
        model: ``"multinomial"`` (counts) or ``"bernoulli"`` (binary X).
        alpha: Laplace smoothing.

    Attributes:
        support_, coef_, intercept_, theta_, classes_, n_features_in_: the fit.
        objective_, psi_, gap_, result_: log-likelihood, upper bound, certified
        gap and ``RESULTS`` code; ``solution_`` / ``model_``: the full
        :class:`~jaxknock.Solution` and :class:`~jaxknock.NaiveBayesModel` (NumPy).

    Example::

        >>> import numpy as np
        >>> X = np.random.default_rng(0).poisson(1.0, (200, 30)); y = np.arange(200) % 2
        >>> clf = SparseNaiveBayes(k=5).fit(X, y)
        >>> clf.transform(X).shape, clf.predict(X[:4]).shape
        ((200, 5), (4,))
    """

    def __init__(self, k=10, model="multinomial", alpha=1.0):
        self.k = k
        self.model = model
        self.alpha = alpha

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = False
        # like scikit-learn's own MultinomialNB: a count model with (by design) few
        # features does not reach 83% training accuracy on check_estimator's Gaussian blobs
        tags.classifier_tags.poor_score = True
        return tags

    def _check_fitted(self):
        if not hasattr(self, "solution_"):
            raise _NotFitted(
                f"This {type(self).__name__} instance is not fitted yet; call fit(X, y) before using this estimator"
            )

    def _validate_fit(self, X, y):
        X, y = _validate_unmasked(self, X, y, accept_sparse=["csr", "csc"], dtype=np.float64)
        check_non_negative(X, "SparseNaiveBayes (input X)")
        check_classification_targets(y)
        if not (_checks.is_int(self.k) and self.k >= 0):
            raise ValueError(f"k must be a non-negative integer, got {self.k!r}")
        if self.k > X.shape[1]:
            raise ValueError(f"k={self.k} exceeds the number of features: X has {X.shape[1]} feature(s)")
        if np.unique(y).size < 2:
            raise ValueError(f"SparseNaiveBayes needs samples of at least two classes; got 1 class ({y[0]!r})")
        return X, y

    def fit(self, X, y=None, **fit_params):
        """Solve the sparse naive Bayes problem on non-negative ``X`` (see the class docstring)."""
        if HAVE_SKLEARN and not _streamed(X, y):
            X, y = self._validate_fit(X, y)
        with jax.enable_x64(True):
            sol = sparse_naive_bayes(X, y, self.k, model=self.model, alpha=self.alpha, **fit_params)
            sol = _to_numpy(sol)
        nb = sol.value
        self.solution_ = sol
        self.model_ = nb
        self.classes_ = np.asarray(nb.classes)
        self.n_features_in_ = int(nb.theta.shape[1])
        self.support_ = np.asarray(nb.support)
        self.coef_ = np.asarray(nb.coef)
        self.intercept_ = np.asarray(nb.intercept)
        self.theta_ = np.asarray(nb.theta)
        self.objective_ = float(sol.stats["objective"])
        self.psi_ = float(sol.stats["psi"])
        self.gap_ = float(sol.stats["gap"])
        self.result_ = int(sol.result)
        return self

    def _get_support_mask(self):
        self._check_fitted()
        return np.asarray(self.support_, dtype=bool)

    def _validate_predict(self, X):
        self._check_fitted()
        if not HAVE_SKLEARN:
            return X
        return _validate_unmasked(self, X, accept_sparse=["csr", "csc"], dtype=np.float64, reset=False)

    def decision_function(self, X):
        """Log-odds ``score(classes_[1]) - score(classes_[0])`` for two classes, else ``(n, C)`` scores."""
        X = self._validate_predict(X)
        with jax.enable_x64(True):
            return np.asarray(self.model_.decision_function(X))

    def predict_log_proba(self, X):
        X = self._validate_predict(X)
        with jax.enable_x64(True):
            return np.asarray(self.model_.predict_log_proba(X))

    def predict_proba(self, X):
        X = self._validate_predict(X)
        with jax.enable_x64(True):
            return np.asarray(self.model_.predict_proba(X))

    def predict(self, X):
        X = self._validate_predict(X)
        with jax.enable_x64(True):
            return np.asarray(self.model_.predict(X))


def _encode_target(y):
    """Numeric ``y`` as float64; two non-numeric labels as 0/1 (as :class:`KnockoffSelector`)."""
    y = np.asarray(y)
    if y.dtype.kind in "biuf":
        return y.astype(np.float64)
    try:
        return y.astype(np.float64)
    except (TypeError, ValueError):
        labels = np.unique(y)
        if labels.size != 2:
            raise ValueError(
                f"Unknown label type: a non-numeric y must have exactly two labels, got {labels.size}; "
                "encode the response as numbers"
            ) from None
        return (y == labels[1]).astype(np.float64)


def _standardise(X):
    """Columns centred and scaled to unit variance (constant ones left at 0), each on its exact power-of-two
    rescaling first (as :func:`jaxknock._scaling.standardise_columns`): the variance of a column in units of
    ``1e160`` overflowed, so the column was divided by ``inf`` and could never be selected."""
    X = np.ldexp(X, -np.frexp(np.max(np.abs(X), axis=0))[1])
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


class StabilitySelector(_RandomisedSelector):
    r"""Stability selection (Meinshausen & Bühlmann 2010) with error control.

    ``fit(X, y)`` standardises the columns of ``X`` and runs
    :func:`jaxknock.stability.stability_selection`: lasso paths (l1-logistic
    for a binary ``y`` with ``loss="auto"``) on ``num_subsamples`` complementary
    half-samples; a feature is selected when its selection probability
    reaches ``threshold`` somewhere on the lambda range, and
    ``E[#false selections] <= bound_`` (Shah & Samworth's unimodal bound with
    pairs). The lambda range (or, with ``threshold=None``, the threshold) is
    chosen so that ``E[#false selections] <= expected_false`` (default 1;
    ``None``: the whole grid, whose bound is vacuous when ``n_features`` is
    small against ``n_samples``).

    Attributes:
        probabilities_: ``(n_features, num_lambdas)`` selection probabilities.
        max_probability_: ``(n_features,)`` maximum over the chosen range.
        support_, selected_: mask and indices of the selected features.
        threshold_, bound_, lambdas_: the threshold used, the E[V] bound, the grid.
        result_: the :class:`jaxknock.stability.StabilityResult`.

    Example::

        sel = StabilitySelector(threshold=0.7, random_state=0).fit(X, y)
        sel.get_support(indices=True), sel.max_probability_
    """

    def __init__(
        self,
        threshold=0.6,
        num_subsamples=100,
        num_lambdas=50,
        random_state=None,
        *,
        eps=1e-2,
        fraction=0.5,
        complementary_pairs=True,
        expected_false=1.0,
        loss="auto",
        solver="auto",
    ):
        self.threshold = threshold
        self.num_subsamples = num_subsamples
        self.num_lambdas = num_lambdas
        self.random_state = random_state
        self.eps = eps
        self.fraction = fraction
        self.complementary_pairs = complementary_pairs
        self.expected_false = expected_false
        self.loss = loss
        self.solver = solver

    def fit(self, X, y):
        """Run stability selection on ``(X, y)`` and store the stable set."""
        from jaxknock.stability import stability_selection

        if self.loss not in ("auto", "squared", "logistic"):
            raise ValueError(f"loss must be 'auto', 'squared' or 'logistic', got {self.loss!r}")
        X, y = _validate_unmasked(self, X, y, dtype=np.float64, y_numeric=False, ensure_min_samples=4)
        y = _encode_target(y)
        loss = self.loss
        if loss == "auto":
            loss = "logistic" if np.unique(y).size == 2 else "squared"
        if loss == "logistic" and np.unique(y).size == 2:
            y = (y == y.max()).astype(np.float64)  # any two numeric labels (e.g. {1, 2}) as 0/1
        with jax.enable_x64(True):
            res = stability_selection(
                _key_from_random_state(self.random_state),
                _standardise(X),
                y,
                num_lambdas=self.num_lambdas,
                eps=self.eps,
                num_subsamples=self.num_subsamples,
                fraction=self.fraction,
                complementary_pairs=self.complementary_pairs,
                threshold=self.threshold,
                expected_false=self.expected_false,
                loss=loss,
                solver=self.solver,
            )
            res = res._replace(**_to_numpy(res._asdict()))
        if int(np.sum(res.num_failed)) > 0:  # the stable set came out of understated probabilities, silently
            warnings.warn(res.explanation, ConvergenceWarning, stacklevel=2)
        self.result_ = res
        self.probabilities_ = np.asarray(res.probabilities)
        self.max_probability_ = np.asarray(res.max_probability)
        self.threshold_ = res.threshold
        self.bound_ = res.bound
        self.lambdas_ = np.asarray(res.lambdas)
        self.support_ = np.asarray(res.selected, dtype=bool)
        self.selected_ = np.flatnonzero(self.support_)
        return self

    def _get_support_mask(self):
        check_is_fitted(self, "support_")
        return self.support_


class RandSelSelector(_RandomisedSelector):
    r"""randSel: randomised HSIC feature selection that finds interactions (Athanasakis, Algorithm 6).

    ``fit(X, y)`` runs :func:`jaxknock.kernels.randsel` (Gaussian kernel on
    random halves of the features, linear kernel on ``y``; two non-numeric
    labels are encoded 0/1) and keeps its selection: the features with a
    positive estimated contribution in the round of best alignment (all the
    features of the final set when that one aligns best; see
    :class:`~jaxknock.kernels.RandSelResult`), or the top
    ``n_features_to_select`` of its ranking when that is given. With fewer than
    three features there is nothing to rank and all are kept.

    Attributes:
        ranking_: feature indices, best first.
        contributions_: ``(rounds, n_features)`` estimated contributions.
        support_, selected_: mask and indices of the selected features.
        result_: the :class:`jaxknock.kernels.RandSelResult`.

    Example::

        sel = RandSelSelector(num_subsamples=500, random_state=0).fit(X, y)
        sel.ranking_[:2]
    """

    def __init__(
        self,
        n_features_to_select=None,
        num_subsamples=3000,
        subsample_size=None,
        random_state=None,
        *,
        drop=0.25,
        keep=0.1,
        fix_after=None,
        bandwidth=None,
        estimator="unbiased",
    ):
        self.n_features_to_select = n_features_to_select
        self.num_subsamples = num_subsamples
        self.subsample_size = subsample_size
        self.random_state = random_state
        self.drop = drop
        self.keep = keep
        self.fix_after = fix_after
        self.bandwidth = bandwidth
        self.estimator = estimator

    def fit(self, X, y):
        """Run randSel on ``(X, y)`` and store the ranking and selection."""
        from jaxknock.kernels import randsel

        k = self.n_features_to_select
        if k is not None and not (_checks.is_int(k) and k >= 1):
            raise ValueError(f"n_features_to_select must be a positive integer or None, got {k!r}")
        X, y = _validate_unmasked(self, X, y, dtype=np.float64, y_numeric=False, ensure_min_samples=4)
        y = _encode_target(y)
        if np.all(y == y[0]):  # HSIC with a constant y: NaN contributions, and n_features_to_select took any k
            raise ValueError(
                f"y is constant (every entry equals {y[0]!r}): there is nothing to select features for "
                "(as KnockoffSelector and StabilitySelector)"
            )
        n, p = X.shape
        if k is not None and k > p:  # was clamped to p silently (scikit-learn's SelectKBest refuses k > p too)
            raise ValueError(f"n_features_to_select={k} is larger than the {p} features of X")
        key = _key_from_random_state(self.random_state)  # whatever p: random_state="zero" passed with p < 3
        m_a = self.subsample_size if self.subsample_size is not None else min(n, max(4, n // 4))
        if p < 3:
            self.result_ = None
            self.ranking_ = np.arange(p)
            self.contributions_ = np.zeros((0, p))
            self.support_ = np.ones(p, bool)
        else:
            with jax.enable_x64(True):
                res = randsel(
                    key,
                    X,
                    y,
                    num_subsamples=self.num_subsamples,
                    subsample_size=m_a,
                    drop=self.drop,
                    keep=self.keep,
                    fix_after=self.fix_after,
                    bandwidth=self.bandwidth,
                    estimator=self.estimator,
                )
            self.result_ = res
            self.ranking_ = np.asarray(res.ranking)
            self.contributions_ = np.asarray(res.contributions)
            self.support_ = np.asarray(res.selected, dtype=bool)
        if k is not None:
            self.support_ = np.zeros(p, bool)
            self.support_[self.ranking_[:k]] = True
        self.selected_ = np.flatnonzero(self.support_)
        return self

    def _get_support_mask(self):
        check_is_fitted(self, "support_")
        return self.support_


if not HAVE_SKLEARN:  # KnockoffSelector needs scikit-learn's validation; see __getattr__
    del KnockoffSelector, StabilitySelector, RandSelSelector


def __getattr__(name):
    if name in ("KnockoffSelector", "StabilitySelector", "RandSelSelector"):
        raise ImportError(_SKLEARN_MISSING.format(name=name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def expected_failed_checks(estimator) -> dict:
    """``check_estimator`` checks each estimator is known to fail, with the reason.

    Pass as ``check_estimator(est, expected_failed_checks=expected_failed_checks(est))``
    or to ``parametrize_with_checks(..., expected_failed_checks=expected_failed_checks)``.
    """
    if isinstance(estimator, SparseNaiveBayes):
        return {
            "check_decision_proba_consistency": (
                "feeds Gaussian blobs with negative entries without honouring the positive_only "
                "tag; naive Bayes count models reject negative X in fit (as MultinomialNB does; "
                "MultinomialNB skips this check only because it has no decision_function)"
            ),
        }
    return {}
