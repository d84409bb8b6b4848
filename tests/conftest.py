import os

# XLA_FLAGS for the tests (LLVM passes off) are set in the repository's conftest.py, loaded first.
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
    # no test may turn on JAX's persistent compilation cache in this process: it would
    # hide compile costs locally that CI (a fresh machine) pays
    assert jax.config.jax_compilation_cache_dir is None, "a test enabled the persistent compilation cache"


# Test files that take longest, slowest first (per-file sums of --durations, session 44: test_l1_working_set.py
# alone is a fifth of the suite's test time). With ``-n auto --dist loadfile`` each file runs on one worker,
# handed out in this order as workers free up (longest processing time first); xdist would otherwise order
# files by their number of tests, which left several minute-long files (README, notebooks, scikit-learn
# checks, a handful of tests each) for the end, where one worker finished them while the other idled; and
# a long file handed out late has the same effect. Files not named here follow, most tests first.
SLOW_FILES_FIRST = (
    "test_l1_working_set.py",
    "test_pipeline.py",
    "test_l1.py",
    "test_capacity.py",
    "test_filter.py",
    "test_group_knockoffs.py",
    "test_sampling.py",
    "test_stability.py",
    "test_svector.py",
    "test_statistics.py",
    "test_mvr_maxent.py",
    "test_naive_bayes.py",
    "test_contracts.py",
    "test_default_codegen.py",
    "test_covariance.py",
    "test_kernels.py",
    "test_multi_knockoffs.py",
    "test_sdp_multi.py",
    "test_readme.py",
    "test_cli.py",
    "test_group_pipeline.py",
    "test_group_mvr.py",
    "test_lifted.py",
    "test_notebooks.py",
    "test_sklearn.py",
)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order set below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    by_file = {}
    for item in items:
        by_file.setdefault(item.path.name, []).append(item)
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    order = sorted(by_file, key=lambda name: (rank.get(name, len(rank)), -len(by_file[name])))
    items[:] = [item for name in order for item in by_file[name]]
