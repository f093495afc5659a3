"""An offline feature source for the baselines: a small 1D CNN trained non-privately on PUBLIC mnist1d.

The public split is mnist1d generated with one seed; the private split is mnist1d generated with
another (independent draws from the same generator, as ImageNet is to CIFAR in the papers). The
encoder sees only public data; its features of the private split are a fixed public function of each
private example, so extracting them costs no privacy. The features are standardised with the mean and
standard deviation of the public features (public statistics, again free) so that the heads' default
clipping norms and CoinPress's unit-scale assumption fit them.

`demo_features()` builds both files once and caches them (keyed by every setting):
features.npz (x_train, y_train, x_test, y_test of the private split) and public.npz (x: unlabelled
features of all public examples, the candidate pool of DPPL-Public). JAX is imported inside functions.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from tanplan.baselines.data import FEATURE_KEYS, public_standardiser
from tanplan.data.cache import cache_dir, load_arrays, save_arrays
from tanplan.data.mnist1d import load_mnist1d
from tanplan.fileio import write_bytes_atomic

FEATURES_VERSION = 1
EVAL_BATCH = 512


@dataclass(frozen=True)
class DemoSpec:
    """Everything that determines the demo features (the cache key)."""

    private_samples: int = 10_000  # 8,000 train / 2,000 test
    # Not the user's data.seed: mnist1d draws that share a seed share examples, and the demo's baselines must
    # release nothing about the launch's private examples (`demo_spec` moves both seeds off data.seed).
    private_seed: int = 2
    public_samples: int = 10_000  # 8,000 to train the encoder, 2,000 to report its accuracy
    public_seed: int = 1
    width: int = 64
    steps: int = 2_000
    batch_size: int = 128
    learning_rate: float = 2e-3
    init_seed: int = 0

    def __post_init__(self):
        if self.private_seed == self.public_seed:
            raise ValueError("the public and private splits need different seeds")


def _cnn(width: int, num_classes: int):
    import flax.linen as nn

    class Encoder(nn.Module):
        """Three 1D convolutions and a dense layer; `features` is the penultimate (ReLU) layer."""

        def setup(self):
            self.convs = [nn.Conv(32, (5,)), nn.Conv(32, (5,), strides=(2,)), nn.Conv(32, (5,), strides=(2,))]
            self.embed = nn.Dense(width)
            self.head = nn.Dense(num_classes)

        def features(self, x):
            for conv in self.convs:
                x = nn.relu(conv(x))
            return nn.relu(self.embed(x.reshape(x.shape[0], -1)))

        def __call__(self, x):
            return self.head(self.features(x))

    return Encoder()


def train_encoder(x: np.ndarray, y: np.ndarray, spec: DemoSpec, num_classes: int = 10):
    """Non-private AdamW on public (x, y); returns encode(signals) -> (features, logits)."""
    import jax
    import jax.numpy as jnp
    import optax

    model = _cnn(spec.width, num_classes)
    key = jax.random.PRNGKey(spec.init_seed)
    params = model.init(key, jnp.asarray(x[:2]))
    schedule = optax.cosine_decay_schedule(spec.learning_rate, spec.steps)
    opt = optax.adamw(schedule, weight_decay=1e-4)
    state = opt.init(params)

    @jax.jit
    def step(params, state, xb, yb):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, xb), yb).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    rng = np.random.default_rng(spec.init_seed)
    for _ in range(spec.steps):
        idx = rng.integers(0, len(x), spec.batch_size)
        params, state, _ = step(params, state, jnp.asarray(x[idx]), jnp.asarray(y[idx]))

    @jax.jit
    def evaluate(xb):  # one compiled program for every call: inputs are padded to EVAL_BATCH rows
        feats = model.apply(params, xb, method="features")
        return feats, model.apply(params, xb)

    def encode(data):
        """(features, logits) of every row of data."""
        feats, logits = [], []
        for i in range(0, len(data), EVAL_BATCH):
            chunk = data[i:i + EVAL_BATCH]
            padded = np.concatenate([chunk, np.zeros((EVAL_BATCH - len(chunk), *chunk.shape[1:]), chunk.dtype)])
            f, l = evaluate(jnp.asarray(padded))
            feats.append(np.asarray(f)[:len(chunk)])
            logits.append(np.asarray(l)[:len(chunk)])
        return np.concatenate(feats).astype(np.float64), np.concatenate(logits)

    return encode


def build_demo_features(spec: DemoSpec = DemoSpec()):
    """(private feature arrays, public feature arrays, info): trains the encoder on the public split."""
    public = load_mnist1d(spec.public_samples, spec.public_seed)
    private = load_mnist1d(spec.private_samples, spec.private_seed)
    encode = train_encoder(public.x_train, public.y_train, spec)
    raw_public, public_logits = encode(np.concatenate([public.x_train, public.x_test]))
    by_public = public_standardiser(raw_public)  # public statistics: dead units stay at zero

    def standardise(f):
        return by_public(f).astype(np.float32)

    held_out = public_logits[len(public.x_train):].argmax(1)
    info = {"encoder_public_test_accuracy": float(np.mean(held_out == public.y_test))}
    features = {"x_train": standardise(encode(private.x_train)[0]), "y_train": private.y_train.astype(np.int64),
                "x_test": standardise(encode(private.x_test)[0]), "y_test": private.y_test.astype(np.int64)}
    return features, {"x": standardise(raw_public)}, info


def demo_spec(avoid_seeds=()) -> DemoSpec:
    """The DemoSpec whose public and private mnist1d draws use none of `avoid_seeds` (by construction: the
    first pair of consecutive seeds (p, p + 1), p ≥ 1, outside them; the default (1, 2) when free).

        >>> (demo_spec({2}).public_seed, demo_spec({2}).private_seed)
        (3, 4)
    """
    avoid = {int(s) for s in avoid_seeds}
    p = 1
    while p in avoid or p + 1 in avoid:
        p += 1
    return DemoSpec(public_seed=p, private_seed=p + 1)


def _cache_paths(spec: DemoSpec, cache: Path | None) -> tuple[Path, Path]:
    try:
        version = metadata.version("mnist1d")
    except metadata.PackageNotFoundError:
        version = "unknown"
    key = json.dumps([asdict(spec), FEATURES_VERSION, version], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    folder = (cache if cache is not None else cache_dir() / "baselines") / f"demo_features_{digest}"
    return folder / "features.npz", folder / "public.npz"


def demo_features(spec: DemoSpec = DemoSpec(), cache: Path | None = None) -> tuple[Path, Path]:
    """Paths of the cached demo features.npz and public.npz, building them on the first call."""
    features_path, public_path = _cache_paths(spec, cache)
    if load_arrays(features_path, FEATURE_KEYS) is not None and load_arrays(public_path, ("x",)) is not None:
        return features_path, public_path
    print("tanplan: training the demo encoder on public mnist1d once; cache: "
          f"{features_path.parent}", file=sys.stderr)
    start = time.perf_counter()
    features, public, info = build_demo_features(spec)
    info["build_seconds"] = time.perf_counter() - start
    save_arrays(public_path, public)
    save_arrays(features_path, {**features, **{k: np.asarray(v) for k, v in info.items()}})
    return features_path, public_path


def write_demo_features(out_dir, spec: DemoSpec = DemoSpec()) -> tuple[Path, Path]:
    """Copy the (cached) demo features to out_dir/features.npz and out_dir/public.npz."""
    out_dir = Path(out_dir)
    paths = []
    for src in demo_features(spec):
        paths.append(write_bytes_atomic(out_dir / src.name, src.read_bytes()))
    return paths[0], paths[1]
