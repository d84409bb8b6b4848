"""Deprecated keyword aliases, kept for one release.

The library speaks one vocabulary (``max_steps`` for every iteration limit,
``stats["gap"]`` for every certified gap). Older keyword names still work for
one release and emit a ``DeprecationWarning`` that names the replacement.
"""

from __future__ import annotations

import functools
import warnings

__all__ = ["renamed_kwargs"]


def renamed_kwargs(**old_to_new: str):
    """Decorator: accept ``old=`` as a deprecated alias of ``new=``.

    Example::

        @renamed_kwargs(max_sweeps="max_steps")
        def sdp(Sigma, *, max_steps=500): ...

        sdp(S, max_sweeps=10)   # DeprecationWarning, same as sdp(S, max_steps=10)
    """

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {old!r} (deprecated) and {new!r}; pass {new!r} only")
                    warnings.warn(
                        f"{fn.__name__}(): {old!r} is deprecated and will be removed in the next release; use {new!r}",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return inner

    return wrap
