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


def _configure_compilation_cache() -> None:
    """Reuse compiled programs across processes: proxy runs, sweep trials and tests share shapes, and on a
    small CPU compiling costs more than a short run. TANPLAN_NO_JAX_CACHE=1 or the user's own setting wins."""
    if os.environ.get("TANPLAN_NO_JAX_CACHE") or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    root = os.environ.get("TANPLAN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tanplan")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(root, "jax")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


_configure_xla_flags()
_configure_compilation_cache()
