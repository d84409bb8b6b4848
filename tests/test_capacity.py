"""The l1 engines' capacity store (jaxknock/_capacity.py): in memory, on disk, and its use by the engine."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from jaxknock import _aot, _capacity
from jaxknock._capacity import CapacityStore, next_capacity
from jaxknock._solution import Solution
from jaxknock.l1 import _ws_driver, working_set


def test_a_new_batch_size_starts_from_the_capacity_one_problem_of_its_shape_needed():
    # each growth step recompiles the engine: R replicates after one start where one ended
    store = CapacityStore(lambda: None)
    one = ((1, 100, 600), "float64", "squared", "homotopy", (5, 20))
    five = ((5,) + one[0][1:],) + one[1:]
    other = ((5, 100, 800),) + one[1:]
    per = ("any batch", (100, 600)) + one[1:]
    assert store.start(five, (512, 256), family=per) == (512, 256)  # nothing known yet: the default
    store.remember(one, 600, 320, family=per)
    assert store.start(five, (512, 256), family=per) == (600, 320)
    assert store.start(other, (512, 256), family=("any batch", (100, 800)) + one[1:]) == (512, 256)
    store.remember(five, 512, 416, family=per)  # the family entry keeps the larger of each
    assert store.start(("nothing",), (1, 1), family=per) == (600, 416)
    assert store.start(five, (1, 1), family=per) == (512, 416)  # an exact batch shape keeps its own


def test_capacities_are_kept_on_disk_for_a_fresh_process(tmp_path):
    path = tmp_path / "cache" / "jaxknock-capacity.json"
    first = CapacityStore(lambda: path)
    first.remember(("a",), 600, 320, family=("f",))
    assert json.loads(path.read_text())["entries"] == {"('a',)": [600, 320], "('f',)": [600, 320]}
    fresh = CapacityStore(lambda: path)  # another process: nothing in memory
    assert fresh.start(("a",), (512, 256)) == (600, 320)
    assert fresh.start(("b",), (512, 256), family=("f",)) == (600, 320)
    # two processes writing different keys: the file keeps both (merged, element-wise maximum)
    other = CapacityStore(lambda: path)
    other.start(("x",), (1, 1))  # loaded before `fresh` writes
    fresh.remember(("b",), 700, 300)
    other.remember(("a",), 512, 384)
    entries = json.loads(path.read_text())["entries"]
    assert entries["('b',)"] == [700, 300] and entries["('a',)"] == [600, 384]
    # the store follows the cache being turned on later: a memory-only store reads the file once it has one
    late = {"path": None}
    store = CapacityStore(lambda: late["path"])
    assert store.start(("a",), (512, 256)) == (512, 256)
    late["path"] = path
    assert store.start(("a",), (512, 256)) == (600, 384)
    store.clear()
    assert store.start(("b",), (0, 0)) == (700, 300)  # cleared memory: the file is read again


_FOREIGN = ["{not json", '{"version": 0, "entries": {"(\'a\',)": [9, 9]}}', '{"version": 1}', "[]"]


@pytest.mark.parametrize("text", _FOREIGN)
def test_an_unreadable_or_foreign_capacity_file_is_ignored_and_replaced(tmp_path, text):
    path = tmp_path / "jaxknock-capacity.json"
    path.write_text(text)
    store = CapacityStore(lambda: path)
    assert store.start(("a",), (512, 256)) == (512, 256)
    store.remember(("a",), 600, 320)
    assert json.loads(path.read_text()) == {"version": 1, "entries": {"('a',)": [600, 320]}}


def test_a_read_only_cache_directory_keeps_capacities_in_memory(tmp_path):
    store = CapacityStore(lambda: tmp_path / "missing-file-as-directory" / "x")
    (tmp_path / "missing-file-as-directory").write_text("a file where a directory should be")
    store.remember(("a",), 600, 320)  # the write fails: no error
    assert store.start(("a",), (1, 1)) == (600, 320)


def test_the_engine_grows_a_stored_capacity_that_is_too_small_and_gives_the_same_answer(tmp_path, monkeypatch):
    """A capacity read from disk is only a start: an overflowing call is re-run larger, so a stale
    or foreign file can cost time, never accuracy."""
    rng = np.random.default_rng(3)
    n, p = 120, 60
    X = rng.standard_normal((n, p))
    y = X[:, :30] @ rng.uniform(0.5, 1.5, 30) + rng.standard_normal(n)
    path = tmp_path / "jaxknock-capacity.json"
    monkeypatch.setattr(_capacity, "STORE", CapacityStore(lambda: path))
    reference = working_set.l1_cv(X, y, folds=3, num_lambdas=30)
    learned = json.loads(path.read_text())["entries"]
    assert len(learned) == 2  # the exact call shape and its family (any batch size)
    needed = max(W for W, _ in learned.values())
    assert needed > 8
    path.write_text(json.dumps({"version": 1, "entries": {k: [8, 8] for k in learned}}))
    monkeypatch.setattr(_capacity, "STORE", CapacityStore(lambda: path))  # a fresh process reading the file
    again = working_set.l1_cv(X, y, folds=3, num_lambdas=30)
    # other capacities sum in another order: the same solution to rounding, the same support and lambda
    np.testing.assert_allclose(np.asarray(again.value), np.asarray(reference.value), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(again.value) != 0, np.asarray(reference.value) != 0)
    assert float(again.stats["lam"]) == float(reference.stats["lam"])
    assert min(W for W, _ in json.loads(path.read_text())["entries"].values()) > 8


def test_the_capacity_file_keeps_the_most_recent_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(_capacity, "MAX_ENTRIES", 3)
    path = tmp_path / "jaxknock-capacity.json"
    store = CapacityStore(lambda: path)
    for i in range(5):
        store.remember((i,), 10 + i, 1)
    assert list(json.loads(path.read_text())["entries"]) == ["(2,)", "(3,)", "(4,)"]
    assert CapacityStore(lambda: path).start((0,), (1, 1)) == (1, 1)  # forgotten: the default again


def test_a_sequential_batch_reruns_only_the_replicates_that_outgrow_its_capacity(monkeypatch):
    """The batch keeps the capacity most replicates fit; the one that needs more runs again alone.

    Three replicates with two strong features (small working sets) and one with 30 features in
    the signal (a large one); each result equals the replicate's own fit.
    """
    rng = np.random.default_rng(4)
    n, p, R = 120, 60, 4
    X = rng.standard_normal((R, n, p))
    y = np.stack([X[r, :, :2] @ [2.0, -1.5] + 0.05 * rng.standard_normal(n) for r in range(R - 1)])
    y = np.concatenate([y, (X[-1, :, :30] @ rng.uniform(0.5, 1.5, 30) + rng.standard_normal(n))[None]])
    kw = dict(folds=3, num_lambdas=30, batch_mode="sequential")
    monkeypatch.setattr(_capacity, "STORE", CapacityStore(lambda: None))
    alone = [working_set.l1_cv(X[r], y[r], **kw) for r in range(R)]
    store = CapacityStore(lambda: None)
    monkeypatch.setattr(_capacity, "STORE", store)
    batch_key = ((R, n, p), "float64", "squared", "homotopy", (3, 40))
    family = ("any batch", (n, p)) + batch_key[1:]
    store.remember(batch_key, 16, 16, family=family)  # the sparse replicates fit, the dense one does not
    sol = working_set.l1_cv(X, y, **kw)
    assert store.start(batch_key, (0, 0)) == (16, 16)  # the batch did not grow: only replicate 3 re-ran
    assert store.start(family, (0, 0))[0] > 16  # ... at a capacity of its own
    assert np.all(np.asarray(sol.result) == 0) and not np.any(np.asarray(sol.stats["overflow"]))
    for r in range(R):
        np.testing.assert_allclose(np.asarray(sol.value[r]), np.asarray(alone[r].value), rtol=1e-10, atol=1e-12)
        assert int(sol.stats["lam_index"][r]) == int(alone[r].stats["lam_index"])


def test_a_working_set_overflow_grows_the_slots_with_it(monkeypatch):
    """After the working set runs out, the re-run also gets slots in proportion to it (the active sets
    grow with the working set as the path goes on): from a small start, 6 runs (compilations) where
    growing one capacity at a time took 8, and the answer of a call that started large enough."""
    rng = np.random.default_rng(5)
    n, p = 200, 160
    X = rng.standard_normal((n, p))
    y = X[:, :40] @ rng.uniform(0.5, 1.5, 40) + rng.standard_normal(n)
    runs = []
    call = _aot.call

    def recording(f, *a, **k):
        sol = call(f, *a, **k)
        if f is _ws_driver.cv_jit:
            st = {s: int(np.asarray(sol.stats[s])) for s in ("overflow", "slot_overflow", "working_set_size")}
            runs.append((k["W"], k["slots"], st["overflow"], st["slot_overflow"], int(sol.stats["peak_active"])))
        return sol

    monkeypatch.setattr(_aot, "call", recording)
    monkeypatch.setattr(_capacity, "STORE", CapacityStore(lambda: None))
    reference = working_set.l1_cv(X, y, folds=3, num_lambdas=40)
    assert len(runs) == 1 and not runs[0][2]
    runs.clear()
    small = CapacityStore(lambda: None)
    monkeypatch.setattr(small, "lookup", lambda key, family=None: (32, 32))
    monkeypatch.setattr(_capacity, "STORE", small)
    again = working_set.l1_cv(X, y, folds=3, num_lambdas=40)
    np.testing.assert_allclose(np.asarray(again.value), np.asarray(reference.value), rtol=1e-10, atol=1e-12)
    assert float(again.stats["lam"]) == float(reference.stats["lam"])
    assert len(runs) == 6, runs
    for (W, _, over, slots_full, peak), (W2, A2, *_) in zip(runs, runs[1:]):
        assert over
        if not slots_full:  # the working set ran out: the slots grow with it
            assert W2 > W and A2 >= peak * W2 / W


@pytest.mark.parametrize(
    ("n", "m", "whole", "early"),
    [(2000, 500, (500, 532), (500, 256)), (300, 1000, (1000, 301), (1000, 301)), (100, 1000, (512, 101), (512, 101))],
)
def test_a_whole_grid_starts_with_every_slot_its_active_sets_can_use(monkeypatch, n, m, whole, early):
    """A path to the end of its grid (``early_stop=False``, ``lasso_cv``'s default) ends near ``min(n, m)`` active
    features: it starts at ``min(W + chunk, n + 1)`` slots instead of climbing from 256 by a quarter (one
    compilation each: n = 2000, m = 500 compiled 4 times). A path that stops early starts at ``0.45 W`` slots, at
    least 256, and no path starts with more slots than ``n + 1`` (an active set never exceeds the rank of the centred
    rows). The working set of a path that stops early starts at 1024 (at most ``m``) when its shape says 512 would
    most likely overflow (``min(0.85 m, 2.5 n) > 512``: n = 300, m = 1000); a whole grid at the step that holds
    ``min(m, 3 n)`` (``m`` itself within a quarter of it: n = 300, m = 1000)."""
    assert _first_capacities(monkeypatch, n, m, (False, True)) == [whole, early]


def _first_capacities(monkeypatch, n, m, early_stops):
    """The ``(W, slots)`` of the first engine run of ``l1_cv`` for each ``early_stop`` (n x m, 5 signals; no run
    remembered for the shape, the run itself stopped before it starts)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, m))
    y = X[:, :5].sum(1) + rng.standard_normal(n)
    seen = []

    class Stop(Exception):
        pass

    def record(f, *a, **k):
        seen.append((k["W"], k["slots"]))
        raise Stop

    monkeypatch.setattr(_aot, "call", record)
    monkeypatch.setattr(_capacity, "STORE", CapacityStore(lambda: None))
    for early_stop in early_stops:
        with pytest.raises(Stop):
            working_set.l1_cv(X, y, early_stop=early_stop)
    return seen


def test_a_path_with_many_more_features_than_rows_starts_near_the_working_set_it_will_need(monkeypatch):
    """The filter's lasso CV at p >= n (m = 2p >= 2n) ends with a working set of 1.35-2.0 n at n = 1000-2000
    (0.85 n with 5 weak signals): climbing there from 1024 compiled the engine 7 times at n = 2000, m = 20000
    (first call 100 s against 39 s from 3072, warm 18 s against 15 s). Such a path starts at the ladder step that
    holds ``min(0.3 m, 1.25 n)``: 1536 at n = 1000, m = 4000 (it started at 1024 and climbed to 1536-2048)."""
    assert _first_capacities(monkeypatch, 1000, 4000, (True,)) == [(1536, _capacity.slots_for(1536))]


@pytest.mark.parametrize(("early_stop", "widths"), [(False, [512, 1536]), (True, [512, 1024])])
def test_a_whole_grid_that_outgrows_its_working_set_early_grows_it_one_step_more(monkeypatch, early_stop, widths):
    """A whole grid at p > n needs a working set that keeps growing to the end of the path (n = 500, m = 2000:
    512 full at 25% of the grid, 1426 at its end): an overflow before half the grid grows ``W`` two ladder
    steps (512 -> 1536, two compilations where there were three); a path that stops early grows one. Both
    start at 512 at n = 150, m = 2000 (``_capacity.start_width``). (The engine runs are stand-ins reporting an
    overflow at 20 of 100 penalties, then success.)"""
    n, m = 150, 2000
    X = np.zeros((n, m))
    y = np.zeros(n)
    seen = []

    def fake(f, *a, **k):
        seen.append((k["W"], k["slots"]))
        first = len(seen) == 1
        stats = dict(
            overflow=np.bool_(first),
            slot_overflow=np.bool_(False),
            num_lambdas_solved=np.int32(20 if first else 100),
            lambdas=np.ones(100),
            working_set_size=np.int32(k["W"] if first else 1400),
            peak_active=np.int32(160 if first else 480),
        )
        return Solution(np.zeros(m), np.int32(0), stats, None)

    monkeypatch.setattr(_aot, "call", fake)
    monkeypatch.setattr(_capacity, "STORE", CapacityStore(lambda: None))
    rows = np.arange(n, dtype=np.int32).reshape(5, -1)
    excl = np.array([0, 1, 2, 3, 4, -1], np.int32)
    kw = dict(loss="squared", method="auto", tol=1e-5, max_steps=100, patience=10, rule="min", max_features=None)
    _ws_driver.run(X, y, None, rows, excl, early_stop=early_stop, grid=(1e-3, 100), **kw)
    assert [W for W, _ in seen] == widths
    if not early_stop:
        assert [A for _, A in seen] == [n + 1, n + 1]  # all the slots an active set can use, at every size


def test_a_remembered_entry_equal_to_the_default_still_counts_as_remembered(monkeypatch):
    """Headroom is left when a call outgrows capacities an earlier call remembered (``varies``), also when
    that entry happens to equal the default ``(512, 256)``: ``_ws_driver.run`` asks the store whether it knows the key
    (``lookup``), not whether its start differs from the default. Here the first engine call is made to
    report an overflow, so the call grows once; an unknown key does not count as varying."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((40, 700))  # m > 1.25 * 512: an unknown key starts at 512 (_capacity.start_width)
    y = X[:, :3].sum(1) + rng.standard_normal(40)
    call, seen = _aot.call, []

    def overflow_once(f, *a, **k):
        sol = call(f, *a, **k)
        if f is _ws_driver.cv_jit and not seen:
            sol = sol._replace(stats={**sol.stats, "overflow": np.bool_(True)})
        if f is _ws_driver.cv_jit:
            seen.append(k["W"])
        return sol

    start = _ws_driver.next_start
    varies = []
    monkeypatch.setattr(_aot, "call", overflow_once)
    monkeypatch.setattr(_ws_driver, "next_start", lambda *a: varies.append(a[6]) or start(*a))
    for known in ((512, 256), None):
        store = CapacityStore(lambda: None)
        monkeypatch.setattr(store, "lookup", lambda key, family=None, known=known: known)
        monkeypatch.setattr(_capacity, "STORE", store)
        seen.clear()
        working_set.l1_cv(X, y, folds=3, num_lambdas=10)
        assert seen == [512, 700]  # grew once, to every feature
    assert varies == [True, False]


def test_working_set_capacity_grows_by_powers_of_two_and_their_halfway_points():
    """Past 1024 the capacity takes the next of 1536, 2048, 3072, ...: a path that needs a little over a
    power of two does not pay for twice that on every kink."""
    ladder = [512]
    while ladder[-1] < 8192:
        ladder.append(next_capacity(ladder[-1]))
    assert ladder == [512, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
    # a capacity off the ladder (from max_features or m) rejoins it
    assert next_capacity(1000) == 2000 and next_capacity(1100) == 1536


def _stats_only(used_W, used_A, R=None):
    shape = () if R is None else (R,)
    return SimpleNamespace(stats=dict(working_set_size=np.full(shape, used_W), peak_active=np.full(shape, used_A)))


def test_a_call_that_filled_its_capacities_leaves_the_next_call_headroom():
    """knockoff_filter at n = 2000, p = 1000: the first call used 1001 of W = 1024 features and 386 of A = 416
    slots; the second then grew W and the third A (a compilation each). Now the next call starts at
    (1536, 544): one compilation. A batch keeps its capacities (its overflowing replicates re-run alone).
    Only a call that outgrew an earlier call's capacities (``varies``) leaves headroom: the same problem
    solved again runs at what it needed (the lasso CV at n = 2000, m = 2000: 0.43 s against 0.75 s)."""
    one, batch = SimpleNamespace(ndim=2, shape=(2000, 2000)), SimpleNamespace(ndim=3, shape=(3, 2000, 2000))
    start = _ws_driver.next_start
    assert start(_stats_only(1001, 386), one, 1024, 416, 64, "homotopy", varies=False) == (1024, 416)
    assert start(_stats_only(1001, 386), one, 1024, 416, 64, "homotopy") == (1536, 544)
    assert start(_stats_only(700, 386), one, 1024, 416, 64, "homotopy") == (1024, 544)
    assert start(_stats_only(1001, 300), one, 1024, 416, 64, "homotopy") == (1536, 416)
    assert start(_stats_only(850, 300), one, 1024, 416, 64, "homotopy") == (1024, 416)  # 83%: not tight
    assert start(_stats_only(1001, 0), one, 1024, 0, 64, "naive") == (1536, 0)  # no slots
    assert start(_stats_only(1001, 386, R=3), batch, 1024, 416, 64, "homotopy") == (1024, 416)
    assert start(_stats_only(2000, 386), SimpleNamespace(ndim=2, shape=(2000, 1500)), 1500, 416, 64, "homotopy") == (
        1500,
        544,
    )  # W = m: only the slots can grow


def test_peak_active_is_the_largest_active_set_of_any_fold_or_the_full_fit():
    """``peak_active`` (what the slot headroom reads) against scikit-learn's lasso path on every training fold;
    on this design a training fold's active set (26) is larger than the full fit's (21)."""
    from sklearn.linear_model import lasso_path

    rng = np.random.default_rng(10)
    n, p, K = 120, 80, 3
    X = rng.standard_normal((n, p))
    y = X[:, :25] @ rng.uniform(0.5, 1.5, 25) + rng.standard_normal(n)
    lambdas = np.abs((X - X.mean(0)).T @ (y - y.mean())).max() / n * np.geomspace(1, 0.2, 12)
    sol = working_set.l1_cv(X, y, folds=K, lambdas=lambdas, early_stop=False)
    fold = np.repeat(np.arange(K), n // K)
    sizes = []
    for train in [fold != k for k in range(K)] + [np.ones(n, bool)]:
        Xt, yt = X[train] - X[train].mean(0), y[train] - y[train].mean()
        _, coefs, _ = lasso_path(Xt, yt, alphas=lambdas, tol=1e-12, max_iter=100_000)
        sizes.append(int((np.abs(coefs) > 1e-9).sum(0).max()))
    assert max(sizes[:K]) > sizes[K]  # a fold, not the full fit, holds the largest active set
    assert int(sol.stats["peak_active"]) == max(sizes)
    assert int(sol.stats["peak_active"]) <= int(sol.stats["working_set_size"])


def test_a_whole_grid_starts_at_the_working_set_its_last_penalties_need(monkeypatch):
    """``lasso_cv`` at n = 2000, m = 600 started at 512 features, overflowed at the 61st of 100 penalties
    and ran (and compiled) again at 600; at n = 3000, m = 1500 it ran three times (512, 1024, 1500: 61 s
    against a warm 24.5 s; session 62). A whole grid ends near ``min(m, 3 n)`` cached features and now
    starts at the ladder step that holds them."""
    for n, m, W in ((700, 560, 560), (1100, 1000, 1000), (3000, 1500, 1500), (200, 1500, 1024), (100, 1000, 512)):
        ((W0, A0),) = _first_capacities(monkeypatch, n, m, (False,))
        assert W0 == W and A0 == min(W + _ws_driver.cache_chunk(m), n + 1), (n, m, W0, A0)


@pytest.mark.parametrize(("n", "m", "W"), [(800, 600, 600), (400, 640, 640), (200, 800, 512), (3000, 1200, 1200)])
def test_an_early_stopped_path_starts_at_m_when_that_is_at_most_a_quarter_above_its_default(monkeypatch, n, m, W):
    """The knockoff statistic at n = 800, p = 300 (AR(1) 0.9, m = 600) started at 512 features; two knockoff
    draws in eight used 512-527 of them and compiled the engine a second time (session 62)."""
    assert _first_capacities(monkeypatch, n, m, (True,))[0][0] == W
