"""One LAPACK thread while jaxknock's CPU programs run, restored after (jaxknock._lapack_threads)."""

import json
import os
import subprocess
import sys
import threading

import jax
import numpy as np
import pytest

from jaxknock import _lapack_threads as lt
from jaxknock import pipeline
from jaxknock.l1 import _ws_driver
from jaxknock.l1.working_set import l1_cv

pytestmark = pytest.mark.skipif(
    lt.lapack_thread_count() is None or jax.default_backend() != "cpu",
    reason="scipy's LAPACK is not a findable OpenBLAS here, or the backend is not the CPU",
)


@pytest.fixture
def three_threads(monkeypatch):
    """The process's OpenBLAS libraries at 3 threads for the test (whatever the machine), restored after it.

    Set with threadpoolctl (scikit-learn's), independent of the code under test.
    """
    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.delenv("JAXKNOCK_LAPACK_THREADS", raising=False)
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        assert lt.lapack_thread_count() == 3
        yield


class _Stop(Exception):
    pass


def test_scope_sets_one_thread_and_restores(three_threads):
    with lt.one_lapack_thread():
        assert lt.lapack_thread_count() == 1
        with lt.one_lapack_thread():  # nested: still one, and the inner exit does not restore
            assert lt.lapack_thread_count() == 1
        assert lt.lapack_thread_count() == 1
    assert lt.lapack_thread_count() == 3
    with pytest.raises(_Stop):
        with lt.one_lapack_thread():
            raise _Stop
    assert lt.lapack_thread_count() == 3


def test_opt_out_keeps_the_count(three_threads, monkeypatch):
    monkeypatch.setenv("JAXKNOCK_LAPACK_THREADS", "keep")
    with lt.one_lapack_thread():
        assert lt.lapack_thread_count() == 3


def test_concurrent_scopes_restore_once_the_last_leaves(three_threads):
    entered, release = threading.Event(), threading.Event()

    def other():
        with lt.one_lapack_thread():
            entered.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    entered.wait(10)
    with lt.one_lapack_thread():
        assert lt.lapack_thread_count() == 1
    assert lt.lapack_thread_count() == 1  # the other thread is still inside
    release.set()
    t.join(10)
    assert lt.lapack_thread_count() == 3


def test_engine_programs_run_with_one_thread(three_threads, monkeypatch):
    seen = []
    program = _ws_driver.cv_jit

    def spy(*args, **kwargs):  # the engine's compiled program, called with the compilation cache off
        seen.append(lt.lapack_thread_count())
        return program(*args, **kwargs)

    monkeypatch.setattr(_ws_driver, "cv_jit", spy)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 8))
    y = (X[:, 0] + 0.5 * rng.standard_normal(60) > 0).astype(float)
    sol = l1_cv(X, y, folds=3, num_lambdas=5, loss="logistic")
    assert seen and set(seen) == {1}
    assert np.all(np.isfinite(np.asarray(sol.value)))
    assert lt.lapack_thread_count() == 3


def test_engine_runs_one_at_a_time_across_threads(monkeypatch):
    """Two threads' CVs never run the engine's program at once (one_run_at_a_time) and equal the same calls one
    after the other. Without the lock both threads are inside the program together (the spy's count reaches 2):
    such overlapping runs at n = 2000, 2p = 2000 came back wrong (session 53)."""
    inside, most, guard = [0], [0], threading.Lock()
    program = _ws_driver.cv_jit

    def spy(*args, **kwargs):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            return jax.block_until_ready(program(*args, **kwargs))
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(_ws_driver, "cv_jit", spy)
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((80, 12)), rng.standard_normal(80)) for _ in range(4)]
    alone = [np.asarray(l1_cv(X, y, folds=3, num_lambdas=8).value) for X, y in data]
    out = [None] * 4
    start = threading.Barrier(4)

    def fit(i):
        start.wait()
        out[i] = np.asarray(l1_cv(*data[i], folds=3, num_lambdas=8).value)

    threads = [threading.Thread(target=fit, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert most[0] == 1
    for a, b in zip(alone, out):
        np.testing.assert_array_equal(a, b)


def test_knockoff_filter_runs_with_one_thread_and_restores_on_error(three_threads, monkeypatch):
    seen = []

    def stop(*args, **kwargs):
        seen.append(lt.lapack_thread_count())
        raise _Stop

    monkeypatch.setattr(pipeline, "covariance_and_s", stop)
    X = np.random.default_rng(1).standard_normal((40, 5))
    with pytest.raises(_Stop):
        pipeline.knockoff_filter(jax.random.key(0), X, X[:, 0], s_method="equicorrelated")
    assert seen == [1]
    assert lt.lapack_thread_count() == 3


def test_cli_commands_run_with_one_thread(three_threads, monkeypatch):
    from jaxknock.cli import parser

    seen = []
    monkeypatch.setattr(parser, "run_demo", lambda args: seen.append(lt.lapack_thread_count()) or 0)
    assert parser.main(["--no-compile-cache", "demo"]) == 0
    assert seen == [1]
    assert lt.lapack_thread_count() == 3


_FOREIGN_OPENBLAS_FIRST = """
import json, scs  # cvxpy's SCS bundles its own OpenBLAS: mapped before scipy's
import jax.numpy as jnp
import threadpoolctl
from jaxknock._lapack_threads import one_lapack_thread

jnp.linalg.cholesky(jnp.eye(2)).block_until_ready()  # jaxlib's CPU LAPACK: loads scipy's OpenBLAS


def counts():
    info = threadpoolctl.threadpool_info()
    return {i["filepath"]: i["num_threads"] for i in info if i.get("internal_api") == "openblas"}

with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
    before = counts()
    with one_lapack_thread():
        inside = counts()
    after = counts()
print(json.dumps(dict(before=before, inside=inside, after=after)))
"""


def test_only_scipys_openblas_is_touched():
    """In a process that loaded another package's OpenBLAS first (cvxpy's SCS), only scipy's changes.

    threadpoolctl (scikit-learn's) reads every BLAS in the process independently of the code under test.
    """
    pytest.importorskip("threadpoolctl")
    pytest.importorskip("scs")
    env = {k: v for k, v in os.environ.items() if k != "JAXKNOCK_LAPACK_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", _FOREIGN_OPENBLAS_FIRST], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    before, inside, after = got["before"], got["inside"], got["after"]
    assert any("scs" in p for p in before), before  # the foreign copy is loaded in that process
    changed = {p for p in before if inside.get(p) != before[p]}
    assert changed and all("scipy.libs" in p or ".dylibs" in p for p in changed), (before, inside)
    assert all("openblas64_" not in p for p in changed)
    assert after == before
