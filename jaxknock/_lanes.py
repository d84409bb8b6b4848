"""The items of a batch in several executions at once, one per CPU core ("lanes").

XLA:CPU runs one program's loops one after another, each step's small kernels on
one core: a batch of replicates that loops over its items (``lax.map``) keeps one
core busy however many the machine has, and splitting the batch into several
``lax.map``-s inside one program does not change that (measured: the same time).
Separate executions of a compiled program do run at the same time, each on its
own host thread. :func:`map_lanes` splits a batch's leading axis into ``lanes``
equal parts (the last one padded with copies of the last item), runs
``fn`` on each part in a thread of its own and joins the results: the same
program for every part, so the same numbers as one call on the whole batch.

The first call of a program (one set of argument shapes and static arguments)
runs its first part alone (in the calling thread, which always takes the first
part) before starting the others, so that the program is traced and compiled
once, not once per thread. JAX's scoped settings
(``jax.enable_x64``, ``jax.default_device``, ...) hold for the thread that
entered them only: a caller inside one runs its batch in one execution, as a
worker thread would trace the program under other settings.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading

import jax
import jax.numpy as jnp

from jaxknock import _backend, _checks

# JAX settings a traced program depends on that a ``with`` block can change for one thread
_SCOPED = (
    "jax_enable_x64",
    "jax_default_device",
    "jax_default_matmul_precision",
    "jax_numpy_dtype_promotion",
    "jax_numpy_rank_promotion",
    "jax_disable_jit",
    "jax_debug_nans",
    "jax_debug_infs",
)
_WARM: set = set()  # programs (by their lanes' shapes and static arguments) that ran at least once
_LOCK = threading.Lock()


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS / Windows
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def _pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jaxknock-lane")


def _settings() -> tuple:
    return tuple(getattr(jax.config, name, None) for name in _SCOPED)


@functools.partial(jax.jit, static_argnums=1)
def _split(batched, lanes: int):
    """``lanes`` equal parts of every array's leading axis, padded with copies of the last item."""
    size = jax.tree.leaves(batched)[0].shape[0]
    each = -(-size // lanes)

    def parts(a):
        a = jnp.concatenate([a, jnp.broadcast_to(a[-1:], (each * lanes - size,) + a.shape[1:])])
        return [a[i * each : (i + 1) * each] for i in range(lanes)]

    return [jax.tree.map(lambda a, i=i: parts(a)[i], batched) for i in range(lanes)]


@functools.partial(jax.jit, static_argnums=1)
def _join(outs, size: int):
    return jax.tree.map(lambda *o: jnp.concatenate(o)[:size], *outs)


def lanes_for(batched, cap: int | None = None) -> int:
    """Lanes for a batch ``batched`` (its first array ``(R, ...)``, or a single item) that loops over its items.

    :func:`jaxknock._backend.batch_lanes` of its size and :func:`cores`, at most ``cap`` (e.g.
    the items whose workspaces fit in memory at once); ``1`` for a single item (a first array
    of fewer than 3 dimensions) or traced arrays (inside a caller's ``jit`` / ``vmap``).
    """
    X = batched[0]
    if X.ndim < 3 or not all(_checks.is_concrete(a) for a in jax.tree.leaves(batched)):
        return 1
    return min(_backend.batch_lanes(X.shape[0], cores()), max(cap, 1) if cap is not None else X.shape[0])


def map_lanes(fn, batched, lanes: int, key):
    """``fn(*part)`` for ``lanes`` parts of the leading axis of ``batched``, concurrently; results joined.

    Args:
        fn: a function of the arrays of ``batched`` (positionally) returning a pytree of
            arrays with the same leading axis; its program must not depend on which part it
            gets (a jitted function of the part's values).
        batched: a tuple of arrays (or ``None`` entries, passed through) sharing a leading axis.
        lanes: parts (``1``: one call of ``fn`` on the whole batch).
        key: a name of ``fn``'s program (its static arguments): the first call of a key
            runs one part before the others so that the program compiles once.
    """
    size = jax.tree.leaves(batched)[0].shape[0]
    lanes = max(1, min(int(lanes), size))
    if lanes > 1:
        pool = _pool(cores())
        lanes = lanes if pool.submit(_settings).result() == _settings() else 1  # not inside a scoped setting
    if lanes == 1:
        return fn(*batched)
    parts = _split(batched, lanes)
    shapes = tuple((a.shape, str(a.dtype)) for a in jax.tree.leaves(parts[0]))
    first = (repr(key), shapes, _settings(), jax.config.jax_compilation_cache_dir)  # what makes a new program
    with _LOCK:
        warm = first in _WARM
    futures = [pool.submit(fn, *part) for part in parts[1:]] if warm else []
    outs = [fn(*parts[0])]  # this thread takes the first part (alone on a program's first call: it compiles)
    if not warm:
        with _LOCK:
            _WARM.add(first)
        futures = [pool.submit(fn, *part) for part in parts[1:]]
    return _join(outs + [f.result() for f in futures], size)
