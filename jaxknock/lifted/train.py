"""Training drivers: :func:`fit_lifted` (one model) and :func:`tune_lifted` (many, ``vmap``-ed).

The host loop runs over epochs only; each epoch is one compiled call
(:func:`jaxknock.lifted.bcd.epoch_fn`). The loop is written in steps: check
the inputs (:func:`_check_run`), initialise the carry, pick the compiled epoch
(with the CPU fallback that runs ``vmap``-ed non-batched models one by one),
form the epochs' constant inputs (Gram blocks, or the fixed batches and their
first-layer factorisations, checked against device memory), then run, record
and stop (:class:`_History`).
"""

from __future__ import annotations

import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _backend, _checks, _memory, _mesh
from jaxknock._checks import as_float_array
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.lifted._inputs import check_hyper_values, check_params, prepare_xy
from jaxknock.lifted.bcd import BETA_START, DEFAULT_EXTRAPOLATION, Extrapolated, epoch_fn, factors_fn, fixed_partition
from jaxknock.lifted.blocks import forward_state, uses_kernel
from jaxknock.lifted.mlp import eval_fn, mlp_init
from jaxknock.lifted.ridge import gram_blocks
from jaxknock.lifted.spec import LiftedHyper, LiftedSpec, LiftedState, Settings, default_settings

__all__ = ["fit_lifted", "tune_lifted"]


def _factor_bytes(spec: LiftedSpec, N: int, batch_size: int, itemsize: int) -> int:
    """Memory of the cached first-layer factorisations of one model (fixed batches)."""
    d = batch_size if uses_kernel(batch_size, spec.sizes[0]) else spec.sizes[0] + 1
    return -(-N // batch_size) * d * d * itemsize


_gram_jit = jax.jit(gram_blocks)


def _sequential_models(step):
    """Apply a single-model epoch to each model of a stacked state / hyper batch."""

    def run(state, X, Y, hyper, perm, gram0):
        outs = []
        for i in range(hyper.lam.shape[0]):
            pick = functools.partial(lambda a, i: a[i], i=i)
            outs.append(
                step(jax.tree_util.tree_map(pick, state), X, Y, jax.tree_util.tree_map(pick, hyper), perm, gram0)
            )
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)

    return run


def _result_code(nonfinite: np.ndarray, converged: np.ndarray) -> np.ndarray:
    code = np.where(converged, RESULTS.successful, RESULTS.max_steps_reached)
    return np.where(nonfinite, RESULTS.nonfinite, code).astype(np.int32)


# ----------------------------------------------------------------------------
# The host training loop, in steps: check, initialise, compile, set up, run, record
# ----------------------------------------------------------------------------


class _Run(NamedTuple):
    """A training run's checked data and options."""

    X: jax.Array
    Y: jax.Array
    labels: Any  # integer labels, or None for a regression target
    test: Any  # (X_test, Y_test, labels_test) or None
    epochs: int
    batch_size: int | None
    fixed_batches: bool
    tol: float | None
    settings: Settings
    vmapped: bool
    num_models: int | None  # H (vmapped), else None

    @property
    def extrapolate(self) -> bool:
        """Whether the epoch carries an extrapolation weight (:class:`Extrapolated`)."""
        return self.settings.extrapolation > 0

    @property
    def model_shape(self) -> tuple:
        return (self.num_models,) if self.vmapped else ()


def _check_run(
    X,
    y,
    spec,
    hyper,
    *,
    vmapped,
    epochs,
    batch_size,
    alternations,
    X_test,
    y_test,
    tol,
    inner_tol,
    inner_max_steps,
    w_max_steps,
    extrapolation,
    fixed_batches,
) -> _Run:
    """Check the data and the options (before anything is traced) and build the :class:`Settings`."""
    if not isinstance(spec, LiftedSpec):
        raise TypeError(f"spec must be a LiftedSpec, got {type(spec).__name__}")
    X, Y, labels = prepare_xy(X, y, spec)
    N = X.shape[0]
    epochs = _checks.check_count(epochs, "epochs")  # int() truncated 2.5, parsed "2", took True as 1
    if tol is not None:
        tol = _checks.check_real(tol, "tol")
    if batch_size is not None:
        batch_size = _checks.check_count(batch_size, "batch_size")
        if not 1 <= batch_size <= N:
            raise ValueError(f"batch_size must lie in [1, {N}] (the number of samples), got {batch_size}")
    if tol is not None and batch_size is not None:
        raise ValueError("tol (stop on relative objective decrease) applies to non-batched training only")
    fixed_batches = bool(fixed_batches)
    if fixed_batches and batch_size is None:
        raise ValueError("fixed_batches applies to batched training (Algorithm 2): give a batch_size")
    if extrapolation is None:
        extrapolation = DEFAULT_EXTRAPOLATION if batch_size is None else 0.0
    elif batch_size is not None and extrapolation != 0:
        raise ValueError(
            "extrapolation (between full passes) applies to non-batched training only; "
            f"got extrapolation={extrapolation} with batch_size={batch_size}"
        )
    test = None
    if X_test is not None or y_test is not None:
        if X_test is None or y_test is None:
            raise ValueError("pass both X_test and y_test, or neither")
        test = prepare_xy(X_test, y_test, spec, "X_test", "y_test")
    check_hyper_values(hyper, batch_size is not None)
    settings = default_settings(
        X.dtype,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        alternations=alternations,
        extrapolation=extrapolation,
    )
    H = hyper.lam.shape[0] if vmapped else None
    return _Run(X, Y, labels, test, int(epochs), batch_size, fixed_batches, tol, settings, vmapped, H)


def _initial_carry(key, run: _Run, spec: LiftedSpec, init):
    """What the epoch function carries first: the lifted state (stacked over models when
    ``vmapped``), with its extrapolation weight when the run extrapolates."""
    X, dtype = run.X, run.X.dtype
    params = mlp_init(key, spec.sizes, dtype=dtype) if init is None else check_params(init, spec, dtype)
    if run.vmapped:
        params = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (run.num_models,) + a.shape), params)
    if run.batch_size is not None:  # X is re-initialised per batch: keep only the weights
        state = LiftedState(params, (), None)
    elif run.vmapped:
        state = jax.vmap(lambda p: forward_state(p, X, spec))(params)
    else:
        state = forward_state(params, X, spec)
    if not run.extrapolate:
        return state
    return Extrapolated(state, jnp.full(run.model_shape, min(BETA_START, run.settings.extrapolation), dtype))


def _epoch_program(run: _Run, spec: LiftedSpec, carry, hyper, models):
    """The compiled epoch ``(carry, X, Y, hyper, perm, aux) -> (carry, metrics)``, and the
    carry and hyper-parameters placed on the devices of ``models`` (a sharding or ``None``)."""
    if run.vmapped and run.batch_size is None and _backend.loop_over_batch("lifted_models"):
        # XLA:CPU (jaxlib 0.10.2, re-checked for issue 20) deadlocks on the
        # vmapped non-batched epoch for MNIST-sized layers; there the models are
        # run one after the other through the same compiled single-model epoch
        # (identical results; the batched mode and other backends use vmap).
        return _sequential_models(epoch_fn(spec, run.settings, run.batch_size, False)), carry, hyper
    step = epoch_fn(spec, run.settings, run.batch_size, run.vmapped, run.fixed_batches)
    if models is not None:  # models split over the mesh's devices (GSPMD partitions the vmap)
        carry, hyper = jax.device_put((carry, hyper), models)
    return step, carry, hyper


def _check_factors_fit(run: _Run, spec: LiftedSpec) -> None:
    """``fixed_batches`` keeps one factorisation per batch: check that one model's fit in memory."""
    need = _factor_bytes(spec, run.X.shape[0], run.batch_size, jnp.dtype(run.X.dtype).itemsize)
    free = _memory.device_memory_bytes(None)
    if need > free:
        raise ValueError(
            f"fixed_batches keeps one first-layer factorisation per batch, about "
            f"{need / 2**30:.3g} GiB here, but {free / 2**30:.3g} GiB are free; "
            "use fixed_batches=False"
        )


def _epoch_inputs(run: _Run, spec: LiftedSpec, hyper, key, models):
    """The epochs' constant input ``aux``, the seconds spent on it, and the shuffling key.

    Algorithm 1 sees the same input every pass: its Gram blocks are formed once.
    With fixed batches the first layer's W-block system depends only on its
    batch: the batches are drawn and each system factorised once.
    """
    if run.batch_size is None:
        return _gram_jit(run.X), 0.0, key
    if not run.fixed_batches:
        return None, 0.0, key
    k_part, key = jax.random.split(key)
    if not run.vmapped:  # tune_lifted counts the factorisations in its per-device estimate
        _check_factors_fit(run, spec)
    t_setup = time.perf_counter()
    parts = fixed_partition(k_part, run.X.shape[0], run.batch_size)
    factors = factors_fn(spec, run.vmapped)(run.X, parts, hyper)
    if models is not None:
        factors = jax.device_put(factors, models)
    aux = (parts, jax.block_until_ready(factors))
    return aux, time.perf_counter() - t_setup, key


class _History:
    """Per-epoch records (host arrays), and the stopping state of every model."""

    def __init__(self, run: _Run):
        self.run = run
        self.records: dict[str, list] = {}
        self.prev_obj = None
        self.converged = np.zeros(run.model_shape, bool)
        self.nonfinite = np.zeros(run.model_shape, bool)

    def record(self, name, value):
        self.records.setdefault(name, []).append(np.asarray(value))

    def record_epoch(self, metrics, train, test, seconds, cpu_seconds):
        self.record("epoch_time", seconds)
        self.record("epoch_cpu_time", cpu_seconds)
        for k_, v in metrics.items():
            self.record("inner_" + k_ if k_ in ("steps", "failures", "solves") else k_, v)
        self.record("train_loss", train["loss"])
        if "accuracy" in train:
            self.record("train_accuracy", train["accuracy"])
        if test is not None:
            self.record("test_loss", test["loss"])
            if "accuracy" in test:
                self.record("test_accuracy", test["accuracy"])

    def update_stopping(self, obj, train_loss) -> bool:
        """Flag diverged models and, with ``tol``, converged ones; True when every model is done."""
        self.nonfinite = self.nonfinite | ~np.isfinite(obj) | ~np.isfinite(np.asarray(train_loss))
        if self.run.tol is not None and self.prev_obj is not None:
            self.converged = self.converged | (self.prev_obj - obj <= self.run.tol * np.abs(self.prev_obj))
        self.prev_obj = obj
        return bool(np.all(self.nonfinite | self.converged))

    def stats(self, setup_time) -> dict:
        stats = {k_: np.stack(v) for k_, v in self.records.items()}
        if self.run.vmapped:  # history with the model axis first
            stats = {k_: (np.moveaxis(v, 0, 1) if v.ndim == 2 else v) for k_, v in stats.items()}
        stats["num_steps"] = np.int32(len(self.records["epoch_time"]))
        stats["max_steps"] = np.int32(self.run.epochs)
        stats["setup_time"] = np.float64(setup_time)
        return stats

    def result(self) -> np.ndarray:
        converged = np.ones_like(self.converged) if self.run.tol is None else self.converged
        return _result_code(self.nonfinite, converged)


def _run_epoch(step, carry, run: _Run, hyper, perm, aux):
    """One timed epoch: ``(carry, state, metrics, wall seconds, process CPU seconds)``."""
    t0, c0 = time.perf_counter(), time.process_time()
    carry, metrics = step(carry, run.X, run.Y, hyper, perm, aux)
    state = carry.state if run.extrapolate else carry
    jax.block_until_ready(state.params)
    return carry, state, metrics, time.perf_counter() - t0, time.process_time() - c0


def _train(key, X, y, spec, hyper, *, init, throw, verbose, mesh=None, **options) -> Solution:
    """The host loop of :func:`fit_lifted` / :func:`tune_lifted`: one compiled call per epoch."""
    run = _check_run(X, y, spec, hyper, **options)
    k_init, k_perm = jax.random.split(key)
    carry = _initial_carry(k_init, run, spec, init)
    models = None
    if mesh is not None and run.vmapped:
        models = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(mesh.axis_names[0]))
    step, carry, hyper = _epoch_program(run, spec, carry, hyper, models)
    evaluate = eval_fn(spec.loss, run.vmapped)
    aux, setup_time, k_perm = _epoch_inputs(run, spec, hyper, k_perm, models)
    hist = _History(run)
    for epoch in range(run.epochs):
        num_rows = aux[0].shape[0] if run.fixed_batches else run.X.shape[0]  # batches or rows to shuffle
        perm = jax.random.permutation(jax.random.fold_in(k_perm, epoch), num_rows)
        carry, state, metrics, seconds, cpu_seconds = _run_epoch(step, carry, run, hyper, perm, aux)
        # the first epoch includes compilation and the one-off factorisations
        seconds += setup_time if epoch == 0 else 0.0
        train = evaluate(state.params, run.X, run.Y, run.labels)
        test = None if run.test is None else evaluate(state.params, *run.test)
        hist.record_epoch(metrics, train, test, seconds, cpu_seconds)
        obj = np.asarray(metrics["objective"])
        if verbose:
            msg = f"epoch {epoch + 1}: objective {obj} time {hist.records['epoch_time'][-1]:.2f}s"
            if run.test is not None and "test_accuracy" in hist.records:
                msg += f" test acc {hist.records['test_accuracy'][-1]}"
            print(msg, flush=True)
        if hist.update_stopping(obj, train["loss"]):
            break
    sol = Solution(state.params, jnp.asarray(hist.result()), hist.stats(setup_time), state)
    return raise_if_failed(sol, throw, "fit_lifted")


def fit_lifted(
    key,
    X,
    y,
    spec: LiftedSpec,
    *,
    epochs: int = 10,
    batch_size: int | None = None,
    alternations: int = 1,
    hyper: LiftedHyper | None = None,
    init=None,
    X_test=None,
    y_test=None,
    tol: float | None = None,
    inner_tol: float | None = None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
    extrapolation: float | None = None,
    fixed_batches: bool = False,
    throw: bool = False,
    verbose: bool = False,
) -> Solution:
    r"""Train a (Fenchel) lifted network by block-coordinate descent.

    ``batch_size=None`` runs thesis Algorithm 1 (one BCD pass over all data per
    epoch, :func:`lifted_bcd_step`); otherwise Algorithm 2: each epoch shuffles
    the data and, for each batch of ``batch_size`` rows (a trailing partial batch
    is dropped), re-initialises X by a forward pass and runs ``alternations``
    X/W alternations with the proximal term ``gamma_l ||Theta_l - Theta_l^0||^2``
    (:func:`lifted_batch_step`). The per-epoch work is one jitted call (a
    ``lax.scan`` over batches); the Python loop only runs over epochs.

    Args:
      key: ``jax.random`` key (initialisation and shuffling).
      X: ``(N, p_0)`` inputs (train in float32 or float64; the dtype of ``X`` is used).
      y: ``(N,)`` integer labels in ``[0, p)`` or an ``(N, p)`` target matrix.
      spec: :class:`LiftedSpec`.
      epochs: number of epochs (BCD passes for non-batched training).
      batch_size: ``None`` (non-batched) or the batch size of Algorithm 2.
      alternations: ``K``, X/W alternations per batch.
      hyper: optional :class:`LiftedHyper` overriding the spec's ``lam, rho, gamma``.
      init: optional MLP params (default Xavier-uniform, zero biases).
      X_test, y_test: optional held-out data evaluated after every epoch.
      tol: (non-batched only) stop when the relative objective decrease of a pass
        is at most ``tol``; without it all ``epochs`` are run.
      inner_tol, inner_max_steps, w_max_steps: tolerance and step limits of the
        inner solvers (``w_max_steps`` for the iterative W-steps, default
        ``inner_max_steps``). Solves that miss the tolerance are counted in
        ``stats["inner_failures"]``.
      extrapolation: (non-batched only) largest weight ``beta`` of the
        safeguarded extrapolation between passes: after each pass the point
        ``x_{k+1} + beta (x_{k+1} - x_k)`` (hidden variables projected onto
        ``>= 0``) is kept only if it lowers the objective, so the objective
        still never increases; ``beta`` starts at 0.5, grows by 1.5 after an
        accepted step and halves after a rejected one. ``None`` means 4 for
        non-batched and 0 (off) for batched training; 0 runs plain Algorithm 1.
        ``stats["extrapolated"]`` flags the passes whose step was accepted.
      fixed_batches: (batched only) partition the data into batches once (the
        last batch filled up with rows of the first when ``batch_size`` does
        not divide ``N``) and visit them in a new random order every epoch,
        instead of reshuffling the rows. The first layer's W-block system then
        depends on the batch only, so its factorisation (the ``B x B`` kernel
        inverse, or the ``(p_0+1)^2`` Cholesky factor when ``B > p_0``) is
        computed once per batch and reused: ``ceil(N/B)`` such matrices are kept
        (``N B`` numbers in the kernel form, 120 MB in float32 for MNIST with
        ``B = 500``). Their one-off cost is included in the first epoch's time
        and reported as ``stats["setup_time"]``.
      throw: raise ``RuntimeError`` if the result is not successful.
      verbose: print one line per epoch.

    Returns:
      ``Solution(value=params, result, stats, state)`` with ``params`` an MLP
      pytree (see :func:`mlp_apply`) and per-epoch arrays in ``stats``:
      ``objective, loss, penalty, ridge, violation`` (for batched training the
      mean over batches), ``train_loss``/``train_accuracy`` (feed-forward rule on
      the whole training set), ``test_loss``/``test_accuracy``, ``epoch_time``
      (seconds, training only), ``epoch_cpu_time`` (process CPU seconds of the
      same work, less sensitive to other load on shared machines), ``inner_steps``, ``inner_failures``,
      ``inner_solves``; and ``num_steps`` (epochs run), ``max_steps``, ``setup_time``.
      ``result`` is ``nonfinite`` if the objective diverged (training stops),
      ``max_steps_reached`` if ``tol`` was given and not met.

    Example:
      >>> X = jax.random.normal(jax.random.key(1), (64, 5))
      >>> y = (X[:, 0] > 0).astype(jnp.int32)
      >>> spec = LiftedSpec((5, 16, 2), lam=1.0, rho=1e-3)
      >>> sol = fit_lifted(jax.random.key(0), X, y, spec, epochs=3)
      >>> sol.stats["train_accuracy"].shape
      (3,)
    """
    _checks.require_eager(
        "fit_lifted",
        "it sizes the mini-batches and runs its epochs from the host",
        "jit the pieces instead: epoch steps via jaxknock.lifted.bcd, predictions via predict_lifted",
        key=key, X=X, y=y, X_test=X_test, y_test=y_test,
    )  # fmt: skip
    if hyper is None:
        hyper = spec.hyper(as_float_array(X, "X", bools=True).dtype) if isinstance(spec, LiftedSpec) else None
    return _train(
        key,
        X,
        y,
        spec,
        hyper,
        vmapped=False,
        epochs=epochs,
        batch_size=batch_size,
        alternations=alternations,
        init=init,
        X_test=X_test,
        y_test=y_test,
        tol=tol,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        throw=throw,
        verbose=verbose,
        extrapolation=extrapolation,
        fixed_batches=fixed_batches,
    )


def tune_lifted(
    key,
    X,
    y,
    spec: LiftedSpec,
    *,
    lam=None,
    rho=None,
    gamma=None,
    epochs: int = 10,
    batch_size: int | None = None,
    alternations: int = 1,
    init=None,
    X_test=None,
    y_test=None,
    inner_tol: float | None = None,
    inner_max_steps: int = 100,
    w_max_steps: int | None = None,
    extrapolation: float | None = None,
    fixed_batches: bool = False,
    throw: bool = False,
    verbose: bool = False,
    devices=None,
    mesh=None,
) -> Solution:
    r"""Train several lifted networks with different hyper-parameters in one ``vmap``-ed call.

    ``lam`` has shape ``(H,)``; ``rho`` and ``gamma`` shape ``(H,)`` (same value
    for every layer) or ``(H, L+1)``; omitted ones are taken from ``spec``. All
    models start from the same initialisation and see the same batches, so the
    ``H`` runs equal ``H`` separate :func:`fit_lifted` calls (one compiled
    program, one pass over the data per epoch for all models). ``extrapolation``
    is as in :func:`fit_lifted`, with one ``beta`` per model; ``fixed_batches``
    too, with one set of first-layer factorisations per model.

    ``devices`` / ``mesh`` split the ``H`` models over devices (the model axis
    of the state and hyper-parameters is placed with a ``NamedSharding``, ``H``
    padded to a multiple of the device count by repeating the last model and
    unpadded after; see :mod:`jaxknock.distributed`): ``None`` uses every
    device, an int the first ``d``. Each model's numbers do not depend on the
    device count. On CPU the non-batched mode (``batch_size=None``) keeps its
    sequential fallback and runs on one device. Peak memory is estimated as
    ``4 (N' sum(widths) + #weights)`` numbers per model (``N'`` the batch size
    or ``N``), plus the factorisations kept with ``fixed_batches``; a
    ``ValueError`` names ``devices`` when a device cannot hold its share of the
    models.

    Returns:
      :func:`fit_lifted`'s ``Solution`` with a leading model axis on ``value``,
      ``result`` and the per-epoch ``stats`` (shape ``(H, epochs)``). One diverging
      model gets ``RESULTS.nonfinite`` without stopping the others.

    Example:
      >>> X = jax.random.normal(jax.random.key(1), (64, 5))
      >>> y = (X[:, 0] > 0).astype(jnp.int32)
      >>> spec = LiftedSpec((5, 16, 2))
      >>> sol = tune_lifted(jax.random.key(0), X, y, spec, lam=jnp.array([0.5, 2.0]), epochs=2)
      >>> sol.stats["objective"].shape
      (2, 2)
    """
    _checks.require_eager(
        "tune_lifted",
        "it sizes the mini-batches and runs its epochs from the host",
        "jit the pieces instead: epoch steps via jaxknock.lifted.bcd, predictions via predict_lifted",
        key=key, X=X, y=y,
    )  # fmt: skip
    if not isinstance(spec, LiftedSpec):
        raise TypeError(f"spec must be a LiftedSpec, got {type(spec).__name__}")
    dtype = as_float_array(X, "X", bools=True).dtype
    hyper = _stacked_hyper(spec, dtype, lam, rho, gamma)
    H = int(hyper.lam.shape[0])
    # the CPU fallback of the non-batched mode runs the models one by one on one device
    sequential = batch_size is None and _backend.loop_over_batch("lifted_models")
    shard = _mesh.wants_sharding(devices, mesh) and not sequential
    mesh = _mesh.resolve_mesh(devices, mesh, None) if shard else None
    D = int(mesh.shape[mesh.axis_names[0]]) if shard else 1
    _check_models_fit(spec, X, dtype, -(-H // D), mesh, batch_size, fixed_batches)
    Hp = -(-H // D) * D
    if Hp != H:  # pad with copies of the last model; dropped below
        hyper = jax.tree_util.tree_map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], Hp - H, axis=0)]), hyper)
    sol = _train(
        key,
        X,
        y,
        spec,
        hyper,
        vmapped=True,
        epochs=epochs,
        batch_size=batch_size,
        alternations=alternations,
        init=init,
        X_test=X_test,
        y_test=y_test,
        tol=None,
        inner_tol=inner_tol,
        inner_max_steps=inner_max_steps,
        w_max_steps=w_max_steps,
        throw=throw,
        verbose=verbose,
        mesh=mesh,
        extrapolation=extrapolation,
        fixed_batches=fixed_batches,
    )
    if Hp == H:
        return sol

    def cut(a):
        return a[:H]

    stats = {k_: (v[:H] if np.ndim(v) == 2 else v) for k_, v in sol.stats.items()}
    return Solution(
        jax.tree_util.tree_map(cut, sol.value), sol.result[:H], stats, jax.tree_util.tree_map(cut, sol.state)
    )


def _stacked_hyper(spec: LiftedSpec, dtype, lam, rho, gamma) -> LiftedHyper:
    """The ``H`` models' hyper-parameters: given values, the others broadcast from ``spec``."""
    base = spec.hyper(dtype)
    n = spec.num_layers
    given = [a for a in (lam, rho, gamma) if a is not None]
    if not given:
        raise ValueError("give at least one of lam, rho, gamma as a 1-D array of hyper-parameter values")
    sizes = {int(jnp.shape(a)[0]) for a in given if jnp.ndim(a) >= 1}
    if len(sizes) != 1 or any(jnp.ndim(a) == 0 for a in given):
        raise ValueError(
            "lam, rho and gamma must be arrays with the same leading length H, "
            f"got shapes {[tuple(jnp.shape(a)) for a in given]}"
        )
    H = sizes.pop()
    if H == 0:  # was a tree_map TypeError further on
        raise ValueError("lam, rho and gamma hold no hyper-parameter values (H = 0): give at least one model")

    def per_layer(a, default, name):
        if a is None:
            return jnp.broadcast_to(default, (H, n))
        a = jnp.asarray(a, dtype)
        if a.ndim == 1:
            return jnp.broadcast_to(a[:, None], (H, n))
        if a.shape != (H, n):
            raise ValueError(f"{name} must have shape ({H},) or ({H}, {n}), got {tuple(a.shape)}")
        return a

    lam_arr = jnp.broadcast_to(base.lam, (H,)) if lam is None else jnp.asarray(lam, dtype)
    if lam_arr.shape != (H,):
        raise ValueError(f"lam must have shape ({H},), got {tuple(lam_arr.shape)}")
    return LiftedHyper(lam_arr, per_layer(rho, base.rho, "rho"), per_layer(gamma, base.gamma, "gamma"))


def _check_models_fit(spec: LiftedSpec, X, dtype, models_per_device: int, mesh, batch_size, fixed_batches) -> None:
    """Raise when a device cannot hold its share of the models.

    Peak memory is estimated as ``4 (N' sum(widths) + #weights)`` numbers per
    model (``N'`` the batch size or ``N``), plus the factorisations kept with
    ``fixed_batches``.
    """
    rows = int(jnp.shape(X)[0]) if batch_size is None else int(batch_size)
    per_model = 4 * (rows * sum(spec.sizes[1:]) + sum(a * b for a, b in zip(spec.sizes, spec.sizes[1:])))
    per_model *= jnp.dtype(dtype).itemsize
    if fixed_batches and batch_size is not None:
        per_model += _factor_bytes(spec, int(jnp.shape(X)[0]), int(batch_size), jnp.dtype(dtype).itemsize)
    free = _memory.device_memory_bytes(mesh)
    if models_per_device * per_model > free:
        raise ValueError(
            f"{models_per_device} models per device need about {models_per_device * per_model / 2**30:.3g} GiB "
            f"but a device has {free / 2**30:.3g} GiB free; pass more devices= (or fewer "
            "hyper-parameter values per call, or a batch_size)"
        )
