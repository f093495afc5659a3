"""Typed experiment configuration: TOML files in experiments/, dotted `section.key=value` overrides.

A Config is data (frozen dataclasses, one per section); stages interpret it. Every key has a default,
a type and, where it matters, a range or a set of allowed values, so that a typo or a bad value stops
the run before any compute with one line naming the key and what is allowed (UsageError, exit 2).

    >>> cfg = load_config(None, ["train.steps=10", "privacy.epsilon=2"])
    >>> cfg.train.steps, cfg.privacy.epsilon
    (10, 2.0)

Sections: [experiment], [data], [model], [init], [task], [privacy], [train], [pruning], [tuning], [sweep], [fit], [optimize],
[tracking]; each an ordinary
typed field of Config. Keys renamed since an earlier version (train.prune_method -> pruning.method, ...)
are still read, under their new names. No JAX here: loading a config must stay cheap.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from tanplan.errors import UsageError
from tanplan.plugins import IMPORT_PATH

# Where tanplan.privacy.accounting trusts the accountants (see its docstring): defined here, below it, so
# that a config outside them is refused before any data is loaded.
MAX_STEPS = 10**7
SIGMA_MIN, SIGMA_MAX = 1e-4, 1e6


def setting(default, doc: str = "", *, choices: tuple | None = None, lo=None, hi=None, lo_open=False,
            hi_open=False, item: type | None = None, example: tuple | None = None):
    """A config field with its allowed values: choices, or a range [lo, hi] (open ends optional).

    A tuple default is a list setting whose items have type `item` and the range; a dict default a table.
    The default "auto" with an `item` type is a list setting that also takes the word "auto" (`example`
    is a list shown in its error message).
    """
    meta = {"doc": doc, "choices": choices, "lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open,
            "item": item, "example": example}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = setting("mnist1d", "experiment name, used in reports")
    seed: int = setting(0, "seed of what is public: initialisation, augmentation, evaluation (never the noise "
                        "or the batches: see privacy.noise_seed); at most 2^31 - 1, which leaves room below 2^32 "
                        "for the offsets that sweeps and fits add per trial and per run", lo=0, hi=2**31 - 1)


@dataclass(frozen=True)
class DataConfig:
    dataset: str = setting("mnist1d", "mnist1d | mnist5k | cifar10 | npz | memmap (see tanplan.data), or a loader "
                           "by import path \"package.module:load\" returning train and test sources")
    path: str = setting("", "directory (cifar10, memmap) or .npz file (npz); passed to a plugged-in loader as path=")
    options: dict = setting({}, "keyword arguments of a plugged-in loader (data.dataset = \"package.module:load\")")
    num_samples: int = setting(60000, "mnist1d: examples generated in total (80% train)", lo=1)
    seed: int = setting(0, "which instance of a generated dataset: mnist1d's generation seed, mnist5k's split "
                        "(public; draws with different seeds share no example)", lo=0, hi=2**32 - 1)
    train_examples: int = setting(0, "train on the first n training examples only (0 = all); the test set is kept "
                             "whole (dataset-size studies, small-N demos)", lo=0)
    augmentation: str = setting("none", "augmentation family (see tanplan.data)")
    aug_mult: int = setting(1, "AugMult K: augmentations per example, gradients averaged before clipping", lo=1)
    aug_test: bool = setting(False, "majority vote over K test-time augmentations")


@dataclass(frozen=True)
class ModelConfig:
    name: str = setting("cnn1d", "model name (see tanplan.models), or a factory by import path "
                        "\"package.module:make_model\" returning a flax module")
    width: int = setting(0, "0 = the model's default", lo=0)
    depth: int = setting(0, "0 = the model's default", lo=0)
    norm_order: str = setting("conv_gn_relu", "order of GroupNorm and ReLU", choices=("conv_gn_relu", "conv_relu_gn"))
    options: dict = setting({}, "keyword arguments of a plugged-in model factory (model.name = \"package.module:make\")")


@dataclass(frozen=True)
class InitConfig:
    """[init]: where the initial weights come from and which parameters train (tanplan.models.init,
    tanplan.models.freeze). Empty: a random initialisation from experiment.seed, every parameter trained."""

    path: str = setting("", "initial weights: a tanplan run folder (its released model/), a .npz of \"/\"-joined "
                        "parameter paths, a .msgpack of flax params, or an orbax checkpoint folder")
    loader: str = setting("", "or a function by import path \"package.module:load_params\" returning the params "
                          "pytree (called with no argument); exactly one of path and loader")
    head: tuple = setting((), "parameter patterns of the head, re-initialised (from experiment.seed) when its shape "
                          "differs from the init's (another class count); empty: the last top-level Dense of a "
                          "built-in model", item=str)
    trainable: tuple = setting((), "parameter patterns that train (empty: all); a glob on \"/\"-joined paths "
                               "(\"BasicBlock_7/*\"), or a regex after \"re:\"; a pattern naming a module "
                               "covers its parameters", item=str)
    frozen: tuple = setting((), "parameter patterns kept at their initial values (no gradient, no noise, no "
                            "optimizer state); they win over trainable", item=str)
    frozen_blocks: int = setting(0, "resnet18_gn, wrn16_4, vit_tiny: freeze the stem and the first k block groups "
                                 "(ViT: encoder blocks); k = all of them leaves the head alone trainable", lo=0)
    adapters: tuple = setting((), "low-rank adapters (LoRA) on these Dense and Conv layers, patterns as in trainable "
                              "(\"Conv_*\", \"Dense_0\"); the base is frozen and only the adapters train (with what "
                              "trainable names, and a re-initialised head); released merged into the base kernels "
                              "(tanplan.models.adapters); needs init.path or init.loader", item=str)
    adapters_rank: int = setting(8, "rank r of each adapter (a layer's update is A·B, A d_in×r, B r×d_out)", lo=1,
                                 hi=4096)


@dataclass(frozen=True)
class TaskConfig:
    """[task]: what a run minimises and reports (tanplan.task). Empty: integer-label cross-entropy and accuracy."""

    loss: str = setting("", "per-example loss by import path \"package.module:loss\", loss(logits, label) -> scalar "
                        "for ONE example (tanplan vmaps it); empty = softmax cross-entropy with integer labels")
    metric: str = setting("", "per-example metric by import path, metric(logits, label) -> scalar in [0, 1], higher is "
                          "better, reported as test_accuracy; empty = accuracy (argmax == label)")


@dataclass(frozen=True)
class PrivacyConfig:
    epsilon: float = setting(8.0, "target epsilon (used when sigma = 0)", lo=0, lo_open=True)
    total_epsilon: float = setting(0.0, "budget of everything a workflow releases on the private set (its proxies "
                                   "when [tuning] data = \"private\", and the launch), checked before any training; "
                                   "0 (the default) = privacy.epsilon", lo=0)
    sigma: float = setting(0.0, "noise multiplier; 0 = calibrate from epsilon; else in [1e-4, 1e6], where the "
                           "accountants are trusted (tanplan.privacy.accounting)", lo=0, hi=SIGMA_MAX)
    delta: float = setting(0.0, "0 (the default) = N^-1.1, well below 1/N; else a number in (0, 1) that a double "
                           "holds (a literal that underflows to 0, like 1e-400, is refused); training commands "
                           "refuse delta >= 1/N unless allow_large_delta = true", lo=0, hi=1, hi_open=True)
    allow_large_delta: bool = setting(False, "accept delta >= 1/N in commands that train (where releasing one "
                                      "random example outright meets the guarantee); `plan` only warns")
    clip_norm: float = setting(1.0, "per-example L2 clipping norm C", lo=0, lo_open=True)
    accountant: str = setting("pld", "accountant of record: sigma is calibrated and budgets are checked with it; "
                              "pld (privacy loss distributions, the tightest; needs sigma >= 0.1) or rdp (Rényi DP, "
                              "as in the TAN paper). Both are reported.", choices=("pld", "rdp"))
    neighbouring: str = setting("add_remove", "neighbouring relation sigma is calibrated to: add_remove (add or "
                                "remove one example) or replace_one (swap one for another, N fixed; PLD only). "
                                "Both are reported", choices=("add_remove", "replace_one"))
    private: bool = setting(True, "false = non-private: no clipping, no noise")
    noise_seed: int = setting(-1, "-1: the noise and the Poisson batches come from a per-run secret drawn from OS "
                              "entropy (private). N >= 0: reproducible from this config, for tests only, NOT private "
                              "(`launch` refuses it without --allow-public-noise)", lo=-1, hi=2**32 - 1)


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = setting(4096, "expected batch size B (Poisson sampling, q = B/N)", lo=1)
    steps: int = setting(200, "number of steps S, at most 10^7 (where the accountants are trusted)", lo=1,
                         hi=MAX_STEPS)
    epochs: float = setting(0.0, "0: S = train.steps; > 0: S = ceil(epochs·N/B), N the training set's size (passes "
                            "over the data in expectation, as Opacus users plan); exactly one of steps and epochs",
                            lo=0, hi=1e6)
    proxy_batch_size: int = setting(0, ">0: train the proxy B' with sigma*B'/B at the same S", lo=0)
    physical_batch_size: int = setting(256, "rows per device per compiled chunk; larger batches are accumulated", lo=1)
    optimizer: str = setting("sgd", "optimizer", choices=("sgd", "adam", "adamw"))
    learning_rate: float = setting(4.0, "peak learning rate", lo=0, lo_open=True)
    momentum: float = setting(0.0, "SGD momentum", lo=0, hi=1)
    dampening: float = setting(0.0, "SGD dampening (PyTorch semantics)", lo=0, hi=1)
    nesterov: bool = setting(False, "SGD Nesterov momentum")
    weight_decay: float = setting(0.0, "L2 (sgd, adam) or decoupled (adamw) weight decay", lo=0)
    schedule: str = setting("constant", "learning-rate schedule after warm-up", choices=("constant", "cosine"))
    warmup_steps: int = setting(0, "linear warm-up steps", lo=0)
    ema_decay: float = setting(0.0, "EMA of the weights; 0 = off", lo=0, hi=1, hi_open=True)
    eval_every: int = setting(50, "evaluate every this many steps (and at the end)", lo=1)
    eval_batch_size: int = setting(1024, "rows per evaluation batch (at most the test set is used)", lo=1,
                                   hi=2**20)
    checkpoint_every: int = setting(50, "launch: save a checkpoint every this many steps (and at the end); 0 = only at the end", lo=0)
    compute_dtype: str = setting("float32", "the model's forward and backward passes: float32 or bfloat16 (about "
                                 "twice as fast on recent GPUs); parameters, per-example norms, clipping, "
                                 "accumulation and noise stay float32", choices=("float32", "bfloat16"))
    grad_method: str = setting("auto", "per-example clipping: auto | ghost (per-layer norms) | vmap (jax-privacy)",
                          choices=("auto", "ghost", "vmap"))
    route_cost: str = setting("estimate", "how grad_method auto weighs ghost against vmap at the run's chunk size: "
                              "estimate (XLA's FLOP count of each, deterministic) | measure (compiles and times "
                              "both on public inputs)", choices=("estimate", "measure"))


@dataclass(frozen=True)
class PruningConfig:
    """[pruning]: pre-pruning and gradient dropping (tanplan.dp.pruning, tanplan.dp.grad_drop)."""

    method: str = setting("none", "pre-pruning of each layer's weights before training",
                          choices=("none", "random", "synflow", "dp_snip"))
    rate: float = setting(0.0, "fraction of each layer's weights pruned (kept at 0, never updated)", lo=0, hi=0.9)
    drop_method: str = setting("none", "per-step dropping of gradient coordinates (no noise there, not updated)",
                               choices=("none", "random", "magnitude"))
    drop_rate: float = setting(0.0, "fraction of each layer's kept weights dropped at every step", lo=0, hi=0.9)
    snip_budget_share: float = setting(0.1, "dp_snip: share of privacy.epsilon spent on the SNIP release",
                                       lo=0, hi=1, lo_open=True, hi_open=True)


@dataclass(frozen=True)
class TuningConfig:
    """[tuning]: where the proxies of `tanplan run` (sweep trials, fit runs) learn.

    TAN's proxies run at constant η_step, so each spends a large ε of its own; they protect the private
    examples only when they never see them. public (default): they train and evaluate on public data of
    the same task, so the launch's ε is the whole cost to the private examples. private: they use the
    private training set, and the pipeline composes every release on it into its total ε."""

    data: str = setting("public", "public | private", choices=("public", "private"))
    dataset: str = setting("", "public: what the public set is, as data.dataset takes it: npz | memmap | a loader by "
                           "import path \"package.module:load\" (or another built-in); empty: from tuning.path, an "
                           ".npz file or a memmap folder (meta.json)")
    path: str = setting("", "public: an .npz with x_train, y_train, x_test, y_test (the npz dataset's format), a memmap "
                        "folder (`tanplan convert`'s format), or the path= of a loader; empty for mnist1d: an "
                        "independent draw that tanplan generates (data.seed + 1)")
    options: dict = setting({}, "keyword arguments of a plugged-in public loader (tuning.dataset = "
                            "\"package.module:load\")")


@dataclass(frozen=True)
class SweepConfig:
    """[sweep]: the settings read by `tanplan sweep`; [sweep.space] stays a raw table until it is parsed
    (tanplan.workflow.sweep.space), which checks every value a trial could take."""

    trials: int = setting(20, "trials of the search", lo=1)
    top_k: int = setting(3, "best configurations re-run over `seeds` seeds (0 = none)", lo=0)
    seeds: int = setting(3, "seeds per re-run configuration", lo=1)
    scheduler: str = setting("none", "early stopping on intermediate evaluations", choices=("none", "asha"))
    max_concurrent: int = setting(0, "trials at once; 0 = one per GPU, 1 without GPUs", lo=0)
    proxy_batch_size: int = setting(0, "default proxy batch B' (0 = --proxy-batch-size is required)", lo=0)
    startup_trials: int = setting(10, "random trials before TPE models the results", lo=0)
    space: dict = setting({}, "searched keys: choices or {low, high, log}")


SPREAD_RATIO_MAX = 4.0  # fit.spread_ratio's largest: the calibration settings' ratios are 0.56-1.12 (1.77 at one rung)


@dataclass(frozen=True)
class FitConfig:
    """[fit]: the proxies of the batch law (tanplan.workflow.fit, tanplan.laws.batch_law; the ladder for "auto")."""

    batch_sizes: tuple | str = setting("auto", "proxy batch sizes B', or \"auto\": the proxy ladder chooses the runs "
                                       "(rungs and seeds) within its budget (tanplan.workflow.ladder)",
                                       item=int, lo=1, example=(64, 128, 256))
    seeds: int = setting(3, "seeds per proxy batch size of an explicit batch_sizes list (and of --vary steps, data)",
                         lo=1)
    max_proxy_fraction: float = setting(0.25, "auto: the ladder's budget, Σ B'·S over its runs ÷ the target's B·S "
                                        "(at least min_proxy_budget·S)", lo=0, hi=1, lo_open=True)
    min_proxy_budget: int = setting(1024, "auto: the ladder may always spend Σ B'·S up to this many × S, whatever "
                                    "the target (small targets need proxies as costly as themselves)", lo=1)
    compute_budget: float = setting(0.0, "auto: the pipeline's budget, sweep + ladder, Σ B'·S ÷ the target's B·S, "
                                    "for B ≤ 4096, falling as √(4096/B) above it (0.25: 1/8 at B = 16384); at least "
                                    "min_proxy_budget·S, never more than the launch; the ladder gets what the sweep "
                                    "leaves; 0, the default = none (the ladder's own budget only: docs/ladder.md says "
                                    "why)", lo=0, hi=1)
    ladder_start: int = setting(16, "auto: the ladder's first proxy batch size (then doubled)", lo=1)
    ladder_seeds: int = setting(3, "auto: seeds of each new rung (their scatter is the launch's own spread)", lo=2)
    law_share: float = setting(0.3, "auto: the ladder stops adding runs once the law's own uncertainty (its mean at "
                               "B and its misspecification) is within this fraction of one launch's spread",
                               lo=0, lo_open=True)
    precision: float = setting(2.0, "auto: the half-width (accuracy points) wanted of the interval for one launch; "
                               "the ladder stops once it is reached, or when its next run would narrow the interval "
                               "by a smaller fraction than its cost's fraction of the target's compute; 0 = climb "
                               "until fit.law_share or the budget stops it", lo=0)
    max_half_width: float = setting(8.0, "an interval for one launch wider than this (accuracy points) is not "
                                    "launched on (exit 4, what to change) unless --launch-anyway", lo=0,
                                    lo_open=True)
    packed: bool = setting(False, "train a rung's new seeds as one jitted program on one device, each run with its "
                           "own secret, batches, ledger and folder (tanplan.engine.packed): a rung's device time "
                           "follows its examples; false (the default) = one run after another, or one device each")
    factors: tuple = setting((0.25, 0.5, 1.0, 2.0, 4.0), "k of the privacy-parameter search (S·k², B/k)",
                             item=float, lo=0, lo_open=True)
    level: float = setting(0.95, "level of the interval for one launch", lo=0.5, hi=1, hi_open=True)
    law: str = setting("auto", "auto | knee | noise | flat | log-linear: the form of the batch law; auto (the "
                       "default) averages knee and noise, weighted by how well each predicts the top rungs from "
                       "those below, their disagreement in the interval (tanplan.laws.batch_law, docs/ladder.md)",
                       choices=("knee", "noise", "flat", "log-linear", "auto"))
    spread_ratio: float = setting(0.0, "opt-in prior on one launch's spread: 0 (the default) = off, the spread "
                                  "read off the proxies' seeds as it is; r in (0, 4] = a launch scatters r × those "
                                  "seeds, so the interval's launch part is r²·their variance. Learned leave-one-"
                                  "setting-out on the four calibration settings r = 0.72-0.84; wrong where launches "
                                  "scatter more than the seeds say (fine-tuning, nothing frozen: 1.12): "
                                  "docs/calibration.md, \"An opt-in spread prior\"")

    def __post_init__(self):
        # 0 is off; above SPREAD_RATIO_MAX a "ratio" is a typo (82 meant as 0.82), not a prior
        if not 0.0 <= self.spread_ratio <= SPREAD_RATIO_MAX:
            raise UsageError(f"fit.spread_ratio = {self.spread_ratio!r} is not allowed: must be 0 (off) or a ratio "
                             f"in (0, {SPREAD_RATIO_MAX:g}]")


@dataclass(frozen=True)
class OptimizeConfig:
    """[optimize]: the budget-frontier search of `tanplan optimize` (tanplan.workflow.optimize)."""

    compute: int = setting(0, "compute budget C = B·S in examples; 0 = the target's train.batch_size × train.steps",
                           lo=0)
    candidates: int = setting(5, "frontier candidates simulated by proxies, those nearest train.steps", lo=3)
    seeds: int = setting(5, "proxy runs (seeds) per simulated candidate: fewer estimate the seed scatter poorly", lo=1)
    extend: int = setting(2, "when the best candidate is at an end of the simulated range, simulate up to this many "
                          "more frontier candidates beyond it, one at a time", lo=0)
    savings: float = setting(32.0, "every candidate's proxy is B' = B/savings (TAN Table 3: one factor for all), at "
                             "σ·B'/B and the same S (constant η_step), but never below min_proxy_batch_size", lo=1)
    min_proxy_batch_size: int = setting(128, "the smallest proxy batch B': below the batch law's knee a proxy is "
                                        "held back or helped by sampling noise its target does not have (mnist1d: "
                                        "B' ≈ 64-128); candidates with B < 4 × this are left off the frontier", lo=1)
    steps_factor: float = setting(2.0, "ratio of the S of consecutive simulated candidates; the frontier between "
                                  "them is predicted on a grid twice as fine", lo=1, lo_open=True)
    rescale: bool = setting(True, "scale the learning rate by S_ref/S (TAN §4.3: lr ∝ 1/S at constant η) and the "
                            "EMA horizon and warm-up by S/S_ref, S_ref = train.steps")
    law: str = setting("quadratic", "accuracy against ln S: quadratic | linear | flat | auto (drops the top term "
                       "while its interval contains 0)", choices=("quadratic", "linear", "flat", "auto"))
    level: float = setting(0.95, "level of the prediction and comparison intervals", lo=0.5, hi=1, hi_open=True)


@dataclass(frozen=True)
class TrackingConfig:
    """[tracking]: where a run's public scalars (the records of metrics.jsonl) go besides that file
    (tanplan.engine.tracking). Bookkeeping only: a resume may change it."""

    tensorboard: bool = setting(True, "write TensorBoard event files into the run folder's tensorboard/")
    writers: tuple = setting((), "more writers (MLflow, W&B, ...) by import path \"package.module:factory\"; "
                             "factory(run_dir, cfg) returns an object with write(step, scalars, wall_time) and "
                             "close()", item=str)


SECTIONS: dict[str, type] = {
    "experiment": ExperimentConfig,
    "data": DataConfig,
    "model": ModelConfig,
    "init": InitConfig,
    "task": TaskConfig,
    "privacy": PrivacyConfig,
    "train": TrainConfig,
    "pruning": PruningConfig,
    "tuning": TuningConfig,
    "sweep": SweepConfig,
    "fit": FitConfig,
    "optimize": OptimizeConfig,
    "tracking": TrackingConfig,
}

# Keys that moved: the old spelling is read as the new one.
RENAMED = {
    "train.prune_method": "pruning.method",
    "train.prune_rate": "pruning.rate",
    "train.grad_drop_method": "pruning.drop_method",
    "train.grad_drop_rate": "pruning.drop_rate",
    "train.snip_budget_share": "pruning.snip_budget_share",
}


@dataclass(frozen=True)
class Config:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    init: InitConfig = field(default_factory=InitConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    pruning: PruningConfig = field(default_factory=PruningConfig)
    tuning: TuningConfig = field(default_factory=TuningConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    optimize: OptimizeConfig = field(default_factory=OptimizeConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dict {section: {key: value}}."""
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        """A copy with dotted keys replaced, e.g. {"train.learning_rate": 2.0}; values are validated."""
        raw = self.to_dict()
        keys = {RENAMED.get(k, k) for k in overrides}
        if "train.steps" in keys and "train.epochs" in keys and overrides.get("train.epochs"):
            raise UsageError("train.steps and train.epochs are both set: give exactly one (S = ceil(epochs·N/B))")
        if "train.steps" in keys:
            raw["train"]["epochs"] = 0.0  # an S given replaces the epochs of the config it overrides
        for dotted, value in overrides.items():
            section, key = _split_key(dotted)
            raw.setdefault(section, {})[key] = value
        return config_from_dict(raw)

    def get(self, dotted: str) -> Any:
        section, key = _split_key(dotted)
        return getattr(getattr(self, section), key)


# What the (ε, δ) guarantee rests on: a sweep may not search these keys and a best.json may not set them
# (privacy.clip_norm and the rest stay searchable: the noise follows C, the guarantee does not move).
GUARANTEE_KEYS = ("privacy.epsilon", "privacy.total_epsilon", "privacy.delta", "privacy.sigma", "privacy.accountant", "privacy.noise_seed",
                  "privacy.private", "privacy.neighbouring", "privacy.allow_large_delta", "data.dataset", "data.path", "data.num_samples", "data.train_examples",
                  "data.seed", "train.batch_size", "train.steps")


def check_tunable(keys: Iterable[str], where: str) -> None:
    """UsageError naming the first key of `keys` that the privacy guarantee rests on (GUARANTEE_KEYS)."""
    for key in keys:
        canonical = RENAMED.get(key, key)
        if canonical in GUARANTEE_KEYS:
            raise UsageError(f"{where} sets {key}, which the privacy guarantee rests on: it is not allowed there; "
                             "set it in the config itself (tunable: everything but "
                             f"{', '.join(GUARANTEE_KEYS)})")


def with_tuned(cfg: "Config", overrides: Mapping[str, Any], where: str) -> "Config":
    """cfg with the overrides a sweep chose (best.json), refusing any key the guarantee rests on."""
    check_tunable(overrides, where)
    return cfg.with_overrides(dict(overrides)) if overrides else cfg


def check_value(cfg: "Config", dotted: str, value: Any) -> None:
    """UsageError unless cfg accepts value at the dotted key (a sweep's choice, checked before any trial)."""
    cfg.with_overrides({dotted: value})


def _split_key(dotted: str) -> tuple[str, str]:
    section, _, key = RENAMED.get(dotted, dotted).partition(".")
    sections = SECTIONS
    if section not in sections:
        raise UsageError(f"unknown config section {section!r} in {dotted!r}: valid sections are {', '.join(sections)}")
    valid = [f.name for f in dataclasses.fields(sections[section])]
    if key not in valid:
        raise UsageError(f"unknown config key {dotted!r}: valid keys of [{section}] are {', '.join(valid)}")
    return section, key


def _check_value(section: str, fld: dataclasses.Field, value: Any) -> Any:
    """Coerce value to the field's type and check its range; UsageError naming the key otherwise."""
    name = f"{section}.{fld.name}"
    kind = dict if fld.default is dataclasses.MISSING else type(fld.default)
    meta = fld.metadata
    if fld.default == "auto" and meta.get("item"):  # "auto" or a list
        if value == "auto":
            return value
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
            raise UsageError(f"{name} = {value!r} is not allowed: must be \"auto\" or a non-empty list, e.g. "
                             f"{_toml_value(list(meta['example']))}")
        kind = tuple
    if kind is tuple:
        if fld.default == () and isinstance(value, (list, tuple)) and not value:
            return ()  # a list whose default is empty may be empty
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
            raise UsageError(f"{name} = {value!r} is not allowed: must be a non-empty list, e.g. "
                             f"{_toml_value(list(fld.default))}")
        item = field(default=meta["item"](), metadata=meta)  # each item checked as a scalar setting
        item.name = fld.name
        return tuple(_check_value(section, item, v) for v in value)
    if kind is dict:
        if not isinstance(value, Mapping):
            raise UsageError(f"{name} = {value!r} is not allowed: must be a table of keys")
        return dict(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise UsageError(f"{name} = {value!r} is not allowed: must be true or false")
    elif kind is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise UsageError(f"{name} = {value!r} is not allowed: must be a whole number")
        value = int(value)
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(f"{name} = {value!r} is not allowed: must be a finite number")
        value = float(value)
    elif kind is str:
        if not isinstance(value, str):
            raise UsageError(f"{name} = {value!r} is not allowed: must be a string")
    if meta.get("choices") and value not in meta["choices"]:
        raise UsageError(f"{name} = {value!r} is not allowed: use one of {', '.join(meta['choices'])}")
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and (value < lo or (meta["lo_open"] and value == lo)):
        raise UsageError(f"{name} = {value!r} is not allowed: must be {'>' if meta['lo_open'] else '>='} {lo}")
    if hi is not None and (value > hi or (meta["hi_open"] and value == hi)):
        raise UsageError(f"{name} = {value!r} is not allowed: must be {'<' if meta['hi_open'] else '<='} {hi}")
    return value


def _section_from_dict(section: str, section_type: type, values: Mapping[str, Any]):
    if not isinstance(values, Mapping):
        raise UsageError(f"[{section}] must be a table of keys, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(section_type)}
    unknown = [k for k in values if k not in fields]
    if unknown:
        raise UsageError(f"unknown config key {section}.{unknown[0]}: valid keys of [{section}] are {', '.join(fields)}")
    return section_type(**{k: _check_value(section, fields[k], v) for k, v in values.items()})


def config_from_dict(raw: Mapping[str, Mapping[str, Any]]) -> Config:
    """A validated Config from {section: {key: value}}; missing keys take their defaults."""
    if not isinstance(raw, Mapping):
        raise UsageError(f"a config must be a table of sections, got {type(raw).__name__}")
    raw = _renamed(raw)
    unknown = [s for s in raw if s not in SECTIONS]
    if unknown:
        raise UsageError(f"unknown config section [{unknown[0]}]: valid sections are {', '.join(SECTIONS)}")
    cfg = Config(**{name: _section_from_dict(name, kind, raw.get(name, {})) for name, kind in SECTIONS.items()})
    _check_consistency(cfg)
    if cfg.train.epochs and cfg.train.steps != TrainConfig.steps:  # S comes from the epochs: steps is not read
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=TrainConfig.steps))
    return cfg


def _renamed(raw: Mapping[str, Any]) -> dict:
    """raw with keys of RENAMED moved to their new section and name (the new spelling wins)."""
    out = {name: dict(values) if isinstance(values, Mapping) else values for name, values in raw.items()}
    for old, new in RENAMED.items():
        old_section, old_key = old.split(".")
        values = out.get(old_section)
        if isinstance(values, dict) and old_key in values:
            new_section, new_key = new.split(".")
            target = out.setdefault(new_section, {})
            value = values.pop(old_key)
            if isinstance(target, dict):
                target.setdefault(new_key, value)
    return out


def train_steps(train: TrainConfig, dataset_size: int) -> int:
    """S of a run on N examples: train.steps, or ceil(epochs·N/B) when train.epochs > 0 (computed on the
    epochs' decimal text, so that 2.5 epochs of 4000 at B = 500 are exactly 20 steps, not 21)."""
    if not train.epochs:
        return int(train.steps)
    return steps_of_epochs(train.epochs, dataset_size, train.batch_size)


def steps_of_epochs(epochs: float, dataset_size: int, batch_size: int, what: str = "train.epochs") -> int:
    """S = ceil(E·N/B), at least 1: E passes over N examples in expectation at batch B, rounded UP (never fewer
    passes than asked), E read as its decimal text (2.5 epochs of 4000 at B = 500 are 20 steps, not 21).
    `what` names the setting in the refusal of an S above MAX_STEPS (train.epochs, --epochs)."""
    steps = math.ceil(Fraction(repr(float(epochs))) * dataset_size / batch_size)
    if steps > MAX_STEPS:
        raise UsageError(f"{what} = {epochs:g} is not allowed: {steps} steps at B = {batch_size} "
                         f"on {dataset_size} examples, above {MAX_STEPS} (where the accountants are trusted)")
    return max(1, steps)


def _check_consistency(cfg: Config) -> None:
    t = cfg.train
    if t.proxy_batch_size > t.batch_size:
        raise UsageError(f"train.proxy_batch_size = {t.proxy_batch_size} is not allowed: must be <= "
                         f"train.batch_size = {t.batch_size} (0 = no proxy)")
    privacy = cfg.privacy
    if privacy.neighbouring == "replace_one" and privacy.accountant != "pld":
        raise UsageError("privacy.neighbouring = 'replace_one' is not allowed with privacy.accountant = 'rdp': only the "
                         "PLD accountant computes replace-one for Poisson sampling; use privacy.accountant = \"pld\"")
    if 0 < privacy.delta < sys.float_info.min:
        raise UsageError(f"privacy.delta = {privacy.delta!r} is not allowed: it is below {sys.float_info.min:.3g}, the "
                         "smallest normal double (0 = the default N^-1.1)")
    sigma = privacy.sigma
    if 0 < sigma < SIGMA_MIN:
        raise UsageError(f"privacy.sigma = {sigma!r} is not allowed: must be 0 (calibrate from epsilon) or in "
                         f"[{SIGMA_MIN:g}, {SIGMA_MAX:g}], where the accountants are trusted")
    p = cfg.pruning
    masked = (p.method != "none" and p.rate > 0) or (p.drop_method != "none" and p.drop_rate > 0)
    if masked and t.grad_method == "ghost":
        raise UsageError("train.grad_method = 'ghost' is not possible with pruning or gradient dropping "
                         "(per-layer norms cannot see a coordinate mask); use auto or vmap")
    if t.nesterov and (t.momentum == 0 or t.dampening != 0):
        raise UsageError("train.nesterov = true is not allowed with momentum = 0 or dampening != 0 "
                         "(Nesterov needs momentum > 0 and no dampening)")
    for key, value in (("data.dataset", cfg.data.dataset), ("model.name", cfg.model.name), ("task.loss", cfg.task.loss),
                       ("task.metric", cfg.task.metric)):
        if ":" in value and not IMPORT_PATH.fullmatch(value):
            raise UsageError(f"{key} = {value!r} is not allowed: an import path reads \"package.module:name\"")
    for key, value in (("task.loss", cfg.task.loss), ("task.metric", cfg.task.metric)):
        if value and ":" not in value:
            raise UsageError(f"{key} = {value!r} is not allowed: use an import path \"package.module:function\", or "
                             "leave it empty for the default")
    _check_init(cfg.init)
    for path in cfg.tracking.writers:
        if not IMPORT_PATH.fullmatch(path):
            raise UsageError(f"tracking.writers entry {path!r} is not allowed: use an import path "
                             "\"package.module:factory\"")


def _check_init(init: InitConfig) -> None:
    """[init]: one source of weights at most, a loader by import path, regex patterns that compile."""
    if init.path and init.loader:
        raise UsageError("init.path and init.loader are both set: give exactly one source of initial weights")
    if init.loader and not IMPORT_PATH.fullmatch(init.loader):
        raise UsageError(f"init.loader = {init.loader!r} is not allowed: an import path reads "
                         "\"package.module:load_params\"")
    if init.adapters and not (init.path or init.loader):
        raise UsageError("init.adapters is not allowed without initial weights: adapters fine-tune a pretrained "
                         "model; give init.path or init.loader")
    for key in ("head", "trainable", "frozen", "adapters"):
        for pattern in getattr(init, key):
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as err:
                    raise UsageError(f"init.{key} pattern {pattern!r} is not a valid regex: {err}") from None


def parse_float(text: str) -> float:
    """A TOML float literal as a double; UsageError when it is not representable: a nonzero literal that
    underflows to 0 (1e-400 would silently become the default δ) or a finite one that overflows."""
    value = float(text)
    mantissa = re.split(r"[eE]", text)[0]
    if value == 0.0 and re.search(r"[1-9]", mantissa):
        raise UsageError(f"the number {text} is not allowed: it is not representable as a double (it underflows "
                         "to 0); write 0 for a default, or a number ≥ 2.2e-308")
    if math.isinf(value) and text.strip().lstrip("+-").lower() != "inf":
        raise UsageError(f"the number {text} is not allowed: it is not representable as a double (it overflows)")
    return value


def parse_override(text: str) -> tuple[str, Any]:
    """"section.key=value" -> ("section.key", value); value read as a TOML scalar, else as a string."""
    key, sep, value_text = text.partition("=")
    key = key.strip()
    if not sep or "." not in key:
        raise UsageError(f"--set {text!r} is not allowed: use section.key=value, e.g. train.steps=300")
    section, name = _split_key(key)
    value_text = value_text.strip()
    try:
        value = tomllib.loads(f"v = {value_text}", parse_float=parse_float)["v"]
    except UsageError as err:
        raise UsageError(f"{section}.{name} = {value_text} is not allowed: {str(err).split(': ', 1)[1]}") from None
    except tomllib.TOMLDecodeError:
        value = value_text
    fld = next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == name)
    if isinstance(fld.default, str) and not isinstance(value, str) and not fld.metadata.get("item"):
        value = value_text  # e.g. experiment.name=123 stays the text the user typed
    return f"{section}.{name}", value


def load_config(path: str | Path | None, overrides: Iterable[str] = ()) -> Config:
    """Read a TOML config (None = all defaults) and apply "section.key=value" overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_toml(path)
        train = raw.get("train")
        if isinstance(train, Mapping) and "steps" in train and train.get("epochs"):
            raise UsageError(f"config file {str(path)!r} sets train.steps and train.epochs: give exactly one")
    cfg = config_from_dict(raw)
    parsed = dict(parse_override(o) for o in overrides)
    return cfg.with_overrides(parsed) if parsed else cfg


def _read_toml(path) -> dict[str, Any]:
    """The TOML file's table; UsageError (one line) when it is missing, a folder, not UTF-8 or not TOML."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"config file {str(path)!r} is a folder, not a TOML config file")
    if not path.is_file():
        raise UsageError(f"config file {str(path)!r} does not exist")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"), parse_float=parse_float)
    except UnicodeDecodeError:
        raise UsageError(f"config file {str(path)!r} is not UTF-8 text: a config is a TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"config file {str(path)!r} is not valid TOML: {err}") from None
    except UsageError as err:
        raise UsageError(f"config file {str(path)!r}: {err}") from None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):  # e.g. [sweep] space: an inline table with quoted (dotted) keys
        return "{ " + ", ".join(f"{_toml_value(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def config_to_toml(cfg: Config) -> str:
    """The config as TOML text that load_config reads back to an equal Config."""
    return record_to_toml(cfg.to_dict())


def record_to_toml(record: Mapping[str, Mapping[str, Any]]) -> str:
    """A Config's record ({section: {key: value}}, Config.to_dict) as config_to_toml writes it."""
    lines = []
    for section, values in record.items():
        values = dict(values)
        if section == "train" and values["epochs"]:
            values.pop("steps")  # exactly one of steps and epochs (S = ceil(epochs·N/B))
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
        lines.append("")
    return "\n".join(lines)
