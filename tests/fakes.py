"""The one fake engine of the test suite: stands in for tanplan.engine.loop.train_and_evaluate so that
stages (fit, launch, pipeline, sweep) run in milliseconds, with accuracies from a known law.

- fake_train(law, noise): accuracy a law of the batch size (the batch scaling law of fit and pipeline);
- fake_sweep_train(...): accuracy a law of the searched hyper-parameters, with the evaluations and the
  summary a sweep trial reads; failing_train(error): a run that diverges or crashes;
- mnist1d_shaped(...): random data of mnist1d's shapes, for load_mnist1d where a test needs N, not the signals.

Ray workers cannot import this module (tests/ is not on their path): call
`ray.cloudpickle.register_pickle_by_value(fakes)` first, so that its functions travel by value.
"""

import math
from pathlib import Path

import numpy as np

from tanplan.outcomes.run_summary import Layout, RunSummary

SMALL = ["data.num_samples=2000", "train.batch_size=512", "train.steps=20"]


def fake_train(law=lambda b: 0.8 - 0.02 * math.log(b), noise=0.002, *, of_run=False, num_train=None):
    """A train_fn whose test accuracy is law(B of the run) + N(0, noise²); with of_run, law(RunPlan) (the
    optimize stage's laws depend on S too). Every call's config is kept in train_fn.calls. Like the engine,
    it records the run's releases in workdir/ledger.json (every step of its plan, and DP-SNIP's release),
    so stages can compose them, and its config in workdir/config.toml. Its plan is the engine's for the
    config's training set, or for num_train examples when given (a test whose data would take longer to
    generate than its stages take to run)."""
    calls = []
    rng = np.random.default_rng(0)

    def train_fn(cfg, workdir, progress=False, resume=False, on_eval=None):
        from tanplan.engine.setup import load_data
        from tanplan.privacy.run_plan import resolve_plan

        run = resolve_plan(cfg, num_train if num_train is not None else load_data(cfg.data).num_train)
        calls.append(cfg)
        ledger = _ledger(run)
        if workdir is not None:
            from tanplan.config import config_to_toml
            from tanplan.fileio import write_json_atomic, write_text_atomic

            write_json_atomic(Path(workdir) / "ledger.json", ledger.to_dict())
            write_text_atomic(Path(workdir) / "config.toml", config_to_toml(cfg))  # as the engine's RunFolder does
        return _summary(run, ledger, law(run if of_run else run.batch_size) + rng.normal(0, noise))

    train_fn.calls = calls
    return train_fn


def _summary(run, ledger, accuracy: float):
    """The whole RunSummary of the run (tanplan.outcomes.run_summary), as the engine returns it."""
    return RunSummary(
        test_accuracy=accuracy, test_loss=None, epsilon_rdp=ledger.epsilon("rdp"), epsilon_pld=None,
        epsilon_replace_one=None, neighbouring=run.neighbouring, delta=run.delta, accountant=run.accountant,
        private=run.private, noise_secret=True, dataset_size=run.dataset_size, batch_size=run.batch_size,
        steps=run.steps, planned_steps=run.steps, sigma=run.sigma, snip_sigma=run.snip_sigma or None,
        clip_norm=run.clip_norm, target=None, grad_method="fake", layout=Layout(chunks=1, chunk_size=run.batch_size),
        backend="local", devices=1, processes=1, resumed_from_step=0, steps_this_run=run.steps, wall_seconds=0.0,
        train_seconds=0.0, samples_per_second=None, params_checksum="", evaluated_at_step=run.steps)


def _ledger(run):
    from tanplan.privacy.ledger import Ledger

    ledger = Ledger(delta=run.delta, accountant=run.accountant, neighbouring=run.neighbouring,
                    proxy=run.target is not None)  # like the engine's: a proxy's own figure is RDP
    if run.snip_sigma:
        ledger.record_snip(run.q, run.snip_sigma, run.delta)
    ledger.advance(ledger.open_release(0, run.q, run.sigma, run.delta), run.steps)
    return ledger


def fake_sweep_train(*, momentum_cost: float = 0.0, seed_effect: float = 0.0, calls=None):
    """A train_fn whose accuracy peaks at learning rate 4: 0.9 − 0.05·(log2 lr − 2)² − momentum_cost·momentum
    + seed_effect·(seed mod 5). It evaluates every train.eval_every steps through on_eval (accuracy rising
    linearly to the final one) and returns a RunSummary with the figures a sweep trial reads. Every call's
    experiment seed is kept in train_fn.seeds; when `calls` names a file, each call appends it there too (a
    Ray worker's calls are seen by the test)."""
    seeds = []

    def train_fn(cfg, workdir, *, progress=True, on_eval=None, resume=False):
        t, seed = cfg.train, cfg.experiment.seed
        seeds.append(seed)
        if calls is not None:
            with open(calls, "a") as f:
                f.write(f"{seed}\n")
        acc = 0.9 - 0.05 * (math.log2(t.learning_rate) - 2) ** 2 - momentum_cost * t.momentum + seed_effect * (seed % 5)
        for step in range(t.eval_every, t.steps + 1, t.eval_every):
            if on_eval is not None:
                on_eval(step, {"test_accuracy": acc * step / t.steps, "loss": np.float32(1.5), "epsilon_spent": None})
        return RunSummary(
            test_accuracy=acc, test_loss=None, epsilon_rdp=None, epsilon_pld=None, epsilon_replace_one=None,
            neighbouring=cfg.privacy.neighbouring, delta=cfg.privacy.delta or None, accountant=cfg.privacy.accountant,
            private=cfg.privacy.private, noise_secret=True, dataset_size=cfg.data.num_samples,
            batch_size=t.proxy_batch_size, steps=t.steps, planned_steps=t.steps, sigma=cfg.privacy.sigma,
            snip_sigma=None, clip_norm=cfg.privacy.clip_norm, target=None, grad_method="fake",
            layout=Layout(chunks=1, chunk_size=t.proxy_batch_size), backend="local", devices=1, processes=1,
            resumed_from_step=0, steps_this_run=t.steps, wall_seconds=0.5, train_seconds=0.5,
            samples_per_second=None, params_checksum="ab", evaluated_at_step=t.steps)

    train_fn.seeds = seeds
    return train_fn


def failing_train(error: Exception, evaluations=()):
    """A train_fn that reports `evaluations` ((step, metrics) pairs) through on_eval, then raises `error`:
    a run that diverges (tanplan.errors.TrainingDiverged) or crashes (any other exception)."""

    def train_fn(cfg, workdir, *, progress=True, on_eval=None, resume=False):
        for step, metrics in evaluations:
            if on_eval is not None:
                on_eval(step, metrics)
        raise error

    return train_fn


def fake_sweep_result(spec, params: dict, *, overrides: dict | None = None, search_accuracy: float | None = 0.8):
    """What search.run_sweep returns (tanplan.outcomes.sweep.SweepResult) for a stand-in sweep whose every
    trial finished and whose best is trial 0 with these params (none re-ran); overrides: its config keys
    (default: the params' keys in the config)."""
    from tanplan.outcomes.sweep import RankedConfig, SweepFiles, SweepResult, SweepSeconds, TrialCounts
    from tanplan.workflow.sweep import space

    keys = space.overrides(spec.dims, params) if overrides is None else overrides
    best = RankedConfig(trial=0, params=params, overrides=keys, search_accuracy=search_accuracy,
                        seed=spec.seed, mean_accuracy=None, std_accuracy=None, accuracies=(), min_accuracy=None,
                        max_accuracy=None, reruns=0, failed_reruns=0, flags=())
    return SweepResult(best=best, ranked_by="search accuracy", ranking=(best,), target=spec.target, proxy=spec.proxy,
                       compute_ratio=spec.target.batch_size / spec.proxy.batch_size,
                       space=tuple(d.to_dict() for d in spec.dims),
                       trials=TrialCounts(requested=spec.trials, finished=spec.trials, pruned=0, diverged=0, error=0,
                                          interrupted=0),
                       wall_seconds=SweepSeconds(search=0.0, reruns=0.0),
                       files=SweepFiles(trials="sweep.csv", reruns="reruns.csv", study="study.sqlite3"))


def fake_pipeline_engine(monkeypatch, train_fn, learning_rate: float):
    """Patch `tanplan run`'s engine with train_fn: the sweep trains two trials through it (each writes its
    run folder and ledger) and returns a best of `learning_rate`; the ladder and the launch train through it."""
    from tanplan.config import config_from_dict
    from tanplan.workflow import proxy_runs
    from tanplan.workflow import launch as launch_module
    from tanplan.workflow.sweep import search

    def run_sweep(spec, out, **kwargs):
        for t in range(2):
            train_fn(config_from_dict(spec.base).with_overrides({"experiment.seed": t}), out / "trials" / f"t{t}")
        return fake_sweep_result(spec, {"learning_rate": learning_rate},
                                 overrides={"train.learning_rate": learning_rate})

    real_launch = launch_module.launch
    monkeypatch.setattr(search, "run_sweep", run_sweep)
    monkeypatch.setattr(proxy_runs, "_default_train_fn", lambda: train_fn)
    monkeypatch.setattr(launch_module, "launch",
                        lambda cfg, out, progress=True, resume=False: real_launch(cfg, out, train_fn=train_fn))
    return train_fn


def mnist1d_shaped(num_samples: int = 60_000, seed: int = 0):
    """Stands in for tanplan.data.load.load_mnist1d where a test needs the demo's N, not its signals: random signals
    of mnist1d's shapes and split (80% train, 40 points, 10 balanced classes), one draw a seed, nothing cached
    (generating the demo's 20,000-row draw costs about 14 CPU-s)."""
    from tanplan.data.dataset import Dataset

    rng = np.random.default_rng(seed)
    n_train = num_samples // 10 * 8
    x = rng.normal(size=(num_samples, 40, 1)).astype(np.float32)
    y = (np.arange(num_samples) % 10).astype(np.int32)
    return Dataset("mnist1d", x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:],
                   num_classes=10)


def use_mnist1d_shaped(patch) -> None:
    """Have `patch` (a pytest MonkeyPatch) put mnist1d_shaped in place of load_mnist1d."""
    from tanplan.data import load as data_load

    patch.setattr(data_load, "load_mnist1d", mnist1d_shaped)


def record_plan_reports(patch, reports: list) -> None:
    """Have `patch` replace the plan stage's report (RDP curves and figures, 2-8 CPU-s a `tanplan run`) by a
    recorder appending each folder it is asked to write into `reports`: for tests that do not check the report
    (tests/commands/test_plan_command.py does)."""
    from tanplan.workflow.pipeline import stages

    patch.setattr(stages, "write_plan_report", lambda plan, out, *args, **kwargs: reports.append(out))
