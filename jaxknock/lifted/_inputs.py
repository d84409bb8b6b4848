"""Input checks of the lifted entry points (private to the package).

Shapes, dtypes, labels and hyper-parameter values are checked on concrete
inputs before tracing, with messages that name the argument.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock._checks import as_float_array, check_finite, check_ndim, is_concrete, poison
from jaxknock._containers import host_numeric
from jaxknock.lifted.spec import LiftedHyper, LiftedSpec

__all__ = ["check_hyper_values", "check_params", "poison_step", "prepare_xy"]


def prepare_xy(X, y, spec: LiftedSpec, xname="X", yname="y"):
    """``(X, Y, labels)``: float inputs, the ``N x p`` target / one-hot matrix, integer labels or ``None``."""
    X = as_float_array(X, xname, bools=True)
    check_ndim(X, 2, xname, "a 2-D (samples x features) array")
    N, p0 = X.shape
    if N == 0:  # was a ZeroDivisionError in the batch arithmetic
        raise ValueError(f"{xname} has no rows: there is nothing to train on")
    if p0 != spec.sizes[0]:
        raise ValueError(
            f"spec.sizes[0] = {spec.sizes[0]} but {xname} has {p0} features per row "
            f"(shape {tuple(X.shape)}); the first layer size must equal the input dimension"
        )
    check_finite(X, xname)
    p = spec.sizes[-1]
    y = host_numeric(y, yname)  # a masked label was read as its fill value; pandas Int64 was a TypeError
    if not hasattr(y, "dtype"):
        y = np.asarray(y)
    if y.ndim == 1:
        if not jnp.issubdtype(y.dtype, jnp.integer):
            raise TypeError(
                f"{yname} must hold integer class labels (1-D) or be a 2-D target matrix, got 1-D dtype {y.dtype}"
            )
        if y.shape[0] != N:
            raise ValueError(f"{yname} has {y.shape[0]} labels but {xname} has {N} rows")
        if is_concrete(y) and N:
            lo, hi = int(np.min(np.asarray(y))), int(np.max(np.asarray(y)))
            if lo < 0 or hi >= p:
                raise ValueError(
                    f"{yname} labels must lie in [0, {p}) (spec.sizes[-1] = {p} classes), got labels in [{lo}, {hi}]"
                )
        labels = jnp.asarray(y, jnp.int32)
        Y = jax.nn.one_hot(labels, p, dtype=X.dtype)
        return X, Y, labels
    if y.ndim != 2:
        raise ValueError(f"{yname} must be 1-D labels or a 2-D (N, {p}) target matrix, got shape {tuple(y.shape)}")
    Y = as_float_array(y, yname).astype(X.dtype)
    if Y.shape != (N, p):
        raise ValueError(
            f"{yname} must have shape ({N}, {p}) to match {xname} and spec.sizes[-1], got {tuple(Y.shape)}"
        )
    check_finite(Y, yname)
    if spec.loss == "cross_entropy":
        if is_concrete(Y):
            a = np.asarray(Y)
            if np.any(a < 0) or np.max(np.abs(a.sum(1) - 1)) > 1e-4:
                raise ValueError(
                    f"for cross_entropy the rows of {yname} must be probability "
                    "vectors (non-negative, summing to 1); pass integer labels instead"
                )
        return X, Y, jnp.argmax(Y, axis=-1).astype(jnp.int32)
    return X, Y, None


def check_hyper_values(hyper: LiftedHyper, batched: bool):
    """Concrete ``lam > 0``, ``rho, gamma >= 0`` (``gamma > 0`` for batched training)."""
    if not all(is_concrete(h) for h in hyper):
        return
    lam, rho, gamma = (np.asarray(h) for h in hyper)
    if not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(f"lam must be positive and finite, got {lam}")
    if not np.all(np.isfinite(rho)) or np.any(rho < 0):
        raise ValueError(f"rho must be non-negative and finite, got {rho}")
    if not np.all(np.isfinite(gamma)) or np.any(gamma < 0):
        raise ValueError(f"gamma must be non-negative and finite, got {gamma}")
    if batched and np.any(gamma <= 0):
        raise ValueError(
            "batched training (Algorithm 2) needs gamma > 0 for every layer: the proximal "
            f"term gamma ||Theta - Theta0||^2 keeps each batch's W-steps well posed; got {gamma}"
        )


def hyper_ok(hyper: LiftedHyper, batched: bool):
    """Traced twin of :func:`check_hyper_values`: one flag, true when every value is admissible."""
    lam, rho, gamma = (jnp.asarray(h) for h in hyper)
    ok = jnp.all(jnp.isfinite(lam) & (lam > 0)) & jnp.all(jnp.isfinite(rho) & (rho >= 0))
    return ok & jnp.all(jnp.isfinite(gamma) & ((gamma > 0) if batched else (gamma >= 0)))


def poison_step(out, hyper: LiftedHyper, X, Y, *, batched: bool):
    """``out`` (a step's result pytree) with every float leaf NaN unless ``hyper``, ``X`` and ``Y`` are admissible.

    The jit-side twin of :func:`check_hyper_values` and ``check_finite``: the
    safeguarded block solves reject a NaN or unbounded block and keep the old
    one, so a negative ``lam`` / ``rho`` / ``gamma`` or a NaN in ``X`` returned
    finite weights (a plausible answer). Skipped when everything is concrete
    (those values were checked before the step).
    """
    if all(is_concrete(a) for a in (*hyper, X, Y)):
        return out
    ok = hyper_ok(hyper, batched) & jnp.all(jnp.isfinite(X)) & jnp.all(jnp.isfinite(Y))
    return jax.tree_util.tree_map(lambda a: poison(ok, a), out)


def check_params(params, spec: LiftedSpec, dtype):
    """MLP params of the shapes ``spec`` implies, cast to ``dtype``."""
    if len(params) != spec.num_layers:
        raise ValueError(f"init has {len(params)} layers but spec.sizes implies {spec.num_layers}")
    out = []
    for l, layer in enumerate(params):
        w, b = jnp.asarray(layer["w"], dtype), jnp.asarray(layer["b"], dtype)
        want = (spec.sizes[l], spec.sizes[l + 1])
        if w.shape != want or b.shape != (want[1],):
            raise ValueError(
                f"init layer {l}: expected w {want} and b ({want[1]},), got {tuple(w.shape)} and {tuple(b.shape)}"
            )
        out.append({"w": w, "b": b})
    return out
