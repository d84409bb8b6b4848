"""Working-set capacities that sufficed before, kept per problem shape, across calls and processes.

The l1 engines (:mod:`jaxknock.l1.working_set`, the stability engine of
:mod:`jaxknock._stability_engine`) hold their working set and active slots in arrays of
static size ``(W, A)``. A call that overflows is re-run with larger capacities,
and every growth step is one more compilation and a partial run (3-8 s at
n = 1000, 2p = 1000 on a 2-core CPU). A :class:`CapacityStore` remembers, per
problem shape, the capacities that sufficed, so a repeated call (the next
replicate, a benchmark repeat) starts there instead of climbing again:

* ``key``: the exact call shape (batch size included);
* ``family`` (optional): a coarser key shared by every batch size of one problem
  shape; it keeps the largest ``W`` and ``A`` any member needed, and a new batch
  size starts from it.

When JAX's persistent compilation cache is on (:func:`jaxknock.enable_compilation_cache`,
which the CLI does by default), the store is also written to
``jaxknock-capacity.json`` in that directory, so a fresh process on the same
shapes starts at the right capacities: with the compiled programs in the cache,
it then compiles nothing. Capacities only ever grow; a larger start costs some
speed (every kink pays for the slots it has), never accuracy, because an
overflowing call is always re-run. Delete the file to forget them. The file
keeps the ``MAX_ENTRIES`` most recently added keys (about 100 bytes each).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import jax

__all__ = [
    "CapacityStore",
    "MAX_ENTRIES",
    "STORE",
    "TIGHT",
    "grow",
    "headroom",
    "next_capacity",
    "next_slots",
    "start_slots",
    "start_width",
    "slots_for",
]

_FILE = "jaxknock-capacity.json"
_VERSION = 1
MAX_ENTRIES = 2048  # shapes kept on disk: a process sweeping many shapes does not grow the file forever
TIGHT = 0.85  # a call that filled more of a capacity than this leaves the next call one step more (headroom)


def next_capacity(W: int) -> int:
    """The working-set capacity after ``W`` overflowed: doubled up to 1024, then the next of 1536, 2048, 3072, ...

    Every kink and coordinate sweep pays for the whole capacity, and large paths
    overflow a power of two by a little: the lasso CV at n = 5000, m = 10000 ends
    with 2298 cached features, which a doubling served at W = 4096
    (benchmarks/measured/NOTES.md, session 21).

    Example:
        >>> [next_capacity(W) for W in (512, 1024, 1536, 2048, 3072, 1000, 1100)]
        [1024, 1536, 2048, 3072, 4096, 2000, 1536]
    """
    if W < 1024:
        return 2 * W
    p = 1 << (W.bit_length() - 1)  # the largest power of two <= W
    return p + p // 2 if W < p + p // 2 else 2 * p


def next_slots(A: int, limit: int) -> int:
    """The active-slot capacity after ``A`` overflowed: a quarter more, in multiples of 32, at most ``limit``.

    Slots grow gently: every kink costs ``O(A^2 + A W)`` per member whatever the
    number of slots in use (measured at n = 2000, m = 2000: ``A = 320`` instead of
    512 halves the CV time).

    Example:
        >>> next_slots(256, 4096), next_slots(416, 4096), next_slots(416, 500)
        (320, 544, 500)
    """
    return min(32 * math.ceil(1.25 * A / 32), limit)


def start_width(m: int, n: int, *, whole_grid: bool) -> int:
    """The working-set capacity ``W`` a call starts at when nothing is remembered for its shape.

    A path that stops early at the cross-validation minimum (the knockoff filter's
    statistic) ends with a working set of about ``0.3-0.85 m`` features, and at most
    about ``2.5 n`` (session 56: 11 designs, two knockoff draws each, n = 200-2000,
    m = 2p = 600-4000; independent, AR(1) 0.5-0.9 and block-correlated columns, 5-50
    signals, continuous and binary ``y``). A start at 512 overflowed on 18 of those
    22 runs, and every overflow is one more compilation of the engine (3-6 s on a
    2-core CPU) and a wasted partial run. Such a path therefore starts at 1024 (at most ``m``)
    unless ``min(0.85 m, 2.5 n) <= 512``; beyond 1024 the growth ladder decides.
    A larger start costs every kink some speed (n = 1000, m = 1000, 5 signals,
    a working set of 470: 0.21 s warm at ``W = 1000`` against 0.14 s at 512).

    With many more features than rows (the filter at p >= n, m = 2p >= 2n), those
    paths end beyond 1024 once ``n`` is large: at ``1.35-2.0 n`` with 50 signals and
    ``0.85 n`` with 5 weak ones (session 57: genotype-like LD blocks and tf-idf columns,
    n = 1000-2000, m = 4000-20000). Climbing there from 1024 compiled the engine 7 times
    at n = 2000, m = 20000 (first call 100 s, warm 18 s). Such a path starts at the ladder
    step (:func:`next_capacity`) that holds ``min(0.3 m, 1.25 n)`` when that exceeds 1024
    (``0.3 m``: the smallest working set of the designs above): 2 runs, first call 39 s.

    A start within a quarter of ``m`` (``1.25 W >= m``) is ``m`` itself: every kink pays at most
    a quarter more, and the working set can no longer overflow. The AR(1) 0.9 design at
    n = 800, p = 300 (m = 600) used 448-527 features over eight knockoff draws (0.75-0.88 m): from
    512, two draws in eight compiled the engine a second time (7 s warm instead of 0.5 s; session 62).

    A whole grid (``early_stop=False``, :func:`jaxknock.lasso_cv`'s default) ends with a working
    set near ``min(m, 3 n)`` at ``eps = 1e-3`` (iid designs, 20 signals, session 62: 1418 of
    m = 1500 at n = 3000, 993 of 1000 at n = 600, 754 of 1500 at n = 200; 1426 of 2000 at
    n = 500 in session 57), so it starts at the ladder step that holds that. From 512 (up to
    session 61) every first call on such shapes ran the path two or three times and compiled
    the engine as often: n = 3000, m = 1500: 512, 1024, 1500, 61 s against 39 s from 1500;
    n = 2000, m = 600: 27 s against 14 s from 600. A grid that ends sooner (a larger ``eps``,
    a short grid of the caller's) pays for the capacity on every kink; the engine remembers
    what a call used only when it overflowed.

    Example:
        >>> early = ((1000, 1000), (2000, 2000), (800, 200), (400, 600), (600, 800), (1200, 3000), (4000, 1000))
        >>> [start_width(m, n, whole_grid=False) for m, n in early + ((20000, 2000),)]
        [1000, 1024, 512, 400, 600, 1200, 1536, 3072]
        >>> whole = ((2000, 2000), (600, 2000), (1000, 300), (1500, 200), (1000, 100), (2000, 500))
        >>> [start_width(m, n, whole_grid=True) for m, n in whole]
        [2000, 600, 1000, 1024, 512, 1536]
    """
    W, need = 512, min(m, 3 * n)
    if not whole_grid:
        need = 0 if min(0.85 * m, 2.5 * n) <= 512 else max(1024, min(0.3 * m, 1.25 * n))
    while W < need:
        W = next_capacity(W)
    return m if 1.25 * W >= m else W


def slots_for(W: int) -> int:
    """The active slots a call starting at working-set capacity ``W`` asks for: ``0.45 W`` (multiples of 32, >= 256).

    The filter's paths end with about ``0.28-0.47`` as many active features as
    working-set features (the designs of :func:`start_width`). Slots are cheap
    next to the working set (n = 2000, m = 2000: 384 -> 480 slots, 3-5% slower
    kinks, where 1024 -> 1536 features cost 17%), and a slot overflow without a
    working-set overflow grows them by a quarter, one compilation per step.
    :func:`start_slots` caps the result at what an active set can use.

    Example:
        >>> slots_for(512), slots_for(1000), slots_for(1024)
        (256, 480, 480)
    """
    return max(256, 32 * math.ceil(0.45 * W / 32))


def start_slots(A: int, W: int, chunk: int, n: int, *, whole_grid: bool) -> int:
    """The active-slot capacity a call starts at, given the default or remembered ``A``.

    A member's active set lies in the span of its centred rows (the homotopy
    refuses a feature whose Schur complement vanishes), so it never needs more
    than ``n`` slots, nor more than the ``W + chunk`` cached features: the start
    is at most ``min(W + chunk, n + 1)`` (one spare slot for rounding). A larger
    need still grows the capacity as usual.

    A path that runs to the end of its grid (``whole_grid``: no early exit, as
    :func:`jaxknock.lasso_cv`'s default, scikit-learn's ``LassoCV``) starts at that bound:
    at ``eps = 1e-3`` its last penalties hold nearly ``min(n, m)`` active features, and
    a quarter more slots per overflow would compile the engine again three times
    over (n = 2000, m = 500: 256, 320, 416 and 532 slots, 24 s before the first answer
    against 6 s). A path that stops early (the knockoff filter) starts at ``A``, since
    every kink pays for the slots it has.

    Example:
        >>> start_slots(256, 500, 32, 4000, whole_grid=True), start_slots(256, 512, 32, 500, whole_grid=True)
        (532, 501)
        >>> start_slots(256, 1024, 32, 2000, whole_grid=False), start_slots(256, 1024, 32, 120, whole_grid=False)
        (256, 121)
    """
    bound = min(W + chunk, n + 1)
    return bound if whole_grid else min(A, bound)


def grow(W: int, A: int, used_W: int, used_A: int, *, slots_full: bool, max_W: int, chunk: int) -> tuple[int, int]:
    """The capacities to re-run at after a call overflowed, having used ``(used_W, used_A)`` of ``(W, A)``.

    Each re-run is one more compilation (3-6 s on a 2-core CPU at n = 2000,
    m = 2000) plus a partial path, so a step grows every capacity the rest of
    the path will need, not only the one that ran out:

    * the active slots ran out (``slots_full``): ``A`` by :func:`next_slots`, and
      ``W`` too when it is over ``TIGHT`` full (at most ``max_W``);
    * the working set ran out: ``W`` by :func:`next_capacity` (at most
      ``max_W``), and ``A`` in proportion, ``used_A * W' / used_W`` in multiples
      of 32 (at most ``W' + chunk``): the active sets grow with the working set
      as the path goes on. ``used_A = 0`` (an engine without slots) keeps ``A``.

    Measured (benchmarks/measured/NOTES.md, session 25): ``knockoff_filter``
    defaults at n = 2000, p = 1000 ran its engine 5 times on the first call,
    one capacity at a time from ``(512, 256)`` to ``(1536, 416)``, and compiled
    once more on the second, for ``(1536, 544)``; growing both, the first call
    runs ``(512, 256)``, ``(1024, 384)``, ``(1536, 576)`` and the second call
    compiles nothing. The lasso CV at n = 5000, m = 10000: 10 runs, 5 now.

    Example:
        >>> grow(512, 256, 512, 178, slots_full=False, max_W=2000, chunk=32)
        (1024, 384)
        >>> grow(1024, 320, 850, 320, slots_full=True, max_W=2000, chunk=32)  # W 83% full: stays
        (1024, 416)
        >>> grow(1024, 320, 1000, 320, slots_full=True, max_W=2000, chunk=32)
        (1536, 416)
        >>> grow(512, 0, 512, 0, slots_full=False, max_W=700, chunk=32)  # no slots
        (700, 0)
    """
    if slots_full:
        W2 = min(next_capacity(W), max_W) if used_W > TIGHT * W and W < max_W else W
        return W2, next_slots(A, W2 + chunk)
    W2 = min(next_capacity(W), max_W)
    A2 = min(32 * math.ceil(used_A * W2 / max(used_W, 1) / 32), W2 + chunk)
    return W2, max(A, A2)


def headroom(W: int, A: int, used_W: int, used_A: int, *, max_W: int, chunk: int) -> tuple[int, int]:
    """The capacities a later call of the same shape starts at, after one that used ``(used_W, used_A)`` of ``(W, A)``.

    A capacity filled beyond ``TIGHT`` steps up once now (:func:`next_capacity`,
    :func:`next_slots`; ``W`` at most ``max_W``, ``A`` at most ``W + chunk``): the
    next draw of the same problem (a new knockoff replicate) most likely overflows
    it, and every growth step costs a compilation and a wasted partial run.
    Growing both at once compiles once where two calls each grew one (``knockoff_filter``
    at n = 2000, p = 1000: the first call used 1001 of ``W = 1024`` and 386 of
    ``A = 416``; the second grew ``W``, the third ``A``).

    The l1 engine asks for it only on evidence that the needs of a shape vary: a
    call that outgrew the capacities an earlier call of its shape had needed (the
    draws of a knockoff filter). Every kink pays for every capacity, used or not,
    so a problem solved again (a benchmark repeat, the same data) runs at what it
    needed: the lasso CV at n = 2000, m = 2000 (float64) took 0.75 s at the
    headroom's ``(1536, 416)`` and 0.43 s at ``(1024, 320)`` (session 27).

    Example:
        >>> headroom(1024, 416, 1001, 386, max_W=2000, chunk=64)
        (1536, 544)
        >>> headroom(1024, 416, 700, 386, max_W=2000, chunk=64)  # only the slots were tight
        (1024, 544)
        >>> headroom(400, 256, 400, 150, max_W=400, chunk=32)  # W = m: nothing to grow
        (400, 256)
    """
    W2 = min(next_capacity(W), max_W) if used_W > TIGHT * W and W < max_W else W
    A2 = next_slots(A, W2 + chunk) if used_A > TIGHT * A else A
    return W2, max(A2, A)


def _cache_file() -> Path | None:
    """``jaxknock-capacity.json`` in JAX's compilation cache directory, ``None`` when that cache is off."""
    base = jax.config.jax_compilation_cache_dir
    return None if not base else Path(base) / _FILE


def _read(path: Path) -> dict:
    """The entries of a capacity file; ``{}`` if it is missing, unreadable or of another version."""
    try:
        with open(path) as f:
            data = json.load(f)
        if data.get("version") != _VERSION:
            return {}
        return {str(k): (int(v[0]), int(v[1])) for k, v in data["entries"].items()}
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return {}


def _merge(into: dict, entries: dict) -> bool:
    """Entry-wise maximum of ``entries`` into ``into``; whether ``into`` changed."""
    changed = False
    for k, (W, A) in entries.items():
        old = into.get(k, (0, 0))
        new = (max(W, old[0]), max(A, old[1]))
        if new != old:
            into[k] = new
            changed = True
    return changed


class CapacityStore:
    """Capacities ``(W, A)`` per key, in memory and (when ``file()`` names one) on disk.

    Args:
        file: a function returning the file to keep the entries in, or ``None``
            for memory only; called on every lookup, so the store follows the
            compilation cache being turned on later in the process.

    Example:
        >>> store = CapacityStore(lambda: None)
        >>> store.start(("a", 1), default=(512, 256))
        (512, 256)
        >>> store.remember(("a", 1), 600, 320)
        >>> store.start(("a", 1), default=(512, 256))
        (600, 320)
        >>> store.lookup(("b", 2)) is None  # nothing known: unlike start, no default stands in for it
        True
    """

    def __init__(self, file=_cache_file):
        self._file = file
        self._entries: dict = {}
        self._loaded: set = set()

    def _sync(self) -> Path | None:
        path = self._file()
        if path is not None and path not in self._loaded:
            self._loaded.add(path)
            _merge(self._entries, _read(path))
        return path

    def lookup(self, key, family=None) -> tuple[int, int] | None:
        """``key``'s entry, else ``family``'s, else ``None`` (nothing is known of either)."""
        self._sync()
        for k in (key, family):
            if k is not None and repr(k) in self._entries:
                return tuple(self._entries[repr(k)])
        return None

    def start(self, key, default, family=None) -> tuple[int, int]:
        """``(W, A)`` to start from: :meth:`lookup`'s entry, else ``default``."""
        known = self.lookup(key, family)
        return tuple(default) if known is None else known

    def remember(self, key, W: int, A: int, family=None) -> None:
        """Record that ``(W, A)`` sufficed for ``key`` (and, element-wise at most, for ``family``)."""
        path = self._sync()
        new = {repr(key): (int(W), int(A))}
        if family is not None:
            new[repr(family)] = (int(W), int(A))
        if _merge(self._entries, new) and path is not None:
            self._write(path)

    def _write(self, path: Path) -> None:
        entries = _read(path)  # another process may have added entries since this one loaded
        _merge(entries, self._entries)
        for k in list(entries)[: max(len(entries) - MAX_ENTRIES, 0)]:  # oldest first (insertion order)
            del entries[k]
        self._entries = entries
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            with open(tmp, "w") as f:
                json.dump({"version": _VERSION, "entries": {k: list(v) for k, v in entries.items()}}, f)
            os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
        except OSError:  # a read-only cache directory: memory only
            pass

    def clear(self) -> None:
        """Forget the entries held in memory (the file, if any, is read again on the next lookup)."""
        self._entries = {}
        self._loaded = set()


STORE = CapacityStore()
