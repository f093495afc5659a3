"""The privacy ledger of a launch: every accounted release, and the ε spent so far.

    ledger = Ledger.fresh(plan_numbers)          # or Ledger.from_dict(checkpoint_meta["ledger"])
    ledger.record(first_step=0, last_step=6, q=..., sigma=..., delta=...)
    write_json_atomic(out / "ledger.json", ledger.to_dict())

Guarantee: a release is a range of DP-SGD steps whose noisy parameters reached a checkpoint (the only
state that leaves the process). Each step is one Poisson-subsampled Gaussian mechanism (rate q, noise
multiplier σ, add/remove-one neighbours: tanplan.privacy.accounting.dp_sgd_event), so the ε of the ledger is that
of the composition of all its releases, by the RDP accountant of record (PLD alongside when asked).
ledger.json is written just before each checkpoint, so a kill in between leaves it ahead of
the checkpoint (an over-report, never an under-report); the ledger inside the checkpoint is the one
a resume restores. A resumed run starts a new release at the step of the checkpoint it restores, so it adds only the
steps it actually takes; steps redone after a kill between two checkpoints repeat the identical
computation (same batch, same noise key), release nothing new and are not counted twice.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


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

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step


@dataclass
class Ledger:
    releases: list[Release] = field(default_factory=list)
    budget_epsilon: float | None = None
    delta: float | None = None

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.releases)

    @property
    def private(self) -> bool:
        return all(r.sigma > 0 for r in self.releases)

    def open_release(self, first_step: int, q: float, sigma: float, delta: float | None, *,
                     backend: str = "local", devices: int = 1) -> Release:
        """Start the release of this session at the step it resumes from (0 for a fresh run)."""
        if first_step != self.steps:
            raise ValueError(f"ledger holds {self.steps} steps but the run restarts at step {first_step}")
        session = 1 + max((r.session for r in self.releases), default=0)
        release = Release(first_step, first_step, q, sigma, delta, session, backend, devices)
        self.releases.append(release)
        return release

    def advance(self, release: Release, last_step: int) -> None:
        """The release now covers steps up to last_step (called when a checkpoint holds them)."""
        assert release is self.releases[-1] and last_step >= release.last_step
        release.last_step = last_step

    def epsilon(self, accountant: str = "rdp") -> float | None:
        """ε of all releases composed (0 before any step; None when any release is non-private)."""
        taken = [r for r in self.releases if r.steps > 0]
        if not taken:
            return 0.0
        if not self.private or self.delta is None:
            return None
        from tanplan.privacy import accounting

        return accounting.epsilon_of_events([accounting.dp_sgd_event(r.q, r.sigma, r.steps) for r in taken],
                                            self.delta, accountant)

    def to_dict(self, *, with_pld: bool = False) -> dict:
        out = {"steps": self.steps, "delta": self.delta, "budget_epsilon": self.budget_epsilon,
               "epsilon_rdp": self.epsilon("rdp"), "private": self.private,
               "releases": [{**asdict(r), "steps": r.steps} for r in self.releases]}
        if with_pld:
            out["epsilon_pld"] = self.epsilon("pld")
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Ledger":
        releases = [Release(**{k: v for k, v in r.items() if k != "steps"}) for r in d.get("releases", [])]
        return cls(releases, d.get("budget_epsilon"), d.get("delta"))
