"""What the stages return: one frozen, keyword-only dataclass per stage result, JAX-free.

Stages build them, reports take them, commands read their attributes; `to_dict()` only where JSON is
written or printed, `from_dict()` only where a file is read back. Imports only privacy/ and config.

    base   the Result base: generic to_dict / from_dict, optional fields
    sweep  the proxy sweep (best.json): the best configuration, the ranking, the trial counts
    fit    the batch law (fit.json), its proxy runs, the --vary studies and the proxy ladder (ladder.json)
"""
