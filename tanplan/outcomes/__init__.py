"""What the stages return: one frozen, keyword-only dataclass per stage result, JAX-free.

Stages build them, reports take them, commands read their attributes; `to_dict()` only where JSON is
written or printed, `from_dict()` only where a file is read back. Imports only privacy/ and config.

    base           the Result base: generic to_dict / from_dict, optional fields
    fields         a result's fields as keyword arguments (a wider result carrying a narrower one's keys)
    planning       plan, proxy and the budget frontier (its candidates: tanplan.privacy.frontier's)
    optimize       `tanplan optimize`: the simulated frontier, the law in ln S, the recommendation, its launch
    sweep          the proxy sweep (best.json): the best configuration, the ranking, the trial counts
    fit            the batch law (fit.json), its proxy runs, the --vary studies and the proxy ladder (ladder.json)
    launch         the launch's accounting and result (launch.json)
    pipeline       `tanplan run`'s summary.json (RunResult) and run.json (RunRecord)
    privacy_spent  privacy_spent.json (Spent), the total on the private set (Totals), its planned bound, the
                   tuning record
    audit          the audit's claim, assessment and result (audit.json)
"""
