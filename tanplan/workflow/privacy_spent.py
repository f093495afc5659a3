"""What a stage's runs spent on the data they trained on: their ledgers, composed.

Every run folder holds ledger.json, the releases it made (tanplan.privacy.ledger). Runs that trained on
the same examples compose: `spent` reads their ledgers and returns the exact ε of all their releases
together (tanplan.privacy.accounting.epsilon_of_events), by RDP and by PLD. `tanplan sweep` and
`tanplan fit` report it for their runs; `tanplan run` composes every run that touched the private set.
"""

from __future__ import annotations

from pathlib import Path

from tanplan.fileio import write_json_atomic
from tanplan.privacy.ledger import Ledger, epsilon_of_ledgers, read_ledger

FILE = "privacy_spent.json"


def ledgers_under(folder: str | Path) -> list[Ledger]:
    """The ledgers of every run folder below `folder` (each run writes one ledger.json)."""
    return [read_ledger(path) for path in sorted(Path(folder).rglob("ledger.json"))]


def spent(ledgers: list[Ledger], *, pld: bool = True) -> dict:
    """{"runs", "delta", "epsilon_rdp", "epsilon_pld"}: every release of the ledgers composed at their δ.

    PLD composes the runs' privacy loss distributions (tighter than RDP; seconds for a dozen proxies).
    ε is None when a run was non-private, 0 when nothing was released."""
    taken = [ledger for ledger in ledgers if ledger.events()]
    deltas = {ledger.delta for ledger in taken}
    if len(deltas) > 1:
        raise ValueError(f"runs accounted at different δ cannot be composed here: {sorted(deltas)}")
    delta = deltas.pop() if deltas else None
    out = {"runs": len(ledgers), "delta": delta, "epsilon_rdp": 0.0, "epsilon_pld": 0.0 if pld else None}
    if taken:
        out["epsilon_rdp"] = epsilon_of_ledgers(taken, delta, "rdp")
        out["epsilon_pld"] = epsilon_of_ledgers(taken, delta, "pld") if pld else None
    return out


def report(folder: str | Path, out: str | Path, what: str) -> dict:
    """spent() of every run below `folder`, written to out/privacy_spent.json with a sentence saying what it is."""
    info = spent(ledgers_under(folder))
    info["what"] = (f"the exact ε of the {info['runs']} {what} composed: what they cost the examples they trained on "
                    "(the private set, unless they trained on public data)")
    write_json_atomic(Path(out) / FILE, info)
    return info
