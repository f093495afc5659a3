"""Packed proxies (tanplan.engine.packed): the packed step's slice k is run k's own step; every proxy of a
pack has its own secret, from OS entropy, and no public file of a pack lets one remove a proxy's noise; a
packed rung writes the K ordinary results the ladder and fit read back."""

import json
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tiny_overrides
from test_secret_noise import SETTINGS, _attack, _noise_from_secret, _recovered_sum, _relative_error, _true_sum

from tanplan.config import load_config
from tanplan.dp import sampling
from tanplan.dp import step as dp_step
from tanplan.dp.secret import BATCH, RunSecret
from tanplan.engine import packed, setup
from tanplan.engine.release import load_params
from tanplan.errors import UsageError
from tanplan.job import job_of
from tanplan.workflow.proxy_runs import finished_run, train_runs


def _jobs(path, k=2, *extra):
    return [job_of(load_config(None, tiny_overrides(path, f"experiment.seed={seed}", *extra))) for seed in range(k)]


def _batch(run, secret, t=0):
    """Step t's padded Poisson batch of the run, drawn by its secret, as host arrays."""
    plan = run.plan
    indices = sampling.poisson_batch(plan.dataset_size, plan.q, secret.batch_rng(BATCH, t))
    layout = sampling.batch_layout(plan.dataset_size, plan.q, run.job.perf.physical_batch_size)
    index, mask = sampling.pad_indices(indices, layout.grown_to(len(indices)))
    return sampling.gather_batch(run.dataset.x_train, run.dataset.y_train, index, mask)


@pytest.mark.parametrize("route, form", [("auto", "vmap"), ("vmap", "vmap"), ("auto", "each")])
def test_the_packed_steps_slice_k_is_the_single_runs_step(tiny_npz, route, form):
    jobs = _jobs(tiny_npz, 2, f"train.grad_method={route}")
    secrets = [RunSecret.fresh(), RunSecret.fresh()]
    runs = [setup.build(job, secret) for job, secret in zip(jobs, secrets)]
    states = [dp_step.create_train_state(r.params, r.optimizer, r.job.train.ema_decay) for r in runs]
    bs = [_batch(r, s) for r, s in zip(runs, secrets)]
    chunks = max(b["mask"].shape[0] for b in bs)
    bs = [{k: packed._pad_chunks(v, chunks) for k, v in b.items()} for b in bs]
    copy = lambda tree: jax.tree.map(jnp.array, tree)  # noqa: E731  (the steps donate their state)
    pack = packed.Pack(form, jax.devices()[0])
    drawn = [SimpleNamespace(**{name: b[name][None] for name in packed.BATCH_KEYS}) for b in bs]  # one block each
    got, metrics = packed.packed_step(runs, form)(pack.put([copy(s) for s in states]), pack.batch(drawn),
                                                  pack.put([r.roots for r in runs]))
    metrics = pack.host_metrics(metrics)
    for k, (run, state, batch) in enumerate(zip(runs, states, bs)):
        # run k's step: this job's one program, on run k's state, batch and roots (it closes over no secret)
        want, want_metrics = runs[0].step(copy(state), batch, run.roots)
        for a, b in zip(jax.tree.leaves(pack.slice(got, k, None)), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
        for name, value in want_metrics.items():
            np.testing.assert_allclose(np.asarray(metrics[name][k]), np.asarray(value), rtol=1e-6, atol=1e-6)
    first = [jax.tree.leaves(pack.slice(got, k, None).params)[0] for k in range(2)]
    assert not np.allclose(np.asarray(first[0]), np.asarray(first[1]))


@pytest.mark.parametrize("form", ["vmap", "each"])
def test_packed_proxies_have_secrets_of_their_own_and_no_public_file_removes_their_noise(tiny_npz, tmp_path, form):
    jobs = _jobs(tiny_npz, 2, *SETTINGS)
    outs = [tmp_path / "p0", tmp_path / "p1"]
    summaries = packed.train_packed(jobs, outs, form=form)
    assert all(s.steps == 1 and s.noise_secret for s in summaries)
    secrets = [RunSecret(tuple(json.loads((out / "checkpoint" / "run_secret.json").read_text())["words"]))
               for out in outs]
    assert secrets[0] != secrets[1]  # two draws of OS entropy, each saved in its own run's private folder
    assert not np.array_equal(secrets[0].key_data(1), secrets[1].key_data(1))
    for k, (job, out) in enumerate(zip(jobs, outs)):
        cfg = load_config(None, tiny_overrides(tiny_npz, f"experiment.seed={k}", *SETTINGS))
        run = setup.build(job, secrets[k])
        released, truth = load_params(out / "model"), _true_sum(cfg, run, secrets[k])
        own = _noise_from_secret(secrets[k], run.params, run.plan.noise_std)
        other = _noise_from_secret(secrets[1 - k], run.params, run.plan.noise_std)
        assert _relative_error(_recovered_sum(cfg, run, released, own), truth) < 1e-3  # the test can fail
        assert _relative_error(_recovered_sum(cfg, run, released, other), truth) >= 0.5  # the other proxy's: no
        assert min(_attack(o, cfg, run, released, truth) for o in outs) >= 0.5  # every public file of the pack


def test_a_packed_rung_writes_the_results_the_ladder_reads_back(tiny_npz, tmp_path):
    cfg = load_config(None, tiny_overrides(tiny_npz, "fit.packed=true", "train.grad_method=vmap"))
    log = []
    rows = train_runs(cfg, [(16, 0), (16, 1), (16, 2)], tmp_path, log=log.append, label="ladder")
    assert [(r.batch_size, r.seed) for r in rows] == [(16, 0), (16, 1), (16, 2)]
    assert all("packed ×3" in line for line in log)
    for r in rows:
        workdir = tmp_path / "runs" / f"ladder_b16_s{r.seed}"
        summary = finished_run(workdir, load_config(None, tiny_overrides(tiny_npz, "fit.packed=true",
                                                                         "train.grad_method=vmap",
                                                                         "train.proxy_batch_size=16",
                                                                         f"experiment.seed={r.seed}")))
        assert summary is not None and summary.test_accuracy == r.test_accuracy and summary.batch_size == 16
        assert json.loads((workdir / "ledger.json").read_text())["steps"] == 6
    again = train_runs(cfg, [(16, 0), (16, 1), (16, 2)], tmp_path, log=log.append, label="ladder")
    assert [r.test_accuracy for r in again] == [r.test_accuracy for r in rows]  # read back, not trained again


def test_the_pack_form_follows_the_device():
    assert packed.pack_form(jax.devices("cpu")[0]) == "each"  # vmap's grouped convolutions: slower on the CPU
    assert packed.pack_form(SimpleNamespace(platform="gpu")) == "vmap"


def test_only_the_seeds_of_one_job_pack_and_the_setting_is_checked(tiny_npz):
    jobs = _jobs(tiny_npz, 2)
    assert packed.packable(jobs) is None and packed.packable(jobs[:1]) == "fewer than two runs"
    other = job_of(load_config(None, tiny_overrides(tiny_npz, "experiment.seed=1", "train.learning_rate=0.5")))
    assert "more than experiment.seed" in packed.packable([jobs[0], other])
    with pytest.raises(ValueError, match="cannot be packed"):
        packed.train_packed([jobs[0], other], [None, None])
    with pytest.raises(UsageError, match="fit.packed"):
        load_config(None, tiny_overrides(tiny_npz, "fit.packed=2"))
