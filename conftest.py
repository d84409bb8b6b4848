"""Repository-level pytest hooks (the package's docstring examples; tests/ has its own conftest)."""

import os

import jax
import pytest

# Tests and docstring examples are bound by XLA compile time, not by run time: in tests/test_pipeline.py 89 s of
# 109 s were XLA:CPU compiles (JAX_LOG_COMPILES=1, session 36). They therefore compile without LLVM's optimisation
# passes (--xla_backend_optimization_level=0: the test run 1598 -> 1295 s on the 2-core CI machine of session 36,
# the docstring examples 217 -> 168 s in session 38) and with XLA:CPU's legacy loop emitters instead of the
# fusion emitters (--xla_cpu_use_fusion_emitters=false: the test run 43 -> 21 min on session 38/39's 2-core VM).
# XLA's own graph passes still run. Every numerical assertion compares with a tolerance that the rounding of
# either code generator meets, or within one process. The legacy emitters first made 4 tests fail (session 38):
# they exposed rounding drift in the coordinate-descent lasso's incrementally updated predictor, which the
# extrapolations amplified until the certificate no longer described the coefficients; the solver now recomputes
# the predictor at each certificate (jaxknock.l1.solvers.certify), a fix for users too. The benchmarks and users
# run at XLA's defaults. JAXKNOCK_TEST_XLA_OPT=default opts out; an XLA_FLAGS that sets either flag is kept.
# Set before the first computation initialises the backend (importing jax does not).
_TEST_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
if os.environ.get("JAXKNOCK_TEST_XLA_OPT") != "default":
    _given = os.environ.get("XLA_FLAGS", "")
    _extra = [f"--{k}={v}" for k, v in _TEST_XLA_FLAGS.items() if k not in _given]
    os.environ["XLA_FLAGS"] = " ".join([_given, *_extra]).strip()


@pytest.fixture(autouse=True)
def _doctest_keeps_precision_local(request):
    """A docstring example that turns on float64 (``jax_enable_x64``) does so for itself only.

    Without this, every example that ran after it in the same worker ran in
    float64, so the float32 examples were tested in whichever precision the
    order of files gave them.
    """
    if type(request.node).__name__ != "DoctestItem":  # tests/ keeps its own (global float64)
        yield
        return
    before = jax.config.jax_enable_x64
    yield
    jax.config.update("jax_enable_x64", before)
