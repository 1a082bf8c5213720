"""A sweep worker compiles each program once, and workers on one host share their compilations.

Specification:

* on one worker, a sweep's batches after the first trace and compile
  nothing: not the next full batch, not a short (padded) one, not one whose
  failing points go to IPOPT (JAX's own compile events, counted by
  ``solver.compile_clock``, stay at zero);
* every worker on a host uses one persistent compilation cache
  (``sweep.run.default_jax_cache_dir``, set by ``configure_jax`` in each
  worker): a second worker process finds every program the first compiled
  there, and compiles none itself (JAX's cache hit and miss events, counted
  in each of two fresh processes);
* that cache is ``$MECHSWEEP_JAX_CACHE``, or ``~/.cache/mechsweep/jax``
  where the variable is unset or empty.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import solver
from pendulum_sweep import write_pendulum_sweep
from sweep import pipeline
from sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]


def test_batches_after_the_first_compile_nothing_on_a_worker(tmp_path):
    spec = load_sweep(write_pendulum_sweep(tmp_path))     # 6 points, Batch 3: x0 = 1.5 cannot assemble
    context = pipeline.build_context(spec)
    batch = lambda rows: {k: v[rows] for k, v in spec.points.items()}
    pipeline.batch_fn(batch(slice(0, 3)), context)          # the first batch compiles
    for rows in (slice(3, 6), slice(4, 5), slice(1, 3)):     # the next batch, then short (padded) ones
        with solver.compile_clock() as clock:
            result = pipeline.batch_fn(batch(rows), context)
        assert clock.seconds == 0.0, f"batch {rows} traced or compiled for {clock.seconds:.3f} s"
        assert len(result.status) == rows.stop - rows.start


CHILD = textwrap.dedent("""
    import json, sys
    import jax
    from sweep.run import configure_jax, run_batch_task
    configure_jax(sys.argv[2])
    from sweep import pipeline
    from sweep.spec import load_sweep

    spec = load_sweep(sys.argv[1])
    context = pipeline.build_context(spec)   # the driver's work: a worker receives the context
    counts = {"hits": 0, "misses": 0}
    names = {"/jax/compilation_cache/cache_hits": "hits", "/jax/compilation_cache/cache_misses": "misses"}
    jax.monitoring.register_event_listener(lambda event, **kw: event in names and counts.__setitem__(
        names[event], counts[names[event]] + 1))
    for rows in (slice(0, 3), slice(3, 6)):
        result = run_batch_task(pipeline.batch_fn, {k: v[rows] for k, v in spec.points.items()}, context,
                                sys.argv[2])
        assert not result.message.startswith("Traceback"), result.message
    print(json.dumps({**counts, "status": result.status.tolist()}))
""")


def test_two_workers_on_a_host_share_the_persistent_cache(tmp_path):
    sweep_file = write_pendulum_sweep(tmp_path)
    cache = tmp_path / "jax-cache"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    for name in ("JAX_COMPILATION_CACHE_DIR", "MECHSWEEP_JAX_CACHE"):
        env.pop(name, None)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CHILD, str(sweep_file), str(cache)], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["misses"] > 0                    # compiled, each program once, into the cache
    assert second["misses"] == 0, second          # the second worker compiled nothing ...
    assert second["hits"] == first["misses"]      # ... it found every program the first one wrote
    assert first["status"] == second["status"]


def test_the_cache_folder_comes_from_the_environment_and_an_empty_value_means_unset(monkeypatch):
    from sweep.jax_cache import default_jax_cache_dir
    monkeypatch.setenv("MECHSWEEP_JAX_CACHE", "/srv/cache/jax")
    assert default_jax_cache_dir() == "/srv/cache/jax"
    monkeypatch.setenv("MECHSWEEP_JAX_CACHE", "")                    # `MECHSWEEP_JAX_CACHE= mechsweep …`
    monkeypatch.setenv("HOME", "/home/someone")
    assert default_jax_cache_dir() == "/home/someone/.cache/mechsweep/jax"
