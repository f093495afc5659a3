"""Process-wide settings a tanplan process needs before JAX starts its backends.

Called by the command line's entry point (tanplan.cli.main), by Ray workers and by the test suite;
importing tanplan changes nothing by itself. Only environment variables are set, which XLA reads when
its first backend starts, so calling this after `import jax` but before any computation still works.
"""

from __future__ import annotations

import os

# XLA's CPU backend turns "scale each example's gradient, then sum over the batch" into a slow YNNPACK
# reduction fusion (20-60x slower DP steps on jaxlib 0.10); this flag turns that fusion off.
CPU_FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce"


def configure_process() -> None:
    """Add the CPU flag to XLA_FLAGS (the user's own flags kept) and point JAX's compilation cache at
    the tanplan cache, unless TANPLAN_NO_JAX_CACHE=1 or JAX_COMPILATION_CACHE_DIR says otherwise."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_experimental_ynn_fusion_type" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {CPU_FLAG}".strip()
    if os.environ.get("TANPLAN_NO_JAX_CACHE") or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    # Reuse compiled programs across processes: proxy runs, sweep trials and tests share shapes, and on
    # a small CPU compiling costs more than a short run.
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(cache_root(), "jax")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


def cache_root() -> str:
    """$TANPLAN_CACHE, else $XDG_CACHE_HOME/tanplan, else ~/.cache/tanplan."""
    if os.environ.get("TANPLAN_CACHE"):
        return os.path.expanduser(os.environ["TANPLAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.expanduser(base), "tanplan")
