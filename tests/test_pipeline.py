import jax
import numpy as np
import pytest
from helpers import ar1_regression as make_data

from jaxknock.cli.demo import power_fdp
from jaxknock.pipeline import knockoff_filter


@pytest.mark.parametrize("s_method", ["equicorrelated", "sdp", "asdp", "sdp_factor"])
def test_strong_signals_are_found(key, s_method):
    X, y, beta = make_data()
    sel = knockoff_filter(key, X, y, fdr=0.2, s_method=s_method, rank=3, statistic="lcd", lam=0.05, asdp_block_size=10)
    power, fdp = power_fdp(sel.selected, beta)
    assert power >= 0.75
    assert fdp <= 0.4
    assert sel.W.shape == (1, 30)
    assert set(sel.timings) == {"covariance", "s_vector", "sampling", "statistics", "selection"}


def test_replicates_aggregation_and_determinism(key):
    X, y, beta = make_data(seed=1)
    a = knockoff_filter(key, X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6)
    b = knockoff_filter(key, X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6)
    assert a.W.shape == (6, 30)
    np.testing.assert_array_equal(np.asarray(a.W), np.asarray(b.W))
    np.testing.assert_array_equal(a.selected, b.selected)
    c = knockoff_filter(
        jax.random.key(7), X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6
    )
    assert not np.array_equal(np.asarray(a.W), np.asarray(c.W))
    freq = knockoff_filter(
        key, X, y, fdr=0.2, s_method="equicorrelated", statistic="correlation", num_replicates=6, aggregate="frequency"
    )
    assert freq.mask.shape == (30,)


def test_binary_response_uses_logistic(key):
    X, y, beta = make_data(seed=2, amp=1.5)
    yb = (y > 0).astype(float)
    sel = knockoff_filter(key, X, yb, fdr=0.2, s_method="equicorrelated", statistic="lcd", lam=0.02)
    assert sel.settings["loss"] == "logistic"
    power, _ = power_fdp(sel.selected, beta)
    assert power >= 0.5


def test_bad_inputs(key):
    X, y, _ = make_data(n=50, p=10)
    with pytest.raises(ValueError, match="shape"):
        knockoff_filter(key, X, y[:-1])
    with pytest.raises(ValueError, match="constant"):
        knockoff_filter(key, X, np.ones(50))
    with pytest.raises(ValueError, match="fdr"):
        knockoff_filter(key, X, y, fdr=1.5)
    with pytest.raises(ValueError, match="sdp_factor"):
        knockoff_filter(key, X[:8], y[:8])
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        knockoff_filter(key, bad, y)
    with pytest.raises(ValueError, match="s_method"):
        knockoff_filter(key, X, y, s_method="magic")


def test_empty_selection_carries_an_explanation(key):
    """Pure-noise response: knockoff+ at q = 0.05 (needs 20 positive statistics of 30) selects nothing and says why."""
    X, _, _ = make_data(seed=2)
    y = np.random.default_rng(5).standard_normal(X.shape[0])
    sel = knockoff_filter(key, X, y, fdr=0.05, s_method="equicorrelated", statistic="correlation")
    assert len(sel.selected) == 0
    assert sel.explanation.startswith("nothing selected: ")
    assert "smallest target FDR" in sel.explanation or "no target FDR below 1" in sel.explanation
    strong = knockoff_filter(key, *make_data()[:2], fdr=0.2, s_method="equicorrelated", statistic="lcd", lam=0.05)
    assert len(strong.selected) > 0 and strong.explanation is None
