"""Proxy sweeps: the search space (space), the Ray Tune + Optuna search (search) and its results read
back from the study (results)."""
