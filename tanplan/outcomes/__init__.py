"""What the stages return: one frozen, keyword-only dataclass per stage result, JAX-free.

Stages build them, reports take them, commands read their attributes; `to_dict()` only where JSON is
written or printed, `from_dict()` only where a file is read back. Imports only privacy/ and config.

    base       the Result base: generic to_dict / from_dict, optional fields
    planning   plan, proxy and the budget frontier (its candidates: tanplan.privacy.frontier's)
    optimize   `tanplan optimize`: the simulated frontier, the law in ln S, the recommendation, its launch
"""
