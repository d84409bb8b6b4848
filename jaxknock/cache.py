"""JAX's persistent compilation cache for jaxknock: a second process on the same shapes does not recompile.

XLA compiles every jitted program the first time a process calls it with new
shapes. For the knockoff filter that is seconds of work (the S-vector Newton
solver and the cross-validated lasso engine are large programs), paid again by
every fresh Python process. JAX can keep the compiled programs on disk
(``jax_compilation_cache_dir``); :func:`enable_compilation_cache` turns that on
in a per-user directory, which the ``jaxknock`` CLI does by default.

With the cache on, the knockoff filter's programs (the cross-validated lasso
engine, the S-vector solvers and the sampling / statistics stages) are also
kept *traced* (:mod:`jax.export`, in ``jaxknock-exports/`` inside the cache
directory): a fresh process then skips their Python tracing too, about a
second of its first call at n = 600, p = 200 (``jaxknock/_aot.py``). The working-set capacities the
l1 engines grew into are kept in ``jaxknock-capacity.json`` there
(``jaxknock/_capacity.py``), so a fresh process does not climb to them again.

It is *not* turned on by ``import jaxknock``: the setting is global to JAX (it
also caches the user's own programs), so a library should not change it
silently. Opt-outs: ``JAXKNOCK_NO_COMPILE_CACHE=1`` makes
:func:`enable_compilation_cache` a no-op; the CLI also has ``--no-compile-cache``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["compilation_cache_dir", "enable_compilation_cache"]

# every program is written to disk, the tiny ones too: a fresh process's first
# knockoff_filter at n = 600, p = 200 compiled seven programs of 5-20 ms each at a
# 0.05 s threshold; reading them back is faster (first call 1.16-1.26 s -> 1.10-1.15 s,
# six alternating fresh processes each, 2-core CPU, session 20)
_MIN_COMPILE_SECS = 0.0


_FALSE_WORDS = ("", "0", "false", "no", "off")


def _opted_out() -> bool:
    """``JAXKNOCK_NO_COMPILE_CACHE`` set to anything but empty, 0, false, no or off (any case)."""
    return os.environ.get("JAXKNOCK_NO_COMPILE_CACHE", "").strip().lower() not in _FALSE_WORDS


def compilation_cache_dir() -> str | None:
    """The per-user directory of the persistent compilation cache, or ``None`` if opted out.

    ``$JAXKNOCK_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/jaxknock/jax`` (default
    ``~/.cache/jaxknock/jax``), a leading ``~`` expanded; ``None`` when ``JAXKNOCK_NO_COMPILE_CACHE`` is set to a
    value other than empty, ``0``, ``false``, ``no`` or ``off``.

    Example:
        >>> import os
        >>> os.environ["JAXKNOCK_CACHE_DIR"] = "/tmp/jaxknock-doc-cache"
        >>> compilation_cache_dir()
        '/tmp/jaxknock-doc-cache'
        >>> del os.environ["JAXKNOCK_CACHE_DIR"]
    """
    if _opted_out():
        return None
    base = os.environ.get("JAXKNOCK_CACHE_DIR")
    if base:  # "~/cache" (quoted in a shell, or an ENV line) made a folder named "~" in the working directory
        return os.path.expanduser(base)
    xdg = os.path.expanduser(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"))
    return str(Path(xdg) / "jaxknock" / "jax")


def enable_compilation_cache(path: str | os.PathLike | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache, so a new process reuses compiled programs.

    Call it once, early in the process (it also takes effect after earlier
    compilations: JAX's decision to use the cache is reset). A fresh process
    that runs :func:`~jaxknock.knockoff_filter` on shapes a previous process has
    already compiled then loads the programs from disk instead of compiling them
    (``benchmarks/bench_filter_default.py`` measures both cases). Results are
    bitwise the same: the cache stores the same XLA executables.

    Args:
        path: cache directory; default :func:`compilation_cache_dir`.

    Returns:
        The directory in use, or ``None`` when opted out (``JAXKNOCK_NO_COMPILE_CACHE=1``)
        or the directory cannot be created or written to (the process then simply compiles as usual).

    Example:
        >>> import tempfile, jax
        >>> from jax.experimental.compilation_cache import compilation_cache as cc
        >>> d = enable_compilation_cache(tempfile.mkdtemp())
        >>> jax.config.jax_compilation_cache_dir == d
        True
        >>> jax.config.update("jax_compilation_cache_dir", None)  # back to no cache
        >>> cc.reset_cache()
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    if _opted_out():
        return None
    path = compilation_cache_dir() if path is None else os.fspath(path)
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):  # an existing read-only directory: JAX warned at every compile
            return None
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", _MIN_COMPILE_SECS)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        # JAX decides once per process, at the first compilation, whether the cache is
        # used: start that decision afresh so a call after earlier jax work still takes effect
        cc.reset_cache()
    except (OSError, AttributeError):  # read-only home, or a jax without the options
        return None
    return path
