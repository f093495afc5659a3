"""The data-size term of a prediction whose proxies learn on a public set smaller than the private one.

The proxies keep the target's σ/B and S whatever the public set's size N_pub (tanplan.workflow.tuning), so the
noise on their mean gradient is the launch's. What a smaller N_pub still changes is how many distinct examples
the S steps draw from, and so what the model generalises from: the batch law, fitted at N_pub, is extrapolated
to N too. The term measures that, it does not assume it: the law's top rung (B'_top, its seeds) is trained
again with as many seeds on the first ⌊N_pub/2⌋ public examples, and one halving's effect, d = mean at N_pub −
mean at N_pub/2, is carried log-linearly over the L = log2(N/N_pub) doublings up to N:

    shift = d·L                                       (added to the law's mean)
    var   = L²·(s²_pub/n_pub + s²_half/n_half) + (shift/2)²

the first part the two means' seed noise, the second a stated misspecification of the log-linear data law
(half of the shift it extrapolates). Where N_pub ≥ N there is no term: the proxies draw from at least the
launch's number of examples. Pure: tanplan.workflow.data_size trains the runs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tanplan.outcomes.fit import DataSizeRecord

MISSPECIFICATION_SHARE = 0.5  # the stated std of the log-linear extrapolation, as a share of its shift


def needs_term(public_size: int, private_size: int) -> bool:
    """Whether a prediction from proxies on public_size examples extrapolates to more (private_size)."""
    return 0 < public_size < private_size


@dataclass(frozen=True)
class DataSizeTerm:
    """The measured data-size term (module docstring): the top rung's accuracies at N_pub and at N_pub/2."""

    public_size: int  # N_pub
    private_size: int  # N
    half_size: int  # ⌊N_pub/2⌋, the subset the second runs learn on
    batch_size: int  # B'_top
    public: tuple[float, ...]  # the rung's seeds at N_pub
    half: tuple[float, ...]  # its seeds at N_pub/2

    def __post_init__(self):
        if len(self.public) < 2 or len(self.half) < 2:
            raise ValueError("the data-size term needs two seeds or more at each size (their scatter is its noise)")

    @property
    def doublings(self) -> float:
        """L = log2(N/N_pub): how far the law is carried in data size."""
        return math.log2(self.private_size / self.public_size)

    @property
    def per_halving(self) -> float:
        """d: mean accuracy at N_pub minus at N_pub/2 (per halving, measured at N_pub/half_size ≈ 2)."""
        return (statistics.fmean(self.public) - statistics.fmean(self.half)) / math.log2(self.public_size /
                                                                                           self.half_size)

    @property
    def shift(self) -> float:
        return self.per_halving * self.doublings

    @property
    def variance(self) -> float:
        noise = (statistics.variance(self.public) / len(self.public) + statistics.variance(self.half) / len(self.half))
        scale = self.doublings / math.log2(self.public_size / self.half_size)
        return scale ** 2 * noise + (MISSPECIFICATION_SHARE * self.shift) ** 2

    def record(self) -> DataSizeRecord:
        return DataSizeRecord(public_size=self.public_size, private_size=self.private_size,
                              half_size=self.half_size, batch_size=self.batch_size,
                              public_accuracies=self.public, half_accuracies=self.half,
                              doublings=self.doublings, per_halving=self.per_halving, shift=self.shift,
                              std=math.sqrt(self.variance))
