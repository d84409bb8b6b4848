"""Tests of jaxknock._lanes: a batch's parts in concurrent executions, joined in order."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxknock import _lanes


@jax.jit
def _per_item(X, y):
    return X.sum(-1) * 2.0 + y


@pytest.mark.parametrize("lanes", [2, 3, 5, 9])
@pytest.mark.parametrize("with_none", [False, True])
def test_parts_are_joined_in_order_without_the_padding(lanes, with_none):
    """5 items in 2, 3 or 5 parts (the last padded with copies of item 4, then dropped), or 9 asked for."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((5, 4, 3)), rng.standard_normal((5, 4))
    z = None if with_none else rng.standard_normal((5,))

    def fn(X, y, z):
        return {"s": _per_item(X, y), "t": jnp.cumsum(y, axis=-1), **({} if z is None else {"z": z * 3})}

    whole = fn(X, y, z)
    parts = _lanes.map_lanes(fn, (X, y, z), lanes, key=("test-order", lanes, with_none))
    assert set(parts) == set(whole)
    for k in whole:
        np.testing.assert_array_equal(np.asarray(parts[k]), np.asarray(whole[k]))


def test_first_call_compiles_in_the_calling_thread_before_the_other_parts():
    """A program's first call runs part 0 alone, in the caller's thread, so it is traced once; later calls run
    every part at once, the caller taking part 0."""
    traces, threads, lock = [], [], threading.Lock()

    @jax.jit
    def step(X):
        traces.append(1)  # at trace time only
        return X * 2

    def fn(X):
        with lock:
            threads.append(threading.current_thread() is threading.main_thread())
        return step(X)

    X = np.arange(12.0).reshape(6, 2)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(_lanes.map_lanes(fn, (X,), 3, key="test-first")), X * 2)
    assert len(traces) == 1
    assert threads[0] and len(threads) == 9
    assert sum(threads) == 3  # part 0 of every call in the caller's thread, the others in the pool


def test_a_scoped_setting_keeps_the_batch_in_one_execution():
    """Inside ``jax.enable_x64(...)`` (thread-local), worker threads would trace under the global setting:
    the whole batch goes to ``fn`` in the calling thread, and the dtype is the scoped one."""
    calls = []

    def fn(X):
        calls.append((X.shape[0], jnp.asarray(1.0).dtype))
        return jnp.asarray(X) + 1

    X = np.ones((4, 2), np.float32)
    scoped = not jax.config.jax_enable_x64
    with jax.enable_x64(scoped):
        _lanes.map_lanes(fn, (X,), 2, key="test-scoped")
        dtype = jnp.asarray(1.0).dtype
    assert calls == [(4, dtype)]
    calls.clear()
    _lanes.map_lanes(fn, (X,), 2, key="test-scoped")
    assert [c[0] for c in calls] == [2, 2]  # outside the block: two parts


def test_a_failing_part_raises_in_the_caller():
    def fn(X):
        if threading.current_thread() is not threading.main_thread():
            raise FloatingPointError("part failed")
        return jnp.asarray(X)

    with pytest.raises(FloatingPointError, match="part failed"):
        _lanes.map_lanes(fn, (np.ones((4, 2)),), 2, key="test-fail")
