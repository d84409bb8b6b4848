"""What every subcommand shares: the one-line user error, x64, timing."""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["CLIError", "enable_x64", "timed"]


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def enable_x64():
    import jax

    jax.config.update("jax_enable_x64", True)


def timed(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), seconds)``, waiting for the result's device work."""
    import jax

    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def compile_cache_dir() -> str | None:
    """Per-user directory of JAX's persistent compilation cache for the CLI, or ``None`` if opted out.

    ``$JAXKNOCK_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/jaxknock/jax`` (default
    ``~/.cache/jaxknock/jax``). Opt out with ``--no-compile-cache`` or
    ``JAXKNOCK_NO_COMPILE_CACHE=1``.
    """
    if os.environ.get("JAXKNOCK_NO_COMPILE_CACHE", "").strip() not in ("", "0"):
        return None
    base = os.environ.get("JAXKNOCK_CACHE_DIR")
    if base:
        return base
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(xdg) / "jaxknock" / "jax")


def enable_compile_cache(enabled: bool = True) -> str | None:
    """Turn on JAX's persistent compilation cache (a second run on the same shapes does not recompile).

    Returns the directory used, or ``None`` when disabled or not writable.
    """
    import jax

    path = compile_cache_dir() if enabled else None
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except (OSError, AttributeError):  # read-only home, or an old jax without the options
        return None
    return path
