"""A command's process: what its first Dataset imports, and how the ``mechsweep`` script ends.

- xarray learns the dask array class only once ``dask.array`` is imported
  (``solver.results.xarray_setup``): a solve's Dataset in a fresh process
  leaves ``dask.array`` unimported, and a process that imports it later
  gets dask-backed arrays as xarray always made them.
- ``sweep.cli.app.run`` (the console script) ends the process after its
  threads and every exit handler, with the command's exit code and
  everything it printed, also through a pipe; an exception that escapes
  the command ends it as Python does.
- ``solver.import_hooks.after_import`` runs code the moment a module is
  first imported (JAX's settings, xarray's dask check), not before; a single
  run imports xarray only for its Dataset, after the integration.
- ``solver.import_hooks.around_import`` runs a module's first import inside
  a context; JAX's import, under it, reads the metadata of the installed
  packages named ``jax*`` only, and still sees a ROCm plugin's.
"""

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from solver.import_hooks import after_import, around_import
from solver.integrate import xla_setup

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = ROOT / "configs" / "mechanisms" / "pendulum.yaml"


def _python(code: str, *args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def _printed(code: str, env: dict | None = None) -> str:
    """What ``code`` prints on stdout in a fresh Python process, which must end with exit code 0."""
    out = _python(code, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_solves_dataset_does_not_import_dask_and_dask_arrays_stay_dask_arrays_after():
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import solver.api\n"
        "import xarray as xr\n"
        "ds = xr.Dataset({'x': (('time',), np.arange(3.0))}, coords={'time': np.arange(3.0)})\n"
        "print('dask.array' in sys.modules)\n"
        "import dask.array as da\n"
        "from xarray.namedarray.pycompat import array_type, is_chunked_array\n"
        "a = xr.DataArray(da.ones(4, chunks=2), dims='p')\n"
        "print(a.chunks, type(a.data).__module__.split('.')[0], array_type('dask') == (da.Array,),\n"
        "      is_chunked_array(a.data), float((a + 1).sum().compute()))\n"
        "b = xr.DataArray(np.ones(4), dims='p').chunk(2)\n"
        "print(b.chunks, type(b.data).__name__)\n")
    printed = _printed(code)
    assert printed.splitlines() == ["False", "((2, 2),) dask True True 8.0", "((2, 2),) Array"]


def test_the_deferred_entry_is_xarrays_own_once_dask_array_is_imported():
    code = (
        "import solver.results.solution\n"
        "from xarray.namedarray import pycompat\n"
        "print(type(pycompat._cached_duck_array_modules['dask']).__name__)\n"
        "import dask.array\n"
        "pycompat.array_type('dask')\n"
        "print(type(pycompat._cached_duck_array_modules['dask']).__name__)\n")
    printed = _printed(code)
    assert printed.split() == ["DaskWhenImported", "DuckArrayModule"]


def test_the_console_script_ends_with_the_commands_code_and_its_whole_output():
    script = "import sys; sys.argv[0] = 'mechsweep'; from sweep.cli.app import run; run()"
    done = _python(script, "simulate", str(PENDULUM), "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("}") and '"status": "success"' in done.stdout
    bad = _python(script, "simulate", str(PENDULUM), "--set", "nothing=1")
    assert bad.returncode == 2
    assert bad.stderr.startswith("mechsweep: error:") and "nothing" in bad.stderr


def test_an_exception_that_escapes_the_command_ends_the_script_with_code_1_and_its_traceback():
    script = ("import sys\n"
              "from sweep.cli import app\n"
              "def broken(argv=None):\n"
              "    raise RuntimeError('a bug')\n"
              "app.main = broken\n"
              "app.run()\n")
    out = _python(script)
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "RuntimeError: a bug" in out.stderr


def test_a_thread_pool_left_by_the_command_is_shut_down_as_python_does():
    script = ("from concurrent.futures import ThreadPoolExecutor\n"
              "from sweep.cli import app\n"
              "pool = None\n"
              "def command(argv=None):\n"
              "    global pool\n"
              "    pool = ThreadPoolExecutor(2)\n"
              "    print(pool.submit(lambda: 'pool ran').result(), flush=True)\n"
              "    return 0\n"
              "app.main = command\n"
              "app.run()\n")
    out = _python(script, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["pool ran"]


def test_every_exit_handler_and_every_thread_still_runs_before_the_process_ends():
    script = ("import atexit, sys, threading, time\n"
              "import logging\n"
              "atexit.register(lambda: print('registered before the command', flush=True))\n"
              "from sweep.cli import app\n"
              "def late():\n"
              "    time.sleep(0.3)\n"
              "    print('thread finished', flush=True)\n"
              "def command(argv=None):\n"
              "    atexit.register(lambda: print('registered by the command', flush=True))\n"
              "    threading.Thread(target=late).start()\n"
              "    sys.stdout.write('command ran, unflushed')\n"
              "    return 3\n"
              "app.main = command\n"
              "app.run()\n")
    out = _python(script)
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines() == ["command ran, unflushedthread finished", "registered by the command",
                                       "registered before the command"]


def test_a_single_run_integrates_before_xarray_is_imported_and_still_returns_a_dataset(tmp_path):
    # xarray and pandas cost a warm `simulate` 0.3 s; the integration need not wait for them.  A run
    # whose program is compiled from scratch may import them while it compiles (solver.api._solve), so
    # the claim is checked on the second process of a cache of its own: the first one fills it.
    import os

    env = dict(os.environ, MECHSWEEP_JAX_CACHE=str(tmp_path), JAX_COMPILATION_CACHE_DIR=str(tmp_path))
    code = (
        "import sys\n"
        "import solver\n"
        "from solver.integrate import single_run\n"
        "seen = []\n"
        "run = single_run.SingleRun.run\n"
        "def spy(self, *a, **k):\n"
        "    seen.append('xarray' in sys.modules)\n"
        "    return run(self, *a, **k)\n"
        "single_run.SingleRun.run = spy\n"
        f"ds = solver.load({str(PENDULUM)!r}).solve(t_span=(0.0, 0.5))\n"
        "from xarray.namedarray import pycompat\n"
        "print(seen, type(ds).__name__, str(ds.status_meaning), 'dask.array' in sys.modules,\n"
        "      type(pycompat._cached_duck_array_modules['dask']).__name__)\n")
    _printed(code, env)  # fills the cache (whether xarray came before its run depends on the compile's timing)
    printed = _printed(code, env)
    assert printed.split() == ["[False]", "Dataset", "success", "False", "DaskWhenImported"]


def test_callbacks_run_in_order_once_the_module_has_run_and_before_the_importer_gets_it(tmp_path):
    (tmp_path / "hooked_probe.py").write_text("VALUE = 1\n")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from solver.import_hooks import after_import\n"
        "seen = []\n"
        "after_import('hooked_probe', lambda m: seen.append(('first', m.VALUE)))\n"
        "after_import('hooked_probe', lambda m: setattr(m, 'VALUE', 2) or seen.append(('second', m.VALUE)))\n"
        "print('hooked_probe' in sys.modules, seen)\n"
        "import hooked_probe\n"
        "print(hooked_probe.VALUE, seen)\n"
        "import importlib; importlib.reload(hooked_probe)\n"
        "print(hooked_probe.VALUE, seen)\n")
    printed = _printed(code)
    assert printed.splitlines() == ["False []", "2 [('first', 1), ('second', 2)]",
                                       "1 [('first', 1), ('second', 2)]"]


def test_a_module_imported_already_gets_the_callback_at_once():
    seen = []
    after_import("json", seen.append)
    assert seen == [sys.modules["json"]]


def test_only_top_level_modules_are_accepted():
    with pytest.raises(ValueError, match="top-level module name, got 'xarray.core'"):
        after_import("xarray.core", print)


def test_a_context_around_the_first_import_covers_its_submodules_and_ends_before_the_callbacks(tmp_path):
    package = tmp_path / "around_probe"
    package.mkdir()
    (package / "__init__.py").write_text("import around_probe.inner\n")
    (package / "inner.py").write_text("import builtins\nSEEN = builtins.INSIDE\n")
    code = (
        "import builtins, contextlib, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from solver.import_hooks import after_import, around_import\n"
        "builtins.INSIDE = False\n"
        "@contextlib.contextmanager\n"
        "def inside():\n"
        "    builtins.INSIDE = True\n"
        "    yield\n"
        "    builtins.INSIDE = False\n"
        "around_import('around_probe', inside)\n"
        "after_import('around_probe', lambda m: print('callback inside:', builtins.INSIDE))\n"
        "import around_probe\n"
        "print('submodule inside:', around_probe.inner.SEEN, 'after:', builtins.INSIDE)\n")
    assert _printed(code).splitlines() == ["callback inside: False", "submodule inside: True after: False"]
    with pytest.raises(ValueError, match="top-level module name, got 'jax.numpy'"):
        around_import("jax.numpy", contextlib.nullcontext)


def _distribution(folder: Path, name: str) -> None:
    info = folder / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")


def test_while_jax_imports_the_packages_walked_are_those_named_jax_and_the_walk_is_restored_after(tmp_path):
    import importlib.metadata

    for name in ("jax-rocm99-plugin", "jaxlike-tools", "numpy-extra", "other"):
        _distribution(tmp_path, name)
    every = importlib.metadata.distributions
    with xla_setup._jax_distributions_only():
        seen = sorted(d.metadata["Name"] for d in importlib.metadata.distributions(path=[str(tmp_path)]))
    assert seen == ["jax-rocm99-plugin", "jaxlike-tools"]
    assert importlib.metadata.distributions is every
    assert len(list(every(path=[str(tmp_path)]))) == 4


def test_importing_jax_through_solver_reads_the_metadata_of_jax_packages_only():
    # The environment has scores of packages (the peers, Dask, Zarr): without the limit, JAX's
    # search for a ROCm plugin reads every one's METADATA.
    code = (
        "import importlib.metadata as md\n"
        "read = []\n"
        "text = md.PathDistribution.read_text\n"
        "md.PathDistribution.read_text = lambda self, f: read.append(self._normalized_name) or text(self, f)\n"
        "import solver, jax.numpy\n"
        "md.PathDistribution.read_text = text\n"
        "print(len(list(md.distributions())), *sorted(set(read)))\n")
    installed, *read = _printed(code).split()
    assert int(installed) > 20
    assert "jax" in read and all(name.startswith("jax") for name in read), read
