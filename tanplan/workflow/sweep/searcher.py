"""The sweep's Ray Tune searcher: Optuna's sampler through the ask-and-tell interface of a stored study.

    searcher = StudySearcher(space, storage=storage, study_name="search", sampler=TPESampler(seed=0), seed=0)
    tune.TuneConfig(search_alg=searcher, ...)

Ray Tune asks `suggest(trial_id)` for each new trial; the searcher asks the Optuna study for a trial
(`Study.ask`, which hands out a re-queued trial first), gives it its seed, and returns it as one job.
When Tune reports the trial's end, the searcher writes the trial's row (accuracy, wall seconds, status,
seed) as user attributes, then tells the study its state (`Study.tell`): the state is the last write,
so a trial counts as finished only once everything about it is stored.

Only public interfaces: Ray Tune's `Searcher` extension point (suggest, on_trial_result,
on_trial_complete) and Optuna's `Study.ask`/`Study.tell`, `Trial.set_user_attr` and `Trial.report`.
The study is opened lazily where the searcher runs (with Ray Client, on the head node), from a storage
object that pickles as its URL. Tune's own searcher checkpoint is not used: the study is the record.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ray.tune.search import Searcher

from tanplan.workflow.sweep.study import (DIVERGED, FINISHED, METRIC, PRUNED, TrialJob, TrialRecord, TrialReport,
                                          finite, outcome)


class StudySearcher(Searcher):
    """Suggests the trials of an Optuna study stored in `storage` and records their outcomes in it.

    Args:
      space: the Optuna distributions of the searched keys (tanplan.workflow.sweep.space.to_optuna).
      storage: an Optuna storage (or its URL) holding the study `study_name`.
      study_name: the study to load; it must exist (tanplan.workflow.sweep.study.open_studies).
      sampler: the Optuna sampler (TPE, seeded by the caller).
      seed: trial n of the study gets experiment seed `seed + n`; a re-queued trial keeps its own.
    """

    def __init__(self, space: dict, *, storage: Any, study_name: str, sampler, seed: int):
        super().__init__(metric=METRIC, mode="max")
        self._space = dict(space)
        self._storage = storage
        self._study_name = study_name
        self._sampler = sampler
        self._seed = int(seed)
        self._study = None  # opened on first use, where Tune runs the searcher
        self._live: dict[str, Any] = {}  # Tune trial id -> optuna.trial.Trial, until its outcome is told

    def study(self):
        """The Optuna study this searcher asks and tells."""
        if self._study is None:
            import optuna

            self._study = optuna.load_study(study_name=self._study_name, storage=self._storage,
                                            sampler=self._sampler, pruner=optuna.pruners.NopPruner())
        return self._study

    def suggest(self, trial_id: str) -> dict:
        """One job {"params", "trial", "seed", "kind"} for the Tune trial `trial_id`."""
        trial = self.study().ask(fixed_distributions=self._space)
        trial_seed = TrialRecord.of(trial.user_attrs).seed
        if trial_seed is None:  # a re-queued trial keeps the seed it had
            trial_seed = self._seed + trial.number
            trial.set_user_attr("seed", trial_seed)
        trial.set_user_attr("started_at", time.time())
        self._live[trial_id] = trial
        job = TrialJob(params=dict(trial.params), trial=trial.number, seed=trial_seed, kind="search")
        return {"job": job.to_dict()}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Record an intermediate evaluation (the final one comes with the outcome)."""
        trial, report = self._live.get(trial_id), TrialReport.of(result)
        if trial is None or report.final or not finite(report.test_accuracy):
            return
        step = report.step if report.step is not None else report.training_iteration or 0
        trial.report(float(report.test_accuracy), int(step))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Store the trial's row, then its state: COMPLETE, PRUNED (pruned, diverged) or FAIL."""
        from optuna.trial import TrialState

        trial = self._live.pop(trial_id, None)
        if trial is None:  # unknown, or already told
            return
        status, row = outcome(result, error)
        for key, value in row.items():
            trial.set_user_attr(key, value)
        state = {FINISHED: TrialState.COMPLETE, PRUNED: TrialState.PRUNED,
                 DIVERGED: TrialState.PRUNED}.get(status, TrialState.FAIL)
        value = row.get(METRIC) if state == TrialState.COMPLETE else None
        try:
            self.study().tell(trial, value, state=state)
        except Exception as exc:  # e.g. a value Optuna refuses: keep the trial, as a failure
            print(f"tanplan sweep: could not record trial {trial.number}: {exc}", file=sys.stderr)
            self.study().tell(trial, None, state=TrialState.FAIL)

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the study in its storage is the sweep's record (resume reads it)."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: a resumed sweep loads the study again."""

    def __getstate__(self) -> dict:
        # Shipped to another process (Ray Client), the searcher reopens the study there.
        return {**self.__dict__, "_study": None, "_live": {}}

