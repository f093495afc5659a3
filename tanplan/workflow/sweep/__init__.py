"""Proxy sweeps: the search space (space), the sweep's record and the dicts that cross Ray and Optuna, typed
(study), the Ray Tune searcher over the study (searcher), one trial in a Ray worker (trial), the search and its
re-runs (search), and its results read back from the study (results: best.json, a
tanplan.outcomes.sweep.SweepResult); stage holds the stage's entry (sweep_entry: the checks, the budget, the
search, best.json)."""
