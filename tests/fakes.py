"""The one fake engine of the test suite: stands in for tanplan.engine.loop.train_and_evaluate so that
stages (fit, launch, pipeline) run in milliseconds, with accuracies from a known law."""

import math

import numpy as np

SMALL = ["data.num_samples=2000", "train.batch_size=512", "train.steps=20"]


def fake_train(law=lambda b: 0.8 - 0.02 * math.log(b), noise=0.002, *, of_run=False):
    """A train_fn whose test accuracy is law(B of the run) + N(0, noise²); with of_run, law(RunPlan) (the
    optimize stage's laws depend on S too). Every call's config is kept in train_fn.calls."""
    calls = []
    rng = np.random.default_rng(0)

    def train_fn(cfg, workdir, progress=False):
        from tanplan.engine.setup import load_data

        from tanplan.privacy.mechanism import resolve_plan

        run = resolve_plan(cfg, load_data(cfg).num_train)
        calls.append(cfg)
        return {"test_accuracy": law(run if of_run else run.batch_size) + rng.normal(0, noise), "sigma": run.sigma,
                "steps": run.steps, "wall_seconds": 0.0}

    train_fn.calls = calls
    return train_fn


