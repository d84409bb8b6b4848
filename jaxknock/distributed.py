r"""Scaling past one device: batches sharded over a device mesh, multi-host.

Everything batched in jaxknock (knockoff replicates with their statistics,
batches of S-vector problems, hyper-parameter sweeps) is a map over a
leading axis of independent problems. :func:`shard_batch` runs such a map
with JAX's own SPMD machinery: a 1-D :class:`jax.sharding.Mesh` over the
devices, the batch placed with a :class:`~jax.sharding.NamedSharding` that
splits its leading axis, and the per-device work written once with
:func:`jax.shard_map` (each device ``vmap``-s its slice). No hand-written
multiprocessing; on GPUs/TPUs the devices run concurrently, on CPU they are
XLA's simulated host devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``).

Invariance. Randomness is split *before* sharding (``jax.random.split(key, R)``
on the host, then the keys are distributed), every problem is computed by the
same per-item program whatever the device count, and the batch is padded by
repeating its last item (so padding never creates a degenerate problem) and
unpadded after. Results therefore equal the single-device ``vmap`` run for the
same key (bit for bit in the tests; ``1e-12`` is the documented tolerance).

Memory planning (implemented in ``jaxknock._memory``, re-exported here).
:func:`plan_chunk` turns a per-item byte estimate into the
largest number of items per device and step that fits in ``fraction`` of the
device's free memory (accelerator ``memory_stats``; for CPU devices the
host's ``MemAvailable`` divided among the simulated devices), and raises a
``ValueError`` naming the knob to turn when not even one item fits.

Multi-host (``jax.distributed``). Start one process per host with::

    jax.distributed.initialize(coordinator_address="host0:1234",
                               num_processes=N, process_id=i)

after which ``jax.devices()`` lists the devices of *all* processes (CPU
cross-process collectives go through gloo, the default in jax 0.10). Every
process then runs the same program, and there are two equivalent routes:

1. Global arrays: :func:`shard_batch` with the default ``devices=None`` builds
   its mesh over all processes' devices, each process computes only the
   replicates on its own devices, and the result is a global ``(R, p)``
   array; reduce it inside ``jit`` with a replicated output, e.g.
   ``jax.jit(lambda W: jaxknock.aggregate_ebh(W, q), out_shardings=NamedSharding(mesh, P()))``
   (the mean over replicates becomes an all-reduce of ``p`` numbers).
2. Host shards: each process computes the replicates
   ``jax.random.split(key, R)[process_replicates(R)]`` locally (any local
   ``devices=``) and calls :func:`aggregate_ebh_across_processes`, which
   all-gathers the per-process e-value sums (``p`` numbers each).

Both give the single-process selection (tested with two processes on one
host, ``tests/test_distributed.py``). The high-level entry points
(``sample_replicates``, ``knockoff_filter``) return host-readable results
only for single-process meshes: under ``jax.distributed`` use route 2, or
pass them ``devices=jax.local_devices()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxknock import _checks
from jaxknock._memory import device_memory_bytes, plan_chunk
from jaxknock._mesh import device_mesh, resolve_mesh, shard_map, wants_sharding
from jaxknock.filter import ebh, knockoff_evalues

__all__ = [
    "device_mesh",
    "device_memory_bytes",
    "plan_chunk",
    "shard_batch",
    "sdp_batch",
    "process_replicates",
    "aggregate_ebh_across_processes",
]


# --------------------------------------------------------------------------
# Sharded map over a leading batch axis
# --------------------------------------------------------------------------


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _fn_token(fn):
    """A hashable identity for caching: partials compare by their contents."""
    if isinstance(fn, functools.partial):
        try:
            token = (_fn_token(fn.func), fn.args, tuple(sorted(fn.keywords.items())))
            hash(token)
            return token
        except TypeError:
            return fn
    return fn


_PROGRAMS: dict = {}


def _sharded_program(token, fn, mesh, axis_name, batched_def, broadcast_def, key_impls, vectorized):
    """The jitted shard_map program, cached on ``token`` (not on ``fn``: equal partials share it)."""
    cache_key = (token, mesh, axis_name, batched_def, broadcast_def, key_impls, vectorized)
    try:
        return _PROGRAMS[cache_key]
    except TypeError:  # unhashable token: build without caching
        return _build_program(fn, mesh, axis_name, batched_def, broadcast_def, key_impls, vectorized)
    except KeyError:
        pass
    if len(_PROGRAMS) > 128:
        _PROGRAMS.clear()
    program = _build_program(fn, mesh, axis_name, batched_def, broadcast_def, key_impls, vectorized)
    _PROGRAMS[cache_key] = program
    return program


def _build_program(fn, mesh, axis_name, batched_def, broadcast_def, key_impls, vectorized):

    def body(batched_leaves, broadcast_leaves):
        leaves = [
            jax.random.wrap_key_data(x, impl=impl) if impl is not None else x
            for x, impl in zip(batched_leaves, key_impls)
        ]
        batched = jax.tree_util.tree_unflatten(batched_def, leaves)
        broadcast = jax.tree_util.tree_unflatten(broadcast_def, broadcast_leaves)
        if vectorized:
            return fn(*batched, *broadcast)
        return jax.vmap(lambda b: fn(*b, *broadcast))(batched)

    mapped = shard_map(body, mesh=mesh, in_specs=(P(axis_name), P()), out_specs=P(axis_name), check_vma=False)
    return jax.jit(mapped)


def _place(x, sharding, multi_process):
    if multi_process:  # each process fills only its addressable shards
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
    return jax.device_put(x, sharding)


def shard_batch(
    fn: Callable,
    *batched,
    broadcast: Sequence[Any] = (),
    devices=None,
    mesh: Mesh | None = None,
    axis_name: str = "batch",
    chunk_size: int | None = None,
    vectorized: bool = False,
    per_item_bytes: int | None = None,
    shared_bytes: int = 0,
    knob: str = "chunk_size",
):
    r"""Map ``fn`` over the leading axis of ``batched``, sharded over a device mesh.

    Computes ``[fn(*b_i, *broadcast) for b_i in zip(*batched)]`` stacked along
    a new leading axis, i.e. ``jax.vmap(fn)`` over the batched arguments with
    ``broadcast`` held fixed, but with the batch of ``B`` items split over the
    ``D`` devices of a 1-D mesh (``NamedSharding(mesh, P(axis_name))``, body
    written with ``jax.shard_map``) in steps of ``D * c`` items, ``c`` items
    per device and step. The batch is padded to a multiple of ``D * c`` by
    repeating its last item and the padding is dropped from the result, so
    the result does not depend on ``D`` or ``c``. Keys (typed ``jax.random``
    key arrays) may appear among ``batched``: split them before calling.

    Args:
        fn: the per-item function (or, with ``vectorized=True``, a function
            already mapping over a leading axis, e.g. a batched solver; it
            then gets ``c`` items at once and must return outputs whose
            leaves all have the leading axis ``c``).
        *batched: pytrees whose leaves share the leading dimension ``B``.
        broadcast: pytrees of arrays passed unchanged to every item
            (replicated on every device).
        devices: ``None`` (all devices), an int or a list of devices; see
            :func:`device_mesh`.
        mesh: a :class:`jax.sharding.Mesh` with an axis ``axis_name`` (other
            axes, if any, replicate); excludes ``devices``.
        chunk_size: items per device and step; default: all at once, or
            from ``per_item_bytes`` with :func:`plan_chunk`.
        per_item_bytes, shared_bytes: peak-memory estimate of one item and of
            the replicated part, for :func:`plan_chunk`.
        knob: the name :func:`plan_chunk` cites when one item does not fit.

    Returns:
        The stacked outputs, leaves of leading dimension ``B`` (sharded over
        the mesh; after ``jax.distributed.initialize`` a global array).

    Example:
        >>> keys = jax.random.split(jax.random.key(0), 10)
        >>> out = shard_batch(lambda k, s: s * jax.random.normal(k, (3,)), keys,
        ...                   broadcast=(2.0,))
        >>> out.shape
        (10, 3)
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not batched:
        raise ValueError("give at least one batched argument")
    mesh = resolve_mesh(devices, mesh, axis_name)
    D = int(mesh.shape[axis_name])
    leaves, batched_def = jax.tree_util.tree_flatten(tuple(batched))
    if not leaves:
        raise ValueError("the batched arguments hold no arrays")
    leaves = [x if _is_key(x) else jnp.asarray(x) for x in leaves]
    sizes = {int(x.shape[0]) if x.ndim else -1 for x in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            "every batched leaf needs the same leading (batch) dimension, got shapes "
            f"{sorted({tuple(x.shape) for x in leaves})}"
        )
    B = sizes.pop()
    if B < 1:
        raise ValueError("the batch is empty")
    key_impls = tuple(jax.random.key_impl(x) if _is_key(x) else None for x in leaves)
    leaves = [jax.random.key_data(x) if _is_key(x) else x for x in leaves]
    bc_leaves, broadcast_def = jax.tree_util.tree_flatten(tuple(broadcast))
    bc_leaves = [jax.random.key_data(x) if _is_key(x) else jnp.asarray(x) for x in bc_leaves]
    if any(_is_key(x) for x in jax.tree_util.tree_leaves(tuple(broadcast))):
        raise TypeError("keys must be batched (split them), not broadcast")

    chunk_size = _checks.int_setting(chunk_size, "chunk_size")  # jnp.int32(2) was refused as not an int
    if chunk_size is not None:
        if not _checks.is_int(chunk_size) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
        c = int(min(chunk_size, -(-B // D)))
    elif per_item_bytes is not None:
        c = plan_chunk(
            B,
            per_item_bytes,
            shared_bytes=shared_bytes,
            num_devices=D,
            memory_bytes=device_memory_bytes(mesh),
            knob=knob,
        )
    else:
        c = -(-B // D)
    step = D * c
    steps = -(-B // step)
    idx = np.minimum(np.arange(steps * step), B - 1)
    multi = jax.process_count() > 1
    program = _sharded_program(
        _fn_token(fn), fn, mesh, axis_name, batched_def, broadcast_def, key_impls, bool(vectorized)
    )
    rep = NamedSharding(mesh, P())
    split = NamedSharding(mesh, P(axis_name))
    bc_placed = [_place(x, rep, multi) for x in bc_leaves]
    pad = steps * step != B
    outs = []
    for i in range(steps):
        sel = idx[i * step : (i + 1) * step]
        if not pad and steps == 1:
            part = leaves
        elif multi:
            part = [np.asarray(x)[sel] for x in leaves]
        else:
            part = [x[jnp.asarray(sel)] for x in leaves]
        outs.append(program([_place(x, split, multi) for x in part], bc_placed))
    out = outs[0] if steps == 1 else jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *outs)
    return jax.tree_util.tree_map(lambda a: a[:B], out) if pad else out


# --------------------------------------------------------------------------
# Batched S-vector problems
# --------------------------------------------------------------------------

_SDP_METHODS = ("sdp", "asdp", "equicorrelated")


def sdp_batch(
    Sigmas, *, method: str = "sdp", devices=None, mesh: Mesh | None = None, chunk_size: int | None = None, **kwargs
):
    r"""Solve a batch of S-vector problems, sharded over devices.

    ``Sigmas`` is ``(B, p, p)``; item ``b`` equals ``method(Sigmas[b], **kwargs)``
    (:func:`jaxknock.sdp`, :func:`jaxknock.asdp` or
    :func:`jaxknock.equicorrelated`) and the batch of ``Solution`` objects is
    stacked along a leading axis. The problems are split over the devices
    (:func:`shard_batch`; each device ``vmap``-s its share, which the S-vector
    solvers run one matrix after another on CPU).

    Memory: about ``8 p^2`` numbers per problem in flight (the correlation,
    its padded copy, the Cholesky factor and temporaries); the chunk per
    device comes from :func:`plan_chunk` unless ``chunk_size`` is given.

    Example:
        >>> Sigmas = jnp.stack([0.5 * jnp.eye(4) + 0.5, jnp.eye(4)])
        >>> sdp_batch(Sigmas, method="equicorrelated", devices=1).value.shape
        (2, 4)
    """
    from jaxknock import _sigma_checks, svector

    if method not in _SDP_METHODS:
        raise ValueError(f"method must be one of {_SDP_METHODS}, got {method!r}")
    Sigmas = jnp.asarray(Sigmas)
    if Sigmas.ndim != 3 or Sigmas.shape[1] != Sigmas.shape[2]:
        raise ValueError(f"Sigmas must be a batch of square matrices (B, p, p), got shape {tuple(Sigmas.shape)}")
    # validate the whole batch on concrete values once, before tracing, in one device
    # reduction (the solvers skip value checks on tracers and report RESULTS codes)
    _sigma_checks.validate_sigma(Sigmas, need_x64=(method != "equicorrelated"))
    solver = {"sdp": svector.sdp, "asdp": svector.asdp, "equicorrelated": svector.equicorrelated}[method]
    fn = functools.partial(_solve_one, solver, tuple(sorted(kwargs.items())))
    p = Sigmas.shape[-1]
    if not wants_sharding(devices, mesh) and chunk_size is None:
        return jax.vmap(fn)(Sigmas)
    return shard_batch(
        fn,
        Sigmas,
        devices=devices,
        mesh=mesh,
        chunk_size=chunk_size,
        per_item_bytes=8 * p * p * Sigmas.dtype.itemsize,
        knob="chunk_size",
    )


def _solve_one(solver, kwargs, Sigma):
    return solver(Sigma, **dict(kwargs))


# --------------------------------------------------------------------------
# Multi-process replicate aggregation
# --------------------------------------------------------------------------


def process_replicates(
    num_replicates: int, *, process_index: int | None = None, process_count: int | None = None
) -> slice:
    """The contiguous range of replicates this process computes.

    Replicate ``r`` always uses ``jax.random.split(key, R)[r]``; the ranges of
    the processes partition ``range(R)`` (sizes differ by at most one), so the
    union of the processes' replicates is the single-process batch.

    Example:
        >>> process_replicates(10, process_index=1, process_count=3)
        slice(4, 7, None)
    """
    for name, v in (
        ("num_replicates", num_replicates),
        ("process_index", process_index),
        ("process_count", process_count),
    ):
        if v is not None and not (isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))):
            raise TypeError(f"{name} must be an integer, got {v!r}")  # 2.7 and "3" were truncated / accepted
    i = jax.process_index() if process_index is None else int(process_index)
    n = jax.process_count() if process_count is None else int(process_count)
    if n < 1:
        raise ValueError(f"process_count must be >= 1, got {n}")
    if not 0 <= i < n:
        raise ValueError(f"process_index must lie in [0, {n}), got {i}")
    R = int(num_replicates)
    if R < 1:
        raise ValueError(f"num_replicates must be >= 1, got {R}")
    base, extra = divmod(R, n)
    start = i * base + min(i, extra)
    return slice(start, start + base + (i < extra))


def aggregate_ebh_across_processes(W_local, fdr, *, num_replicates: int, alpha_kn=None, plus: bool = True):
    r""":func:`jaxknock.aggregate_ebh` when each process holds some replicates.

    Each process passes the ``(R_i, p)`` statistics of its replicates (e.g.
    those of :func:`process_replicates`); the per-process sums of knockoff
    e-values :math:`\sum_{r \in \text{process}} e^{(r)}` (``p`` numbers) are
    all-gathered (``jax.experimental.multihost_utils.process_allgather``) and
    summed, and every process applies e-BH at ``fdr`` to
    :math:`\bar e = \frac1R \sum_r e^{(r)}`, with the knockoff e-values of
    replicate ``r``
    :math:`e^{(r)}_j = p\,\mathbb{1}\{W^{(r)}_j \ge T_r\} / (1 + \#\{k : W^{(r)}_k \le -T_r\})`,
    ``T_r`` its knockoff(+) threshold at ``alpha_kn``
    (:func:`jaxknock.knockoff_evalues`). Equals ``aggregate_ebh`` on the
    stacked ``(R, p)`` statistics (up to the order of the sum). In a
    single-process run this is the local computation.

    Args:
        W_local: ``(R_i, p)`` statistics of this process's replicates (may be empty, ``R_i = 0``).
        fdr: target FDR; ``alpha_kn``: per-replicate level (default ``fdr / 2``).
        num_replicates: ``R``, the total over all processes (checked).
        plus: knockoff+ thresholds ``T_r`` (``False``: the knockoff threshold,
            without the ``1 +`` in its FDP estimate).

    Returns:
        ``(p,)`` boolean mask, the same on every process.

    Example (one process, so it holds all ``R`` replicates):
        >>> W = jnp.array([[5.0, 4.0, 3.0, 2.0, -1.0], [6.0, 1.0, 2.0, 3.0, -1.0]])
        >>> mine = process_replicates(2)  # slice(0, 2): every replicate
        >>> aggregate_ebh_across_processes(W[mine], 0.8, num_replicates=2, alpha_kn=0.5).tolist()
        [True, True, True, True, False]
        >>> from jaxknock import aggregate_ebh
        >>> bool(np.array_equal(aggregate_ebh_across_processes(W, 0.8, num_replicates=2, alpha_kn=0.5),
        ...                     aggregate_ebh(W, 0.8, alpha_kn=0.5)))
        True
    """
    # before any work (and before the all-gather, so every process raises alike): 2.7 was truncated to 2
    # and "2" parsed, and 0 reached e-BH as 0 / 0 ("evalues contains NaN"), as in process_replicates
    if isinstance(num_replicates, (bool, np.bool_)) or not isinstance(num_replicates, (int, np.integer)):
        raise TypeError(f"num_replicates must be an integer, got {num_replicates!r}")
    if num_replicates < 1:
        raise ValueError(f"num_replicates must be >= 1, got {num_replicates}")
    _checks.check_fdr(fdr)
    alpha = fdr / 2 if alpha_kn is None else alpha_kn
    _checks.check_fdr(alpha, "alpha_kn")
    W_local = jnp.asarray(W_local)
    if W_local.ndim != 2:
        raise ValueError(f"W_local must have shape (R_i, p), got {tuple(W_local.shape)}")
    if W_local.shape[0]:
        W_local = _checks.check_replicates(W_local, "W_local")
        e_sum = jnp.sum(knockoff_evalues(W_local, alpha, plus=plus), axis=0)
    else:
        e_sum = jnp.zeros(
            W_local.shape[1], W_local.dtype if jnp.issubdtype(W_local.dtype, jnp.floating) else jnp.result_type(float)
        )
    count = np.asarray([W_local.shape[0]])
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        e_all = multihost_utils.process_allgather(np.asarray(e_sum))
        count = multihost_utils.process_allgather(count)
        e_sum = jnp.asarray(np.sum(np.asarray(e_all), axis=0))
    total = int(np.sum(count))
    if total != int(num_replicates):
        raise ValueError(f"the processes hold {total} replicates in all, but num_replicates = {num_replicates}")
    return ebh(e_sum / total, fdr)
