"""`tanplan bench`: both steps timed in one process, ratio and throughput consistent (no timing asserts)."""

import json

from tanplan import cli


def test_bench_cli_reports_both_steps_and_their_ratio(capsys):
    assert cli.main(["bench", "--model", "nosuchnet", "--json"]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert cli.main(["bench", "--model", "mlp", "--batch-size", "8", "--repeats", "2", "--grad-method", "ghost",
                     "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert r["model"] == "mlp" and r["route"] == "ghost" and r["batch_size"] == 8 and r["input_shape"] == [40, 1]
    assert r["dp_seconds"] > 0 and r["nonprivate_seconds"] > 0
    assert abs(r["ratio"] - r["dp_seconds"] / r["nonprivate_seconds"]) < 1e-9
    assert abs(r["dp_samples_per_second"] * r["dp_seconds"] - 8) < 1e-6
    # every non-private route is timed and the ratio is against the fastest of them
    assert set(r["nonprivate_routes"]) == {"plain", "ghost"}
    assert r["nonprivate_seconds"] == min(r["nonprivate_routes"].values())
    assert r["nonprivate_routes"][r["nonprivate_route"]] == r["nonprivate_seconds"]


def test_a_step_out_of_memory_is_one_line_naming_the_batch_and_exit_2(capsys, monkeypatch):
    from tanplan.commands import bench

    def exhausted(model, *args, **kwargs):  # what XLA raises when a step does not fit (its own error type)
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9.9GiB")

    monkeypatch.setattr(bench, "bench_model", exhausted)
    assert cli.main(["bench", "--model", "mlp", "--batch-size", "8"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("tanplan: error: --batch-size 8 is not allowed for mlp: one step ran out of the device's "
                           "memory; give a smaller --batch-size"), err
    monkeypatch.setattr(bench, "bench_model", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("other")))
    assert cli.main(["bench", "--model", "mlp", "--batch-size", "8"]) == 1  # any other error stays internal
    assert "internal error" in capsys.readouterr().err
