"""Issue 20: backend choices in one place, memory planning without bytes_limit, lifted matmul precision."""

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxknock import _backend, _memory
from jaxknock.l1 import settings as l1_settings
from jaxknock.lifted import LiftedSpec, init_lifted_state, lifted_batch_step, lifted_bcd_step, mlp_init

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------
# _backend: the only module that branches on the platform
# --------------------------------------------------------------------------


def test_platform_branches_live_in_backend_module():
    pattern = re.compile(r"default_backend\(\)|\.platform\s*==|platform\(\)\s*==")
    offenders = []
    for path in sorted((ROOT / "jaxknock").rglob("*.py")):
        if path.name == "_backend.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    # _memory counts CPU devices to share host RAM among them (not a tuning choice)
    assert [o for o in offenders if not o.startswith("jaxknock/_memory.py")] == [], offenders


def test_backend_choices(monkeypatch):
    assert _backend.check_every("fista", "cpu") == 10 and _backend.check_every("lifted_inner", "gpu") == 3
    assert _backend.lasso_solver("cpu") == "cd" and _backend.lasso_solver("cuda") == "fista"
    assert _backend.loop_over_batch("snb_path", "cpu") and not _backend.loop_over_batch("stability_subsamples", "tpu")
    assert _backend.loop_over_batch("lifted_models", "cpu") and not _backend.loop_over_batch("lifted_models", "gpu")
    assert _backend.loop_over_batch("svector_problems", "cpu")
    assert not _backend.loop_over_batch("svector_problems", "gpu")
    assert _backend.loop_over_batch("cv_replicates", "cpu") and not _backend.loop_over_batch("cv_replicates", "gpu")
    # stability lockstep: a cache-sized chunk for a small design on CPU, the memory plan otherwise
    assert _backend.lockstep_chunk(2**20, "cpu") == 8 and _backend.lockstep_chunk(2**30, "cpu") is None
    assert _backend.lockstep_chunk(2**20, "gpu") is None
    with pytest.raises(ValueError, match="no check stride for loop 'nope'"):
        _backend.check_every("nope")
    with pytest.raises(ValueError, match="unknown batch"):
        _backend.loop_over_batch("nope")
    # the lasso's "auto" follows the backend module, not a private test of its own
    assert l1_settings.resolve_solver("auto") == _backend.lasso_solver()
    monkeypatch.setattr(_backend, "platform", lambda: "gpu")
    assert l1_settings.resolve_solver("auto") == "fista"
    assert l1_settings.resolve_solver("cd") == "cd"


# --------------------------------------------------------------------------
# _memory: an accelerator without bytes_limit is not credited with host RAM
# --------------------------------------------------------------------------


class FakeDevice:
    process_index = 0

    def __init__(self, platform, stats):
        self.platform = platform
        self._stats = stats

    def memory_stats(self):
        if isinstance(self._stats, Exception):
            raise self._stats
        return self._stats


def test_device_memory_without_bytes_limit(monkeypatch):
    host = 512 * 2**30
    monkeypatch.setattr(_memory, "host_available_bytes", lambda: host)
    fb = _memory.ACCELERATOR_FALLBACK_BYTES
    gib = 2**30
    assert _memory.device_memory_bytes([FakeDevice("gpu", {"bytes_limit": 16 * gib, "bytes_in_use": gib})]) == 15 * gib
    assert _memory.device_memory_bytes([FakeDevice("gpu", {"bytes_in_use": gib})]) == fb - gib
    assert _memory.device_memory_bytes([FakeDevice("gpu", None)]) == fb
    assert _memory.device_memory_bytes([FakeDevice("gpu", RuntimeError("no stats"))]) == fb
    assert _memory.device_memory_bytes([FakeDevice("gpu", {"bytes_in_use": 2 * fb})]) == 0
    # CPU devices still share the host's available memory
    assert _memory.device_memory_bytes([FakeDevice("cpu", None), FakeDevice("cpu", {})]) == host // 2
    # the minimum over a mixed list, and a chunk planned from the fallback, not from host RAM
    assert _memory.device_memory_bytes([FakeDevice("cpu", None), FakeDevice("gpu", {})]) == fb
    monkeypatch.setattr(_memory, "device_memory_bytes", lambda devices=None: fb)
    assert _memory.plan_chunk(10**6, gib) == 2  # half of 4 GiB, 1 GiB per item


# --------------------------------------------------------------------------
# lifted: every matrix product at Precision.HIGHEST, same numbers on CPU
# --------------------------------------------------------------------------


def _dot_precisions(jaxpr, out):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            out.append(eqn.params["precision"])
        for sub in jax.core.jaxprs_in_params(eqn.params):
            _dot_precisions(sub, out)
    return out


def _lifted_problem(dtype):
    key = jax.random.key(3)
    X = jax.random.normal(key, (40, 5), dtype)
    y = jnp.argmax(X[:, :3], axis=1)
    Y = jax.nn.one_hot(y, 3, dtype=dtype)
    spec = LiftedSpec((5, 7, 3), lam=1.0, rho=1e-3)
    params = mlp_init(jax.random.key(4), (5, 7, 3), dtype=dtype)
    return spec, params, X, Y


_bcd = jax.jit(lifted_bcd_step, static_argnames=("spec", "inner_tol", "inner_max_steps"))


@pytest.mark.parametrize("model", ["fenchel", "lifted"])
def test_lifted_products_run_at_highest_precision(model):
    spec, params, X, Y = _lifted_problem(jnp.float32)
    spec = LiftedSpec(spec.sizes, lam=1.0, rho=1e-3, model=model)
    state = init_lifted_state(params, X, spec)
    jx = jax.make_jaxpr(lambda s: lifted_bcd_step(s, X, Y, spec, inner_tol=1e-4))(state)
    precisions = _dot_precisions(jx.jaxpr, [])
    jb = jax.make_jaxpr(lambda p: lifted_batch_step(p, X, Y, spec, inner_tol=1e-4))(params)
    precisions = _dot_precisions(jb.jaxpr, precisions)
    assert len(precisions) > 10
    highest = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
    assert all(p == highest for p in precisions), sorted(set(map(str, precisions)))


def test_lifted_step_unchanged_by_default_matmul_precision():
    # explicit HIGHEST makes the result independent of the global default
    # (on a GPU the default would be TF32); on CPU both must agree bit for bit
    spec, params, X, Y = _lifted_problem(jnp.float32)
    state = init_lifted_state(params, X, spec)
    ref, _ = _bcd(state, X, Y, spec, inner_tol=1e-4)
    with jax.default_matmul_precision("bfloat16"):
        low, _ = jax.jit(lifted_bcd_step, static_argnames=("spec", "inner_tol"))(state, X, Y, spec, inner_tol=1e-4)
    for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(low)):
        assert a.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
