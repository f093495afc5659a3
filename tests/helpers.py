"""Shared pieces of the launch tests: a tiny config and a `tanplan launch` subprocess."""

import importlib.util
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "experiments" / "mnist1d.toml")
TINY = ["data.num_samples=2000", "train.batch_size=256", "train.steps=8", "model.width=8",
        "train.checkpoint_every=2", "train.eval_every=4", "privacy.sigma=1.0", "privacy.epsilon=100",
        "train.physical_batch_size=256"]


def tiny_overrides(path, *extra):
    """A tiny private run on tests/engine/conftest.py's tiny_npz: an MLP, B = 32, S = 6, ε = 4."""
    return ["data.dataset=npz", f'data.path="{path}"', "model.name=mlp", "model.width=8",
            "model.depth=1", "train.batch_size=32", "train.steps=6", "train.eval_every=3",
            "train.physical_batch_size=64", "train.learning_rate=1.0", "privacy.epsilon=4", *extra]


# Runs that must be compared bit for bit share their noise: privacy.noise_seed (tests only, NOT private).
SEEDED = TINY + ["privacy.noise_seed=7"]


def skip_module_without(*packages) -> None:
    """Skip the calling test module where a package is not installed, found without importing it: every
    xdist worker collects every module, and importing Ray's tune there costs ~1.3 CPU-s a worker."""
    import pytest

    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{missing[0]} is not installed", allow_module_level=True)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """Run `tanplan ARGV` in this process: (exit code, stdout, stderr)."""
    from tanplan.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def launch_cmd(out, *extra, sets=TINY):
    public = ["--allow-public-noise"] if any(s.startswith("privacy.noise_seed") for s in sets) else []
    return [sys.executable, "-m", "tanplan", "launch", "--config", CONFIG, "--out", str(out), "--json",
            *sum([["--set", s] for s in sets], []), *public, *extra]


def env(devices: int = 1, step_delay: float = 0.0) -> dict:
    e = dict(os.environ)
    flags = [f for f in e.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    e["XLA_FLAGS"] = " ".join(flags)
    e["JAX_PLATFORMS"] = "cpu"
    if step_delay:
        e["TANPLAN_DEBUG_STEP_DELAY"] = str(step_delay)
    return e


def run_launch(out, *extra, devices=1, sets=TINY, timeout=300):
    proc = subprocess.run(launch_cmd(out, *extra, sets=sets), env=env(devices), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def saved_params(out) -> list[np.ndarray]:
    """The leaves of the latest checkpoint's state, in order."""
    import orbax.checkpoint as ocp

    with ocp.CheckpointManager(Path(out, "checkpoint").absolute()) as manager:
        step = manager.latest_step()
        got = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    state = got["state"]
    return [np.asarray(state[k]) for k in sorted(state)]


def checkpoint_steps(out) -> list[int]:
    folder = Path(out, "checkpoint")
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def write_cifar_fixture(root, per_batch=(3, 2, 2, 1, 2), test=3, str_keys=False, seed=0):
    """A tiny CIFAR-10 in the exact python-pickle layout: dicts with b'data' uint8 (n, 3072), planes
    R, G, B of a row-major 32x32 image, and b'labels'. Returns the NHWC images and labels written."""
    rng = np.random.default_rng(seed)
    key = (lambda k: k) if str_keys else (lambda k: k.encode())
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, n in [*[(f"data_batch_{i + 1}", k) for i, k in enumerate(per_batch)], ("test_batch", test)]:
        images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        labels = rng.integers(0, 10, n).tolist()
        rows = images.transpose(0, 3, 1, 2).reshape(n, 3072)
        batch = {key("batch_label"): key(name), key("labels"): labels, key("data"): rows,
                 key("filenames"): [key(f"img{i}.png") for i in range(n)]}
        with open(root / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        written[name] = (images, np.asarray(labels))
    names = [key(n) for n in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                              "ship", "truck")]
    with open(root / "batches.meta", "wb") as f:
        pickle.dump({key("label_names"): names, key("num_cases_per_batch"): 10000, key("num_vis"): 3072}, f,
                    protocol=2)
    return written


class _Norm:
    """scipy.stats.norm with its cdf, ppf and logcdf replaced by the ufuncs they call (scipy.special.ndtr, ndtri,
    log_ndtr): the same values, bit for bit, without the ~50 µs of argument checks per scalar call, of which
    jax-privacy's f-DP bound (and dp_accounting's Gaussian σ(ε, δ) under it) makes one per guess per root-finding
    step (a bound on 3000 guesses: 1.1 CPU-s → 0.006)."""

    def __init__(self):
        import scipy.special
        import scipy.stats

        self.norm = scipy.stats.norm
        self.cdf, self.ppf, self.logcdf = scipy.special.ndtr, scipy.special.ndtri, scipy.special.log_ndtr
        assert [self.ppf(0.3), self.cdf(-1.3), self.logcdf(-5.3)] == [
            self.norm.ppf(0.3), self.norm.cdf(-1.3), self.norm.logcdf(-5.3)]

    def __getattr__(self, name):
        return getattr(self.norm, name)


def fast_norm(patch) -> None:
    """_Norm in jax-privacy's auditing and dp_accounting's Gaussian mechanism, for the life of `patch` (a
    MonkeyPatch): the audits' bounds as the libraries compute them, faster."""
    from dp_accounting import gaussian_mechanism
    from jax_privacy import auditing

    patch.setattr(auditing, "_norm", _Norm())
    patch.setattr(gaussian_mechanism, "_norm", _Norm())


def no_figure(*args):
    """A report figure not drawn (matplotlib: about 0.5-0.75 CPU-s), for a run whose figure no test reads: an
    empty file at its path, the figure function's last argument."""
    args[-1].write_bytes(b"")
    return args[-1]
