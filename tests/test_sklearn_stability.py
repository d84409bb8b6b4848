"""StabilitySelector and RandSelSelector: agreement with the functions, Pipeline / GridSearchCV, check_estimator."""

import jax
import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import check_estimator

from jaxknock.kernels import randsel
from jaxknock.sklearn import RandSelSelector, StabilitySelector, expected_failed_checks
from jaxknock.stability import stability_selection

# 10 subsamples make the error bound weak (E[V] <= 1 would cut the range to nothing): the whole grid
STAB = dict(num_subsamples=10, num_lambdas=6, random_state=0, solver="fista", expected_false=None)


def _regression(seed=0, n=80, p=12):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    return X, 2 * X[:, 0] - 2 * X[:, 1] + 0.5 * rng.standard_normal(n)


def test_stability_selector_matches_function_and_pipeline():
    X, y = _regression()
    sel = StabilitySelector(threshold=0.7, **STAB).fit(X, y)
    Xs = (X - X.mean(0)) / X.std(0)
    res = stability_selection(
        jax.random.key(0), Xs, y, num_subsamples=10, num_lambdas=6, threshold=0.7, solver="fista", expected_false=None
    )
    np.testing.assert_allclose(sel.probabilities_, np.asarray(res.probabilities))
    assert sel.get_support().tolist() == res.selected.tolist()
    assert set(sel.get_support(indices=True)) >= {0, 1}
    pipe = make_pipeline(StabilitySelector(**STAB), LinearRegression()).fit(X, y)
    assert pipe.predict(X).shape == (80,)
    grid = GridSearchCV(pipe, {"stabilityselector__threshold": [0.6, 0.9]}, cv=2).fit(X, y)
    assert grid.best_params_["stabilityselector__threshold"] in (0.6, 0.9)


def test_stability_selector_standardises_columns_in_any_units():
    """The variance of a column in units of 1e160 overflowed: the column was divided by inf, never selected
    (another feature was), and one of 1e-170 flushed to zero."""
    X, y = _regression()
    base = StabilitySelector(threshold=0.7, **STAB).fit(X, y)
    Xu = X * np.where(np.arange(12) == 0, 1e160, 1.0) * np.where(np.arange(12) == 1, 1e-170, 1.0)
    sel = StabilitySelector(threshold=0.7, **STAB).fit(Xu, y)
    np.testing.assert_allclose(sel.probabilities_, base.probabilities_, atol=1e-12)
    assert sel.get_support().tolist() == base.get_support().tolist() and base.get_support()[:2].all()


def test_stability_selector_string_labels_use_logistic():
    X, y = _regression(1)
    labels = np.where(y > 0, "pos", "neg")
    sel = StabilitySelector(**STAB).fit(X, labels)
    assert sel.result_.probabilities.shape == (12, 6)
    assert sel.support_[:2].all()


def test_randsel_selector_matches_function_and_pipeline():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 6))
    y = np.where(X[:, 0] * X[:, 1] > 0, "a", "b")
    sel = RandSelSelector(num_subsamples=100, subsample_size=40, random_state=0).fit(X, y)
    res = randsel(jax.random.key(0), X, (y == "b").astype(float), num_subsamples=100, subsample_size=40)
    assert sel.ranking_.tolist() == res.ranking.tolist()
    assert sel.get_support().tolist() == res.selected.tolist()
    top = RandSelSelector(n_features_to_select=2, num_subsamples=100, subsample_size=40, random_state=0)
    assert sorted(top.fit(X, y).get_support(indices=True).tolist()) == [0, 1]
    pipe = make_pipeline(top, LogisticRegression()).fit(X, y)
    assert pipe.predict(X).shape == (120,)


def test_stability_selector_warns_when_subsample_fits_fail(monkeypatch):
    """Fits that ran out of steps count as empty supports: the stable set came from understated
    probabilities without a word."""
    import functools

    from sklearn.exceptions import ConvergenceWarning

    import jaxknock.stability

    short = functools.partial(jaxknock.stability.stability_selection, max_steps=2)
    monkeypatch.setattr(jaxknock.stability, "stability_selection", short)
    X, y = _regression()
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        sel = StabilitySelector(**STAB).fit(X, y)
    assert int(sel.result_.num_failed.sum()) > 0


def test_randsel_selector_refuses_a_constant_y():
    """A constant ``y`` gave NaN contributions and a selection that looked like one: none, or with
    ``n_features_to_select=2`` the last two features (a ranking of NaNs); the other selectors refuse it."""
    X, _ = _regression(n=40, p=6)
    for k in (None, 2):
        with pytest.raises(ValueError, match="y is constant"):
            RandSelSelector(n_features_to_select=k, num_subsamples=10, random_state=0).fit(X, np.full(40, 3.0))


def test_randsel_selector_refuses_more_features_than_x_has():
    """``n_features_to_select`` above the number of features was clamped silently (every feature kept);
    scikit-learn's ``SelectKBest`` refuses ``k > n_features`` too."""
    X, y = _regression(n=40, p=6)
    with pytest.raises(ValueError, match="n_features_to_select=7 is larger than the 6 features"):
        RandSelSelector(n_features_to_select=7, num_subsamples=10, random_state=0).fit(X, y)


def test_randsel_selector_checks_random_state_with_few_features():
    """With fewer than three features (nothing to rank, all kept) ``random_state="zero"`` was accepted; with
    three it was refused. It is checked whatever the number of features now."""
    X, y = _regression(n=40, p=2)
    with pytest.raises(ValueError, match="random_state must be None, an int"):
        RandSelSelector(random_state="zero").fit(X, y)
    assert RandSelSelector(random_state=np.random.RandomState(0)).fit(X, y).get_support().tolist() == [True, True]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "est",
    [
        StabilitySelector(num_subsamples=2, num_lambdas=2, random_state=0),
        RandSelSelector(num_subsamples=4, random_state=0),
    ],
    ids=["stability", "randsel"],
)
def test_check_estimator(est):
    # a few minutes on a loaded 2-core machine: every check compiles for new shapes
    with np.errstate(all="ignore"):
        check_estimator(est, expected_failed_checks=expected_failed_checks(est))
