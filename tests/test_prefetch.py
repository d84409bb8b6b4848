"""The knockoff filter compiles its cross-validation engine ahead, in a background thread (jaxknock._prefetch).

A fresh process's first ``knockoff_filter`` compiled the S-vector solver and then, after the sampling, the
CV engine, one after the other on one core; the engine's arguments are known (up to values) before the
S-vector stage, so a dry run finds them and a thread compiles the engine meanwhile. These tests check that
the real call then compiles nothing of its own, that the answer is the plain call's, and that a dry run that
fails or meets nothing changes nothing.
"""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
from helpers import count_compiles

import jaxknock
from jaxknock import _aot, _prefetch


def _regression(n, p, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = X[:, :4] @ np.array([1.0, -1.0, 0.8, -0.8]) + rng.standard_normal(n)
    return X, y


def _recording(monkeypatch):
    """Record ``(program, thread)`` of every ahead-of-time compilation the filter starts (on as on 2+ cores)."""
    monkeypatch.setattr(_prefetch, "_cores", lambda: 2)
    calls, real = [], _aot.compile_call

    def recording(fn, args, static):
        calls.append((fn.__name__, threading.current_thread().name))
        return real(fn, args, static)

    monkeypatch.setattr(_aot, "compile_call", recording)
    return calls


def test_the_filter_compiles_its_cv_engine_in_a_thread_and_the_real_call_finds_it(monkeypatch):
    """At a shape no other test uses (W = m, so the engine runs once): the CV engine is compiled once, in the
    background thread, and not by the calling thread; a second call of the shape makes no dry run; the
    selection equals the one with compilation ahead off.
    Without it (``JAXKNOCK_NO_PREFETCH=1``) a new shape compiles the engine in the calling thread, which the
    counter sees (so the first count of zero is not a counter that sees nothing)."""
    calls = _recording(monkeypatch)
    monkeypatch.delenv("JAXKNOCK_NO_PREFETCH", raising=False)
    X, y = _regression(137, 21)
    with count_compiles("cv_jit") as here:
        ahead = jaxknock.knockoff_filter(jax.random.key(3), X, y)
    assert calls == [("cv_jit", "jaxknock-compile-ahead")]
    assert here == []
    assert not _prefetch._IN_FLIGHT
    jaxknock.knockoff_filter(jax.random.key(4), X, y)  # a later call of the same shapes: no dry run (its cost)
    assert len(calls) == 1

    monkeypatch.setenv("JAXKNOCK_NO_PREFETCH", "1")
    plain = jaxknock.knockoff_filter(jax.random.key(3), X, y)
    np.testing.assert_array_equal(np.asarray(ahead.W), np.asarray(plain.W))
    np.testing.assert_array_equal(ahead.selected, plain.selected)
    X2, y2 = _regression(139, 21)
    with count_compiles("cv_jit") as here:
        jaxknock.knockoff_filter(jax.random.key(3), X2, y2)
    assert len(here) == 1 and len(calls) == 1


def test_a_binary_response_and_replicates_compile_ahead_too(monkeypatch):
    """The l1-logistic engine (stratified folds) and a batch of replicates take the same route."""
    calls = _recording(monkeypatch)
    monkeypatch.delenv("JAXKNOCK_NO_PREFETCH", raising=False)
    X, y = _regression(141, 13)
    with count_compiles("cv_jit") as here:
        jaxknock.knockoff_filter(jax.random.key(0), X, (y > 0).astype(float))
        jaxknock.knockoff_filter(jax.random.key(0), X, y, num_replicates=3)
    assert [name for name, _ in calls] == ["cv_jit", "cv_jit"] and here == []


def test_exported_programs_compile_ahead_and_give_the_plain_answer(tmp_path, monkeypatch):
    """With the compilation cache on (programs exported, :mod:`jaxknock._aot`) the thread exports and compiles
    the engine's program; the filter's answer is the plain one."""
    X, y = _regression(143, 11)
    plain = jaxknock.knockoff_filter(jax.random.key(1), X, y)
    calls = _recording(monkeypatch)
    monkeypatch.setattr(_aot, "export_directory", lambda: tmp_path)
    monkeypatch.setattr(_aot, "LOADED", {})
    exported = jaxknock.knockoff_filter(jax.random.key(1), X, y)
    assert calls == [("cv_jit", "jaxknock-compile-ahead")]
    assert not list(tmp_path.glob("*.failed"))
    np.testing.assert_array_equal(np.asarray(exported.W), np.asarray(plain.W))


def test_other_statistics_and_a_given_penalty_do_not_compile_ahead(monkeypatch):
    calls = _recording(monkeypatch)
    X, y = _regression(120, 10)
    jaxknock.knockoff_filter(jax.random.key(0), X, y, statistic="correlation")
    jaxknock.knockoff_filter(jax.random.key(0), X, y, lam=0.1)
    assert calls == []


def _program(x):
    return x * 2


def test_compile_ahead_captures_the_first_call_of_a_chosen_program_and_nothing_else():
    """A dry run is stopped at the chosen program (nothing after it runs); the compilation runs in a thread
    that ``wait`` joins; a dry run that fails, or never calls the program, starts nothing; outside a dry run
    ``intercept`` does nothing."""
    fn = jax.jit(_program)
    after, compiled = [], []

    def dry_run():
        _aot.call(jax.jit(jax.numpy.sin), np.ones(3))  # another program runs
        _aot.call(fn, np.ones(4))
        after.append(1)

    def compile_fn(f, args, static):
        compiled.append((f, args[0].shape, threading.current_thread().name))

    thread = _prefetch.compile_ahead(dry_run, (fn,), compile_fn)
    assert thread is not None and after == []
    _prefetch.wait(fn)
    assert compiled == [(fn, (4,), "jaxknock-compile-ahead")] and fn not in _prefetch._IN_FLIGHT
    _prefetch.finish(thread)

    def failing():
        raise RuntimeError("a dry run that fails")

    assert _prefetch.compile_ahead(failing, (fn,), compile_fn) is None
    assert _prefetch.compile_ahead(lambda: None, (fn,), compile_fn) is None
    _prefetch.intercept(fn, (np.ones(4),), {})  # not in a dry run: no capture
    assert len(compiled) == 1


def test_first_time_is_true_once_per_signature():
    signature = ("a signature no caller uses", 1)
    assert _prefetch.first_time(signature) and not _prefetch.first_time(signature)


@pytest.mark.parametrize(("value", "on"), [("", True), ("0", True), ("1", False), ("yes", False)])
def test_compilation_ahead_can_be_turned_off(monkeypatch, value, on):
    monkeypatch.setenv("JAXKNOCK_NO_PREFETCH", value)
    monkeypatch.setattr(_prefetch, "_cores", lambda: 2)
    assert _prefetch.enabled() is on
    monkeypatch.setattr(_prefetch, "_cores", lambda: 1)  # one core: nothing to overlap with
    assert not _prefetch.enabled()
