"""A run from initial weights ([init]) with frozen parameters, end to end on the tiny .npz: the frozen
parameters come out bit for bit, the trainable ones move, the init's digest is in summary.json, the
ledger (with its provenance: a private run on the same data, composed) and the run's identity; bad
[init] input is one line, exit 2, nothing written."""

import json

import numpy as np
import pytest
from helpers import tiny_overrides

from tanplan import cli
from tanplan import data as datasets
from tanplan.config import load_config
from tanplan.engine.loop import train_and_evaluate
from tanplan.engine.release import load_params
from tanplan.engine.run_identity import run_identity
from tanplan.engine.setup import prepare
from tanplan.job import job_of
from tanplan.models.init import digest_of
from tanplan.outcomes.run_summary import RunSummary

# The route is not what these tests check: vmap skips the per-layer route's self-check and cost count.
VMAP = "train.grad_method=vmap"


@pytest.fixture(scope="module")
def pretrained(tiny_npz, tmp_path_factory):
    """A released model: the run folder a fine-tuning run starts from."""
    out = tmp_path_factory.mktemp("pre") / "run"
    train_and_evaluate(job_of(load_config(None, tiny_overrides(tiny_npz, VMAP))), out, progress=False)
    return out


def test_fine_tuning_from_a_run_folder_with_the_first_layer_frozen(tiny_npz, pretrained, tmp_path):
    # the run folder trained privately on the same data: its release composes (issue 44), within this budget
    cfg = load_config(None, tiny_overrides(tiny_npz, f'init.path="{pretrained}"', 'init.frozen=["Dense_0"]',
                                           "privacy.total_epsilon=20", VMAP))
    summary = train_and_evaluate(job_of(cfg), tmp_path / "ft", progress=False)
    before, after = load_params(pretrained / "model"), load_params(tmp_path / "ft" / "model")
    assert set(before) == set(after) == {"Dense_0/kernel", "Dense_0/bias", "Dense_1/kernel", "Dense_1/bias"}
    for key in before:
        if key.startswith("Dense_0/"):
            assert np.array_equal(before[key], after[key]), key  # frozen: bit for bit
        else:
            assert not np.array_equal(before[key], after[key]), key  # trained
    digest = digest_of(before)
    assert summary.init.digest == digest and summary.init.source == str(pretrained)
    assert summary.init.frozen_parameters == before["Dense_0/kernel"].size + before["Dense_0/bias"].size
    assert summary.init.trainable_parameters == before["Dense_1/kernel"].size + before["Dense_1/bias"].size
    written = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert RunSummary.from_dict(written) == summary
    ledger = json.loads((tmp_path / "ft" / "ledger.json").read_text())
    assert ledger["init"]["digest"] == digest and ledger["init"]["kind"] == "composed" and "public" not in ledger
    # an older summary.json (no "init") still reads back
    assert RunSummary.from_dict({k: v for k, v in written.items() if k != "init"}).init is None
    assert "init" not in json.loads((pretrained / "summary.json").read_text())


def test_the_init_digest_binds_the_run_identity(tiny_npz, pretrained):
    cfg = load_config(None, tiny_overrides(tiny_npz, f'init.path="{pretrained}"', "privacy.total_epsilon=20", VMAP))
    p = prepare(job_of(cfg))
    ident = run_identity(job_of(cfg), p.plan, p.dataset, p.params, p.init.digest)
    assert ident["init.digest"] == p.init.digest
    assert run_identity(job_of(cfg), p.plan, p.dataset, p.params, "0" * 32) != ident


def test_a_shape_mismatch_is_one_line_and_nothing_is_written(tiny_npz, pretrained, tmp_path, capsys):
    out = tmp_path / "bad"
    args = ["train", "--out", str(out), "--quiet"] + sum(
        [["--set", s] for s in tiny_overrides(tiny_npz, f'init.path="{pretrained}"', "model.width=16")], [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "Dense_0/bias" in err and "(8,)" in err and "(16,)" in err
    assert not out.exists()


@pytest.mark.parametrize("sets, words", [
    (['init.path="/nonexistent/weights.npz"'], "does not exist"),
    (["init.frozen_blocks=1"], "frozen_blocks"),
    (['init.frozen=["Dense_0", "Dense_1"]', 'init.path=""'], "nothing would train"),
    (['init.frozen=["Conv_9"]'], "names no parameter"),
])
def test_bad_init_is_refused_before_training(tiny_npz, tmp_path, capsys, monkeypatch, sets, words):
    if "does not exist" in words or "frozen_blocks" in words:  # refused before any data is read
        monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("data loaded"))
    out = tmp_path / "bad"
    args = ["train", "--out", str(out), "--quiet"] + sum([["--set", s] for s in tiny_overrides(tiny_npz, *sets)], [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err
    assert not out.exists()
