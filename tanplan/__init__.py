"""tanplan: plan, simulate and launch DP-SGD training with the TAN scaling laws.

The public API is flat (docs/api.md):

    import tanplan

    tanplan.plan(dataset_size=50_000, batch_size=4096, steps=2500, epsilon=8.0)   # PlanResult, no JAX
    tanplan.train("experiments/mnist1d.toml", "runs/x", overrides={"train.steps": 100})  # RunSummary

Each stage returns a typed result, a frozen dataclass of tanplan.outcomes whose `to_dict()` is the JSON
the matching command prints with --json. Each name is imported on first use, so `import tanplan` changes
nothing in the process and imports no JAX, pandas, matplotlib or Ray: the planner must answer in about a
second. Process-wide settings (XLA's CPU flag, the compilation cache) are made by the command line's entry
point and by each API stage that runs JAX, before its first JAX work: tanplan.runtime.configure_process().

The package, in layers from the bottom (docs/design.md; tests/test_layers.py keeps every import pointing
down): errors, fileio, runtime, ray_session, extras, provenance, plugins; config; privacy/ (the JAX-free
numbers); outcomes/ (what the stages return); data/, models/, task; dp/ (the mechanism in JAX); engine/ (one
run), baselines/; reports/; workflow/ (the stages) and api; commands/; cli.
"""

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    # planning (no JAX)
    "plan": "tanplan.api", "proxy": "tanplan.api", "frontier": "tanplan.api",
    # one run, and the stages
    "train": "tanplan.api", "pretrain": "tanplan.api", "load_run": "tanplan.api", "launch": "tanplan.api", "sweep": "tanplan.api", "fit": "tanplan.api", "run": "tanplan.api",
    "compare_routes": "tanplan.api",
    "optimize": "tanplan.api", "audit": "tanplan.api", "final_audit": "tanplan.api",
    # configs and plans
    "Config": "tanplan.config", "load_config": "tanplan.config", "as_config": "tanplan.api",
    "Plan": "tanplan.privacy.plan",
    # typed results
    "PlanResult": "tanplan.outcomes.planning", "Proxy": "tanplan.outcomes.planning",
    "FrontierResult": "tanplan.outcomes.planning",
    "LaunchResult": "tanplan.outcomes.launch", "OptimizeResult": "tanplan.outcomes.optimize",
    "RunSummary": "tanplan.outcomes.run_summary", "SweepResult": "tanplan.outcomes.sweep",
    "FitResult": "tanplan.outcomes.fit", "RunResult": "tanplan.outcomes.pipeline",
    "RoutesResult": "tanplan.outcomes.routes",
    "AuditResult": "tanplan.outcomes.audit", "FinalAuditResult": "tanplan.outcomes.final_audit",
    # data: sources larger than memory, plug-ins
    "DataSource": "tanplan.data.source", "ArraySource": "tanplan.data.source", "Sources": "tanplan.data.source",
    "sources": "tanplan.data.source", "Dataset": "tanplan.data.dataset", "load_dataset": "tanplan.data.load",
    "MemmapSource": "tanplan.data.memmap", "convert_cifar10": "tanplan.data.memmap",
    "convert_image_folder": "tanplan.data.memmap",
    # errors (their exit codes: tanplan.errors)
    "TanplanError": "tanplan.errors", "UsageError": "tanplan.errors", "BudgetExceeded": "tanplan.errors",
    "NotLaunched": "tanplan.errors", "TrainingDiverged": "tanplan.errors", "RunInterrupted": "tanplan.errors",
    "PrivacyViolation": "tanplan.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # imported once
        return value
    raise AttributeError(f"module 'tanplan' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
