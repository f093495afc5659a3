"""`tanplan run --routes` and `--launch-best-route` refuse bad input (issue 47, item 1) with exit 2 and one line on
stderr starting with "tanplan:", no traceback, nothing on stdout, no data loaded and nothing written: an unknown,
repeated or empty route, --launch-best-route without --routes, a route that needs pretrained weights without
them, private tuning data (every route's proxies would spend the private budget), options that mean nothing
there. No case loads data or trains."""

import pytest
from helpers import ROOT

import tanplan.data
from tanplan import cli

CONFIG = str(ROOT / "experiments" / "mnist1d_finetune.toml")
INIT = ["--set", 'init.path="nowhere/pre"']

CASES = [
    (["--routes", "scratch,nope"], "route 'nope' is not known: use scratch, finetune, adapters, heads"),
    (["--routes", "scratch,finetune,scratch", *INIT], "route 'scratch' is named twice"),
    (["--routes", ""], "name routes among scratch, finetune, adapters, heads"),
    (["--routes", "scratch,,heads"], "name routes among"),
    (["--launch-best-route"], "--launch-best-route is not allowed without --routes"),
    (["--launch-best-route", "--dry-run"], "--launch-best-route is not allowed without --routes"),
    (["--routes", "scratch,finetune"], "route 'finetune' needs pretrained weights: set init.path or init.loader"),
    (["--routes", "adapters", "--launch-best-route"], "route 'adapters' needs pretrained weights"),
    (["--routes", "heads", "--dry-run", "--no-probe"], "route 'heads' needs pretrained weights"),
    (["--routes", "scratch", "--tune-data", "private"], "--routes is not allowed with tuning.data = \"private\""),
    (["--routes", "scratch", "--set", "tuning.data=private", "--dry-run"], "every route's proxies would train"),
    (["--routes", "scratch,heads", *INIT, "--set", "privacy.neighbouring=replace_one"], "route 'heads' is not allowed"),
    (["--routes", "scratch", "--launch-anyway"], "--launch-anyway is not allowed with --routes"),
    (["--routes", "scratch", "--baselines"], "--baselines is not allowed with --routes"),
]


def _no_data(*args, **kwargs):
    raise AssertionError("data was loaded before the command had checked its input")


@pytest.mark.parametrize("extra, fragment", CASES, ids=[f"case-{i}" for i in range(len(CASES))])
def test_bad_routes_input_is_one_line_and_nothing_is_written(tmp_path, monkeypatch, capsys, extra, fragment):
    monkeypatch.setattr(tanplan.data, "load_dataset", _no_data)
    code = cli.main(["run", "--config", CONFIG, "--out", str(tmp_path / "out"), *extra])
    out, err = capsys.readouterr()
    assert (code, err.count("\n"), err.startswith("tanplan:")) == (2, 1, True), err
    assert fragment in err and "Traceback" not in err and out == "", err
    assert list(tmp_path.iterdir()) == []  # nothing written
