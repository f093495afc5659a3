"""The per-run secret behind the randomness that DP-SGD's guarantee rests on.

The (ε, δ) of a run holds only for someone who does not know its Gaussian noise or which examples each
Poisson batch held: knowing the noise, anyone with two consecutive parameter vectors recovers the
noise-free clipped gradient sum. So that randomness comes from a `RunSecret`, 256 bits of OS entropy
drawn once per run, and from nothing else:

- the noise of step t: `fold_in(secret.key(NOISE), t)`; the Poisson batch of step t:
  `secret.batch_rng(BATCH, t)`; DP-SNIP's batch and noise: `secret.batch_rng(SNIP, 0)`, `secret.key(SNIP)`;
  the AugMult views of the example of dataset index i at step t: `fold_in(fold_in(secret.key(AUGMENT), t), i)`
  (tanplan.dp.augmult.example_keys), a function of the example's own identity, never of the batch's other rows.
  Every stream is derived from all 256 bits through numpy's SeedSequence, so streams are independent.
- The privacy audit's canaries (tanplan.dp.canaries, tanplan.dp.input_canaries) use a secret of their own,
  `RunSecret.fresh()` drawn by the audit and held in memory only, never the run's (which `save` keeps on
  disk: its reader could recompute the held-in canaries): their coins `batch_rng(CANARY, 0)`, at step t the
  canaries sampled `batch_rng(CANARY_BATCH, t)` and the auditor's shadow batch `batch_rng(SHADOW, t)`. So do
  the final-model audit's coins (tanplan.workflow.final_audit). An audited run is never resumed.
- It is private state: stored only in the run's checkpoint folder (owner-only file, `save`), so that
  a resumed run continues with the identical batches and noise; never in a config, summary, ledger,
  metrics file, report, log or the released model, and `repr` hides it.
- Two runs never share one: a proxy at constant η_step has σ'/B' = σ/B, so the same noise in a proxy
  and its target would cancel in the difference of the two released models (for SGD,
  θ_A/η_A − θ_B/η_B). So a secret is BOUND to the run it was drawn for: `for_run` stores, beside it, a
  keyed hash (HMAC under the secret itself) of every value the run's computation depends on (the config
  keys that change its batches, noise or updates, the identity of its training data, the structure of
  its parameters). Only a resume of that same run reuses it; a new run into the folder draws a fresh
  one; a resume whose run differs is refused, naming the first differing key, and nothing is deleted.

`RunSecret.from_noise_seed(n)` (privacy.noise_seed = n) derives the randomness from a number that the
config shows: reproducible, for tests only, and NOT private (`reproducible` is then True).

    >>> a, b = RunSecret.fresh(), RunSecret.fresh()
    >>> a == b, a.reproducible, RunSecret.from_noise_seed(7) == RunSecret.from_noise_seed(7)
    (False, False, True)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tanplan.errors import UsageError

WORDS = 8  # 32-bit words: 256 bits of entropy
FILE_NAME = "run_secret.json"

# Stream tags: each use of the secret draws from its own stream.
NOISE, BATCH, SNIP, CANARY, CANARY_BATCH, SHADOW, AUGMENT = 1, 2, 3, 4, 5, 6, 7
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

    def bind(self, identity: dict) -> dict:
        """{key: HMAC-SHA256(secret, key = value)} for each key of the run's identity: enough to tell which
        value changed, nothing about the values to whoever lacks the secret."""
        mac_key = np.asarray(self.words, dtype=np.uint32).tobytes()
        return {k: hmac.new(mac_key, f"{k}={json.dumps(v, sort_keys=True)}".encode(), hashlib.sha256).hexdigest()[:24]
                for k, v in sorted(identity.items())}

    def mismatch(self, binding: dict | None, identity: dict) -> str | None:
        """The first key whose value differs from the one this secret was bound to (None: the same run,
        or a legacy secret stored without a binding)."""
        if binding is None:
            return None
        mine = self.bind(identity)
        for key in [*identity, *sorted(set(binding) - set(identity))]:  # the config's keys first: they name the cause
            if binding.get(key) != mine.get(key):
                return key
        return None

    # ---------------------------------------------------------------- private storage

    def save(self, directory: str | os.PathLike, binding: dict | None = None) -> Path:
        """Write the secret (and its binding, see `bind`) to directory/run_secret.json, readable by its
        owner only (mode 0600).

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
                json.dump({"words": list(self.words), "reproducible": self.reproducible, "binding": binding}, f)
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
        found = load_bound(directory)
        return found[0] if found is not None else None


def load_bound(directory: str | os.PathLike) -> tuple[RunSecret, dict | None] | None:
    """(the secret saved in directory, its binding or None), or None when there is none; UsageError when
    it is unreadable."""
    path = Path(directory) / FILE_NAME
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        words = tuple(int(w) for w in data["words"])
        reproducible = bool(data.get("reproducible", False))
        binding = data.get("binding")
        well_formed = isinstance(binding, dict) and all(isinstance(v, str) for v in binding.values())
        if binding is not None and not well_formed:
            raise TypeError("binding")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"the run's secret {str(path)!r} is unreadable ({type(err).__name__}); without it "
                         "the run cannot be resumed exactly: start a new --out") from None
    if len(words) != WORDS or not all(0 <= w < 2**32 for w in words):
        raise UsageError(f"the run's secret {str(path)!r} is malformed: start a new --out")
    return RunSecret(words, reproducible), binding


def for_run(directory: str | os.PathLike | None, noise_seed: int, *, identity: dict | None = None,
            resume: bool = True, create: bool = True) -> RunSecret:
    """The secret of the run whose private folder is `directory` (None: a run that writes no files).

    identity: what the run's noise protects ({key: value}, see the module docstring), to which the
    secret is bound. resume=True: a stored secret bound to the same identity is reused (a resumed or
    restarted run repeats the same computation, so it releases nothing new); one bound to another
    identity is refused (UsageError naming the key; nothing is deleted). resume=False (a new run): a
    stored secret is never reused, a fresh one replaces it. A fresh secret comes from OS entropy, or
    with noise_seed >= 0 from that seed (not private), and is saved with its binding before any step.
    create=False (the workers of a multi-process run) requires the secret the driver saved.
    """
    wanted = RunSecret.from_noise_seed(noise_seed) if noise_seed >= 0 else None
    found = load_bound(directory) if directory is not None else None
    if found is not None and (resume or not create):
        stored, binding = found
        if (wanted is not None and stored != wanted) or (wanted is None and stored.reproducible):
            raise UsageError(f"privacy.noise_seed = {noise_seed} does not match the noise of the run in "
                             f"{str(directory)!r}: keep the config it started with, or start a new --out")
        key = stored.mismatch(binding, identity) if identity is not None else None
        if key is not None:
            raise UsageError(f"--resume is not allowed: the run in {str(Path(directory).parent)!r} was started with "
                             f"another {key}; its secret belongs to that run only (nothing was changed): restore "
                             "the run's config, or start a new run in another --out")
        return stored
    if not create:
        raise UsageError(f"no run secret in {str(directory)!r}: the launcher must create it before the workers start")
    secret = wanted or RunSecret.fresh()
    if directory is not None:
        secret.save(directory, secret.bind(identity) if identity is not None else None)
    return secret
