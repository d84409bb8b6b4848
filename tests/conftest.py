import os

import jax

jax.config.update("jax_enable_x64", True)
# CLI calls made in this process must not turn on the persistent compilation cache
# (tests of the cache set their own directory in a subprocess)
os.environ.setdefault("JAXKNOCK_NO_COMPILE_CACHE", "1")

import pytest  # noqa: E402

DATA_DIR = os.environ.get(
    "JAXKNOCK_DATA",
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"),
)


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def data_dir():
    return os.path.abspath(DATA_DIR)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled executables after each test module.

    The suite compiles a few thousand XLA:CPU programs in one process; keeping
    them all alive until the end once crashed the compiler (a segfault in
    ``backend_compile_and_load``) late in a full run, while every module passes
    on its own. Modules share almost no programs, so this costs little.
    """
    yield
    jax.clear_caches()
