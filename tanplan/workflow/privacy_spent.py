"""What a stage's runs spent on the data they trained on: their ledgers, composed.

Every run folder holds ledger.json, the releases it made (tanplan.privacy.ledger). Runs that trained on
the same examples compose: `spent` reads their ledgers and returns the exact ε of all their releases
together (tanplan.privacy.accounting.epsilon_of_events), by RDP and by PLD (add/remove-one), and for the
total on the private set by PLD under replace-one too. Where PLD cannot run (a proxy's σ' below 0.1) its figures are None with a note and RDP
stands: a stage that trained never fails on its report. `tanplan sweep` and `tanplan fit` report it for
their runs; `tanplan run`, `tanplan optimize` and `tanplan launch --best` compose every run that touched
the private set (`totals`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tanplan.fileio import write_json_atomic
from tanplan.outcomes.privacy_spent import Spent, Totals, TuningRecord
from tanplan.privacy import accounting
from tanplan.privacy.ledger import Ledger, epsilon_of_ledgers, read_ledger

FILE = "privacy_spent.json"


def ledgers_under(folder: str | Path) -> list[Ledger]:
    """The ledgers of every run folder below `folder` (each run writes one ledger.json)."""
    return [read_ledger(path) for path in sorted(Path(folder).rglob("ledger.json"))]


def spent(ledgers: list[Ledger], *, pld: bool = True, replace_one: bool = False) -> Spent:
    """Every release of the ledgers composed at their δ. `epsilon` is the tightest figure that could run
    (PLD, else RDP: `accountant` names it); `note` says why PLD did not run, when it did not. replace_one:
    PLD under replace-one too (a second composition: `totals` asks for it, a stage's own report does not).

    ε is None when a run was non-private, 0 when nothing was released."""
    taken = [ledger for ledger in ledgers if ledger.events()]
    deltas = sorted({ledger.delta for ledger in taken if ledger.delta is not None})
    # A composition's events do not depend on δ: it is reported at the smallest δ of its runs (the strictest).
    delta = deltas[0] if deltas else None
    zero = 0.0 if pld else None
    nothing = Spent(runs=len(ledgers), delta=delta, epsilon_rdp=0.0, epsilon_pld=zero, epsilon_replace_one=zero,
                    epsilon=0.0, accountant="pld" if pld else "rdp", note=None)
    if not taken:
        return nothing
    several = f"runs accounted at {len(deltas)} values of δ, composed at the smallest" if len(deltas) > 1 else None
    rdp = epsilon_of_ledgers(taken, delta, "rdp")
    by_rdp = replace(nothing, epsilon_rdp=rdp, epsilon=rdp, accountant="rdp", epsilon_pld=None,
                     epsilon_replace_one=None)
    if not pld or rdp is None:
        return by_rdp
    why = accounting.pld_unavailable([e for ledger in taken for e in ledger.events()])
    if why is not None:
        return replace(by_rdp, note="; ".join(filter(None, [why, several])))
    eps_pld = epsilon_of_ledgers(taken, delta, "pld")
    return replace(by_rdp, epsilon_pld=eps_pld, epsilon=eps_pld, accountant="pld", note=several,
                   epsilon_replace_one=epsilon_of_ledgers(taken, delta, "pld", "replace_one") if replace_one else None)


def describe(info: Spent) -> str:
    """One line: the composed ε with its accountant, RDP beside it, and the note."""
    if not info.delta:
        return "nothing released"
    if info.epsilon is None:
        return "not private: no guarantee"
    text = f"ε = {info.epsilon:.4g} ({info.accountant.upper()}"
    if info.accountant == "pld":
        text += f"; RDP {info.epsilon_rdp:.4g}"
        if info.epsilon_replace_one is not None:
            text += f"; replace-one {info.epsilon_replace_one:.4g}"
    text += f") at δ = {info.delta:.3g}"
    return text + (f" ({info.note})" if info.note else "")


def report(folder: str | Path, out: str | Path, what: str, tune=None) -> Spent:
    """spent() of every run below `folder`, written to out/privacy_spent.json with a sentence saying what it is
    and, given the stage's Tuning, which data it is the cost to."""
    info = spent(ledgers_under(folder))
    if tune is None:
        whose = "the examples they trained on"
    elif tune.data == "public":
        whose = (f"the public tuning data they trained on ({tune.source}); they saw no private example, so "
                 "this is no cost to the private set")
    else:
        whose = f"the private training set ({tune.source}): compose it with the launch's ε"
    info = replace(info, what=f"the exact ε of the {info.runs} {what} composed: what they cost {whose}",
                   tuning=tune.record() if tune is not None else None)
    write_json_atomic(Path(out) / FILE, info.to_dict())
    return info


def totals(launch: Path | None, proxy_folders: list[Path], tune) -> Totals:
    """The total ε of every release that touched the private training set, composed from the ledgers of the
    runs that trained on it: the launch (None when nothing launched), and with private tuning ([tuning] data =
    "private") every proxy run below proxy_folders. Public-tuning proxies never saw the private set.

    tune: the Tuning of the proxies, or its TuningRecord (a best.json's)."""
    record = tune if isinstance(tune, TuningRecord) else tune.record()
    private = record.tuning_data == "private"
    folders = ([launch] if launch is not None else []) + (list(proxy_folders) if private else [])
    ledgers = [ledger for folder in folders if folder.is_dir() for ledger in ledgers_under(folder)]
    total = spent(ledgers, replace_one=True)
    launched = launch is not None and launch.is_dir()
    proxies = len(ledgers) - int(launched)
    if record.tuning_data == "public":
        guarantee = ("the launch's ε is the guarantee for the private training examples: the proxies trained on "
                     f"{record.source} and released nothing about them")
    else:
        guarantee = (f"the total ε is the guarantee for the private training examples: it composes every release "
                     f"that touched them ({proxies} proxy runs{' and the launch' if launched else ''}); the "
                     "launch's own ε holds only for someone who sees nothing of the proxies")
    return Totals(tuning_data=record.tuning_data, tuning=record, epsilon_total_rdp=total.epsilon_rdp,
                  epsilon_total_pld=total.epsilon_pld, epsilon_total_replace_one=total.epsilon_replace_one,
                  epsilon_total=total.epsilon, epsilon_total_accountant=total.accountant,
                  epsilon_total_note=total.note, epsilon_total_runs=total.runs, guarantee=guarantee)
