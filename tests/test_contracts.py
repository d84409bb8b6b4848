"""Property-based contract of the public API (issue 19).

For every public entry point of ``jaxknock.__all__`` that takes arrays,
hypothesis generates inputs: shapes (including 0 and 1), dtypes (float32,
float64, int, bool), scales (1e-8 .. 1e8), conditioning (near-singular AR(1),
equicorrelated with rho -> 1, spiked), labels of every kind, NaN/Inf
placement, bad levels and keys. Each call must end in exactly one of:

* **correct** - the result passes an independent invariant (feasibility of
  ``s`` checked by numpy, a numpy reference of BH or the knockoff threshold,
  antisymmetry of ``W`` under swapping ``X`` and ``X~``, ``X~^T X~ = X^T X``
  for fixed-X, ...);
* **flagged** - a non-success ``RESULTS`` code or NaN-poisoned output;
* **clear error** - a ``ValueError``/``TypeError`` whose message names one of
  the function's arguments.

Anything else (a plausible wrong answer, another exception, an error that
does not name an argument) fails the test. The rows of the table are
``(function, family)``; families share a generator (and compiled shapes).
A summary of cases and outcomes per function is printed at the end of the
module (and written to ``$JAXKNOCK_CONTRACTS_REPORT`` when set).

Settings: fixed example counts, ``deadline=None``, ``derandomize=True``, small
shapes from a few fixed sizes so that compiled programs are reused.
"""

from __future__ import annotations

import collections
import inspect
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import jaxknock

TALLY: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def contract_settings(n):
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: the failing example is printed as drawn
        suppress_health_check=list(HealthCheck),
    )


class Violation(AssertionError):
    """A plausible wrong answer: the contract is broken."""


def _arg_names(fn, extra=()):
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    return [n for n in names if n not in ("self", "args", "kwargs")] + list(extra)


def _names_an_argument(msg: str, names) -> bool:
    return any(re.search(rf"(?<![A-Za-z_]){re.escape(a)}(?![A-Za-z_])", msg) for a in names)


def run_contract(name, call, check, names):
    """Call, classify and tally one case; raise on a contract violation."""
    try:
        out = call()
    except (ValueError, TypeError) as err:
        msg = str(err)
        if not _names_an_argument(msg, names):
            raise Violation(f"{name}: error does not name an argument {names}: {type(err).__name__}: {msg}") from err
        TALLY[name]["clear error"] += 1
        return
    outcome = check(out)
    assert outcome in ("correct", "flagged"), outcome
    TALLY[name][outcome] += 1


@pytest.fixture(scope="module", autouse=True)
def _contract_report(request):
    yield
    rows = sorted(TALLY.items())
    total = collections.Counter()
    for _, c in rows:
        total.update(c)
    lines = [
        "",
        "contract suite (issue 19): cases per public function",
        f"{'function':32s} {'cases':>6s} {'correct':>8s} {'flagged':>8s} {'clear error':>12s}",
    ]
    for fn, c in rows:
        lines.append(f"{fn:32s} {sum(c.values()):6d} {c['correct']:8d} {c['flagged']:8d} {c['clear error']:12d}")
    lines.append(
        f"{'TOTAL (' + str(len(rows)) + ' functions)':32s} {sum(total.values()):6d} {total['correct']:8d} "
        f"{total['flagged']:8d} {total['clear error']:12d}"
    )
    text = "\n".join(lines)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)
    path = os.environ.get("JAXKNOCK_CONTRACTS_REPORT")
    if path:
        with open(path, "w") as fh:
            fh.write(text + "\n")


# ----------------------------------------------------------------- generators

DTYPES = ("float64", "float64", "float32", "int32", "bool")


def cast(a, dtype):
    a = np.asarray(a, np.float64)
    if dtype == "bool":
        return a != 0
    if dtype == "int32":
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(a), np.round(np.clip(a, -1e9, 1e9)), 0).astype(np.int32)
    return a.astype(dtype)


def correlation(kind, p, hard, rng):
    i = np.arange(p)
    if kind == "ar1":
        return hard ** np.abs(i[:, None] - i[None, :]) if p else np.zeros((0, 0))
    if kind == "equi":
        return (1 - hard) * np.eye(p) + hard
    if kind == "lowrank":
        U = rng.normal(size=(p, 1))
        C = U @ U.T + (1 - hard + 1e-12) * np.eye(p)
    elif kind == "spiked":
        Q, _ = np.linalg.qr(rng.normal(size=(p, p))) if p else (np.zeros((0, 0)), None)
        ev = np.ones(p)
        if p:
            ev[0] = 1.0 / (1 - hard + 1e-12)
        C = (Q * ev) @ Q.T
    else:
        return np.eye(p)
    d = np.sqrt(np.diag(C))
    return C / np.outer(d, d) if p else C


def corrupt_matrix(A, how, rng):
    A = A.copy()
    p = A.shape[0]
    if p == 0 or how == "none":
        return A
    i, j = rng.integers(0, p, size=2)
    if how == "nan":
        A[i, j] = np.nan
    elif how == "inf":
        A[i, i] = np.inf
    elif how == "asym" and p > 1:
        A[0, 1] += 0.3 * abs(A[0, 0]) + 0.1
    elif how == "negdiag":
        A[i, i] = -abs(A[i, i]) - 1.0
    elif how == "notpd" and p > 1:
        A[0, 1] = A[1, 0] = 2.0 * np.sqrt(abs(A[0, 0] * A[1, 1])) + 1.0
    return A


@st.composite
def sigma_cases(draw, sizes=(0, 1, 2, 4)):
    # half the cases are valid (hard conditioning included), half break one thing
    bad = draw(st.sampled_from(["none", "none", "none", "size", "values", "dtype"]))
    p = draw(st.sampled_from([s for s in sizes if s] if bad != "size" else [0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from(["ar1", "equi", "lowrank", "spiked", "identity"]))
    hard = draw(st.sampled_from([0.0, 0.5, 0.9, 0.999, 1 - 1e-6, 1 - 1e-10]))
    scale = 10.0 ** draw(st.integers(-8, 8))
    C = correlation(kind, p, hard, rng)
    var = scale * rng.uniform(0.5, 2.0, size=p)
    Sigma = np.sqrt(var)[:, None] * C * np.sqrt(var)[None, :]
    Sigma = 0.5 * (Sigma + Sigma.T)
    how = draw(st.sampled_from(["nan", "inf", "asym", "negdiag", "notpd"])) if bad == "values" else "none"
    dtype = (
        draw(st.sampled_from(["int32", "bool"]))
        if bad == "dtype"
        else draw(st.sampled_from(["float64"] * 3 + ["float32"]))
    )
    Sigma = cast(corrupt_matrix(Sigma, how, rng), dtype)
    jit = draw(st.booleans())
    return Sigma, jit


def finite_symmetric(S):
    """``S`` as a float64 numpy matrix if it is a finite, symmetric, non-empty square numeric one, else ``None``."""
    S = np.asarray(S)
    if S.dtype == bool or S.ndim != 2 or S.shape[0] == 0 or S.shape[0] != S.shape[1]:
        return None
    A = S.astype(np.float64)
    if not np.all(np.isfinite(A)) or np.max(np.abs(A - A.T)) > 1e-8 * max(np.max(np.abs(A)), 1e-300):
        return None
    return A


def sigma_is_valid(S) -> bool:
    """Independent check: a finite, symmetric, positive definite float matrix (numpy)."""
    A = finite_symmetric(S)
    if A is None:
        return False
    try:
        np.linalg.cholesky(A)
    except np.linalg.LinAlgError:
        return False
    return True


def feasibility_violation(Sigma, s) -> float:
    """How far ``s`` is from ``0 <= diag(s) <= 2 Sigma``, relative to max diag(Sigma)."""
    A = np.asarray(Sigma, np.float64)
    s = np.asarray(s, np.float64)
    scale = np.max(np.diag(A))
    lam = np.linalg.eigvalsh(2 * A - np.diag(s))[0]
    return max(-lam, -np.min(s), 0.0) / scale


def check_svector(Sigma, sol, *, tol=1e-6):
    s = np.asarray(sol.value, np.float64)
    code = np.asarray(sol.result)
    if np.any(code != 0) or not np.all(np.isfinite(s)):
        return "flagged"
    if not sigma_is_valid(Sigma):
        raise Violation(f"successful, finite s on an invalid Sigma:\n{Sigma}\ns = {s}")
    viol = feasibility_violation(Sigma, s.reshape(-1)[: Sigma.shape[0]])
    if viol > tol:
        raise Violation(f"'successful' s is infeasible by {viol:.3g} (relative):\nSigma = {Sigma}\ns = {s}")
    return "correct"


def maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


# ----------------------------------------------------------- S-vector family

SVECTOR_ROWS = {
    "equicorrelated": lambda S, jit: maybe_jit(jaxknock.equicorrelated, jit)(S if not jit else jnp.asarray(S)),
    "sdp": lambda S, jit: maybe_jit(jaxknock.sdp, jit)(S if not jit else jnp.asarray(S)),
    "mvr": lambda S, jit: maybe_jit(jaxknock.mvr, jit)(S if not jit else jnp.asarray(S)),
    "maxent": lambda S, jit: maybe_jit(jaxknock.maxent, jit)(S if not jit else jnp.asarray(S)),
    "asdp": lambda S, jit: jaxknock.asdp(S, block_size=2),
    "sdp_batch": lambda S, jit: jaxknock.sdp_batch(np.asarray(S)[None], method="equicorrelated", devices=1),
}


@pytest.mark.parametrize("fname", sorted(SVECTOR_ROWS))
@contract_settings(8)
@given(case=sigma_cases())
def test_svector_contract(fname, case):
    Sigma, jit = case
    fn = getattr(jaxknock, fname)
    run_contract(
        fname,
        lambda: SVECTOR_ROWS[fname](Sigma, jit),
        lambda sol: check_svector(Sigma, jax.tree_util.tree_map(lambda a: a[0], sol) if fname == "sdp_batch" else sol),
        _arg_names(fn, ["Sigma", "Sigmas"]),
    )


@contract_settings(10)
@given(case=sigma_cases(), frac=st.sampled_from([0.0, 0.5, 1.0, 3.0, -0.5, np.nan]))
def test_scale_to_feasible_contract(case, frac):
    Sigma, jit = case
    s = frac * np.abs(np.diag(np.asarray(Sigma, np.float64))) if np.ndim(Sigma) == 2 else np.zeros(0)
    run_contract(
        "scale_to_feasible",
        lambda: maybe_jit(jaxknock.scale_to_feasible, jit)(jnp.asarray(Sigma), jnp.asarray(s)),
        lambda sol: check_svector(Sigma, sol) if np.all(np.asarray(s) >= 0) else _negative_s_flagged(sol),
        _arg_names(jaxknock.scale_to_feasible),
    )


def _negative_s_flagged(sol):
    if int(np.asarray(sol.result)) != 0 or not np.all(np.isfinite(np.asarray(sol.value))):
        return "flagged"
    raise Violation(f"scale_to_feasible reported success for a negative s: {sol}")


@contract_settings(8)
@given(case=sigma_cases(sizes=(0, 1, 3)), lam=st.sampled_from([1e-3, 1e-6, 0.0, -1e-3, np.nan, "0.1"]))
def test_sdp_dual_gap_contract(case, lam):
    Sigma, jit = case
    p = np.shape(Sigma)[0] if np.ndim(Sigma) == 2 else 0
    s = 0.5 * np.abs(np.diag(np.asarray(Sigma, np.float64))) if p else np.zeros(0)

    def check(out):
        dual, gap = (float(v) for v in out)
        if not (np.isfinite(dual) and np.isfinite(gap)):
            return "flagged"
        if not (isinstance(lam, float) and lam > 0) or not sigma_is_valid(Sigma):
            raise Violation(f"finite gap {gap} for lam={lam!r} / invalid Sigma")
        if feasibility_violation(Sigma, s) <= 0 and gap < -1e-6 * p:
            raise Violation(f"negative certified gap {gap} for a feasible s")
        return "correct"

    fn = jaxknock.sdp_dual_gap
    run_contract(
        "sdp_dual_gap",
        lambda: (jax.jit(fn) if jit and not isinstance(lam, str) else fn)(jnp.asarray(Sigma), jnp.asarray(s), lam),
        check,
        _arg_names(fn),
    )


@contract_settings(10)
@given(case=sigma_cases())
def test_to_correlation_contract(case):
    Sigma, jit = case

    def check(C):
        C = np.asarray(C, np.float64)
        A = np.asarray(Sigma, np.float64)
        if not np.all(np.isfinite(C)):
            return "flagged"
        d = np.diag(A)
        if not (np.all(np.isfinite(d)) and np.all(d > 0)):
            raise Violation(f"finite correlation from variances {d}")
        ref = A / np.sqrt(np.outer(d, d))
        np.fill_diagonal(ref, 1.0)
        rtol = 1e-3 if np.asarray(Sigma).dtype == np.float32 else 1e-9
        np.testing.assert_allclose(C, ref, rtol=rtol, atol=rtol)
        return "correct"

    run_contract(
        "to_correlation",
        lambda: maybe_jit(jaxknock.to_correlation, jit)(Sigma if not jit else jnp.asarray(Sigma)),
        check,
        _arg_names(jaxknock.to_correlation),
    )


def sigma_is_psd(S) -> bool:
    """Independent check for the factor-model fit: finite, symmetric and positive semidefinite beyond the
    rounding of its own dtype (numpy ``eigvalsh``; ``lambda_min >= -100 p eps max |lambda|``: a singular PSD
    matrix is a valid input there, the positive definite ``sigma_is_valid`` called it invalid)."""
    A = finite_symmetric(S)
    if A is None:
        return False
    eps = np.finfo(np.float32 if np.asarray(S).dtype == np.float32 else np.float64).eps
    lam = np.linalg.eigvalsh(0.5 * (A + A.T))
    return bool(lam[0] >= -100 * S.shape[0] * eps * np.max(np.abs(lam)))


@contract_settings(6)
@given(case=sigma_cases(sizes=(0, 1, 2, 4)))
def test_estimate_factor_model_contract(case):
    Sigma, _ = case

    def check(sol):
        d, U = (np.asarray(a, np.float64) for a in sol.value)
        if int(np.asarray(sol.result)) != 0 or not (np.all(np.isfinite(d)) and np.all(np.isfinite(U))):
            return "flagged"
        if not sigma_is_psd(Sigma):
            raise Violation("successful factor model of an invalid Sigma")
        if not (np.all(d > 0) and U.shape == (Sigma.shape[0], 1)):
            raise Violation(f"factor model with d = {d}, U shape {U.shape}")
        return "correct"

    run_contract(
        "estimate_factor_model",
        lambda: jaxknock.estimate_factor_model(Sigma, 1),
        check,
        _arg_names(jaxknock.estimate_factor_model, ["Sigma"]),
    )


@st.composite
def factor_cases(draw):
    p = draw(st.sampled_from([0, 1, 2, 5]))
    k = draw(st.sampled_from([1, 2]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    scale = 10.0 ** draw(st.integers(-6, 6))
    d = scale * rng.uniform(0.01, 1.0, size=p)
    U = np.sqrt(scale) * rng.normal(size=(p, k)) * draw(st.sampled_from([0.0, 1.0, 30.0]))
    how = draw(st.sampled_from(["none"] * 4 + ["nan_d", "zero_d", "neg_d", "inf_U"]))
    if p and how == "nan_d":
        d[0] = np.nan
    elif p and how == "zero_d":
        d[0] = 0.0
    elif p and how == "neg_d":
        d[0] = -scale
    elif p and how == "inf_U":
        U[0, 0] = np.inf
    dtype = draw(st.sampled_from(["float64", "float64", "float32", "int32"]))
    return cast(d, dtype), cast(U, dtype), draw(st.booleans())


@contract_settings(8)
@given(case=factor_cases())
def test_sdp_factor_contract(case):
    d, U, jit = case

    def dense():
        return np.diag(np.asarray(d, np.float64)) + np.asarray(U, np.float64) @ np.asarray(U, np.float64).T

    def check(sol):
        s = np.asarray(sol.value, np.float64)
        if int(np.asarray(sol.result)) != 0 or not np.all(np.isfinite(s)):
            return "flagged"
        dv = np.asarray(d, np.float64)
        if not (np.all(np.isfinite(dv)) and np.all(dv > 0) and np.all(np.isfinite(np.asarray(U, np.float64)))):
            raise Violation(f"successful s for an invalid factor model d = {dv}")
        viol = feasibility_violation(dense(), s)
        if viol > 1e-6:
            raise Violation(f"'successful' sdp_factor s infeasible by {viol:.3g}")
        return "correct"

    def call():
        model = jaxknock.FactorModel(jnp.asarray(d), jnp.asarray(U))
        return (jax.jit(jaxknock.sdp_factor) if jit else jaxknock.sdp_factor)(model)

    run_contract("sdp_factor", call, check, ["model", "model.d", "model.U", "d", "U", "Sigma"])


# ------------------------------------------------------------ sampler family


@st.composite
def sampler_cases(draw):
    bad = draw(st.sampled_from(["none", "none", "none", "size", "s", "X", "Sigma", "dtype"]))
    n = draw(st.sampled_from([0, 1] if bad == "size" else [6]))
    p = draw(st.sampled_from([0] if bad == "size" else [1, 3]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rho = draw(st.sampled_from([0.0, 0.5, 0.9]))
    scale = 10.0 ** draw(st.integers(-4, 4))
    Sigma = scale * ((1 - rho) * np.eye(p) + rho)
    lam_min = scale * (1 - rho) if p > 1 else scale
    frac = draw(st.sampled_from([1.5, -0.2, np.nan] if bad == "s" else [0.0, 0.5, 1.0]))
    s = np.full(p, frac * 2 * min(lam_min, scale))
    X = rng.normal(size=(n, p)) * np.sqrt(scale)
    if bad == "X" and X.size:
        X[0, 0] = np.nan
    how = draw(st.sampled_from(["asym", "nan"])) if bad == "Sigma" else "none"
    Sigma = corrupt_matrix(Sigma, how, rng)
    dtype = "bool" if bad == "dtype" else draw(st.sampled_from(["float64", "float64", "float32", "int32"]))
    return cast(X, dtype), Sigma, s, frac, draw(st.booleans())


def check_knockoffs(Xk, X, Sigma, s, frac, *, jit):
    Xk = np.asarray(Xk, np.float64)
    valid = (
        sigma_is_valid(Sigma)
        and np.all(np.isfinite(np.asarray(X, np.float64)))
        and np.isfinite(frac)
        and 0 <= frac <= 1.0
    )
    if Xk.shape[-2:] != np.shape(X):
        raise Violation(f"knockoffs of shape {Xk.shape} for X of shape {np.shape(X)}")
    if not np.all(np.isfinite(Xk)):
        if valid and not np.any(np.isnan(np.asarray(X, np.float64))):
            raise Violation("NaN knockoffs for a valid, feasible input")
        return "flagged"
    if not valid:
        raise Violation(f"finite knockoffs for an invalid input (frac={frac}, jit={jit})")
    return "correct"


@pytest.mark.parametrize("fname", ["sample_knockoffs", "sample_knockoffs_factor", "sample_replicates"])
@contract_settings(8)
@given(case=sampler_cases())
def test_sampler_contract(fname, case):
    X, Sigma, s, frac, jit = case
    key = jax.random.key(0)
    p = Sigma.shape[0]

    def call():
        if fname == "sample_knockoffs":
            return maybe_jit(jaxknock.sample_knockoffs, jit)(key, jnp.asarray(X), jnp.asarray(Sigma), jnp.asarray(s))
        if fname == "sample_knockoffs_factor":
            # Sigma = scale((1 - rho) I + rho 1 1^T) = diag(d) + U U^T exactly
            rho_scale = Sigma[0, 1] if p > 1 else 0.0
            d = np.diag(Sigma) - rho_scale
            U = np.full((p, 1), np.sqrt(max(rho_scale, 0.0)))
            if p > 1 and not np.isfinite(Sigma).all():
                d = d * np.nan
            model = jaxknock.FactorModel(jnp.asarray(d), jnp.asarray(U))
            return maybe_jit(jaxknock.sample_knockoffs_factor, jit)(key, jnp.asarray(X), model, jnp.asarray(s))
        return jaxknock.sample_replicates(key, X, Sigma, s, 2)

    def check(Xk):
        S = Sigma
        if fname == "sample_knockoffs_factor" and p > 1 and not np.isfinite(Sigma).all():
            S = Sigma * np.nan
        elif fname == "sample_knockoffs_factor":
            S = 0.5 * (Sigma + Sigma.T) if np.isfinite(Sigma).all() and p > 1 else Sigma
            if p > 1 and Sigma[0, 1] != Sigma[1, 0]:  # the factor model is the symmetric part
                S = np.diag(np.diag(Sigma) - Sigma[0, 1]) + Sigma[0, 1]
        return check_knockoffs(Xk, X, S, s, frac, jit=jit)

    run_contract(fname, call, check, _arg_names(getattr(jaxknock, fname), ["model.d", "model.U", "model"]))


@contract_settings(10)
@given(
    n=st.sampled_from([0, 1, 6, 12]),
    p=st.sampled_from([0, 1, 3]),
    frac=st.sampled_from([0.0, 0.5, 1.0, 2.0, -0.2, np.nan]),
    how=st.sampled_from(["none", "none", "nan", "zero_col", "dup_col"]),
    dtype=st.sampled_from(["float64", "float64", "float32", "int32"]),
    jit=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fixed_x_contract(n, p, frac, how, dtype, jit, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p)) * 3
    if X.size and how == "nan":
        X[0, 0] = np.nan
    elif X.size and how == "zero_col":
        X[:, 0] = 0.0
    elif p > 1 and how == "dup_col":
        X[:, 1] = X[:, 0]
    X = cast(X, dtype)
    Xf = np.asarray(X, np.float64)
    with np.errstate(all="ignore"):
        Xn = Xf / np.linalg.norm(Xf, axis=0) if Xf.size else Xf
        G = Xn.T @ Xn
        ok_design = n >= 2 * p and p > 0 and np.all(np.isfinite(G)) and np.linalg.eigvalsh(G)[0] > 1e-6
        lam = np.linalg.eigvalsh(G)[0] if ok_design else 0.5
    s = np.full(p, frac * min(1.0, 2 * lam))

    def check(out):
        _, Xk = (np.asarray(a, np.float64) for a in out)
        if not np.all(np.isfinite(Xk)):
            if ok_design and 0 <= frac <= 1:
                raise Violation("NaN fixed-X knockoffs for a valid design and feasible s")
            return "flagged"
        if not (ok_design and np.isfinite(frac) and 0 <= frac <= 1):
            raise Violation(f"finite fixed-X knockoffs for an invalid input (frac={frac}, how={how})")
        tol = 1e-3 if dtype in ("float32",) else 1e-6
        np.testing.assert_allclose(Xk.T @ Xk, G, atol=tol)  # the fixed-X identities
        np.testing.assert_allclose(Xn.T @ Xk, G - np.diag(s), atol=tol)
        return "correct"

    call = jaxknock.fixed_x_knockoffs
    run_contract(
        "fixed_x_knockoffs",
        lambda: (jax.jit(call) if jit else call)(jnp.asarray(X) if jit else X, jnp.asarray(s)),
        check,
        _arg_names(call, ["X^T X"]),
    )


# ------------------------------------------------------------- filter family

FDRS = [0.1, 0.2, 0.5, 0.1, 0.2, 0.3, np.float32(0.1), "0.1", 0.0, 1.0, -0.1, np.nan, None]


@st.composite
def w_cases(draw, two_d=False):
    R = draw(st.sampled_from([1, 3])) if two_d else None
    p = draw(st.sampled_from([0, 1, 5, 12]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    scale = 10.0 ** draw(st.integers(-8, 8))
    shape = (R, p) if two_d else (p,)
    W = rng.normal(loc=draw(st.sampled_from([0.0, 1.0, 3.0])), size=shape) * scale
    if draw(st.booleans()):
        W = np.round(W / scale) * scale  # ties and zeros
    how = draw(st.sampled_from(["none"] * 4 + ["nan", "inf"]))
    if W.size and how == "nan":
        W.flat[0] = np.nan
    elif W.size and how == "inf":
        W.flat[-1] = np.inf
    return cast(W, draw(st.sampled_from(["float64", "float32", "int32", "bool"]))), draw(st.sampled_from(FDRS))


def knockoff_threshold_found_ref(W, q, plus=True):
    """``(T, found)``: the knockoff(+) threshold, and whether some ``t`` qualified (``T = inf`` either way when
    none did: then nothing is selected, not even a ``W_j = inf``)."""
    W = np.asarray(W, np.float64)
    ts = np.sort(np.unique(np.abs(W[W != 0])))
    for t in ts:
        if (plus + np.sum(W <= -t)) / max(1, np.sum(W >= t)) <= q:
            return t, True
    return np.inf, False


def _fdr_ok(q):
    return isinstance(q, (float, np.floating)) and np.isfinite(q) and 0 < q < 1


def _w_ok(W):
    # +-inf is a legitimate (extreme) statistic; NaN is not
    return np.asarray(W).dtype != bool and np.asarray(W).shape[-1] > 0 and not np.any(np.isnan(np.asarray(W, float)))


@pytest.mark.parametrize("fname", ["knockoff_threshold", "knockoff_select", "knockoff_evalues"])
@contract_settings(25)
@given(case=w_cases(), jit=st.booleans())
def test_knockoff_filter_functions_contract(fname, case, jit):
    W, q = case
    fn = getattr(jaxknock, fname)

    def check(out):
        out = np.asarray(out, np.float64)
        if np.any(np.isnan(out)):
            return "flagged"
        Wf = np.asarray(W, np.float64)
        if not (_fdr_ok(q) and _w_ok(W)):
            if np.any(np.isnan(Wf)):
                raise Violation(f"{fname} gave a plausible answer for W with NaN/Inf: {Wf}")
            if not _fdr_ok(q):
                raise Violation(f"{fname} accepted fdr={q!r}")
        T, found = knockoff_threshold_found_ref(Wf, float(q))
        if fname == "knockoff_threshold":
            ok = (np.isinf(T) and np.isinf(out)) or np.isclose(float(out), T, rtol=1e-6)
        elif fname == "knockoff_select":
            ok = np.array_equal(out.astype(bool), (Wf >= T) & found)
        else:
            ok = np.all(out >= 0) and np.all(out[Wf < T] == 0) and (found or np.all(out == 0))
        if not ok:
            raise Violation(f"{fname}(W={Wf}, fdr={q}) = {out}; knockoff+ threshold {T}")
        return "correct"

    def call():
        if jit and _fdr_ok(q):
            return jax.jit(lambda W: fn(W, q))(jnp.asarray(W))
        return fn(W, q)

    run_contract(fname, call, check, _arg_names(fn))


@pytest.mark.parametrize("fname", ["aggregate_ebh", "aggregate_frequency", "aggregate_ebh_across_processes"])
@contract_settings(16)
@given(case=w_cases(two_d=True))
def test_aggregation_contract(fname, case):
    W, q = case
    fn = getattr(jaxknock, fname)

    def check(mask):
        mask = np.asarray(mask)
        Wf = np.asarray(W, np.float64)
        if mask.dtype != bool:
            if np.any(np.isnan(mask)):
                return "flagged"
        if not (_fdr_ok(q) and _w_ok(W)):
            raise Violation(f"{fname} gave a mask for fdr={q!r}, W={Wf}")
        if mask.shape != (Wf.shape[1],):
            raise Violation(f"mask of shape {mask.shape} for W of shape {Wf.shape}")
        never_positive = ~np.any(Wf > 0, axis=0)
        if np.any(mask.astype(bool) & never_positive):
            raise Violation(f"{fname} selected a feature whose W is never positive: W={Wf}, mask={mask}")
        return "correct"

    kwargs = {"num_replicates": np.shape(W)[0]} if fname == "aggregate_ebh_across_processes" else {}
    run_contract(fname, lambda: fn(W, q, **kwargs), check, _arg_names(fn))


@st.composite
def pvalue_cases(draw):
    m = draw(st.sampled_from([0, 1, 4, 10]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    pv = rng.uniform(size=m) ** draw(st.sampled_from([1.0, 4.0]))
    how = draw(st.sampled_from(["none"] * 4 + ["nan", "neg", "big"]))
    if m and how == "nan":
        pv[0] = np.nan
    elif m and how == "neg":
        pv[0] = -0.1
    elif m and how == "big":
        pv[0] = 1.5
    return cast(pv, draw(st.sampled_from(["float64", "float32", "int32", "bool"]))), draw(st.sampled_from(FDRS))


def step_up_ref(pv, q, dependence=False):
    pv = np.asarray(pv, np.float64)
    m = pv.size
    c = np.sum(1.0 / np.arange(1, m + 1)) if dependence else 1.0
    order = np.sort(pv)
    ok = np.flatnonzero(order <= np.arange(1, m + 1) * q / (m * c))
    k = ok[-1] + 1 if ok.size else 0
    return pv <= (order[k - 1] if k else -np.inf)


@pytest.mark.parametrize("fname", ["benjamini_hochberg", "benjamini_yekutieli", "ebh"])
@contract_settings(20)
@given(case=pvalue_cases())
def test_multiple_testing_contract(fname, case):
    pv, q = case
    fn = getattr(jaxknock, fname)
    arg = 1.0 / np.maximum(np.asarray(pv, np.float64), 1e-300) if fname == "ebh" else pv
    if fname == "ebh" and np.asarray(pv).dtype == bool:
        arg = pv

    def check(mask):
        mask = np.asarray(mask)
        pf = np.asarray(pv, np.float64)
        if fname == "ebh":  # e-values: any non-negative numbers; eBH is BH on min(1, 1 / e)
            ef = np.asarray(arg, np.float64)
            valid = _fdr_ok(q) and np.asarray(arg).dtype != bool and ef.size and np.all(ef >= 0)
            pf = np.minimum(1.0, 1.0 / np.maximum(ef, 1e-300))
        else:
            valid = _fdr_ok(q) and np.asarray(pv).dtype != bool and pf.size and np.all((pf >= 0) & (pf <= 1))
        if not valid:
            raise Violation(f"{fname} gave a mask for pvalues={pf}, fdr={q!r}")
        ref = step_up_ref(pf, float(q), dependence=fname == "benjamini_yekutieli")
        if not np.array_equal(mask, ref):
            raise Violation(f"{fname}({pf}, {q}) = {mask}, reference {ref}")
        return "correct"

    run_contract(fname, lambda: fn(arg, q), check, _arg_names(fn))


@contract_settings(14)
@given(
    p=st.sampled_from([0, 1, 3]),
    method=st.sampled_from(["difference", "signed_max", "nope"]),
    dtype=st.sampled_from(["float64", "float32", "int32", "bool"]),
    nan=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_antisymmetric_combine_contract(p, method, dtype, nan, seed):
    Z = np.random.default_rng(seed).normal(size=(2, 2 * p))
    if nan and Z.size:
        Z[0, 0] = np.nan
    Z = cast(Z, dtype)
    swapped = np.concatenate([Z[:, p:], Z[:, :p]], axis=1)

    def check(W):
        W = np.asarray(W, np.float64)
        if np.any(np.isnan(W)):
            return "flagged"
        W2 = np.asarray(jaxknock.antisymmetric_combine(swapped, method=method), np.float64)
        np.testing.assert_allclose(W2, -W, atol=1e-6)  # antisymmetry
        return "correct"

    fn = jaxknock.antisymmetric_combine
    run_contract("antisymmetric_combine", lambda: fn(Z, method=method), check, _arg_names(fn))


# ----------------------------------------------------------- design family

LABELS = ["continuous", "binary01", "binary12", "strings", "three", "constant", "nan", "short"]


@st.composite
def xy_cases(draw, n_sizes=(0, 1, 12), p_sizes=(0, 1, 3), good_labels=("continuous", "binary01")):
    bad = draw(st.sampled_from(["none", "none", "none", "size", "X", "labels", "dtype"]))
    n = draw(st.sampled_from([v for v in n_sizes if v < 2] if bad == "size" else [max(n_sizes)]))
    p = draw(st.sampled_from([v for v in p_sizes if v] if bad != "size" else [v for v in p_sizes]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    scale = 10.0 ** draw(st.integers(-8, 8))
    X = rng.normal(size=(n, p)) * scale
    how = draw(st.sampled_from(["nan", "inf", "const_col"])) if bad == "X" else "none"
    if X.size and how == "nan":
        X[0, 0] = np.nan
    elif X.size and how == "inf":
        X[-1, -1] = np.inf
    elif X.size and how == "const_col":
        X[:, 0] = 1.0
    label = draw(st.sampled_from([v for v in LABELS if v not in good_labels] if bad == "labels" else good_labels))
    base = X[:, 0] / scale if p else rng.normal(size=n)
    base = np.nan_to_num(base) + rng.normal(size=n) * 0.1
    y = {
        "continuous": base,
        "binary01": (base > np.median(base)).astype(int) if n else np.zeros(0, int),
        "binary12": (base > np.median(base)).astype(int) + 1 if n else np.zeros(0, int),
        "strings": np.where(base > np.median(base) if n else np.zeros(0, bool), "pos", "neg"),
        "three": (np.arange(n) % 3),
        "constant": np.ones(n),
        "nan": np.where(np.arange(n) == 0, np.nan, base),
        "short": base[: max(n - 1, 0)],
    }[label]
    dtype = "bool" if bad == "dtype" else draw(st.sampled_from(["float64", "float64", "float32", "int32"]))
    return cast(X, dtype), y, label


def _finite_float(X):
    """A valid design: finite numbers (a bool design is its 0/1, as in scikit-learn's check_array)."""
    return np.all(np.isfinite(np.asarray(X).astype(np.float64)))


@contract_settings(20)
@given(case=xy_cases())
def test_empirical_covariance_contract(case):
    X, _, _ = case

    def check(S):
        S = np.asarray(S, np.float64)
        if np.any(np.isnan(S)):
            return "flagged"
        if not _finite_float(X):
            raise Violation("finite covariance of a design with NaN/Inf")
        ref = np.cov(np.asarray(X, np.float64), rowvar=False, bias=True).reshape(S.shape)
        tol = 1e-4 if np.asarray(X).dtype == np.float32 else 1e-8
        np.testing.assert_allclose(S, ref, rtol=tol, atol=tol * np.max(np.abs(ref), initial=0.0))
        return "correct"

    run_contract(
        "empirical_covariance",
        lambda: jaxknock.empirical_covariance(X),
        check,
        _arg_names(jaxknock.empirical_covariance),
    )


@contract_settings(20)
@given(case=xy_cases())
def test_ledoit_wolf_contract(case):
    X, _, _ = case

    def check(lw):
        C = np.asarray(lw.covariance, np.float64)
        a = float(lw.shrinkage)
        if np.any(np.isnan(C)) or np.isnan(a):
            return "flagged"
        if not _finite_float(X):
            raise Violation("finite Ledoit-Wolf estimate of a design with NaN/Inf")
        if not (0 <= a <= 1) or np.linalg.eigvalsh(0.5 * (C + C.T))[0] < -1e-6 * np.max(np.abs(C), initial=1.0):
            raise Violation(f"Ledoit-Wolf: shrinkage {a}, not PSD")
        return "correct"

    run_contract("ledoit_wolf", lambda: jaxknock.ledoit_wolf(X), check, _arg_names(jaxknock.ledoit_wolf))


def _regression_ok(X, y, label):
    return _finite_float(X) and label in ("continuous", "binary01", "binary12", "three") and np.shape(y)[0] > 1


@contract_settings(10)
@given(case=xy_cases(), lam=st.sampled_from([0.1, 0.1, 1e-3, 0.0, -1.0, np.nan]))
def test_lasso_contract(case, lam):
    X, y, label = case

    def check(sol):
        b = np.asarray(sol.value.coef if hasattr(sol.value, "coef") else sol.value, np.float64)
        if int(np.asarray(sol.result)) != 0 or not np.all(np.isfinite(b)):
            return "flagged"
        if not (_regression_ok(X, y, label) and lam > 0):
            raise Violation(f"successful lasso on invalid input (label={label}, lam={lam})")
        Xf, yf = np.asarray(X, np.float64), np.asarray(y, np.float64)
        Xc, yc = Xf - Xf.mean(0), yf - yf.mean()
        obj = 0.5 * np.mean((yc - Xc @ b.reshape(-1)) ** 2) + lam * np.abs(b).sum()
        if obj > 0.5 * np.mean(yc**2) * (1 + 1e-6) + 1e-12:
            raise Violation(f"lasso objective {obj} above that of b = 0")
        return "correct"

    run_contract("lasso", lambda: jaxknock.lasso(X, y, lam), check, _arg_names(jaxknock.lasso))


@contract_settings(10)
@given(case=xy_cases())
def test_lambda_max_and_grid_contract(case):
    X, y, label = case

    def check_max(lm):
        lm = float(lm)
        if np.isnan(lm):
            return "flagged"
        if not _regression_ok(X, y, label):
            raise Violation(f"lambda_max on invalid input ({label})")
        Xf, yf = np.asarray(X, np.float64), np.asarray(y, np.float64)
        ref = np.max(np.abs((Xf - Xf.mean(0)).T @ (yf - yf.mean()))) / len(yf)
        np.testing.assert_allclose(lm, ref, rtol=1e-4)
        return "correct"

    def check_grid(g):
        g = np.asarray(g, np.float64)
        if np.any(np.isnan(g)):
            return "flagged"
        if not _regression_ok(X, y, label):
            raise Violation(f"lambda_grid on invalid input ({label})")
        if not (np.all(np.diff(g) <= 0) and np.all(g >= 0)):
            raise Violation(f"lambda grid not decreasing and non-negative: {g}")
        return "correct"

    run_contract("lambda_max", lambda: jaxknock.lambda_max(X, y), check_max, _arg_names(jaxknock.lambda_max))
    run_contract("lambda_grid", lambda: jaxknock.lambda_grid(X, y, num=5), check_grid, _arg_names(jaxknock.lambda_grid))


def _swap(Xk):
    p = Xk.shape[1] // 2
    return np.concatenate([Xk[:, p:], Xk[:, :p]], axis=1)


@pytest.mark.parametrize("fname", ["marginal_correlation", "sparse_centroid", "lcd"])
@contract_settings(6)
@given(case=xy_cases(p_sizes=(0, 1, 2)))
def test_statistics_antisymmetry_contract(fname, case):
    X, y, label = case
    rng = np.random.default_rng(1)
    Xk = np.concatenate([X, cast(rng.normal(size=np.shape(X)), np.asarray(X).dtype.name)], axis=1)
    fn = getattr(jaxknock, fname)
    kwargs = {"lam": 0.1} if fname == "lcd" else {}

    def W_of(sol):
        v = sol.value if hasattr(sol, "value") else sol
        return np.asarray(v, np.float64)

    def check(sol):
        W = W_of(sol)
        if np.any(np.isnan(W)) or int(np.asarray(getattr(sol, "result", 0))) != 0:
            return "flagged"
        ok = _finite_float(Xk) and np.shape(y)[0] == np.shape(X)[0] and label not in ("nan",)
        if not ok:
            raise Violation(f"{fname} statistics on invalid input ({label})")
        W2 = W_of(fn(_swap(Xk), y, **kwargs))
        np.testing.assert_allclose(W2, -W, atol=1e-6 * max(1.0, np.max(np.abs(W), initial=0.0)))
        return "correct"

    run_contract(fname, lambda: fn(Xk, y, **kwargs), check, _arg_names(fn))


@contract_settings(5)
@given(
    case=xy_cases(n_sizes=(0, 1, 30), p_sizes=(0, 1, 4), good_labels=("continuous", "binary01", "binary12", "strings")),
    fdr=st.sampled_from([0.2, 0.2, 0.2, "0.1", 1.5]),
)
def test_knockoff_filter_contract(case, fdr):
    X, y, label = case
    p = np.shape(X)[1]

    def check(sel):
        chosen = np.asarray(sel.selected)
        if not (_fdr_ok(fdr) and _finite_float(X)):
            raise Violation(f"knockoff_filter ran on invalid input (fdr={fdr!r})")
        if chosen.size > p or (chosen.size and (chosen.min() < 0 or chosen.max() >= p)):
            raise Violation(f"selection {chosen} outside range({p})")
        if len(set(chosen.tolist())) != chosen.size:
            raise Violation(f"duplicate selections {chosen}")
        return "correct"

    run_contract(
        "knockoff_filter",
        lambda: jaxknock.knockoff_filter(
            jax.random.key(0), X, y, fdr=fdr, s_method="equicorrelated", statistic="correlation"
        ),
        check,
        _arg_names(jaxknock.knockoff_filter),
    )


@contract_settings(6)
@given(case=xy_cases(p_sizes=(0, 1, 3)))
def test_factor_model_from_data_contract(case):
    X, _, _ = case

    def check(fit):
        d, U = (np.asarray(a, np.float64) for a in fit.model)
        if not (np.all(np.isfinite(d)) and np.all(np.isfinite(U))):
            return "flagged"
        if not _finite_float(X):
            raise Violation("finite factor model of a design with NaN/Inf")
        if not np.all(d > 0):
            raise Violation(f"factor model with d = {d}")
        return "correct"

    run_contract(
        "factor_model_from_data",
        lambda: jaxknock.factor_model_from_data(jax.random.key(0), X, 1),
        check,
        _arg_names(jaxknock.factor_model_from_data),
    )


# ------------------------------------------------------- naive Bayes family


@st.composite
def count_cases(draw):
    X, y, label = draw(xy_cases(n_sizes=(0, 1, 12), p_sizes=(0, 1, 4), good_labels=("binary01", "binary12", "strings")))
    Xf = np.asarray(X, np.float64)
    with np.errstate(invalid="ignore"):
        counts = np.where(np.isfinite(Xf), np.round(np.abs(Xf)) % 7, Xf)
    if draw(st.sampled_from([False, False, False, True])) and counts.size:
        counts.flat[0] = -1.0
    return counts, y, label


def _counts_ok(X):
    X = np.asarray(X, np.float64)
    return np.all(np.isfinite(X)) and np.all(X >= 0)


def _labels_ok(y, n, label):
    return label in ("binary01", "binary12", "strings", "three") and np.shape(y)[0] == n and n > 0


@pytest.mark.parametrize("fname", ["sparse_naive_bayes", "sparse_naive_bayes_path"])
@contract_settings(8)
@given(case=count_cases())
def test_naive_bayes_contract(fname, case):
    X, y, label = case
    k = 1

    def check(sol):
        if np.any(np.asarray(sol.result) != 0):
            return "flagged"
        if not (_counts_ok(X) and _labels_ok(y, X.shape[0], label)):
            raise Violation(f"{fname} fitted invalid input (label={label})")
        if fname == "sparse_naive_bayes":
            if int(np.sum(np.asarray(sol.value.support))) > k:
                raise Violation("support larger than k")
            pred = sol.value.predict(X)
            if not set(np.asarray(pred).tolist()) <= set(np.asarray(sol.value.classes).tolist()):
                raise Violation(f"predictions {pred} outside the classes")
        return "correct"

    def call():
        if fname == "sparse_naive_bayes":
            return jaxknock.sparse_naive_bayes(X, y, k)
        return jaxknock.sparse_naive_bayes_path(X, y, [0, 1])

    run_contract(fname, call, check, _arg_names(getattr(jaxknock, fname)))


@contract_settings(8)
@given(case=count_cases())
def test_class_sums_and_predict_contract(case):
    X, y, label = case

    def check(sums):
        counts = np.asarray(sums.counts, np.float64)
        if np.any(np.isnan(counts)):
            return "flagged"
        if not (_counts_ok(X) and _labels_ok(y, X.shape[0], label)):
            raise Violation(f"class_sums of invalid input ({label})")
        ref = np.stack([X[np.asarray(y) == c].sum(0) for c in sums.classes])
        np.testing.assert_allclose(counts, ref)
        return "correct"

    run_contract("class_sums", lambda: jaxknock.class_sums(X, y), check, _arg_names(jaxknock.class_sums))

    # predict of a fixed, valid model on these counts
    Xtr = np.array([[3, 0, 1, 0], [0, 3, 0, 1]] * 3, float)
    model = jaxknock.sparse_naive_bayes(Xtr, np.array([0, 1] * 3), 2).value

    def check_predict(pred):
        if not _counts_ok(X):
            raise Violation("predict returned labels for NaN or negative counts")
        if not set(np.asarray(pred).tolist()) <= {0, 1}:
            raise Violation(f"labels {pred} outside the classes")
        return "correct"

    Xp = X if X.ndim == 2 and X.shape[1] == 4 else X
    run_contract("NaiveBayesModel.predict", lambda: model.predict(Xp), check_predict, ["X"])


# ------------------------------------------------------- other entry points


@contract_settings(20)
@given(
    sizes=st.lists(
        st.one_of(st.integers(-2, 9), st.sampled_from([8.5, 2.0, True, "4", np.nan, np.int64(3)])),
        min_size=0,
        max_size=4,
    )
)
def test_lifted_spec_sizes_contract(sizes):
    def check(spec):
        good = (
            len(sizes) >= 3
            and all(not isinstance(v, (bool, str)) for v in sizes)
            and all(np.isfinite(float(v)) and float(v) == int(v) and int(v) >= 1 for v in sizes)
        )
        if not good or spec.sizes != tuple(int(v) for v in sizes):
            raise Violation(f"LiftedSpec accepted sizes={sizes!r} as {spec.sizes}")
        return "correct"

    run_contract("LiftedSpec", lambda: jaxknock.LiftedSpec(tuple(sizes)), check, ["sizes"])


@contract_settings(12)
@given(n=st.sampled_from([0, 1, 5, 10]), folds=st.sampled_from([0, 1, 2, 3, 5, 2.5, "3"]))
def test_kfold_ids_contract(n, folds):
    def check(ids):
        ids = np.asarray(ids)
        if not (isinstance(folds, int) and 2 <= folds <= n):
            raise Violation(f"kfold_ids accepted n={n}, folds={folds!r}")
        counts = np.bincount(ids, minlength=folds)
        if ids.shape != (n,) or counts.max() - counts.min() > 1:
            raise Violation(f"unbalanced folds {counts}")
        return "correct"

    run_contract("kfold_ids", lambda: jaxknock.kfold_ids(n, folds), check, _arg_names(jaxknock.kfold_ids))


@contract_settings(10)
@given(kind=st.sampled_from(["valid", "random_bytes", "truncated", "zip_of_text", "dense_npz"]))
def test_npz_readers_contract(kind, tmp_path_factory):
    import zipfile

    import scipy.sparse as sp

    d = tmp_path_factory.mktemp("npz")
    path = d / "x.npz"
    M = sp.random(8, 3, density=0.5, format="csr", random_state=0)
    if kind == "valid":
        sp.save_npz(path, M)
    elif kind == "random_bytes":
        path.write_bytes(np.random.default_rng(0).bytes(300))
    elif kind == "truncated":
        sp.save_npz(path, M)
        path.write_bytes(path.read_bytes()[:150])
    elif kind == "zip_of_text":
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("hello.txt", "not an array")
    else:
        np.savez(path, X=np.ones((8, 3)))

    def check(blocks):
        if kind != "valid":
            raise Violation(f"iter_npz_blocks read a {kind} file")
        total = sum(b.shape[0] for _, b in blocks)
        if total != 8:
            raise Violation(f"{total} rows read")
        return "correct"

    run_contract("iter_npz_blocks", lambda: list(jaxknock.iter_npz_blocks(path)), check, [str(path), "path"])
    run_contract(
        "class_sums_npz",
        lambda: jaxknock.class_sums_npz([path], np.arange(8) % 2),
        lambda sums: check([(0, np.zeros((8, 1)))]),
        [str(path), "paths"],
    )


# Public names not fuzzed here, and why (each is still covered by its module's tests).
NOT_FUZZED = {
    "RESULTS": "an enumeration",
    "Solution": "a result container",
    "SolverError": "an exception type",
    "reraise_solver_errors": "a context manager (tests/test_svector.py)",
    "compilation_cache_dir": "no arrays: a path from the environment (tests/test_cli.py)",
    "enable_compilation_cache": "no arrays: a JAX setting (tests/test_cli.py)",
    "FactorModel": "a container (fuzzed through sdp_factor and the samplers)",
    "LedoitWolf": "a result container",
    "FactorFit": "a result container",
    "LassoState": "a state container",
    "Selection": "a result container",
    "ClassSums": "a container (fuzzed through class_sums)",
    "NaiveBayesModel": "a container (predict fuzzed above)",
    "SNBPath": "a result container",
    "SparseNaiveBayes": "scikit-learn estimator over sparse_naive_bayes (fuzzed above)",
    "LiftedHyper": "a container of scalars",
    "LiftedState": "a state container",
    "sdp_init": "step API of sdp (its inputs go through the same validate_sigma)",
    "sdp_step": "step API: takes a state",
    "newton_init": "step API of sdp (same validate_sigma)",
    "newton_step": "step API: takes a state",
    "sdp_factor_init": "step API of sdp_factor (same validate_model)",
    "sdp_factor_step": "step API: takes a state",
    "lasso_init": "step API of lasso (same _prepare)",
    "lasso_step": "step API: takes a state",
    "lasso_path": "same input checks as lasso (shared _prepare); compile cost",
    "lasso_cv": "same input checks as lasso (shared _prepare); compile cost",
    "lsm": "same input checks as lcd; compile cost of a lasso path per case",
    "shard_batch": "takes a user function; no array contract of its own",
    "device_mesh": "takes devices, not arrays",
    "plan_chunk": "takes integers (byte counts)",
    "process_replicates": "takes integers",
    "class_sums_dask": "needs dask arrays (same check_values as class_sums)",
    "fit_lifted": "compile cost per case (input checks in lifted/_inputs.py, tests/test_lifted.py)",
    "tune_lifted": "compile cost per case (same inputs as fit_lifted)",
    "predict_lifted": "takes trained parameters",
    "lifted_to_mlp": "takes trained parameters",
    "train_mlp": "needs an optax optimizer and parameters; compile cost",
    "mvr_factor": "factor model input (same validate_model as sdp_factor); tests/test_mvr_maxent.py",
    "maxent_factor": "factor model input (same validate_model as sdp_factor); tests/test_mvr_maxent.py",
    "mrc_objective_and_gap": "evaluates a given s (tests/test_mvr_maxent.py)",
    "stability_selection": "compile cost of a lasso path per case; input errors in tests/test_stability.py",
    "kernel_target_alignment": "tests/test_kernels.py (numpy references, bad input)",
    "hsic": "tests/test_kernels.py (naive estimator, bad input)",
    "greedy_kta_selection": "tests/test_kernels.py",
    "randsel": "compile cost per case; tests/test_kernels.py",
    "multi_knockoff_statistics": "tests/test_multi_knockoffs.py (brute-force references, bad input)",
    "multi_knockoff_threshold": "tests/test_multi_knockoffs.py",
    "multi_knockoff_select": "tests/test_multi_knockoffs.py",
    "group_statistics": "tests/test_group_knockoffs.py",
    "group_knockoff_select": "tests/test_group_knockoffs.py",
    "expand_groups": "tests/test_group_knockoffs.py",
    "group_s_matrix": "tests/test_group_knockoffs.py (cvxpy references, feasibility, bad groups)",
    "BlockDiagonal": "a container",
}

FUZZED_AS = {"LiftedSpec": "LiftedSpec"}


# ---- the host-level drivers: a specific error under jit / vmap, never JAX's generic tracer error ------


def _driver_calls():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6))
    y = X[:, 0] + rng.standard_normal(40)
    yb = (y > 0).astype(float)
    labels = (y > 0).astype(np.int32)
    spec = jaxknock.LiftedSpec((6, 4, 2))
    key = jax.random.key(0)
    return {
        "knockoff_filter": (lambda key, X, y: jaxknock.knockoff_filter(key, X, y).mask, (key, X, y)),
        "stability_selection": (
            lambda key, X, y: jaxknock.stability_selection(key, X, y, num_subsamples=4).selected,
            (key, X, y),
        ),
        "randsel": (lambda key, X, y: jaxknock.randsel(key, X, y, num_subsamples=4).selected, (key, X, yb)),
        "greedy_kta_selection": (lambda key, X, y: jaxknock.greedy_kta_selection(X, y, jnp.arange(6))[0], (key, X, y)),
        # an obscure TracerArrayConversionError before
        "fit_lifted": (lambda key, X, y: jaxknock.fit_lifted(key, X, y, spec).value, (key, X, labels)),
        "tune_lifted": (
            lambda key, X, y: jaxknock.tune_lifted(key, X, y, spec, lam=[0.1, 1.0]).value,
            (key, X, labels),
        ),
    }


DRIVERS = ["knockoff_filter", "stability_selection", "randsel", "greedy_kta_selection", "fit_lifted", "tune_lifted"]


@pytest.mark.parametrize("name", DRIVERS)
def test_drivers_say_they_run_eagerly(name):
    fn, args = _driver_calls()[name]
    args = tuple(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
    msg = rf"jaxknock\.{name} runs eagerly .*`(key|X)` is traced .*outside the transformation"
    with pytest.raises(TypeError, match=msg):
        jax.jit(fn)(*args)
    if name == "greedy_kta_selection":
        return  # no key
    # vmap over keys (a simulation of many seeds) names the key
    keys = jax.random.split(args[0], 2)
    with pytest.raises(TypeError, match=r"runs eagerly .*`key` is traced"):
        jax.vmap(fn, in_axes=(0, None, None))(keys, *args[1:])


def test_zz_every_public_array_function_is_fuzzed_or_excused():
    fuzzed = set(TALLY)
    missing = [name for name in jaxknock.__all__ if name not in NOT_FUZZED and FUZZED_AS.get(name, name) not in fuzzed]
    assert not missing, f"public functions neither fuzzed nor excused: {missing}"
    total = collections.Counter()
    for c in TALLY.values():
        total.update(c)
    assert total["correct"] > 0 and total["flagged"] > 0 and total["clear error"] > 0, total


def test_eager_checks_compile_one_program_each_not_one_per_operation():
    """Eager validation ran its device work as separate eager operations, each a compiled program in a fresh
    process: ``validate_sigma`` under ``jax.ensure_compile_time_eval`` (about twenty programs more in a first
    ``sdp`` / ``mvr`` call), ``as_binary_labels`` (eleven in a first l1-logistic fit), the group solver's input
    code and block-diagonal helpers (thirty in a first grouped filter). Shapes below are ones no other test
    compiles for, so every program is counted."""
    from helpers import count_compiles

    from jaxknock import _checks, _sigma_checks
    from jaxknock.svector import group

    Sigma = 0.5 * jnp.eye(11) + 0.5
    with count_compiles() as compiles:
        _sigma_checks.validate_sigma(Sigma)
    assert [c.split()[1] for c in compiles] == ["jit(_sigma_flags)"]
    pm = jax.device_put(np.asarray([1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, 1.0, -1.0]))
    with count_compiles() as compiles:
        labels = _checks.as_binary_labels(pm, jnp.float32)
        bad = _checks.as_binary_labels(np.asarray([0.0, 2.0] * 5 + [0.0]), jnp.float32)
    assert compiles == []
    assert labels.dtype == jnp.float32 and np.array_equal(labels, [1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0])
    assert np.isnan(bad).all()  # labels {0, 2}: not a valid two-class response
    zero, ones, groups = jax.device_put(np.int32(0)), jax.device_put(np.ones((4, 3, 3))), np.arange(11) // 3
    with count_compiles() as compiles:
        code = _checks.combine_codes(_sigma_checks.traced_sigma_code(Sigma), zero)
        dense = group.block_diagonal(ones, group.group_index(groups, 11)).dense()
    assert len(compiles) <= 8 and int(code) == 0  # was 30: the two helpers, their index arrays' transfers
    np.testing.assert_array_equal(dense, np.kron(np.eye(4), np.ones((3, 3)))[:11, :11])
