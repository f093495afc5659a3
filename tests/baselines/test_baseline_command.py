"""`tanplan baseline` end to end on small synthetic features, and its one-line errors (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tanplan.baselines.data import (feature_set, imbalanced, load_features, long_tail_counts, minority_accuracy,
                                    minority_classes)
from tanplan.cli import main
from tanplan.errors import UsageError

REQUIRED = {"method", "accuracy", "balanced_accuracy", "minority_accuracy", "epsilon", "delta", "wall_seconds"}


@pytest.fixture
def files(tmp_path, blobs):
    features = tmp_path / "f.npz"
    public = tmp_path / "p.npz"
    np.savez(features, **{k: blobs[k] for k in ("x_train", "y_train", "x_test", "y_test")})
    np.savez(public, x=blobs["public"])
    return features, public


def run(capsys, *argv):
    code = main(["baseline", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_lists_every_method_with_its_spend(capsys, files, tmp_path):
    features, public = files
    code, out, err = run(capsys, "--features", features, "--public", public, "--method", "dp-ls,dppl-public,dppl-mean",
                         "--epsilon", "0.5,4", "--delta", "1e-5", "--seed", "0", "--json", "--out", tmp_path / "o")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["method"] for r in rows] == ["dp-ls", "dppl-mean", "dppl-public"] * 2
    for r in rows:
        assert REQUIRED <= set(r)
        assert r["epsilon"] <= r["target_epsilon"] and 0 <= r["balanced_accuracy"] <= 1
        assert r["delta"] == (0.0 if r["method"] == "dppl-public" else 1e-5)
        assert r["neighbouring"] == "add/remove-one"
    for name in ("baseline.json", "baseline.csv", "baseline.md", "accuracy_vs_epsilon.png"):
        assert (tmp_path / "o" / name).stat().st_size > 0
    assert "| dp-ls |" in (tmp_path / "o" / "baseline.md").read_text()
    # Released together, the six rows cost more than any one of them: the composition is reported, and a
    # fixed --seed is said to be not private.
    assert all(r["noise_secret"] is False for r in rows)
    assert "NOT private" in err and "composed: every release above (6" in err
    from tanplan.baselines.accounting import composed_guarantee

    total = composed_guarantee([r["rho"] for r in rows], 1e-5)
    assert f"ε = {total['epsilon']:.4g}" in err and total["epsilon"] > max(r["epsilon"] for r in rows)


def test_the_demo_draws_avoid_the_users_private_mnist1d_seed():
    from tanplan.baselines.features import demo_spec

    for seed in range(6):
        spec = demo_spec({seed})
        assert seed not in (spec.public_seed, spec.private_seed) and spec.public_seed != spec.private_seed
    assert (demo_spec({0}).public_seed, demo_spec({0}).private_seed) == (1, 2)  # the default demo is unchanged


def test_public_methods_are_skipped_with_a_note(capsys, files):
    features, _ = files
    code, out, err = run(capsys, "--features", features, "--method", "all", "--epsilon", "2", "--seed", "1", "--json")
    assert code == 0
    assert {r["method"] for r in json.loads(out)} == {"dp-ls", "dp-newton", "dp-fc", "dp-adam", "dppl-mean"}
    assert "skipped dppl-public, dppl-publick" in err


def test_human_table_and_default_delta(capsys, files):
    features, _ = files
    code, out, err = run(capsys, "--features", features, "--method", "dp-ls", "--epsilon", "1", "--imbalance-ratio", "5")
    assert code == 0
    assert out.splitlines()[0].split()[:3] == ["method", "target", "ε"] and "dp-ls" in out
    n_used = sum(long_tail_counts(150, 4, 5.0))
    assert f"{n_used ** -1.1:.0e}" in out  # δ = n^-1.1 of the training examples actually used


def bad(tmp_path, **arrays):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("case,needle", [
    ("lengths", "has 600 examples but y_train has 599 labels"),
    ("nan", "NaN"),
    ("labels", "integer class labels"),
    ("missing", "lacks y_test"),
    ("width", "x_train has 8 features but x_test has 7"),
])
def test_bad_features_exit_2_with_one_line(capsys, tmp_path, blobs, case, needle):
    arrays = {k: blobs[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    if case == "lengths":
        arrays["y_train"] = arrays["y_train"][:-1]
    elif case == "nan":
        arrays["x_train"] = arrays["x_train"].copy()
        arrays["x_train"][3, 2] = np.nan
    elif case == "labels":
        arrays["y_train"] = arrays["y_train"] + 0.5
    elif case == "missing":
        del arrays["y_test"]
    elif case == "width":
        arrays["x_test"] = arrays["x_test"][:, :7]
    code, out, err = run(capsys, "--features", bad(tmp_path, **arrays), "--epsilon", "1")
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_other_bad_inputs_exit_2(capsys, tmp_path, files, blobs):
    features, public = files
    cases = [
        ["--features", features, "--method", "dp-sgd", "--epsilon", "1"],  # unknown method
        ["--features", features, "--public", bad(tmp_path, x=blobs["public"][:, :5]), "--epsilon", "1"],  # width
        ["--features", tmp_path / "absent.npz", "--epsilon", "1"],
        ["--features", features, "--epsilon", "0"],
        ["--features", features, "--epsilon", "1", "--delta", "2"],
        ["--features", features, "--epsilon", "1", "--imbalance-ratio", "0.5"],
        ["--features", features, "--method", "dppl-public", "--epsilon", "1"],  # needs --public
        ["--features", features],  # no ε
        ["--epsilon", "1"],  # no features
    ]
    for argv in cases:
        code, out, err = run(capsys, *argv)
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("tanplan: error:"), err
    code, _, err = run(capsys, "--features", features, "--method", "dp-sgd", "--epsilon", "1")
    assert "dp-sgd" in err and "dppl-publick" in err  # names the value and what is allowed


def test_imbalance_and_minority_metric():
    assert long_tail_counts(100, 3, 4.0) == [100, 50, 25]
    y = np.repeat(np.arange(3), 100)
    fs = feature_set(np.random.default_rng(0).normal(size=(300, 2)), y, np.zeros((3, 2)), np.arange(3))
    counts = imbalanced(fs, 4.0).class_counts()
    assert counts.tolist() == [100, 50, 25]
    assert imbalanced(fs, 1.0) is fs
    assert minority_classes(np.array([5, 3, 9, 1, 7, 2, 8, 6])).tolist() == [3, 5]
    y_true, y_pred = np.array([0, 1, 2, 3]), np.array([0, 0, 2, 3])
    assert minority_accuracy(y_true, y_pred, np.array([10, 1, 10, 10])) == 0.0


def test_load_features_accepts_integral_float_labels(tmp_path, blobs):
    path = bad(tmp_path, x_train=blobs["x_train"], y_train=blobs["y_train"].astype(float),
               x_test=blobs["x_test"], y_test=blobs["y_test"])
    fs = load_features(path)
    assert fs.num_classes == 4 and fs.y_train.dtype.kind == "i"
    with pytest.raises(UsageError, match="single class"):
        feature_set(np.zeros((3, 2)), np.zeros(3, int), np.zeros((2, 2)), np.zeros(2, int))
