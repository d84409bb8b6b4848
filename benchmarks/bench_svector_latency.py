"""Warm latency and recompiles of the S-vector solvers (issue 20: GPU readiness).

For each solver: the best of ``--repeats`` warm calls (after one warm-up call,
``block_until_ready`` on the result), the number of XLA compilations on a
repeated identical call (target 0) and on a call with a new ``tol`` (target 0
where the solver has one), the result code and ``sum(s)`` (so that runs before
and after a change can be compared line by line). ``Sigma`` is a Ledoit-Wolf
correlation of ``n = p / 2`` rows drawn from a 10-factor model (an "LW-like"
correlation, like the one ``knockoff_filter`` solves).

Usage::

    python benchmarks/bench_svector_latency.py            # p = 200 (targets: equicorrelated
                                                          # <= 20 ms, asdp <= 250 ms on 2 CPU cores)
    python benchmarks/bench_svector_latency.py --small    # p = 40 smoke run (CI)
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxknock  # noqa: E402
from jaxknock import FactorModel  # noqa: E402

TARGETS_MS = {"equicorrelated": 20.0, "asdp": 250.0}


class CompileCounter:
    """Counts XLA backend compilations (``jax.monitoring`` duration events) while active."""

    def __init__(self):
        self.count = 0

    def _listener(self, event, duration, **kwargs):
        if "backend_compile" in event:
            self.count += 1

    def __enter__(self):
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listener)


def lw_correlation(p, seed=0):
    rng = np.random.default_rng(seed)
    n = max(p // 2, 10)
    X = rng.standard_normal((n, 10)) @ rng.standard_normal((10, p)) + rng.standard_normal((n, p))
    return jaxknock.to_correlation(jaxknock.ledoit_wolf(jnp.asarray(X)).covariance)


def factor_model(p, k=10, seed=1):
    rng = np.random.default_rng(seed)
    return FactorModel(jnp.asarray(rng.uniform(0.5, 1.0, p)), jnp.asarray(rng.standard_normal((p, k)) / np.sqrt(k)))


def block(sol):
    jax.block_until_ready(sol.value)
    return sol


def measure(name, call, repeats, tol_call=None):
    sol = block(call())  # warm-up (compiles)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sol = block(call())
        times.append(time.perf_counter() - t0)
    with CompileCounter() as again:
        block(call())
    retol = "-"
    if tol_call is not None:
        with CompileCounter() as c:
            block(tol_call())
        retol = c.count
    return {
        "name": name,
        "ms": 1e3 * min(times),
        "compiles_repeat": again.count,
        "compiles_new_tol": retol,
        "result": int(np.max(np.asarray(sol.result))),
        "sum": float(np.sum(np.asarray(sol.stats["objective"]))),
        "steps": int(np.max(np.asarray(sol.stats["num_steps"]))),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="p = 40 smoke run")
    ap.add_argument("--p", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    p = args.p or (40 if args.small else 200)
    C = lw_correlation(p)
    s_half = 0.5 * jaxknock.equicorrelated(C).value + 0.3
    model = factor_model(max(p, 50))
    rows = [
        measure("equicorrelated", lambda: jaxknock.equicorrelated(C), args.repeats),
        measure(
            "asdp",
            lambda: jaxknock.asdp(C, block_size=max(p // 2, 2)),
            args.repeats,
            lambda: jaxknock.asdp(C, block_size=max(p // 2, 2), tol=2e-5),
        ),
        measure("scale_to_feasible", lambda: jaxknock.scale_to_feasible(C, s_half), args.repeats),
        measure(
            "sdp newton",
            lambda: jaxknock.sdp(C),
            args.repeats,
            lambda: jaxknock.sdp(C, tol=2e-5, lam0=0.4),
        ),
        measure(
            "sdp coordinate",
            lambda: jaxknock.sdp(C, method="coordinate"),
            args.repeats,
            lambda: jaxknock.sdp(C, method="coordinate", tol=2e-5, decay=0.7),
        ),
        measure(
            "sdp_factor",
            lambda: jaxknock.sdp_factor(model),
            args.repeats,
            lambda: jaxknock.sdp_factor(model, tol=2e-5, decay=0.5, lam0=0.3),
        ),
    ]
    print(f"S-vector latency, p = {p} ({jax.default_backend()}, best of {args.repeats} warm calls)")
    hdr = f"{'solver':<18}{'ms':>10}{'target':>8}{'ratio':>7}{'recomp':>8}{'new tol':>8}{'code':>6}{'steps':>6}  sum(s)"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        tgt = TARGETS_MS.get(r["name"]) if p == 200 else None
        ratio = f"{r['ms'] / tgt:.2f}" if tgt else "-"
        print(
            f"{r['name']:<18}{r['ms']:>10.2f}{(f'{tgt:.0f}' if tgt else '-'):>8}{ratio:>7}"
            f"{r['compiles_repeat']:>8}{r['compiles_new_tol']!s:>8}{r['result']:>6}{r['steps']:>6}  {r['sum']:.10f}"
        )
    return rows


if __name__ == "__main__":
    main()
