"""Process-wide settings a tanplan process needs before JAX starts its backends.

Called by the command line's entry point (tanplan.cli.main), by Ray workers and by the test suite;
importing tanplan changes nothing by itself. Only environment variables are set, which XLA reads when
its first backend starts, so calling this after `import jax` but before any computation still works.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pkgutil

# XLA's CPU backend turns "scale each example's gradient, then sum over the batch" into a slow YNNPACK
# reduction fusion (20-60x slower DP steps on jaxlib 0.10); this flag turns that fusion off.
CPU_FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce"


def configure_process() -> None:
    """Add the CPU flag to XLA_FLAGS (the user's own flags kept) when JAX will run on the CPU only, and
    point JAX's compilation cache at the tanplan cache, unless TANPLAN_NO_JAX_CACHE=1 or
    JAX_COMPILATION_CACHE_DIR says otherwise."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_experimental_ynn_fusion_type" not in flags and cpu_only():
        os.environ["XLA_FLAGS"] = f"{flags} {CPU_FLAG}".strip()
    if os.environ.get("TANPLAN_NO_JAX_CACHE") or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    # Reuse compiled programs across processes: proxy runs, sweep trials and tests share shapes, and on
    # a small CPU compiling costs more than a short run.
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(cache_root(), "jax")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


def cpu_only() -> bool:
    """Whether JAX's only platform in this process will be the CPU: JAX_PLATFORMS says cpu, or (unset) no
    accelerator plug-in is installed. XLA aborts on a flag it does not know, and an accelerator's XLA
    (a separate plug-in build) need not know the CPU flag, so it is set only where no accelerator runs."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms:
        return platforms == "cpu"
    return not accelerator_plugins()


def accelerator_plugins() -> list[str]:
    """The accelerator back ends JAX would find (its "jax_plugins" entry points: CUDA, ROCm; libtpu)."""
    found = [entry.name for entry in importlib.metadata.entry_points(group="jax_plugins")]
    namespace = importlib.util.find_spec("jax_plugins")  # the older discovery: modules of this namespace
    if namespace is not None and namespace.submodule_search_locations:
        found += [m.name for m in pkgutil.iter_modules(namespace.submodule_search_locations)]
    if importlib.util.find_spec("libtpu") is not None:
        found.append("libtpu")
    return found


def without_cpu_flag(flags: str) -> str:
    """XLA_FLAGS less the CPU flag: for a process that runs on an accelerator."""
    return " ".join(f for f in flags.split() if not f.startswith("--xla_cpu_experimental_ynn_fusion_type"))


def driver_on_cpu() -> bool:
    """Keep this process's own JAX work (model initialisation, a plug-in's per-example check, the run's
    identity) on the CPU: a Ray driver only coordinates, and a JAX accelerator backend started here
    would take 75% of a GPU's memory before any worker or trial starts on it. Set through JAX's config,
    not JAX_PLATFORMS, so that the processes Ray starts from this one do not inherit it. False when a
    backend had already started (nothing can be changed then) on a platform other than the CPU."""
    import jax  # third-party: the caller is about to use it
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return jax.default_backend() == "cpu"
    jax.config.update("jax_platforms", "cpu")
    return True


def cache_root() -> str:
    """$TANPLAN_CACHE, else $XDG_CACHE_HOME/tanplan, else ~/.cache/tanplan."""
    if os.environ.get("TANPLAN_CACHE"):
        return os.path.expanduser(os.environ["TANPLAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.expanduser(base), "tanplan")
