"""Test-session set-up: hermetic caches, the process settings that `tanplan` itself makes, and what keeps a cold
`make test` short on a small CPU (issue 45).

Caches. Every session gets its own empty cache folder: the data cache (TANPLAN_CACHE), XDG_CACHE_HOME,
matplotlib's and JAX's persistent compilation cache, so that the suite behaves on a warm machine exactly as on a
new one, and never writes to the home directory. The folder is made once per session by the process pytest was
started in and shared by its xdist workers (they inherit its environment; TANPLAN_TEST_SESSION_CACHE names it):
a program one worker or one `tanplan` subprocess compiled, the others load instead of compiling it again, and a
dataset one generated the others read. Only the process that made it deletes it, at the session's end. JAX
caches every program (no minimum compile time): the suite's programs are small, and compiling them, not running
them, is most of what it spends.

Compilation. Where JAX runs on the CPU alone, XLA compiles for compile time, not run time (FAST_XLA_FLAGS, put in
XLA_FLAGS so that `tanplan` subprocesses inherit them: LLVM's optimisations off, the loop emitters instead of the
fusion emitters, one code-generation thread, Eigen on one thread): the suite's tiny programs run in micro- to
milliseconds either way, and compiling them costs a third of the CPU (the shrunk CIFAR-10 launch of
tests/workflow/test_experiments.py: 87 → 28 CPU-s; tests/dp/: 177 → 66). Runs compared within a test compile
alike.

Threads. Each test process runs numpy's BLAS (and OpenMP) on one thread, and so do its subprocesses: the two
xdist workers already take both cores, and a BLAS pool of two threads per worker spins against the other worker
(tests/laws/: 29 CPU-s, 5.6 on one thread; the metrics-every-step run of tests/engine/test_step_cost.py: 15.6,
3.5). Variables already set are kept.

Accounting. dp_accounting's RDP of one order of the subsampled Gaussian (_compute_log_a, a pure function of three
floats) is memoised in each test process: the planners, ledgers and audits of the suite ask for the same curves
again and again (687 curves, 102 distinct, in tests/workflow/test_optimize.py, test_final_audit.py and
test_total_budget.py; test_optimize.py: 66 → 22 CPU-s), and so is tanplan's ε of a whole composition
(accounting._epsilon_of_events), shared by the session's processes (the workers calibrate the same plans: the
suite's logged CPU 563 → 540 CPU-s). The values are the library's own.

TANPLAN_TEST_PLAIN=1 turns the compilation flags and the memo off (XLA's default compilation, dp_accounting as
installed): `make test-all` sets it, so that every test, the slow ones included, also runs as users' runs do.

Order. The costliest modules are collected first (HEAVY_FIRST; the Makefile runs xdist's loadscope without its
own reordering, which hands out the modules with the most tests first): a long module started last would leave
the other workers idle at the end. The order changes when a test runs, never what it does.

TANPLAN_TEST_CPU_LOG=<file> appends each test's CPU-s (its process and the subprocesses it waited for) to the file:
what the order above and issue 45's figures were read from.

This directory is on sys.path, so tests import the shared `helpers` and `fakes` modules by name.
"""

import functools
import math
import os
import shutil
import sqlite3
import tempfile

_SHARED = "TANPLAN_TEST_SESSION_CACHE"
if os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(os.environ.get(_SHARED, "")):
    _CACHE, _OWNER = os.environ[_SHARED], False  # an xdist worker: the session's folder, made by the controller
else:
    _CACHE, _OWNER = tempfile.mkdtemp(prefix="tanplan-tests-"), True
    os.environ[_SHARED] = _CACHE
os.environ["TANPLAN_CACHE"] = _CACHE
os.environ["XDG_CACHE_HOME"] = os.path.join(_CACHE, "xdg")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(_CACHE, "jax")
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["MPLCONFIGDIR"] = os.path.join(_CACHE, "matplotlib")
os.environ.pop("TANPLAN_NO_JAX_CACHE", None)
for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")  # read when numpy loads, below this module (see above)

from tanplan.runtime import configure_process, cpu_only  # noqa: E402  (after the cache variables are set)

FAST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                  "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1",
                  "--xla_cpu_multi_thread_eigen=false")
_PLAIN = bool(os.environ.get("TANPLAN_TEST_PLAIN"))
if cpu_only() and not _PLAIN:
    _flags = os.environ.get("XLA_FLAGS", "")  # the user's own flags kept (an xdist worker's has them already)
    os.environ["XLA_FLAGS"] = " ".join([_flags, *(f for f in FAST_XLA_FLAGS if f.split("=")[0] not in _flags)]).strip()
configure_process()


class _SharedMemo:
    """Values this session's test processes computed, in one SQLite table of the session cache: the xdist
    workers plan the same configs (the demo's plan figures, the ladders' proxies) and read what another
    computed instead of computing it again. A value is stored as the float it was."""

    def __init__(self, path: str, table: str, columns: str):
        self.path, self.table, self.columns, self.pid, self.db = path, table, columns, None, None
        names = [column.split()[0] for column in columns.split(",")]
        self.where = " AND ".join(f"{name}=?" for name in names)
        self.values = ", ".join("?" * (len(names) + 1))

    def _connection(self):
        if self.pid != os.getpid():  # a forked process opens its own
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # no fsync per insert (5,000 inserts: 4.9 s wall → 0.2)
            self.db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ({self.columns}, v REAL, PRIMARY KEY "
                            f"({', '.join(column.split()[0] for column in self.columns.split(','))}))")
            self.pid = os.getpid()
        return self.db

    def get(self, key):
        try:
            row = self._connection().execute(f"SELECT v FROM {self.table} WHERE {self.where}", key).fetchone()
        except (sqlite3.Error, TypeError):  # an argument SQLite cannot bind, or a busy file: computed
            return None
        return None if row is None else row[0]

    def put(self, key, value) -> None:
        if isinstance(value, float) and math.isfinite(value):  # SQLite keeps no NaN; ±inf computed again
            try:
                self._connection().execute(f"INSERT OR IGNORE INTO {self.table} VALUES ({self.values})",
                                           (*key, value))
            except (sqlite3.Error, TypeError):
                pass


def _memoise_rdp() -> None:
    """Put a cache in front of dp_accounting's _compute_log_a(q, noise_multiplier, alpha) (see above): this
    process's own, then the session's (_SharedMemo)."""
    try:
        from dp_accounting.rdp import rdp_privacy_accountant as rdp
    except ImportError:  # pragma: no cover - the test extra installs it
        return
    plain = getattr(rdp, "_compute_log_a", None)
    if plain is None or hasattr(plain, "plain"):  # another version of the library, or done already
        return
    shared = _SharedMemo(os.path.join(_CACHE, "accounting.sqlite"), "log_a", "q REAL, s REAL, a REAL")

    def computed(q, noise_multiplier, alpha):
        try:
            key = (float(q), float(noise_multiplier), float(alpha))
        except TypeError:  # not three numbers: computed as the library does
            return plain(q, noise_multiplier, alpha)
        value = shared.get(key)
        if value is None:
            value = plain(q, noise_multiplier, alpha)
            shared.put(key, value)
        return value

    cached = functools.lru_cache(maxsize=1 << 20)(computed)

    def log_a(q, noise_multiplier, alpha):
        try:
            return cached(q, noise_multiplier, alpha)
        except TypeError:  # an unhashable argument (a 0-d array): computed as the library does
            return plain(q, noise_multiplier, alpha)

    log_a.plain = plain
    rdp._compute_log_a = log_a


def _memoise_compositions() -> None:
    """Share tanplan's ε of a composition (accounting._epsilon_of_events, a pure function of frozen DpEvents, δ,
    the accountant, the relation and the PLD grid) across the session's processes: each process already keeps
    its own (lru_cache); the PLD of one composition costs 0.1-1 CPU-s, and the workers ask for the same ones.
    A test that swaps the accountant (accounting.make_accountant) is computed as written, and nothing it
    computed is shared."""
    from tanplan.privacy import accounting

    plain = accounting._epsilon_of_events.__wrapped__
    library = accounting.make_accountant
    shared = _SharedMemo(os.path.join(_CACHE, "accounting.sqlite"), "epsilon", "key TEXT")

    @functools.lru_cache(maxsize=1024)
    def epsilon_of_events(events, delta, accountant, neighbouring, interval):
        if accounting.make_accountant is not library:
            return plain(events, delta, accountant, neighbouring, interval)
        key = (repr((events, delta, accountant, neighbouring, interval)),)  # DpEvents: frozen attrs, exact repr
        value = shared.get(key)
        if value is None:
            value = plain(events, delta, accountant, neighbouring, interval)
            shared.put(key, value)
        return value

    accounting._epsilon_of_events = epsilon_of_events


if not _PLAIN:
    _memoise_rdp()
    _memoise_compositions()


# The modules that cost most CPU-s in a cold `make test` (issue 45), costliest first; the rest keep their order.
# (Ray's sweep, the longest in wall seconds, put first: the suite took 418 s, against 300-345 s in four runs with
# it twelfth; its start then contends with the three costliest modules.)
HEAVY_FIRST = ("test_api_doc.py", "engine/test_two_processes.py", "engine/test_routes.py", "test_plugins.py",
               "privacy/test_accounting.py", "engine/test_loop.py", "workflow/test_proxy_devices.py",
               "workflow/test_optimize.py", "dp/test_ghost_layers.py", "dp/test_pruning.py",
               "commands/test_frontier_commands.py", "workflow/test_sweep_ray.py", "commands/test_plan_command.py",
               "workflow/test_experiments.py", "workflow/test_new_user_cuts.py", "workflow/test_audit.py",
               "workflow/test_audit_input.py", "workflow/test_launch_devices.py")


def pytest_collection_modifyitems(config, items):
    rank = {f"tests/{path}": i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: modules stay whole


def pytest_sessionfinish(session, exitstatus):
    if _OWNER:
        shutil.rmtree(_CACHE, ignore_errors=True)


_CPU_LOG = os.environ.get("TANPLAN_TEST_CPU_LOG")  # a file: each test's CPU-s (its process and its children)


if _CPU_LOG:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        before = os.times()
        yield
        after = os.times()
        cpu = sum(after[i] - before[i] for i in range(4))  # user, system, children's user and system
        with open(_CPU_LOG, "a", encoding="utf-8") as log:
            log.write(f"{cpu:.2f}\t{item.nodeid}\n")
