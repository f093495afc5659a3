"""Train the calibration pools: many seeds of every proxy rung and several launches of one target.

    .venv/bin/python experiments/calibration_pools.py --setting demo [--setting eps1_b2048 ...]
    .venv/bin/python experiments/calibration_pools.py --setting large_b16384 --plan   # its cost; trains nothing

For each setting (SETTINGS below) one JSON line per run is appended to
experiments/calibration_pools/<setting>.jsonl as the run ends:

    {"kind": "rung" | "launch", "b": B', "seed": s, "acc": ..., "acc_no_ema": ..., "sigma": σ',
     "steps": S, "diverged_at_step": null, "wall": seconds}

and, for a setting that starts from pretrained weights ([init]: the `finetune` setting), "init": the digest of
those weights (tanplan.models.init.digest_of): a pool resumed with other weights is refused.

A rerun skips the (kind, b, seed) already in the file, so a killed pool resumes. Proxies train where the
pipeline's proxies train (the config's [tuning] data, at the target's η_step: tanplan.workflow.tuning),
launches on the private data, both through THE loop (tanplan.engine.loop.train_and_evaluate) with secret
noise: each run's noise differs, as in a real launch. Runs are interleaved (round r trains seed r of every
rung that wants it, and launch r) so that a pool stopped early is still balanced.

experiments/calibration.py replays the pipeline's decision code on draws from these pools
(docs/calibration.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent
POOLS = ROOT / "calibration_pools"
# The accountant and δ of record (PLD, δ = N^-1.1), given explicitly: a pool must not move with a default.
PLD = {"privacy.accountant": "pld"}
# The fine-tuning setting's public weights, pretrained (without privacy) on the shifted public mnist1d set by
# its prepare step, and kept in the repository beside the pool (96 KB): two pretrainings with the same seeds
# differ in their last bits on a CPU, so a pool is tied to its weights (their digest is in every row).
FINETUNE_DATA = ROOT / "data" / "finetune"  # the shifted set and the pretraining's run folder (ignored)
FINETUNE_SHIFTED = FINETUNE_DATA / "mnist1d_shifted.npz"
FINETUNE_INIT = POOLS / "finetune_init.npz"
FINETUNE_PRETRAIN_SEED = 0  # the pretraining's batches (a public run: no secret needed)
# The first two of cnn1d's four conv blocks frozen: their features transfer from the shifted set, while the
# last two blocks and the head still learn the private task (docs/calibration.md, "Fine-tuning").
FINETUNE_FROZEN = ["Conv_0", "NormAct_0", "Conv_1", "NormAct_1"]


@dataclass(frozen=True)
class Setting:
    """One target and its pools: rungs {B': seeds} at the target's η_step, and `launches` full-scale runs."""

    name: str
    config: str
    overrides: dict
    rungs: dict  # B' -> number of seeds
    launches: int
    test_sizes: tuple = (None, None)  # (proxies', launch's) test-set sizes when they differ (batch_law.predict)
    previous_fraction: float = 1 / 16  # the rule before issue 22: its ladder budget for this config
    prepare: tuple = field(default=())  # steps before training: "mnist5k_halves" (its data files), "finetune_init"


def _delta(n: int) -> float:
    return n ** -1.1


SETTINGS = {
    s.name: s for s in (
        Setting("demo", "experiments/mnist1d.toml",
                {**PLD, "privacy.delta": _delta(16000)},
                # B' = 128 is the top rung under the demo config's quarter budget: 20 seeds (12 until session 7,
                # whose live demos met its low tail, 0.79-0.81, that the first 12 lacked)
                {16: 20, 32: 20, 64: 16, 128: 20, 256: 8, 512: 3}, launches=8, test_sizes=(4000, 4000),
                previous_fraction=0.125),
        Setting("eps1_b2048", "experiments/mnist1d.toml",
                {**PLD, "privacy.delta": _delta(16000), "privacy.epsilon": 1.0, "train.batch_size": 2048},
                {16: 20, 32: 20, 64: 16, 128: 12, 256: 8, 512: 3}, launches=8, test_sizes=(4000, 4000),
                previous_fraction=0.125),
        Setting("mnist5k", "experiments/mnist5k.toml",
                {**PLD, "privacy.delta": _delta(2000)},
                {16: 16, 32: 16, 64: 12, 128: 10, 256: 8}, launches=8,
                prepare=("mnist5k_halves",)),
        # Issue 31's fine-tuning task (experiments/mnist1d_finetune.toml: N = 4,000, B 512, S 100) from weights
        # pretrained on the shifted public set, the first two blocks frozen; the proxies learn on the public
        # mnist1d draw (the same task), from the same weights with the same frozen set, as `tanplan run`'s.
        # Its B' = 512 is the target's public twin (B, σ, S on the public draw; the ladder never trains it): it
        # tells the law's error from the public draw's (experiments/calibration_twin.py).
        Setting("finetune", "experiments/mnist1d_finetune.toml",
                {**PLD, "privacy.delta": _delta(4000), "init.path": str(FINETUNE_INIT), "init.frozen": FINETUNE_FROZEN},
                {16: 12, 32: 12, 64: 10, 128: 8, 256: 6, 512: 6}, launches=8, test_sizes=(1000, 1000),
                prepare=("finetune_init",)),
        # The same from the same weights with nothing frozen (every parameter fine-tunes): is the slow rise past
        # the knee the frozen blocks' doing?
        Setting("finetune_all", "experiments/mnist1d_finetune.toml",
                {**PLD, "privacy.delta": _delta(4000), "init.path": str(FINETUNE_INIT)},
                {16: 12, 32: 12, 64: 10, 128: 8, 256: 6, 512: 6}, launches=8, test_sizes=(1000, 1000),
                prepare=("finetune_init",)),
        # Issue 30's large target: the demo's settings at N = 80,000 (64,000 train) and B = 16384, where the
        # pipeline's budget is 1/8 of B·S. Its 8 launches are ~4 demo launches each (`--plan` gives the cost,
        # about 6 hours of this 2-core machine unloaded). B' = 256 and 512, the top of what the ladder can
        # reach within 1/8, have 16 and 12 seeds (8 and 4 until session 8): the replay's draws take 3-4 there.
        Setting("large_b16384", "experiments/mnist1d.toml",
                {**PLD, "privacy.delta": _delta(64000), "data.num_samples": 80000, "train.batch_size": 16384},
                {16: 20, 32: 20, 64: 16, 128: 12, 256: 16, 512: 12}, launches=8, test_sizes=(16000, 16000)),
    )
}


def schedule(setting: Setting, first_seed: int = 0) -> list[tuple[str, int, int]]:
    """(kind, b, seed) in the interleaved order: round r = seed first_seed + r of every rung that wants it, then
    launch first_seed + r."""
    rounds = max([*setting.rungs.values(), setting.launches])
    order = []
    for r in range(rounds):
        order += [("rung", b, first_seed + r) for b, n in sorted(setting.rungs.items()) if r < n]
        if r < setting.launches:
            order.append(("launch", 0, first_seed + r))
    return order


def extension(setting: Setting, rungs: str | None, launches: int | None) -> Setting:
    """The setting with other seed counts: `rungs` as "256:24,512:24" (only these rungs), `launches` a count.
    For a second pool of the same setting (another machine, --first-seed past the first pool's seeds)."""
    if rungs is not None:
        try:
            counts = {int(b): int(n) for b, n in (item.split(":") for item in rungs.split(",") if item)}
        except ValueError:
            raise SystemExit(f"--rungs {rungs!r}: expected B':seeds pairs such as 256:24,512:24") from None
        setting = replace(setting, rungs=counts)
    return setting if launches is None else replace(setting, launches=launches)


def done_keys(path: Path) -> set[tuple[str, int, int]]:
    if not path.is_file():
        return set()
    keys = set()
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            keys.add((row["kind"], int(row["b"]) if row["kind"] == "rung" else 0, int(row["seed"])))
    return keys


def configs(setting: Setting):
    """(the launch's config, the proxies' config) exactly as `tanplan run` builds them."""
    from tanplan.config import load_config
    from tanplan.engine.setup import load_data
    from tanplan.privacy.run_plan import resolve_plan
    from tanplan.workflow import tuning

    cfg = load_config(ROOT.parent / setting.config).with_overrides(setting.overrides)
    plan = resolve_plan(cfg.with_overrides({"train.proxy_batch_size": 0}), load_data(cfg.data).num_train).plan
    tune = tuning.resolve(cfg, plan)
    return cfg, tune.proxy_cfg, plan


def pretrained_init(setting: Setting, out: Path = FINETUNE_INIT, log=print) -> Path:
    """The fine-tuning setting's init, an .npz of the released params, made once (later calls reuse it): the
    shifted public set written (experiments/mnist1d_shifted.py) and the setting's model pretrained on it
    without privacy as experiments/finetune_compare.py does (its PRETRAIN: Adam, lr 0.003, 400 steps, no EMA;
    experiment.seed 0), its batches from FINETUNE_PRETRAIN_SEED rather than OS entropy (a public run)."""
    from finetune_compare import PRETRAIN  # lazy: imports tanplan (JAX); --plan stays light
    from mnist1d_shifted import main as write_shifted
    from tanplan.config import load_config
    from tanplan.engine.loop import train_and_evaluate  # lazy: JAX; --plan stays light
    from tanplan.job import job_of  # lazy: beside the engine it feeds
    from tanplan.engine.setup import load_data  # lazy: JAX
    from tanplan.workflow.pretrain import check_public, pretrain_config

    if out.is_file():
        return out
    if not FINETUNE_SHIFTED.is_file():
        write_shifted(str(FINETUNE_SHIFTED))
    cfg = load_config(ROOT.parent / setting.config).with_overrides(
        {**PRETRAIN, "tuning.path": str(FINETUNE_SHIFTED), "experiment.seed": 0})
    check_public(cfg, lambda c: load_data(c.data))  # the shifted set shares no example with the private draw
    folder = FINETUNE_DATA / "pretrained"  # a fresh run folder each time: a killed pretraining leaves no init
    shutil.rmtree(folder, ignore_errors=True)
    pretraining = pretrain_config(cfg).with_overrides({"privacy.noise_seed": FINETUNE_PRETRAIN_SEED})
    done = train_and_evaluate(job_of(pretraining), folder, progress=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / "model" / "params.npz", out)
    log(f"pretrained {out}: test accuracy {done.test_accuracy:.3f} on the shifted public set")
    return out


def init_digest(cfg) -> str | None:
    """The digest of the config's [init] weights (what the run's identity binds), or None without [init]."""
    from tanplan.models.init import digest_of, read_source  # lazy: JAX (flax); --plan stays light

    return digest_of(read_source(cfg.init)[0]) if (cfg.init.path or cfg.init.loader) else None


def check_init_of_pool(path: Path, digest: str | None) -> None:
    """SystemExit when the pool's rows were trained from other [init] weights than `digest`: one pool, one init."""
    if not path.is_file():
        return
    found = {json.loads(line).get("init") for line in path.read_text().splitlines() if line.strip()}
    if found - {digest}:
        raise SystemExit(f"{path}: its runs started from init {sorted(map(str, found))}, these weights are {digest}; "
                         "move the pool aside (or restore the init it was trained from) before resuming it")


def run_pool(setting: Setting, out: Path, log=print, first_seed: int = 0, until: float | None = None) -> None:
    """Train what `out` lacks of the setting's schedule, a JSON line a run; with `until` (seconds), start no run
    after that long (a pool on a lent machine ends inside its lease, every finished run kept)."""
    import jax

    from tanplan.engine.loop import train_and_evaluate
    from tanplan.job import job_of
    from tanplan.errors import TrainingDiverged

    for name in setting.prepare:
        if name == "mnist5k_halves":
            from mnist5k_halves import write_halves

            write_halves()
        elif name == "finetune_init":
            pretrained_init(setting, log=log)
    cfg, proxy_cfg, plan = configs(setting)
    digest = init_digest(cfg)
    check_init_of_pool(out, digest)
    log(f"{setting.name}: B={plan.batch_size} S={plan.steps} σ={plan.sigma:.6g} δ={plan.delta:.6g} "
        f"ε={plan.epsilon(plan.accountant):.4g} ({plan.accountant})" + (f" init {digest}" if digest else ""))
    done = done_keys(out)
    device = jax.devices()[0].device_kind  # a pool may be extended on another machine: each row says where
    begun = time.perf_counter()
    for kind, b, seed in schedule(setting, first_seed):
        if (kind, b, seed) in done:
            continue
        if until is not None and time.perf_counter() - begun >= until:
            log(f"{setting.name}: stopped after {until:.0f} s, before {kind} {b or ''} seed {seed}")
            return
        run_cfg = (proxy_cfg.with_overrides({"train.proxy_batch_size": b, "experiment.seed": seed}) if kind == "rung"
                   else cfg.with_overrides({"train.proxy_batch_size": 0, "experiment.seed": seed}))
        started = time.perf_counter()
        try:
            s = train_and_evaluate(job_of(run_cfg), None, progress=False)  # the typed RunSummary
            found = {"acc": s.test_accuracy, "acc_no_ema": s.test_accuracy_no_ema, "sigma": s.sigma, "steps": s.steps,
                     "diverged_at_step": s.diverged_at_step}
        except TrainingDiverged as err:  # a run that diverges is part of the pool: its accuracy is None
            found = {"acc": None, "acc_no_ema": None, "sigma": None, "steps": None, "diverged_at_step": str(err)}
        row = {"kind": kind, "b": b if kind == "rung" else plan.batch_size, "seed": seed, **found,
               "wall": time.perf_counter() - started, "device": device, **({"init": digest} if digest else {})}
        log(json.dumps(row))
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def planned_cost(setting: Setting, reference: Path) -> dict:
    """What the setting's pool will train, before it trains: runs and example-gradients (B'·S) of its rungs and
    launches, and hours at the seconds per example-gradient the reference pool's runs measured (its rungs at
    each B' where it has them, else all its rungs; its launches), compilation and evaluation included."""
    from tanplan.config import load_config

    cfg = load_config(ROOT.parent / setting.config).with_overrides(setting.overrides)
    steps, target = cfg.train.steps, cfg.train.batch_size
    rows = [json.loads(line) for line in reference.read_text().splitlines() if line.strip()]

    def rate(kind: str, b: int | None = None) -> float:
        picked = [r for r in rows if r["kind"] == kind and r["steps"] and (b is None or r["b"] == b)]
        return sum(r["wall"] for r in picked) / sum(r["b"] * r["steps"] for r in picked) if picked else rate(kind)

    rungs = {b: n * b * steps for b, n in setting.rungs.items()}
    seconds = sum(e * rate("rung", b) for b, e in rungs.items()) + setting.launches * target * steps * rate("launch")
    return {"setting": setting.name, "rung_runs": sum(setting.rungs.values()), "launches": setting.launches,
            "rung_example_gradients": sum(rungs.values()), "launch_example_gradients": setting.launches * target * steps,
            "hours": seconds / 3600, "measured_in": str(reference)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", action="append", required=True, choices=sorted(SETTINGS))
    parser.add_argument("--out-dir", default=str(POOLS))
    parser.add_argument("--first-seed", type=int, default=0, help="experiment seeds from this one (a second pool "
                        "of a setting, past the first's seeds, so that no init or evaluation is shared)")
    parser.add_argument("--rungs", help="other seed counts, B':seeds pairs (256:24,512:24: only these rungs)")
    parser.add_argument("--launches", type=int, help="another number of launches")
    parser.add_argument("--until", type=float, help="start no run after this many seconds")
    parser.add_argument("--plan", action="store_true", help="print each setting's planned cost (runs, example-"
                        "gradients, hours at the demo pool's measured rate) and train nothing")
    args = parser.parse_args()
    if args.plan:
        for name in args.setting:
            print(json.dumps(planned_cost(extension(SETTINGS[name], args.rungs, args.launches), POOLS / "demo.jsonl")))
        return
    sys.path.insert(0, str(ROOT))

    from tanplan.runtime import configure_process

    configure_process()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.setting:
        run_pool(extension(SETTINGS[name], args.rungs, args.launches), out_dir / f"{name}.jsonl",
                 log=lambda line: print(line, flush=True), first_seed=args.first_seed, until=args.until)


if __name__ == "__main__":
    main()
