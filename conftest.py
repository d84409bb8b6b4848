"""Repository-level pytest hooks (the package's docstring examples; tests/ has its own conftest)."""

import os

# Tests and docstring examples are bound by XLA compile time, not by run time: in tests/test_pipeline.py 89 s of
# 109 s were XLA:CPU compiles (JAX_LOG_COMPILES=1, session 36). They therefore compile without LLVM's optimisation
# passes: the full test run went from 1598 s to 1295 s on the 2-core CI machine (session 36), the docstring
# examples from 217 s to 168 s (session 38, a 2-core VM 2.3x slower). XLA's own graph passes still run, and
# every numerical assertion compares with a tolerance or within one process (the same flags on both sides).
# Tried and dropped (session 38): adding --xla_cpu_use_fusion_emitters=false halved the test run (43 -> 23 min)
# but moved the lasso's duality gaps by up to 1e-10 (negative gaps, tol = 1e-12 unreachable: 4 tests failed);
# the CPU_OPT_PRESET_FAST_COMPILE preset compiled slower. The benchmarks run at the default level.
# JAXKNOCK_TEST_XLA_OPT=default opts out; an XLA_FLAGS that sets the level itself is kept. Set before the first
# computation initialises the backend (importing jax does not).
if os.environ.get("JAXKNOCK_TEST_XLA_OPT") != "default" and "xla_backend_optimization_level" not in os.environ.get(
    "XLA_FLAGS", ""
):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import jax
import pytest


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
