"""The final-model (black-box) audit's outcome (final_audit.json): the threat model it assumes, the ε the audited
run claims and the empirical lower bound against it (tanplan.workflow.final_audit). JAX-free."""

from __future__ import annotations

from dataclasses import dataclass

from tanplan.outcomes.audit import Claim
from tanplan.outcomes.base import Result

# mislabelled: real training examples given a wrong label (taken out of the training set, put back when held in);
# crafted: out-of-distribution inputs (Gaussian, at the public test set's mean and spread) with a random label.
CANARY_KINDS = ("mislabelled", "crafted")
DEFAULT_KIND = "mislabelled"


@dataclass(frozen=True, kw_only=True)
class ThreatModel(Result):
    """Who the audit's adversary is: what it sees, what it chooses, and what its bound can and cannot show."""

    sees: str
    chooses: str
    does_not_see: str
    can_show: str
    cannot_show: str


THREAT_MODEL = ThreatModel(
    sees="the released model only: the final parameters the run writes to model/params.npz (its EMA when the EMA "
         "is on), queried on the canaries' inputs; and, like the adversary of DP, the rest of the training set, "
         "the config and the training algorithm",
    chooses="the canaries: M inputs with the labels it wants (mislabelled training examples or crafted "
            "out-of-distribution inputs), each put into the training set by a secret fair coin",
    does_not_see="any intermediate update, gradient or noisy sum (the accountant's ε assumes all of them are "
                 "released), the coins, the noise, the Poisson batches or the run's secret",
    can_show="a gross break of the mechanism that reaches the released model (the noise missing or far too small, "
             "examples used outside the accounted steps) where training makes the model learn single examples (few "
             "examples, many passes, small batches): the bound then exceeds the claim, a violation at the stated "
             "confidence. Where it does not (large batches), even a missing noise can leave the released model "
             "no more revealing than a private one",
    cannot_show="that the claim holds, or that it is tight: a black-box bound from one run sits far below the ε "
                "of DP-SGD (which pays for every intermediate update), so a mechanism only a little weaker than "
                "accounted, or leaking through the updates alone, goes unseen; the white-box `tanplan audit` "
                "is the stronger check of the mechanism")


@dataclass(frozen=True, kw_only=True)
class FinalAuditResult(Result):
    """What `tanplan audit --final-model` reports (final_audit.json)."""

    verdict: str  # "consistent" (bound ≤ claim) or "violation" (bound > claim at the confidence)
    reason: str
    threat_model: ThreatModel
    claim: Claim
    claimed_epsilon: float  # the smallest add/remove-one ε the run states (canaries are added examples)
    claimed_accountant: str
    lower_bound: float  # ε ≥ lower_bound with the stated confidence
    ratio: float  # lower_bound / claimed_epsilon
    confidence: float
    method: str
    score: str  # what each canary's score is, read on the released model
    guesses: int  # the top half guessed held in, the bottom half held out
    correct_guesses: int
    auroc: float  # of the scores, held in against held out (0.5: no separation)
    canaries: int
    canary_kind: str
    held_in: int
    held_out: int
    dataset_size: int  # N of the audited run: the training set less the canaries, plus the held-in ones
    batch_size: int
    steps: int
    sigma: float
    clip_norm: float
    proxy: bool
    test_accuracy: float | None  # of the audited (released) model
    wall_seconds: float
    run_folder: str | None
    note: str = ("The audited run trained canaries: its model and metrics are NOT a private release. The bound is a "
                 "lower bound for an adversary that sees the final model only: above the claim it refutes it at the "
                 "stated confidence; below it, it proves nothing.")
