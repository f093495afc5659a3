"""`launch --best` composes every release on the private set recorded for its best.json: the sweep's trials,
and the stages recorded in the registry beside it (private_releases.json): a `fit --best` with private
tuning data, the batch law of a `tanplan run` with private tuning (tanplan.workflow.best).

The engine is the suite's fake (tests/fakes.py): each run writes its ledger.json and config.toml as the
engine does, so the composed figures are checked against the ledgers themselves."""

import json
from pathlib import Path

import pytest
from fakes import fake_pipeline_engine, fake_train, record_plan_reports, use_mnist1d_shaped
from helpers import CONFIG, run_cli

from tanplan.config import load_config
from tanplan.engine import loop
from tanplan.privacy.ledger import epsilon_of_ledgers
from tanplan.workflow import best as best_module
from tanplan.workflow.pipeline import run_pipeline
from tanplan.workflow.privacy_spent import ledgers_under
from tanplan.workflow.sweep import search

SMALL = ["data.num_samples=2000", "train.batch_size=256", "train.steps=4", "train.eval_every=4", "sweep.trials=2",
         "privacy.total_epsilon=1e6"]  # private tuning spends far above privacy.epsilon: allowed here
FIT = ["--batch-sizes", "32,64", "--seeds", "2", "--launch-anyway"]


def _sets(*extra) -> list[str]:
    return sum([["--set", s] for s in [*SMALL, *extra]], [])


@pytest.fixture(autouse=True)
def shaped_data(monkeypatch):
    """Random signals of mnist1d's shapes: the fake engine reads only N (generating mnist1d costs about 5 CPU-s
    a process, its import half of it)."""

    use_mnist1d_shaped(monkeypatch)


@pytest.fixture
def fake(monkeypatch):
    from test_tuning_routes import _sweep_without_ray

    train_fn = fake_train()
    monkeypatch.setattr(loop, "train_and_evaluate", train_fn)
    monkeypatch.setattr(search, "run_sweep", _sweep_without_ray(train_fn))
    return train_fn


def _sweep(tmp_path, capsys, tune: str) -> Path:
    code, _, err = run_cli(capsys, "sweep", "--config", CONFIG, *_sets(f"tuning.data={tune}"), "--proxy-batch-size",
                           "32", "--out", str(tmp_path / "sweep"))
    assert code == 0, err
    return tmp_path / "sweep" / "best.json"


def _fit(tmp_path, capsys, best: Path, tune: str = "private", name: str = "fit", *extra) -> tuple[int, str]:
    code, _, err = run_cli(capsys, "fit", "--config", CONFIG, *_sets(f"tuning.data={tune}", *extra), "--best",
                           str(best), "--out", str(tmp_path / name), *FIT)
    return code, err


def _launch(tmp_path, capsys, best: Path, *extra, name: str = "launch"):
    return run_cli(capsys, "launch", "--config", CONFIG, *_sets("tuning.data=private", *extra), "--best", str(best),
                   "--out", str(tmp_path / name), "--json")


def test_launch_best_composes_a_private_fit_of_its_best_json(tmp_path, capsys, fake):
    """Issue 44 item 4: a separate private `fit --best B` trained 4 runs on the private set; `launch --best B`
    composed the sweep's 2 runs and itself only (3 runs). Now the fit is recorded beside B and composed: the
    total is the ledgers of all 7 runs composed, by PLD, to 1e-12."""
    best = _sweep(tmp_path, capsys, "private")
    code, err = _fit(tmp_path, capsys, best)
    assert code == 0, err
    registry = json.loads((tmp_path / "sweep" / best_module.REGISTRY).read_text())
    assert registry["releases"] == [{"command": "fit --best", "out": str((tmp_path / "fit").absolute()),
                                     "ledgers": 4}]
    code, out, err = _launch(tmp_path, capsys, best)
    assert code == 0, err
    result = json.loads(out)
    ledgers = [*ledgers_under(tmp_path / "sweep" / "trials"), *ledgers_under(tmp_path / "fit"),
               *ledgers_under(tmp_path / "launch")]
    assert len(ledgers) == 7 and result["epsilon_total_runs"] == 7
    composed = epsilon_of_ledgers(ledgers, result["accounting"]["delta"], "pld")
    assert result["epsilon_total_pld"] == pytest.approx(composed, rel=1e-12)
    without_fit = epsilon_of_ledgers([*ledgers[:2], ledgers[-1]], result["accounting"]["delta"], "pld")
    assert result["epsilon"] == result["epsilon_total"] > without_fit


def test_a_private_fit_of_a_public_sweeps_best_json_makes_the_launch_private(tmp_path, capsys, fake):
    """The sweep tuned on public data, but `fit --best` on the private set: the launch's ε is no longer the
    whole guarantee; the total composes the fit's 4 runs and the launch, and says so."""
    best = _sweep(tmp_path, capsys, "public")
    code, err = _fit(tmp_path, capsys, best)
    assert code == 0, err
    code, out, err = run_cli(capsys, "launch", "--config", CONFIG, *_sets(), "--best", str(best), "--out",
                             str(tmp_path / "launch"))
    assert code == 0, err
    written = json.loads((tmp_path / "launch" / "launch.json").read_text())
    assert written["tuning_data"] == "private" and written["epsilon_total_runs"] == 5
    assert written["epsilon"] == written["epsilon_total"] > written["accounting"]["epsilon"]
    assert "the launch's ε is the whole guarantee" not in out
    assert "the 4 tuning runs on it and the launch" in out and "fit --best" in out


def test_the_recorded_fit_counts_against_the_total_budget_before_any_step(tmp_path, capsys, fake):
    """privacy.total_epsilon between what the sweep and the launch release and what the fit adds (by PLD, the
    accountant of record the check falls back to): the launch is refused with exit 3 before any step."""
    best = _sweep(tmp_path, capsys, "private")
    code, out, err = _launch(tmp_path, capsys, best, name="first")  # sweep + launch: what the old code checked
    assert code == 0, err
    first = json.loads(out)
    assert _fit(tmp_path, capsys, best)[0] == 0
    ledgers = [*ledgers_under(tmp_path / "sweep"), *ledgers_under(tmp_path / "fit"), *ledgers_under(tmp_path / "first")]
    with_fit = epsilon_of_ledgers(ledgers, first["accounting"]["delta"], "pld")  # the same launch's events
    limit = (first["epsilon_total_pld"] + with_fit) / 2
    assert first["epsilon_total_pld"] * 1.05 < limit < with_fit / 1.05
    calls = len(fake.calls)
    code, out, err = _launch(tmp_path, capsys, best, f"privacy.total_epsilon={limit}")
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "6 runs already trained and the launch" in err
    assert len(fake.calls) == calls and not (tmp_path / "launch").exists()


def test_only_private_fits_are_recorded_and_a_refused_fit_records_nothing(tmp_path, capsys, fake):
    best = _sweep(tmp_path, capsys, "private")
    assert _fit(tmp_path, capsys, best, "public", "fit_public")[0] == 0  # the public draw: nothing on the private set
    assert not (tmp_path / "sweep" / best_module.REGISTRY).exists()
    code, err = _fit(tmp_path, capsys, best, "private", "fit_over", "privacy.total_epsilon=1")
    assert code == 3 and not (tmp_path / "sweep" / best_module.REGISTRY).exists(), err


def test_a_stopped_fit_is_composed_as_far_as_it_went(tmp_path, capsys, fake, monkeypatch):
    """A fit killed after its second run: its entry stays unfinished (no ledger count) and the launch
    composes the two ledgers it wrote (each ledger is written before the release it records)."""
    best = _sweep(tmp_path, capsys, "private")

    def stopping(cfg, workdir, **kwargs):
        if len(fake.calls) == 4:  # the sweep's 2 runs, then 2 of the fit's
            raise KeyboardInterrupt
        return fake(cfg, workdir, **kwargs)

    monkeypatch.setattr(loop, "train_and_evaluate", stopping)
    code, err = _fit(tmp_path, capsys, best)
    assert code == 130, err  # stopped by SIGINT's exception, as Ctrl-C stops it
    [entry] = best_module.read_registry(best)
    assert entry.ledgers is None and len(ledgers_under(tmp_path / "fit")) == 2
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    code, out, err = _launch(tmp_path, capsys, best)
    assert code == 0, err
    assert json.loads(out)["epsilon_total_runs"] == 2 + 2 + 1


def test_a_fit_that_cannot_record_its_releases_trains_nothing(tmp_path, capsys, fake):
    best = _sweep(tmp_path, capsys, "private")
    (tmp_path / "sweep" / ".private_releases.training").mkdir()  # the lock file cannot be opened
    calls = len(fake.calls)
    code, err = _fit(tmp_path, capsys, best)
    assert code == 2 and "cannot be written" in err and "nothing was trained" in err, err
    assert len(fake.calls) == calls and not list((tmp_path / "fit").rglob("ledger.json"))


def test_the_run_pipeline_records_its_batch_law_beside_its_best_json(tmp_path, capsys, monkeypatch):
    """`tanplan run --tune-data private` trains its law on the private set with the sweep's best: a later
    `launch --best RUN/sweep/best.json` composes the sweep's 2 runs, the fit's 4 and itself."""
    from tanplan.workflow import launch as launch_module

    real_launch = launch_module.launch
    fake = fake_pipeline_engine(monkeypatch, fake_train(law=lambda b: 0.8, noise=0.004), 2.5)
    # the plan's report (RDP curves, figures: 7 CPU-s) is tests/commands/test_plan_command.py's: only asked for here
    reports = []
    record_plan_reports(monkeypatch, reports)
    sets = [*SMALL, "fit.batch_sizes=[16, 32]", "fit.seeds=2", "tuning.data=private", "fit.max_half_width=50"]
    run_pipeline(load_config(CONFIG, sets), tmp_path / "run", log=lambda *a: None)
    assert reports == [tmp_path / "run" / "plan"]
    best = tmp_path / "run" / "sweep" / "best.json"
    best.write_text(json.dumps({"best": {"overrides": {"train.learning_rate": 2.5}}}))  # the real sweep writes it
    [entry] = best_module.read_registry(best)
    assert (entry.command, entry.out, entry.ledgers) == ("run", str((tmp_path / "run" / "fit").absolute()), 4)
    monkeypatch.setattr(launch_module, "launch", real_launch)  # the command's own launch, with the fake engine
    monkeypatch.setattr(loop, "train_and_evaluate", fake)
    code, out, err = _launch(tmp_path, capsys, best)
    assert code == 0, err
    assert json.loads(out)["epsilon_total_runs"] == 2 + 4 + 1


def test_folders_are_composed_once():
    """A recorded folder inside the sweep's trials (or the same folder twice) adds no ledger twice."""
    here = Path(__file__).parent
    assert best_module.folders_of([here, here / "..", here, None, here / "nope"]) == [here.parent.resolve()]
    assert best_module.folders_of(None) == [] and best_module.folders_of(here) == [here.resolve()]
