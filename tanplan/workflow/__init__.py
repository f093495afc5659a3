"""The TAN stages, each a function of a Config that calls the engine and returns a typed outcome
(tanplan.outcomes): the proxy sweep (sweep/), the batch law (tanplan.laws) fitted on proxies (fit) or on a
ladder chosen within a compute budget (ladder), the budget frontier's choice of (B, S, σ) (optimize, with
its accuracy law tanplan.laws.frontier_law), the launch, the privacy audit (audit), and the pipeline that chains them
(pipeline: `tanplan run`). Each stage has one entry function, `<stage>_entry` in the stage's own module (the
planning ones JAX-free: planning, frontier_plan), which tanplan.api calls with the Config: it checks every
input, bounds the budget, picks the mode and writes the files (docs/design.md, "Where each stage lives").

Beside them, what the stages share: the checks of a command's input that need no data (inputs), where the
proxies learn and at which σ (tuning), the total ε a workflow releases, bounded before it trains
(total_budget), and what its runs spent, composed from their ledgers (privacy_spent)."""
