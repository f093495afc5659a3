"""One DP-SGD run from a Config: setup, THE training loop (every `train`, proxy of `sweep` and `fit`,
and `launch`), checkpoints, evaluation, the released model, the Ray Train worker and the benchmark.

Built on tanplan.dp (the mechanism in JAX), tanplan.models and tanplan.data; accounted by
tanplan.privacy. Imports JAX: import the modules you need.
"""
