"""Device memory and chunk planning: the one implementation every batched path uses.

:func:`device_memory_bytes` is the free memory of one device (accelerator
``memory_stats``; on CPU the host's ``MemAvailable`` shared among the CPU
devices), :func:`plan_chunk` turns a per-item byte estimate into a chunk size.
The per-item estimates live here too: :func:`knockoff_bytes` (one knockoff
replicate of the dense or factor-model sampler), :func:`statistic_bytes` (the
feature statistics of one replicate), :func:`gram_cache_bytes` (the lasso
homotopy engine's caches of one design), and :func:`replicate_chunk` plans the
single-device replicate loop of ``jaxknock.sample_replicates``.
"""

from __future__ import annotations

import math
import numbers
import os

import jax
import numpy as np
from jax.sharding import Mesh

from jaxknock import _checks

__all__ = [
    "ACCELERATOR_FALLBACK_BYTES",
    "device_memory_bytes",
    "gram_cache_bytes",
    "host_available_bytes",
    "knockoff_bytes",
    "plan_chunk",
    "replicate_chunk",
    "statistic_bytes",
]

# --------------------------------------------------------------------------
# Memory planning
# --------------------------------------------------------------------------

#: Memory credited to an accelerator whose ``memory_stats()`` lacks ``bytes_limit``
#: (smaller than any current data-centre GPU, so chunks planned from it fit).
ACCELERATOR_FALLBACK_BYTES = 4 * 2**30


def host_available_bytes() -> int:
    """The host's ``MemAvailable`` (Linux), else free physical pages, else 4 GiB."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover
        pass
    try:  # pragma: no cover
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 4 * 2**30


def device_memory_bytes(devices=None) -> int:
    """Free bytes per device: the minimum over the (addressable) ``devices``.

    Accelerators report ``memory_stats()["bytes_limit"] - bytes_in_use``. CPU
    devices (one real or several simulated ones) share the host's
    ``MemAvailable``, which is divided among the CPU devices of this process
    that are in ``devices``. An accelerator whose ``memory_stats()`` has no
    ``bytes_limit`` (or that keeps no statistics) is credited with
    :data:`ACCELERATOR_FALLBACK_BYTES` (4 GiB) less what it reports in use,
    never with host RAM: its own memory is what bounds a chunk, and planning
    too small a chunk costs speed where too large a one fails with
    out-of-memory (pass ``chunk_size=`` to override the plan).
    """
    if devices is None:
        devs = jax.local_devices()
    elif isinstance(devices, Mesh):
        devs = [d for d in devices.devices.flat if d.process_index == jax.process_index()]
    elif isinstance(devices, jax.Device):
        devs = [devices]
    else:
        devs = [d for d in devices if d.process_index == jax.process_index()]
    devs = devs or jax.local_devices()
    n_cpu = sum(d.platform == "cpu" for d in devs)
    free = []
    for d in devs:
        try:
            stats = d.memory_stats()
        except Exception:  # pragma: no cover - backend without stats
            stats = None
        if stats and "bytes_limit" in stats:
            free.append(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))
        elif d.platform == "cpu":
            free.append(host_available_bytes() // max(n_cpu, 1))
        else:  # an accelerator without a limit: a conservative guess, not host RAM
            in_use = int(stats.get("bytes_in_use", 0)) if stats else 0
            free.append(max(ACCELERATOR_FALLBACK_BYTES - in_use, 0))
    return int(min(free))


def plan_chunk(
    num_items: int,
    per_item_bytes: int,
    *,
    shared_bytes: int = 0,
    num_devices: int = 1,
    memory_bytes: int | None = None,
    fraction: float = 0.5,
    knob: str = "chunk_size",
    what: str = "item",
) -> int:
    r"""Items per device and step so that the step fits in device memory.

    With ``M`` the free bytes of one device (``memory_bytes``, default
    :func:`device_memory_bytes`), ``S`` the bytes every device holds whatever
    the chunk (``shared_bytes``: replicated inputs, outputs kept) and ``b`` the
    peak bytes of one item in flight (``per_item_bytes``), the chunk is

    .. math:: c = \min\big(\lceil B / D\rceil,\ \lfloor(\text{fraction}\cdot M - S) / b\rfloor\big),
        \quad c \ge 1,

    for ``B = num_items`` spread over ``D = num_devices``. If ``S + b > M``
    (not even one item fits) a ``ValueError`` names ``knob``.

    Example:
        >>> plan_chunk(100, 10 * 2**20, memory_bytes=2**30, num_devices=4)
        25
        >>> plan_chunk(100, 10 * 2**20, memory_bytes=200 * 2**20)
        10
    """
    # num_devices = 0 was taken as 1 and num_items = 2.5 as 2; a NaN byte count failed in int() ("cannot
    # convert float NaN to integer") naming nothing
    for name, v in (("num_items", num_items), ("num_devices", num_devices)):
        if not (_checks.is_int(v) and v >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    for name, v in (("per_item_bytes", per_item_bytes), ("shared_bytes", shared_bytes), ("memory_bytes", memory_bytes)):
        if v is None and name == "memory_bytes":
            continue
        v = _checks.real_setting(v)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not 0 <= v < math.inf:
            raise ValueError(f"{name} must be a finite number of bytes >= 0, got {v!r}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    M = device_memory_bytes() if memory_bytes is None else int(memory_bytes)
    per_device = -(-int(num_items) // max(int(num_devices), 1))
    if shared_bytes + per_item_bytes > M:
        raise ValueError(
            f"one {what} needs about {(shared_bytes + per_item_bytes) / 2**30:.3g} GiB "
            f"({shared_bytes / 2**30:.3g} GiB shared + {per_item_bytes / 2**30:.3g} GiB per {what}) "
            f"but a device has only {M / 2**30:.3g} GiB free; reduce the problem size or pass "
            f"{knob}= explicitly (and more devices= if you have them)"
        )
    room = int(fraction * M) - int(shared_bytes)
    c = room // max(int(per_item_bytes), 1) if per_item_bytes else per_device
    return int(max(1, min(per_device, c)))


# --------------------------------------------------------------------------
# Per-item byte estimates
# --------------------------------------------------------------------------


def knockoff_bytes(
    n: int, p: int, k: int | None, itemsize: int, *, block_size: int | None = None, chunk_elements: int | None = None
) -> tuple[int, int]:
    """``(shared, per_replicate)`` bytes of the knockoff samplers (``jaxknock.sample_replicates``).

    Dense (``k=None``): the conditional mean and the factor of ``Omega`` are
    shared, ``(n p + p^2) b``; a replicate in flight holds its normals, their
    product and the output, ``3 n p b``. Factor model of rank ``k`` with block
    size ``m = block_size``: shared ``(n k + p (m + 2k)) b``, per replicate
    ``(3 n p + c) b``: the output, the noise and its re-layout, plus the
    draw's chunk temporaries, ``c = chunk_elements`` (default ``4 n (m + k)``).

    Example:
        >>> knockoff_bytes(100, 10, None, 8)
        (8800, 24000)
    """
    b = int(itemsize)
    if k is None:
        return (n * p + p * p) * b, 3 * n * p * b
    if block_size is None:
        raise ValueError("the factor-model estimate needs the sampler's block_size")
    m = int(block_size)
    chunk = 4 * n * (m + k) if chunk_elements is None else int(chunk_elements)
    return (n * k + p * (m + 2 * k)) * b, (3 * n * p + chunk) * b


def statistic_bytes(n: int, p: int, itemsize: int, *, lasso: bool) -> int:
    """Peak bytes of the feature statistics of one replicate on the ``(n, 2p)`` design ``[X, X~]``.

    ``(K + 3) 2 n p b`` for the lasso statistics with ``K = 5`` folds (the
    design, its folds and the solver's workspace), ``4 n p b`` for the closed
    forms (correlation, centroid).
    """
    return (8 * 2 * n * p if lasso else 4 * n * p) * int(itemsize)


def gram_cache_bytes(members: int, cache: int, slots: int, itemsize: int) -> int:
    """Bytes of the lasso homotopy engine's caches for one design (``jaxknock.l1.working_set``).

    Per member a ``cache x cache`` block of Gram entries and two ``slots x slots``
    inverses (the current point and the restart point), counted twice for the
    loop's working copies: ``2 b M (c^2 + 2 s^2)``.
    """
    return 2 * int(itemsize) * members * (cache * cache + 2 * slots * slots)


def replicate_chunk(
    num_replicates: int,
    n: int,
    p: int,
    itemsize: int,
    shared_bytes: int,
    per_replicate_bytes: int,
    *,
    stream: bool,
    memory_bytes: int,
) -> int:
    """Replicates per ``vmap`` chunk of the single-device replicate loop.

    The ``(R, n, p)`` result (``stream=False``) or the chunk held by the
    consumer (``stream=True``: ``n p b`` more per replicate) is added to the
    sampler's estimate (:func:`knockoff_bytes`); the chunk is then
    :func:`plan_chunk`'s, i.e. as many replicates as fit in half of
    ``memory_bytes``, at least 1. Raises when even one replicate (with the
    materialised result) does not fit in all of it, asking for ``stream=True``
    when the result is the problem.

    Example:
        >>> replicate_chunk(10, 100, 10, 8, 0, 24000, stream=False, memory_bytes=10**6)
        10
        >>> replicate_chunk(10**4, 100, 10, 8, 0, 24000, stream=True, memory_bytes=10**6)
        15
    """
    b = int(itemsize)
    R = int(num_replicates)
    per_rep = int(per_replicate_bytes)
    if stream:
        per_rep += n * p * b  # the chunk held by the consumer
        out_bytes = 0
    else:
        out_bytes = R * n * p * b
    available = int(memory_bytes)
    if shared_bytes + out_bytes + per_rep > available:
        if stream:
            raise ValueError(
                f"one replicate needs about {(shared_bytes + per_rep) / 2**30:.3g} GiB but only "
                f"{available / 2**30:.3g} GiB are available"
            )
        raise ValueError(
            f"the (R, n, p) = ({R}, {n}, {p}) result needs {out_bytes / 2**30:.3g} GiB and "
            f"only {available / 2**30:.3g} GiB are available; pass stream=True to iterate "
            "over chunks of replicates instead"
        )
    return plan_chunk(R, per_rep, shared_bytes=shared_bytes + out_bytes, memory_bytes=available, what="replicate")
