"""`tanplan plan` and `tanplan proxy`: JSON figures, reports, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from helpers import run_cli

IMAGENET = ["--dataset-size", "1281167", "--batch-size", "16384", "--steps", "72000", "--delta", "8e-7"]


def test_plan_json_has_the_documented_keys(capsys):
    code, out, _ = run_cli(capsys, "plan", *IMAGENET, "--sigma", "2.5", "--json", "--accountant", "both")
    assert code == 0
    result = json.loads(out)
    for key in ("dataset_size", "batch_size", "steps", "sigma", "delta", "q", "eta", "eta_step", "tan", "eps_tan",
                "eps_rdp", "eps_pld", "regime"):
        assert key in result
    assert isinstance(result["eps_rdp"], float) and abs(result["eps_rdp"] - 7.97) < 0.1
    assert result["eps_pld"] < result["eps_rdp"]
    assert result["regime"] == "tan"


def test_plan_with_epsilon_calibrates_sigma(capsys):
    code, out, _ = run_cli(capsys, "plan", *IMAGENET, "--epsilon", "8", "--json", "--accountant", "rdp")
    rdp = json.loads(out)
    assert code == 0 and rdp["eps_rdp"] <= 8 and rdp["eps_rdp"] > 7.92
    assert rdp["sigma"] == pytest.approx(2.49, abs=0.02)  # the paper's σ (Table 4: RDP)
    code, out, err = run_cli(capsys, "plan", *IMAGENET, "--epsilon", "8", "--json")  # PLD, the accountant of record
    pld = json.loads(out)
    assert code == 0 and pld["accountant"] == "pld" and 8 * 0.99 <= pld["eps_pld"] <= 8
    assert pld["sigma"] < rdp["sigma"] and pld["eps_rdp"] > 8  # the same guarantee for less noise
    assert pld["eps_replace_one"] > pld["eps_pld"] and "≥ 1/N" in err  # δ = 8e-7 > 1/N: computed, with a warning


def test_overcharged_plan_gets_concrete_advice(capsys):
    # S = 20: the advice is the same at any S (σ = 1 sets k = 2), and PLD's composition of 2,000 steps costs more
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "256", "--steps", "20",
                           "--sigma", "1.0")
    assert code == 0
    assert "overcharged" in out
    assert "multiply B and σ by k=2" in out and "exact ε drops from" in out


def test_delta_above_one_over_n_warns(capsys):
    code, _, err = run_cli(capsys, "plan", "--dataset-size", "1000", "--batch-size", "100", "--steps", "10",
                           "--sigma", "3", "--delta", "0.01")
    assert code == 0 and "is ≥ 1/N" in err and "allow_large_delta" in err


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset-size", "100", "--batch-size", "200", "--steps", "10", "--sigma", "1"], "--batch-size 200"),
    (["--dataset-size", "100", "--batch-size", "0", "--steps", "10", "--sigma", "1"], "0 is not allowed"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "0", "--sigma", "1"], "0 is not allowed"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10", "--sigma", "-1"], "-1.0 is not allowed"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10", "--sigma", "0"], "0.0 is not allowed"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10", "--epsilon", "0"], "0.0 is not allowed"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10", "--sigma", "1", "--delta", "1"], "(0, 1)"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10", "--sigma", "1", "--delta", "0"], "(0, 1)"),
    (["--dataset-size", "ten", "--batch-size", "10", "--steps", "10", "--sigma", "1"], "'ten' is not a whole number"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10", "--sigma", "nan"], "not a finite number"),
    (["--dataset-size", "100", "--steps", "10", "--sigma", "1"], "--batch-size"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10"], "one of the arguments --sigma --epsilon"),
    (["--dataset-size", "100", "--batch-size", "10", "--steps", "10", "--sigma", "1", "--epsilon", "1"],
     "not allowed with argument"),
    (["--dataset-size", "100000", "--batch-size", "10", "--steps", "10", "--epsilon", "0.001", "--accountant", "rdp"],
     "cannot be reached"),
    (["--dataset-size", "1000000", "--batch-size", "100000", "--steps", "1000", "--epsilon", "1e-9"], "cannot be reached"),
])
def test_plan_bad_input_is_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = run_cli(capsys, "plan", *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tanplan: error:")
    assert fragment in err
    assert out == ""


def test_bad_input_from_a_real_process_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tanplan", "plan", "--dataset-size", "100", "--batch-size", "200",
                           "--steps", "10", "--sigma", "1", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "r").exists()  # nothing written on bad input


def test_proxy_json_keys_and_constant_eta_step(capsys):
    code, out, _ = run_cli(capsys, "proxy", *IMAGENET, "--sigma", "2.5", "--proxy-batch-size", "128", "--json")
    assert code == 0
    row = json.loads(out)
    for key in ("proxy_batch_size", "proxy_sigma", "steps", "eta_step", "savings"):
        assert key in row
    assert row["proxy_batch_size"] == 128 and row["steps"] == 72000
    assert row["proxy_sigma"] == pytest.approx(2.5 * 128 / 16384)
    assert row["savings"] == pytest.approx(128.0)
    assert row["eta_step"] == pytest.approx((16384 / 1281167) / (2**0.5 * 2.5))
    assert "no guarantee" in row["note"] and "not accounted" in row["note"]


def test_proxy_savings_and_several_sizes(capsys):
    code, out, _ = run_cli(capsys, "proxy", *IMAGENET, "--sigma", "2.5", "--savings", "64", "--json")
    assert code == 0 and json.loads(out)["proxy_batch_size"] == 256
    code, out, _ = run_cli(capsys, "proxy", *IMAGENET, "--sigma", "2.5", "--proxy-batch-size", "128",
                           "--proxy-batch-size", "512", "--json")
    assert [r["proxy_batch_size"] for r in json.loads(out)] == [128, 512]
    code, out, _ = run_cli(capsys, "proxy", *IMAGENET, "--sigma", "2.5", "--proxy-batch-size", "128")
    assert "simulation for choosing hyper-parameters" in out


def test_proxy_larger_than_target_is_exit_2(capsys):
    code, _, err = run_cli(capsys, "proxy", *IMAGENET, "--sigma", "2.5", "--proxy-batch-size", "20000")
    assert code == 2 and "20000" in err


@pytest.fixture
def unshared_rdp(monkeypatch):
    """dp_accounting's _compute_log_a as installed, without the test session's shared memo (tests/conftest.py):
    no other test asks for these settings' curves, and storing each of their values in the memo's SQLite file
    costs more than computing them."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    monkeypatch.setattr(rdp, "_compute_log_a", getattr(rdp._compute_log_a, "plain", rdp._compute_log_a))


def test_plan_report_writes_tables_and_three_figures(capsys, tmp_path, unshared_rdp):
    out_dir = tmp_path / "report"
    # η = 0.015: the privacy wall's points (q up to √2·10·η·√10) have small sampling rates, whose RDP orders
    # cost a third less to compute than at B = 4096, σ = 4 (η = 0.12)
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "60000", "--batch-size", "1024", "--steps", "100",
                           "--sigma", "8", "--out", str(out_dir), "--json")
    assert code == 0
    for name in ("report.md", "proxy_family.csv", "privacy_family.csv", "privacy_wall.png", "rdp_ratio.png",
                 "families.png"):
        assert (out_dir / name).stat().st_size > 0, name
    text = (out_dir / "report.md").read_text()
    assert "never a guarantee" in text and "![privacy wall](privacy_wall.png)" in text
    assert (out_dir / "privacy_wall.png").read_bytes()[:4] == b"\x89PNG"


def test_dataset_sizes_keep_b_sigma_s_and_match_the_paper_table_5(capsys):
    # TAN Table 5 (CIFAR-10, B = 4096, σ = 3, S = 2500, δ = 1/N): ε = 150.3 at N = 5k; tanplan's rows use δ = N^-1.1.
    code, out, _ = run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "2500",
                           "--sigma", "3", "--dataset-sizes", "5000,25000,50000", "--json")
    rows = json.loads(out)["dataset_sizes"]
    assert code == 0 and [r["dataset_size"] for r in rows] == [5000, 25000, 50000]
    assert all(r["sigma"] == 3 and r["batch_size"] == 4096 and r["delta"] == r["dataset_size"] ** -1.1 for r in rows)
    from tanplan.privacy import tan

    assert tan.eps_tan(rows[0]["eta"], 1 / 5000) == pytest.approx(150.3, rel=0.01)  # the paper's δ = 1/N
    assert rows[0]["eps_tan"] > 150.3  # at the default δ = N^-1.1, a little more
    assert rows[0]["eps_rdp"] > rows[1]["eps_rdp"] > rows[2]["eps_rdp"]


def test_dataset_size_below_the_batch_is_exit_2(capsys):
    code, _, err = run_cli(capsys, "plan", "--dataset-size", "50000", "--batch-size", "4096", "--steps", "2500",
                           "--sigma", "3", "--dataset-sizes", "1000")
    assert code == 2 and "1000" in err and len(err.strip().splitlines()) == 1


def test_an_out_folder_that_cannot_be_made_is_one_line_and_exit_2(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    code, _, err = run_cli(capsys, "plan", "--dataset-size", "1000", "--batch-size", "10", "--steps", "10",
                           "--sigma", "1", "--out", str(blocker / "report"))
    assert code == 2 and str(blocker) in err and len(err.strip().splitlines()) == 1
    assert blocker.read_text() == "keep me"
