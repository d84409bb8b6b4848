"""What every subcommand shares: the one-line user error, x64, timing."""

from __future__ import annotations

import time

__all__ = ["CLIError", "enable_x64", "seed", "timed"]


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def seed(text: str) -> int:
    """``--seed``: an integer that ``jax.random.key`` takes (64-bit, one below the top for the demo's ``seed + 1``).

    Beyond that range the key failed after the data was loaded, with NumPy's ``OverflowError`` traceback.
    """
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not -(2**63) <= value < 2**63 - 1:
        raise argparse.ArgumentTypeError(f"must be an integer in [-2**63, 2**63 - 1), got {value}")
    return value


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


def enable_compile_cache(enabled: bool = True) -> str | None:
    """Turn on JAX's persistent compilation cache for a CLI run (:func:`jaxknock.enable_compilation_cache`).

    Returns the directory used, or ``None`` when disabled (``--no-compile-cache``),
    opted out (``JAXKNOCK_NO_COMPILE_CACHE=1``) or not writable.
    """
    from jaxknock.cache import enable_compilation_cache

    return enable_compilation_cache() if enabled else None
