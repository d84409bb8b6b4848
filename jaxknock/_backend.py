"""Backend-dependent choices, all in one place (issue 20: GPU readiness).

Every choice that depends on the XLA backend (``jax.default_backend()``:
``"cpu"``, ``"gpu"``/``"cuda"``/``"rocm"``, ``"tpu"``) goes through a function of
this module, with the measurement that decided it. Nothing else in the package
branches on the platform name.

Status of the measurements: the CPU numbers below were taken on the 2-core
development VM (shared, so times are inflated; ratios are what decided). **No
GPU was available when these choices were written**: the accelerator branches
are hypotheses from the cost model (kernel launches and host synchronisations
cost ~5-30 us each on a GPU, matrix products are nearly free), to be confirmed
by ``benchmarks/bench_gpu.py`` on a GPU -- its ``lcd`` rows time both lasso
solvers side by side for that purpose.
"""

from __future__ import annotations

import jax

__all__ = [
    "check_every",
    "lasso_solver",
    "limits_lapack_threads",
    "lockstep_chunk",
    "loop_over_batch",
    "platform",
    "reads_in_place",
]


def platform() -> str:
    """The default backend's platform name, ``"cpu"`` or an accelerator's."""
    return jax.default_backend()


def _is_cpu(plat: str | None) -> bool:
    return (platform() if plat is None else plat) == "cpu"


def reads_in_place(x) -> bool:
    """True when ``np.asarray(x)`` copies nothing: a host (NumPy) value, or a JAX array held by CPU devices.

    The input checks of :mod:`jaxknock._checks` (finite values, constant columns,
    symmetry) scan such an ``x`` where it is. An array on an accelerator is reduced
    there to a flag instead, and comes back whole only to word an error: a
    ``(20 000, 20 000)`` float32 design on a GPU is 1.6 GB over the bus per check
    (session 58). On the CPU, JAX's ``transfer_guard_device_to_host`` never fires, so
    the tests record host reads directly (``tests/helpers.host_reads``).
    """
    return not isinstance(x, jax.Array) or all(_is_cpu(d.platform) for d in x.devices())


# Convergence-check strides of inner while-loops: iterations run between two
# evaluations of the stopping test. On a GPU every test is a device-to-host
# predicate of the while-loop (one synchronisation), so a longer stride saves
# latency; on the CPU the test is cheap but every extra unchecked iteration is
# wasted work after convergence.
#
# * "fista" (l1/fista.py, gap check of the lasso engine): 10 on every backend.
#   The gap check costs about one iteration (a residual, a correlation and a
#   reduction); 10 bounds the overshoot after convergence to 10 iterations.
#   Not re-measured for issue 20; on a GPU a longer stride saves one
#   synchronisation per 10 iterations (no GPU in this session to measure it).
# * "lifted_inner" (lifted/inner.py, accelerated X-steps): 3. On the CPU,
#   testing convergence and restart every third step instead of every step cut
#   an MNIST batch X-step from 0.34 ms to 0.15 ms for 1.06x the steps
#   (benchmarks/measured/NOTES.md, lifted); a longer stride delays the restart
#   test. Same value on accelerators until measured there.
_CHECK_EVERY = {
    "fista": {"cpu": 10, "accelerator": 10},
    "lifted_inner": {"cpu": 3, "accelerator": 3},
}


def check_every(loop: str, plat: str | None = None) -> int:
    """Iterations between two convergence tests of the inner loop ``loop`` on ``plat``.

    ``plat`` defaults to the default backend. Static (a Python ``int``): it
    shapes the compiled loop.

    Example:
        >>> check_every("fista", "cpu")
        10
    """
    try:
        strides = _CHECK_EVERY[loop]
    except KeyError:
        raise ValueError(f"no check stride for loop {loop!r}; known: {sorted(_CHECK_EVERY)}") from None
    return strides["cpu" if _is_cpu(plat) else "accelerator"]


def lasso_solver(plat: str | None = None) -> str:
    """What ``solver="auto"`` of the lasso engine means on ``plat``.

    CPU: ``"cd"`` (cyclic coordinate descent), the measured CPU choice of
    ``benchmarks/measured/NOTES.md`` (l1). Accelerators: ``"fista"`` (two
    matrix-vector products per iteration, matrix-matrix under ``vmap``, no
    sequential coordinate loop) -- not measured on a GPU yet (no GPU in this
    session). ``benchmarks/bench_gpu.py`` times both on the classic CV engine
    (``lcd`` rows) so that a GPU run settles it; the CPU numbers of issue 20
    are in NOTES.md (bench_gpu). Only the classic engine and fixed-lambda
    fits use this choice: ``lcd``'s default working-set engine has its own
    inner solver and ignores ``solver``.

    Example:
        >>> lasso_solver("cpu"), lasso_solver("gpu")
        ('cd', 'fista')
    """
    return "cd" if _is_cpu(plat) else "fista"


def limits_lapack_threads(plat: str | None = None) -> bool:
    """Whether ``knockoff_filter``, the lasso engine and the CLI run with one LAPACK thread on ``plat``.

    CPU: yes (:func:`jaxknock._lapack_threads.one_lapack_thread`). jaxlib's CPU LAPACK is scipy's
    OpenBLAS, whose worker threads spin after each call on the cores XLA's own
    threads need; with one thread, ``knockoff_filter`` defaults took 0.73x the
    time at n = 600, p = 200 and 0.87x at n = 2000, p = 1000, and the
    l1-logistic CV 0.88-0.90x (session 49, 2-core VM, ``benchmarks/measured/NOTES.md``).
    Accelerators: no (their solvers are not scipy's; nothing to limit).

    Example:
        >>> limits_lapack_threads("cpu"), limits_lapack_threads("gpu")
        (True, False)
    """
    return _is_cpu(plat)


def loop_over_batch(what: str, plat: str | None = None) -> bool:
    """Whether the batch of ``what`` runs one item at a time (``lax.map`` / Python loop) rather than ``vmap``.

    * ``"snb_path"`` (``sparse_naive_bayes_path(batch_size=None)``): XLA:CPU
      runs a batched scatter (the radix-select histograms) slower than a loop
      over the sparsity levels (``benchmarks/measured/NOTES.md``, naive Bayes),
      so one level at a time on CPU; accelerators ``vmap`` (not measured).
    * ``"stability_subsamples"`` (``stability_selection(chunk_size=None)``):
      one subsample per ``lax.map`` step on CPU -- vmapping subsamples makes
      the path while-loops run in lock step, slower on CPU (NOTES.md, l1
      working-set engine); accelerators ``vmap`` chunks planned from memory
      (not measured).
    * ``"lifted_models"`` (``tune_lifted`` / ``fit_lifted`` with several models
      and ``batch_size=None``): on CPU the models run one after the other
      through the single-model epoch, because XLA:CPU deadlocks on the vmapped
      non-batched epoch. Re-checked for issue 20 with jax/jaxlib 0.10.2:
      ``tune_lifted`` of 2 models on a (784, 128, 10) network, n = 1000, with
      the vmapped epoch forced, hung within its first call (every thread in a
      futex wait, no CPU time for minutes), so the workaround stays.
      Accelerators ``vmap`` the models (not run on a GPU yet: no GPU in this
      session; ``tests/test_lifted.py`` runs the vmapped epoch once on CPU at
      toy size, where it does not hang).
    * ``"svector_problems"`` (``sdp`` / ``mvr`` / ``maxent`` on a ``(B, p, p)``
      stack, a caller's ``vmap`` of them, ``sdp_batch``, asdp's blocks; see
      ``svector._common.batched_one_at_a_time``): one matrix at a time on CPU.
      The same XLA:CPU wedge: vmap-ed Newton SDP loops on a ``(10, 100, 100)``
      stack hung at 0% CPU at warm call 22, 54 and 11 of three runs (asdp's
      blocks at p = 1000: 6 of 12 fresh processes); one at a time never did
      (800 calls) and ran faster (sdp 0.21 vs 0.32 s, maxent 0.148 vs 0.231 s,
      mvr 0.069 vs 0.074 s; compiles 1.7 s vs 2.2-2.5 s). Accelerators
      ``vmap`` (not measured).

    * ``"cv_replicates"`` (``l1_cv`` / ``lcd`` / ``knockoff_filter`` on ``R``
      replicates, homotopy engine, ``batch_mode="auto"``): one replicate after
      another on CPU. Measured (issue 17, session 17, 2-core CPU, n = 600,
      m = 400, 5 folds, R = 10, warm, same answers): sequential 1.58 s, lock
      step 4.0-4.4 s, lock step in chunks of 2 replicates 2.15 s (R = 1:
      0.135 s). The lock step does one batched kink for all 60 members, but
      their Gram rows and inverses (53 MB) no longer fit the 32 MB L3 cache:
      the kink's ``v G_rows`` product took 1.56 ms for 60 members against 35
      us for one replicate's 6, and the lock step runs each grid step to the
      slowest replicate (610 batched kinks against 311-395 per replicate).
      Accelerators run the lock step: there one replicate's kink is a few
      small kernels dominated by launch latency (not measured: no GPU).

    Example:
        >>> loop_over_batch("snb_path", "cpu"), loop_over_batch("snb_path", "gpu")
        (True, False)
    """
    if what not in ("snb_path", "stability_subsamples", "lifted_models", "svector_problems", "cv_replicates"):
        raise ValueError(f"unknown batch {what!r}")
    return _is_cpu(plat)


_LOCKSTEP_SMALL_DESIGN = 40 * 2**20
_LOCKSTEP_CACHE_CHUNK = 8


def lockstep_chunk(design_bytes: int, plat: str | None = None) -> int | None:
    """Subsamples per chunk of the stability lockstep homotopy on ``plat`` (``None``: plan from memory).

    ``design_bytes``: the bytes of ``X`` in every precision the lockstep
    holds (float64 and its float32 copy in mixed precision). Each lockstep
    iteration reads every subsample's ``(A, A)`` active-set inverse and
    ``(A, m)`` active columns, and makes one product with the shared ``X``.
    On the CPU a chunk of 8 keeps the per-subsample arrays in the processor
    cache; a design too large for the cache is streamed from memory once per
    iteration *per chunk*, so there the largest chunk wins. Measured (issue
    21, session 19, 2-core CPU with a 32 MB L3, float64 with the float32
    copy, 50 lambdas, warm, best of 3; ``chunk_size=8`` against the memory
    plan, which takes all subsamples): n = 500, p = 1000 (6 MB), 100
    subsamples: 1.31-1.37 s against 2.85 s; n = 500, p = 2000 (12 MB): 2.00 s
    against 3.27 s; n = 1000, p = 2000 (24 MB), 40 subsamples: 4.40 s against
    5.55 s; n = 1000, p = 3000 (36 MB), 40 subsamples: 5.79 s against 6.65 s;
    n = 1000, p = 5000 (60 MB), 20 subsamples: 5.92 s against 3.95 s. Hence 8
    up to 40 MiB of design, the memory plan above. Accelerators: the memory
    plan (one wide batch; not measured, no GPU).

    Example:
        >>> lockstep_chunk(6 * 2**20, "cpu"), lockstep_chunk(64 * 2**20, "cpu"), lockstep_chunk(6 * 2**20, "gpu")
        (8, None, None)
    """
    if _is_cpu(plat) and design_bytes <= _LOCKSTEP_SMALL_DESIGN:
        return _LOCKSTEP_CACHE_CHUNK
    return None
