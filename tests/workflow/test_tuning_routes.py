"""One config means one thing in every command: `sweep` and every mode of `fit` train their proxies on the
[tuning] data (experiments/mnist1d.toml: the public draw, data.seed + 1); with private tuning, best.json
records it and `launch --best` prints and writes the composed ε of the sweep and the launch.

The engine is the suite's fake (tests/fakes.py): each call's config is kept, so the data seed of every
proxy run is read back. A sweep's trials run through tanplan.workflow.sweep.trial.run_trial, what each Ray
worker runs, without Ray.
"""

import json
from pathlib import Path

import pytest
from fakes import fake_sweep_result, fake_train, use_mnist1d_shaped
from helpers import CONFIG, run_cli

from tanplan.engine import loop
from tanplan.workflow.sweep import search

SMALL = ["data.num_samples=2000", "train.batch_size=256", "train.steps=4", "train.eval_every=4",
         "fit.max_proxy_fraction=0.5", "sweep.trials=2",
         "privacy.total_epsilon=1e6"]  # private tuning spends far above privacy.epsilon: allowed here


@pytest.fixture(autouse=True)
def mnist1d_shaped_data(monkeypatch):
    """The fake engine reads the draws' sizes and seeds, not their signals: random rows of mnist1d's shapes (one
    draw a seed) stand in for generating the private and public draws."""

    use_mnist1d_shaped(monkeypatch)


@pytest.fixture(autouse=True)
def no_law_figures(monkeypatch):
    """The fit's and the ladder's figures are not read here (tests/workflow/test_ladder.py and test_pipeline.py
    check them): each draws for a second or more."""
    from tanplan.reports import ladder as ladder_report
    from tanplan.workflow import fit

    monkeypatch.setattr(fit, "figure_scaling", lambda result, path, *a, **k: path)
    monkeypatch.setattr(ladder_report, "figure_ladder", lambda result, path: path)


def _sets(*extra) -> list[str]:
    return sum([["--set", s] for s in [*SMALL, *extra]], [])


def _sweep_without_ray(train_fn):
    """search.run_sweep's stand-in: each trial through run_trial (what a Ray worker runs), best = the first."""

    def run_sweep(spec, out, *, address=None, resume=False, log=None):
        from tanplan.workflow.sweep.trial import run_trial

        params = {d.name: d.choices[0] if d.is_choice else d.low for d in spec.dims}
        for i in range(spec.trials):
            run_trial({"params": params, "trial": i, "seed": spec.seed + i, "kind": "search"}, base=spec.base,
                      dims=spec.dims, trials_dir=str(Path(out) / "trials"), train_fn=train_fn)
        return fake_sweep_result(spec, params, search_accuracy=0.8)

    return run_sweep


# the batch law needs two seeds a size (their scatter is the launch's spread); --vary takes one
# "auto" at B = 256: fit.compute_budget = 0 (the pipeline's budget, never more than the launch, cannot pay it)
MODES = {"batch": ["--batch-sizes", "32,64", "--seeds", "2", "--launch-anyway"],
         "ladder": ["--batch-sizes", "auto", "--set", "fit.compute_budget=0"],
         "steps": ["--vary", "steps", "--factors", "1,2", "--proxy-batch-size", "32", "--seeds", "1"],
         "data": ["--vary", "data", "--factors", "0.5,1", "--proxy-batch-size", "32", "--seeds", "1"]}


@pytest.mark.parametrize("mode, tune, seed", [(MODES[m], "public", 1) for m in MODES] + [(MODES["batch"], "private", 0)],
                         ids=[*MODES, "batch-private"])
def test_every_fit_mode_trains_on_the_tuning_data(tmp_path, monkeypatch, capsys, mode, tune, seed):
    fake = fake_train()
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    code, out, err = run_cli(capsys, "fit", "--config", CONFIG, *_sets(f"tuning.data={tune}"), "--out",
                             str(tmp_path / "fit"), *mode)
    assert code == 0, err
    assert fake.calls and {c.data.seed for c in fake.calls} == {seed}
    spent = json.loads((tmp_path / "fit" / "privacy_spent.json").read_text())
    assert spent["tuning"]["tuning_data"] == tune and spent["runs"] == len(fake.calls)
    assert ("no private example" in out) == (tune == "public")


def test_sweep_trains_on_the_public_draw_and_says_so(tmp_path, monkeypatch, capsys):
    fake = fake_train()
    monkeypatch.setattr(search, "run_sweep", _sweep_without_ray(fake))
    code, out, err = run_cli(capsys, "sweep", "--config", CONFIG, *_sets(), "--proxy-batch-size", "32", "--out",
                             str(tmp_path / "sweep"))
    assert code == 0, err
    assert len(fake.calls) == 2 and {c.data.seed for c in fake.calls} == {1}  # every trial: the public draw
    best = json.loads((tmp_path / "sweep" / "best.json").read_text())
    assert best["tuning"]["tuning_data"] == "public" and "private set is untouched" in out


def test_launch_best_composes_a_private_sweep_with_the_launch(tmp_path, monkeypatch, capsys):
    from tanplan.privacy.ledger import epsilon_of_ledgers
    from tanplan.workflow.privacy_spent import ledgers_under

    fake = fake_train()
    monkeypatch.setattr(search, "run_sweep", _sweep_without_ray(fake))
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    private = _sets("tuning.data=private")
    code, _, err = run_cli(capsys, "sweep", "--config", CONFIG, *private, "--proxy-batch-size", "32", "--out",
                           str(tmp_path / "sweep"))
    assert code == 0, err
    assert {c.data.seed for c in fake.calls} == {0}  # the private set, as the config asks
    best = tmp_path / "sweep" / "best.json"
    assert json.loads(best.read_text())["tuning"]["tuning_data"] == "private"
    code, out, err = run_cli(capsys, "launch", "--config", CONFIG, *private, "--best", str(best), "--out",
                             str(tmp_path / "launch"))
    assert code == 0, err
    written = json.loads((tmp_path / "launch" / "launch.json").read_text())
    ledgers = ledgers_under(tmp_path / "launch") + ledgers_under(tmp_path / "sweep" / "trials")
    assert len(ledgers) == 3 and written["epsilon_total_runs"] == 3
    composed = epsilon_of_ledgers(ledgers, written["accounting"]["delta"], "pld")
    assert written["epsilon_total_pld"] == pytest.approx(composed, rel=1e-12)
    assert written["epsilon_total_pld"] > written["accounting"]["epsilon_pld"]
    assert f"{written['epsilon_total']:.4g}" in out and "the sweep's 2 runs and the launch" in out
    # The same launch of a public sweep says that the launch's ε is the whole guarantee.
    fake.calls.clear()
    code, _, _ = run_cli(capsys, "sweep", "--config", CONFIG, *_sets(), "--proxy-batch-size", "32", "--out",
                         str(tmp_path / "public"))
    code, out, err = run_cli(capsys, "launch", "--config", CONFIG, *_sets(), "--best",
                             str(tmp_path / "public" / "best.json"), "--out", str(tmp_path / "launch2"))
    assert code == 0, err
    assert "the launch's ε is the whole guarantee" in out
    assert json.loads((tmp_path / "launch2" / "launch.json").read_text())["epsilon_total_runs"] == 1
