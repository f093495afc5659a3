"""Every error class of tanplan, and the exit code the CLI turns it into (always with one line on stderr).

UsageError -> 2 (bad input, naming the value and what is allowed); BudgetExceeded -> 3 (a privacy
budget would be exceeded); NotLaunched -> 4 (`tanplan run` stopped before the full-scale launch because
its proxies cannot predict it); PrivacyViolation -> 5 (`tanplan audit`: the empirical lower bound on ε
exceeds the ε the run claims); RunInterrupted -> 128 + signal (SIGTERM/SIGINT: checkpoint saved);
TrainingDiverged, CheckpointError, WorkerLost -> 1.
"""


class TanplanError(Exception):
    """Base class: the message is shown to the user as one line."""

    exit_code = 1


class UsageError(TanplanError, ValueError):
    """Invalid input: the message names the value and what is allowed."""

    exit_code = 2


class BudgetExceeded(TanplanError):
    """A run or release would spend more privacy than the budget allows."""

    exit_code = 3


class NotLaunched(TanplanError):
    """`tanplan run` stopped before the launch: no knee in the proxy budget, or the law does not hold.

    Raised after the report and summary are written (launched: false, the reason, what to change);
    the message is the reason. `--launch-anyway` launches regardless.
    """

    exit_code = 4


class PrivacyViolation(TanplanError):
    """`tanplan audit`: the audit's lower bound on ε exceeds the ε the run claims, at the stated confidence.

    Raised after the audit's report is written and printed; the message is the one-line reason.
    """

    exit_code = 5


class TrainingDiverged(TanplanError):
    """Training stopped: the released (noisy) parameters are not finite; its steps are accounted and the last
    good checkpoint is kept."""

    exit_code = 1


class CheckpointError(TanplanError):
    """A checkpoint could not be written or read; earlier checkpoints are untouched."""

    exit_code = 1


class RunInterrupted(TanplanError):
    """SIGTERM/SIGINT: the step in flight finished and its checkpoint is saved; continue with --resume."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class WorkerLost(TanplanError):
    """A multi-process run lost its workers beyond the retries; its last checkpoint is kept."""

    exit_code = 1


def check(condition: bool, message: str) -> None:
    """Raise UsageError(message) unless condition holds."""
    if not condition:
        raise UsageError(message)
