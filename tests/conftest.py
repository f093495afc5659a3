"""Test-session set-up: hermetic caches and the process settings that `tanplan` itself makes.

Every session gets its own empty cache folder: the data cache (TANPLAN_CACHE), XDG_CACHE_HOME, matplotlib's
and JAX's persistent compilation cache, so that the suite behaves on a warm machine exactly as on a new one,
and never writes to the home directory. The folder is made once per session by the process pytest was
started in and shared by its xdist workers (they inherit its environment; TANPLAN_TEST_SESSION_CACHE names
it): a program one worker or one `tanplan` subprocess compiled, the others load instead of compiling it again,
and a dataset one generated the others read. Only the process that made it deletes it, at the session's end.
JAX caches every program (no minimum compile time): the suite's programs are small, and compiling them again
in each process, not running them, is most of what it spends.

Where JAX runs on the CPU alone, XLA compiles for compile time, not run time (FAST_XLA_FLAGS, put in XLA_FLAGS
so that `tanplan` subprocesses inherit them: LLVM's optimisations off, the loop emitters instead of the fusion
emitters, one code-generation thread): the suite's tiny programs run in micro- to milliseconds either way, and
compiling them costs a third of the CPU (the shrunk CIFAR-10 launch of tests/workflow/test_experiments.py: 87
→ 28 CPU-s). Runs compared with each other in a test compile alike.

dp_accounting's RDP of one order of the subsampled Gaussian (_compute_log_a, a pure function of three floats)
is memoised in each test process: the planners, ledgers and audits of the suite ask for the same curves again
and again (687 curves, 102 distinct, in tests/workflow/test_optimize.py, test_final_audit.py and
test_total_budget.py), each a few hundred series evaluations per order. The values are the library's own.

TANPLAN_TEST_PLAIN=1 turns both off (XLA's default compilation, dp_accounting as installed): `make test-all`
sets it, so that every test, the slow ones included, also runs as users' runs do.
This directory is on sys.path, so tests import the shared `helpers` and `fakes` modules by name.
"""

import functools
import os
import shutil
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

from tanplan.runtime import configure_process, cpu_only  # noqa: E402  (after the cache variables are set)

FAST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                  "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")
_PLAIN = bool(os.environ.get("TANPLAN_TEST_PLAIN"))
if cpu_only() and not _PLAIN:
    _flags = os.environ.get("XLA_FLAGS", "")  # the user's own flags kept (an xdist worker's has them already)
    os.environ["XLA_FLAGS"] = " ".join([_flags, *(f for f in FAST_XLA_FLAGS if f.split("=")[0] not in _flags)]).strip()
configure_process()


def _memoise_rdp() -> None:
    """Put a cache in front of dp_accounting's _compute_log_a(q, noise_multiplier, alpha) (see above)."""
    try:
        from dp_accounting.rdp import rdp_privacy_accountant as rdp
    except ImportError:  # pragma: no cover - the test extra installs it
        return
    plain = getattr(rdp, "_compute_log_a", None)
    if plain is None or hasattr(plain, "plain"):  # another version of the library, or done already
        return
    cached = functools.lru_cache(maxsize=1 << 20)(plain)

    def log_a(q, noise_multiplier, alpha):
        try:
            return cached(q, noise_multiplier, alpha)
        except TypeError:  # an unhashable argument (a 0-d array): computed as the library does
            return plain(q, noise_multiplier, alpha)

    log_a.plain = plain
    rdp._compute_log_a = log_a


if not _PLAIN:
    _memoise_rdp()


def pytest_sessionfinish(session, exitstatus):
    if _OWNER:
        shutil.rmtree(_CACHE, ignore_errors=True)
