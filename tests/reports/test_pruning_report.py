"""The prune × drop report: aggregation per cell and the figure file."""

import statistics

import pytest

from tanplan.reports import pruning as prune_report


def _records():
    import pandas as pd  # here, not at collection (every xdist worker collects every module)

    rows = []
    for seed, bump in ((0, 0.0), (1, 0.02)):
        for prune in (0.0, 0.5):
            for drop in (0.0, 0.5):
                rows.append({"seed": seed, "train.prune_rate": prune, "train.grad_drop_rate": drop,
                             "test_accuracy": 0.5 + prune * 0.1 + drop * 0.2 + bump})
    return pd.DataFrame(rows)


def test_table_has_one_row_per_cell_with_mean_and_spread():
    table = prune_report.prune_drop_table(_records())
    assert len(table) == 4 and set(table["count"]) == {2}
    cell = table[(table.prune_rate == 0.5) & (table.grad_drop_rate == 0.5)].iloc[0]
    values = [0.5 + 0.05 + 0.1, 0.5 + 0.05 + 0.1 + 0.02]
    assert cell["mean"] == pytest.approx(sum(values) / 2)
    assert cell["std"] == pytest.approx(statistics.stdev(values))  # pandas' std: the sample's (n - 1)
    assert "± " in prune_report.markdown_table(_records())


def test_missing_rate_column_reads_as_zero_and_figure_is_written(tmp_path):
    df = _records().drop(columns=["train.grad_drop_rate"])
    assert set(prune_report.prune_drop_table(df)["grad_drop_rate"]) == {0.0}
    path = prune_report.plot_prune_drop(_records(), tmp_path / "prune_drop.png")
    assert path.is_file() and path.stat().st_size > 1000
