"""One LAPACK thread while a program of small factorisations runs on the CPU.

jaxlib's CPU LAPACK kernels (``jnp.linalg.cholesky``, ``cho_solve``, ``eigh``, ...)
are the ones scipy links (``scipy.linalg.cython_lapack``); scipy's wheels bundle
OpenBLAS, which runs one thread per core and keeps its worker threads spinning for
a while after each call before they sleep. A program that interleaves small
factorisations with XLA's own work keeps those threads spinning on the cores that
XLA's threads need: the l1-logistic engine's active-set Newton steps (batched
Cholesky factors of ``(M, c, c)`` blocks, ``c <= 384``, a few dozen per path) are
such a program, and so is ``knockoff_filter`` (the S-vector solver's and the
sampler's factorisations, then the statistics). ``perf`` of a warm
``l1_cv(loss="logistic")`` at n = 1000, 2p = 1000 on the 2-core VM put 23% of
all CPU samples in OpenBLAS's ``blas_thread_server``. With one LAPACK thread
(session 49, idle, float64, one process, alternating calls;
``benchmarks/measured/NOTES.md``): that CV 0.88-0.90x the time,
``knockoff_filter`` defaults 0.73x at n = 600, p = 200 and 0.87x at n = 2000,
p = 1000, and 0.82x with a binary ``y`` at n = 1000, p = 300. Not measured on
a machine with many cores, where a large factorisation (``eigh`` of a
``p x p`` covariance) could gain from OpenBLAS's threads.

:func:`one_lapack_thread` sets that OpenBLAS to one thread for the duration of a
block and restores the count after it, as scikit-learn's ``KMeans`` limits the
BLAS threads (threadpoolctl) inside its fit. It is scoped: before and after the
block, the process (and so the user's own scipy) has the thread count it had;
nested and concurrent blocks (threads) restore it once, when the last one leaves.
It is a no-op when the backend is not the CPU, when scipy's LAPACK is not the
OpenBLAS of its wheel (see below), and when the environment variable
``JAXKNOCK_LAPACK_THREADS=keep`` is set. The block must wait for the programs it
starts (their LAPACK calls run on XLA's threads, possibly after the dispatch
returns).

Only the OpenBLAS that a scipy wheel bundles (``scipy_openblas_*`` symbols)
is touched: not numpy's ILP64 copy (``*64_`` symbols), nor the copies other
packages bundle (cvxpy's SCS has one). A scipy built against a system BLAS
(conda, distributions) is left as it is.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from pathlib import Path

import jax

from jaxknock import _backend

__all__ = ["lapack_thread_count", "one_lapack_thread", "one_run_at_a_time", "with_one_lapack_thread"]

_LOCK = threading.Lock()
_state = {"depth": 0, "saved": 0}


def _scipy_openblas_paths() -> list[str]:
    """The OpenBLAS libraries that a scipy wheel bundles (``scipy.libs`` on Linux and Windows, ``.dylibs`` on macOS).

    Only those: other packages bundle their own OpenBLAS (cvxpy's SCS does), and which library answers
    ``openblas_set_num_threads`` first in a process depends on the order the packages were imported.
    """
    try:
        import scipy
    except ImportError:
        return []
    root = Path(scipy.__file__).resolve().parent
    folders = (root.parent / "scipy.libs", root / ".dylibs")
    return [str(p) for f in folders if f.is_dir() for p in sorted(f.iterdir()) if "openblas" in p.name.lower()]


@functools.lru_cache(maxsize=1)
def _thread_functions():
    """``(get, set)`` of the OpenBLAS behind scipy's LAPACK, or ``None`` (not a scipy wheel's OpenBLAS)."""
    try:
        import scipy.linalg.cython_lapack  # noqa: F401  (jaxlib's LAPACK: loads its library)
    except ImportError:
        return None
    for path in _scipy_openblas_paths():
        try:
            lib = ctypes.CDLL(path)  # already loaded by scipy: the same library, not a second copy
        except OSError:
            continue
        get = getattr(lib, "scipy_openblas_get_num_threads", None)  # LP64 (numpy's ILP64 copy ends in 64_)
        put = getattr(lib, "scipy_openblas_set_num_threads", None)
        if get is not None and put is not None:
            get.restype, get.argtypes = ctypes.c_int, []
            put.restype, put.argtypes = None, [ctypes.c_int]
            return get, put
    return None


def lapack_thread_count() -> int | None:
    """The thread count of the OpenBLAS behind jaxlib's CPU LAPACK now, or ``None`` if it was not found."""
    fns = _thread_functions()
    return None if fns is None else int(fns[0]())


def _enabled() -> bool:
    return os.environ.get("JAXKNOCK_LAPACK_THREADS", "").lower() != "keep" and _backend.limits_lapack_threads()


@contextlib.contextmanager
def one_lapack_thread():
    """Run the block with one OpenBLAS thread behind jaxlib's CPU LAPACK, then restore the count (see module doc)."""
    fns = _thread_functions() if _enabled() else None
    if fns is None:
        yield
        return
    get, put = fns
    with _LOCK:
        if _state["depth"] == 0:
            _state["saved"] = int(get())
            if _state["saved"] > 1:
                put(1)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["saved"] > 1:
                put(_state["saved"])


_ONE_RUN = threading.RLock()


@contextlib.contextmanager
def one_run_at_a_time():
    """On the CPU, hold a process-wide (re-entrant) lock for the block: concurrent calls from several threads run
    one after the other.

    Two lasso CVs at n = 2000, 2p = 2000 (float64) started at once from two Python threads came back wrong:
    lambda index 19 / 19 where the right ones are 25 / 27, coefficients off by 0.06, ``max_steps_reached``
    (session 53, with one LAPACK thread; session 28 saw 7 of 10 replicates wrong, from one compiled program or
    two, while the same calls one after the other were right, and a plain ``X.T @ X`` or 200 Cholesky solves
    of ``416 x 416`` run at once were right). The cause lies in XLA:CPU's runtime or its LAPACK kernels, not in
    state of this library; until it is found, the l1 engine and :func:`jaxknock.knockoff_filter` do not run
    two at once in one process. The cost is concurrency a user did not get right anyway: separate processes
    (``joblib``'s default ``loky`` backend, ``multiprocessing``) still run in parallel. A no-op off the CPU.
    """
    if _backend.platform() != "cpu":
        yield
        return
    with _ONE_RUN:
        yield


def with_one_lapack_thread(fn):
    """``fn`` run in :func:`one_run_at_a_time` and :func:`one_lapack_thread`; the lock is released and the count
    restored once the programs behind its result finished (``jax.block_until_ready``, which leaves traced values
    and host objects as they are)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_run_at_a_time(), one_lapack_thread():
            return jax.block_until_ready(fn(*args, **kwargs))

    return wrapper
