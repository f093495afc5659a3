"""`tanplan run`: plan → sweep → ladder (the batch law) → launch, and one report comparing prediction and result.

Stages, with `[fit] batch_sizes = "auto"` (the default):

1. plan: the target (B, σ, S) and its exact ε;
2. sweep: hyper-parameters searched on one proxy B'_s (--proxy-batch-size, else [sweep] proxy_batch_size,
   else the ladder's third rung, 4·fit.ladder_start); its best configurations are re-run over
   [sweep] seeds fresh seeds and the one with the best mean is chosen, those whose seeds diverged or
   scatter far more than the others' left aside (tanplan.workflow.sweep.results.ranking);
3. ladder (tanplan.workflow.ladder): proxies of the chosen configuration, rungs B' = 16, 32, ... and seeds
   chosen within the ladder's budget until the interval for one launch is as narrow as proxies can make
   it; the law, the prediction and its interval are tanplan.workflow.batch_law's;
4. launch: the one full-scale run of the chosen configuration.

With an explicit list, the ladder is replaced by the fit: every size trained with `fit.seeds` seeds
(the sweep runs at the smallest size), and the same law and interval.

The ladder trains the configuration that launches, so the law is that configuration's; the sweep's own
runs are not reused in the law (the chosen one won partly by luck: its runs are biased upwards).

Never launch blind: when the verdict says the law does not hold (fewer rungs than the law needs within
the budget, or an interval that leaves [0, 1]) the pipeline stops before the launch. It writes
summary.json (launched: false, the reason, what to change) and report.md, and returns; `tanplan run`
then exits with NotLaunched (4). launch_anyway=True goes on.

Where the proxies learn ([tuning], tanplan.workflow.tuning): on public data of the same task by default,
at the target's η_step, so the launch's ε is the whole cost to the private examples; or on the private
set, and then every release that touched it (sweep trials and re-runs, ladder or fit runs, DP-SNIP,
the launch) is composed from the runs' ledgers into epsilon_total_rdp / epsilon_total_pld. When the
proxies are evaluated on another test set than the launch's, the interval counts the difference of the
two test sets (tanplan.workflow.batch_law.eval_set_variance).

Before anything is written or trained, the total ε the run will release on the private set (with private
tuning its sweep, ladder or fit runs and the launch; with public tuning the launch) is bounded and checked
against privacy.total_epsilon (tanplan.workflow.total_budget): above it, BudgetExceeded (exit 3). The
summary's `epsilon` is the guarantee for the private examples: the composed total whenever the proxies
trained on them, the launch's otherwise (`launch_epsilon` is always the launch's own).

Resume: run.json records what the run was asked (config, options); `resume=True` (`tanplan run --resume`)
continues it: the sweep's study keeps its finished trials, ladder.json its finished runs (each run folder
with a finished summary.json is reused as it is), a run stopped mid-way continues from its checkpoint, and
a finished launch reports again. SIGTERM/SIGINT stop the stages with one line (RunInterrupted), Ray shut
down (tanplan.ray_session).

Compute: every proxy run processes B'·S examples; the summary gives each stage's total as a fraction of
the target's B·S (proxy_compute: sweep, ladder (or fit), total; proxy_compute_fraction is the total).
The ladder is bounded by its budget (fit.max_proxy_fraction, fit.min_proxy_budget); the sweep's cost is
set by [sweep] (trials, re-runs).

Modules, one job each: `run` (the driver, run_pipeline), `checks` (every input checked, the total budget
bounded and the run's record, before any stage), `stages` (each stage and its progress line),
`interrupts` (SIGTERM/SIGINT while the stages run), `summary` (summary.json, the RunResult),
`baselines` (the cheaper private methods at the launch's ε).
"""

from tanplan.workflow.pipeline.checks import RUN_FILE, run_record
from tanplan.workflow.pipeline.run import run_pipeline

__all__ = ["RUN_FILE", "run_pipeline", "run_record"]
