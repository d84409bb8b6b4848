import os

import jax

jax.config.update("jax_enable_x64", True)

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
