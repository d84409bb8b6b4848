"""Traced-and-lowered programs on disk: a fresh process skips tracing its largest programs.

JAX's persistent compilation cache (:mod:`jaxknock.cache`) removes the XLA
compile from a fresh process's first call, but not the Python tracing and the
lowering to StableHLO that come before it. For the programs of the knockoff
filter (the cross-validated lasso engine, the S-vector solvers: the SDP Newton
solver, the dense and the factor-model MVR / maximum entropy; and the stages
around them: standardisation, Ledoit-Wolf, sampling, the canonical column
order and the LCD scores) those take about a second together on a 2-core CPU,
most of the time to a first answer once the compiled programs are cached.
Tracing is what an exported program saves; it is still lowered (parsed and
inlined) in a fresh process: with the stages exported too, the first call at
n = 600, p = 200 went from 3.1-3.4 s to 2.4-2.9 s on a slow 2-core VM
(session 37, warm call 0.45 s).

:func:`call` runs ``fn(*args, **static)`` (``fn`` a ``jax.jit``-ed function)
through :mod:`jax.export` when the compilation cache is on: the first process
exports the program (trace + lower, as a plain call would) and keeps it next to
the compiled programs; a later process loads it (milliseconds) and calls it, and
XLA finds the compiled executable in the compilation cache. Results are those of
the plain call (the same StableHLO). The entry is keyed by the function, the
static arguments, the argument types and shapes, the JAX version, the x64 flag,
the settings that change a traced program (``jax_threefry_partitionable``, the
default matmul precision and PRNG implementation), the backend and a hash of
jaxknock's source, so any change recompiles.

The plain call is used instead when the cache is off, inside a trace (``jit`` /
``vmap`` of a caller), with several devices, or if exporting fails (the failure
is remembered on disk, so it is not retried). Entries are Python pickles of
:class:`jax.export.Exported` (its official serialiser needs the ``flatbuffers``
package, which is not a jaxknock dependency): read them only from a cache
directory you trust, as with JAX's own compilation cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
from pathlib import Path

import jax

from jaxknock import _backend, _checks

_SUBDIR = "jaxknock-exports"
LOADED: dict = {}  # this process's entries, by path: loaded (or exported) once
FAILED: set = set()  # this process's failed exports, by path (the marker file may not be writable)


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """A hash of every jaxknock source file: any edit invalidates every entry."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def export_directory() -> Path | None:
    base = jax.config.jax_compilation_cache_dir
    return None if not base else Path(base) / _SUBDIR


_TRACE_SETTINGS = ("jax_threefry_partitionable", "jax_default_matmul_precision", "jax_default_prng_impl")


def _usable(args) -> bool:
    return all(_checks.is_concrete(a) for a in jax.tree.leaves(args)) and jax.device_count() == 1


def program_key(fn, args, static) -> str:
    """The exported-program cache key of ``fn`` on ``args`` (their types) and ``static`` settings."""
    leaves, tree = jax.tree.flatten(args)
    types = [str(jax.typeof(a)) for a in leaves]
    parts = (
        getattr(fn, "__module__", ""),
        getattr(fn, "__qualname__", repr(fn)),
        repr(sorted(static.items())),
        str(tree),
        repr(types),
        jax.__version__,
        str(jax.config.jax_enable_x64),
        # settings that change the traced program (its random bits, its matmul precision): a program
        # exported under one was called under the other
        *(str(getattr(jax.config, name, None)) for name in _TRACE_SETTINGS),
        _backend.platform(),
        _source_hash(),
    )
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


def _load(path: Path):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # a partial write or another jax's pickle: rebuilt below
        return None


def export_program(fn, args, static, path: Path):
    exported = jax.export.export(jax.jit(functools.partial(fn, **static)))(*args)
    # the vjp hook is a closure (not picklable) and differentiation is not used here
    exported = dataclasses.replace(exported, _get_vjp=None)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(exported, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old entry or the new one
    return exported


def call(fn, *args, **static):
    """``fn(*args, **static)``, through an exported program kept on disk when the compilation cache is on."""
    directory = export_directory()
    if directory is None or not _usable(args):
        return fn(*args, **static)
    key = program_key(fn, args, static)
    path, failed = directory / f"{key}.pkl", directory / f"{key}.failed"
    exported = LOADED.get(path)
    if exported is not None:  # a warm call: no file-system access
        return exported.call(*args)
    if path in FAILED or failed.exists():
        return fn(*args, **static)
    exported = _load(path) if path.exists() else None
    if exported is None:
        try:
            exported = export_program(fn, args, static, path)
        except Exception:  # e.g. a program with host callbacks, or a read-only directory: plain calls from now on
            FAILED.add(path)
            try:
                failed.parent.mkdir(parents=True, exist_ok=True)
                failed.touch()
            except OSError:
                pass
            return fn(*args, **static)
    LOADED[path] = exported
    return exported.call(*args)
