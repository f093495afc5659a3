"""A run with AugMult views resumes with the identical views: each example's are drawn from the run's secret
(stream AUGMENT), the step and the example's dataset index only (tanplan.dp.augmult.example_keys), so the
resumed run ends with the parameters of the uninterrupted one; on the dense step (several accumulation
chunks) and on the masked step of pruning and gradient dropping."""

import shutil
import signal

import numpy as np
import pytest
from helpers import tiny_overrides

from tanplan.config import load_config
from tanplan.dp.secret import AUGMENT, NOISE, RunSecret
from tanplan.engine import setup
from tanplan.engine.loop import train_and_evaluate
from tanplan.errors import RunInterrupted
from tanplan.job import job_of

AUGMENTED = ["data.augmentation=noise", "data.aug_mult=4", "train.physical_batch_size=16",
             "train.eval_every=2", "train.checkpoint_every=2", "train.steps=4"]


def _stop_at(step):
    def on_eval(done, record):
        if done == step:
            signal.raise_signal(signal.SIGTERM)  # the loop finishes the step, saves a checkpoint and stops
    return on_eval


MASKED = ["pruning.method=random", "pruning.rate=0.5", "pruning.drop_method=random", "pruning.drop_rate=0.3"]


@pytest.mark.slow  # three runs, each compiling its step with K = 4 views (~20 s of CPU here)
@pytest.mark.parametrize("extra", [[], MASKED], ids=["dense", "masked"])
def test_an_augmented_run_resumes_with_the_same_views(tiny_npz, tmp_path, extra):
    cfg = load_config(None, tiny_overrides(tiny_npz, *AUGMENTED, *extra))
    out, ref = tmp_path / "run", tmp_path / "ref"
    with pytest.raises(RunInterrupted):
        train_and_evaluate(job_of(cfg), out, progress=False, on_eval=_stop_at(2))
    (ref / "checkpoint").mkdir(parents=True)  # the same run uninterrupted, with the same secret
    shutil.copy(out / "checkpoint" / "run_secret.json", ref / "checkpoint" / "run_secret.json")
    reference = train_and_evaluate(job_of(cfg), ref, progress=False, resume=True)
    resumed = train_and_evaluate(job_of(cfg), out, progress=False, resume=True)
    assert resumed.resumed_from_step == 2 and resumed.steps == 4
    assert resumed.params_checksum == reference.params_checksum


def test_the_views_come_from_the_runs_secret(tiny_npz):
    """The step's augmentation root is the secret's own stream, apart from its noise; two secrets, two roots."""
    cfg = load_config(None, tiny_overrides(tiny_npz, *AUGMENTED, "train.grad_method=vmap"))
    a, b = RunSecret.fresh(), RunSecret.fresh()
    roots = setup.build(job_of(cfg), a).roots
    assert np.array_equal(roots["augment"], a.key_data(AUGMENT))
    assert not np.array_equal(roots["augment"], a.key_data(NOISE))
    assert not np.array_equal(roots["augment"], b.key_data(AUGMENT))
