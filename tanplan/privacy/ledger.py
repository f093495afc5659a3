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
    def steps(self) -> int:
        """DP-SGD steps in this release (0 for the DP-SNIP release)."""
        return self.last_step - self.first_step if self.kind == "dp_sgd" else 0

    def event(self):
        """Its dp-accounting DpEvent (None when it released nothing yet)."""
        if self.kind == "dp_snip":
            return accounting.dp_sgd_event(self.q, self.sigma, 1)
        return accounting.dp_sgd_event(self.q, self.sigma, self.steps) if self.steps else None


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
    # from [init]'s weights (public data only; absent otherwise)
    public: dict | None = None

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.releases)

    @property
    def private(self) -> bool:
        return all(r.sigma > 0 for r in self.releases)

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
        """ε of all releases composed (0 before any release; None when any release is non-private)."""
        events = self.events()
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
        low = any(0 < r.sigma < accounting.PLD_SIGMA_MIN for r in self.releases)
        if self.proxy or (self.accountant == "pld" and low):
            return "rdp", "add_remove"
        return self.accountant, self.neighbouring

    def epsilon_of_record(self) -> float | None:
        """ε of all releases under `record()`: what metrics.jsonl, the model card and summary.json show."""
        return self.epsilon(*self.record())

    def pld_figures(self) -> dict:
        """{"epsilon_pld", "epsilon_replace_one", "pld_note"}: PLD under both relations where it can run
        (σ ≥ 0.1), else None with the reason (the RDP figure stands beside it)."""
        events = self.events()
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
        if with_pld:
            out.update(self.pld_figures())
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Ledger":
        releases = [Release(**{k: v for k, v in r.items() if k != "steps"}) for r in d.get("releases", [])]
        return cls(releases, d.get("budget_epsilon"), d.get("delta"), d.get("accountant", "pld"),
                   d.get("neighbouring", "add_remove"), bool(d.get("proxy", False)), d.get("pld_interval"),
                   d.get("public"))


def read_ledger(path) -> Ledger:
    """The Ledger a run wrote to ledger.json."""
    import json
    from pathlib import Path

    return Ledger.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def epsilon_of_ledgers(ledgers: list[Ledger], delta: float, accountant: str = "rdp",
                       neighbouring: str = "add_remove") -> float | None:
    """ε at δ of every release of every ledger composed: the cost to a dataset that all these runs trained
    on (sequential composition of their DpEvents, by tanplan.privacy.accounting.epsilon_of_events).
    None when any of them is non-private."""
    if any(not ledger.private for ledger in ledgers):
        return None
    return accounting.epsilon_of_events([e for ledger in ledgers for e in ledger.events()], delta, accountant,
                                        neighbouring)
