"""tanplan: plan, simulate and launch DP-SGD training with the TAN scaling laws.

Importing the package is cheap on purpose: the planner must answer in about a second, so nothing here
imports JAX, pandas, matplotlib or Ray. It only prepares XLA's flags for CPU runs before JAX is loaded.
"""

import os

__version__ = "0.1.0"

# XLA's CPU backend turns "scale each example's gradient, then sum over the batch" into a slow
# YNNPACK reduction fusion (20-60x slower DP steps on jaxlib 0.10); this flag turns that fusion off.
# It must be in XLA_FLAGS before JAX initialises its backends; the user's own flags are kept.
_CPU_FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce"


def _configure_xla_flags() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_experimental_ynn_fusion_type" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_CPU_FLAG}".strip()


_configure_xla_flags()
