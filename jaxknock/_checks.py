"""Input validation shared by the public functions: the one home of every shared validator.

Shape / dtype / configuration checks run on static information and therefore
work on traced inputs too. Value checks (NaN, PSD, ...) need concrete arrays;
they are skipped for tracers (inside ``jit``), where solvers report problems
through their ``RESULTS`` code instead.

Sections: arrays (dtype, shape, finiteness), covariance matrices (``Sigma``),
settings (choices, FDR levels), responses, and feature statistics ``W``. The
S-vector solvers' ``Sigma`` validation and traced input codes are in
:mod:`jaxknock._sigma_checks`.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import zipfile

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _backend
from jaxknock._containers import host_numeric, object_numbers_as_float
from jaxknock._solution import RESULTS

_TRUSTED = contextvars.ContextVar("jaxknock_trusted_values", default=False)


@contextlib.contextmanager
def trusted_values(enabled: bool = True):
    """Within (when ``enabled``): the *value* checks of arrays the library produced itself are skipped.

    For the pipeline's internal hand-offs (the covariance it estimated from a
    validated ``X``, the ``s`` a solver certified, the knockoffs it sampled):
    re-checking them costs a compiled program each on a process's first call
    (Cholesky, reductions) and cannot fail. Shape, dtype and setting checks
    still run, and the solvers still report through their ``RESULTS`` codes.
    Never used around a user's arrays.
    """
    token = _TRUSTED.set(bool(enabled))
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def values_trusted() -> bool:
    """True inside :func:`trusted_values`."""
    return _TRUSTED.get()


def is_concrete(x) -> bool:
    """True if ``x`` holds values (not a tracer inside jit/vmap/grad)."""
    return not isinstance(x, jax.core.Tracer)


def host_flags(fn, *args):
    """``jax.device_get(fn(*args))`` for concrete ``args``: a few flags of a device reduction, brought back now.

    Also inside a caller's trace: a ``jit`` that closes over the arrays hands them in as values, but a call
    of the jitted ``fn`` there is staged into the caller's program and its flags are tracers (``sdp(Sigma)``
    in ``jax.jit(lambda t: sdp(Sigma, tol=t))`` raised a ``TracerArrayConversionError``), so there the call
    is repeated under :func:`jax.ensure_compile_time_eval`. Only there: at the top level that mode ran the
    constants inside ``fn`` (``eye`` masks, ``iota``) as eager operations, about twenty compiled programs
    more in a fresh process's first ``sdp`` / ``mvr`` call.
    """
    out = fn(*args)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(out)):
        with jax.ensure_compile_time_eval():
            out = fn(*args)
    return jax.device_get(out)


def call_scalar(v, dtype):
    """``v`` as a ``dtype`` scalar argument: a numpy one when concrete (it goes in with the call, no program)."""
    return np.asarray(v, dtype) if is_concrete(v) else jnp.asarray(v, dtype)


def require_eager(fn: str, why: str, hint: str, **arrays):
    """Raise a ``TypeError`` naming ``fn`` and the first traced entry of ``arrays``.

    For the host-level drivers (``knockoff_filter``, ``stability_selection``,
    ``randsel``, ``greedy_kta_selection``, ``fit_lifted``, ``tune_lifted``): they read values on the host
    (``why``) between jitted stages, so they cannot run inside ``jax.jit`` /
    ``jax.vmap`` / ``jax.grad``. Called first, before any work, so a traced call
    fails with this message instead of JAX's generic tracer error; ``hint``
    names the jittable pieces to use there instead.

    Example:
        >>> require_eager("f", "it picks a size from the data", "use g", x=jnp.ones(2))  # concrete: no error
    """
    for name, a in arrays.items():
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(a)):
            raise TypeError(
                f"jaxknock.{fn} runs eagerly ({why}), but `{name}` is traced (inside jax.jit, jax.vmap or "
                f"jax.grad): call {fn} outside the transformation (its computations are jitted inside); {hint}"
            )


def is_sparse(x) -> bool:
    """A scipy.sparse matrix or array (duck-typed: ``tocsr`` and ``nnz``; scipy is not imported)."""
    return hasattr(x, "tocsr") and hasattr(x, "nnz")


def as_float_array(x, name: str, *, bools: bool = False):
    """Convert to a JAX floating array (ints are promoted to the default float, half precision to float32).

    ``bools=True`` for a data array (a design ``X``, a 0/1 genotype or indicator matrix): bools are its 0/1
    in the default float, as scikit-learn's ``check_array``. Elsewhere (``Sigma``, ``s``, statistics ``W``,
    p- and e-values) a bool array is a mask passed by mistake and is refused. Text, object, complex and
    other non-numeric arrays (and ``None``) raise a ``TypeError`` naming ``name`` instead of JAX's staging error.
    """
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__}")
    if is_sparse(x):  # has a dtype, and failed in numpy with "setting an array element with a sequence"
        raise TypeError(
            f"{name} is a scipy.sparse {type(x).__name__}, and this function needs a dense array: pass "
            f"{name}.toarray() (the naive Bayes functions and estimators take sparse input as it is)"
        )
    x = host_numeric(x, name)
    if not hasattr(x, "dtype"):
        try:
            x = np.asarray(x)
        except ValueError as err:  # ragged nested lists
            raise TypeError(f"{name} must be a numeric array: {err}") from None
    x = object_numbers_as_float(x, bools=bools)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        raise TypeError(f"{name} must be a numeric array, got a jax.random key: check the order of the arguments")
    if np.dtype(x.dtype).kind in "USOVM":
        raise TypeError(f"{name} must be a numeric array, got dtype {x.dtype}")
    if hasattr(x, "dtype") and not jnp.issubdtype(x.dtype, jnp.floating):
        if jnp.issubdtype(x.dtype, jnp.complexfloating) or (x.dtype == bool and not bools):
            raise TypeError(f"{name} must be a real floating array, got dtype {x.dtype}")
        x = jnp.asarray(x, dtype=jnp.result_type(float))
    elif np.dtype(x.dtype).itemsize < 4:  # float16 / bfloat16: exact in float32, which every solver supports
        x = jnp.asarray(x, dtype=jnp.float32)
    # a host array is copied to the device as it is: jnp.asarray compiles a copy program per
    # new shape (10-30 ms of a fresh process's first call), device_put does not
    return jax.device_put(x) if isinstance(x, np.ndarray) else jnp.asarray(x)


def require_x64(x, name: str, why: str, given=None):
    """Raise if ``x`` is not float64 (the algorithm needs double precision).

    ``given``: the dtype the caller passed, before the conversion to a JAX array. A float64 NumPy array is
    held as float32 while ``jax_enable_x64`` is off; the message then says so instead of blaming the input.
    """
    if x.dtype != jnp.float64:
        hint = (
            "call jax.config.update('jax_enable_x64', True) before creating arrays"
            if not jax.config.jax_enable_x64
            else f"pass {name} as float64 (e.g. jnp.asarray({name}, jnp.float64))"
        )
        if given is not None and np.dtype(given) == np.float64:
            raise TypeError(
                f"{name} was given as float64, which JAX holds as {x.dtype} while jax_enable_x64 is off; "
                f"{why} needs float64: {hint}."
            )
        raise TypeError(f"{name} has dtype {x.dtype}, but {why} needs float64: {hint}.")


def check_ndim(x, ndim: int, name: str, what: str = ""):
    if x.ndim != ndim:
        desc = what or f"a {ndim}-D array"
        raise ValueError(f"{name} must be {desc}, got shape {tuple(x.shape)}")


def check_square(S, name: str = "Sigma", *, batch: bool = False):
    """Check that ``S`` is (a batch of) non-empty square matrices."""
    if S.ndim < 2 or (S.ndim != 2 and not batch):
        raise ValueError(f"{name} must be a square 2-D matrix, got shape {tuple(S.shape)}")
    if S.shape[-1] != S.shape[-2]:
        raise ValueError(f"{name} must be square, got shape {tuple(S.shape)}")
    check_nonempty(S, name)


def check_nonempty(x, name: str):
    """Raise a message naming ``name`` for an array with a zero-length axis (not numpy's "zero-size array")."""
    shape = tuple(getattr(x, "shape", np.shape(x)))
    if 0 in shape:
        raise ValueError(f"{name} is empty (shape {shape}): it needs at least one entry along every axis")


def poison(ok, *arrays):
    """``arrays`` where the traced flag ``ok`` holds, else all NaN (the jit-side twin of a ValueError).

    ``ok`` broadcasts against each array (a scalar, or one flag per batch member
    with trailing axes added); non-floating arrays are returned unchanged.
    """
    out = []
    for a in arrays:
        a = jnp.asarray(a)
        if jnp.issubdtype(a.dtype, jnp.inexact):
            flag = jnp.reshape(ok, jnp.shape(ok) + (1,) * (a.ndim - jnp.ndim(ok)))
            a = jnp.where(flag, a, jnp.nan)
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


def is_int(v) -> bool:
    """A Python, NumPy or concrete 0-d JAX integer, not a bool (``True`` is an ``int`` to Python).

    A traced integer (inside ``jax.jit``) is not one: a count that sizes arrays must be known on the host.

    Example:
        >>> is_int(3), is_int(np.int64(3)), is_int(jnp.int32(3)), is_int(True), is_int(3.0)
        (True, True, True, False, False)
    """
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, np.integer)):
        return True
    return (
        isinstance(v, (np.ndarray, jax.Array))
        and is_concrete(v)
        and v.ndim == 0
        and np.issubdtype(np.dtype(v.dtype), np.integer)
    )


def int_setting(v, name: str | None = None):
    """A concrete 0-d NumPy / JAX integer (not a bool) as a Python ``int``; anything else unchanged.

    For host-side counts (``num_subsamples``, ``chunk_size``, ``max_steps``, ...) checked with
    ``isinstance`` and used as Python integers or static arguments: ``jnp.int32(50)`` was refused as
    not a "positive integer" while ``np.int32(50)`` was accepted. With ``name``, a traced value raises
    :func:`refuse_traced`'s ``TypeError``. Values the caller must still reject (bools, floats, text,
    arrays) come back as they are, for its own message.

    Example:
        >>> int_setting(jnp.int32(5)), int_setting(np.array(5)), int_setting(True), int_setting(2.0)
        (5, 5, True, 2.0)
    """
    if name is not None:
        refuse_traced(v, name, "a concrete Python, NumPy or JAX integer", " (it sets a size or a loop count)")
    return int(v) if is_int(v) else v


def check_count(v, name: str, minimum: int = 1) -> int:
    """A count setting (``epochs``, ``passes``, ...): a Python, NumPy or concrete JAX integer ``>= minimum``.

    Returned as an ``int``. ``int(v)`` truncated ``2.5`` to 2, parsed ``"3"`` and took ``True`` as 1; they
    raise a ``ValueError`` naming ``name`` instead, and a traced value :func:`refuse_traced`'s ``TypeError``.

    Example:
        >>> check_count(jnp.int32(3), "epochs")
        3
    """
    v = int_setting(v, name)
    if not (is_int(v) and v >= minimum):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def check_real(v, name: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    """A real setting (a tolerance, a weight): a finite Python, NumPy or concrete 0-d JAX number ``>= minimum``
    (``> minimum`` when ``strict``), returned as a ``float``; text, ``None`` and bools raise a ``TypeError``,
    a traced value :func:`refuse_traced`'s.

    Example:
        >>> check_real(np.float32(0.5), "tol", strict=True)
        0.5
    """
    refuse_traced(v, name, "a concrete number")
    v = real_setting(v)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {v!r} ({type(v).__name__})")
    v = float(v)
    if not (np.isfinite(v) and (v > minimum if strict else v >= minimum)):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {minimum:g}, got {v!r}")
    return v


def refuse_traced(x, name: str, what: str, why: str = "") -> None:
    """A ``TypeError`` when the host-side setting ``x`` is a value traced by ``jax.jit`` (it must be ``what``)."""
    if isinstance(x, jax.core.Tracer):
        raise TypeError(f"{name} must be {what}, not a value traced by jax.jit{why}")


def static_flag(x, name: str) -> bool:
    """A switch that selects the program (``plus``, ``fit_intercept``, ...) as a Python ``bool``.

    Under ``jax.jit`` every argument is traced unless named static, and ``bool()`` of a traced flag was
    JAX's TracerBoolConversionError (or "Non-hashable static arguments") naming nothing. ``None``
    and text are refused too (``bool("no")`` is ``True``).

    Example:
        >>> static_flag(np.True_, "plus"), static_flag(0, "plus")
        (True, False)
    """
    if isinstance(x, jax.core.Tracer):
        raise TypeError(
            f"{name} must be a Python bool, not a traced value: it selects the computation. Under jax.jit, "
            f"pass it in static_argnames=({name!r},) or close over it (jax.jit(lambda ...: f(..., {name}=True)))"
        )
    if x is None or isinstance(x, (str, bytes)):  # "no" and "False" are truthy: never guess
        raise TypeError(f"{name} must be True or False, got {x!r}")
    return bool(x)


def real_setting(x):
    """A concrete real 0-d NumPy / JAX array (not a bool) as a Python ``float``; anything else unchanged.

    For host-side settings (``fraction``, ``threshold``, ``drop``, ...) checked with ``isinstance`` and
    ``<``: a JAX scalar such as ``jnp.float32(0.5)`` was refused as out of range. Values the caller must
    still reject (bools, text, arrays, tracers) come back as they are, for its own message.
    """
    if isinstance(x, (bool, np.bool_)) or not hasattr(x, "dtype") or not is_concrete(x) or np.ndim(x) != 0:
        return x
    return float(x) if np.dtype(x.dtype).kind in "iuf" else x


def traced_float(x):
    """A concrete real scalar setting as a Python ``float`` for a traced argument; anything else unchanged.

    A jitted program's cache key holds each argument's type: ``tol=1e-5`` (a weakly typed Python float),
    ``np.float64(1e-5)`` (a strong float64), ``jnp.float32(1e-5)`` and ``lam0=1`` (an integer) were four
    programs for one solver. As a Python ``float`` every concrete value shares the program of the default.
    Call it after the type checks; tracers, bools, text and arrays come back as they are.

    Example:
        >>> traced_float(np.float64(0.5)), traced_float(jnp.int32(3)), traced_float(True)
        (0.5, 3.0, True)
    """
    x = real_setting(x)  # a concrete real 0-d NumPy / JAX array: a Python float
    return float(x) if isinstance(x, int) and not isinstance(x, bool) else x


def check_positive_scalar(x, name: str, *, what: str = "a positive, finite number"):
    """A real, finite scalar ``> 0``: raises naming ``name`` if concrete; returns the traced flag for :func:`poison`.

    A concrete ``x`` that passes gives NumPy's ``True``: the flag computed on the device was a few eager
    programs per scalar type (``np.float64(2.0)``, ``jnp.float32``, an ``int``) in a warm call.
    """
    if isinstance(x, (str, bytes, bool, np.bool_)) or (
        hasattr(x, "dtype") and not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer))
    ):
        raise TypeError(f"{name} must be {what}, got {x!r} ({type(x).__name__})")
    if is_concrete(x):
        a = np.asarray(x)
        if a.ndim != 0:
            raise ValueError(f"{name} must be a scalar, got shape {a.shape}")
        if not (np.isfinite(a) and a > 0):
            raise ValueError(f"{name} must be {what}, got {a.item()!r}")
        return np.True_
    x = jnp.asarray(x)
    return jnp.isfinite(x) & (x > 0)


def check_variances(Sigma, name: str = "Sigma"):
    """The diagonal of a (batch of) covariance matrices: positive and finite.

    Raises naming ``name`` when concrete; returns the traced flag (one per
    matrix) for :func:`poison` under ``jit``.
    """
    if values_trusted() and is_concrete(Sigma):
        return np.ones(Sigma.shape[:-2], bool)
    d = _diagonal(Sigma)
    if is_concrete(d):
        dv = np.asarray(d)
        bad = ~(np.isfinite(dv) & (dv > 0))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{name} must have positive, finite variances on its diagonal; {int(bad.sum())} entr(ies) are not "
                f"(first: diagonal index {idx}, value {dv[idx]!r}); drop constant variables first"
            )
        return np.ones(dv.shape[:-1], bool)
    return jnp.all(jnp.isfinite(d) & (d > 0), axis=-1)


@jax.jit
def _diagonal(Sigma):
    return jnp.diagonal(Sigma, axis1=-2, axis2=-1)


def _host_copy(x):
    """``x`` on the host, explicitly allowed (an error is being worded from it)."""
    with jax.transfer_guard("allow"):
        return np.asarray(x)


def check_finite(x, name: str):
    """Raise a ``ValueError`` naming ``name`` if a concrete ``x`` holds NaN or Inf (a no-op on tracers).

    Scanned on the host when that copies nothing (:func:`jaxknock._backend.reads_in_place`), else one
    device reduction and a flag.
    """
    if not is_concrete(x):
        return
    if not _backend.reads_in_place(x):
        if bool(host_flags(_all_finite, x)):
            return
        x = _host_copy(x)
    bad = ~np.isfinite(np.asarray(x))
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} contains {int(bad.sum())} non-finite value(s) (NaN or Inf), first at index {idx}")


def check_no_constant_columns(x, name: str = "X"):
    """Raise if a concrete ``(n, p)`` ``x`` has a column whose values are all equal.

    Exact (``max == min``), not ``std == 0``: a column of 0.1s at n = 600 has a
    computed standard deviation of 6.9e-17 (its mean rounds), and standardising
    would divide by it.
    """
    if is_concrete(x):
        if not _backend.reads_in_place(x):
            if not bool(host_flags(_any_constant_column, x)):
                return
            x = _host_copy(x)
        a = np.asarray(x)
        const = a.max(axis=0) == a.min(axis=0)
        if const.any():
            raise ValueError(
                f"{name} has {int(const.sum())} constant column(s) (first: "
                f"{np.flatnonzero(const)[:5].tolist()}); drop them first"
            )


def check_symmetric(S, name: str = "Sigma", *, rtol: float = 1e-8):
    if is_concrete(S):
        if _backend.reads_in_place(S):
            a = np.asarray(S)
            asym, scale = np.max(np.abs(a - np.swapaxes(a, -1, -2))), np.max(np.abs(a))
        else:
            asym, scale = host_flags(_asymmetry_and_scale, S)
        scale = max(scale, 1e-300)
        if asym > rtol * scale:
            raise ValueError(
                f"{name} must be symmetric: max |{name} - {name}^T| = {asym:.3g}; "
                f"symmetrise with ({name} + {name}.T) / 2 if this is rounding"
            )


def check_positive_definite(S, name: str = "Sigma"):
    """Raise if (any matrix of) ``S`` is not numerically positive definite."""
    if not is_concrete(S):
        return
    a = np.asarray(S, dtype=np.float64)
    eig_min = np.linalg.eigvalsh(a)[..., 0]
    bad = np.atleast_1d(eig_min <= 0)
    if bad.any():
        worst = float(np.min(eig_min))
        raise ValueError(
            f"{name} is not positive definite (smallest eigenvalue {worst:.3g}); "
            "estimate it with jaxknock.ledoit_wolf(X), which is always positive "
            "definite, or add a small ridge to the diagonal"
        )


def check_unit_diagonal(S, name: str = "Sigma", *, atol: float = 1e-6):
    if is_concrete(S):
        d = np.diagonal(np.asarray(S), axis1=-2, axis2=-1)
        dev = np.max(np.abs(d - 1.0))
        if dev > atol:
            raise ValueError(
                f"{name} must be a correlation matrix (unit diagonal), but its "
                f"diagonal deviates from 1 by up to {dev:.3g}; convert it with "
                f"jaxknock.to_correlation({name}) and rescale s by diag({name}) "
                "(s_cov = s_corr * diag(Sigma))"
            )


def check_in_open_interval(value, lo, hi, name: str):
    if not (lo < value < hi):
        raise ValueError(f"{name} must lie in ({lo}, {hi}), got {value}")


@jax.jit
def combine_codes(input_code, solver_code) -> jax.Array:
    """The input's code where it is not ``successful`` (bad input explains everything after it), else the solver's."""
    return jnp.where(input_code != RESULTS.successful, input_code, solver_code).astype(jnp.int32)


def check_vector_nonnegative_finite(x, name: str):
    """Raise if a concrete vector ``x`` has non-finite or negative entries (device reduction, two scalars back)."""
    if not is_concrete(x):
        return
    finite, lo = host_flags(_vector_flags, x)
    if not finite:
        check_finite(x, name)
    if not (lo >= 0):
        check_nonnegative(x, name)


@jax.jit
def _vector_flags(x):
    return jnp.all(jnp.isfinite(x)), jnp.min(x, initial=jnp.inf)


def check_nonnegative(x, name: str):
    """Raise if a concrete ``x`` has negative entries (e.g. an S-vector ``s``)."""
    if not is_concrete(x):
        return
    v = np.asarray(x)
    if np.any(v < 0):
        j = int(np.argmin(v))
        raise ValueError(
            f"{name} must be non-negative, but {int(np.sum(v < 0))} entries are negative ({name}[{j}] = {v[j]:.3g})"
        )


# --------------------------------------------------------------------------
# Settings, keys, responses and feature statistics
# --------------------------------------------------------------------------


def check_key(key):
    """A single ``jax.random`` key (typed, or a raw ``uint32`` key of shape ``(2,)``); batches are refused."""
    if not hasattr(key, "dtype"):
        raise TypeError(f"key must be a jax.random key (jax.random.key(seed)), got {type(key)}")
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.ndim != 0:
            raise ValueError(
                f"key must be a single key, got a batch of shape {tuple(key.shape)}; draw "
                "many replicates with jax.vmap over jax.random.split(key, R) or with "
                "jaxknock.sample_replicates"
            )
    elif key.dtype == jnp.uint32:
        if key.ndim != 1:
            raise ValueError(
                f"key must be a single raw key of shape (2,), got shape {tuple(key.shape)}; "
                "draw many replicates with jaxknock.sample_replicates"
            )
    else:
        raise TypeError(f"key must be a jax.random key (jax.random.key(seed)), got dtype {key.dtype}")


def as_int_tuple(values, name: str) -> tuple:
    """A sequence of integers as a tuple of ``int``: integral floats pass, ``8.5`` or ``True`` raise naming ``name``.

    ``int(8.5)`` would silently truncate a width or a count; this refuses it.
    """
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {values!r}") from None
    out = []
    for i, v in enumerate(items):
        if isinstance(v, (bool, np.bool_)) or isinstance(v, (str, bytes)):
            raise TypeError(f"{name}[{i}] must be an int, got {v!r}")
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name}[{i}] must be an int, got {v!r} ({type(v).__name__})") from None
        if not np.isfinite(f) or f != int(f):
            raise ValueError(f"{name}[{i}] must be a whole number, got {v!r} (it is not truncated silently)")
        out.append(int(f))
    return tuple(out)


def check_choice(value, choices, name: str):
    """Raise unless ``value`` is one of ``choices`` (a configuration string)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def check_fdr(fdr, name: str = "fdr"):
    """A target level in ``(0, 1)``: a real scalar, checked when concrete (traced levels pass)."""
    if fdr is None or not (hasattr(fdr, "dtype") or isinstance(fdr, (int, float, str, bytes, bool, np.bool_))):
        raise TypeError(f"{name} must be a real number in (0, 1), got {fdr!r} ({type(fdr).__name__})")
    real = hasattr(fdr, "dtype") and (jnp.issubdtype(fdr.dtype, jnp.floating) or jnp.issubdtype(fdr.dtype, jnp.integer))
    if isinstance(fdr, (str, bytes, bool, np.bool_)) or (hasattr(fdr, "dtype") and not real):
        raise TypeError(f"{name} must be a real number in (0, 1), got {fdr!r} ({type(fdr).__name__})")
    if is_concrete(fdr):
        a = np.asarray(fdr)
        if a.ndim != 0:
            raise ValueError(f"{name} must be a scalar, got shape {a.shape}")
        if not np.isfinite(a) or not (0 < float(a) < 1):
            raise ValueError(f"{name} must lie in (0, 1), got {float(a)}")


def as_response(y, like_dtype, name: str = "y"):
    """A numeric response as a float array in ``like_dtype`` (booleans become 0/1), ``TypeError`` naming ``y`` else."""
    y = host_numeric(y, name)
    if hasattr(y, "dtype") and y.dtype == bool:
        y = y.astype(like_dtype)
    elif not hasattr(y, "dtype") and y is not None and not isinstance(y, (str, bytes)):
        a = np.asarray(y)
        y = a.astype(np.float64) if a.dtype == bool else a
    return as_float_array(y, name)


def response_shape_error(shape, n: int, name: str = "y") -> ValueError:
    """The error for a response of ``shape`` that is not ``(n,)``; a column ``(n, 1)`` is told to ravel."""
    shape = tuple(shape)
    hint = f" (a column: pass {name}.ravel())" if shape == (n, 1) else ""
    return ValueError(f"{name} must have shape ({n},) to match X's {n} rows, got {shape}{hint}")


def check_response(y, n: int, name: str = "y"):
    """``y`` as a JAX array of shape ``(n,)`` (one response or label per row of ``X``)."""
    y = jnp.asarray(y)
    if y.ndim != 1 or y.shape[0] != n:
        raise response_shape_error(y.shape, n, name)
    return y


def normalise_response(y, name: str = "y"):
    """A concrete response as ``(float64 array, binary)``: binary labels of any kind map to ``{0, 1}``.

    Two distinct values of any type (``{0, 1}``, ``{1, 2}``, ``{-1, 1}``,
    strings, booleans) are a binary response, mapped in sorted order to
    ``{0, 1}``. Non-numeric labels with more than two classes, and integer
    labels with 3 to 20 distinct values (class labels, not a measurement),
    are rejected: the knockoff statistics handle a continuous response or
    two classes. Pass ``y.astype(float)`` to fit integer values as a regression.
    """
    a = object_numbers_as_float(np.asarray(y))  # object floats were "40 distinct labels"
    try:
        labels = np.unique(a)
    except TypeError:  # e.g. None among numbers: values that cannot be ordered
        kinds = sorted({type(v).__name__ for v in a.ravel().tolist()})
        raise ValueError(f"{name} mixes values that cannot be compared ({', '.join(kinds)}); pass numbers") from None
    if labels.size < 2:
        raise ValueError(f"{name} is constant: there is nothing to select features for")
    if labels.size == 2:
        return (a == labels[1]).astype(np.float64), True
    if a.dtype.kind not in "iuf":
        raise ValueError(
            f"{name} has {labels.size} distinct labels ({', '.join(map(repr, labels[:5].tolist()))}"
            f"{', ...' if labels.size > 5 else ''}); knockoff_filter handles a continuous response or "
            "binary labels (two classes)"
        )
    if a.dtype.kind in "iu" and labels.size <= 20:
        raise ValueError(
            f"{name} holds {labels.size} distinct integers ({labels[:5].tolist()}...), which look like class "
            "labels; knockoff_filter handles a continuous response or two classes. To fit the integers as a "
            f"continuous response, pass {name}.astype(float)"
        )
    return a.astype(np.float64), False


def check_class_labels(y, name: str = "y") -> None:
    """Raise naming ``name`` if concrete labels look like a continuous target, not classes.

    A classifier fits one class per distinct value, so a measurement (``3.71``,
    ``0.02``, ...) would silently become hundreds of classes. Refused: NaN
    labels; numeric labels (or text labels that all parse as numbers) with a
    value that is not a whole number; more than ``max(20, n / 2)`` distinct
    values (fewer than two rows per class on average).
    """
    a = np.asarray(y)
    if a.size == 0:
        return
    num = None
    if a.dtype.kind == "f":
        num = a.astype(np.float64)
    elif a.dtype.kind in "US":
        try:
            num = a.astype(np.float64)
        except ValueError:
            num = None
    if num is not None:
        if np.isnan(num).any():
            raise ValueError(f"{name} contains NaN labels ({int(np.isnan(num).sum())}); drop those rows")
        frac = np.isfinite(num) & (num != np.round(num))
        if frac.any():
            raise ValueError(
                f"{name} looks like a continuous target: {int(frac.sum())} of its {a.size} values are not whole "
                f"numbers (e.g. {num[frac][0]!r}); a classifier needs class labels: bin the target first"
            )
    try:
        k = np.unique(a).size
    except TypeError:  # was NumPy's "'<' not supported between instances of 'str' and 'int'"
        kinds = sorted({type(v).__name__ for v in a.ravel().tolist()})
        raise ValueError(  # as encode_response: a ValueError naming the types
            f"{name} holds labels of types that cannot be ordered ({', '.join(kinds)}): use one type for "
            "every label (e.g. all strings)"
        ) from None
    if k > max(20, a.size // 2):
        raise ValueError(
            f"{name} looks like a continuous target: {k} distinct values in {a.size} rows (fewer than two rows "
            "per class); a classifier needs class labels: bin the target first, or pass classes=... explicitly"
        )


def check_statistics(W, name: str = "W"):
    """Feature statistics of shape ``(..., p)``, ``p >= 1``, as a float array without NaN."""
    W = as_float_array(W, name)
    if W.ndim < 1 or W.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (..., p) with p >= 1, got {W.shape}")
    if is_concrete(W) and np.isnan(np.asarray(W)).any():
        bad = np.argwhere(np.isnan(np.asarray(W)))[0]
        raise ValueError(
            f"{name} contains NaN (first at index {tuple(int(i) for i in bad)}); a failed "
            "statistic must not be silently thresholded"
        )
    return W


def check_replicates(W, name: str = "W"):
    """Statistics of ``R`` knockoff replicates: shape ``(R, p)``."""
    W = check_statistics(W, name)
    if W.ndim != 2:
        raise ValueError(f"{name} must hold one row of statistics per knockoff replicate, shape (R, p), got {W.shape}")
    return W


# --- l1 validators ---


def check_lam(lam, name: str = "lam"):
    """Penalties must be real numbers (``TypeError`` for text or booleans), positive and finite (concrete values)."""
    kind = lam.dtype.kind if hasattr(lam, "dtype") else np.asarray(lam).dtype.kind
    if isinstance(lam, (str, bytes, bool)) or kind not in "iuf":
        raise TypeError(f"{name} must be a real number (or array of numbers), got {lam!r}")
    if is_concrete(lam):
        a = np.asarray(jax.device_get(lam))  # explicit: one value per design
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name} must be positive and finite, got {a if a.ndim else float(a)}")


def traced_lam(lam):
    """``lam`` where it is positive, NaN elsewhere: the traced counterpart of :func:`check_lam`.

    Under ``jit`` a non-positive penalty cannot raise; as NaN it poisons the
    iterates and the solver reports ``nonfinite``, like a NaN penalty.
    """
    return jnp.where(lam > 0, lam, jnp.asarray(jnp.nan, lam.dtype))


def as_binary_labels(y, dtype):
    """Labels ``y > 0`` as 0/1 of ``dtype``; all NaN unless ``y`` is a valid two-class response.

    Under ``jit`` the values of ``y`` cannot be checked (:func:`check_model_response`
    raises on concrete ones); ``(y > 0)`` alone would turn labels ``{1, 2}`` into
    a single class, ``{0, 2}`` into ``{0, 1}`` and a NaN label into class 0, and
    give a plausible fit. Unless every label is in ``{0, 1}`` or every label is in
    ``{-1, 1}``, with both classes present, the labels become NaN instead and the
    solver's result code reports it (``nonfinite``).
    """
    if isinstance(y, jax.core.Tracer) or np.dtype(y.dtype) not in HOST_FLOATS:
        return _binary_labels(y, dtype, jnp)
    # concrete: decided on the host (n labels, explicit transfers), not by a dozen eager device programs
    return jax.device_put(_binary_labels(np.asarray(jax.device_get(y)), np.dtype(dtype), np))


# the float dtypes NumPy computes in as JAX does (not bfloat16): small host-side decisions use them
HOST_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _binary_labels(y, dtype, xp):
    """:func:`as_binary_labels` by NumPy or jax.numpy (``xp``)."""
    zero_one = xp.all((y == 0) | (y == 1))
    plus_minus = xp.all((y == -1) | (y == 1))
    both_classes = xp.any(y > 0) & xp.any(y <= 0)
    valid = (zero_one | plus_minus) & both_classes
    return xp.where(valid, (y > 0).astype(dtype), xp.asarray(xp.nan, dtype))


def check_model_response(y, *, loss: str, fit_intercept: bool):
    """Value checks on a concrete response of a lasso / l1-logistic model (no-op on tracers).

    ``loss="squared"`` with an intercept rejects a constant ``y``;
    ``loss="logistic"`` needs binary labels (``{0, 1}`` or ``{-1, 1}``) with both classes.
    """
    if not is_concrete(y):
        return
    yv = np.asarray(jax.device_get(y))  # explicit: the (n,) response, once per public call
    if loss == "squared":
        if fit_intercept and yv.size and np.ptp(yv) == 0:
            # (no value in the message: the l1 entry points may have taken y's mean out on the host already)
            raise ValueError(
                "y is constant (max(y) - min(y) = 0): with an intercept nothing is left to explain; "
                "every coefficient and every statistic would be zero"
            )
    else:
        labels = set(np.unique(yv).tolist())
        if not (labels <= {0.0, 1.0} or labels <= {-1.0, 1.0}):
            raise ValueError(
                f"y must hold binary labels in {{0, 1}} or {{-1, 1}} (logistic loss / a two-class statistic), "
                f"got values {sorted(labels)[:5]}"
            )
        if len(labels) < 2:
            raise ValueError(f"y holds a single class ({sorted(labels)[0]!r}); need both classes")


def check_num_knockoffs(num_knockoffs, name: str = "num_knockoffs") -> int:
    """``m``, the number of simultaneous knockoffs: a Python / NumPy integer ``>= 1`` (returned as ``int``)."""
    if not is_int(num_knockoffs):
        raise TypeError(f"{name} must be an integer >= 1, got {num_knockoffs!r} ({type(num_knockoffs).__name__})")
    if num_knockoffs < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {num_knockoffs}")
    return int(num_knockoffs)


# --- files ---


def check_npz_archive(path) -> None:
    """Raise ``ValueError`` naming ``path`` unless it is a readable ``.npz`` (a zip archive of ``.npy`` members).

    Only the zip directory is read (at the end of the file), never the arrays,
    so this is cheap on multi-GB shards. A missing file raises
    ``FileNotFoundError`` as usual.
    """
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as zf:
            members = zf.namelist()
    except zipfile.BadZipFile as err:
        raise ValueError(
            f"{path} is not a valid .npz file ({err}; a .npz is a zip archive of .npy arrays, "
            "written by numpy.savez or scipy.sparse.save_npz): the file is corrupt, truncated or another format"
        ) from None
    if not members or not all(m.endswith(".npy") for m in members):
        raise ValueError(
            f"{path} is not a valid .npz file: it is a zip archive holding {members[:5]} rather than .npy arrays"
        )


# --- device-side finiteness (hot paths: no implicit device-to-host copy) ---


@jax.jit
def _all_finite(x):
    return jnp.all(jnp.isfinite(x))


@jax.jit
def _any_constant_column(x):
    return jnp.any(jnp.max(x, axis=0) == jnp.min(x, axis=0))


@jax.jit
def _asymmetry_and_scale(S):
    return jnp.max(jnp.abs(S - jnp.swapaxes(S, -1, -2))), jnp.max(jnp.abs(S))


def check_finite_on_device(x, name: str):
    """:func:`check_finite` without copying ``x`` to the host.

    One device reduction and one explicit scalar transfer; the host scan runs
    (explicitly allowed) only to word the error. Use it for large arrays in hot
    paths, e.g. a ``(R, n, 2p)`` batch of designs. No-op on tracers.
    """
    if is_concrete(x) and not values_trusted() and not bool(host_flags(_all_finite, x)):
        with jax.transfer_guard("allow"):
            check_finite(x, name)
