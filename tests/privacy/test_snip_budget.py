"""DP-SNIP accounting: the run's ε is the accountant's composition of the SNIP release and the training."""

import pytest

from tanplan.privacy import snip_budget as prune_accounting
from tanplan.config import load_config
from tanplan.errors import UsageError
from tanplan.job import job_of


def _independent_composed_epsilon(q, sigma, steps, delta, sigma_snip, accountant="rdp"):
    """Built straight from dp_accounting, not through tanplan's helpers."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    snip = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma_snip))
    train = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    acc = rdp_privacy_accountant.RdpAccountant() if accountant == "rdp" else pld_privacy_accountant.PLDAccountant()
    return acc.compose(dp_accounting.ComposedDpEvent([snip, train])).get_epsilon(delta)


@pytest.mark.parametrize("accountant", ["rdp", pytest.param("pld", marks=pytest.mark.slow)])
def test_split_budget_meets_the_target_through_the_composition(accountant):
    q, steps, eps, delta = 0.05, 100, 4.0, 1e-5
    budget = prune_accounting.split_budget(q, steps, eps, delta, 0.2, accountant)
    composed = _independent_composed_epsilon(q, budget.sigma_train, steps, delta, budget.sigma_snip, accountant)
    assert eps * 0.99 <= composed <= eps
    snip_alone = prune_accounting.composed_epsilon(q, 1.0, 0, delta, budget.sigma_snip, accountant)
    assert snip_alone <= 0.2 * eps and snip_alone >= 0.2 * eps * 0.99
    # composing is cheaper than splitting ε additively: training gets more than (1 - share)·ε's sigma allows
    from tanplan.privacy import accounting
    assert budget.sigma_train <= accounting.calibrate_sigma(q, steps, 0.8 * eps, delta, accountant)


def test_dp_snip_run_reports_the_composed_epsilon():
    """What train reports (resolve_plan + RunPlan.epsilon, the functions behind summary.json)."""
    from tanplan.privacy.run_plan import resolve_plan

    n = 20000
    cfg = load_config(None, ["train.prune_method=dp_snip", "train.prune_rate=0.5", "train.snip_budget_share=0.1",
                             "train.batch_size=1000", "train.proxy_batch_size=250", "train.steps=50",
                             "privacy.epsilon=3", "privacy.accountant=rdp"])
    run = resolve_plan(cfg, n)
    assert run.snip_sigma > 0 and run.target is not None
    # the target (B = 1000) meets ε = 3 through the composition
    target_sigma_snip = run.snip_sigma * 1000 / 250
    target_eps = _independent_composed_epsilon(1000 / n, run.target.sigma, 50, n ** -1.1, target_sigma_snip)
    assert 3 * 0.99 <= target_eps <= 3
    # the proxy run's reported ε is the composition at the proxy's (q, σ, σ_snip)
    for steps in (1, 50):
        assert run.epsilon("rdp", steps) == pytest.approx(
            _independent_composed_epsilon(run.q, run.sigma, steps, n ** -1.1, run.snip_sigma), rel=1e-9)


def test_data_free_pruning_adds_no_privacy_event():
    from tanplan.privacy.run_plan import resolve_plan

    cfg = load_config(None, ["train.prune_method=synflow", "train.prune_rate=0.5", "train.grad_drop_method=magnitude",
                             "train.grad_drop_rate=0.5", "train.batch_size=1000", "train.steps=50"])
    plain = load_config(None, ["train.batch_size=1000", "train.steps=50"])
    assert resolve_plan(cfg, 20000) == resolve_plan(plain, 20000)


@pytest.mark.parametrize("override", ["train.prune_rate=0.95", "train.grad_drop_rate=-0.1", "train.prune_method=snip",
                                      "train.grad_drop_method=topk", "train.snip_budget_share=1.0"])
def test_out_of_range_options_are_usage_errors(override):
    with pytest.raises(UsageError):
        load_config(None, [override])


def test_ghost_route_is_refused_with_masks():
    with pytest.raises(UsageError, match="ghost"):  # at load time, before any data is read
        load_config(None, ["train.grad_method=ghost", "train.grad_drop_method=random", "train.grad_drop_rate=0.3",
                           "train.batch_size=1000"])


@pytest.mark.slow
def test_dp_snip_training_run_summary_epsilon_is_the_composition(tmp_path):
    """A whole (tiny) DP-SNIP run: pruned weights are 0 and its summary ε is the composed one."""
    import json

    from tanplan.engine.loop import train_and_evaluate

    cfg = load_config(None, ["data.num_samples=2000", "model.name=mlp", "model.width=16", "train.batch_size=200",
                             "train.steps=3", "train.eval_every=3", "train.physical_batch_size=256",
                             "train.prune_method=dp_snip", "train.prune_rate=0.5", "train.grad_drop_method=magnitude",
                             "train.grad_drop_rate=0.3", "privacy.epsilon=2"])
    s = train_and_evaluate(job_of(cfg), tmp_path, progress=False)
    n = s.dataset_size
    assert s.snip_sigma > 0 and 0.45 < s.pruning.kept_fraction < 0.6
    assert s.epsilon_rdp == pytest.approx(
        _independent_composed_epsilon(s.batch_size / n, s.sigma, 3, s.delta, s.snip_sigma), rel=1e-9)
    assert 2 * 0.99 <= s.epsilon_pld <= 2 < s.epsilon_rdp  # calibrated by PLD, the accountant of record
    assert json.loads((tmp_path / "summary.json").read_text())["epsilon_rdp"] == s.epsilon_rdp
