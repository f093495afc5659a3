"""`tanplan pretrain`: the config's model trained without privacy on its public data (mnist1d's independent
draw, offline), into a folder that [init] path reads; no public data is refused (exit 2, nothing written)."""

import json

import pytest
from fakes import use_mnist1d_shaped
from helpers import run_cli

from tanplan.config import load_config
from tanplan.engine.release import load_params
from tanplan.models.init import digest_of

# By the vmap route: the per-layer route's self-check and costing are not what is tested here.
SMALL = ["data.num_samples=1500", "train.batch_size=128", "train.steps=4", "train.eval_every=4", "model.width=8",
         "model.depth=1", "model.name=mlp", "train.physical_batch_size=128", "privacy.epsilon=4",
         "train.grad_method=vmap"]


@pytest.fixture(autouse=True)
def shaped_data(monkeypatch):
    """Random signals of mnist1d's shapes: no test here reads what they are, only which draw (data.seed) each
    run trained on (generating mnist1d's private and public draws costs about 4 CPU-s a process)."""

    use_mnist1d_shaped(monkeypatch)


def _sets(*extra):
    return sum([["--set", s] for s in (*SMALL, *extra)], [])


def test_pretrain_on_the_public_draw_then_fine_tune_from_it(tmp_path, capsys):
    pre = tmp_path / "pre"
    code, out, err = run_cli(capsys, "pretrain", "--out", str(pre), "--json", "--quiet", *_sets())
    assert code == 0, err
    summary = json.loads(out)
    assert summary["private"] is False and summary["epsilon"] is None and summary["sigma"] == 0
    written = load_config(pre / "config.toml")
    assert written.data.seed == 1 and written.privacy.private is False  # mnist1d's public draw: data.seed + 1
    weights = load_params(pre / "model")
    ft = tmp_path / "ft"
    code, out, err = run_cli(capsys, "train", "--out", str(ft), "--json", "--quiet",
                             *_sets(f'init.path="{pre}"', 'init.frozen=["Dense_0"]'))
    assert code == 0, err
    tuned = json.loads(out)
    assert tuned["private"] is True and tuned["init"]["digest"] == digest_of(weights)
    assert (load_params(ft / "model")["Dense_0/kernel"] == weights["Dense_0/kernel"]).all()


@pytest.mark.parametrize("extra, words", [
    (["tuning.data=private"], "public data"),
    (["data.dataset=npz", "data.path=/nonexistent.npz"], "tuning.path"),
])
def test_no_public_data_is_refused_before_anything_is_written(tmp_path, capsys, extra, words):
    code, _, err = run_cli(capsys, "pretrain", "--out", str(tmp_path / "pre"), "--quiet", *_sets(*extra))
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "pre").exists()
