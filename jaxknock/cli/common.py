"""What every subcommand shares: the one-line user error, x64, timing."""

from __future__ import annotations

import contextlib
import os
import sys
import time

__all__ = ["CLIError", "enable_x64", "pipe_safe_stdout", "seed", "timed"]


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


class _DiscardAfterBrokenPipe:
    """``sys.stdout`` that, once its reader has gone (``BrokenPipeError``), drops the rest of the output.

    The stream's file descriptor is pointed at ``os.devnull`` too, so what is still buffered does not
    fail again when the interpreter flushes it at exit (Python's documented recipe for SIGPIPE).
    """

    def __init__(self, stream):
        self._stream = stream
        self.broken = False

    def write(self, text):
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._discard()
        return len(text)

    def flush(self):
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._discard()

    def _discard(self):
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (AttributeError, OSError, ValueError):  # no file descriptor (a StringIO): nothing to redirect
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def pipe_safe_stdout():
    """Run a command with a ``stdout`` whose closed reader does not stop the work.

    ``jaxknock select data.csv --target y --out r.json | head -3``: when ``head`` exited, the next
    ``print`` raised ``BrokenPipeError`` (an ``OSError``), so the run ended with "jaxknock: error:
    [Errno 32] Broken pipe", exit code 2, and no report. Now the rest of the output is dropped
    and the command finishes (``--out`` is written, the exit code is the command's).
    """
    original = sys.stdout
    sys.stdout = guard = _DiscardAfterBrokenPipe(original)
    try:
        yield guard
    finally:
        guard.flush()  # what is still buffered, here rather than in the interpreter's exit (which printed
        sys.stdout = original  # "Exception ignored ... BrokenPipeError" and exited 120)
