"""Test-session set-up: hermetic caches and the process settings that `tanplan` itself makes.

Every session gets its own empty data cache (TANPLAN_CACHE) and JAX compilation cache, so that the
suite behaves on a warm machine exactly as on a new one, and never writes to the home directory.
This directory is on sys.path, so tests import the shared `helpers` and `fakes` modules by name.
"""

import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="tanplan-tests-")
os.environ["TANPLAN_CACHE"] = _CACHE
os.environ["XDG_CACHE_HOME"] = os.path.join(_CACHE, "xdg")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(_CACHE, "jax")
os.environ.setdefault("MPLCONFIGDIR", os.path.join(_CACHE, "matplotlib"))
os.environ.pop("TANPLAN_NO_JAX_CACHE", None)

from tanplan.runtime import configure_process  # noqa: E402  (after the cache variables are set)

configure_process()


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE, ignore_errors=True)
