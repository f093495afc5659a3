"""The summary of one run (summary.json), the same schema for `train`, every proxy and the launch: what
`train_and_evaluate`, `launch_on_ray` and every train_fn return.

Each figure has one name across train, launch and run summaries (docs/summary.md lists them). Only what
is safe to publish goes here: no key, no seed of the noise, no batch composition (an audited run's secret
canary draw travels beside it, never in it: tanplan.engine.audited). JAX-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from tanplan.outcomes.base import Result, optional
from tanplan.privacy.plan import Plan


@dataclass(frozen=True, kw_only=True)
class Layout(Result):
    """The planned (public) padded layout of a step's batch: chunks × chunk_size rows (tanplan.dp.sampling)."""

    chunks: int
    chunk_size: int


@dataclass(frozen=True, kw_only=True)
class Pruning(Result):
    """What a run pruned and dropped (tanplan.engine.sparsity): [pruning]'s settings and the weights kept."""

    method: str
    rate: float
    drop_method: str
    drop_rate: float
    kept_fraction: float


@dataclass(frozen=True, kw_only=True)
class Init(Result):
    """Where a run's initial weights came from ([init]; public) and which parameters it trained."""

    source: str  # init.path or init.loader, as configured ("" for experiment.seed's draw)
    digest: str | None  # blake2b of the source's paths, shapes, dtypes and bytes (tanplan.models.init)
    reinitialised: tuple[str, ...]  # head parameters re-initialised from experiment.seed
    trainable_parameters: int  # scalars that trained
    frozen_parameters: int  # scalars kept at their initial values, bit for bit
    # where the weights were trained and what of it composes (tanplan.privacy.init_provenance: kind, note,
    # the init's ε there, the releases composed, epsilon_this_run); absent in summaries written before it
    provenance: Mapping | None = optional()


@dataclass(frozen=True, kw_only=True)
class RunSummary(Result):
    # what the run reached (on the held-out test set; EMA weights when the EMA is on)
    test_accuracy: float | None
    test_loss: float | None
    # what it cost: the composition of every release it made (its ledger), at δ
    epsilon_rdp: float | None
    epsilon_pld: float | None  # None for proxies: PLD at a proxy's small σ is slow; a proxy's ε guarantees nothing
    epsilon_replace_one: float | None  # the same releases under replace-one neighbours (PLD); None for proxies
    neighbouring: str  # the relation of record (privacy.neighbouring): the one σ was calibrated to
    delta: float | None
    accountant: str  # the accountant of record (privacy.accountant): σ calibrated and the budget checked with it
    private: bool
    noise_secret: bool  # False when privacy.noise_seed made the noise reproducible from the config: NOT private
    # what it trained: Poisson rate q = B/N, noise σ·C on each step's clipped sum
    dataset_size: int
    batch_size: int
    steps: int  # steps taken in all sessions
    planned_steps: int
    sigma: float
    snip_sigma: float | None  # σ of the DP-SNIP release, when pruning.method = "dp_snip"
    clip_norm: float
    target: Plan | None  # the target Plan when this run is a proxy of it
    # how it ran
    grad_method: str
    layout: Layout  # the planned (public) layout; a batch that outgrew it is not said
    backend: str
    devices: int
    processes: int
    resumed_from_step: int
    steps_this_run: int
    wall_seconds: float
    train_seconds: float
    samples_per_second: float | None  # B (expected batch) × steps timed / train_seconds: no sampled size
    params_checksum: str
    evaluated_at_step: int | None
    diverged_at_step: int | None = None
    interrupted: str | None = None  # the signal that stopped it (checkpoint saved; continue with --resume)
    test_accuracy_no_ema: float | None = None
    test_accuracy_augtest: float | None = None
    pruning: Pruning | None = None
    model: str | None = None  # folder of the released model, relative to the run folder
    # scalars that took gradients, noise and updates (adapters included), and those kept bit for bit ([init]
    # frozen / adapters); None in summaries written before they existed
    trainable_parameters: int | None = None
    frozen_parameters: int | None = None
    # what produced these numbers (tanplan.provenance): JAX's platform, the device kind, library versions
    platform: str | None = None
    device_kind: str | None = None
    versions: Mapping | None = None
    # the figure of record of its ledger, the ε its progress bar, metrics.jsonl, TensorBoard and model card
    # show: under the config's accountant and relation; RDP under add/remove-one for a proxy (None in
    # summaries written before it existed)
    epsilon: float | None = None
    epsilon_accountant: str | None = None
    epsilon_neighbouring: str | None = None
    # the privacy audit's run only (tanplan.workflow.audit): trained with that many gradient canaries, so
    # its outputs are not a private release; absent from every other summary.json
    audit_canaries: int | None = optional()
    private_release: bool | None = optional()
    # a run started from [init]'s weights or with frozen parameters; absent from every other summary.json
    init: Init | None = optional()


FIELDS = tuple(f.name for f in dataclasses.fields(RunSummary) if not f.metadata.get("omit_none"))
"""The keys of every summary.json (an audited run's adds audit_canaries and private_release)."""
