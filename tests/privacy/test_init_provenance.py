"""Issue 44: an init from a private run is not free. A run started from the weights of a tanplan run that may
have trained on its data composes that run's releases (and, down the chain, every release they inherited,
each once) into its ε of record, its ledger, its model card and summary.json, and the privacy.total_epsilon
gate refuses it before anything trains; an audit's run is never an init; weights tanplan did not write are
recorded "assumed public"; a `tanplan pretrain` run on public data is recorded public with its digest; a
NaN init is refused with nothing written (tanplan.privacy.init_provenance)."""

import json
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from fakes import use_mnist1d_shaped

from tanplan import cli
from tanplan.config import load_config
from tanplan.engine.release import load_params
from tanplan.errors import UsageError
from tanplan.models.init import digest_of
from tanplan.privacy import init_provenance
from tanplan.privacy.ledger import Inherited, Ledger, Release, epsilon_of_ledgers

# A tiny private mnist1d run (tests/commands/test_bad_input.py's TINY_TOML at ε = 4), RDP of record: every ε
# below is compared to 1e-6 with dp-accounting's RDP accountant, which has no grid. σ given, not calibrated
# (1 to 2 CPU-s a run): ε = 3.9 at B = 256 and 4 steps, the most of any run here, so each run's own ε is within
# privacy.epsilon and any two composed exceed it. By the vmap route: the per-layer route's self-check and
# costing are not what is tested here either.
CONFIG = """
[data]
num_samples = 2000
[model]
name = "mlp"
width = 8
[privacy]
epsilon = 4.0
sigma = 0.82
accountant = "rdp"
[train]
batch_size = 256
steps = 4
eval_every = 4
grad_method = "vmap"
"""


def _train(*args: str) -> int:
    return cli.main([*args, *(["--quiet"] if args[0] != "launch" else [])])  # (launch has no --quiet)


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _independent_epsilon(*runs: Path) -> float:
    """dp-accounting's RDP ε of the runs' DP-SGD releases composed, each from its own summary.json's (q = B/N,
    σ, S), at the last run's δ: no tanplan code in between."""
    acc = RdpAccountant()
    for run in runs:
        s = _json(run / "summary.json")
        q = s["batch_size"] / s["dataset_size"]
        acc.compose(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s["sigma"])),
                                                 s["steps"]))
    return acc.get_epsilon(_json(runs[-1] / "summary.json")["delta"])


@pytest.fixture(scope="module")
def shaped_data():
    """Random signals of mnist1d's shapes: provenance follows the [data] config, not what the signals are
    (generating mnist1d's private and public draws costs about 4 CPU-s a process)."""

    with pytest.MonkeyPatch.context() as patch:
        use_mnist1d_shaped(patch)
        yield


@pytest.fixture(scope="module")
def chain(tmp_path_factory, shaped_data):
    """priv1 (private, from scratch), then ft1 from priv1 (another batch size, within a raised total budget)."""
    root = tmp_path_factory.mktemp("chain")
    (root / "C.toml").write_text(CONFIG)
    c = ["--config", str(root / "C.toml")]
    assert _train("train", *c, "--out", str(root / "priv1")) == 0
    assert _train("train", *c, "--set", f'init.path="{root / "priv1"}"', "--set", "train.batch_size=128", "--set",
                  "privacy.total_epsilon=50", "--out", str(root / "ft1")) == 0
    return root


def test_a_fine_tune_from_a_private_run_is_refused_at_the_default_total_budget(chain, capsys):
    """privacy.total_epsilon defaults to privacy.epsilon: this run's ε alone is within it, composed it is not."""
    out = chain / "ft_refused"
    capsys.readouterr()
    code = _train("train", "--config", str(chain / "C.toml"), "--set", f'init.path="{chain / "priv1"}"', "--out",
                  str(out))
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1 and "composed with its init" in err, err
    assert not out.exists()


def test_the_chain_composes_in_the_fine_tune(chain):
    ledger = _json(chain / "ft1" / "ledger.json")
    want = _independent_epsilon(chain / "priv1", chain / "ft1")
    assert ledger["epsilon"] == pytest.approx(want, rel=1e-6) and ledger["epsilon_rdp"] == pytest.approx(want, rel=1e-6)
    assert ledger["epsilon_this_run"] == pytest.approx(_independent_epsilon(chain / "ft1"), rel=1e-6)
    assert ledger["epsilon_this_run"] <= 4.0 < ledger["epsilon"]  # its own ε within the budget; the record composes
    assert ledger["init"]["kind"] == "composed" and "public" not in ledger


def test_the_launch_from_the_chain_is_refused_at_its_own_epsilon(chain, capsys):
    out = chain / "L_refused"
    capsys.readouterr()
    code = _train("launch", "--config", str(chain / "C.toml"), "--set", f'init.path="{chain / "ft1"}"', "--set",
                  "privacy.total_epsilon=4", "--set", "train.steps=3", "--out", str(out))
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1 and "2 releases of 2 runs" in err, err
    assert not out.exists()


def test_the_launch_records_the_composition_of_all_three_runs(chain, capsys):
    out = chain / "L"
    capsys.readouterr()
    assert _train("launch", "--config", str(chain / "C.toml"), "--set", f'init.path="{chain / "ft1"}"', "--set",
                  "privacy.total_epsilon=50", "--set", "train.steps=3", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    want = _independent_epsilon(chain / "priv1", chain / "ft1", out)
    ledger, summary, card = _json(out / "ledger.json"), _json(out / "summary.json"), _json(out / "model" / "model.json")
    for figure in (ledger["epsilon"], ledger["epsilon_rdp"], summary["epsilon"], summary["epsilon_rdp"], card["epsilon"]):
        assert figure == pytest.approx(want, rel=1e-6)
    own = _independent_epsilon(out)
    assert ledger["epsilon_this_run"] == pytest.approx(own, rel=1e-6) and own < want
    assert summary["init"]["provenance"]["epsilon_this_run"] == pytest.approx(own, rel=1e-6)
    prov = summary["init"]["provenance"]
    assert (prov["kind"], prov["composed_runs"], prov["composed_releases"]) == ("composed", 2, 2)
    assert card["init"]["kind"] == "composed"
    sources = {Path(g["source"]).name for g in ledger["inherited"] if g["composed"]}
    assert sources == {"priv1", "ft1"} and sum(len(g["releases"]) for g in ledger["inherited"]) == 2
    assert f"ε = {want:.2f} composed: this run {own:.2f} and its init" in printed, printed
    launched = _json(out / "launch.json")  # the guarantee composes; the accounting is the launch's own mechanism
    assert launched["epsilon"] == pytest.approx(want, rel=1e-6) and launched["accounting"]["epsilon"] < want


def test_a_ray_launch_over_the_budget_creates_no_folder(chain, capsys):
    """The init's gate runs in the launch stage, before a Ray driver takes its lock in --out (exit 3; the
    address is never dialled: the refusal comes first)."""
    out = chain / "L_ray_refused"
    capsys.readouterr()
    code = _train("launch", "--config", str(chain / "C.toml"), "--set", f'init.path="{chain / "ft1"}"', "--set",
                  "privacy.total_epsilon=4", "--backend", "ray", "--out", str(out))
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1 and "2 releases of 2 runs" in err, err
    assert not out.exists()


def test_released_features_of_a_private_run_on_the_same_data_are_not_free(chain):
    from tanplan.baselines import released

    with pytest.raises(UsageError, match="compose"):
        released.released_features(chain / "priv1", None, np.zeros((2, 40, 1), np.float32))
    cfg = load_config(str(chain / "C.toml"))
    assert len(released.provenance(chain / "ft1", cfg).events()) == 2  # ft1 and priv1, each once
    other = cfg.with_overrides({"data.seed": 7})  # another mnist1d draw: other data, not composed
    assert released.provenance(chain / "ft1", other).kind == "other_data"


def _hand_run(folder: Path, weights: dict, ledger: dict, summary: dict | None = None, config: str | None = None):
    (folder / "model").mkdir(parents=True)
    np.savez(folder / "model" / "params.npz", **weights)
    (folder / "ledger.json").write_text(json.dumps(ledger))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    if config is not None:
        (folder / "config.toml").write_text(config)


def test_an_audit_run_is_never_an_init(chain, tmp_path, capsys):
    weights = load_params(chain / "priv1" / "model")
    ledger = _json(chain / "priv1" / "ledger.json")
    _hand_run(tmp_path / "audit", weights, ledger, {**_json(chain / "priv1" / "summary.json"), "audit_canaries": 16,
                                                    "private_release": False})
    out = tmp_path / "ft"
    capsys.readouterr()
    code = _train("train", "--config", str(chain / "C.toml"), "--set", f'init.path="{tmp_path / "audit"}"', "--set",
                  "privacy.total_epsilon=50", "--out", str(out))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "an audit's run is never an init" in err, err
    assert not out.exists()


def test_a_foreign_npz_is_recorded_assumed_public(chain, tmp_path):
    foreign = tmp_path / "weights" / "w.npz"
    foreign.parent.mkdir()
    rng = np.random.default_rng(0)
    np.savez(foreign, **{k: rng.normal(size=v.shape).astype(np.float32) * 0.1
                         for k, v in load_params(chain / "priv1" / "model").items()})
    out = tmp_path / "ft"
    assert _train("train", "--config", str(chain / "C.toml"), "--set", f'init.path="{foreign}"', "--set",
                  "train.steps=2", "--set", "train.eval_every=2", "--out", str(out)) == 0
    ledger, card = _json(out / "ledger.json"), _json(out / "model" / "model.json")
    assert ledger["public"]["init"]["provenance"] == "assumed public, not produced by tanplan"
    assert ledger["init"]["kind"] == card["init"]["kind"] == "assumed_public"
    assert "inherited" not in ledger and "epsilon_this_run" not in ledger
    assert ledger["epsilon"] == pytest.approx(_independent_epsilon(out), rel=1e-6)


def test_a_pretrain_run_on_public_data_is_recorded_public_with_its_digest(chain, tmp_path):
    pre, out = tmp_path / "pre", tmp_path / "ft"
    c = ["--config", str(chain / "C.toml"), "--set", "train.steps=2", "--set", "train.eval_every=2"]
    assert _train("pretrain", *c, "--out", str(pre)) == 0  # mnist1d's public draw (data.seed + 1), no privacy
    assert _train("train", *c, "--set", f'init.path="{pre}"', "--out", str(out)) == 0
    ledger = _json(out / "ledger.json")
    assert ledger["public"]["init"]["digest"] == digest_of(load_params(pre / "model"))
    assert ledger["init"]["kind"] == "public" and ledger["private"] is True
    assert [g["composed"] for g in ledger["inherited"]] == [False]  # recorded, its σ = 0 releases not composed
    assert ledger["epsilon"] == pytest.approx(_independent_epsilon(out), rel=1e-6)


def test_a_nan_init_is_refused_with_nothing_written(chain, tmp_path, capsys):
    weights = load_params(chain / "priv1" / "model")
    weights["Dense_0/kernel"] = weights["Dense_0/kernel"] * np.nan
    np.savez(tmp_path / "nan.npz", **weights)
    out = tmp_path / "ft"
    capsys.readouterr()
    code = _train("train", "--config", str(chain / "C.toml"), "--set", f'init.path="{tmp_path / "nan.npz"}"',
                  "--out", str(out))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "NaN or infinite values in Dense_0/kernel" in err, err
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------
# The data rule and the chain, without training


def _npz_config(path: Path) -> str:
    return f'[data]\ndataset = "npz"\npath = "{path}"\n'


@pytest.mark.parametrize("theirs, mine, shares", [
    ({"dataset": "mnist1d", "seed": 0}, {"dataset": "mnist1d", "seed": 0}, True),
    ({"dataset": "mnist1d", "seed": 1}, {"dataset": "mnist1d", "seed": 0}, False),  # tanplan's public draw
    ({"dataset": "mnist5k"}, {"dataset": "mnist5k"}, True),  # its seed picks a split of the same digits
    ({"dataset": "mnist5k"}, {"dataset": "mnist1d", "seed": 0}, False),
    (None, {"dataset": "mnist1d", "seed": 0}, True),  # unknown: composed
    ({"dataset": "npz", "path": "/no/such/file.npz"}, {"dataset": "npz", "path": "/other.npz"}, True),  # unreadable
    ({"dataset": "pkg.mod:load", "options": {"split": "a"}}, {"dataset": "pkg.mod:load", "options": {"split": "b"}},
     False),
])
def test_the_data_rule(theirs, mine, shares):
    assert init_provenance.may_share(theirs, mine) is shares


def test_a_private_run_on_other_data_is_recorded_not_composed_and_a_byte_copy_composes(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, x=np.zeros(3))
    np.savez(b, x=np.ones(3))
    ledger = Ledger([Release(0, 5, 0.1, 1.0, 1e-5, 1)], delta=1e-5).to_dict()
    _hand_run(tmp_path / "run", {"w": np.zeros(2)}, {**ledger, "epsilon": 3.5}, {"epsilon": 3.5}, _npz_config(a))
    prov = init_provenance.of_path(tmp_path / "run", init_provenance.data_identity(load_config(None, [
        "data.dataset=npz", f'data.path="{b}"']).data))
    assert (prov.kind, prov.events(), prov.note) == ("other_data", [], "trained privately on other data (ε 3.5 "
                                                     "there), not composed")
    (tmp_path / "copy.npz").write_bytes(a.read_bytes())
    prov = init_provenance.of_path(tmp_path / "run", {"dataset": "npz", "path": str(tmp_path / "copy.npz")})
    assert prov.kind == "composed" and len(prov.events()) == 1


def test_a_release_inherited_twice_is_composed_once():
    """Two runs from the same private init (a sweep's trials): composing their ledgers counts the init's
    release once, as the TotalPlan of a workflow does."""
    from tanplan.workflow.total_budget import Planned, TotalPlan

    init = Inherited("runs/priv1", [Release(0, 40, 0.05, 1.0, 1e-5, 1, started_at=7.0)], True)
    trials = [Ledger([Release(0, 20, 0.02, 0.8, 1e-5, 1, started_at=float(i))], delta=1e-5, inherited=[init])
              for i in range(2)]
    once = [r.event() for ledger in trials for r in ledger.releases] + [init.releases[0].event()]
    from tanplan.privacy.accounting import epsilon_of_events

    assert epsilon_of_ledgers(trials, 1e-5) == pytest.approx(epsilon_of_events(once, 1e-5, "rdp"), rel=1e-9)
    total = TotalPlan(parts=(Planned(what="the launch", runs=1, events=()),), delta=1e-5, accountant="rdp",
                      spent=tuple(trials), inherited=(init,))
    assert len(total.events()) == 3 and total.runs == 2 + 1 + 1


def test_every_workflow_gate_adds_the_init(chain):
    """`run`, `sweep`, `fit`, `optimize` and `launch --best` check their total with total_budget.check: the
    launch alone is within privacy.epsilon, composed with ft1's chain it is not."""
    from tanplan.errors import BudgetExceeded
    from tanplan.workflow import total_budget
    from tanplan.workflow.members import Members

    cfg = load_config(str(chain / "C.toml"), [f'init.path="{chain / "ft1"}"'])
    n = _json(chain / "ft1" / "summary.json")["dataset_size"]

    def gate(c):  # a stage's check: the target resolved once, then its parts
        target = Members.of(c).target_plan(n)
        return total_budget.check(total_budget.of_target(target, [total_budget.launch_part(target)]), c)

    with pytest.raises(BudgetExceeded, match="the 2 runs \\[init\\]'s weights descend from and the launch"):
        gate(cfg)
    wider = cfg.with_overrides({"privacy.total_epsilon": 50.0})
    planned = gate(wider)
    assert planned.epsilon_total_planned_runs == 3 and planned.epsilon_total_planned > 4.0
