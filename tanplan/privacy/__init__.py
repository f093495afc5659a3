"""Privacy numbers without JAX: TAN closed forms, exact accounting, the Plan, the mechanism of a run and
its ledger. The planner answers from this package alone in about a second.

Modules: tan (η, Σ, ε_TAN, regimes), accounting (dp-accounting: exact ε, calibration), plan (the Plan:
N, δ, B, σ, S), frontier (the plans one privacy budget and one compute budget allow), run_plan (what one
run's guarantee rests on, and its DpEvents), ledger (what a run released), snip_budget (the DP-SNIP budget
split). Nothing here imports JAX, flax or optax.
"""
