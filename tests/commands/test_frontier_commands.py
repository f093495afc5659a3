"""`tanplan plan --compute` (the budget frontier) and `tanplan optimize`: JSON schema, the compute budget
from device hours, and one-line errors with exit code 2 before any work."""

import json
import subprocess
import sys

import pytest

from fakes import SMALL, fake_train, use_mnist1d_shaped
from helpers import CONFIG, ROOT, run_cli

FRONT = ["--dataset-size", "10000", "--epsilon", "1"]


def test_plan_compute_json_lists_every_candidate_within_both_budgets(capsys):
    # C = 20,000 at N = 10,000: B = N (S = 2) down to B = 3 (S = 6,666), every regime on one frontier. Each
    # candidate is a PLD calibration of 0.1 to 2 CPU-s: ε = 2 puts the end (S = 6,666, σ = 0.49) behind the wall
    # and S = 2, 32, 512 (×16 apart) in the other two regimes. B ≥ 3: the B = 1, 2 ends (S = 20,000, 8,192) cost
    # 3 CPU-s each and add no regime
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "10000", "--epsilon", "2", "--compute", "20000",
                           "--steps-factor", "16", "--min-batch-size", "3", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["compute"] == 20000 and result["accountant"] == "pld"  # the accountant of record
    assert {c["regime"] for c in result["candidates"]} == {"tan", "overcharged", "privacy_wall"}
    assert len(result["candidates"]) >= 4
    for c in result["candidates"]:
        assert {"batch_size", "steps", "sigma", "epsilon", "eps_rdp", "eta_step", "regime"} <= set(c)
        assert isinstance(c["batch_size"], int) and isinstance(c["steps"], int) and isinstance(c["sigma"], float)
        assert c["batch_size"] * c["steps"] <= 20000 and c["epsilon"] <= 2.0 <= c["eps_rdp"]  # RDP is looser
        assert c["eta_step"] == pytest.approx(c["batch_size"] / 10000 / (2**0.5 * c["sigma"]))
        assert c["regime"] in ("tan", "overcharged", "privacy_wall")


def test_plan_device_hours_times_a_given_throughput(capsys):
    # B = N: the budget's arithmetic is the point here, so the frontier is its one candidate (S = 18, a PLD
    # calibration of 0.1 CPU-s); the frontier's smaller batches are the listing test's above
    code, out, _ = run_cli(capsys, "plan", *FRONT, "--device-hours", "0.5", "--samples-per-second", "100",
                           "--steps-factor", "4", "--min-batch-size", "10000", "--json")
    result = json.loads(out)
    assert code == 0 and result["compute"] == 0.5 * 3600 * 100
    assert result["throughput"] == {"device_hours": 0.5, "samples_per_second": 100.0, "measured": False, "model": None}


def test_plan_device_hours_measures_the_throughput_when_not_given(capsys, monkeypatch):
    import tanplan.workflow.frontier_plan as stage

    timed = []
    monkeypatch.setattr(stage, "measure_throughput", lambda model: timed.append(model) or 50.0)
    code, out, _ = run_cli(capsys, "plan", *FRONT, "--device-hours", "1", "--model", "mlp", "--steps-factor", "4",
                           "--min-batch-size", "10000")  # one candidate, B = N (as above)
    assert code == 0 and timed == ["mlp"]
    assert "1 device-hours × 3600 × 50 samples/s (measured on mlp) = 180,000 examples" in out


@pytest.mark.parametrize("argv, fragment", [
    (["--compute", "5", "--epsilon", "1", "--min-batch-size", "10"], "compute 5 is not allowed"),
    (["--compute", "0"], "0 is not allowed"),
    (["--compute", "1000", "--epsilon", "0"], "0.0 is not allowed"),
    (["--compute", "1000", "--epsilon", "-2"], "-2.0 is not allowed"),
    (["--compute", "1000", "--epsilon", "1e-4", "--accountant", "rdp"], "cannot be reached by any sigma"),
    (["--compute", "1000", "--sigma", "2"], "--compute needs --epsilon"),
    (["--compute", "1000", "--epsilon", "1", "--batch-size", "10"], "--batch-size is not allowed with --compute"),
    (["--compute", "1000", "--epsilon", "1", "--out", "x"], "--out is not allowed with --compute"),
    (["--compute", "1000", "--epsilon", "1", "--steps-factor", "1"], "--steps-factor 1 is not allowed"),
    (["--compute", "1000", "--device-hours", "1", "--epsilon", "1"], "not allowed with argument"),
    (["--compute", "1000", "--epsilon", "1", "--samples-per-second", "5"], "--samples-per-second is not allowed"),
    (["--device-hours", "1", "--epsilon", "1", "--model", "nope"], "--model 'nope' is not known"),
    (["--epsilon", "1"], "required: --batch-size"),
])
def test_plan_compute_bad_input_is_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = run_cli(capsys, "plan", "--dataset-size", "10000", *argv)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("tanplan: error:")
    assert fragment in err
    assert out == ""


def test_plan_compute_loads_no_jax():
    # one candidate (B = N): what the planner imports is the point, not how many σ it calibrates
    code = ("import sys; from tanplan.cli import main; "
            "rc = main(['plan', '--dataset-size', '50000', '--epsilon', '2', '--compute', '1000000', '--min-batch-size', '50000', "
            "'--steps-factor', '16', '--json']); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax', 'jax_privacy')); "
            "print(bad, file=sys.stderr); sys.exit(rc or (1 if bad else 0))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_optimize_json_recommends_a_candidate_of_the_frontier(capsys, tmp_path, monkeypatch):
    import tanplan.workflow.proxy_runs as proxy_runs
    from tanplan.reports import optimize as optimize_report

    monkeypatch.setattr(proxy_runs, "_default_train_fn", lambda: fake_train(lambda run: 0.8, noise=0.01, of_run=True))
    # the fake engine reads N alone: random rows of mnist1d's shapes stand in for generating the private and public
    # draws (2 × 2,000 signals, about 4 CPU-s in a cold cache); the frontier figure (drawn twice a run) is
    # tests/workflow/test_optimize.py::test_the_report_and_its_files's
    use_mnist1d_shaped(monkeypatch)
    monkeypatch.setattr(optimize_report, "figure_frontier", lambda result, path: None)
    # candidates ×4 apart, proxies of B' = B/4 ≥ 16 (a frontier grid ×2 apart from S = 7 to 160, B ≥ 64: 6 PLD
    # calibrations, not 14; the proxies' ledgers, at σ' = σ/4 ≥ 0.55, compose by PLD faster than at σ/8): the
    # command's JSON is the point, the stage's choices are tests/workflow/test_optimize.py's
    sets = sum([["--set", s] for s in SMALL + ["optimize.savings=4", "optimize.min_proxy_batch_size=16",
                                               "optimize.steps_factor=4"]], [])
    code, out, _ = run_cli(capsys, "optimize", "--config", CONFIG, *sets, "--out", str(tmp_path / "o"), "--json")
    assert code == 0
    result = json.loads(out)
    for key in ("recommendation", "runner_up", "worst", "frontier", "law", "verdict", "proxy_compute_fraction",
                "comparisons", "points"):
        assert key in result
    best = result["recommendation"]
    low, high = best["prediction_interval"]
    assert low <= best["predicted_accuracy"] <= high
    assert best["batch_size"] * best["steps"] <= 512 * 20 and best["epsilon"] <= 0.7 and best["accountant"] == "pld"
    assert {r["steps"] for r in result["frontier"]} >= {best["steps"], result["runner_up"]["steps"]}
    assert (tmp_path / "o" / "report.md").is_file()


@pytest.mark.parametrize("argv, fragment", [
    (["--compute", "100"], "smaller than one step of the smallest batch"),
    (["--compute", "0"], "0 is not allowed"),
    (["--device-hours", "1"], "--device-hours needs --samples-per-second"),
    (["--samples-per-second", "10"], "--samples-per-second is not allowed without --device-hours"),
    (["--set", "optimize.law=cubic"], "optimize.law = 'cubic' is not allowed"),
    (["--set", "optimize.candidates=2"], "optimize.candidates = 2 is not allowed"),
    (["--set", "privacy.sigma=3"], "privacy.sigma = 3 is not allowed"),
])
def test_optimize_bad_input_is_one_line_and_exit_2_before_training(capsys, tmp_path, monkeypatch, argv, fragment):
    import tanplan.workflow.proxy_runs as proxy_runs

    train_fn = fake_train(of_run=True)
    monkeypatch.setattr(proxy_runs, "_default_train_fn", lambda: train_fn)
    code, out, err = run_cli(capsys, "optimize", "--config", CONFIG, "--out", str(tmp_path / "o"), *argv)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("tanplan: error:") and fragment in err
    assert out == "" and train_fn.calls == [] and not (tmp_path / "o").exists()
