r"""Stability selection (Meinshausen & Bühlmann 2010; complementary pairs, Shah & Samworth 2013).

For ``B`` random subsamples :math:`I_b` of ``floor(n * fraction)`` rows and a
decreasing grid :math:`\lambda_1 > \dots > \lambda_L`, the lasso (or
l1-logistic regression) is fitted on every subsample along the whole grid, and

.. math::

    \hat\Pi_j(\lambda) = \frac1B \sum_{b=1}^B \mathbf 1\{\hat\beta_j^{\lambda}(I_b) \neq 0\}

is the selection probability of feature ``j`` at ``lambda``. The stable set is
:math:`\hat S = \{j : \max_{\lambda \in \Lambda} \hat\Pi_j(\lambda) \ge \pi_{thr}\}`
over a range :math:`\Lambda = \{\lambda_1, \dots, \lambda_k\}` (a prefix of the
grid). With :math:`q_\Lambda` the average number of features selected per
subsample somewhere on :math:`\Lambda` (the size of the union of the
supports along the range, averaged over the subsamples) the expected number
of false selections obeys

* Meinshausen & Bühlmann (2010), Theorem 1 (exchangeability and
  better-than-random assumptions), and Shah & Samworth (2013), Theorem 1,
  for complementary pairs without further assumptions (for the variables of
  low selection probability :math:`\theta = q/p`):

  .. math:: \mathbb E[V] \le \frac{q_\Lambda^2}{(2\pi_{thr} - 1)\,p};

* Shah & Samworth (2013), equation (8), complementary pairs under the
  *unimodal* assumption (``assumption="unimodal"``, the default with pairs;
  ``B`` the number of pairs, :math:`\theta = q/p`):

  .. math:: \mathbb E[V] \le \frac{q_\Lambda^2}{p\, C(\pi_{thr}, B)},\quad
     C = \begin{cases} 2(2\pi - 1 - \tfrac1{2B}) & \pi \le \tfrac34,\\
     \frac{1 + 1/B}{4(1 - \pi + \tfrac1{2B})} & \pi > \tfrac34,\end{cases}

  valid for :math:`\pi \ge \tfrac12 + \min(\theta^2, \tfrac1{2B} + \tfrac34\theta^2)`;
  the reported bound is the smaller of the two (the first where eq. (8) does not apply). The r-concave bound of the same
  paper (a numerical optimisation) is not implemented.

All ``B x L`` fits are one compiled program: the subsamples are drawn on the
device from the key (:func:`stability_subsamples`). With the squared loss and
an intercept (``solver="auto"``, the default) every subsample follows its
*exact* lasso path (LARS-lasso homotopy) and all subsamples take their kinks
in lockstep on the shared ``X`` (:mod:`jaxknock._stability_path`): one loop
iteration is one kink of every subsample of a chunk, made of one matrix
product with ``X`` for the whole chunk (each subsample keeps its active
columns), and the supports at the grid penalties are recorded per interval
between kinks (the supports are exact, not subject to a solver tolerance; for
a float64 ``X`` that product runs in float32 with exact float64 corrections,
see ``mixed_precision``). The logistic loss (or
``solver="working_set"``) uses the working-set engine of
:mod:`jaxknock.l1.working_set` (:func:`~jaxknock.l1.working_set.member_paths`:
a complementary pair is one design of its ``2 m`` rows, its halves the two
members; proximal-Newton working sets for the logistic loss). Without an
intercept, with ``devices=`` / ``mesh=`` (:func:`jaxknock.distributed.shard_batch`)
or with ``solver="fista"`` (etc.), the warm-started path of
:mod:`jaxknock.l1.path` runs on each subsample instead. These batched fits
(each engine's chunking, the working-set capacities) are in
:mod:`jaxknock._stability_engine`; this module picks the engine and turns its
selection counts into the result. Timings: ``benchmarks/bench_stability.py``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxknock import _checks, _mesh, _stability_engine
from jaxknock.l1.problem import as_lambdas, centre_on_host, lambda_grid, prepare_data
from jaxknock.l1.settings import make_settings

__all__ = ["StabilityResult", "stability_bound", "stability_selection", "stability_subsamples"]

ASSUMPTIONS = ("unimodal", "none")
ENGINE_SOLVERS = ("auto", "working_set", "lockstep")
# threshold used when expected_false is given without a threshold and no threshold meets it on the whole grid
_FALLBACK_THRESHOLD = 0.9


class StabilityResult(NamedTuple):
    """Result of :func:`stability_selection`.

    Attributes:
        probabilities: ``(p, L)`` selection probabilities per feature and lambda.
        max_probability: ``(p,)`` maximum over the chosen range (the first ``num_lambdas_used`` lambdas).
        selected: ``(p,)`` bool, ``max_probability >= threshold``.
        threshold: the selection threshold :math:`\\pi_{thr}`.
        bound: upper bound on the expected number of false selections E[V].
        q: average number of features selected per subsample over the chosen range.
        q_path: ``(L,)`` the same for every prefix ``lambdas[:k+1]``.
        lambdas: ``(L,)`` the grid (decreasing).
        num_lambdas_used: length ``k`` of the chosen range ``lambdas[:k]``.
        assumption: ``"unimodal"`` (Shah-Samworth eq. 8) or ``"none"`` (q^2/((2 pi - 1) p)).
        num_failed: ``(L,)`` number of subsample fits per lambda that did not converge. The
            working-set engine solves the two halves of a complementary pair as one design and
            certifies them together, so a pair that did not converge counts as two failed fits
            (an upper bound on the halves that failed).
        expected_false: the target E[V] asked for (``None``: the whole grid at ``threshold``).
    """

    probabilities: jax.Array
    max_probability: jax.Array
    selected: np.ndarray
    threshold: float
    bound: float
    q: float
    q_path: np.ndarray
    lambdas: jax.Array
    num_lambdas_used: int
    assumption: str
    num_failed: np.ndarray
    expected_false: float | None = None

    @property
    def explanation(self) -> str | None:
        """Why the result says little, in one sentence; ``None`` when the bound is informative.

        Three cases, the first that applies. Subsample fits that did not
        converge (``num_failed``): their supports count as empty, so the
        selection probabilities, ``q`` and the bound are understated. Nothing
        selected (which range and threshold were used). Or a *vacuous* bound:
        ``bound >= `` the number selected, so the guarantee allows every
        selection to be false. This is what ``expected_false=None`` (the whole
        grid) gives when ``p`` is small against ``n``, where the lasso on half
        the rows selects nearly every feature at the small end of the grid.
        """
        k, nsel = int(self.num_lambdas_used), int(np.sum(self.selected))
        failed = np.asarray(self.num_failed)
        if failed.sum() > 0:
            first = int(np.flatnonzero(failed)[0])
            return (
                f"{int(failed.sum())} subsample fits did not converge (from lambdas[{first}] on): their supports "
                "count as empty, so the selection probabilities, q and the error bound are understated; "
                "raise max_steps or shorten the grid (raise eps)"
            )
        if k == 0:
            return (
                f"nothing selected: even lambdas[:1] gives q = {float(self.q_path[0]):.3g} features per subsample, "
                f"more than expected_false={self.expected_false} allows at threshold {self.threshold:.3g}; "
                "raise expected_false or start the grid closer to lambda_max"
            )
        if nsel == 0:
            return (
                f"nothing selected: no feature reaches threshold {self.threshold:.3g} over lambdas[:{k}] "
                f"(largest selection probability {float(jnp.max(self.max_probability)):.3g})"
            )
        if self.bound >= nsel:
            return (
                f"the error bound says nothing here: E[false selections] <= {self.bound:.3g}, not below the "
                f"{nsel} selected (q = {self.q:.3g} features per subsample over lambdas[:{k}]); pass "
                "expected_false= (a target E[V]; the default, 1, cuts the lambda range; --expected-false in the CLI), "
                "or raise threshold"
            )
        return None


# --------------------------------------------------------------------------
# Error control (host side, plain floats)
# --------------------------------------------------------------------------


def stability_bound(q, p, threshold, *, num_pairs=None, assumption="none") -> float:
    r"""Upper bound on the expected number of false selections E[V].

    ``assumption="none"``: :math:`q^2 / ((2\pi_{thr} - 1) p)` (Meinshausen &
    Bühlmann 2010, Theorem 1; Shah & Samworth 2013, Theorem 1, for
    complementary pairs). ``assumption="unimodal"`` (complementary pairs only,
    ``num_pairs`` = ``B``): the smaller of that and Shah & Samworth (2013),
    equation (8) (see the module docstring), which applies from
    :math:`\pi \ge 1/2 + \min(\theta^2, 1/(2B) + 3\theta^2/4)` on.

    Example:
        >>> stability_bound(10, 1000, 0.9)  # 100 / (0.8 * 1000)
        0.125
        >>> round(stability_bound(10, 1000, 0.9, num_pairs=50, assumption="unimodal"), 6)
        0.043137
    """
    _checks.check_choice(assumption, ASSUMPTIONS, "assumption")
    # p = 10.5 was truncated to 10, num_pairs = 0 was reported as None, and a negative or NaN q gave a
    # "bound" (q^2 of q = -2 is that of q = 2)
    p, num_pairs = _checks.int_setting(p), _checks.int_setting(num_pairs)
    if not (_checks.is_int(p) and p >= 1):
        raise ValueError(f"p must be a positive integer (the number of features), got {p!r}")
    for name, v in (("q", q), ("threshold", threshold)):
        if isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name} must be a number, got {v!r} (bool)")
    q, p, thr = float(q), int(p), float(threshold)
    if not 0.5 < thr <= 1:
        raise ValueError(f"threshold must lie in (0.5, 1], got {threshold}")
    if not 0 <= q <= p:  # written so that NaN fails too
        raise ValueError(f"q (the average number of features selected per subsample) must lie in [0, p = {p}], got {q}")
    if assumption == "none":
        return q * q / ((2 * thr - 1) * p)
    if num_pairs is None:
        raise ValueError("assumption='unimodal' needs num_pairs (complementary pairs), got None")
    if not (_checks.is_int(num_pairs) and num_pairs >= 1):
        raise ValueError(f"num_pairs must be a positive integer (the complementary pairs), got {num_pairs!r}")
    B = int(num_pairs)
    theta = q / p
    simple = q * q / ((2 * thr - 1) * p)  # holds for complementary pairs without the assumption
    if thr < 0.5 + min(theta**2, 1 / (2 * B) + 0.75 * theta**2):
        return simple
    if thr <= 0.75:
        c = 2 * (2 * thr - 1 - 1 / (2 * B))
    else:
        c = (1 + 1 / B) / (4 * (1 - thr + 1 / (2 * B)))
    return simple if c <= 0 else min(simple, q * q / (p * c))


def _choose(q_path, p, threshold, expected_false, num_pairs, assumption):
    """Range length ``k`` and threshold meeting ``expected_false`` (see :func:`stability_selection`)."""
    L = len(q_path)

    def bound(k, thr):
        return stability_bound(q_path[k - 1], p, thr, num_pairs=num_pairs, assumption=assumption)

    if expected_false is None:
        return L, float(threshold)
    if threshold is None:
        grid = np.arange(501, 1001) / 1000.0  # candidate thresholds 0.501 .. 1
        ok = [t for t in grid if bound(L, t) <= expected_false]
        if ok:
            return L, float(ok[0])
        threshold = _FALLBACK_THRESHOLD
    ks = [k for k in range(1, L + 1) if bound(k, threshold) <= expected_false]
    return (max(ks) if ks else 0), float(threshold)


# --------------------------------------------------------------------------
# Subsamples (the batched fits that count their selections: jaxknock/_stability_engine.py)
# --------------------------------------------------------------------------


def stability_subsamples(key, n: int, num_subsamples: int, *, fraction=0.5, complementary_pairs=True):
    """Row indices of the subsamples, ``(B, floor(n * fraction))`` int32 (traceable).

    Without pairs, subsample ``b`` is the first ``m = floor(n * fraction)``
    entries of ``jax.random.permutation(keys[b], n)``, ``keys = jax.random.split(key, B)``.
    With complementary pairs (``B`` even, ``keys = jax.random.split(key, B // 2)``),
    pair ``i`` uses one permutation of ``keys[i]``: subsample
    ``2 i`` is its first ``m`` entries and ``2 i + 1`` the next ``m`` (disjoint).

    Example:
        >>> idx = stability_subsamples(jax.random.key(0), 10, 4)
        >>> idx.shape, bool(jnp.intersect1d(idx[0], idx[1]).size == 0)
        ((4, 5), True)
    """
    _checks.check_key(key)
    complementary_pairs = _checks.static_flag(complementary_pairs, "complementary_pairs")  # "False" is truthy
    n = _checks.int_setting(n, "n")
    num_subsamples = _checks.int_setting(num_subsamples, "num_subsamples")
    fraction = _checks.real_setting(fraction)
    if not _checks.is_int(n) or n < 1:
        raise ValueError(f"n must be a positive integer (the number of rows), got {n!r}")
    _check_layout(num_subsamples, fraction, complementary_pairs)
    m = int(math.floor(n * fraction))
    if m < 1:
        raise ValueError(f"fraction * n must give at least 1 row per subsample, got floor({fraction} * {n}) = 0")
    return _subsample_rows(key, n, int(num_subsamples), m, bool(complementary_pairs))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))  # one program (op by op: about seven in a first call)
def _subsample_rows(key, n, num_subsamples, m, complementary_pairs):
    if complementary_pairs:
        keys = jax.random.split(key, num_subsamples // 2)
        perms = jax.vmap(lambda k: jax.random.permutation(k, n))(keys)
        return jnp.stack([perms[:, :m], perms[:, m : 2 * m]], axis=1).reshape(-1, m).astype(jnp.int32)
    keys = jax.random.split(key, num_subsamples)
    return jax.vmap(lambda k: jax.random.permutation(k, n)[:m])(keys).astype(jnp.int32)


# --------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------


def _use_lockstep(solver, loss) -> bool:
    """The lockstep homotopy: squared loss (``solver="auto"`` or ``"lockstep"``)."""
    if solver == "lockstep" and loss != "squared":
        raise ValueError("solver='lockstep' is the lasso homotopy (loss='squared'); use solver='working_set'")
    return solver == "lockstep" or (solver == "auto" and loss == "squared")


def _use_engine(solver, fit_intercept, sharded) -> bool:
    """``solver="auto"``: the working-set engine wherever it applies (intercept fitted, one device)."""
    if solver in ("working_set", "lockstep"):
        if not fit_intercept:
            raise ValueError(f"solver={solver!r} always fits an intercept; use solver='fista' with fit_intercept=False")
        if sharded:
            raise ValueError(f"solver={solver!r} runs on one device; use solver='fista' with devices= / mesh=")
        return True
    return solver == "auto" and fit_intercept and not sharded


def _check_layout(num_subsamples, fraction, complementary_pairs, *, minimum=1):
    """``num_subsamples >= minimum`` subsamples (even with pairs) of a ``fraction`` in ``(0, 1)`` of the rows."""
    if isinstance(fraction, (bool, np.bool_)) or not isinstance(fraction, (int, float, np.floating)):
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    if complementary_pairs and fraction > 0.5:
        raise ValueError(f"complementary pairs need disjoint halves: fraction must be <= 0.5, got {fraction}")
    if not _checks.is_int(num_subsamples) or num_subsamples < minimum:
        raise ValueError(f"num_subsamples must be an integer >= {minimum}, got {num_subsamples!r}")
    if complementary_pairs and num_subsamples % 2:
        raise ValueError(f"complementary pairs need an even num_subsamples, got {num_subsamples}")


def _check_settings(fraction, complementary_pairs, num_subsamples, threshold, expected_false, assumption):
    _check_layout(num_subsamples, fraction, complementary_pairs, minimum=2)
    for name, v in (("threshold", threshold), ("expected_false", expected_false)):
        if isinstance(v, (bool, np.bool_)):  # True is an int to Python: it ran as 1.0
            raise TypeError(f"{name} must be a number or None, got {v!r} (bool)")
    if threshold is not None and not (isinstance(threshold, (int, float, np.floating)) and 0.5 < threshold <= 1):
        raise ValueError(f"threshold must lie in (0.5, 1] (a selection probability above 1/2), got {threshold!r}")
    if expected_false is not None and not (
        isinstance(expected_false, (int, float, np.floating)) and expected_false > 0
    ):
        raise ValueError(
            f"expected_false must be a positive number (E[V], the per-family error rate), got {expected_false!r}"
        )
    if threshold is None and expected_false is None:
        raise ValueError("give threshold, expected_false or both")
    _checks.check_choice(assumption, ASSUMPTIONS, "assumption")


def stability_selection(
    key,
    X,
    y,
    *,
    lambdas=None,
    num_lambdas: int = 50,
    eps: float = 1e-2,
    num_subsamples: int = 100,
    fraction: float = 0.5,
    complementary_pairs: bool = True,
    threshold: float | None = 0.6,
    expected_false: float | None = 1.0,
    assumption: str | None = None,
    loss: str = "squared",
    fit_intercept: bool = True,
    tol: float = 1e-4,
    max_steps: int | None = None,
    solver: str = "auto",
    chunk_size: int | None = None,
    devices=None,
    mesh=None,
    mixed_precision: bool = True,
) -> StabilityResult:
    r"""Stability selection with the lasso or l1-logistic regression (see the module docstring).

    Fits the lasso (l1-logistic) path on
    ``num_subsamples`` subsamples of ``floor(n * fraction)`` rows (complementary
    pairs by default: ``num_subsamples / 2`` pairs of disjoint halves) and
    returns the selection probabilities and the stable set with its error bound.

    Error control (``expected_false`` = the target E[V], i.e. the per-family
    error rate; divide by ``p`` for the per-comparison rate):

    * ``expected_false`` and ``threshold`` (the default: E[V] <= 1 at
      threshold 0.6): the longest range ``lambdas[:k]``
      (from the largest lambda) whose ``q`` meets the bound at ``threshold``
      (``k = 0``, nothing selected, if even ``lambdas[:1]`` does not);
    * ``expected_false=None``: the whole grid and ``threshold``; ``bound``
      reports E[V] for them. When ``p`` is small against ``n`` the lasso on
      half the rows keeps nearly every feature at the small end of the grid,
      so this selects nearly everything under a vacuous bound
      (``result.explanation`` says so);
    * ``expected_false`` and ``threshold=None``: the smallest threshold in
      ``0.501, 0.502, ..., 1`` meeting the bound on the whole grid; if none does,
      the range is cut as above at threshold 0.9.

    Args:
        key: ``jax.random`` key for the subsamples (:func:`stability_subsamples`). The subsamples are
            sets of row *indices*, so for one key the result depends on the order of the rows: the
            same data in another row order are another Monte-Carlo draw (a probability moves by about
            ``sqrt(pi (1 - pi) / B)``); the order of the features does not matter.
        X: ``(n, p)`` design; y: ``(n,)`` response (binary labels for ``loss="logistic"``).
            With x64 off and an intercept, a float64 (or integer) NumPy ``X`` (and a least-squares
            ``y``) loses its means in float64 before JAX rounds it to float32, as in :func:`~jaxknock.lasso`.
        lambdas: decreasing penalties; default ``num_lambdas`` values of
            :func:`~jaxknock.lambda_grid` on the full data (down to ``eps * lambda_max``).
        num_subsamples: ``B`` (even with complementary pairs).
        fraction: subsample size ``floor(n * fraction)``, in (0, 1) (``<= 1/2`` with pairs).
        complementary_pairs: Shah & Samworth's pairs of disjoint halves.
        threshold: :math:`\pi_{thr}` in (0.5, 1].
        expected_false: target E[V] (see above; default 1, ``None`` for the whole grid).
        assumption: ``"unimodal"`` (default with pairs) or ``"none"`` (default without).
        loss, fit_intercept, tol: as in :func:`~jaxknock.lasso_path`
            (``tol=1e-4``: selection needs the support, not a tight fit).
        solver: ``"auto"`` (the lockstep homotopy for the squared loss, the
            working-set engine for the logistic loss, where they apply, see the
            module docstring; else ``"fista"``), ``"lockstep"`` / ``"working_set"``
            (that engine, or an error where it does not apply), or a
            :func:`~jaxknock.lasso_path` solver (``"fista"``, ``"cd"``, ...) run on each subsample.
        max_steps: iteration limit of the solver; for the lockstep homotopy the
            kinks per chunk (default ``8 m + 100``; subsamples still running are
            counted in ``num_failed`` at the penalties they did not reach). An
            integer ``>= 0``, as in :func:`~jaxknock.lasso_path`: ``0`` takes no
            step, so only fits whose start is already optimal (penalties at or
            above ``lambda_max``) converge and the rest count in ``num_failed``.
        chunk_size: subsamples per batch (lockstep: per lockstep chunk, default 8 on
            the CPU for a design of at most 40 MiB, where the chunk's active-set
            inverses and columns then stay in the processor cache, else from memory
            (:func:`jaxknock._backend.lockstep_chunk`); else per ``vmap`` batch,
            default 1 on the CPU, from memory otherwise). With
            ``mixed_precision`` the chunking can move a kink that falls within
            float32 rounding of a grid penalty, so counts may differ by a few
            selections between chunk sizes (far below the Monte-Carlo error).
        devices, mesh: shard the subsamples over devices (:func:`jaxknock.distributed.shard_batch`).
        mixed_precision: lockstep homotopy with a float64 ``X``: the product
            per kink that gives the direction of the correlations runs in
            float32, while the Gram entries, the active-set inverse and the
            kink arithmetic stay in float64 and the correlations are recomputed
            exactly every 16 kinks (the supports equal the all-float64 path
            unless two events fall within ~1e-6 relative of each other: none in
            ``benchmarks/bench_stability.py``); ``False``: every product in float64.

    Returns:
        :class:`StabilityResult`.

    Example:
        >>> X = jax.random.normal(jax.random.key(0), (60, 8))
        >>> y = 2.0 * X[:, 0] + 0.3 * jax.random.normal(jax.random.key(1), (60,))
        >>> res = stability_selection(jax.random.key(2), X, y, num_subsamples=10, num_lambdas=5)
        >>> res.probabilities.shape, bool(res.selected[0])
        ((8, 5), True)
    """
    _checks.require_eager(
        "stability_selection",
        "the error control picks the range of lambdas and the threshold from the selection counts",
        "lasso_path is jittable and vmaps over explicit subsamples (stability_subsamples)",
        key=key, X=X, y=y, lambdas=lambdas,
    )  # fmt: skip
    _checks.check_key(key)
    # text is truthy: complementary_pairs="False" ran the pairs and mixed_precision="no" the float32 products
    complementary_pairs = _checks.static_flag(complementary_pairs, "complementary_pairs")
    mixed_precision = _checks.static_flag(mixed_precision, "mixed_precision")
    if assumption is None:
        assumption = "unimodal" if complementary_pairs else "none"
    fraction, threshold, expected_false = map(_checks.real_setting, (fraction, threshold, expected_false))
    num_subsamples = _checks.int_setting(num_subsamples, "num_subsamples")
    num_lambdas = _checks.int_setting(num_lambdas, "num_lambdas")
    chunk_size = _checks.int_setting(chunk_size, "chunk_size")
    max_steps = _checks.int_setting(max_steps, "max_steps")
    _check_settings(fraction, complementary_pairs, num_subsamples, threshold, expected_false, assumption)
    _use_lockstep(solver, loss)  # solver='lockstep' with the logistic loss: an error before any work
    if assumption == "unimodal" and not complementary_pairs:
        raise ValueError("assumption='unimodal' (Shah & Samworth) needs complementary_pairs=True")
    # with x64 off a float64 host X + 1e4 was cast to float32 before its subsamples were centred: probabilities
    # up to 1.0 off (noise at 0.95); each fit has an intercept, so the means come out in float64 first
    X, y, _ = centre_on_host(X, y, loss=loss, fit_intercept=fit_intercept)
    X, y = prepare_data(X, y, loss=loss, fit_intercept=fit_intercept)
    n, p = X.shape
    m = int(math.floor(n * fraction))
    if m < 2:
        raise ValueError(f"fraction * n must give at least 2 rows per subsample, got floor({fraction} * {n}) = {m}")
    if lambdas is None:
        lambdas = lambda_grid(X, y, num=num_lambdas, eps=eps, loss=loss, fit_intercept=fit_intercept)
    lambdas = as_lambdas(lambdas, X.dtype)
    if lambdas.size > 1 and bool(np.any(np.diff(np.asarray(jax.device_get(lambdas))) > 0)):  # on the host
        raise ValueError("lambdas must be decreasing (the path is warm-started from the largest)")
    sharded = _mesh.wants_sharding(devices, mesh)
    use_engine = _use_engine(solver, fit_intercept, sharded)
    if use_engine:
        # the engines read tol / max_steps themselves: the same checks as the other solvers (tol=-1 or
        # NaN ran, tol=None was a JAX conversion error); None means the default here too
        tol = 1e-4 if tol is None else tol
        make_settings(X.dtype, loss=loss, fit_intercept=fit_intercept, solver="fista", tol=tol, max_steps=max_steps)
    else:
        settings = make_settings(
            X.dtype, loss=loss, fit_intercept=fit_intercept, solver="fista" if solver == "auto" else solver,
            tol=tol, max_steps=max_steps,
        )  # fmt: skip
    if chunk_size is not None and not (_checks.is_int(chunk_size) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    B, L = int(num_subsamples), int(lambdas.shape[0])
    idx = stability_subsamples(key, n, B, fraction=fraction, complementary_pairs=complementary_pairs)
    if use_engine and _use_lockstep(solver, loss):
        counts, union, failed = _stability_engine.run_lockstep(
            idx, X, y, lambdas, max_steps=8 * m + 100 if max_steps is None else int(max_steps), chunk=chunk_size,
            mixed=mixed_precision,
        )  # fmt: skip
    elif use_engine:
        counts, union, failed = _stability_engine.run_engine(
            idx, X, y, lambdas, complementary_pairs=complementary_pairs, loss=loss, tol=tol,
            max_steps=10_000 if max_steps is None else int(max_steps), chunk=chunk_size,
        )  # fmt: skip
    elif sharded:
        mesh_ = _mesh.resolve_mesh(devices, mesh, None)
        counts, union, failed = _stability_engine.sharded_path_counts(idx, X, y, lambdas, settings, mesh_, chunk_size)
    else:
        chunk = chunk_size or _stability_engine.default_chunk(B, m, p, L, X.dtype.itemsize)
        counts, union, failed = _stability_engine.path_counts(idx, X, y, lambdas, settings, int(min(chunk, B)))
    probabilities = jnp.asarray((np.asarray(counts, np.float64) / B).T, X.dtype)  # exactly count / B, rounded once
    q_path = np.asarray(union, np.float64) / B
    num_pairs = B // 2 if complementary_pairs else None
    k, thr = _choose(q_path, p, threshold, expected_false, num_pairs, assumption)
    counts = np.asarray(counts)
    if k == 0:
        max_prob = jax.device_put(np.zeros(p, X.dtype))  # jnp.zeros: an eager program in a warm call
        selected = np.zeros(p, bool)
        q, bound = 0.0, 0.0
    else:
        max_prob = jnp.asarray(counts[:k].max(axis=0) / B, X.dtype)  # = max of the rounded probabilities
        selected = counts[:k].max(axis=0) >= thr * B - 1e-9  # on the counts: no float rounding at the cut
        q = float(q_path[k - 1])
        bound = stability_bound(q, p, thr, num_pairs=num_pairs, assumption=assumption)
    return StabilityResult(
        probabilities=probabilities,
        max_probability=max_prob,
        selected=selected,
        threshold=thr,
        bound=float(bound),
        q=q,
        q_path=q_path,
        lambdas=lambdas,
        num_lambdas_used=int(k),
        assumption=assumption,
        num_failed=np.asarray(failed),
        expected_false=None if expected_false is None else float(expected_false),
    )
