"""`tanplan run`: plan → sweep → ladder (the batch law) → launch, and one report comparing prediction and result.

One driver, so that the ladder trains the configuration that launches (the sweep's own runs are not
reused in the law: the chosen one won partly by luck), and so that the launch never goes ahead blind:
when the verdict says the law does not hold, summary.json and report.md say why and what to change and
`tanplan run` exits 4 (NotLaunched; launch_anyway=True goes on). Every input, and the total ε the run
will release on the private set, are checked before any stage (BudgetExceeded: exit 3); resume=True
continues a stopped run. The stages, the budget, the verdict and resume: docs/ladder.md; where the
proxies learn and the total ε: docs/privacy.md, "Tuning data and the total ε".

Modules, one job each: `run` (the driver, run_pipeline), `checks` (every input checked, the total budget
bounded and the run's record, before any stage), `stages` (each stage and its progress line),
`interrupts` (SIGTERM/SIGINT while the stages run), `summary` (summary.json, the RunResult),
`baselines` (the cheaper private methods at the launch's ε), `costs` and `throughput` (`--dry-run`: each
stage's compute and wall time), `routes` (`run --routes`: scratch, fine-tuning, adapters and a private head
compared by their predictions, the best launched with --launch-best-route).
"""

from tanplan.workflow.pipeline.checks import RUN_FILE, run_record
from tanplan.workflow.pipeline.run import run_pipeline

__all__ = ["RUN_FILE", "run_pipeline", "run_record"]
