"""A user's package, written by the tests into a temporary folder and put on PYTHONPATH: a flax model that is
none of the built-ins, a data source class over numpy memmaps, a per-example loss, and models that break
per-example independence (BatchNorm's batch statistics; a mean over the batch; row i-1 added into row i),
models with too few or too many logits, and a loss that is NaN for one class."""

import textwrap
from pathlib import Path

import numpy as np

NETS = '''
import flax.linen as nn
import jax.numpy as jnp


class TwoTower(nn.Module):
    """Two dense towers on the flattened signal, summed: no built-in model looks like this."""

    num_classes: int
    width: int = 8

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        a = nn.tanh(nn.Dense(self.width, name="left")(x))
        b = nn.relu(nn.Dense(self.width, name="right")(x))
        return nn.Dense(self.num_classes, name="head")(a + b)


def make_model(num_classes, width=8, **options):
    return TwoTower(num_classes, width)


class WithBatchNorm(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(8)(x.reshape(x.shape[0], -1))
        x = nn.BatchNorm(use_running_average=False)(x)
        return nn.Dense(self.num_classes)(x)


def make_batchnorm(num_classes, **options):
    return WithBatchNorm(num_classes)


class BatchCentred(nn.Module):
    """Subtracts the batch mean: no collection, but example i's output depends on the others."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(self.num_classes)(x - jnp.mean(x, axis=0, keepdims=True))


def make_batch_centred(num_classes, **options):
    return BatchCentred(num_classes)


class RowMixing(nn.Module):
    """Adds row i-1's features into row i: row 0's output ignores the others, every later row's does not."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(8)(x.reshape(x.shape[0], -1))
        h = h.at[1:].add(h[:-1])
        return nn.Dense(self.num_classes)(h)


def make_row_mixing(num_classes, **options):
    return RowMixing(num_classes)


class FarMixing(nn.Module):
    """Adds 3 × row i-4's inputs into row i (mod the batch): a 4-row probe sees nothing (a roll by 4 is the
    identity there); on the ghost route its clipped sum moves by 1.74 C when one example is added."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(self.num_classes)(x + 3.0 * jnp.roll(x, 4, axis=0))


def make_far_mixing(num_classes, **options):
    return FarMixing(num_classes)


def make_narrow(num_classes, width=8, **options):
    """One logit too few."""
    return TwoTower(num_classes - 1, width)


def make_wide(num_classes, width=8, **options):
    """Twice the logits the data has classes."""
    return TwoTower(2 * num_classes, width)


def make_nnx(num_classes, rngs=None, **options):
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(16, 8, rngs=rngs)
            self.head = nnx.Linear(8, num_classes, rngs=rngs)

        def __call__(self, x):
            return self.head(nnx.relu(self.hidden(x.reshape(x.shape[0], -1))))

    return Net(rngs or nnx.Rngs(0))
'''

DATA = '''
from pathlib import Path

import numpy as np

OPENED = []  # every source this process made (the tests look at their reads)


class MemmapSource:
    """Rows of two .npy files opened as numpy memmaps; records every read (the tests look at them)."""

    def __init__(self, folder, split):
        self.folder, self.split = str(folder), split
        self.num_classes = 2
        self.reads = []
        OPENED.append(self)

    def _arrays(self):
        folder = Path(self.folder)
        return (np.load(folder / f"{self.split}_x.npy", mmap_mode="r"),
                np.load(folder / f"{self.split}_y.npy", mmap_mode="r"))

    def __len__(self):
        return len(self._arrays()[1])

    def __getitem__(self, indices):
        self.reads.append(len(indices))
        x, y = self._arrays()
        return np.asarray(x[indices]), np.asarray(y[indices])


def load(path, **options):
    return MemmapSource(path, "train"), MemmapSource(path, "test")
'''

LOSSES = '''
import optax


def nan_loss(logits, label):
    """NaN for the last class (a log of zero times zero)."""
    import jax.numpy as jnp

    return jnp.where(label == logits.shape[-1] - 1, jnp.nan, -logits[label])


def smoothed(logits, label):
    """Cross-entropy with label smoothing 0.1, for ONE example."""
    import jax

    target = optax.smooth_labels(jax.nn.one_hot(label, logits.shape[-1]), 0.1)
    return optax.softmax_cross_entropy(logits, target)
'''


def write_package(root: Path, name: str = "userpkg") -> Path:
    """root/name/{__init__,nets,data,losses}.py; returns root (the folder to put on PYTHONPATH)."""
    package = root / name
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    for module, text in (("nets", NETS), ("data", DATA), ("losses", LOSSES)):
        (package / f"{module}.py").write_text(textwrap.dedent(text))
    return root


def write_memmap_data(folder: Path, n_train: int = 240, n_test: int = 80, seed: int = 0) -> Path:
    """Two separable classes of 16-long signals as .npy files (train_x, train_y, test_x, test_y)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        y = rng.integers(0, 2, n).astype(np.int32)
        x = rng.normal(size=(n, 16, 1)).astype(np.float32) + (2 * y - 1)[:, None, None] * 0.8
        np.save(folder / f"{split}_x.npy", x)
        np.save(folder / f"{split}_y.npy", y)
    return folder


def plugin_toml(data_dir: Path, name: str = "userpkg", model: str = "make_model", extra: str = "") -> str:
    """A tiny private run naming the package's model and loader by import path."""
    return textwrap.dedent(f'''
        [experiment]
        name = "plugin"
        [data]
        dataset = "{name}.data:load"
        path = "{data_dir}"
        [model]
        name = "{name}.nets:{model}"
        width = 8
        [privacy]
        epsilon = 4.0
        total_epsilon = 1e6  # the private tuning's proxies spend far more than the launch's ε
        [train]
        batch_size = 32
        steps = 6
        eval_every = 3
        physical_batch_size = 64
        learning_rate = 1.0
        [tuning]
        data = "private"
        ''') + textwrap.dedent(extra)
