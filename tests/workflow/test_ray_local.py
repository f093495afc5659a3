"""A local Ray is reachable from this machine only: it listens on the loopback interface, has no dashboard,
and its session folder is private and gone after the run (tanplan.ray_session). The fast tests check what
tanplan asks of Ray without starting it; the slow one watches the sockets of a real `tanplan sweep`."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from helpers import skip_module_without

skip_module_without("ray")

from tanplan import ray_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray():
    import ray  # here, not at collection: every xdist worker collects this module

    return ray


def test_a_local_ray_is_asked_for_loopback_no_dashboard_and_a_private_folder(monkeypatch, ray):
    from ray._private import ray_constants

    seen = {}

    def fake_init(**kwargs):
        folder = kwargs["_temp_dir"]
        seen.update(kwargs, mode=stat.S_IMODE(os.stat(folder).st_mode), env=os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"),
                    cluster=ray_constants.ENABLE_RAY_CLUSTER)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    before = ray_constants.ENABLE_RAY_CLUSTER
    session = ray_session.start_ray(None, num_cpus=1)
    ray_session.stop_ray(session)
    assert seen["address"] == "local" and seen["include_dashboard"] is False
    assert seen["env"] == "0" and seen["cluster"] is False  # Ray's laptop mode: node IP 127.0.0.1
    assert seen["mode"] == 0o700 and len(seen["_temp_dir"]) < 40  # private; room for Unix socket names
    assert not Path(seen["_temp_dir"]).exists()
    assert ray_constants.ENABLE_RAY_CLUSTER == before and "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ


def test_sigterm_in_a_ray_session_is_an_interrupt_and_rays_handlers_are_undone(monkeypatch, ray):
    """ray.init installs Ray's SIGTERM handlers (a C++ stack dump, exit 1): a session replaces them by an
    interrupt (the caller's `finally` shuts Ray down), and stop_ray restores the handler found before."""
    import signal

    def ray_like_init(**kwargs):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))  # what Ray's driver installs

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", ray_like_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    before, before_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    session = ray_session.start_ray(None, num_cpus=1)
    try:
        assert ray_session.last_signal() is None
        with pytest.raises(KeyboardInterrupt):  # not SystemExit(1), not a dump: the SIGINT handler's interrupt
            signal.raise_signal(signal.SIGTERM)
            time.sleep(1)
        assert ray_session.last_signal() == signal.SIGTERM
        signal.signal(signal.SIGINT, lambda signum, frame: None)  # what Ray Tune leaves after its run
    finally:
        ray_session.stop_ray(session)
    assert signal.getsignal(signal.SIGTERM) is before and signal.getsignal(signal.SIGINT) is before_int


@pytest.mark.parametrize("address, message", [
    ("notaport", "is not allowed: use auto, HOST:PORT"),
    ("127.0.0.1:99999", "is not allowed"),
    ("127.0.0.1:1", "no Ray cluster answers there"),
])
def test_an_address_is_checked_before_ray_tries_it(monkeypatch, ray, address, message):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: pytest.fail("Ray must not be tried"))
    with pytest.raises(ray_session.UsageError, match=message):
        ray_session.start_ray(address, num_cpus=1)


# ---------------------------------------------------------------- sockets of a real sweep


def _listening_sockets() -> dict[str, tuple[str, int]]:
    """{socket inode: (address, port)} of every TCP socket in LISTEN state on this machine."""
    found = {}
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_ip)
            # /proc writes each 32-bit word in host (little-endian) order
            ip = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
            found[fields[9]] = (_format_ip(ip), int(hex_port, 16))
    return found


def _format_ip(ip: bytes) -> str:
    import ipaddress

    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_file.read_text()
        except OSError:
            continue
        pid, ppid = int(text.split()[0]), int(text[text.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


def _sockets_of(pids: set[int]) -> set[tuple[int, str, int]]:
    listening = _listening_sockets()
    out = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in listening:
                out.add((pid, *listening[link[8:-1]]))
    return out


TINY_TOML = """
[data]
num_samples = 2000
[model]
name = "mlp"
width = 16
[privacy]
sigma = 4.0
[train]
batch_size = 256
steps = 4
eval_every = 2
physical_batch_size = 64
grad_method = "vmap"
[sweep]
top_k = 0
[sweep.space]
learning_rate = [1.0, 2.0]
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp (Linux)")
def test_a_local_sweep_listens_on_loopback_only_and_leaves_no_session_folder(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    # The sweep's temporary directory, short enough for Ray's socket paths: empty again afterwards.
    temp = Path(tempfile.mkdtemp(prefix="tq", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str(temp), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-m", "tanplan", "sweep", "--config", str(config), "--proxy-batch-size",
                             "64", "--trials", "1", "--out", str(tmp_path / "sweep")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[tuple[int, str, int]] = set()
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= _sockets_of(_descendants(proc.pid))
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        output = proc.communicate()[0]
        left = list(temp.iterdir())
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, output[-3000:]
    assert len({pid for pid, _, _ in seen}) >= 3, seen  # the GCS, the raylet and a worker at least were seen
    exposed = sorted(s for s in seen if s[1] not in ("127.0.0.1", "::1"))
    assert not exposed, f"listening beyond the loopback interface: {exposed}"
    assert left == [], left  # Ray's session folder is gone
