"""Ray for tanplan's sweeps and launches: a local cluster that only this machine can reach, or an attached one.

Local (no --address): Ray starts in "no cluster" mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, the mode Ray
uses on laptops), so its node IP is 127.0.0.1 and the GCS, the raylet, the object manager, the runtime-env
agent and every worker listen on the loopback interface only; the dashboard is off. Its session files
(sockets, logs, spilled objects) live in a private folder (mode 0700, tanplan-ray-*) under the system's
temporary directory (/tmp when that path is long), removed when the run ends. A Unix socket path may not
exceed 107 bytes, which is why the folder is not inside --out, whose path can be any length. A SIGKILL
leaves the folder behind; no other run uses it.

Signals: ray.init installs Ray's own SIGTERM handlers in the driver (a C++ one that dumps a stack trace on
stderr, and a Python one that exits with status 1). While a session is open, SIGTERM is handled as SIGINT
instead: the SIGINT handler in force runs (Ray Tune's stops its run gracefully; otherwise KeyboardInterrupt),
so the caller's `finally` shuts Ray down (its workers, raylet and GCS end) and removes the session folder.
`last_signal()` tells the caller which signal it was; stop_ray restores the SIGTERM and SIGINT handlers
found before (Ray Tune leaves its SIGINT handler installed after a run).

Attached (--address auto, HOST:PORT or ray://HOST:PORT): the address is checked first (`check_address`:
malformed, or nobody listening, is one line and exit 2 instead of Ray's minute of retries), then Ray's own
settings of that cluster apply.

Imported only inside functions that need Ray: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import warnings
from dataclasses import dataclass

from tanplan.errors import UsageError

# Ray's switch between cluster and laptop mode; "0" makes it advertise and bind 127.0.0.1.
_NO_CLUSTER = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
OBJECT_STORE_BYTES = 200 * 2**20  # the object store of a local cluster: results and configs only


@dataclass
class RaySession:
    """A Ray that this process started: what `stop_ray` must undo."""

    temp_dir: str | None  # the local cluster's private session folder (None when attached)
    saved_env: str | None = None
    saved_constant: bool | None = None
    saved_sigterm: object = None  # the SIGTERM handler before ray.init (None: not replaced)
    saved_sigint: object = None  # the SIGINT handler before (Ray Tune leaves its own installed after a run)


_last_signal: int | None = None  # the signal that stopped the newest session, if one did


def last_signal() -> int | None:
    """SIGTERM or SIGINT when one reached this process while its newest Ray session was open, else None."""
    return _last_signal


def _as_interrupt(signum, frame) -> None:
    """SIGTERM (and SIGINT) in a Ray session: remember it, then run the SIGINT handler in force (Ray
    Tune's graceful stop while it runs a Tuner; else KeyboardInterrupt)."""
    global _last_signal
    _last_signal = signum
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not _as_interrupt:
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def _hold_signals(session: RaySession) -> None:
    """Replace Ray's SIGTERM handlers (installed by ray.init) by _as_interrupt; main thread only."""
    try:
        signal.signal(signal.SIGTERM, _as_interrupt)
    except ValueError:  # not the main thread: signals are its owner's
        session.saved_sigterm = None


def check_address(address: str | None, timeout: float = 5.0) -> None:
    """UsageError for an --address that is malformed or where nobody listens (None and auto pass)."""
    if not address or address == "auto":
        return
    hostport = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host or not 0 < int(port) < 65536:
        raise UsageError(f"--address {address!r} is not allowed: use auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise UsageError(f"--address {address}: no Ray cluster answers there ({err.strerror or err}); "
                         "start one with `ray start --head`, or leave --address out to run locally") from None


def start_ray(address: str | None, *, num_cpus: int, log_to_driver: bool = False,
              runtime_env: dict | None = None) -> RaySession | None:
    """Start a loopback-only local Ray (address None) or attach to `address`; None when Ray was already
    initialised in this process (it is then used as it is, and left running)."""
    import ray

    global _last_signal
    _last_signal = None
    if ray.is_initialized():
        return None
    options = dict(log_to_driver=log_to_driver, logging_level="ERROR")
    if runtime_env:
        options["runtime_env"] = runtime_env
    sigterm, sigint = _current_handlers()
    if address:
        session = RaySession(temp_dir=None, saved_sigterm=sigterm, saved_sigint=sigint)
        try:
            _attach(address, options)
        except BaseException:
            _stop_rest(session)  # ray.init may have installed its handlers before it failed
            raise
        _hold_signals(session)
        return session
    session = _loopback_only()
    session.saved_sigterm, session.saved_sigint = sigterm, sigint
    session.temp_dir = tempfile.mkdtemp(prefix="tanplan-ray-", dir=_short_temp_root())
    try:
        with _fork_exec_is_safe():
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                     object_store_memory=OBJECT_STORE_BYTES, _temp_dir=session.temp_dir, **options)
        _hold_signals(session)
    except BaseException:
        stop_ray(session)
        raise
    return session


def _current_handlers() -> tuple:
    """(SIGTERM, SIGINT) handlers in force (main thread), to restore after Ray; (None, None) elsewhere."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None, None
    return signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)


def stop_ray(session: RaySession | None) -> None:
    """Shut down the Ray that start_ray started, remove its session folder and restore Ray's mode."""
    if session is None:
        return
    import ray

    try:
        ray.shutdown()
    finally:
        _stop_rest(session)


def _stop_rest(session: RaySession) -> None:
    """After ray.shutdown: the signal handler, Ray's mode and the session folder as they were before."""
    for signum, handler in ((signal.SIGTERM, session.saved_sigterm), (signal.SIGINT, session.saved_sigint)):
        if handler is not None:
            signal.signal(signum, handler)
    if session.saved_constant is not None:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = session.saved_constant
        if session.saved_env is None:
            os.environ.pop(_NO_CLUSTER, None)
        else:
            os.environ[_NO_CLUSTER] = session.saved_env
    if session.temp_dir:
        shutil.rmtree(session.temp_dir, ignore_errors=True)


@contextlib.contextmanager
def ray_session(address: str | None, *, num_cpus: int, log_to_driver: bool = False, runtime_env: dict | None = None):
    """start_ray ... stop_ray around a block; yields whether this process started (or attached) Ray."""
    session = start_ray(address, num_cpus=num_cpus, log_to_driver=log_to_driver, runtime_env=runtime_env)
    try:
        yield session is not None
    finally:
        stop_ray(session)


@contextlib.contextmanager
def _fork_exec_is_safe():
    """Silence JAX's "os.fork() was called" warning while Ray starts its daemons: each child is exec'd at
    once (subprocess), so no JAX thread state runs in it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        yield


def _short_temp_root() -> str:
    """The system's temporary directory, or /tmp where its path leaves too little room for Ray's socket
    paths (session_<date>_<pid>/sockets/plasma_store under our folder: about 85 of the 107 bytes)."""
    root = tempfile.gettempdir()
    if len(root) > 20 and os.path.isdir("/tmp") and os.access("/tmp", os.W_OK):
        return "/tmp"
    return root


def _loopback_only() -> RaySession:
    """Put Ray in laptop mode for this process (its constant, read when the node IP is chosen) and for
    the processes it starts (the variable, read when they import Ray)."""
    from ray._private import ray_constants

    session = RaySession(temp_dir=None, saved_env=os.environ.get(_NO_CLUSTER),
                         saved_constant=ray_constants.ENABLE_RAY_CLUSTER)
    os.environ[_NO_CLUSTER] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    return session


def _attach(address: str, options: dict) -> None:
    import ray

    check_address(address)
    try:
        with _stderr_held_back() as held:  # Ray's C++ client logs every failed attempt to fd 2
            ray.init(address=address, **options)
        sys.stderr.write(held.read())  # attached: show whatever Ray had to say
    except Exception as err:  # ConnectionError, or the client's own errors
        detail = str(err).splitlines()[0] if str(err) else "no detail"
        hint = ("start one with `ray start --head`, or leave --address out to run locally" if address == "auto"
                else "if the cluster uses token authentication, set RAY_AUTH_MODE=token (token from "
                     "~/.ray/auth_token or RAY_AUTH_TOKEN); or leave --address out to run locally")
        raise UsageError(f"--address {address}: could not attach to a Ray cluster there "
                         f"({type(err).__name__}: {detail}); {hint}") from None


@contextlib.contextmanager
def _stderr_held_back():
    """Send file descriptor 2 (C++ logs included) to a temporary file; yields it, rewound, afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile(mode="w+")
    os.dup2(held.fileno(), 2)
    try:
        yield held
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
