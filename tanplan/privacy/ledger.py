"""The privacy ledger of a run: every accounted release, and the ε spent so far.

    ledger = Ledger(budget_epsilon=8.0, delta=1e-5)     # or Ledger.from_dict(checkpoint_meta["ledger"])
    release = ledger.open_release(0, q, sigma, delta)  # this session's steps, from the step it starts at
    ledger.advance(release, 6)                          # steps 1..6 reached a checkpoint
    write_json_atomic(out / "ledger.json", ledger.to_dict())

Guarantee: a release is a range of DP-SGD steps whose noisy parameters reached a checkpoint or an
evaluation (the only things that leave the process), or DP-SNIP's one saliency sum (`record_snip`). Each
step is one Poisson-subsampled Gaussian mechanism (rate q, noise multiplier σ:
tanplan.privacy.accounting.dp_sgd_event), DP-SNIP's release one more at its σ_snip, so the ε of the
ledger is that of the composition of all its releases by tanplan.privacy.accounting.epsilon_of_events,
under the accountant and neighbouring relation asked for. ledger.json states both relations
(add/remove-one: `epsilon_rdp`, `epsilon_pld`; replace-one: `epsilon_replace_one`, PLD) and which one is
of record (`neighbouring`, the one σ was calibrated to) with the accountant of record (`accountant`).
`epsilon` is the figure of record of the releases so far, the one a run shows (`record()` says under which
accountant and relation): the accountant and relation of record, except for a proxy's ledger, whose
own ε is RDP under add/remove-one (PLD at its small σ' is slow or cannot run, and its ε guarantees
nothing for the target). Every PLD figure of one ledger is computed on one grid (`pld_interval`, fixed
when the run starts from its planned releases), so that its ε grows with its steps.
ledger.json is written just before each checkpoint and each evaluation line of metrics.jsonl, so a
kill in between leaves it ahead of them (an over-report, never an under-report); the ledger inside the
checkpoint is the one a resume restores. A resumed run starts a new release at the step of the checkpoint it restores, so it adds only the
steps it actually takes; steps redone after a kill between two checkpoints repeat the identical
computation (same batch, same noise key), release nothing new and are not counted twice.

Inherited releases: a run that starts from the weights of another tanplan run ([init]) releases a function
of that run's releases too. `inherited` holds the releases of every run its weights descend from (its
init's, and its init's init's: tanplan.privacy.init_provenance reads them from their ledger.json), each group
marked `composed` when that run may have trained on this run's data. The ε of the ledger (`epsilon`,
`epsilon_of_record`, `pld_figures`) is that of its own releases and of every composed inherited release,
each once (`inherited_events`: a release met twice along a chain is one release), by the same
tanplan.privacy.accounting.epsilon_of_events under the same accountant and relation; `epsilon_this_run`
is that of its own releases alone (what its σ was calibrated to). `events()` stays the run's own releases,
so that composing several ledgers (`epsilon_of_ledgers`) adds the inherited ones once, not once per ledger.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from tanplan.privacy import accounting


@dataclass
class Release:
    first_step: int  # steps first_step+1 .. last_step were taken in this release
    last_step: int
    q: float
    sigma: float  # 0 = non-private (no guarantee)
    delta: float | None
    session: int
    backend: str = "local"
    devices: int = 1
    started_at: float = field(default_factory=time.time)
    kind: str = "dp_sgd"  # or "dp_snip": one noisy saliency sum at σ = sigma, before step 1
    # where the session ran and what computed it (tanplan.provenance); None in ledgers written before
    platform: str | None = None
    device_kind: str | None = None
    versions: dict | None = None

    @property
    def key(self) -> tuple:
        """What makes this release itself and no other: met again along a chain of inits, it is one release."""
        return (self.kind, self.first_step, self.last_step, self.q, self.sigma, self.session, self.started_at)

    @property
    def steps(self) -> int:
        """DP-SGD steps in this release (0 for the DP-SNIP release)."""
        return self.last_step - self.first_step if self.kind == "dp_sgd" else 0

    def event(self):
        """Its dp-accounting DpEvent (None when it released nothing yet)."""
        if self.kind == "dp_snip":
            return accounting.dp_sgd_event(self.q, self.sigma, 1)
        return accounting.dp_sgd_event(self.q, self.sigma, self.steps) if self.steps else None


@dataclass
class Inherited:
    """The releases of one run that a run's initial weights descend from ([init], followed down the chain)."""

    source: str  # that run's folder, as found
    releases: list[Release]
    composed: bool  # composed into this ledger's ε: that run may have trained on this run's data
    epsilon: float | None = None  # the ε of record that run stated (its own ledger's; None: non-private)
    data: dict | None = None  # its training data as configured (init_provenance.data_identity; None: unknown)

    @property
    def private(self) -> bool:
        return all(r.sigma > 0 for r in self.releases)

    def to_dict(self) -> dict:
        return {"source": self.source, "composed": self.composed, "epsilon": self.epsilon, "data": self.data,
                "releases": [{**asdict(r), "steps": r.steps} for r in self.releases]}

    @classmethod
    def from_dict(cls, d: dict) -> "Inherited":
        return cls(str(d["source"]), _releases(d.get("releases", [])), bool(d["composed"]), d.get("epsilon"),
                   d.get("data"))


def _releases(items) -> list[Release]:
    return [Release(**{k: v for k, v in r.items() if k != "steps"}) for r in items]


def unique_releases(groups, skip=()) -> list[Release]:
    """The releases of the composed groups, each once (by Release.key), leaving out those in skip (keys)."""
    seen, out = set(skip), []
    for group in groups:
        for release in group.releases if group.composed else ():
            if release.key not in seen:
                seen.add(release.key)
                out.append(release)
    return out


@dataclass
class Ledger:
    releases: list[Release] = field(default_factory=list)
    budget_epsilon: float | None = None
    delta: float | None = None
    accountant: str = "pld"  # of record: σ calibrated and the budget checked with it
    neighbouring: str = "add_remove"  # the relation of record
    proxy: bool = False  # a proxy's ledger: its own figure (`record()`) is RDP, add/remove-one
    pld_interval: float | None = None  # the PLD grid of every figure (None: each composition's own pld_grid)
    # public inputs the releases start from, at no privacy cost: {"init": {"source", "digest"}} for a run
    # from [init]'s weights when they are public (a tanplan run without privacy on other data, or files
    # tanplan did not write: assumed public); absent otherwise
    public: dict | None = None
    # the releases of the runs its initial weights descend from (tanplan.privacy.init_provenance)
    inherited: list[Inherited] = field(default_factory=list)
    init: dict | None = None  # what [init] was (init_provenance.InitProvenance.record); None without [init]
    data: dict | None = None  # the training data as configured (init_provenance.data_identity): read by a
    # later run started from this one, to judge whether these releases are on its data

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.releases)

    @property
    def private(self) -> bool:
        return all(r.sigma > 0 for r in [*self.releases, *self.inherited_releases()])

    def inherited_releases(self) -> list[Release]:
        """The composed inherited releases, each once, none of them one of this run's own."""
        return unique_releases(self.inherited, skip={r.key for r in self.releases})

    def inherited_events(self) -> list:
        """The DpEvents of the composed inherited releases."""
        return [e for e in (r.event() for r in self.inherited_releases()) if e is not None]

    def composed_events(self) -> list:
        """This run's releases and the composed inherited ones: what its ε is the composition of."""
        return self.events() + self.inherited_events()

    def record_snip(self, q: float, sigma_snip: float, delta: float | None) -> Release:
        """Record DP-SNIP's release (one Poisson-subsampled Gaussian at σ_snip), once, before any step."""
        if any(r.kind == "dp_snip" for r in self.releases) or self.steps:
            raise ValueError("DP-SNIP is released once, before the first step")
        release = Release(0, 0, q, sigma_snip, delta, 1, kind="dp_snip")
        self.releases.append(release)
        return release

    def open_release(self, first_step: int, q: float, sigma: float, delta: float | None, *,
                     backend: str = "local", devices: int = 1, platform: str | None = None,
                     device_kind: str | None = None, versions: dict | None = None) -> Release:
        """Start the release of this session at the step it resumes from (0 for a fresh run); platform,
        device_kind and versions record where it runs (tanplan.provenance.environment)."""
        if first_step != self.steps:
            raise ValueError(f"ledger holds {self.steps} steps but the run restarts at step {first_step}")
        session = 1 + max((r.session for r in self.releases if r.kind == "dp_sgd"), default=0)
        release = Release(first_step, first_step, q, sigma, delta, session, backend, devices, platform=platform,
                          device_kind=device_kind, versions=versions)
        self.releases.append(release)
        return release

    def advance(self, release: Release, last_step: int) -> None:
        """The release now covers steps up to last_step (called when a checkpoint holds them)."""
        assert release is self.releases[-1] and last_step >= release.last_step
        release.last_step = last_step

    def events(self) -> list:
        """The DpEvents of every release made so far."""
        return [e for e in (r.event() for r in self.releases) if e is not None]

    def epsilon(self, accountant: str = "rdp", neighbouring: str = "add_remove") -> float | None:
        """ε of all releases composed, the inherited ones too (0 before any release; None when any release
        is non-private)."""
        events = self.composed_events()
        if not events:
            return 0.0
        if not self.private or self.delta is None:
            return None
        return accounting.epsilon_of_events(events, self.delta, accountant, neighbouring,
                                            self.pld_interval if accountant == "pld" else None)

    def record(self) -> tuple[str, str]:
        """(accountant, neighbouring) of the figure this ledger's run shows and records as `epsilon`: those
        of record; RDP under add/remove-one for a proxy, and wherever PLD cannot run (σ below
        tanplan.privacy.accounting.PLD_SIGMA_MIN: a full-scale run is refused there before it starts)."""
        low = any(0 < r.sigma < accounting.PLD_SIGMA_MIN for r in [*self.releases, *self.inherited_releases()])
        if self.proxy or (self.accountant == "pld" and low):
            return "rdp", "add_remove"
        return self.accountant, self.neighbouring

    def epsilon_of_record(self) -> float | None:
        """ε of all releases under `record()`: what metrics.jsonl, the model card and summary.json show."""
        return self.epsilon(*self.record())

    def epsilon_this_run(self) -> float | None:
        """ε of record of this run's own releases alone (without what its init inherited)."""
        own = Ledger(self.releases, delta=self.delta, accountant=self.accountant, neighbouring=self.neighbouring,
                     proxy=self.proxy, pld_interval=self.pld_interval)
        return own.epsilon(*self.record())

    def pld_figures(self) -> dict:
        """{"epsilon_pld", "epsilon_replace_one", "pld_note"}: PLD under both relations where it can run
        (σ ≥ 0.1), else None with the reason (the RDP figure stands beside it)."""
        events = self.composed_events()
        if not events or not self.private or self.delta is None:
            zero = 0.0 if not events else None
            return {"epsilon_pld": zero, "epsilon_replace_one": zero, "pld_note": None}
        why = accounting.pld_unavailable(events)
        if why is not None:
            return {"epsilon_pld": None, "epsilon_replace_one": None, "pld_note": why.replace(": composed by RDP", "")}
        return {"epsilon_pld": self.epsilon("pld"), "epsilon_replace_one": self.epsilon("pld", "replace_one"),
                "pld_note": None}

    def to_dict(self, *, with_pld: bool = False) -> dict:
        """The releases and their ε: of record (`epsilon`, under `epsilon_accountant` and
        `epsilon_neighbouring`) and RDP always; with_pld, PLD under add/remove-one and replace-one too (a
        run's final ledger)."""
        accountant, neighbouring = self.record()
        out = {"steps": self.steps, "delta": self.delta, "budget_epsilon": self.budget_epsilon,
               "accountant": self.accountant, "neighbouring": self.neighbouring,
               "epsilon": self.epsilon_of_record(), "epsilon_accountant": accountant,
               "epsilon_neighbouring": neighbouring, "epsilon_rdp": self.epsilon("rdp"), "private": self.private,
               "proxy": self.proxy, "pld_interval": self.pld_interval,
               "releases": [{**asdict(r), "steps": r.steps} for r in self.releases]}
        if self.public:
            out["public"] = self.public
        if self.init:
            out["init"] = self.init
        if self.inherited:
            out["inherited"] = [group.to_dict() for group in self.inherited]
        if self.inherited_releases():  # `epsilon` composes them: this run's own figure beside it
            out["epsilon_this_run"] = self.epsilon_this_run()
        if self.data:
            out["data"] = self.data
        if with_pld:
            out.update(self.pld_figures())
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Ledger":
        return cls(_releases(d.get("releases", [])), d.get("budget_epsilon"), d.get("delta"),
                   d.get("accountant", "pld"), d.get("neighbouring", "add_remove"), bool(d.get("proxy", False)),
                   d.get("pld_interval"), d.get("public"),
                   [Inherited.from_dict(g) for g in d.get("inherited") or []], d.get("init"), d.get("data"))


def read_ledger(path) -> Ledger:
    """The Ledger a run wrote to ledger.json."""
    import json
    from pathlib import Path

    return Ledger.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def epsilon_of_ledgers(ledgers: list[Ledger], delta: float, accountant: str = "rdp",
                       neighbouring: str = "add_remove") -> float | None:
    """ε at δ of every release of every ledger composed: the cost to a dataset that all these runs trained
    on (sequential composition of their DpEvents, by tanplan.privacy.accounting.epsilon_of_events), with
    the composed releases they inherited from their inits, each once however many of them inherited it.
    None when any of them is non-private."""
    if any(not ledger.private for ledger in ledgers):
        return None
    events = [e for ledger in ledgers for e in ledger.events()] + inherited_events_of(ledgers)
    return accounting.epsilon_of_events(events, delta, accountant, neighbouring)


def inherited_events_of(ledgers, more=()) -> list:
    """The DpEvents of the composed releases the ledgers inherited (and of the groups in `more`), each once
    and none of them a release one of the ledgers made itself."""
    own = {r.key for ledger in ledgers for r in ledger.releases}
    groups = [g for ledger in ledgers for g in ledger.inherited] + list(more)
    return [e for e in (r.event() for r in unique_releases(groups, skip=own)) if e is not None]
