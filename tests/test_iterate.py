"""jaxknock._iterate.lockstep_while_loop: a vmap without a select on the carry, same results."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxknock._iterate import lockstep_while_loop


def _cond(n, c):
    return c[0] < n


def _body(n, c):
    """Adds a row to a large cache until ``i == n``; a no-op afterwards (the contract)."""
    i, cache = c
    go = _cond(n, c)
    row = jnp.where(go, jnp.arange(64.0) * (i + 1), 0.0)
    return i + go, cache.at[jnp.minimum(i, 63)].add(row)


def _loop(n, loop):
    init = (jnp.int32(0), jnp.zeros((64, 64)))
    if loop == "lockstep":
        return lockstep_while_loop(_cond, _body, n, init)
    return lax.while_loop(lambda c: _cond(n, c), lambda c: _body(n, c), init)


def _selects_on_cache(fn, ns):
    """Lowered ``select`` ops that produce a whole batched cache (JAX adds them when lowering a batched loop)."""
    text = jax.jit(fn).lower(ns).as_text()
    shape = "x".join(str(d) for d in (ns.shape[0], 64, 64))
    return [line for line in text.splitlines() if "stablehlo.select" in line and f"tensor<{shape}xf" in line]


def test_vmap_equals_one_loop_per_element_and_nests():
    ns = jnp.array([0, 3, 17, 64], jnp.int32)
    want = [_loop(int(n), "plain") for n in ns]
    got = jax.vmap(lambda n: _loop(n, "lockstep"))(ns)
    for k, w in enumerate(want):
        assert int(got[0][k]) == int(w[0])
        np.testing.assert_array_equal(np.asarray(got[1][k]), np.asarray(w[1]))
    nested = jax.vmap(jax.vmap(lambda n: _loop(n, "lockstep")))(ns.reshape(2, 2))
    np.testing.assert_array_equal(np.asarray(nested[1]).reshape(4, 64, 64), np.asarray(got[1]))
    # unbatched (and under jit) it is the plain loop
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda n: _loop(n, "lockstep"))(17)[1]), np.asarray(want[2][1]))


def test_vmap_copies_no_carry():
    ns = jnp.array([1, 5, 9], jnp.int32)
    # JAX's own rule selects between the old and the new cache of every element on every iteration
    assert _selects_on_cache(jax.vmap(lambda n: _loop(n, "plain")), ns)
    assert not _selects_on_cache(jax.vmap(lambda n: _loop(n, "lockstep")), ns)
