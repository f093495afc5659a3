"""SIGTERM/SIGINT while `tanplan run`'s stages run: one line saying how to go on, Ray shut down."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

from tanplan import ray_session
from tanplan.errors import RunInterrupted


@contextlib.contextmanager
def interrupted_stage(out: Path):
    """SIGTERM/SIGINT while the stages run: RunInterrupted (one line, exit 128 + signal) saying how to go on.
    A proxy run or the launch in flight saves its checkpoint (the engine's own handler); a sweep stops its
    Ray Tune run and shuts Ray down (tanplan.ray_session); between runs the stage stops where it is."""
    caught: list[int] = []  # the signal received

    def handler(signum, frame):
        caught.append(signum)
        raise KeyboardInterrupt

    previous = {}
    try:
        for s in (signal.SIGTERM, signal.SIGINT):
            previous[s] = signal.signal(s, handler)
    except ValueError:  # not the main thread: whoever runs us handles signals
        pass
    how = f"continue with `tanplan run --resume` (the same --config, --set and --out {str(out)!r})"
    try:
        yield
    except KeyboardInterrupt:
        signum = (caught[-1] if caught else None) or ray_session.last_signal() or signal.SIGINT
        raise RunInterrupted(f"{signal.Signals(signum).name}: `tanplan run` stopped; finished runs are kept in "
                             f"{str(out)!r}: {how}", signum) from None
    except RunInterrupted as err:  # the engine's: the run in flight saved its checkpoint
        text = str(err).removesuffix("; continue with --resume")
        raise RunInterrupted(f"{text}; `tanplan run` stopped: {how}", err.exit_code - 128) from None
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
