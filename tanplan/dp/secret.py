"""The per-run secret behind the randomness that DP-SGD's guarantee rests on.

The (ε, δ) of a run holds only for someone who does not know its Gaussian noise or which examples each
Poisson batch held: knowing the noise, anyone with two consecutive parameter vectors recovers the
noise-free clipped gradient sum. So that randomness comes from a `RunSecret`, 256 bits of OS entropy
drawn once per run, and from nothing else:

- the noise of step t: `fold_in(secret.key(NOISE), t)`; the Poisson batch of step t:
  `secret.batch_rng(BATCH, t)`; DP-SNIP's batch and noise: `secret.batch_rng(SNIP, 0)`, `secret.key(SNIP)`;
  the privacy audit's canaries (tanplan.dp.canaries): `secret.batch_rng(CANARY, 0)`, and at step t the
  canaries sampled `secret.batch_rng(CANARY_BATCH, t)` and the auditor's shadow batch `secret.batch_rng(SHADOW, t)`.
  Every stream is derived from all 256 bits through numpy's SeedSequence, so streams are independent.
- It is private state: stored only in the run's checkpoint folder (owner-only file, `save`), so that
  a resumed run continues with the identical batches and noise; never in a config, summary, ledger,
  metrics file, report, log or the released model, and `repr` hides it.
- Two runs never share one: a proxy at constant η_step has σ'/B' = σ/B, so the same noise in a proxy
  and its target would cancel in the difference of the two released models.

`RunSecret.from_noise_seed(n)` (privacy.noise_seed = n) derives the randomness from a number that the
config shows: reproducible, for tests only, and NOT private (`reproducible` is then True).

    >>> a, b = RunSecret.fresh(), RunSecret.fresh()
    >>> a == b, a.reproducible, RunSecret.from_noise_seed(7) == RunSecret.from_noise_seed(7)
    (False, False, True)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tanplan.errors import UsageError

WORDS = 8  # 32-bit words: 256 bits of entropy
FILE_NAME = "run_secret.json"

# Stream tags: each use of the secret draws from its own stream.
NOISE, BATCH, SNIP, CANARY, CANARY_BATCH, SHADOW = 1, 2, 3, 4, 5, 6
_SEED_TAG = 0x6E6F6973  # separates noise_seed-derived secrets from any other use of SeedSequence(seed)


@dataclass(frozen=True, repr=False)
class RunSecret:
    """256 secret bits and whether they came from a public noise seed (then not private)."""

    words: tuple[int, ...]
    reproducible: bool = False

    @classmethod
    def fresh(cls) -> "RunSecret":
        """New secret bits from the operating system's entropy source (os.urandom)."""
        return cls(tuple(int(w) for w in np.frombuffer(os.urandom(4 * WORDS), dtype=np.uint32)))

    @classmethod
    def from_noise_seed(cls, seed: int) -> "RunSecret":
        """Bits derived from a seed anyone who reads the config knows: reproducible, not private."""
        state = np.random.SeedSequence([int(seed), _SEED_TAG]).generate_state(WORDS, dtype=np.uint32)
        return cls(tuple(int(w) for w in state), reproducible=True)

    def __repr__(self) -> str:
        return f"RunSecret(<{'reproducible from privacy.noise_seed' if self.reproducible else 'hidden'}>)"

    def batch_rng(self, stream: int, step: int) -> np.random.Generator:
        """numpy Generator of one stream at one step; the same (secret, stream, step) gives the same draws."""
        return np.random.default_rng(np.random.SeedSequence([*self.words, int(stream), int(step)]))

    def key_data(self, stream: int) -> np.ndarray:
        """The raw data (2 uint32 words, threefry) of the JAX PRNG key of a stream."""
        return np.random.SeedSequence([*self.words, int(stream)]).generate_state(2, dtype=np.uint32)

    def key(self, stream: int):
        """The JAX PRNG key of a stream (for step t: jax.random.fold_in(key, t))."""
        import jax

        return jax.random.wrap_key_data(self.key_data(stream), impl="threefry2x32")

    # ---------------------------------------------------------------- private storage

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the secret to directory/run_secret.json, readable by its owner only (mode 0600).

        The folder itself is made owner-only too. Written once, atomically: a killed process leaves
        either no file or the whole file, never a partial secret.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        path = directory / FILE_NAME
        tmp = directory / f".{FILE_NAME}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"words": list(self.words), "reproducible": self.reproducible}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "RunSecret | None":
        """The secret saved in directory, or None when there is none; UsageError when it is unreadable."""
        path = Path(directory) / FILE_NAME
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            words = tuple(int(w) for w in data["words"])
            reproducible = bool(data.get("reproducible", False))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"the run's secret {str(path)!r} is unreadable ({type(err).__name__}); without it "
                             "the run cannot be resumed exactly: start a new --out") from None
        if len(words) != WORDS or not all(0 <= w < 2**32 for w in words):
            raise UsageError(f"the run's secret {str(path)!r} is malformed: start a new --out")
        return cls(words, reproducible)


def for_run(directory: str | os.PathLike | None, noise_seed: int, *, create: bool = True) -> RunSecret:
    """The secret of the run whose private folder is `directory` (None: a run that writes no files).

    An existing secret is reused (a restarted or resumed run repeats the same computation, so it
    releases nothing new); otherwise a fresh one is drawn from OS entropy and saved before any step,
    or, with noise_seed >= 0, derived from it. create=False (the workers of a multi-process run)
    requires the secret that the driver saved.
    """
    wanted = RunSecret.from_noise_seed(noise_seed) if noise_seed >= 0 else None
    stored = RunSecret.load(directory) if directory is not None else None
    if stored is not None:
        if (wanted is not None and stored != wanted) or (wanted is None and stored.reproducible):
            raise UsageError(f"privacy.noise_seed = {noise_seed} does not match the noise of the run in "
                             f"{str(directory)!r}: keep the config it started with, or start a new --out")
        return stored
    if not create:
        raise UsageError(f"no run secret in {str(directory)!r}: the launcher must create it before the workers start")
    secret = wanted or RunSecret.fresh()
    if directory is not None:
        secret.save(directory)
    return secret
