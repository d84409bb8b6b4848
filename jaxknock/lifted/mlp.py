"""The standard ReLU network (MLP): initialisation, forward rule, loss, optax training.

A lifted network's weights are an MLP pytree ``[{"w", "b"}, ...]``:
:func:`lifted_to_mlp` exports them, :func:`mlp_apply` is the feed-forward
rule, and :func:`train_mlp` trains the standard network with an optax
optimizer (the Adam/SGD baselines and the thesis' Table 2.1 fine-tuning).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _checks
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.lifted._inputs import check_params, prepare_xy
from jaxknock.lifted.objective import loss_sum
from jaxknock.lifted.spec import LOSSES, LiftedSpec

__all__ = ["accuracy", "eval_fn", "lifted_to_mlp", "mlp_apply", "mlp_init", "mlp_loss", "train_mlp"]


def mlp_init(key, sizes: Sequence[int], *, dtype=None) -> list:
    """Xavier/Glorot-uniform weights and zero biases for a ReLU MLP.

    ``W_l ~ U(-a, a)``, ``a = sqrt(6 / (p_l + p_{l+1}))`` (as TensorFlow's default).

    Args:
      key: a ``jax.random`` key.
      sizes: layer widths ``(p_0, ..., p_{L+1})``.
      dtype: floating dtype (default: JAX's default float).

    Returns:
      list of ``{"w": (p_l, p_{l+1}), "b": (p_{l+1},)}``.

    Example:
      >>> params = mlp_init(jax.random.key(0), (4, 8, 3))
      >>> params[0]["w"].shape
      (4, 8)
    """
    dtype = dtype or jnp.result_type(float)
    return _mlp_init(key, tuple(int(s) for s in sizes), jnp.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))  # one program (layer by layer: two or three per layer)
def _mlp_init(key, sizes, dtype):
    keys = jax.random.split(key, len(sizes) - 1)
    params = []
    for k, p_in, p_out in zip(keys, sizes[:-1], sizes[1:]):
        a = math.sqrt(6.0 / (p_in + p_out))
        w = jax.random.uniform(k, (p_in, p_out), dtype, -a, a)
        params.append({"w": w, "b": jnp.zeros((p_out,), dtype)})
    return params


def mlp_apply(params, X):
    """Feed-forward rule: ``X_{l+1} = relu(X_l W_l + b_l)``, returns ``U_L = X_L W_L + b_L``.

    For classification ``U_L`` are the logits (class scores); the predicted class
    is their arg-max.

    Example:
      >>> params = mlp_init(jax.random.key(0), (4, 8, 3))
      >>> mlp_apply(params, jnp.ones((5, 4))).shape
      (5, 3)
    """
    h = X
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    return h @ params[-1]["w"] + params[-1]["b"]


def mlp_loss(params, X, Y, *, loss: str = "cross_entropy", rho=0.0):
    """Standard training loss ``(1/N) L(Y, mlp_apply(params, X)) + sum_l rho_l ||W_l||^2``.

    ``L`` is ``1/2 ||Y - U||_F^2`` (``mse``) or softmax cross-entropy; ``Y`` is an
    ``N x p`` target / one-hot matrix. This is the problem (3.3) that the Fenchel
    objective lower-bounds. ``rho``: a scalar or one per layer, ``>= 0`` (a negative
    ``rho`` makes the loss unbounded below: ``ValueError``, NaN under ``jit``).
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    if _checks.is_concrete(rho) and not np.all(np.asarray(rho, dtype=float) >= 0):
        raise ValueError(f"rho must be >= 0 (a ridge weight per layer), got {rho!r}")
    U = mlp_apply(params, X)
    rho = jnp.broadcast_to(jnp.asarray(rho, U.dtype), (len(params),))
    ridge = sum(rho[i] * jnp.sum(layer["w"] ** 2) for i, layer in enumerate(params))
    return jnp.where(jnp.all(rho >= 0), loss_sum(Y, U, loss) / X.shape[0] + ridge, jnp.nan)


def accuracy(U, labels):
    """Fraction of rows whose arg-max of ``U`` is the label."""
    return jnp.mean((jnp.argmax(U, axis=-1) == labels).astype(U.dtype))


@functools.cache
def eval_fn(loss: str, vmapped: bool):
    """Jitted ``(params, X, Y, labels) -> {"loss", "accuracy"}`` of the feed-forward rule (``vmapped``: over models)."""

    def ev(params, X, Y, labels):
        U = mlp_apply(params, X)
        out = {"loss": loss_sum(Y, U, loss) / X.shape[0]}
        if labels is not None:
            out["accuracy"] = accuracy(U, labels)
        return out

    if vmapped:
        ev = jax.vmap(ev, in_axes=(0, None, None, None))
    return jax.jit(ev)


def lifted_to_mlp(params_or_solution, *, index: int | None = None, dtype=None) -> list:
    """Export trained weights as a plain MLP parameter pytree.

    Args:
      params_or_solution: the ``Solution`` of :func:`fit_lifted` /
        :func:`tune_lifted` or its ``value``.
      index: for :func:`tune_lifted` results, which model to export.
      dtype: optional dtype to cast to (e.g. ``jnp.float32``).

    Returns:
      list of ``{"w": (p_l, p_{l+1}), "b": (p_{l+1},)}`` usable with
      :func:`mlp_apply` and as ``init`` of :func:`train_mlp`.

    The exported network is the feed-forward rule
    ``X_{l+1} = relu(X_l W_l + b_l)``, ``U_L = X_L W_L + b_L`` with the
    trained weights; the lifted variables ``X_l`` are dropped (for a Fenchel
    lifted network the training objective at the feed-forward ``X`` equals the
    standard loss, :mod:`jaxknock.lifted`). Typical use:
    ``lifted_to_mlp(fit_lifted(key, X, y, spec))`` or, after
    :func:`tune_lifted`, ``lifted_to_mlp(sol, index=i)``.

    Example:
      >>> params = mlp_init(jax.random.key(0), (4, 8, 3))
      >>> stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, 2 * a]), params)  # 2 models, as tune_lifted
      >>> mlp = lifted_to_mlp(stacked, index=1, dtype=jnp.float32)
      >>> mlp[0]["w"].shape, mlp[0]["w"].dtype, bool(jnp.allclose(mlp[1]["w"], 2 * params[1]["w"]))
      ((4, 8), dtype('float32'), True)
    """
    params = params_or_solution.value if isinstance(params_or_solution, Solution) else params_or_solution
    if index is not None:
        # a[index] is a JAX gather: an index past the end was clamped to the last model, silently
        H = params[0]["w"].shape[0] if params[0]["w"].ndim == 3 else None
        if H is None:
            raise ValueError(f"index={index!r} selects one of several models (tune_lifted), but params hold one")
        index = _checks.int_setting(index, "index")
        if not (_checks.is_int(index) and -H <= index < H):
            raise ValueError(f"index must be an integer in [-{H}, {H}) (the params hold {H} models), got {index!r}")
        params = jax.tree_util.tree_map(lambda a: a[index], params)
    if params[0]["w"].ndim != 2:
        raise ValueError("params hold several models (from tune_lifted): pass index=")
    if dtype is not None and not jnp.issubdtype(dtype, jnp.floating):
        # an integer dtype truncated every weight (0.37 -> 0) and returned a network that predicts one class
        raise TypeError(f"dtype must be a floating dtype (e.g. jnp.float32), got {dtype!r}")
    return [{"w": jnp.asarray(layer["w"], dtype), "b": jnp.asarray(layer["b"], dtype)} for layer in params]


# ----------------------------------------------------------------------------
# optax training of the equivalent standard network
# ----------------------------------------------------------------------------


@functools.cache
def _mlp_epoch_fn(optimizer, loss: str, batch_size: int):
    # weight_decay is traced (a constant of the program, every new value compiled the epoch again)
    def objective(params, xb, yb, weight_decay):
        ridge = sum(jnp.sum(layer["w"] ** 2) for layer in params)
        return loss_sum(yb, mlp_apply(params, xb), loss) / xb.shape[0] + weight_decay * ridge

    grad_fn = jax.value_and_grad(objective)

    def epoch(params, opt_state, X, Y, perm, weight_decay):
        nb = X.shape[0] // batch_size
        idx = perm[: nb * batch_size].reshape(nb, batch_size)

        def body(carry, ix):
            params, opt_state = carry
            value, g = grad_fn(params, X[ix], Y[ix], weight_decay)
            updates, opt_state = optimizer.update(g, opt_state, params)
            params = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
            return (params, opt_state), value

        (params, opt_state), values = lax.scan(body, (params, opt_state), idx)
        return params, opt_state, jnp.mean(values)

    return jax.jit(epoch)


def train_mlp(
    key,
    X,
    y,
    init,
    *,
    optimizer,
    loss: str = "cross_entropy",
    epochs: int = 10,
    batch_size: int = 100,
    weight_decay: float = 0.0,
    X_test=None,
    y_test=None,
    throw: bool = False,
    verbose: bool = False,
) -> Solution:
    r"""Train the standard ReLU network with an optax optimizer (mini-batch, shuffled).

    Minimises ``(1/|B|) L(Y_B, mlp_apply(params, X_B)) + weight_decay sum ||W_l||^2``
    over mini-batches; each epoch is one jitted ``lax.scan``. Use it for the
    Adam/SGD baselines (``init=sizes``: Xavier initialisation) and for the
    thesis' Table 2.1 experiment (``init=lifted_to_mlp(solution)``: a network
    initialised with lifted weights).

    Args:
      key: ``jax.random`` key (initialisation when ``init`` is a size tuple, shuffling).
      X, y: ``(N, p_0)`` inputs and ``(N,)`` integer labels or ``(N, p)`` targets.
      init: layer sizes (Xavier init) or an MLP params pytree.
      optimizer: an ``optax.GradientTransformation`` (e.g. ``optax.adam(1e-3)``).
      loss: ``"cross_entropy"`` or ``"mse"``.
      epochs, batch_size, weight_decay: training settings.
      X_test, y_test: optional held-out data evaluated after every epoch.

    Returns:
      ``Solution(value=params, result, stats)`` with per-epoch ``train_loss``,
      ``test_accuracy``/``test_loss`` (if given), ``epoch_time`` and ``epoch_cpu_time``;
      ``result`` is ``nonfinite`` if the loss diverged.

    Example:
      >>> import optax
      >>> X = jax.random.normal(jax.random.key(1), (64, 5))
      >>> y = (X[:, 0] > 0).astype(jnp.int32)
      >>> sol = train_mlp(jax.random.key(0), X, y, (5, 16, 2), optimizer=optax.adam(1e-2),
      ...                 epochs=2, batch_size=16)
      >>> sol.stats["train_loss"].shape
      (2,)
    """
    if isinstance(init, (tuple, list)) and init and not isinstance(init[0], dict):
        sizes = _checks.as_int_tuple(init, "init")  # int(6.5) was a width of 6
        params = None
    else:
        sizes = tuple([init[0]["w"].shape[0]] + [layer["w"].shape[1] for layer in init])
        params = init
    spec = LiftedSpec(sizes, loss=loss)
    X, Y, labels = prepare_xy(X, y, spec)
    N = X.shape[0]
    batch_size = _checks.check_count(batch_size, "batch_size")  # int() truncated 8.5
    if not 1 <= batch_size <= N:
        raise ValueError(f"batch_size must lie in [1, {N}], got {batch_size}")
    epochs = _checks.check_count(epochs, "epochs")
    weight_decay = _checks.check_real(weight_decay, "weight_decay")  # -1 diverged to a negative "loss"
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        # None was "'NoneType' object has no attribute 'init'" after the data were prepared
        raise TypeError(f"optimizer must be an optax.GradientTransformation (e.g. optax.adam(1e-3)), got {optimizer!r}")
    k_init, k_perm = jax.random.split(key)
    params = mlp_init(k_init, sizes, dtype=X.dtype) if params is None else check_params(params, spec, X.dtype)
    test = None
    if X_test is not None or y_test is not None:
        if X_test is None or y_test is None:
            raise ValueError("pass both X_test and y_test, or neither")
        test = prepare_xy(X_test, y_test, spec, "X_test", "y_test")
    opt_state = optimizer.init(params)
    step = _mlp_epoch_fn(optimizer, loss, batch_size)
    evaluate = eval_fn(loss, False)
    hist: dict[str, list] = {}
    nonfinite = False
    for epoch in range(int(epochs)):
        perm = jax.random.permutation(jax.random.fold_in(k_perm, epoch), N)
        t0, c0 = time.perf_counter(), time.process_time()
        params, opt_state, value = step(params, opt_state, X, Y, perm, float(weight_decay))
        jax.block_until_ready(params)
        hist.setdefault("epoch_time", []).append(time.perf_counter() - t0)
        hist.setdefault("epoch_cpu_time", []).append(time.process_time() - c0)
        hist.setdefault("train_loss", []).append(float(value))
        if test is not None:
            te = evaluate(params, *test)
            hist.setdefault("test_loss", []).append(float(te["loss"]))
            if "accuracy" in te:
                hist.setdefault("test_accuracy", []).append(float(te["accuracy"]))
        if verbose:
            print(f"epoch {epoch + 1}: loss {float(value):.4f}", flush=True)
        if not np.isfinite(float(value)):
            nonfinite = True
            break
    stats = {k_: np.asarray(v) for k_, v in hist.items()}
    stats["num_steps"] = np.int32(len(hist["epoch_time"]))
    stats["max_steps"] = np.int32(epochs)
    code = RESULTS.nonfinite if nonfinite else RESULTS.successful
    return raise_if_failed(Solution(params, jnp.asarray(code, jnp.int32), stats), throw)
