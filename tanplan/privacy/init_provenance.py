"""What a run starts from ([init], or a baseline's released model), read from the files tanplan wrote beside
the weights, and what those weights cost this run's private set. JAX-free: the config check reads it before
any data is loaded.

    prov = read(cfg)               # None without [init]; UsageError for an init that can never be one
    prov.kind                      # "composed" | "other_data" | "public" | "assumed_public"
    prov.events()                  # the DpEvents this run's ε composes with its own
    check_total(prov, plan, cfg)   # BudgetExceeded above privacy.total_epsilon, before anything trains

Where the weights come from. init.path names a run folder (a `tanplan run` folder: its launch/), its model/
folder, a file inside one (model/params.npz) or an orbax checkpoint inside its checkpoint/ folder: the folder
tree above the path (its folder and up to two folders above it) is searched for a run folder (ledger.json, summary.json or an audit's
audit_run.json) or a released model (model.json with the "epsilon" every model card states). Nothing found,
or init.loader: the weights are not tanplan's, taken as public ("assumed public, not produced by tanplan");
tanplan cannot see where they were trained.

What is refused (UsageError, exit 2, before any data is read):
- an audit's run (audit_run.json in its folder, or summary.json or model.json with audit_canaries, or
  private_release false): trained with canaries for the audit only, never a release, never an init;
- a run folder whose ledger.json is missing or unreadable, or whose summary.json is unreadable, and a
  model/ folder moved away from its run folder: what they released cannot be read, so it cannot be composed;
- a run that trained without privacy (a release at σ = 0) on data that may be this run's: its weights are
  a non-private function of the private set (ε = ∞).
- init.path that is the private data file or folder (data.path) or a byte copy of it, checked before it is
  read, so that no digest of the private data is ever computed for, or written to, the run's files.

Which releases compose (the data rule). Each run the weights descend from (the init's run, and every run
its ledger inherited, down the chain) is judged against this run's training data, by the data as
configured (`data_identity`: data.dataset; for mnist1d its generator's seed; for a file or folder its
path; for a loader by import path its path and options; data.num_samples and data.train_examples, which
pick subsets, and the seed of any other dataset, which picks a split, are ignored). `may_share` says
whether the two may hold the same examples:
- another data.dataset, another mnist1d seed (tanplan's public mnist1d draw is data.seed + 1), a loader's
  other options, or two files or folders that both exist and are neither the same file nor byte copies
  (size and blake2b, compared here, never written): clearly other data;
- the same, or anything that cannot be read (no config.toml, a path that no longer exists): may be the same
  (conservative).
A private run (every release at σ > 0) on data that may be the same composes: its releases (and the ones it
inherited that compose) join this run's ledger as inherited releases, each once, and compose into its ε of
record; on clearly other data it is recorded, "trained privately on other data (ε X there), not composed".
A run without privacy on clearly other data (`tanplan pretrain` on the public set) is public, recorded with
its digest. Copies of the private examples in another file or format are other data to this rule: the
configuration is what names the private set.

Guarantee: the ε of record of a run from a composed init is that of the composition, by
tanplan.privacy.accounting.epsilon_of_events under the run's accountant and neighbouring relation at its
δ, of every DP-SGD (and DP-SNIP) release of this run and of every run its weights descend from that may
have trained on its data: the released model is a post-processing of all of them. σ is still calibrated
to privacy.epsilon for this run's own releases; the composition is what is recorded and gated.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from tanplan.config import Config, load_config
from tanplan.errors import BudgetExceeded, UsageError
from tanplan.plugins import is_import_path
from tanplan.privacy import accounting
from tanplan.privacy.ledger import Inherited, Ledger, unique_releases

AUDIT_MARK = "audit_run.json"  # tanplan.engine.run_folder.AUDIT_MARKER: an audit's run, marked when opened
LEVELS = 2  # folders above the path's searched for its run: model/params.npz, checkpoint/<step>
PIPELINE_MARK = "run.json"  # tanplan.workflow.pipeline.RUN_FILE: a `tanplan run` folder, its launch in launch/


def released_folder(path: str | Path, setting: str = "init.path") -> Path:
    """path, or the launch/ run folder of a `tanplan run` folder (run.json in it): the run that released the
    model, <run>/launch/model. UsageError when that `tanplan run` released none (it did not launch)."""
    path = Path(path).expanduser()
    if not (path / PIPELINE_MARK).is_file() or (path / "model").is_dir():
        return path
    launch = path / "launch"
    if not (launch / "model" / "params.npz").is_file():
        raise UsageError(f"{setting} = {str(path)!r} is a `tanplan run` folder that released no model (no "
                         f"{str(launch / 'model')!r}: it did not launch); launch it (--resume --launch-anyway) or "
                         "start from another run")
    return launch


# ---------------------------------------------------------------------------------------------------
# The data rule


def data_identity(data) -> dict:
    """[data] (a DataConfig) as the identity of a training set: what `may_share` compares."""
    ident: dict = {"dataset": data.dataset}
    if data.dataset == "mnist1d":
        ident["seed"] = data.seed  # the generator's draw: another seed is other examples
    elif data.path:
        path = Path(data.path).expanduser()
        ident["path"] = str(path.absolute()) if path.exists() else data.path
    if is_import_path(data.dataset) and data.options:
        ident["options"] = dict(data.options)
    return ident


def may_share(theirs: dict | None, mine: dict) -> bool:
    """Whether a run on `theirs` may have trained on examples of `mine` (see the module docstring)."""
    if not isinstance(theirs, dict) or "dataset" not in theirs:
        return True  # unknown: conservative
    if theirs["dataset"] != mine["dataset"]:
        return False
    if mine["dataset"] == "mnist1d":
        return theirs.get("seed") == mine.get("seed")
    if (theirs.get("options") or {}) != (mine.get("options") or {}):
        return False
    return same_source(str(theirs.get("path") or ""), str(mine.get("path") or ""))


def same_source(a: str, b: str) -> bool:
    """Whether two data paths may name the same data: equal, the same file, or byte copies; unknown (one
    cannot be read) counts as the same."""
    if a == b:
        return True
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    try:
        if not (a and b and pa.exists() and pb.exists()):
            return True
        return os.path.samefile(pa, pb) or (pa.is_file() and pb.is_file() and same_bytes(pa, pb))
    except OSError:  # unreadable: conservative
        return True


def same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (size, then blake2b): the digests are compared, never kept."""
    if a.stat().st_size != b.stat().st_size:
        return False
    return _file_digest(a) == _file_digest(b)


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_not_private_data(init_path: str, data) -> None:
    """UsageError when init.path is the private data file or folder (data.path) or a byte copy of it: its
    arrays would be read as weights and its digest published. The one line names no digest."""
    if not (init_path and data.path):
        return
    mine, theirs = Path(init_path).expanduser(), Path(data.path).expanduser()
    try:
        same = theirs.exists() and mine.exists() and (os.path.samefile(mine, theirs) or (
            mine.is_file() and theirs.is_file() and same_bytes(mine, theirs)))
    except OSError:
        return  # unreadable: the reader of init.path says why, in one line
    if same:
        raise UsageError(f"init.path = {init_path!r} is not allowed: it is the private data (data.path = "
                         f"{data.path!r}, or a copy of it); initial weights are never the private data")


# ---------------------------------------------------------------------------------------------------
# The provenance


KINDS = {
    "composed": "trained with DP-SGD on data that may be this run's: its releases compose into this run's ε",
    "other_data": "trained privately on other data (ε {eps} there), not composed",
    "public": "trained without privacy on other data: public",
    "assumed_public": "assumed public, not produced by tanplan",
}


@dataclass(frozen=True)
class InitProvenance:
    """Where a run's initial weights come from and what they cost its private set."""

    source: str  # init.path or init.loader, as configured (or the released model's folder)
    kind: str  # a key of KINDS
    run: str | None = None  # the tanplan run folder the weights were released by
    groups: tuple[Inherited, ...] = ()  # every run the weights descend from, judged against this run's data
    epsilon_there: float | None = None  # the ε of record the init's run stated (its ledger's)

    def releases(self) -> list:
        """The composed releases, each once."""
        return unique_releases(self.groups)

    def events(self) -> list:
        return [e for e in (r.event() for r in self.releases()) if e is not None]

    @property
    def note(self) -> str:
        eps = "-" if self.epsilon_there is None else f"{self.epsilon_there:.3g}"
        return KINDS[self.kind].format(eps=eps)

    def record(self, digest: str | None = None) -> dict:
        """What ledger.json (`init`), summary.json (init.provenance) and model.json (`init`) state."""
        composed = [g for g in self.groups if g.composed]
        return {"source": self.source, "digest": digest, "kind": self.kind, "note": self.note, "run": self.run,
                "epsilon_there": self.epsilon_there, "composed_runs": len(composed),
                "composed_releases": len(self.releases())}

    def public(self, digest: str) -> dict | None:
        """ledger.json's `public` entry: the init when nothing of it composes (no cost to this private set),
        else None."""
        if self.kind != "composed":
            return {"init": {"source": self.source, "digest": digest, "provenance": self.note}}
        return None


def read(cfg: Config) -> InitProvenance | None:
    """The provenance of cfg's [init] judged against cfg's data (None without [init]); UsageError for an init
    that can never be one (see the module docstring)."""
    if cfg.init.loader:
        return InitProvenance(cfg.init.loader, "assumed_public")
    if not cfg.init.path:
        return None
    check_not_private_data(cfg.init.path, cfg.data)
    return of_path(cfg.init.path, data_identity(cfg.data), "init.path")


def of_path(path: str | Path, data: dict | None, setting: str = "the released model") -> InitProvenance:
    """The provenance of the weights at `path` for a run on `data` (a data_identity; None: unknown, so every
    private release composes). A `tanplan run` folder stands for its launch (released_folder)."""
    text = str(path)
    run, model = _find(released_folder(path, setting), text, setting)
    if run is None and model is None:
        return InitProvenance(text, "assumed_public")
    if run is None:
        _orphan_model(model, text, setting)
    summary = _read_json(run / "summary.json", text, setting, required=False)
    marker = {"private_release": False} if (run / AUDIT_MARK).exists() else None  # written before its first step
    for card in (marker, summary, _read_json(run / "model" / "model.json", text, setting, required=False)):
        _refuse_audit(card, text, setting)
    ledger, raw = _read_ledger(run, text, setting)
    groups = _judged([_own_group(run, ledger, raw), *ledger.inherited], data, text, setting)
    kind = ("composed" if any(g.composed for g in groups) else
            "other_data" if any(g.releases and g.private for g in groups) else "public")
    there = raw.get("epsilon") if ledger.private else None  # as that run stated it (of record there)
    return InitProvenance(text, kind, str(run), tuple(groups), there if isinstance(there, (int, float)) else None)


def _find(path: Path, text: str, setting: str) -> tuple[Path | None, Path | None]:
    """(the run folder above path, the released model folder above it), either None."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as err:  # a missing path, a symlink loop
        if not path.exists() and not path.is_symlink():
            return None, None  # the reader of init.path says it does not exist
        raise UsageError(f"{setting} = {text!r} cannot be resolved: {type(err).__name__}") from None
    folder = real if real.is_dir() else real.parent
    model = None
    for candidate in [folder, *folder.parents][:LEVELS + 1]:
        if any((candidate / name).exists() for name in ("ledger.json", "summary.json", AUDIT_MARK)):
            return candidate, model
        if model is None and _is_card(candidate / "model.json"):
            model = candidate
    return None, model


def _is_card(path: Path) -> bool:
    """Whether path is a model card a tanplan run wrote (it always states "epsilon"); an unreadable one counts."""
    if not path.is_file():
        return False
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return True
    return isinstance(card, dict) and "epsilon" in card


def _orphan_model(model: Path, text: str, setting: str) -> None:
    """A released model without its run folder: refused (an audit's, or what it released cannot be read)."""
    card = _read_json(model / "model.json", text, setting, required=True)
    _refuse_audit(card, text, setting)
    raise UsageError(f"{setting} = {text!r} is a model tanplan released ({str(model)!r}) without its run folder "
                     "(ledger.json, config.toml): what it released and on which data cannot be read; start from "
                     "the run folder itself")


def _read_json(path: Path, text: str, setting: str, *, required: bool) -> dict | None:
    if not path.exists():
        if not required:
            return None
        raise UsageError(f"{setting} = {text!r}: its run folder holds no {path.name} ({str(path)!r}): what the run "
                         "released cannot be read, so it cannot be composed; restore it or start from other weights")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        value = None
    if not isinstance(value, dict):
        raise UsageError(f"{setting} = {text!r}: {str(path)!r} is not the JSON tanplan writes: what the run "
                         "released cannot be read, so it cannot be composed; restore it or start from other weights")
    return value


def _refuse_audit(card: dict | None, text: str, setting: str) -> None:
    if card and (card.get("audit_canaries") or card.get("private_release") is False):
        raise UsageError(f"{setting} = {text!r} is an audit's run (trained with canaries, not a private release): "
                         "an audit's run is never an init")


def _read_ledger(run: Path, text: str, setting: str) -> tuple[Ledger, dict]:
    d = _read_json(run / "ledger.json", text, setting, required=True)
    try:
        ledger = Ledger.from_dict(d)
        if all(_valid(r) for g in [ledger.releases, *(i.releases for i in ledger.inherited)] for r in g):
            return ledger, d
    except (TypeError, ValueError, KeyError, AttributeError):
        pass
    raise UsageError(f"{setting} = {text!r}: {str(run / 'ledger.json')!r} is not a ledger tanplan writes: what the "
                     "run released cannot be composed; restore it or start from other weights")


def _valid(r) -> bool:
    """A release whose numbers the accountant can compose: 0 < q ≤ 1, σ ≥ 0 finite, whole steps in order."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (r.q, r.sigma))
    steps = all(isinstance(v, int) and not isinstance(v, bool) for v in (r.first_step, r.last_step))
    return (numbers and steps and 0 < r.q <= 1 and 0 <= r.sigma < float("inf") and 0 <= r.first_step <= r.last_step
            and r.kind in ("dp_sgd", "dp_snip"))


def _own_group(run: Path, ledger: Ledger, raw: dict) -> Inherited:
    """The init's own releases, with its data as its ledger or its config.toml states it (None: unknown)."""
    data = ledger.data
    if data is None:
        try:
            data = data_identity(load_config(run / "config.toml").data)
        except (OSError, UsageError, ValueError):
            data = None
    eps = raw.get("epsilon_this_run", raw.get("epsilon")) if ledger.private else None  # as that run stated it
    return Inherited(str(run), list(ledger.releases), True, eps if isinstance(eps, (int, float)) else None, data)


def _judged(groups: list[Inherited], data: dict | None, text: str, setting: str) -> list[Inherited]:
    """Each group composed when its run may share this run's data; one without privacy there is refused."""
    judged = []
    for g in groups:
        shares = data is None or may_share(g.data, data)
        if shares and not g.private:
            raise UsageError(f"{setting} = {text!r}: {g.source!r} trained without privacy on data that may be "
                             "this run's private set (ε = ∞): its weights are not public; start from a run on "
                             "public data (tanplan pretrain) or a private one")
        judged.append(Inherited(g.source, g.releases, shares and bool(g.releases), g.epsilon, g.data))
    return judged


# ---------------------------------------------------------------------------------------------------
# The budget


def limit(cfg: Config) -> float:
    """privacy.total_epsilon, or privacy.epsilon where it is 0 (as tanplan.workflow.total_budget.limit_of)."""
    return cfg.privacy.total_epsilon or cfg.privacy.epsilon


def composed_epsilon(events: list, delta: float, accountant: str, neighbouring: str,
                     within: float | None = None) -> tuple[float | None, str]:
    """(ε of the events composed, the accountant that gave it): RDP first under add/remove-one when it is
    within the budget (an upper bound, milliseconds), else the accountant of record (RDP where PLD
    cannot run)."""
    if within is not None and neighbouring == "add_remove" and accountant == "pld":
        rdp = accounting.epsilon_of_events(events, delta, "rdp")
        if rdp <= within:
            return rdp, "rdp"
    eps, used, _ = accounting.epsilon_with_fallback(events, delta, accountant, neighbouring)
    return eps, used


def check_total(prov: InitProvenance | None, plan, cfg: Config) -> None:
    """BudgetExceeded (exit 3) when this run's planned releases (plan: a RunPlan) composed with its init's
    exceed privacy.total_epsilon (0: privacy.epsilon); called before anything is written. Nothing to
    check for a non-private run or an init that composes nothing."""
    inherited = prov.events() if prov is not None else []
    if not inherited or not plan.private:
        return
    budget = limit(cfg)
    eps, used = composed_epsilon(list(plan.events()) + inherited, plan.delta, plan.accountant, plan.neighbouring,
                                 within=budget)
    if eps is None or eps > budget:
        given = "privacy.total_epsilon" if cfg.privacy.total_epsilon else "privacy.total_epsilon (its default, privacy.epsilon)"
        shown = "cannot be bounded" if eps is None else f"would be ε = {eps:.4g} ({used.upper()}, δ = {plan.delta:.3g})"
        releases, runs = len(prov.releases()), sum(g.composed for g in prov.groups)
        raise BudgetExceeded(f"this run composed with its init {prov.source!r} ({_count(releases, 'release')} of "
                             f"{_count(runs, 'run')} that may have trained on the same data) {shown}, above {given} "
                             f"= {budget:g}; nothing was trained: raise privacy.total_epsilon, or start from "
                             "weights trained on other data")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
