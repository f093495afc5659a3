"""`tanplan run --baselines`: the cheaper private methods at the launch's exact ε and δ, for the report."""

from __future__ import annotations

from pathlib import Path

from tanplan.baselines.runner import baselines_on_files
from tanplan.config import Config
from tanplan.reports.baselines import run_section, write_outputs

DEMO_SOURCE = "tanplan's demo features (public-pretrained 1D CNN on an independent mnist1d draw)"


def baselines_at(epsilon: float, delta: float, features, public, out: Path, cfg: Config) -> tuple[list[dict], str]:
    """(one row per method: summary.json's `baselines`, the report's section) at ε and δ, written to `out`
    (baseline.{json,csv,md}).

    Without a features file they run on tanplan's demo features (an encoder trained on public mnist1d,
    applied to an independent private mnist1d draw): the same task, not the same examples.
    """
    # The demo's mnist1d draws never use the user's private draw (data.seed), so they spend nothing on it.
    avoid = {cfg.data.seed} if cfg.data.dataset == "mnist1d" else set()
    results, notes = baselines_on_files(epsilon, delta, features, public, seed=None, avoid_seeds=avoid)  # OS entropy
    source = features or DEMO_SOURCE
    write_outputs(out, results, notes, f"Baselines at ε = {epsilon:.4g}, δ = {delta:.2g} on {source}")
    return [r.to_dict() for r in results], run_section(results, notes, epsilon, delta, source)
