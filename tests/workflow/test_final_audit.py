"""`tanplan audit --final-model`: the canaries and the two-sided bound on simulated scores, then the command end to
end on a tiny run, intact (the bound stays below the ε the run claims) and with no noise at all (a violation:
exit 5), the coins' secrecy, and bad input (exit 2, nothing written). The broken mechanism is injected here only,
by patching the engine's noise function for the test."""

import contextlib
import functools
import io
import json
import math

import numpy as np
import pytest
from helpers import CONFIG, no_figure

from tanplan.data.dataset import Dataset
from tanplan.privacy import accounting
from tanplan.workflow import audit
from tanplan.workflow.audit_stats import Guesses
from tanplan.workflow import final_audit as fa


def _toy(n=40, classes=4):
    rng = np.random.default_rng(0)
    return Dataset("toy", rng.normal(size=(n, 6, 1)).astype(np.float32), np.arange(n) % classes,
                   rng.normal(2.0, 3.0, size=(500, 6, 1)).astype(np.float32), np.arange(500) % classes, classes)


def test_mislabelled_canaries_leave_the_training_set_and_come_back_only_when_held_in_with_a_wrong_label():
    data = _toy()
    canaries = fa.draw_canaries(data, 10, "mislabelled", np.random.default_rng(1))
    assert len(set(canaries.rows)) == 10 and (canaries.labels != data.y_train[canaries.rows]).all()
    assert np.array_equal(canaries.x, data.x_train[canaries.rows])
    trained = fa.with_canaries(data, canaries)
    held = int(canaries.held_in.sum())
    assert trained.num_train == data.num_train - 10 + held
    pairs = {(tuple(x.ravel()), int(y)) for x, y in zip(trained.x_train, trained.y_train)}
    for x, y, held_in in zip(canaries.x, canaries.labels, canaries.held_in):
        assert ((tuple(x.ravel()), int(y)) in pairs) == bool(held_in)  # held out: not even with its true label
        assert not any(np.array_equal(x, t) for t in trained.x_train) or held_in
    assert trained.x_test is data.x_test  # the public test set is untouched


def test_crafted_canaries_are_out_of_distribution_inputs_at_the_test_sets_scale_with_random_labels():
    data = _toy()
    canaries = fa.draw_canaries(data, 400, "crafted", np.random.default_rng(2))
    assert canaries.rows.size == 0 and canaries.x.shape == (400, 6, 1)
    assert abs(canaries.x.mean() - data.x_test.mean()) < 0.3 and abs(canaries.x.std() - data.x_test.std()) < 0.3
    assert set(canaries.labels) == set(range(4)) and 150 < canaries.held_in.sum() < 250
    assert fa.with_canaries(data, canaries).num_train == 40 + int(canaries.held_in.sum())


def test_the_score_is_the_label_margin():
    logits = np.array([[2.0, 0.5, 1.0], [0.0, 3.0, 1.0], [1.0, 1.0, 0.0]])
    assert np.allclose(fa.label_margins(logits, np.array([0, 2, 1])), [1.0, -2.0, 0.0])


def test_the_bound_counts_both_sides_is_zero_without_signal_and_reaches_the_ceiling_with_perfect_guesses():
    rng = np.random.default_rng(3)
    held_in = rng.random(200) < 0.5
    assert fa.two_sided_bound(rng.normal(size=200), held_in, 1e-5, 0.95).epsilon == 0.0
    perfect = fa.two_sided_bound(held_in + 0.1 * rng.normal(size=200), held_in, 1e-5, 0.95)
    assert perfect.correct == perfect.guesses == 100 and perfect.epsilon > 2.5
    # the held-out canaries alone stand out (the lowest scores), the held-in ones mix with the rest: only the
    # guesses "held out" are right, and they alone give a bound
    low = np.where(held_in | (rng.random(200) < 0.5), rng.normal(size=200), -9.0)
    bound = fa.two_sided_bound(low, held_in, 1e-5, 0.95)
    # the top-k guesses alone, k = M/64 … M/2 union-bounded (what `tanplan audit` guessed before it too abstained
    # on the middle and guessed the lowest scores out: tanplan.workflow.audit_stats)
    top_k = [Guesses(round(f * 200), 0, 1 / 6) for f in (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)]
    top_only = audit.one_run_bound(low[held_in], low[~held_in], 1e-5, 0.95, top_k)
    assert bound.epsilon > 0.5 > top_only.epsilon and bound.correct < bound.guesses, (bound, top_only)
    # the same count of right guesses by the one-run analysis directly: the bound is computed, not set
    direct = fa.one_run_epsilon(200, bound.guesses, bound.correct, (1 - 0.95) / 6, 1e-5)
    assert bound.epsilon == pytest.approx(direct, rel=1e-12)


def test_the_bound_stays_below_an_exact_claim_on_ideal_canaries_and_exceeds_it_when_they_are_exposed():
    """Ideal black-box canaries of a mechanism at ε: each score a Gaussian shift μ with e^ε-limited separation
    (μ-GDP at μ = 0.5 has ε ≈ 1.5 at δ 1e-5); the bound must stay below; at μ = 6 it must exceed it."""
    rng = np.random.default_rng(4)
    held_in = rng.random(1000) < 0.5
    claim = 1.5
    intact = fa.two_sided_bound(held_in * 0.5 + rng.normal(size=1000), held_in, 1e-5, 0.95)
    broken = fa.two_sided_bound(held_in * 6.0 + rng.normal(size=1000), held_in, 1e-5, 0.95)
    assert intact.epsilon < claim < broken.epsilon, (intact, broken)


# ---------------------------------------------------------------- the command, end to end

# Small and short, so that the two runs cost ~3 CPU-s each (a width-128 MLP on 1000 examples for 200 steps: ~14): σ
# is given (ε ≈ 0.5, no calibration), one checkpoint at the end. On 400 examples at B = 128 the MLP without noise
# still learns the held-in canaries: 49-50 of 50 guesses right, AUROC 0.95-0.97 over 5 measured audits (at width
# 128, 1000 examples: 48-49, 0.96); the intact run's AUROC 0.54-0.58, its bound 0. Ghost clipping (vmap before): the
# same clipped sums, ~1 CPU-s less per run; over 8 audits each, broken 48-50 of 50 right (one 24 of 24; ≥ 40 needed),
# AUROC 0.91-0.98; intact AUROC 0.56-0.66 (vmap, 11: 0.51-0.65), bound 0: P(intact AUROC > 0.8) ≈ 5e-6 (normal fit).
TINY = ["data.num_samples=500", "model.name=mlp", "model.width=64", "model.depth=1", "train.batch_size=128",
        "train.steps=100", "privacy.sigma=20", "privacy.delta=1e-5", "train.eval_every=100",
        "train.checkpoint_every=0", "train.grad_method=ghost", "train.ema_decay=0", "train.learning_rate=2.0",
        "train.momentum=0.5", "train.physical_batch_size=512", "privacy.noise_seed=11"]
TRAIN_ROWS = 400  # data.num_samples · 0.8
CANARIES = 100  # crafted (see TINY for what the runs learn of them)


def _audit(out, *extra, sets=TINY):
    """(exit code, stdout, stderr) of `tanplan audit --final-model` in this process."""
    from tanplan.cli import main

    argv = ["audit", "--final-model", "--config", CONFIG, *sum([["--set", s] for s in sets], []), "--out", str(out),
            "--quiet", *extra]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return code, stdout.getvalue(), stderr.getvalue()



@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    """The same tiny final-model audit twice: with the engine's mechanism, and with no noise at all; each
    hands its secret draw to the test (the only way out of memory)."""
    from tanplan.dp import noise
    from tanplan.reports import final_audit as reports

    root, draws = tmp_path_factory.mktemp("final"), {}
    run = fa.run_final_audit
    with pytest.MonkeyPatch.context() as patch:
        for name in ("intact", "broken"):
            hook = lambda drawn, name=name: draws.__setitem__(name, drawn)  # noqa: E731
            patch.setattr(fa, "run_final_audit", functools.partial(run, on_canaries=hook))
            if name == "broken":  # the deliberately broken mechanism: the noise never added
                patch.setattr(noise, "add_gaussian_noise", lambda grads, key, std: grads)
                patch.setattr(reports, "figure_scores", no_figure)  # no test reads the broken run's figure
            code, stdout, stderr = _audit(root / name, "--canary-kind", "crafted", "--canaries", str(CANARIES))
            result = json.loads((root / name / "final_audit.json").read_text())
            draws[f"{name}-out"] = (code, stdout, stderr, result)
    return {"root": root, **draws}


def test_the_intact_run_is_consistent_and_reports_its_threat_model(audits):
    code, stdout, stderr, result = audits["intact-out"]
    assert code == 0, stderr[-2000:]
    assert result["verdict"] == "consistent" and result["lower_bound"] < result["claimed_epsilon"]
    claim = result["claim"]
    q = result["batch_size"] / result["dataset_size"]
    assert math.isclose(claim["epsilon_pld"], accounting.epsilon(q, result["sigma"], 100, 1e-5, "pld"), rel_tol=1e-6)
    assert result["claimed_epsilon"] == min(claim["epsilon_pld"], claim["epsilon_rdp"])
    assert result["steps"] == 100 and result["sigma"] == 20
    assert result["dataset_size"] == TRAIN_ROWS + result["held_in"]
    assert result["held_in"] + result["held_out"] == CANARIES
    threat = result["threat_model"]
    assert "released model only" in threat["sees"] and "intermediate update" in threat["does_not_see"]
    assert "far below" in threat["cannot_show"] and "canaries" in threat["chooses"]
    md = (audits["root"] / "intact" / "final_audit.md").read_text()
    assert "## Threat model" in md and threat["sees"] in md and "adversary sees" in stdout
    for name in ("final_audit.json", "final_audit.md", "final_scores.png", "final_scores.npz", "run/model/params.npz"):
        assert (audits["root"] / "intact" / name).is_file(), name


def test_the_audits_run_says_it_is_not_a_private_release(audits):
    run = audits["root"] / "intact" / "run"
    summary = json.loads((run / "summary.json").read_text())
    card = json.loads((run / "model" / "model.json").read_text())
    assert summary["private_release"] is False and card["private_release"] is False
    assert "audit_canaries" not in card  # input canaries: no gradient canaries wrapped the mechanism


def test_the_run_without_noise_is_a_violation_with_exit_5(audits):
    code, stdout, stderr, result = audits["broken-out"]
    assert code == 5, stderr[-2000:]
    assert result["verdict"] == "violation" and result["lower_bound"] > result["claimed_epsilon"]
    assert stderr.strip().splitlines()[-1].startswith("tanplan: error: privacy violation:")
    assert result["auroc"] > 0.8 > audits["intact-out"][3]["auroc"]


def test_the_bound_is_computed_from_the_released_models_scores(audits):
    for name in ("intact", "broken"):
        result = audits[f"{name}-out"][3]
        with np.load(audits["root"] / name / "final_scores.npz") as f:
            scores_in, scores_out = f["scores_in"], f["scores_out"]
        assert len(scores_in) == result["held_in"] and len(scores_out) == result["held_out"]
        held_in = np.r_[np.ones(len(scores_in), bool), np.zeros(len(scores_out), bool)]
        again = fa.two_sided_bound(np.r_[scores_in, scores_out], held_in, result["claim"]["delta"], 0.95)
        assert again.epsilon == pytest.approx(result["lower_bound"], abs=1e-9)
        assert (again.guesses, again.correct) == (result["guesses"], result["correct_guesses"])


def test_the_coins_are_secret_fresh_per_audit_and_never_written(audits):
    intact, broken = audits["intact"], audits["broken"]
    # the same config (privacy.noise_seed 11 included) drew other canaries and other coins: OS entropy
    assert not np.array_equal(intact.held_in, broken.held_in) and not np.array_equal(intact.x, broken.x)
    result = audits["intact-out"][3]
    assert all(not isinstance(v, list) for v in result.values())  # no per-canary array in the report
    with np.load(audits["root"] / "intact" / "final_scores.npz") as f:
        assert set(f.files) == {"scores_in", "scores_out"}  # each side sorted: no canary order
        assert (np.diff(f["scores_in"]) >= 0).all() and (np.diff(f["scores_out"]) >= 0).all()
    bits = "".join("1" if b else "0" for b in intact.held_in)
    for path in (audits["root"] / "intact").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".toml", ".jsonl"):
            assert bits not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("extra, sets, message", [
    (["--canaries", "5"], TINY, "--canaries 5 is not allowed: must be >= 20"),
    (["--canary-kind", "poisoned"], TINY, "invalid choice: 'poisoned'"),
    (["--canaries", "600", "--canary-kind", "mislabelled"], TINY, f"at most half of the {TRAIN_ROWS} training"),
    (["--confidence", "1.5"], TINY, "(0.5, 1)"),
    ([], [*TINY, "privacy.private=false"], "claims no ε"),
    ([], [*TINY, "task.loss=final_audit_losses:margin_loss"], "not allowed for --final-model"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, monkeypatch, extra, sets, message):
    (tmp_path / "final_audit_losses.py").write_text("def margin_loss(logits, label):\n    return -logits[label]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, stdout, stderr = _audit(tmp_path / "out", *extra, sets=sets)
    assert code == 2 and stderr.count("\n") == 1 and message in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_canary_kind_without_final_model_and_a_used_out_exit_2(tmp_path):
    from tanplan.cli import main

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main(["audit", "--config", CONFIG, "--canary-kind", "crafted"]) == 2
    assert "only with --final-model" in stderr.getvalue()
    (tmp_path / "used" / "run").mkdir(parents=True)
    code, _, stderr = _audit(tmp_path / "used")
    assert code == 2 and "already holds an audited run" in stderr
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == ["run"]


def test_only_the_final_model_audit_trains_on_a_set_of_its_own():
    """The loop's `dataset` (a training set in place of the config's) is passed by the final-model audit alone
    (and by the loop to its own preparation, and packed proxies to theirs, the jobs' one cfg.data loaded once): no
    other command trains on anything but cfg.data."""
    import ast

    from helpers import ROOT

    callers = set()
    for path in (ROOT / "tanplan").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "train_and_evaluate" not in text and "setup" not in text:
            continue  # no call below can be in it (27 of ~200 files are parsed: 0.7 CPU-s → 0.1)
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            engine_prepare = name == "prepare" and getattr(getattr(node.func, "value", None), "id", "") == "setup"
            if (name == "train_and_evaluate" or engine_prepare) and (
                    any(k.arg == "dataset" for k in node.keywords) or (engine_prepare and len(node.args) > 1)):
                callers.add(str(path.relative_to(ROOT)))
    # packed proxies load their jobs' one [data] once and pass it to each job's preparation (engine.packed.packable
    # refuses jobs that differ in more than experiment.seed): cfg.data, not a set of their own
    assert callers == {"tanplan/engine/loop.py", "tanplan/workflow/final_audit.py", "tanplan/engine/packed.py"}
