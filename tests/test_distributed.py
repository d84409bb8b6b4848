"""Sharding over devices, memory planning, multi-process aggregation, out-of-core class sums.

Multi-device checks run in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (this pytest process
already initialised jax with one CPU device); the multi-process check starts
two processes joined by ``jax.distributed.initialize`` on localhost.
"""

import json
import os
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import run_json_script

import jaxknock
from jaxknock import distributed as dist
from jaxknock.naive_bayes import class_sums_blocks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(devices=8):
    env = dict(os.environ)
    # appended: the other flags (tests/conftest.py's optimisation level) stay those of this process
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_ENABLE_X64"] = "1"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_script(code, *, devices=8, timeout=240):
    """Run ``code`` in a fresh interpreter with ``devices`` CPU devices; it prints one JSON line last."""
    return run_json_script(code, _env(devices), timeout=timeout)


# --------------------------------------------------------------------------
# 8 simulated devices: sharded == single device, same key
# --------------------------------------------------------------------------

_SHARDED = """
import json, jax, jax.numpy as jnp, numpy as np
import jaxknock
from jaxknock import distributed as dist
assert len(jax.devices()) == 8
out = {}
def gap(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))

X = jax.random.normal(jax.random.key(1), (40, 6))
Sigma = 0.5 * jnp.eye(6) + 0.5
s = jnp.full(6, 0.9)
ref = jaxknock.sample_replicates(jax.random.key(0), X, Sigma, s, 7, devices=1)
for d in (3, 8):   # 7 replicates: padded on both counts
    Xk = jaxknock.sample_replicates(jax.random.key(0), X, Sigma, s, 7, devices=d)
    out[f"sample_{d}"] = gap(Xk, ref)
out["sample_sharded"] = len(Xk.sharding.device_set)
chunks = list(jaxknock.sample_replicates(jax.random.key(0), X, Sigma, s, 7, devices=4, chunk_size=1,
                                         stream=True))
out["stream"] = gap(jnp.concatenate([np.asarray(c) for c in chunks]), ref)
out["stream_sizes"] = [int(c.shape[0]) for c in chunks]
mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("replicas",))
out["sample_mesh"] = gap(jaxknock.sample_replicates(jax.random.key(0), X, Sigma, s, 7, mesh=mesh), ref)

beta = jnp.zeros(6).at[:2].set(2.0)
y = X @ beta + 0.5 * jax.random.normal(jax.random.key(3), (40,))
kw = dict(s_method="equicorrelated", statistic="correlation", num_replicates=5)
r = jaxknock.knockoff_filter(jax.random.key(2), X, y, devices=1, **kw)
o = jaxknock.knockoff_filter(jax.random.key(2), X, y, devices=4, **kw)
out["filter_W"] = gap(r.W, o.W)
out["filter_same_selection"] = r.selected.tolist() == o.selected.tolist()

Sig = jnp.stack([0.5 * jnp.eye(5) + 0.5, jnp.eye(5), 0.3 * jnp.eye(5) + 0.7])
for m in ("equicorrelated", "sdp"):
    a = dist.sdp_batch(Sig, method=m, devices=1)
    b = dist.sdp_batch(Sig, method=m, devices=8)
    out[f"sdp_{m}"] = gap(a.value, b.value)
    out[f"sdp_{m}_single"] = max(gap(getattr(jaxknock, m)(Sig[i]).value, b.value[i]) for i in range(3))
    out[f"sdp_{m}_codes"] = np.asarray(a.result).tolist() == np.asarray(b.result).tolist()
print(json.dumps(out))
"""


def test_sharded_equals_single_device():
    out = _run_script(_SHARDED)
    for name in (
        "sample_3",
        "sample_8",
        "stream",
        "sample_mesh",
        "filter_W",
        "sdp_equicorrelated",
        "sdp_sdp",
        "sdp_equicorrelated_single",
        "sdp_sdp_single",
    ):
        assert out[name] <= 1e-12, (name, out[name])
    assert out["sample_sharded"] == 8
    assert out["stream_sizes"] == [4, 3]
    assert out["filter_same_selection"]
    assert out["sdp_equicorrelated_codes"] and out["sdp_sdp_codes"]


_LIFTED = """
import json, jax, jax.numpy as jnp, numpy as np
import jaxknock
X = jax.random.normal(jax.random.key(1), (32, 4))
y = (X[:, 0] > 0).astype(jnp.int32)
spec = jaxknock.LiftedSpec((4, 8, 2))
lam = jnp.array([0.5, 1.0, 2.0])
kw = dict(lam=lam, epochs=2, batch_size=16)
a = jaxknock.tune_lifted(jax.random.key(0), X, y, spec, devices=1, **kw)
b = jaxknock.tune_lifted(jax.random.key(0), X, y, spec, devices=2, **kw)  # H = 3 padded to 4
gap = max(float(np.max(np.abs(np.asarray(u) - np.asarray(v))))
          for u, v in zip(jax.tree_util.tree_leaves(a.value), jax.tree_util.tree_leaves(b.value)))
print(json.dumps({"gap": gap, "shape": list(b.stats["objective"].shape),
                  "obj": float(np.max(np.abs(a.stats["objective"] - b.stats["objective"]))),
                  "result": np.asarray(b.result).tolist(),
                  "lead": int(jax.tree_util.tree_leaves(b.value)[0].shape[0])}))
"""


def test_tune_lifted_sharded_equals_single_device():
    out = _run_script(_LIFTED)
    # float64; the per-device batch (2 of the padded 4 against 3) may be vectorised differently, so
    # equal up to rounding (1.5e-12 seen); a wrong key, padding or gather is off by O(1)
    assert out["gap"] <= 1e-10 and out["obj"] <= 1e-10
    assert out["shape"] == [3, 2] and out["lead"] == 3 and len(out["result"]) == 3


# --------------------------------------------------------------------------
# One device (this process): shard_batch, memory planning, errors
# --------------------------------------------------------------------------


def test_shard_batch_one_device_equals_vmap_with_padding():
    keys = jax.random.split(jax.random.key(0), 7)

    def f(k, scale):
        return {"x": scale * jax.random.normal(k, (3,)), "n": jnp.sum(jax.random.uniform(k, (2,)))}

    ref = jax.vmap(f, in_axes=(0, None))(keys, 2.0)
    for chunk in (None, 1, 3):
        out = dist.shard_batch(f, keys, broadcast=(2.0,), devices=1, chunk_size=chunk)
        assert np.array_equal(out["x"], ref["x"]) and np.array_equal(out["n"], ref["n"])
    vec = dist.shard_batch(
        lambda k, s: jax.vmap(f, in_axes=(0, None))(k, s),
        keys,
        broadcast=(2.0,),
        devices=1,
        chunk_size=2,
        vectorized=True,
    )
    assert np.array_equal(vec["x"], ref["x"])


def test_shard_batch_errors():
    keys = jax.random.split(jax.random.key(0), 4)
    with pytest.raises(ValueError, match="same leading"):
        dist.shard_batch(lambda a, b: a + b, jnp.ones(3), jnp.ones(4), devices=1)
    with pytest.raises(ValueError, match="device_count"):
        dist.shard_batch(lambda k: k, keys, devices=len(jax.devices()) + 1)
    with pytest.raises(ValueError, match="not both"):
        dist.shard_batch(lambda k: k, keys, devices=1, mesh=dist.device_mesh(1))
    with pytest.raises(ValueError, match="axis_name"):
        dist.shard_batch(lambda k: k, keys, mesh=dist.device_mesh(1, axis_name="x"))
    with pytest.raises(ValueError, match="chunk_size"):
        dist.shard_batch(lambda k: k, keys, devices=1, chunk_size=0)


def test_shard_batch_takes_a_jax_integer_chunk_size():
    """``chunk_size=jnp.int32(3)`` was refused ("must be a positive int or None") though ``np.int32(3)``
    was taken, as every other count setting takes both (``_checks.int_setting``); ``True`` is still refused."""
    x = jnp.arange(10.0)
    out = dist.shard_batch(lambda a: 2 * a, x, devices=1, chunk_size=jnp.int32(3))
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(ValueError, match="chunk_size"):
        dist.shard_batch(lambda a: 2 * a, x, devices=1, chunk_size=True)


def test_plan_chunk_respects_budget_and_names_the_knob():
    M, per, shared = 1000 * 2**20, 7 * 2**20, 100 * 2**20
    for R, D in ((10, 1), (1000, 1), (1000, 4), (3, 8)):
        c = dist.plan_chunk(R, per, shared_bytes=shared, num_devices=D, memory_bytes=M)
        assert 1 <= c <= -(-R // D)
        assert shared + c * per <= M // 2 or c == 1
        if c < -(-R // D):  # the budget binds: one more item would overflow it
            assert shared + (c + 1) * per > M // 2
    assert dist.plan_chunk(1000, per, shared_bytes=shared, memory_bytes=M) == (M // 2 - shared) // per
    with pytest.raises(ValueError, match="pass my_knob="):
        dist.plan_chunk(5, 2 * M, memory_bytes=M, knob="my_knob")
    assert dist.device_memory_bytes() > 0


def test_plan_chunk_checks_its_counts_and_bytes():
    """``num_devices=0`` was taken as 1 and ``num_items=2.5`` as 2, and a NaN byte count failed in ``int()``
    ("cannot convert float NaN to integer") naming nothing."""
    for kw, name in (
        (dict(num_devices=0), "num_devices"),
        (dict(num_items=2.5), "num_items"),
        (dict(per_item_bytes=float("nan")), "per_item_bytes"),
        (dict(shared_bytes=float("inf")), "shared_bytes"),
        (dict(memory_bytes=float("nan")), "memory_bytes"),
    ):
        args = {"num_items": 10, "per_item_bytes": 100, "memory_bytes": 10_000, **kw}
        with pytest.raises(ValueError, match=name):
            dist.plan_chunk(args.pop("num_items"), args.pop("per_item_bytes"), **args)
    assert dist.plan_chunk(np.int64(10), np.int64(100), num_devices=np.int32(2), memory_bytes=10_000) == 5


def test_sample_replicates_memory_plan_on_one_device():
    # the single-device replicate planner: a budget too small for the result asks for stream=True
    from jaxknock import _memory

    shared, per_rep = _memory.knockoff_bytes(50, 20, None, 8)
    assert _memory.replicate_chunk(100, 50, 20, 8, shared, per_rep, stream=False, memory_bytes=10**9) == 100
    with pytest.raises(ValueError, match="stream=True"):
        _memory.replicate_chunk(100, 50, 20, 8, shared, per_rep, stream=False, memory_bytes=100 * 50 * 20 * 8)
    with pytest.raises(ValueError, match="stream=True"):  # sharded planner, via plan_chunk
        dist.plan_chunk(4, 10, shared_bytes=10**6, memory_bytes=10**5, knob="stream=True")


def test_sdp_batch_one_device_matches_solver():
    Sig = jnp.stack([0.5 * jnp.eye(4) + 0.5, jnp.eye(4)])
    sol = jaxknock.sdp_batch(Sig, method="equicorrelated", devices=1)
    assert np.allclose(sol.value, [[1.0] * 4, [1.0] * 4])
    with pytest.raises(ValueError, match="method"):
        jaxknock.sdp_batch(Sig, method="nope")
    with pytest.raises(ValueError, match=r"\(B, p, p\)"):
        jaxknock.sdp_batch(Sig[0])


def test_process_replicates_partition():
    for R, n in ((10, 3), (2, 4), (7, 1)):
        parts = [jaxknock.process_replicates(R, process_index=i, process_count=n) for i in range(n)]
        assert sum((list(range(R))[s] for s in parts), []) == list(range(R))
    assert jaxknock.process_replicates(5) == slice(0, 5)
    assert jaxknock.process_replicates(np.int64(5)) == slice(0, 5)
    # 2.7 was truncated to 2 and "3" accepted; process_count = 0 blamed process_index
    for bad, name in ((2.7, "num_replicates"), ("3", "num_replicates")):
        with pytest.raises(TypeError, match=name):
            jaxknock.process_replicates(bad)
    with pytest.raises(ValueError, match="process_count must be >= 1"):
        jaxknock.process_replicates(4, process_index=0, process_count=0)


def test_aggregate_across_processes_single_process_equals_aggregate_ebh():
    W = jax.random.normal(jax.random.key(0), (6, 30)) + jnp.linspace(3, -1, 30)
    assert np.array_equal(
        jaxknock.aggregate_ebh_across_processes(W, 0.2, num_replicates=6), jaxknock.aggregate_ebh(W, 0.2)
    )
    with pytest.raises(ValueError, match="num_replicates"):
        jaxknock.aggregate_ebh_across_processes(W, 0.2, num_replicates=7)


def test_aggregate_across_processes_checks_num_replicates():
    """``num_replicates=2.7`` with two rows was truncated to 2 and ``"2"`` parsed (process_replicates refuses
    both); ``num_replicates=0`` with no rows reached e-BH as 0 / 0 and failed with "evalues contains NaN"."""
    W = jnp.array([[5.0, 4.0, 3.0, 2.0, -1.0], [6.0, 1.0, 2.0, 3.0, -1.0]])
    for bad in (2.7, "2", True):
        with pytest.raises(TypeError, match="num_replicates must be an integer"):
            jaxknock.aggregate_ebh_across_processes(W, 0.8, num_replicates=bad)
    with pytest.raises(ValueError, match="num_replicates must be >= 1"):
        jaxknock.aggregate_ebh_across_processes(np.zeros((0, 5)), 0.8, num_replicates=0)
    assert jaxknock.aggregate_ebh_across_processes(W, 0.8, num_replicates=np.int64(2), alpha_kn=0.5).tolist() == [
        True, True, True, True, False,
    ]  # fmt: skip


# --------------------------------------------------------------------------
# Two processes joined by jax.distributed (single-host simulation)
# --------------------------------------------------------------------------

_WORKER = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
pid, port, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=pid,
                           initialization_timeout=60)
import jaxknock
from jax.sharding import NamedSharding, PartitionSpec as P
X = jax.random.normal(jax.random.key(1), (200, 20))
y = X[:, :10] @ jnp.ones(10) + jax.random.normal(jax.random.key(2), (200,))
Sigma = jnp.corrcoef(X.T)
s = jaxknock.equicorrelated(Sigma).value
R, fdr = 6, 0.3

def one(k, X, Sigma, s, y):
    Xk = jaxknock.sample_knockoffs(k, X, Sigma, s)
    return jaxknock.marginal_correlation(jnp.concatenate([X, Xk], axis=1), y)

keys = jax.random.split(jax.random.key(0), R)
# route 2: this process's replicates, e-values all-gathered
mine = jaxknock.process_replicates(R)
W_local = jax.vmap(one, in_axes=(0, None, None, None, None))(keys[mine], X, Sigma, s, y)
mask_host = jaxknock.aggregate_ebh_across_processes(W_local, fdr, num_replicates=R)
# route 1: a global mesh over both processes, the mean over replicates is an all-reduce
W_global = jaxknock.shard_batch(one, keys, broadcast=(X, Sigma, s, y))
mesh = jaxknock.device_mesh()
agg = jax.jit(lambda W: jaxknock.aggregate_ebh(W, fdr), out_shardings=NamedSharding(mesh, P()))
mask_global = agg(W_global)
with open(path, "w") as f:
    json.dump({"devices": len(jax.devices()), "local": len(jax.local_devices()), "rows": [mine.start, mine.stop],
               "W_local": np.asarray(W_local).tolist(), "mask_host": np.asarray(mask_host).tolist(),
               "mask_global": np.asarray(mask_global).tolist()}, f)
jax.distributed.shutdown()
"""


def _free_port():
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def test_two_process_replicate_aggregation(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    port = _free_port()
    env = _env(devices=1)
    outs = [tmp_path / f"out{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), str(port), str(outs[i])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i in range(2)
    ]
    try:
        errs = [p.communicate(timeout=180)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(e[-3000:] for e in errs)
    res = [json.loads(o.read_text()) for o in outs]
    assert res[0]["devices"] == 2 and res[0]["local"] == 1
    assert res[0]["rows"] == [0, 3] and res[1]["rows"] == [3, 6]

    # the single-process reference, computed here
    X = jax.random.normal(jax.random.key(1), (200, 20))
    y = X[:, :10] @ jnp.ones(10) + jax.random.normal(jax.random.key(2), (200,))
    Sigma = jnp.corrcoef(X.T)
    s = jaxknock.equicorrelated(Sigma).value
    keys = jax.random.split(jax.random.key(0), 6)
    W = jax.vmap(
        lambda k: jaxknock.marginal_correlation(
            jnp.concatenate([X, jaxknock.sample_knockoffs(k, X, Sigma, s)], axis=1), y
        )
    )(keys)
    W_mp = np.concatenate([np.asarray(r["W_local"]) for r in res])
    assert np.max(np.abs(W_mp - np.asarray(W))) <= 1e-12
    ref = np.asarray(jaxknock.aggregate_ebh(W, 0.3)).tolist()
    assert ref == [True] * 10 + [False] * 10
    for r in res:
        assert r["mask_host"] == ref and r["mask_global"] == ref


# --------------------------------------------------------------------------
# Out-of-core class sums
# --------------------------------------------------------------------------


@pytest.fixture
def shards(tmp_path):
    rng = np.random.default_rng(0)
    mats, labels, paths, ypaths = [], [], [], []
    for i, n in enumerate((400, 251, 1, 90)):
        X = sp.random(
            n, 300, density=0.05, format="csr", random_state=i, data_rvs=lambda k: rng.integers(1, 5, k).astype(float)
        )
        yv = rng.choice(np.array([3, 7, 9]), n)
        paths.append(str(tmp_path / f"part{i}.npz"))
        ypaths.append(str(tmp_path / f"y{i}.npy"))
        sp.save_npz(paths[-1], X, compressed=bool(i % 2))
        np.save(ypaths[-1], yv)
        mats.append(X)
        labels.append(yv)
    return mats, labels, paths, ypaths


def test_npz_blocks_cover_rows_with_bounded_size(shards):
    mats, _, paths, _ = shards
    for X, path in zip(mats, paths):
        blocks = list(jaxknock.iter_npz_blocks(path, max_block_bytes=600))
        assert [b[0] for b in blocks] == list(np.cumsum([0] + [b.shape[0] for _, b in blocks[:-1]]))
        assert all(b.nnz * 12 <= 600 or b.shape[0] == 1 for _, b in blocks)
        assert (sp.vstack([b for _, b in blocks]) != X).nnz == 0


def test_out_of_core_sums_equal_in_memory_and_fit_unchanged(shards):
    mats, labels, paths, ypaths = shards
    ref = jaxknock.class_sums(sp.vstack(mats).tocsr(), np.concatenate(labels))
    for y, mb in ((ypaths, 500), (labels, 2**20), (np.concatenate(labels), 64)):
        got = jaxknock.class_sums_npz(paths, y, max_block_bytes=mb)
        assert got.classes == ref.classes == (3, 7, 9)
        assert np.array_equal(got.counts, ref.counts) and np.array_equal(got.n_samples, ref.n_samples)
    a = jaxknock.sparse_naive_bayes(got, None, 10)
    b = jaxknock.sparse_naive_bayes(sp.vstack(mats).tocsr(), np.concatenate(labels), 10)
    assert np.array_equal(a.value.support, b.value.support)
    dense = class_sums_blocks([(m.toarray(), yv) for m, yv in zip(mats, labels)], classes=[3, 7, 9], num_features=300)
    assert np.allclose(dense.counts, ref.counts, rtol=0, atol=1e-12)


def test_out_of_core_errors(shards, tmp_path):
    mats, labels, paths, _ = shards
    sp.save_npz(tmp_path / "csc.npz", mats[0].tocsc())
    with pytest.raises(ValueError, match="CSR"):
        list(jaxknock.iter_npz_blocks(tmp_path / "csc.npz"))
    with pytest.raises(ValueError, match="labels"):
        jaxknock.class_sums_npz(paths, np.zeros(3))
    with pytest.raises(ValueError, match="not in classes"):
        jaxknock.class_sums_npz(paths, labels, classes=[3, 7])
    bad = mats[0].copy()
    bad.data[0] = -1.0
    sp.save_npz(tmp_path / "neg.npz", bad)
    with pytest.raises(ValueError, match="non-negative"):
        jaxknock.class_sums_npz([tmp_path / "neg.npz"], labels[0])


def test_dask_sums_equal_in_memory(shards):
    da = pytest.importorskip("dask.array")
    mats, labels, _, _ = shards
    X = sp.vstack(mats).tocsr()
    y = np.concatenate(labels)
    ref = jaxknock.class_sums(X, y)
    dense = da.from_array(X.toarray(), chunks=(100, -1))
    got = jaxknock.class_sums_dask(dense, da.from_array(y, chunks=70))
    assert got.classes == ref.classes and np.allclose(got.counts, ref.counts, rtol=0, atol=1e-12)
    sparse_blocks = dense.map_blocks(sp.csr_matrix)
    got = jaxknock.class_sums_dask(sparse_blocks, y)
    assert np.array_equal(got.counts, ref.counts) and np.array_equal(got.n_samples, ref.n_samples)
    with pytest.raises(TypeError, match="dask array"):
        jaxknock.class_sums_dask(X, y)


def test_aggregate_across_processes_names_w_local():
    import jaxknock

    with pytest.raises(ValueError, match="W_local"):
        jaxknock.aggregate_ebh_across_processes(np.zeros((1, 0)), 0.1, num_replicates=1)
