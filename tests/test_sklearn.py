"""scikit-learn estimators: check_estimator, Pipeline, GridSearchCV, agreement with the functional API."""

import importlib
import pickle
import sys

import jax
import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.naive_bayes import MultinomialNB  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

import jaxknock as jk  # noqa: E402
from jaxknock.sklearn import KnockoffSelector, SparseNaiveBayes, expected_failed_checks  # noqa: E402

# cheap settings: closed-form S-vector and statistic (each check compiles for new shapes)
FAST = dict(method="equicorrelated", statistic="correlation", random_state=0)


def regression(n=150, p=25, signals=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    beta = np.zeros(p)
    beta[:signals] = 1.0
    return X, X @ beta + rng.standard_normal(n)


def counts(n=120, m=15, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    rate = np.ones((2, m))
    rate[1, :3] = 4.0
    return rng.poisson(rate[y]).astype(float), y


def _check(est):
    # warnings from the checks' own deliberately odd inputs are not failures here
    with np.errstate(all="ignore"):
        check_estimator(est, expected_failed_checks=expected_failed_checks(est))


@pytest.mark.filterwarnings("ignore")
def test_knockoff_selector_check_estimator():
    _check(KnockoffSelector(**FAST))


@pytest.mark.filterwarnings("ignore")
def test_sparse_naive_bayes_check_estimator():
    _check(SparseNaiveBayes(k=1))


def test_exemptions_have_reasons():
    assert expected_failed_checks(KnockoffSelector()) == {}
    reasons = expected_failed_checks(SparseNaiveBayes())
    assert set(reasons) == {"check_decision_proba_consistency"}
    assert all(len(r) > 40 for r in reasons.values())
    assert SparseNaiveBayes().__sklearn_tags__().input_tags.positive_only


@pytest.mark.parametrize("n, p, resolved", [(120, 20, "mvr"), (40, 60, "mvr_factor")])
def test_knockoff_selector_default_method_is_the_librarys(n, p, resolved):
    """The default S-vector method is ``knockoff_filter``'s ``"auto"`` (it was ``"asdp"``, which
    refuses a design with ``p >= n``): the same method and the same ``W`` as the function."""
    X, y = regression(n=n, p=p, signals=5, seed=3)
    sel = KnockoffSelector(statistic="correlation", random_state=0).fit(X, y)
    assert sel.selection_.settings["s_method"] == resolved
    with jax.enable_x64(True):
        ref = jk.knockoff_filter(jax.random.key(0), X, y, statistic="correlation")
    assert ref.settings["s_method"] == resolved
    np.testing.assert_allclose(sel.statistics_, np.asarray(ref.W[0]), rtol=1e-8, atol=1e-10)


def test_knockoff_selector_matches_knockoff_filter():
    X, y = regression(n=300)
    sel = KnockoffSelector(fdr=0.25, **FAST).fit(X, y)
    ref = jk.knockoff_filter(jax.random.key(0), X, y, fdr=0.25, s_method="equicorrelated", statistic="correlation")
    np.testing.assert_allclose(sel.statistics_, np.asarray(ref.W[0]), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(sel.get_support(indices=True), ref.selected)
    assert len(set(sel.selected_) & set(range(12))) >= 6  # the strong signals
    assert sel.transform(X).shape == (X.shape[0], sel.support_.sum())
    assert isinstance(sel.selection_, jk.Selection) and isinstance(sel.selection_.W, np.ndarray)
    again = pickle.loads(pickle.dumps(sel))
    np.testing.assert_array_equal(again.transform(X), sel.transform(X))


def test_knockoff_selector_binary_string_labels_and_replicates():
    X, y = regression(n=200)
    labels = np.where(y > 0, "up", "down")
    sel = KnockoffSelector(num_replicates=2, aggregate="frequency", **FAST).fit(X, labels)
    assert sel.statistics_replicates_.shape == (2, X.shape[1])
    assert sel.selection_.settings["loss"] == "logistic"
    with pytest.raises(ValueError, match="Unknown label type"):
        KnockoffSelector(**FAST).fit(X, np.array(["a", "b", "c"] * 66 + ["a", "b"]))


def test_knockoff_selector_in_pipeline_and_grid_search():
    X, y = regression(n=400)
    pipe = make_pipeline(KnockoffSelector(fdr=0.3, **FAST), LinearRegression())
    assert pipe.fit(X, y).score(X, y) > 0.8
    grid = GridSearchCV(
        Pipeline([("ko", KnockoffSelector(**FAST)), ("lr", LinearRegression())]), {"ko__fdr": [0.25, 0.4]}, cv=2
    ).fit(X, y)
    assert grid.best_params_["ko__fdr"] in (0.25, 0.4) and grid.best_score_ > 0.5


def test_knockoff_selector_errors():
    X, y = regression()
    with pytest.raises(NotFittedError):
        KnockoffSelector().transform(X)
    with pytest.raises(ValueError, match="fdr must lie in"):
        KnockoffSelector(fdr=2).fit(X, y)
    with pytest.raises(ValueError, match="method must be one of"):
        KnockoffSelector(method="magic").fit(X, y)
    with pytest.raises(ValueError, match="statistic must be one of"):
        KnockoffSelector(statistic="magic").fit(X, y)
    with pytest.raises(ValueError, match="num_replicates"):
        KnockoffSelector(num_replicates=0).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        KnockoffSelector(**FAST).fit(np.where(X > 2, np.nan, X), y)
    # three integer classes: fitted as a continuous response (knockoff_filter refuses them), not silently
    with pytest.warns(UserWarning, match="look like class labels"):
        KnockoffSelector(**FAST).fit(X, np.digitize(y, [-1.0, 1.0]))


def test_random_state_kinds():
    X, y = regression()
    a = KnockoffSelector(**{**FAST, "random_state": 3}).fit(X, y).statistics_
    b = KnockoffSelector(**{**FAST, "random_state": 3}).fit(X, y).statistics_
    np.testing.assert_array_equal(a, b)
    KnockoffSelector(**{**FAST, "random_state": np.random.RandomState(0)}).fit(X, y)
    KnockoffSelector(**{**FAST, "random_state": np.random.default_rng(0)}).fit(X, y)
    with pytest.raises(ValueError, match="random_state"):
        KnockoffSelector(**{**FAST, "random_state": "zero"}).fit(X, y)


def test_fdr_may_be_a_jax_scalar_and_not_a_bool():
    """``fdr=jnp.float32(0.2)`` was refused ("fdr must lie in (0, 1), got Array(0.2, dtype=float32)") though
    :func:`~jaxknock.knockoff_filter` takes it; ``fdr=True`` is refused as before."""
    X, y = regression()
    a = KnockoffSelector(**{**FAST, "fdr": jax.numpy.float32(0.25)}).fit(X, y)
    b = KnockoffSelector(**{**FAST, "fdr": 0.25}).fit(X, y)
    np.testing.assert_array_equal(a.support_, b.support_)
    with pytest.raises(ValueError, match="fdr must lie in"):
        KnockoffSelector(**{**FAST, "fdr": True}).fit(X, y)


def test_a_random_state_outside_the_key_range_is_named():
    """``random_state=2**64`` failed in ``jax.random.key`` with NumPy's ``OverflowError`` ("Python int too large
    to convert to C long"), naming nothing; the ends of the range still work."""
    X, y = regression()
    for bad in (2**63, 2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match=r"random_state must be an integer in \[-2\*\*63, 2\*\*63\)"):
            KnockoffSelector(**{**FAST, "random_state": bad}).fit(X, y)
    KnockoffSelector(**{**FAST, "random_state": 2**63 - 1}).fit(X, y)


def test_sparse_naive_bayes_reuses_core_and_matches_multinomialnb():
    X, y = counts()
    ours = SparseNaiveBayes(k=3).fit(X, y)
    core = jk.SparseNaiveBayes(k=3).fit(X, y)
    assert type(ours) is jk.SparseNaiveBayes  # one estimator class, not a copy
    np.testing.assert_array_equal(ours.get_support(), core.get_support())
    full = SparseNaiveBayes(k=X.shape[1], alpha=1.0).fit(X, y)
    ref = MultinomialNB(alpha=1.0).fit(X, y)
    np.testing.assert_allclose(full.predict_proba(X), ref.predict_proba(X), rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(full.predict(X), ref.predict(X))
    sp = pytest.importorskip("scipy.sparse")
    Xs = sp.csr_matrix(X)
    np.testing.assert_array_equal(SparseNaiveBayes(k=3).fit(Xs, y).transform(Xs).toarray(), ours.transform(X))
    assert clone(ours).get_params() == {"k": 3, "model": "multinomial", "alpha": 1.0}
    # a JAX integer k was refused as "not a non-negative integer" (a NumPy one passed)
    np.testing.assert_array_equal(SparseNaiveBayes(k=jax.numpy.int32(3)).fit(X, y).get_support(), ours.get_support())
    assert repr(SparseNaiveBayes(k=4)) == "SparseNaiveBayes(k=4)"


def test_sparse_naive_bayes_in_pipeline_and_grid_search():
    X, y = counts()
    labels = np.array(["neg", "pos"])[y]
    pipe = Pipeline([("snb", SparseNaiveBayes(k=3)), ("lr", LogisticRegression())]).fit(X, labels)
    assert pipe.score(X, labels) > 0.7 and pipe.named_steps["lr"].coef_.shape == (1, 3)
    grid = GridSearchCV(SparseNaiveBayes(), {"k": [1, 3, 15]}, cv=3).fit(X, labels)
    assert grid.best_params_["k"] in (1, 3, 15) and grid.best_score_ > 0.6
    assert set(grid.predict(X)) <= {"neg", "pos"}


def test_estimators_refuse_a_masked_entry_instead_of_fitting_its_hidden_value():
    # validate_data reads a masked array through np.asarray: the value under the mask was fitted as data
    X, y = counts()
    mask = np.zeros(X.shape, bool)
    mask[2, 3] = True
    with pytest.raises(ValueError, match="X is a masked array with 1 masked entry"):
        SparseNaiveBayes(k=2).fit(np.ma.array(X, mask=mask), y)
    with pytest.raises(ValueError, match="y is a masked array with 1 masked entry"):
        KnockoffSelector().fit(X, np.ma.array(1.0 * y, mask=mask[:, 3]))
    model = SparseNaiveBayes(k=2).fit(np.ma.array(X), y)  # nothing masked: the plain fit
    np.testing.assert_array_equal(model.coef_, SparseNaiveBayes(k=2).fit(X, y).coef_)
    with pytest.raises(ValueError, match="X is a masked array"):
        model.predict(np.ma.array(X, mask=mask))


def test_sparse_naive_bayes_errors():
    X, y = counts()
    with pytest.raises(NotFittedError):
        SparseNaiveBayes().predict(X)
    with pytest.raises(ValueError, match="Negative values"):
        SparseNaiveBayes(k=2).fit(-X, y)
    with pytest.raises(ValueError, match="exceeds the number of features: X has 15 feature"):
        SparseNaiveBayes(k=16).fit(X, y)
    with pytest.raises(ValueError, match="Unknown label type"):
        SparseNaiveBayes(k=2).fit(X, np.linspace(0, 1, len(y)))
    with pytest.raises(ValueError, match="X has 14 features"):
        SparseNaiveBayes(k=2).fit(X, y).predict(X[:, :14])


def test_clear_import_error_without_sklearn(monkeypatch):
    # jaxknock.sklearn imports without scikit-learn (SparseNaiveBayes, also jaxknock.SparseNaiveBayes,
    # works with a minimal base); KnockoffSelector raises a clear ImportError
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "jaxknock.sklearn", raising=False)
    bare = importlib.import_module("jaxknock.sklearn")
    assert not bare.HAVE_SKLEARN
    with pytest.raises(ImportError, match="pip install scikit-learn"):
        from jaxknock.sklearn import KnockoffSelector  # noqa: F401
    X, y = counts()
    clf = bare.SparseNaiveBayes(k=3).fit(X, y)
    assert clf.get_params() == {"alpha": 1.0, "k": 3, "model": "multinomial"}
    assert clf.set_params(k=2).k == 2 and repr(bare.SparseNaiveBayes(k=4)) == "SparseNaiveBayes(k=4)"
    assert clf.transform(X).shape == (X.shape[0], 3) and clf.score(X, y) > 0.6
    with pytest.raises(RuntimeError, match="not fitted"):
        bare.SparseNaiveBayes().predict(X)
    monkeypatch.undo()
    importlib.import_module("jaxknock.sklearn")
    assert "jaxknock.sklearn" not in sys.modules["jaxknock"].__dict__.get("__all__", [])


def test_import_jaxknock_does_not_import_sklearn():
    import subprocess

    code = "import sys, jaxknock; assert 'sklearn' not in sys.modules; jaxknock.SparseNaiveBayes; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
