"""Data parallelism: the same jitted step on a batch sharded over 8 (forced host) devices gives the same
noisy sum and the same update as on one device, for the same key: one noise draw, not one per device."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCRIPT = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from tanplan.runtime import configure_process; configure_process()  # keeps the forced device count, adds the CPU flag
import jax, jax.numpy as jnp, numpy as np
from dp_helpers import make_rows, make_tiny, tree_max_diff
from tanplan.config import TrainConfig
from tanplan.dp import ghost, optim, sharding, step as dp_step

assert jax.device_count() == 8, jax.devices()
logits_fn, params = make_tiny("cnn")
x, y = make_rows(16, seed=3, scale=2.0)
mask = np.arange(16) < 13
batch = {"x": x.reshape(2, 8, 8, 1), "y": y.reshape(2, 8), "mask": mask.reshape(2, 8),
         "index": np.arange(16, dtype=np.int32).reshape(2, 8)}
keys = jax.random.split(jax.random.key(5))  # (noise key, public key)

noisy_sum = jax.jit(dp_step.make_noisy_grad_sum(ghost.ghost_clipped_grad_sum(logits_fn, 0.7), 1.3 * 0.7))
one_device = jax.device_put(batch, jax.devices()[0])
single, _ = noisy_sum(jax.device_put(params, jax.devices()[0]), one_device, *keys)

mesh = sharding.data_mesh()
sharded_batch = sharding.shard_batch(batch, mesh)
assert len(sharded_batch["x"].addressable_shards) == 8
assert sharded_batch["x"].addressable_shards[0].data.shape == (2, 1, 8, 1)
many, _ = noisy_sum(sharding.replicate(params, mesh), sharded_batch, *keys)
assert many["Dense_0"]["kernel"].sharding.is_fully_replicated
print("noisy sum diff", tree_max_diff(single, many))
assert tree_max_diff(single, many) < 1e-5

opt = optim.make_optimizer(TrainConfig(learning_rate=0.5, momentum=0.9))
step = jax.jit(dp_step.make_train_step(ghost.ghost_clipped_grad_sum(logits_fn, 0.7), opt, noise_std=0.91,
                                       expected_batch_size=12.0))
state = dp_step.create_train_state(params, opt)
s1, _ = step(jax.device_put(state, jax.devices()[0]), one_device, *keys)
s8, _ = step(sharding.replicate(state, mesh), sharded_batch, *keys)
print("params diff", tree_max_diff(s1.params, s8.params))
assert tree_max_diff(s1.params, s8.params) < 1e-5
print("SHARDED-OK")
"""


@pytest.mark.slow  # a fresh process with 8 host devices compiles everything again (~25 s here)
def test_eight_device_step_equals_one_device_step():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(HERE)], capture_output=True, text=True, env=env,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SHARDED-OK" in result.stdout
