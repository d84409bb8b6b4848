"""The engine behind :mod:`jaxknock.l1.working_set`: the path loop, its compiled program and the capacity growth.

:func:`path_core` runs one design's members (the ``K`` training folds and the
full data) along the whole grid: strong-rule screening, the working-set
solver of the chosen engine (``_ws_homotopy``, ``_ws_covariance`` or
``_ws_naive``), the KKT check over all features and the early exits.
:func:`cv_jit` compiles it for one design or a batch, and :func:`run` calls
that program, growing the working-set and active-slot capacities on the host
until nothing overflows (:mod:`jaxknock._capacity`). The public entry points
(``l1_cv``, ``l1_path``, ``member_paths``) and their documentation are in
:mod:`jaxknock.l1.working_set`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock import _aot, _backend, _capacity, _checks, _containers, _memory
from jaxknock._iterate import lockstep_while_loop
from jaxknock._lapack_threads import with_one_lapack_thread
from jaxknock._solution import RESULTS, Solution, raise_if_failed
from jaxknock.l1 import _resolve
from jaxknock.l1 import _ws_covariance as _cov
from jaxknock.l1 import _ws_homotopy as _hom
from jaxknock.l1 import _ws_naive as _naive
from jaxknock.l1.problem import geometric_grid

_DEV_MAX = 0.999
_DEV_REL = 1e-5
_MIN_LAMBDAS_BEFORE_EXIT = 5


def _batch_for(batch_mode: str, engine: str) -> str:
    """How a batch of replicates runs: ``"sequential"`` or ``"lockstep"`` (homotopy engine only)."""
    _checks.check_choice(batch_mode, ("auto", "sequential", "lockstep"), "batch_mode")
    if batch_mode == "auto":
        batch_mode = "sequential" if _backend.loop_over_batch("cv_replicates") else "lockstep"
    return batch_mode if engine == "homotopy" else "sequential"


def engine_for(loss: str, method: str) -> str:
    """``method="auto"``: the homotopy for the squared loss at every shape, the naive engine for the logistic loss.

    Measured (issue 17, session 18, ``benchmarks/measured/NOTES.md``; CV, 5 folds x 100
    lambdas, float64, warm): the homotopy beat coordinate descent with residual updates
    (``"naive"``) at every ``m > 4 n`` tried, 1.4x at n = 1000, m = 20000 and 15-77x at
    n = 300-600, m = 2000-4000, where coordinate descent crawls as the folds' active sets
    approach their rank.
    """
    if loss == "logistic":
        return "naive"
    if method == "auto":
        return "homotopy"
    if method not in ("homotopy", "cov", "naive"):
        raise ValueError(f"method must be 'auto', 'homotopy', 'cov' or 'naive', got {method!r}")
    return method


# A strong-rule candidate also joins up front when the gradients of the last two grid solutions,
# extrapolated linearly to the next penalty, put it within this relative margin of it (``-inf``: never).
# n = 5000, m = 10000: 2253 kinks and 55 KKT checks before (most grid steps solved three times), 911 and
# 29 with 0.03 (once each); a margin of 0.06 admitted enough more features at n = 1000, m = 20000 to
# double the working-set capacity (benchmarks/measured/NOTES.md, session 21).
AHEAD_MARGIN = 0.03


def cache_chunk(m: int) -> int:
    """Features that join the Gram-column cache per step by default: 32, or 8 below 256 features, at most ``m``.

    (``lax.top_k`` picks them, so the chunk cannot exceed ``m``.) The cache holds
    ``W + cache_chunk(m)`` columns (:func:`jaxknock._memory.gram_cache_bytes`).

    Example:
        >>> cache_chunk(1000), cache_chunk(100), cache_chunk(5)
        (32, 8, 5)
    """
    return min(32 if m >= 256 else 8, m)


def _capacity_keys(X, loss: str, engine: str, rows):
    """The capacity store's keys: this batch shape, and one problem of the same shape (``family``)."""
    key = (X.shape, str(X.dtype), loss, engine, rows.shape)
    return key, ("any batch",) + (X.shape[-2:],) + key[1:]


def _designs_that_fit(X, members: int, W: int, chunk: int, slots: int) -> int:
    """How many designs' homotopy caches at capacity ``W`` (:func:`jaxknock._memory.gram_cache_bytes`) take at
    most a quarter of free memory together: ``0`` when not even one does."""
    one = _memory.gram_cache_bytes(members, W + chunk, slots, X.dtype.itemsize)
    return int(_memory.device_memory_bytes() // 4 // max(one, 1))


def _lock_chunk(num_designs: int, fit: int) -> int:
    """Designs per lock-step chunk when only ``fit`` designs' caches fit at once: balanced chunks of at most ``fit``."""
    chunks = -(-num_designs // fit)
    return -(-num_designs // chunks)


def _plain_while_loop(cond_fun, body_fun, operands, init):
    """``lax.while_loop`` with :func:`~jaxknock._iterate.lockstep_while_loop`'s signature (JAX's own vmap rule)."""
    return lax.while_loop(lambda c: cond_fun(operands, c), lambda c: body_fun(operands, c), init)


# fmt: off
def path_core(
    X, y, lambdas, lam0, rows, excl, *, scale, engine, loss, W, chunk, tol, max_steps, patience, early_stop,
    slots=0, keep_members=False, tiered=False,
):
    # fmt: on
    """One design, all members, the whole path (traceable); ``keep_members``: every member's path too.

    ``scale``: :func:`gradient_scale` of the design, which the caller's homotopy certificate uses too.
    """
    mod = {"cov": _cov, "homotopy": _hom, "naive": _naive}[engine]
    if engine in ("homotopy", "cov"):  # the held-out sums only for a design not under vmap (tiered)
        d = mod.cov_data(X, y, rows, excl, gram=_cov.use_gram(*X.shape), held_sums=tiered)
    if engine == "homotopy":
        st = mod.init_state(d, W + chunk, slots)
        extra = {}
    elif engine == "cov":
        st = mod.init_state(d, W + chunk)
        extra = {}
    else:
        d = mod.naive_data(X, y, rows, excl, loss=loss)
        st = mod.init_state(d, W + chunk)
        extra = {"loss": loss}
    L = lambdas.shape[0]
    M = excl.shape[0]
    K = M - 1
    Wc = W + chunk
    dt = X.dtype
    m = X.shape[1]
    lmax = jnp.max(jnp.abs(st.grad[K]))  # the full data's lambda_max, from the engine's own null-model gradient

    def kkt_violation(st, lam):
        b = _cov.coefs_on_all_features(st, m)  # beta is in X's dtype (cov_data)
        g = st.grad
        r_in = jnp.maximum(jnp.abs(g) - lam, 0)
        r_act = jnp.abs(g - lam * jnp.sign(b))
        return jnp.max(jnp.where(b != 0, r_act, r_in)) / lam

    out0 = dict(
        test=jnp.full((L, M), jnp.inf, dt),
        train=jnp.full((L, M), jnp.nan, dt),
        beta=jnp.zeros((L, Wc), dt),
        b0=jnp.zeros((L,), dt),
        kkt=jnp.zeros((L,), dt),
        nnz=jnp.zeros((L,), jnp.int32),
        active=jnp.zeros((L,), jnp.int32),
        steps=jnp.zeros((L,), jnp.int32),  # epochs (homotopy: kinks) at each lambda, over its KKT rounds
        size=jnp.zeros((L,), jnp.int32),  # the working set at each lambda
    )
    if keep_members:
        out0.update(members=jnp.zeros((L, M, Wc), dt), ok=jnp.zeros((L,), bool))

    # Both loops are lockstep_while_loop: under vmap (a batch of designs, homotopy engine) the batch
    # runs in lock step without copying the caches each iteration, so every step below is gated by
    # ``go`` (a finished design is left exactly as it is).
    # The other engines' inner solvers are not gated: they keep JAX's own rule (a select per iteration).
    lock = engine == "homotopy"
    loop = lockstep_while_loop if lock else _plain_while_loop
    # the naive engine's active-set Newton steps (a lax.cond), except in member_paths, which
    # stability selection vmaps (there the cond would run both branches on every sweep)
    accel = {"accel": not keep_members} if engine == "naive" else {}

    def icond(ops, ic):
        st, it, clean, _, _ = ic
        return ~clean & ~st.overflow & (it < max_steps)

    def ibody(ops, ic):
        d, lam, tol = ops
        st, it, clean, ep, conv = ic
        go = icond(ops, ic)
        gate = {"active": go, "tiered": tiered} if lock else {}  # only the homotopy's solver is gated
        st, e, done = mod.solve_ws(d, st, lam, tol, max_steps, **extra, **gate, **accel)
        st = mod.kkt_refresh(d, st, go, **extra)
        sc = jnp.max(jnp.abs(st.grad), axis=0) / lam
        viol = (sc > 1.0) & ~st.inws & go
        st = mod.add_features(d, st, viol, sc, chunk, W)
        return st, it + go, jnp.where(go, ~jnp.any(viol), clean), ep + jnp.where(go, e, 0), jnp.where(go, done, conv)

    def cond(ops, c):
        return (c[1] < L) & ~c[2]

    def body(ops, c):
        d, lambdas, lam0, tol, scale, lmax = ops  # operands, not closures: the loop is a custom_vmap
        st, k, stop, out, best, steps, ok_all, gprev = c
        go = cond(ops, c)
        lam = at_lambda_max(lambdas[jnp.minimum(k, L - 1)], lmax)
        lam_prev = jnp.where(k == 0, lam0, lambdas[jnp.clip(k - 1, 0, L - 1)])
        lam_prev2 = jnp.where(k <= 1, lam0, lambdas[jnp.clip(k - 2, 0, L - 1)])
        thr = 2 * lam - lam_prev
        score = jnp.max(jnp.abs(st.grad), axis=0) / jnp.maximum(thr, lam * 1e-3)
        # strong-rule candidates: only the top chunk joins up front (the union over members of
        # near-threshold noise features is large), with every candidate that the gradients of the
        # last two grid solutions, extrapolated linearly in lambda, put above this penalty (the
        # features that will join, nearly all: each one the KKT check finds later costs a redo)
        # no slope across a repeated penalty (the grid is non-increasing; with x64 off a float64 grid 1e-9
        # apart repeats after the cast): x / 0 made the scores NaN, and add_features, which takes a candidate
        # only at a score >= 1, looped forever (lasso_cv hung)
        step_prev = lam_prev - lam_prev2
        slope = jnp.where((k >= 2) & (step_prev != 0), (lam - lam_prev) / jnp.where(step_prev != 0, step_prev, 1), 0)
        ahead = jnp.max(jnp.abs(st.grad + slope * (st.grad - gprev)), axis=0) / lam
        out_ws = jnp.where(st.inws, -1.0, score)
        few = jnp.sum(out_ws >= 1) <= chunk  # then all of them join: no sort needed
        top = lax.cond(few, lambda s: jnp.asarray(-jnp.inf, s.dtype), lambda s: lax.top_k(s, chunk)[0][-1], out_ws)
        join = (score >= 1) & ((score >= top) | (ahead >= 1 - AHEAD_MARGIN))
        gprev = jnp.where(go, st.grad, gprev)
        st = mod.add_features(d, st, join & go, jnp.maximum(score, ahead), chunk, W)

        ic0 = (st, jnp.int32(0), ~go, jnp.int32(0), jnp.bool_(True))
        # the inner solvers' KKT target, not below the rounding floor of the gradient (float32: kkt_bound)
        tol_k = jnp.maximum(tol, _rounding_floor(dt, lam, scale)).astype(tol.dtype)
        st, _, clean, ep, conv = loop(icond, ibody, (d, lam, tol_k), ic0)
        if engine == "homotopy":
            st = mod.accept(st)  # a finished design: its current point is already its anchor
        if keep_members:  # member_paths: no CV / deviance statistics (saves two passes over the cache)
            train, test, b0 = jnp.zeros((M,), dt), jnp.full((M,), jnp.inf, dt), jnp.zeros((M,), dt)
        else:
            train, test, b0 = mod.fit_stats(d, st, **extra)
        out_prev = out
        viol = kkt_violation(st, lam)
        at = jnp.where(go, k, L)  # a finished design records nothing (out of range: dropped)
        nonzero = (st.beta != 0) & (jnp.arange(Wc) < st.size)
        nnz = jnp.sum(nonzero[K]).astype(jnp.int32)
        out = dict(
            test=out["test"].at[at].set(test, mode="drop"),
            train=out["train"].at[at].set(train, mode="drop"),
            beta=out["beta"].at[at].set(st.beta[K], mode="drop"),
            b0=out["b0"].at[at].set(b0[K], mode="drop"),
            kkt=out["kkt"].at[at].set(viol, mode="drop"),
            nnz=out["nnz"].at[at].set(nnz, mode="drop"),
            active=out["active"].at[at].set(jnp.max(jnp.sum(nonzero, axis=1)).astype(jnp.int32), mode="drop"),
            steps=out["steps"].at[at].set(ep, mode="drop"),
            size=out["size"].at[at].set(st.size.astype(jnp.int32), mode="drop"),
        )
        if keep_members:
            finite_k = jnp.all(jnp.isfinite(st.beta))
            out.update(
                members=out_prev["members"].at[at].set(st.beta, mode="drop"),
                ok=out_prev["ok"].at[at].set(conv & clean & finite_k, mode="drop"),
            )
        # early exits
        best_k, best_m, best_se = best
        if K > 0:
            errs = test[:K]
            cvm = errs.mean()
            se = errs.std(ddof=1) / float(np.sqrt(K))  # a weak Python float: float32 stays float32 under x64
            better = go & (cvm < best_m)
            best = (jnp.where(better, k, best_k), jnp.where(better, cvm, best_m), jnp.where(better, se, best_se))
            stop_cv = (k - best[0] >= patience) & (cvm > best[1] + best[2])
        else:
            stop_cv = jnp.bool_(False)
        r2 = 1 - train[K] / d.yvar[K]
        r2_prev = 1 - out["train"][jnp.clip(k - 1, 0, L - 1), K] / d.yvar[K]
        stop_dev = (k >= _MIN_LAMBDAS_BEFORE_EXIT - 1) & ((r2 > _DEV_MAX) | (r2 - r2_prev < _DEV_REL * r2))
        new_stop = early_stop & (stop_cv | stop_dev)
        finite = jnp.all(jnp.isfinite(st.beta))
        new_stop = new_stop | st.overflow | ~finite
        if engine == "homotopy" and not keep_members and jnp.finfo(dt).bits < 64:
            # float32: a grid step that fails its certificate has lost the path (near the rank of the folds, p > n,
            # the updated inverse carries a condition number near 1 / eps; the kinks after it cycle to their
            # budget). The path stops there: the design fails, and l1_cv / l1_path solve it again in float64
            new_stop = new_stop | (go & (viol > kkt_bound(tol, dt, lam, scale)))
        ok_all = jnp.where(go, ok_all & conv & clean & finite, ok_all)
        return st, k + go, jnp.where(go, new_stop, stop), out, best, steps + jnp.where(go, ep, 0), ok_all, gprev

    inf = jnp.asarray(jnp.inf, dt)
    c0 = (st, jnp.int32(0), jnp.bool_(False), out0, (jnp.int32(0), inf, inf), jnp.int32(0), jnp.bool_(True), st.grad)
    st, nsolved, _, out, _, steps, ok_all, _ = loop(cond, body, (d, lambdas, lam0, tol, scale, lmax), c0)
    return st, nsolved, out, steps, ok_all


@functools.partial(
    jax.jit,
    static_argnames=(
        "engine", "loss", "W", "chunk", "max_steps", "patience", "early_stop", "rule", "slots", "num_lambdas", "batch",
        "lock_chunk",
    ),
)  # fmt: skip
def cv_jit(
    X, y, lambdas, rows, excl, tol, eps=None, *, engine, loss, W, chunk, max_steps, patience, early_stop, rule, slots,
    num_lambdas=None, batch="sequential", lock_chunk=None,
):  # fmt: skip
    """The engine on one design or a batch; ``lambdas=None``: the default grid (``eps``, ``num_lambdas``) inside.

    A batch runs ``"sequential"`` (``lax.map``) or, homotopy engine only, in ``"lockstep"`` (``vmap``;
    ``lock_chunk`` designs at a time, one chunk after another, the last one padded with copies of the
    last design: the caches of a whole batch need not fit in memory at once).
    """
    if lambdas is None:  # in the same program: a fresh process compiles every program it runs
        lambdas = default_grid(X, y, eps, num_lambdas)

    def one(X, y, lambdas, tiered=True):
        return _cv_one(
            X, y, lambdas, rows, excl, tol, engine=engine, loss=loss, W=W, chunk=chunk, max_steps=max_steps,
            patience=patience, early_stop=early_stop, rule=rule, slots=slots, tiered=tiered,
        )  # fmt: skip

    if X.ndim == 3:
        if batch == "lockstep":
            # one path loop for the whole batch: every loop of the homotopy engine is a
            # lockstep_while_loop whose finished designs are no-ops, so no carry is copied
            R = X.shape[0]
            lock = functools.partial(one, tiered=False)  # under vmap, a switch of slot tiers runs every tier
            if lock_chunk is None or lock_chunk >= R:
                return jax.vmap(lock)(X, y, lambdas)
            nc = -(-R // lock_chunk)

            def chunked(a):
                a = jnp.concatenate([a, jnp.broadcast_to(a[-1:], (nc * lock_chunk - R,) + a.shape[1:])])
                return a.reshape((nc, lock_chunk) + a.shape[1:])

            out = lax.map(lambda a: jax.vmap(lock)(*a), (chunked(X), chunked(y), chunked(lambdas)))
            return jax.tree.map(lambda a: a.reshape((nc * lock_chunk,) + a.shape[2:])[:R], out)
        # replicates one after another (lax.map): on the CPU each replicate's caches stay in
        # the processor cache (see _backend.loop_over_batch("cv_replicates"))
        return lax.map(lambda a: one(*a), (X, y, lambdas))
    return one(X, y, lambdas)


def _cv_one(
    X, y, lambdas, rows, excl, tol, *, engine, loss, W, chunk, max_steps, patience, early_stop, rule, slots, tiered,
):  # fmt: skip
    m = X.shape[1]
    M = excl.shape[0]
    K = M - 1
    lam0 = lambdas[0]
    scale = gradient_scale(X, y, lambdas)
    st, nsolved, out, steps, ok_all = path_core(
        X,
        y,
        lambdas,
        lam0,
        rows,
        excl,
        scale=scale,
        engine=engine,
        loss=loss,
        W=W,
        chunk=chunk,
        tol=tol,
        max_steps=max_steps,
        patience=patience,
        early_stop=early_stop,
        slots=slots,
        tiered=tiered,
    )
    L = lambdas.shape[0]
    Wc = W + chunk
    valid = jnp.arange(Wc) < st.size
    solved = jnp.arange(L) < nsolved
    stats = dict(
        lambdas=lambdas,
        num_lambdas_solved=nsolved,
        kkt=jnp.max(out["kkt"]),
        num_steps=steps,
        max_steps=jnp.int32(max_steps),
        overflow=st.overflow,
        slot_overflow=getattr(st, "slot_over", jnp.bool_(False)),
        working_set_size=st.size,
        peak_active=jnp.max(out["active"]),
        train_loss=jnp.where(solved, out["train"][:, K], jnp.nan),
        nnz=out["nnz"],
        # per lambda (0 past the last solved one): relative KKT violation, epochs (kinks), working-set size
        kkt_path=out["kkt"],
        steps_path=out["steps"],
        working_set_path=out["size"],
    )
    if K > 0:
        err = jnp.where(solved[:, None], out["test"][:, :K], jnp.inf)
        cvm = err.mean(1)
        se = jnp.where(solved, err.std(1, ddof=1) / float(np.sqrt(K)), jnp.inf)
        i_min = jnp.argmin(cvm)
        i_1se = jnp.argmax(cvm <= cvm[i_min] + se[i_min])
        i = i_min if rule == "min" else i_1se
        stats.update(cv_error=err, cv_mean=cvm, cv_se=se, lam_index_min=i_min, lam_index_1se=i_1se)
    else:
        i = nsolved - 1
    b = jnp.zeros((m,), X.dtype).at[st.idx].add(jnp.where(valid, out["beta"][i], 0))
    stats.update(lam=lambdas[i], lam_index=i, intercept=out["b0"][i], nnz_chosen=jnp.sum(b != 0))
    stats["gap"] = _naive.gap(X, y, b, out["b0"][i], lambdas[i], loss=loss)  # every engine's fit, one formula
    path = jnp.zeros((L, m), X.dtype).at[:, st.idx].add(jnp.where(valid[None], out["beta"], 0))
    path = jnp.where(solved[:, None], path, jnp.nan)
    stats["coef_path"] = path
    stats["intercept_path"] = jnp.where(solved, out["b0"], jnp.nan)
    converged = ok_all & ~st.overflow
    if engine == "homotopy":  # exact between kinks: the KKT check is the certificate
        bound = kkt_bound(tol, b.dtype, lambdas, scale)
        converged = converged & jnp.all(jnp.where(solved, out["kkt"] <= bound, True))
    finite = jnp.all(jnp.isfinite(b))
    code = jnp.where(converged, jnp.int32(RESULTS.successful), jnp.int32(RESULTS.max_steps_reached))
    code = jnp.where(finite, code, jnp.int32(RESULTS.nonfinite))
    return Solution(b, code, stats, None)


def at_lambda_max(lam, lmax):
    r"""``lam``, or ``lmax`` where ``lam`` lies below it by no more than rounding (a relative ``1000 eps``).

    A grid that starts at :math:`\lambda_{\max}` computes it by another sum than the engine's null-model
    gradient, so its first penalty can lie an ulp below the engine's :math:`\max_j |g_j|`; the path then
    moved there and reported a coefficient of ``1e-16`` at :math:`\lambda_{\max}` (17 of 40 random designs,
    session 50). Within this margin the solution at ``lmax`` (all zero) meets the KKT conditions at ``lam``
    to a relative ``1000 eps``, below every certificate's floor (:func:`kkt_bound`).
    """
    rho = 1000 * jnp.finfo(lmax.dtype).eps
    return jnp.where((lam < lmax) & (lam >= lmax * (1 - rho)), lmax, lam)


def gradient_scale(X, y, lambdas):
    r"""``lam0 = max(lambdas[0], lambda_max(X, y))``: the size of the gradient :math:`X_c^\top r / n` along the path.

    The grid's largest penalty alone was not it for a grid that starts below
    :math:`\lambda_{\max}`: with ``lambdas=[1e-12]`` the floor was ``100 eps`` relative to ``1e-12``, an
    absolute KKT target of ``2e-26`` against a gradient computed to ``~1e-17``, and both engines reported
    ``max_steps_reached`` on problems the classic engine solved (session 40).
    """
    return jnp.maximum(lambdas[0], _lambda_max(X, y))


def kkt_bound(tol, dtype, lambdas, lam0):
    r"""The homotopy certificate: the largest relative KKT violation at each of ``lambdas`` accepted as rounding.

    ``max(tol, 1e-6, 1000 eps, 100 eps lam0 / lam)``. The last term is the
    rounding floor of the gradient: :math:`X^\top r / n` is computed to about
    ``eps * lam0`` in absolute terms (``lam0`` = :func:`gradient_scale`,
    :math:`\lambda_{\max}` on the default grid), so relative to ``lam`` its floor
    grows as the path descends. It only matters in float32: at
    ``lam = 1e-3 lam0`` it is ``1.2e-2`` there and ``2.2e-11`` in float64.
    """
    return jnp.maximum(jnp.maximum(tol, 1e-6), _rounding_floor(dtype, lambdas, lam0))


def _rounding_floor(dtype, lambdas, lam0):
    r"""``max(1000 eps, 100 eps lam0 / lam)``: the relative KKT violation that rounding alone can leave.

    The coordinate-descent and proximal-Newton engines (``cov``, ``naive``, and so the
    logistic loss) solve to ``max(tol, floor)``: in float32 a target of ``tol = 1e-5``
    is below the floor at every penalty, and the logistic CV at n = 200, m = 50 ran to
    its step budget on most grid points (163 027 epochs, ``max_steps_reached``, 9 s;
    session 27). In float64 the floor is ``2.2e-13`` and ``tol`` decides.
    """
    eps = float(jnp.finfo(dtype).eps)
    return jnp.maximum(1000 * eps, 100 * eps * lam0 / lambdas)


@jax.jit
def _lambda_max(X, y):
    Xc_y = (X - X.mean(-2, keepdims=True)) * (y - y.mean(-1, keepdims=True))[..., None]
    return jnp.max(jnp.abs(Xc_y.sum(-2)), axis=-1) / X.shape[-2]


def prepare(X, y, loss):
    X = jnp.asarray(X)
    if not jnp.issubdtype(X.dtype, jnp.floating):
        X = X.astype(jnp.result_type(float))
    y = jnp.asarray(y, X.dtype)
    if X.ndim not in (2, 3):
        raise ValueError(f"X must be (n, m) or (R, n, m), got {X.shape}")
    if y.shape != X.shape[:-1]:
        raise ValueError(f"y must have shape {X.shape[:-1]}, got {y.shape}")
    if loss not in ("squared", "logistic"):
        raise ValueError(f"loss must be 'squared' or 'logistic', got {loss!r}")
    _checks.check_finite_on_device(X, "X")
    # a front end (lasso_path, lasso_cv, lcd) checked y and trusts it here: reading it back again was the (n,)
    # response in every warm call, and lcd's (R, n) broadcast of one y over R replicates
    if _checks.is_concrete(y) and not _checks.values_trusted():
        _checks.check_finite_on_device(y, "y")
        # each distinct response (a batch usually repeats one y): the checks of lasso_cv, with an intercept
        # (by their bytes: np.unique(axis=0) makes an n-field record type, 0.44 s at n = 80 000)
        rows = np.asarray(jax.device_get(y)).reshape(-1, y.shape[-1])
        for row in {r.tobytes(): r for r in rows}.values():
            _checks.check_model_response(row, loss=loss, fit_intercept=True)
    if loss == "logistic":
        y = _checks.as_binary_labels(y, X.dtype)  # {-1, 1} -> {0, 1}, as lasso_cv
    return X, y


@with_one_lapack_thread
def run(X, y, lambdas, rows, excl, **kw):
    """The engine with capacity growth (:func:`_run`), with one LAPACK thread on the CPU while its programs run.

    The naive engine's active-set Newton steps are small batched Cholesky factors among XLA's own work; the
    OpenBLAS threads of jaxlib's LAPACK would spin on the cores XLA needs (:mod:`jaxknock._lapack_threads`).
    """
    return _run(X, y, lambdas, rows, excl, **kw)


def _run(
    X, y, lambdas, rows, excl, *, loss, method, tol, max_steps, patience, early_stop, rule, max_features,
    grid=None, batch_mode="auto",
):  # fmt: skip
    """The engine with capacity growth; ``lambdas=None``: the default grid ``grid = (eps, num_lambdas)``."""
    m = X.shape[-1]
    engine = engine_for(loss, method)
    batch = _batch_for(batch_mode, engine)
    chunk = cache_chunk(m)
    key, per_problem = _capacity_keys(X, loss, engine, rows)
    # start where the last call of this shape (or batch size) ended: each growth is a compilation (_capacity.py)
    known = _capacity.STORE.lookup(key, family=per_problem)
    n = X.shape[-2]
    if known is None:  # nothing remembered: a start sized to the shape (_capacity.start_width)
        W = min(max_features or _capacity.start_width(m, n, whole_grid=not early_stop), m)
        A = _capacity.start_slots(_capacity.slots_for(W), W, chunk, n, whole_grid=not early_stop)
    else:
        W = min(max_features or known[0], m)
        A = min(known[1], W + chunk)
    start = (W, A)
    while True:
        lock_chunk = None
        if engine == "homotopy":
            fit = _designs_that_fit(X, excl.size, W, chunk, A)
            if X.ndim == 3 and batch == "lockstep" and 1 <= fit < X.shape[0]:
                # the batch's caches in chunks that fit (None when all fit: one program for the common case)
                lock_chunk = _lock_chunk(X.shape[0], fit)
            elif fit < 1 and method == "auto":
                # a working set whose Gram cache would not fit: residual updates keep no W x W cache
                engine, batch = "naive", "sequential"
                key, per_problem = _capacity_keys(X, loss, engine, rows)
        sol = _aot.call(  # a fresh process loads the traced program (jaxknock/_aot.py)
            cv_jit,
            X,
            y,
            lambdas,
            np.asarray(rows, np.int32),  # host arrays go in with the call (jnp.asarray would be a program)
            np.asarray(excl, np.int32),
            _checks.call_scalar(tol, X.dtype),
            None if grid is None else _checks.call_scalar(grid[0], X.dtype),
            num_lambdas=None if grid is None else int(grid[1]),
            engine=engine,
            loss=loss,
            W=W,
            chunk=chunk,
            max_steps=max_steps,
            patience=patience,
            early_stop=early_stop,
            rule=rule,
            slots=A if engine == "homotopy" else 0,
            batch=batch,
            lock_chunk=lock_chunk,
        )
        over = sol.stats["overflow"]
        if isinstance(over, jax.core.Tracer) or not np.any(np.asarray(over)):
            break
        few = np.flatnonzero(np.asarray(over))
        if X.ndim == 3 and batch == "sequential" and max_features is None and few.size <= X.shape[0] // 2:
            # a few replicates outgrew the batch's capacity: only those run again, each alone at its own
            kw = dict(loss=loss, method=method, tol=tol, max_steps=max_steps, patience=patience, early_stop=early_stop)
            solve = _solver(rows, excl, rule=rule, grid=grid, max_features=None, **kw)
            sol = _resolve.rerun_alone(sol, few, X, y, lambdas, solve)
            break
        slots_full = engine == "homotopy" and bool(np.any(np.asarray(sol.stats["slot_overflow"]))) and A < W + chunk
        if not slots_full and (max_features is not None or W >= m):
            break
        W, A = _capacity.grow(
            W, A, *_used(sol, engine), slots_full=slots_full, max_W=m if max_features is None else W, chunk=chunk
        )
        if not early_stop and not slots_full:
            if max_features is None and _solved_fraction(sol, over) < 0.5:
                # a whole grid that outgrew its working set before half its penalties keeps growing it (p > n:
                # 512 at 25% of the grid, 1426 at its end); one ladder step more saves a compilation and a run
                W = min(_capacity.next_capacity(W), m)
            # it ends near min(n, m) active features: all the slots it can use
            A = _capacity.start_slots(A, W, chunk, n, whole_grid=True)
    if max_features is None:
        varies = known is not None and (W, A) != start  # an earlier call's capacities did not suffice: headroom
        _capacity.STORE.remember(key, *next_start(sol, X, W, A, chunk, engine, varies), family=per_problem)
    return sol


def _solved_fraction(sol, over) -> float:
    """The smallest fraction of the grid solved by a design that overflowed (``over``: its flags)."""
    solved = np.asarray(sol.stats["num_lambdas_solved"]).reshape(-1)[np.asarray(over).reshape(-1)]
    return float(solved.min()) / np.asarray(sol.stats["lambdas"]).shape[-1]


def run_certified(X, y, lambdas, rows, excl, *, throw, **kw):
    """:func:`run`, then float32 designs whose fit failed its certificate solved again in float64."""
    sol = _resolve.refit_float64(run(X, y, lambdas, rows, excl, **kw), X, y, lambdas, _solver(rows, excl, **kw))
    return raise_if_failed(sol, throw, "lasso_working_set")


def _solver(rows, excl, **kw):
    """``(X, y, lambdas) -> run(X, y, lambdas, rows, excl, **kw)``."""
    return lambda X, y, lambdas: run(X, y, lambdas, rows, excl, **kw)


def next_start(sol, X, W, A, chunk, engine, varies=True):
    """``(W, A)`` for the next call: those that sufficed; :func:`jaxknock._capacity.headroom` too for one problem
    that ``varies`` (outgrew an earlier call's). A batch keeps its own (see :func:`_resolve.rerun_alone`)."""
    st = sol.stats
    if X.ndim == 3 and X.shape[0] > 1 or isinstance(st["working_set_size"], jax.core.Tracer) or not varies:
        return W, A
    return _capacity.headroom(W, A, *_used(sol, engine), max_W=X.shape[-1], chunk=chunk)


def _used(sol, engine: str) -> tuple[int, int]:
    """The largest working set and active set (``peak_active``) a call (or any replicate of a batch) used.

    The active set counts only for the homotopy engine (the others have no slots): 0 otherwise.
    """
    used_W = int(np.max(np.asarray(sol.stats["working_set_size"])))
    return used_W, int(np.max(np.asarray(sol.stats["peak_active"]))) if engine == "homotopy" else 0


@functools.partial(jax.jit, static_argnums=3)
def default_grid(X, y, eps, num_lambdas):
    """The default penalty grid: ``num_lambdas`` geometric steps from ``lambda_max`` down to ``eps`` times it."""
    return geometric_grid(_lambda_max(X, y), num_lambdas, eps)


def descending_order(lambdas):
    """The stable permutation that sorts a concrete grid largest first, or ``None`` if it needs none.

    The engine takes a non-increasing grid (:func:`validated_grid`); the front ends that accept any order
    (:func:`jaxknock.lasso_cv`, :func:`jaxknock.statistics.lcd`) hand it ``lambdas[order]``. ``None`` for a
    grid already in order, for a traced one (the engine poisons a traced grid out of order) and for ``None``
    (the default grid).
    """
    if lambdas is None or not _checks.is_concrete(lambdas):
        return None
    values = np.asarray(lambdas)
    return np.argsort(-values, kind="stable") if np.any(np.diff(values) > 0) else None


def validated_grid(X, y, lambdas, num_lambdas, eps):
    """Validated ``lambdas``, or ``None`` for the default grid (computed inside the engine's program)."""
    if lambdas is None:
        if num_lambdas < 1 or not 0 < eps < 1:
            raise ValueError("num_lambdas must be >= 1 and eps in (0, 1)")
        # one grid length for all replicates (a shared program); each replicate gets its own scale
        return None
    if jnp.ndim(lambdas) != 1 or jnp.size(lambdas) == 0:
        raise ValueError("lambdas must be a non-empty 1-D array of positive penalties")
    if _checks.is_concrete(lambdas):
        # on the host: jnp comparisons of a constant are traced under an outer jit (bool() of them failed)
        values = np.asarray(_containers.host_numeric(lambdas, "lambdas"), np.float64)  # a masked penalty is refused
        if not np.all((values > 0) & np.isfinite(values)):  # an inf penalty ran, max_steps_reached, lam = inf
            raise ValueError(f"lambdas must be a non-empty 1-D array of positive, finite penalties, got {values}")
        if np.any(np.diff(values) > 0):
            raise ValueError("lambdas must be decreasing")
        lambdas = jnp.asarray(lambdas, X.dtype)
    else:  # traced: a non-positive, NaN or increasing grid is all NaN (every solve fails)
        lambdas = jnp.asarray(lambdas, X.dtype)
        lambdas = _checks.poison(jnp.all(lambdas > 0) & jnp.all(jnp.diff(lambdas) <= 0), lambdas)
    return jnp.broadcast_to(lambdas, X.shape[:-2] + lambdas.shape)
