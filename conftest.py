"""Repository-level pytest hooks (the package's docstring examples; tests/ has its own conftest)."""

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
