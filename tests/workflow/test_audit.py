"""`tanplan audit`: the statistics on simulated canaries, then the command end to end on a tiny run, intact (the
bound stays below the ε the run claims) and with its noise divided by 4 (a violation: exit 5). The broken
mechanism is injected here only, by patching the engine's noise function for the test."""

import functools
import json
import math

import numpy as np
import pytest
from helpers import CONFIG, ROOT, fast_norm, no_figure

from tanplan.privacy import accounting
from tanplan.workflow import audit


def _simulated_scores(q, sigma, steps, count, noise_scale, rng):
    """Ideal DP-SGD canaries: x_tj = 1[held in and sampled] + N(0, (noise_scale·σ)²); their audit scores."""
    held_in = rng.random(count) < 0.5
    joined = held_in & (rng.random((steps, count)) < q)
    x = joined + noise_scale * sigma * rng.standard_normal((steps, count))
    scores = audit.likelihood_ratio_scores(x, q, sigma)
    return scores[held_in], scores[~held_in]


def test_the_score_is_the_log_likelihood_ratio_and_the_linear_sum_at_large_sigma():
    x = np.array([[0.3, -1.0], [2.0, 0.5]])
    q, sigma = 0.2, 0.7
    expected = np.log(1 - q + q * np.exp((x - 0.5) / sigma**2)).sum(axis=0)
    assert np.allclose(audit.likelihood_ratio_scores(x, q, sigma), expected)
    wide = np.random.default_rng(0).normal(0, 30, size=(50, 200))
    scores = audit.likelihood_ratio_scores(wide, 0.3, 30.0)
    assert np.corrcoef(scores, wide.sum(axis=0))[0, 1] > 0.999  # TAN regime: the inner product with the sum


def test_the_bound_stays_below_an_exact_claim_and_exceeds_it_when_the_noise_is_quartered():
    q, steps, delta = 0.04, 100, 1e-5
    sigma = 1.8
    claim = accounting.epsilon(q, sigma, steps, delta, "rdp")
    rng = np.random.default_rng(0)
    intact = audit.one_run_bound(*_simulated_scores(q, sigma, steps, 3000, 1.0, rng), delta, 0.95)
    broken = audit.one_run_bound(*_simulated_scores(q, sigma, steps, 3000, 0.25, rng), delta, 0.95)
    assert intact.epsilon < 0.5 * claim < 1.2 * claim < broken.epsilon, (intact, claim, broken)
    assert broken.correct <= broken.guesses


def test_no_signal_gives_no_bound_and_the_claim_is_the_smallest_stated():
    rng = np.random.default_rng(1)
    assert audit.one_run_bound(rng.normal(size=400), rng.normal(size=400), 1e-5, 0.95).epsilon < 0.3
    claim = audit.Claim(epsilon_rdp=1.2, epsilon_pld=1.0, epsilon_replace_one=None, accountant="rdp", delta=1e-5)
    assert claim.add_remove == (1.0, "pld")
    proxy = audit.Claim(epsilon_rdp=9.0, epsilon_pld=None, epsilon_replace_one=None, accountant="rdp", delta=1e-5)
    assert proxy.add_remove == (9.0, "rdp")


# ---------------------------------------------------------------- the command, end to end

# 50 steps (100 before: 1.5 CPU-s more per run): the claim is then ε = 0.72 (see `audits` for the bounds). Ghost
# clipping: the same clipped sums as vmap's per-example gradients (the same bounds, guesses and verdicts at COINS,
# to the digit), ~1 CPU-s less per run.
TINY_AUDIT = ["data.num_samples=2000", "model.name=mlp", "model.width=64", "model.depth=1", "train.batch_size=64",
              "train.steps=50", "privacy.sigma=1.8", "privacy.delta=1e-5", "train.eval_every=50",
              "train.grad_method=ghost", "train.ema_decay=0", "privacy.noise_seed=11"]
CANARIES = "3000"  # the MLP has 3274 parameters
COINS = 7  # the canaries' fixed coins in this test (see `audits`)



def _audit(out):
    """(exit code, stdout, stderr, audit.json) of `tanplan audit` on the tiny run, in this process."""
    import contextlib
    import io

    from tanplan.cli import main

    argv = ["audit", "--config", CONFIG, *sum([["--set", s] for s in TINY_AUDIT], []), "--canaries", CANARIES,
            "--out", str(out), "--quiet"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return code, stdout.getvalue(), stderr.getvalue(), json.loads((out / "audit.json").read_text())



@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    """The same tiny audit twice: with the engine's mechanism, and with its noise divided by 4."""
    from tanplan.dp import noise
    from tanplan.dp.secret import RunSecret
    from tanplan.reports import audit as reports
    from tanplan.workflow import audit_stats

    root = tmp_path_factory.mktemp("audit")
    original = noise.add_gaussian_noise
    with pytest.MonkeyPatch.context() as patch:
        fast_norm(patch)  # the same bounds, 12 of them a second each before (helpers._Norm)
        # jax-privacy's bound on counts is a pure function of six numbers, and both runs plan the same guesses and
        # ceilings for the same public (q, σ, S, M): the broken run reads the intact run's values instead of
        # computing them again.
        patch.setattr(audit_stats, "_epsilon", functools.cache(audit_stats._epsilon))
        # The canaries' coins are drawn fresh from OS entropy by the product; fixed here, so that which canaries
        # the seeded batches sample is the same in every run of this test (the broken run's bound over the claim
        # is 1.24-2.29× over 9 random coin draws measured, 1.53× at COINS; the intact run's 0.02-0.58×, 0.07×
        # at COINS; a rare draw falls on the wrong side).
        patch.setattr(RunSecret, "fresh", classmethod(lambda cls: RunSecret.from_noise_seed(COINS)))
        intact = _audit(root / "intact")
        # the deliberately broken mechanism: a quarter of the noise
        patch.setattr(noise, "add_gaussian_noise", lambda grads, key, std: original(grads, key, std / 4))
        patch.setattr(reports, "figure_scores", no_figure)  # no test reads the broken run's figure
        broken = _audit(root / "broken")
    return {"intact": intact, "broken": broken, "root": root}


def test_the_intact_mechanism_is_consistent_with_its_claim(audits):
    code, stdout, stderr, result = audits["intact"]
    assert code == 0, stderr[-2000:]
    assert result["verdict"] == "consistent" and "verdict" in stdout and "consistent" in stdout
    assert result["lower_bound"] < result["claimed_epsilon"] and result["ratio"] < 1
    claim = result["claim"]
    assert result["claimed_epsilon"] == min(claim["epsilon_rdp"], claim["epsilon_pld"])
    assert math.isclose(claim["epsilon_pld"], accounting.epsilon(64 / 1600, 1.8, 50, 1e-5, "pld"), rel_tol=1e-6)
    assert result["canaries"] == 3000 and result["held_in"] + result["held_out"] == 3000
    for name in ("audit.json", "audit.md", "canary_scores.png", "canary_scores.npz"):
        assert (audits["root"] / "intact" / name).is_file()


def test_the_broken_mechanism_is_a_violation_with_exit_5(audits):
    code, stdout, stderr, result = audits["broken"]
    assert code == 5, stderr[-2000:]
    assert result["verdict"] == "violation" and result["lower_bound"] > result["claimed_epsilon"]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("tanplan: error: privacy violation:") and "exceeds" in last
    # the claim is the same as the intact run's: only the noise that ran changed, not what was accounted
    assert result["claim"] == audits["intact"][3]["claim"]


def test_the_audited_run_says_it_is_not_a_private_release(audits):
    run = audits["root"] / "intact" / audit.RUN_FOLDER
    summary = json.loads((run / "summary.json").read_text())
    card = json.loads((run / "model" / "model.json").read_text())
    assert summary["audit_canaries"] == card["audit_canaries"] == 3000
    assert summary["private_release"] is False and card["private_release"] is False


def test_only_the_audit_can_put_canaries_in_a_run():
    """No config key reaches the canaries, and the only callers that pass `canaries` to the engine are the loop
    (to its own build) and the audit's workflow: `train`, `launch`, `sweep`, `fit` and `run` never do."""
    import ast

    from tanplan.config import load_config
    from tanplan.errors import UsageError

    with pytest.raises(UsageError):
        load_config(None, ["audit.canaries=5"])
    with pytest.raises(UsageError):
        load_config(None, ["train.canaries=5"])
    callers = set()
    for path in (ROOT / "tanplan").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "train_and_evaluate" not in text and "setup" not in text:
            continue  # no call below can be in it (27 of ~200 files are parsed: 0.7 CPU-s → 0.1)
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = getattr(func, "attr", getattr(func, "id", ""))
            engine_build = name == "build" and getattr(getattr(func, "value", None), "id", "") == "setup"
            if (name == "train_and_evaluate" or engine_build) and (len(node.args) > 2 or any(
                    k.arg in ("canaries", "hooks", "wrap") for k in node.keywords)):
                callers.add(str(path.relative_to(ROOT)))
    assert callers == {"tanplan/engine/loop.py", "tanplan/workflow/audit.py"}


def test_the_canary_room_check_gives_a_plugged_in_factory_its_input_shape(tmp_path, monkeypatch):
    """A factory that needs the data's input shape (nnx-style `in_features`) is built with it by the audit's
    pre-flight check too, as by training: the check counts its parameters instead of failing."""
    (tmp_path / "shaped_nets.py").write_text(
        "import flax.linen as nn\n\n"
        "class Head(nn.Module):\n    classes: int\n\n    @nn.compact\n"
        "    def __call__(self, x):\n        return nn.Dense(self.classes)(x.reshape((x.shape[0], -1)))\n\n"
        "def make(num_classes, input_shape):\n"
        "    assert input_shape is not None, 'the factory needs the input shape'\n"
        "    return Head(num_classes)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from tanplan.config import load_config

    # 2000 examples: the set the audits above (and the suite) already generated; the input shape is the same
    cfg = load_config(CONFIG, ["model.name=shaped_nets:make", "data.num_samples=2000"])
    audit.check_canary_room(cfg, 10)  # 40·10 + 10 parameters: room for 10 canaries
    with pytest.raises(audit.UsageError, match="at most its 410 parameters"):
        audit.check_canary_room(cfg, 411)
