"""`tanplan audit --canary-kind input`: crafted examples clipped with the batch see a break INSIDE clipping, which
gradient canaries (added after it) cannot. The same tiny run twice: intact (the bound stays below the claim) and
with every example clipped to 10 C while the noise and the accountant assume C (a violation: exit 5). The break
is injected here only, by patching the route's clipped sum for the test."""

import dataclasses
import functools
import json

import pytest
from helpers import CONFIG, fast_norm, no_figure

# Width 16 (64 before): each step reads every canary's clipped gradient, ~3 CPU-s a run instead of ~6, with the
# same power (below).
TINY_INPUT = ["data.num_samples=2000", "model.name=mlp", "model.width=16", "model.depth=1", "train.batch_size=64",
              "train.steps=50", "privacy.sigma=1.8", "privacy.delta=1e-5", "train.eval_every=50",
              "train.grad_method=vmap", "train.ema_decay=0", "privacy.noise_seed=11"]
CANARIES = "300"
# Clipping at 10 C: bound 1.15-2.40 against a claim of 0.72 over 8 measured audits (intact: 0.00-0.16). The coins
# are fresh (OS entropy), so each outcome is random: the planned guesses are 18 in and 18 out, and the bound exceeds
# the claim from 30 right. Right guesses measured: broken 33.75 of 36 (width 64: 33.4), intact 19.6 (18.8), so
# P(intact ≥ 30 right), the false alarm, ≈ 3e-4 (Binomial(36, 0.54); 1e-4 at width 64), and P(broken ≤ 29), the
# miss, ≈ 0.6% (Binomial(36, 0.94); 1.3% at width 64), less where guessing every canary still exceeds the claim.
# 21 later intact audits (2026-11-29) averaged 22.6 right (at most 28): at that rate the false alarm is ≈ 0.6%
# (Binomial(36, 0.63)); more canaries would lower both rates, at more CPU-s.
BREAK = 10



def _audit(out):
    """(exit code, stderr, audit.json) of `tanplan audit --canary-kind input` on the tiny run, in this process."""
    import contextlib
    import io

    from tanplan.cli import main

    argv = ["audit", "--config", CONFIG, *sum([["--set", s] for s in TINY_INPUT], []), "--canaries", CANARIES,
            "--canary-kind", "input", "--out", str(out), "--quiet"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return code, stderr.getvalue(), json.loads((out / "audit.json").read_text())



@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    """The tiny input-space audit with the engine's clipping, and with every example clipped to BREAK·C."""
    from tanplan.engine import routes
    from tanplan.reports import audit as reports
    from tanplan.workflow import audit_stats

    root = tmp_path_factory.mktemp("audit_input")
    original = routes.grad_sum_of

    def broken_clipping(job, *args):  # the sum's sensitivity is BREAK·C; the noise still σ·C
        privacy = dataclasses.replace(job.privacy, clip_norm=BREAK * job.privacy.clip_norm)
        return original(dataclasses.replace(job, privacy=privacy), *args)

    with pytest.MonkeyPatch.context() as patch:
        fast_norm(patch)  # the same bounds, faster (helpers._Norm)
        # jax-privacy's bound on counts, a pure function of six numbers: both runs plan the same guesses and
        # ceilings for the same public (q, σ, S, M), and the broken run reads the intact run's values
        patch.setattr(audit_stats, "_epsilon", functools.cache(audit_stats._epsilon))
        intact = _audit(root / "intact")
        patch.setattr(routes, "grad_sum_of", broken_clipping)
        patch.setattr(reports, "figure_scores", no_figure)  # no test reads the broken run's figure
        broken = _audit(root / "broken")
    return {"intact": intact, "broken": broken}


def test_the_intact_clipping_is_consistent_with_its_claim(audits):
    code, stderr, result = audits["intact"]
    assert code == 0, stderr[-2000:]
    assert result["verdict"] == "consistent" and result["lower_bound"] < result["claimed_epsilon"]
    assert result["canary_kind"] == "input" and result["canary_coordinates"] is None
    assert result["canaries"] == 300 and result["held_in"] + result["held_out"] == 300
    assert result["lower_bound"] < result["ceiling"] and result["fdp_estimate"] < result["fdp_ceiling"]


def test_a_clipping_bound_above_c_is_a_violation_with_exit_5(audits):
    code, stderr, result = audits["broken"]
    assert code == 5, stderr[-2000:]
    assert result["verdict"] == "violation" and result["lower_bound"] > result["claimed_epsilon"]
    assert stderr.strip().splitlines()[-1].startswith("tanplan: error: privacy violation:")
    # what was accounted is the intact run's: only the clipping that ran changed
    assert result["claim"] == audits["intact"][2]["claim"]
