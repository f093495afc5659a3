"""Where the proxies of `tanplan run` learn, and at which σ ([tuning] data = public | private).

TAN's proxies train at the target's per-step signal-to-noise ratio η_step, so a proxy's own σ' = σ·B'/B is
small and each proxy alone spends a large ε. They protect the private examples only when they never see
them:

- public (default): every proxy (sweep trial, ladder rung, fit run) trains and evaluates on public data of
  the same task, [tuning] path (an .npz in the npz dataset's format), or for mnist1d an independent draw
  that tanplan generates (data.seed + 1: draws with different seeds share no example). The launch's ε is
  then the whole cost to the private examples. A public set of N_pub examples keeps the target's η_step
  and S: q' = B'/N_pub and σ' = q'/(√2·η_step), i.e. the proxies are those of the target (B, σ·N/N_pub, S)
  on the public set. When N_pub ≠ N the law is extrapolated across data sizes too, and the report says so.
- private: the proxies train on the private training set; the pipeline composes every release on it
  (tanplan.workflow.privacy_spent) and reports that total beside the launch's ε.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tanplan.config import Config
from tanplan.errors import UsageError

PUBLIC_SEED_OFFSET = 1


@dataclass(frozen=True)
class Tuning:
    """The proxies' config and what the report says of their data."""

    data: str  # "public" | "private"
    source: str  # where the proxies' examples come from, in words
    proxy_cfg: Config  # the config every proxy trains (its data, and σ and δ pinned to the target's η_step)
    private_size: int  # N
    tuning_size: int  # N_pub, or N when private

    @property
    def sizes_differ(self) -> bool:
        return self.tuning_size != self.private_size

    def to_dict(self) -> dict:
        return {"tuning_data": self.data, "source": self.source, "private_size": self.private_size,
                "tuning_size": self.tuning_size, "sizes_differ": self.sizes_differ}


def check(cfg: Config) -> None:
    """UsageError for a [tuning] section that cannot be served; reads no data (run it before any work)."""
    t = cfg.tuning
    if t.data == "private":
        return
    if t.path:
        path = Path(t.path).expanduser()
        if not path.is_file():
            raise UsageError(f"tuning.path = {t.path!r} is not allowed: no such file (an .npz with x_train, y_train, "
                             "x_test, y_test of public data of the same task)")
    elif cfg.data.dataset != "mnist1d":
        raise UsageError(f"tuning.data = 'public' needs tuning.path for data.dataset = {cfg.data.dataset!r}: an .npz "
                         "of public data of the same task (or tuning.data = 'private', accounted in the total ε)")


def public_data(cfg: Config) -> dict:
    """The [data] overrides that point a config at the public tuning set."""
    if cfg.tuning.path:
        return {"data.dataset": "npz", "data.path": str(Path(cfg.tuning.path).expanduser()), "data.train_examples": 0,
                "data.seed": 0}
    return {"data.seed": cfg.data.seed + PUBLIC_SEED_OFFSET}  # mnist1d: an independent draw of the same size


def resolve(cfg: Config, target, load_size=None) -> Tuning:
    """The proxies' Tuning for a target Plan on the private set (N = target.dataset_size).

    load_size(cfg) -> the training-set size of cfg's data (default: load it); the public set must hold
    at least the target's B examples, since its proxies are those of (B, σ·N/N_pub, S) on it.
    """
    check(cfg)
    n = target.dataset_size
    if cfg.tuning.data == "private":
        return Tuning("private", f"the private training set ({n} examples)", cfg, n, n)
    if load_size is None:
        from tanplan.engine.setup import load_data

        load_size = lambda c: load_data(c).num_train  # noqa: E731
    public = cfg.with_overrides(public_data(cfg))
    n_pub = int(load_size(public))
    if n_pub < target.batch_size:
        raise UsageError(f"the public tuning set has {n_pub} training examples, fewer than train.batch_size = "
                         f"{target.batch_size}: its proxies stand for the target on it; use a larger public set")
    # σ·N/N_pub keeps η_step = q/(√2σ) of the target with q = B/N_pub; δ stays the target's.
    proxy_cfg = public.with_overrides({"privacy.sigma": target.sigma * n / n_pub, "privacy.delta": target.delta})
    source = (f"public data: {cfg.tuning.path} ({n_pub} examples)" if cfg.tuning.path
              else f"public data: an independent mnist1d draw (data.seed = {public.data.seed}, {n_pub} examples)")
    return Tuning("public", source, proxy_cfg, n, n_pub)
