"""Test set-up: 8 fake CPU devices, one compilation cache, one scratch dir.

Runs in pytest's main process before JAX initialises (and again in each
xdist worker, which inherits the environment set here):

* 8 fake CPU devices, so sharding code is exercised on any machine.
* JAX's persistent compilation cache in `.pytest_cache/jax_cache`, shared by
  the xdist workers and by the processes tests start (notebook kernels,
  multi-process launches): the colabs and the experiment tests compile many
  of the same programs. `JAX_COMPILATION_CACHE_DIR=` (empty) turns it off.
* One scratch directory for the whole run (`TMPDIR`, `tempfile.tempdir`,
  `JAXLAB_CACHE`),
  removed when the run ends: the system temp directory is left as it was
  found, whatever a test, a notebook or a subprocess forgot to delete. What
  was left there is listed at the end of the run, so a leak is seen.
* Tests that kill every process of the sandbox user (`kill(-1)` from a
  sandboxed job; a test method with `sandbox_exclusive = True`) run alone:
  every other test holds a shared lock on a file in the scratch directory,
  these an exclusive one, so the other xdist worker's sandbox jobs (which run
  as that same user) are never their victims.
* JAX's in-memory caches cleared and the C heap handed back to the system
  after each test module (`jax.clear_caches()`, then glibc's
  `malloc_trim`): the compiled programs of every shape a module ran stay
  cached by the functions that compiled them, and glibc keeps what XLA's
  threads free. Without both, each of the two xdist workers grew to 8.8 GB
  by the end of the suite on a 2-core machine (trimming alone changed
  nothing); on three test directories in one process, both together cut the
  peak from 6.3 to 4.6 GB and the end from 5.2 to 1.8 GB. A later module
  that runs a program again reads it from the persistent cache. Each test
  process's peak RSS is printed at the end of the run.
* With `--dist loadfile` (`make test`), test modules longest first, by the
  times recorded in `docs/testing_durations.json` (the slowest CPU kind's;
  a module not recorded there counts as a median one). Each module runs
  whole on one xdist worker (its `setUpClass` fixtures and compiled
  programs built once), and the run ends on short modules, so the two
  workers finish together (longest-processing-time-first scheduling). The
  order of the tests within a module is unchanged.
"""

import contextlib
import ctypes
import ctypes.util
import fcntl
import gc
import json
import os
import resource
import shutil
import sys
import tempfile

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SCRATCH_ENV = "JAXLAB_TEST_SCRATCH"

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# LLVM's O0 for XLA:CPU code: the suite's programs are tiny, so compiling
# them is most of its time, and O0 compiles about a quarter faster. It
# changes the machine code, not the math: tolerances that hold at O2 hold
# here (the suite passes at both; `XLA_FLAGS=...level=2` to check).
if "--xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=0"
# XLA:CPU's classic fusion emitters (LLVM IR written directly) instead of its
# MLIR fusion emitters (the default since jaxlib 0.9): the same fused HLO,
# about half the backend compile time. On the grpo_learner, diffusion and
# splash test modules 36 -> 15 s of compiling (56 -> 33 s in all), and on the
# decoder, GGUF and M-BEIR modules (SmolLM2's real weights) 37 -> 20 s with
# no slower execution. Elementwise functions (exp, tanh, log) are emitted by
# other code, so results can differ in the last bits: the tolerances hold
# (`XLA_FLAGS=--xla_cpu_use_fusion_emitters=true` to check).
if "--xla_cpu_use_fusion_emitters" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " --xla_cpu_use_fusion_emitters=false"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(_ROOT, ".pytest_cache", "jax_cache"))
# Every program, however small: most of the suite's programs compile in well
# under JAX's default threshold of 1 s, and together they are most of its time.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

if _SCRATCH_ENV not in os.environ:  # pytest's main process
  os.environ[_SCRATCH_ENV] = tempfile.mkdtemp(prefix="jaxlab_tests_")
  _OWNS_SCRATCH = True
else:  # an xdist worker, or a pytest run started by a test
  _OWNS_SCRATCH = False
os.environ["TMPDIR"] = os.environ[_SCRATCH_ENV]
# jaxlab's own cache (`jaxlab.io.pretrained`: dequantised GGUF weights, 0.5 GB
# for SmolLM2, and tokenizers) in the scratch dir too, not the user's
# ~/.cache/jaxlab: its keys hold the file's mtime, so every fresh clone's
# run would add another copy there.
os.environ["JAXLAB_CACHE"] = os.path.join(os.environ[_SCRATCH_ENV],
                                          "jaxlab-cache")
tempfile.tempdir = os.environ[_SCRATCH_ENV]


_LOCKS = "jaxlab-test-locks"
_LOCK_HELD_ENV = "JAXLAB_TEST_LOCK_HELD"


@pytest.fixture(autouse=True)
def _sandbox_user_lock(request):
  """Shared lock per test; exclusive for a `sandbox_exclusive` test method.

  A readers-writer lock across the xdist workers (flock on files in the one
  scratch dir) with a turnstile, so an exclusive test waiting for the lock is
  not starved by the other worker's stream of shared holders: it takes the
  turnstile first, and no new test gets past the turnstile until the
  exclusive test holds the lock. Processes a test starts (a nested pytest)
  inherit `_LOCK_HELD_ENV` and take no lock, so they cannot deadlock with
  their parent.
  """
  if os.environ.get(_LOCK_HELD_ENV):
    yield
    return
  exclusive = bool(getattr(getattr(request.node, "obj", None),
                           "sandbox_exclusive", False))
  locks = os.path.join(os.environ[_SCRATCH_ENV], _LOCKS)
  os.makedirs(locks, exist_ok=True)
  with contextlib.ExitStack() as stack:
    turnstile = stack.enter_context(
        open(os.path.join(locks, "turnstile"), "a"))
    lock = stack.enter_context(open(os.path.join(locks, "sandbox_user"), "a"))
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    fcntl.flock(turnstile, fcntl.LOCK_UN)
    os.environ[_LOCK_HELD_ENV] = "1"
    try:
      yield
    finally:
      del os.environ[_LOCK_HELD_ENV]
      fcntl.flock(lock, fcntl.LOCK_UN)


def _recorded_module_seconds() -> dict[str, float]:
  """Per test module, its slowest recorded time over the CPU kinds."""
  path = os.path.join(_ROOT, "docs", "testing_durations.json")
  try:
    with open(path) as f:
      kinds = json.load(f)
  except (OSError, ValueError):
    return {}
  seconds = {}
  for kind in kinds.values():
    for module, t in kind.get("modules", {}).items():
      seconds[module] = max(seconds.get(module, 0.0), float(t))
  return seconds


def pytest_collection_modifyitems(session, config, items):
  """Under `--dist loadfile`, the longest test modules first (see above)."""
  del session
  if getattr(config.option, "dist", "no") != "loadfile":
    return
  seconds = _recorded_module_seconds()
  if not seconds:
    return
  median = sorted(seconds.values())[len(seconds) // 2]
  def cost(item):
    rel = os.path.relpath(str(item.path), _ROOT)
    return seconds.get(rel, median)
  # sorted() is stable: a module's tests keep their order.
  items[:] = sorted(items, key=lambda item: -cost(item))


_LIBC = ctypes.util.find_library("c")
# glibc's malloc_trim: returns freed C-heap pages to the system (absent off
# glibc, e.g. on macOS or musl, where the hook below does nothing).
_MALLOC_TRIM = getattr(ctypes.CDLL(_LIBC), "malloc_trim", None) if _LIBC else None


def _peak_rss_mb() -> float:
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  # Bytes on macOS, KiB on Linux.
  return peak / 2**20 if sys.platform == "darwin" else peak / 1024


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
  """After a module's last test (and its fixtures' teardown): free memory."""
  if nextitem is None or nextitem.path != item.path:
    jax = sys.modules.get("jax")
    if jax is not None:
      jax.clear_caches()
    gc.collect()
    if _MALLOC_TRIM is not None:
      _MALLOC_TRIM(0)


_PEAKS = {}


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_testnodedown(node, error):
  del error
  peak = getattr(node, "workeroutput", {}).get("peak_rss_mb")
  if peak is not None:
    _PEAKS[node.gateway.id] = peak


def pytest_sessionfinish(session, exitstatus):
  del exitstatus
  if hasattr(session.config, "workerinput"):  # an xdist worker
    session.config.workeroutput["peak_rss_mb"] = _peak_rss_mb()
    return
  if not _OWNS_SCRATCH:
    return
  scratch = os.environ[_SCRATCH_ENV]
  # pytest's own tmp_path directories live under pytest-of-<user>.
  # jaxlab-session-cache: what is built once per run on purpose
  # (jaxlab.testing.session_cache: the shipped GGUF converted, the DPad
  # tests' tiny LLaDA / Dream), not a leak.
  left = sorted(n for n in os.listdir(scratch)
                if not n.startswith("pytest-of-")
                and n not in (_LOCKS, "jaxlab-session-cache", "jaxlab-cache"))
  if left:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
      reporter.write_line(
          f"tests left {len(left)} entries in the scratch dir (removed): "
          + ", ".join(left[:20]) + (" ..." if len(left) > 20 else ""))
  shutil.rmtree(scratch, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
  del exitstatus, config
  peaks = _PEAKS or {"main": _peak_rss_mb()}
  terminalreporter.write_line(
      "peak RSS per test process: " + ", ".join(
          f"{k} {v / 1024:.1f} GB" for k, v in sorted(peaks.items())))
