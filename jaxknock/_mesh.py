"""Device meshes for the batched entry points (shared by sampling, pipeline, lifted and distributed).

A call that takes ``devices=`` / ``mesh=`` resolves them here: :func:`wants_sharding`
says whether the call leaves the plain single-device path, :func:`resolve_mesh`
builds or checks the 1-D mesh. ``jaxknock.distributed.device_mesh`` is the public name.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

__all__ = ["device_mesh", "resolve_mesh", "shard_map", "wants_sharding"]

try:  # jax >= 0.6
    shard_map = jax.shard_map
except AttributeError:  # pragma: no cover - older jax
    from jax.experimental.shard_map import shard_map as _oldshard_map

    def shard_map(f, *, mesh, in_specs, out_specs, check_vma=False):
        return _oldshard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=check_vma)


# --------------------------------------------------------------------------
# Meshes
# --------------------------------------------------------------------------


def device_mesh(devices=None, *, axis_name: str = "batch") -> Mesh:
    """A 1-D mesh over ``devices``.

    Args:
        devices: ``None`` for all devices (``jax.devices()``: the local devices
            of a single-process run, every process's devices after
            ``jax.distributed.initialize``); an int ``d`` for the first ``d`` of
            them; or a sequence of :class:`jax.Device`.
        axis_name: name of the mesh axis.

    Example:
        >>> dict(device_mesh(1).shape)
        {'batch': 1}
    """
    if not isinstance(axis_name, str) or not axis_name:
        raise TypeError(f"axis_name must be a non-empty string, got {axis_name!r}")
    every = jax.devices()
    if devices is None:
        devs = every
    elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= len(every):
            raise ValueError(
                f"devices = {int(devices)} but {len(every)} device(s) are available "
                f"({every[0].platform}); on CPU simulate more with "
                "XLA_FLAGS=--xla_force_host_platform_device_count=N set before jax starts"
            )
        devs = every[: int(devices)]
    else:
        try:
            devs = list(devices)
        except TypeError:
            raise TypeError(
                f"devices must be None, an int or a sequence of jax devices, got {type(devices).__name__}"
            ) from None
        if not devs or not all(isinstance(d, jax.Device) for d in devs):
            raise TypeError("devices must be a non-empty sequence of jax.Device (e.g. jax.devices()[:4])")
        if len({d.id for d in devs}) != len(devs):
            raise ValueError("devices contains the same device twice")
    return Mesh(np.asarray(devs, dtype=object), (axis_name,))


def resolve_mesh(devices, mesh, axis_name) -> Mesh:
    """The mesh of a call; ``axis_name=None`` accepts any mesh and uses its first axis."""
    if mesh is None:
        return device_mesh(devices, axis_name=axis_name or "batch")
    if devices is not None:
        raise ValueError("pass devices= or mesh=, not both")
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if axis_name is not None and axis_name not in mesh.axis_names:
        raise ValueError(f"mesh has axes {mesh.axis_names}, none named axis_name = {axis_name!r}")
    return mesh


def wants_sharding(devices, mesh) -> bool:
    """True unless the call resolves to the plain single-device path."""
    if mesh is not None:
        return True
    if devices is None:
        return len(jax.devices()) > 1
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        return int(devices) > 1 or int(devices) < 1  # < 1: let device_mesh word the error
    return True
