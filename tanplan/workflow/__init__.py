"""The TAN stages, each a function of a Config that calls the engine and returns a typed outcome
(tanplan.outcomes): the proxy sweep (sweep/), the batch law (batch_law) fitted on proxies (fit) or on a
ladder chosen within a compute budget (ladder), the budget frontier's choice of (B, S, σ) (optimize, with
its accuracy law frontier_law), the launch, the privacy audit (audit), and the pipeline that chains them
(pipeline: `tanplan run`).

Beside them, what the stages share: the checks of a command's input that need no data (inputs), where the
proxies learn and at which σ (tuning), the total ε a workflow releases, bounded before it trains
(total_budget), and what its runs spent, composed from their ledgers (privacy_spent)."""
