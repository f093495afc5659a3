"""The parts of a run built from its Config by name: the dataset, the flax model, the augmentation."""

from __future__ import annotations

from tanplan.config import Config


def load_data(cfg: Config):
    """The Dataset of cfg.data (tanplan.data), cut to data.train_examples when that is set."""
    from tanplan.data import load_dataset
    from tanplan.data.dataset import with_train_examples

    d = cfg.data
    return with_train_examples(load_dataset(d.dataset, path=d.path or None, num_samples=d.num_samples),
                               d.train_examples)


def build_model(cfg: Config, num_classes: int):
    """The flax module of cfg.model (tanplan.models)."""
    from tanplan.models import create_model

    m = cfg.model
    return create_model(m.name, num_classes, width=m.width, depth=m.depth, norm_order=m.norm_order)


def build_augmentation(cfg: Config, dataset):
    """The per-example augmentation fn(key, x) of cfg.data, or None for the identity."""
    if cfg.data.augmentation == "none":
        return None
    from tanplan.data import make_augmentation

    return make_augmentation(cfg.data.augmentation, dataset.data_kind, mean=dataset.mean, std=dataset.std)
