"""Compile a later stage's large program in a background thread while the earlier stages run.

A fresh process's first :func:`jaxknock.knockoff_filter` spends most of its time
in XLA compiling two large programs one after the other: the S-vector solver
(1.5 s at n = 600, p = 200 on a 2-core CPU) and, after the sampling, the
cross-validated lasso engine (3 s). XLA compiles a program on one core and
releases the GIL, and the engine's arguments are known, up to their values,
before the S-vector stage starts: so the filter finds them first and compiles
the engine on the second core while the first one estimates the covariance,
solves for ``s`` and samples the knockoffs.

How (:func:`compile_ahead`): the caller runs the later stage's own code on stand-in
data of the right shapes (a *dry run*, in the calling thread) inside
:func:`capturing`; :func:`jaxknock._aot.call` stops it with :class:`Captured` at the
first call of a chosen program, holding that call's arguments and static
settings, and a daemon thread lowers and compiles the program for them
(``fn.lower(...).compile()``, or the exported program's, :mod:`jaxknock._aot`).
Nothing runs in that thread: it only traces and compiles (two XLA:CPU
computations at once in one process have given wrong answers,
:func:`jaxknock._lapack_threads.one_run_at_a_time`). The real call waits for an
unfinished compilation of its program (:func:`wait`) and then finds it in JAX's
caches. A dry run that fails, or whose program the real call does not meet
(other shapes), costs time and never changes a result.
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["Captured", "capturing", "compile_ahead", "enabled", "finish", "first_time", "intercept", "wait"]

_STATE = threading.local()
_IN_FLIGHT: dict = {}  # program (the jitted function) -> its compiling thread
_GUARD = threading.Lock()
_SEEN: set = set()  # the signatures first_time has been asked about
_PATIENCE = 600.0  # seconds a call waits for a compilation ahead of it (XLA:CPU takes 3-15 s for the CV engine)


class Captured(Exception):
    """Raised by :func:`intercept` in a dry run: the first call of a chosen program, not made."""

    def __init__(self, fn, args, static):
        super().__init__(getattr(fn, "__name__", repr(fn)))
        self.fn, self.args, self.static = fn, args, static


def first_time(signature) -> bool:
    """Whether this process meets ``signature`` (a hashable description of a call's shapes) for the first time.

    A dry run costs a warm call some time (the stand-in data, the stage's checks and small programs), so a
    caller compiles ahead only the first time it meets a shape; later calls find the program compiled.
    """
    with _GUARD:
        if signature in _SEEN:
            return False
        _SEEN.add(signature)
        return True


def _cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def enabled() -> bool:
    """Compilation ahead is on unless ``JAXKNOCK_NO_PREFETCH`` is set to anything but empty or ``0``, or the
    process has a single core (the compilation would only take turns with the stages it should overlap)."""
    return os.environ.get("JAXKNOCK_NO_PREFETCH", "").strip() in ("", "0") and _cores() >= 2


@contextlib.contextmanager
def capturing(fns):
    """A dry run: the first :func:`jaxknock._aot.call` of a program in ``fns`` raises :class:`Captured`."""
    before = getattr(_STATE, "fns", None)
    _STATE.fns = tuple(fns)
    try:
        yield
    finally:
        _STATE.fns = before


def intercept(fn, args, static) -> None:
    """In a dry run (:func:`capturing`), stop at ``fn`` if it is one of the chosen programs."""
    fns = getattr(_STATE, "fns", None)
    if fns and fn in fns:
        raise Captured(fn, args, static)


def wait(fn) -> None:
    """Wait for a compilation of ``fn`` started by :func:`compile_ahead`, if one is unfinished."""
    if not _IN_FLIGHT:  # the common case: nothing compiles ahead
        return
    with _GUARD:
        thread = _IN_FLIGHT.pop(fn, None)
    if thread is not None:
        thread.join(_PATIENCE)  # bounded: past it the real call compiles the program itself


def compile_ahead(dry_run, fns, compile_fn) -> threading.Thread | None:
    """Run ``dry_run()`` until it calls a program of ``fns``, then compile that call in a daemon thread.

    Args:
        dry_run: a function that runs the later stage on stand-in data (its results are discarded).
        fns: the programs to capture (jitted functions passed to :func:`jaxknock._aot.call`).
        compile_fn: ``compile_fn(fn, args, static)`` lowers and compiles the captured call (run in the thread).

    Returns:
        The thread, or ``None`` when the dry run met none of ``fns`` or failed (then nothing is compiled).
    """
    try:
        with capturing(fns):
            dry_run()
    except Captured as call:
        captured = call
    except Exception:  # a dry run is an optimisation: any failure leaves the real run as it was
        return None
    else:
        return None

    def work():
        try:
            compile_fn(captured.fn, captured.args, captured.static)
        except Exception:  # the real call compiles it (and reports any error) itself
            pass

    thread = threading.Thread(target=work, name="jaxknock-compile-ahead", daemon=True)
    with _GUARD:
        _IN_FLIGHT[captured.fn] = thread
    thread.start()
    return thread


def finish(thread: threading.Thread | None) -> None:
    """Join ``thread`` (a :func:`compile_ahead` result) and forget it; ``None`` is a no-op."""
    if thread is None:
        return
    thread.join(_PATIENCE)
    with _GUARD:
        for fn, t in list(_IN_FLIGHT.items()):
            if t is thread:
                del _IN_FLIGHT[fn]
