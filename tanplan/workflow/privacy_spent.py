"""What a stage's runs spent on the data they trained on: their ledgers, composed.

Every run folder holds ledger.json, the releases it made (tanplan.privacy.ledger). Runs that trained on
the same examples compose: `spent` reads their ledgers and returns the exact ε of all their releases
together (tanplan.privacy.accounting.epsilon_of_events), by RDP and by PLD. `tanplan sweep` and
`tanplan fit` report it for their runs; `tanplan run` and `tanplan optimize` compose every run that touched
the private set (`totals`).
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


def totals(launch: Path | None, proxy_folders: list[Path], tune) -> dict:
    """The total ε of every release that touched the private training set, composed from the ledgers of the
    runs that trained on it: the launch (None when nothing launched), and with private tuning ([tuning] data =
    "private") every proxy run below proxy_folders. Public-tuning proxies never saw the private set."""
    folders = ([launch] if launch is not None else []) + (list(proxy_folders) if tune.data == "private" else [])
    ledgers = [ledger for folder in folders if folder.is_dir() for ledger in ledgers_under(folder)]
    total = spent(ledgers)
    launched = launch is not None and launch.is_dir()
    proxies = len(ledgers) - int(launched)
    if tune.data == "public":
        guarantee = ("the launch's ε is the guarantee for the private training examples: the proxies trained on "
                     f"{tune.source} and released nothing about them")
    else:
        guarantee = (f"the total ε is the guarantee for the private training examples: it composes every release "
                     f"that touched them ({proxies} proxy runs{' and the launch' if launched else ''}); the "
                     "launch's own ε holds only for someone who sees nothing of the proxies")
    return {"tuning_data": tune.data, "tuning": tune.to_dict(), "epsilon_total_rdp": total["epsilon_rdp"],
            "epsilon_total_pld": total["epsilon_pld"], "epsilon_total_runs": total["runs"], "guarantee": guarantee}
