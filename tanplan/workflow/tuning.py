"""Where the proxies learn, and at which σ ([tuning] data = public | private): ONE function for every stage.

TAN's proxies train at the target's per-step signal-to-noise ratio η_step, so a proxy's own σ' = σ·B'/B is
small and each proxy alone spends a large ε. They protect the private examples only when they never see
them:

- public (default): every proxy (sweep trial, ladder rung, fit run, frontier candidate) trains and evaluates
  on public data of the same task: [tuning] path (an .npz in the npz dataset's format, or a memmap folder
  in `tanplan convert`'s, read a batch at a time so it may be larger than memory), [tuning] dataset = a
  loader by import path (called as data.dataset's loaders are, with [tuning] options and path), or for
  mnist1d an independent draw that tanplan generates (data.seed + 1: draws with different seeds share no
  example).
  The launch's ε is then the whole cost to the private examples. A public set of N_pub examples keeps the
  target's σ/B and S: each proxy is (B', σ·B'/B, S) whatever N_pub, so the noise on its mean gradient,
  σ'C/B', is the launch's σC/B (the update's noise does not depend on N; keeping η_step = q/(√2σ) instead,
  q' = B'/N_pub, made a proxy on N/2 public examples twice as noisy as the launch: on mnist1d at the demo's
  target its B' = 128 proxies scored 0.64 against 0.86 with σ/B kept, docs/ladder.md). When N_pub ≠ N the
  law is still extrapolated across data sizes (epochs, generalisation): where N_pub < N the prediction carries
  a data-size term measured on half of the public set (tanplan.laws.data_size), and the report says so. The
  public set is checked against the private one before any proxy trains: not the
  same file, no shared example (digests of the inputs, train and test, rounded so that near-duplicates
  count: a scaled and shifted copy of the private rows is refused), the same input shape and class count.
- private: the proxies train on the private training set; every release on it is composed
  (tanplan.workflow.privacy_spent) and reported beside the launch's ε.

`for_config(cfg)` is what `run`, `optimize`, `sweep` and every mode of `fit` call: the proxies' config
(`Tuning.proxy_cfg`) is the one every proxy trains.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tanplan import plugins
from tanplan.config import Config, train_steps
from tanplan.data import near_copy, rows
from tanplan.data.load import available_datasets
from tanplan.data.memmap import META
from tanplan.data.source import read_rows
from tanplan.errors import UsageError
from tanplan.plugins import is_import_path
from tanplan.outcomes.privacy_spent import TuningRecord
from tanplan.workflow.members import Members

PUBLIC_SEED_OFFSET = 1


@dataclass(frozen=True)
class Tuning:
    """The proxies' config and what the report says of their data."""

    data: str  # "public" | "private"
    source: str  # where the proxies' examples come from, in words
    proxy_cfg: Config  # the config every proxy trains (its data, and σ and δ pinned to the target's η_step)
    private_size: int  # N
    tuning_size: int  # N_pub, or N when private
    proxy_data: Any = field(default=None, repr=False, compare=False)  # the Dataset the proxies train on, if loaded
    target: Any = field(default=None, repr=False, compare=False)  # the launch's RunPlan on N (for_config)

    @property
    def sizes_differ(self) -> bool:
        return self.tuning_size != self.private_size

    def record(self) -> TuningRecord:
        """What a stage's JSON says of its tuning data (best.json, privacy_spent.json, summary.json)."""
        return TuningRecord(tuning_data=self.data, source=self.source, private_size=self.private_size,
                            tuning_size=self.tuning_size, sizes_differ=self.sizes_differ)

    def to_dict(self) -> dict:
        return self.record().to_dict()


NO_PUBLIC = "(or tuning.data = 'private', accounted in the total ε)"


def check(cfg: Config) -> None:
    """UsageError for a [tuning] section that cannot be served; reads no data (run it before any work): the
    public set's kind (tuning.dataset, or what tuning.path is), its path, and a loader's import path."""
    t = cfg.tuning
    if t.data == "private" or not cfg.privacy.private:
        return
    if t.options and not is_import_path(t.dataset):
        raise UsageError(f"tuning.options is not allowed with tuning.dataset = {t.dataset!r}: it passes keyword "
                         "arguments to a plugged-in public loader (tuning.dataset = \"package.module:load\")")
    if is_import_path(t.dataset):
        plugins.resolve(t.dataset, "tuning.dataset")  # imported now: a bad path is one line before any work
    elif t.dataset or t.path:
        _public_kind(t)
    elif cfg.data.dataset != "mnist1d":
        raise UsageError(f"tuning.data = 'public' needs tuning.path for data.dataset = {cfg.data.dataset!r}: an .npz "
                         "file or a memmap folder of public data of the same task, or tuning.dataset = a loader "
                         f"\"package.module:load\" {NO_PUBLIC}")
    if reads_private_file(cfg):
        raise UsageError(f"tuning.path = {t.path!r} is not allowed: it is the private data file (or folder) "
                         f"data.path; public tuning data must hold no private example {NO_PUBLIC}")


def _public_kind(t) -> str:
    """npz or memmap (or another built-in name): tuning.dataset, else what tuning.path is; its path checked."""
    path = Path(t.path).expanduser() if t.path else None
    kind = t.dataset or ("memmap" if path is not None and path.is_dir() else "npz")
    if kind not in available_datasets():
        raise UsageError(f"tuning.dataset = {kind!r} is not allowed: use npz, memmap, another of "
                         f"{', '.join(available_datasets())}, or a loader by import path \"package.module:load\"")
    if kind == "npz" and (path is None or not path.is_file()):
        raise UsageError(f"tuning.path = {t.path!r} is not allowed: no such file (an .npz with x_train, y_train, "
                         "x_test, y_test of public data of the same task, or a memmap folder)")
    if kind == "memmap" and (path is None or not (path / META).is_file()):
        raise UsageError(f"tuning.path = {t.path!r} is not allowed: not a memmap folder (no {META}; "
                         "`tanplan convert` writes one, docs/api.md says its format)")
    return kind


def reads_private_file(cfg: Config) -> bool:
    """Whether [tuning] reads the private data file or folder as the private set does: the same path, not read
    by a loader of its own (another loader, or the same one with other tuning.options, reads other rows there,
    a split of the file say: allowed, and its rows are then checked by the near-copy rule like any public set)."""
    t, d = cfg.tuning, cfg.data
    if not (t.path and d.path and same_path(t.path, d.path)):
        return False
    return not (is_import_path(t.dataset) and (t.dataset, dict(t.options)) != (d.dataset, dict(d.options)))


def same_path(a: str, b: str) -> bool:
    """Whether two paths name the same existing file or folder."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    return a.exists() and b.exists() and os.path.samefile(a, b)


def public_data(cfg: Config) -> dict:
    """The [data] overrides that point a config at the public tuning set: a loader (tuning.dataset, with
    tuning.options and path= tuning.path), an .npz file or a memmap folder (tuning.path), or for mnist1d
    without either an independent draw."""
    t = cfg.tuning
    if not (t.path or t.dataset):
        return {"data.seed": cfg.data.seed + PUBLIC_SEED_OFFSET}  # mnist1d: an independent draw of the same size
    kind = t.dataset if is_import_path(t.dataset) else _public_kind(t)
    # a flat-row .npz beside a flat-row source is read in the private set's row shape (tanplan.data.rows)
    return rows.agreeing({"data.dataset": kind, "data.path": str(Path(t.path).expanduser()) if t.path else "",
                          "data.train_examples": 0, "data.seed": 0,
                          "data.options": dict(t.options)}, cfg.data)  # the private loader's options are not its


def absolute_paths(cfg: Config) -> Config:
    """cfg with its relative data.path, tuning.path and init.path made absolute where they name a file or folder
    here (a loader's path= that names none, such as a URL, is left as it is): the proxies train in Ray workers
    whose working directory is their trial's folder, where a relative path names nothing. cfg itself when
    nothing changes."""
    named = (("data.path", cfg.data.path), ("tuning.path", cfg.tuning.path), ("init.path", cfg.init.path))
    changes = {key: str(Path(value).expanduser().absolute()) for key, value in named
               if value and not Path(value).expanduser().is_absolute() and Path(value).expanduser().exists()}
    return Members.of(cfg).group(changes).base


def public_name(cfg: Config) -> str:
    """The public tuning set in words, for messages and reports."""
    t = cfg.tuning
    if is_import_path(t.dataset):
        return f"tuning.dataset = {t.dataset!r}" + (f" (path {t.path!r})" if t.path else "")
    return f"tuning.path = {t.path!r}" if t.path else "the public mnist1d draw"


def check_public_set(cfg: Config, public, private, *, same_classes: bool = True,
                     what: str = "public tuning data", remedy: str = f" {NO_PUBLIC}") -> None:
    """UsageError unless the public set is of the private set's task and holds no private example: the same
    input shape and class count, and no input row (train or test) that is a copy of a private training or
    test row under the near-copy rule (tanplan.data.near_copy: near-equal at NEAR × the private test set's
    RMS value, or equal after per-row standardisation, the public row reversed or not, in any order;
    sources larger than memory are read in slices). The message never says how many rows match.
    same_classes=False (pretraining: its head is replaced, [init] head): another class count is allowed.
    what, remedy: the set's role and the way out, in the message."""

    where = public_name(cfg)
    if public.input_shape != private.input_shape:
        raise UsageError(f"{where} is not allowed: its examples have shape {public.input_shape}, the private set's "
                         f"{private.input_shape}; {what} must be of the same task")
    if same_classes and public.num_classes != private.num_classes:
        raise UsageError(f"{where} is not allowed: it has {public.num_classes} classes, the private set "
                         f"{private.num_classes}; {what} must be of the same task")
    if near_copy.shares_an_example(public, private, NEAR * _scale(private)):
        raise UsageError(f"{where} is not allowed: it holds examples of the private training or test set (equal, "
                         f"equal to within {NEAR:g} of the private test set's RMS value, or equal after per-row "
                         "standardisation, reversed or not, in any order: docs/privacy.md, the near-copy rule); "
                         f"{what} must hold no private example{remedy}")


# Rows whose coordinates all agree to within this fraction of the data's scale count as the same example.
NEAR = 1e-3


def _scale(data, rows: int = 4096) -> float:
    """The RMS value of the first test rows of `data` (public): the scale that near-duplicates are judged at."""
    x = (data.x_test[:rows] if getattr(data, "in_memory", True)
         else read_rows(data.test, np.arange(min(rows, data.num_test)))[0])
    rms = float(np.sqrt(np.mean(np.square(np.asarray(x, np.float64))))) if np.size(x) else 0.0
    return rms if np.isfinite(rms) and rms > 0 else 1.0


def resolve(cfg: Config, target, *, private=None, load=None, proxy_batch: int | None = None) -> Tuning:
    """The proxies' Tuning for a target Plan on the private set (N = target.dataset_size).

    private: the private Dataset, against which a public set is checked (check_public_set); load(cfg) ->
    the Dataset of a config (default: tanplan.engine.setup.load_data). proxy_batch: the largest proxy batch B'
    the caller plans (None: the target's B). The public set must hold at least B' examples: its proxies are
    those of (B, σ, S) on it, each sampling B' of them a step; the target's twin itself never trains
    there, so N_pub < B is fine (tanplan.privacy.run_plan.twin_beyond).
    """
    check(cfg)
    n = target.dataset_size
    cfg = absolute_paths(cfg)
    if cfg.tuning.data == "private":
        return Tuning("private", f"the private training set ({n} examples)", cfg, n, n, proxy_data=private)
    if load is None:
        from tanplan.engine.setup import load_data  # lazy: JAX; the API (the planner's) imports this module

        load = lambda c: load_data(c.data)  # noqa: E731
    public_cfg = Members.of(cfg).group(public_data(cfg)).base
    public = load(public_cfg)
    if private is not None:
        check_public_set(cfg, public, private)
    n_pub = int(public.num_train)
    need = proxy_batch or target.batch_size
    if n_pub < need:
        largest = (f"B' = {need}, the largest proxy batch planned" if proxy_batch else
                   f"train.batch_size = {need}")
        raise UsageError(f"the public tuning set has {n_pub} training examples, fewer than {largest} (a proxy samples "
                         "its batch from them): use a larger public set, or smaller proxies ([sweep] "
                         "proxy_batch_size, fit.batch_sizes, fit.max_proxy_fraction)")
    # σ kept: every proxy's noise on its mean gradient, σ'C/B' = σC/B, is the launch's, whatever N_pub (module
    # docstring); δ stays the target's (checked on the private N: the proxies' own ε guarantees nothing, so
    # δ ≥ 1/N_pub is no refusal there).
    proxy_cfg = Members.of(public_cfg).group({"privacy.sigma": target.sigma, "privacy.delta": target.delta,
                                              "privacy.allow_large_delta": True}).base
    t = cfg.tuning
    source = (f"public data: {t.dataset if is_import_path(t.dataset) else t.path} ({n_pub} examples)"
              if t.path or t.dataset
              else f"public data: an independent mnist1d draw (data.seed = {public_cfg.data.seed}, {n_pub} examples)")
    return Tuning("public", source, proxy_cfg, n, n_pub, proxy_data=public)


def check_steps(cfg: Config, dataset_size: int | None = None) -> None:
    """UsageError when S is given as train.epochs: the proxies' stages (sweep, ladder, fit, the budget and cost
    bounds of `run`) read train.steps, so train.epochs means the same S on every command only where train and
    launch read it alone. dataset_size (N, when loaded): the message names the S to set; without it (before
    any data is read) the formula."""
    e = cfg.train.epochs
    if not e:
        return
    same = (f"train.steps = {train_steps(cfg.train, dataset_size)} (the same S on these {dataset_size} examples)"
            if dataset_size is not None else
            f"train.steps = ceil({e:g}·N/{cfg.train.batch_size}) for the N training examples (`tanplan plan "
            f"--dataset-size N --batch-size {cfg.train.batch_size} --epochs {e:g}` prints it)")
    raise UsageError(f"train.epochs = {e:g} is read by train and launch only; the proxies' stages need "
                     f"train.steps: set {same}")


def for_config(cfg: Config, private=None, proxy_batch: int | None = None) -> Tuning:
    """THE proxies of cfg, per [tuning]: load the private set (unless given), resolve the target plan on it
    (δ and σ checked there), then resolve() the tuning data (proxy_batch: the largest proxy B' planned). A
    non-private config protects nothing: its proxies train on its own data. The Tuning holds the target's
    RunPlan (`target`): the stage's entry hands it down (the total ε's proxies are RunPlan.at(B') of it)."""
    from tanplan.engine.setup import load_data  # lazy: JAX; the API (the planner's) imports this module

    check(cfg)
    private = private if private is not None else load_data(cfg.data)
    check_steps(cfg, private.num_train)
    run = Members.of(cfg).target_plan(private.num_train)
    if not run.private:
        n = private.num_train
        return Tuning("private", f"the training set ({n} examples; a non-private run protects nothing)",
                      absolute_paths(cfg), n, n, proxy_data=private, target=run)
    return replace(resolve(cfg, run.plan, private=private, proxy_batch=proxy_batch), target=run)


def from_record(record: Mapping | None) -> TuningRecord | None:
    """A best.json's tuning record read back (None when absent or not one `record()` wrote)."""
    if not isinstance(record, Mapping):
        return None
    try:
        read = TuningRecord.from_dict(record)
    except (TypeError, ValueError):
        return None
    return read if read.tuning_data in ("public", "private") else None
