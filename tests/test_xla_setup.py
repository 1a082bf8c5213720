"""The XLA:CPU settings mechsweep makes (solver/integrate/xla_setup.py): small step loops compiled whole, full unrolling
bounded, synchronous dispatch.

The flag text is checked as text; its effect is checked in child processes
(XLA reads ``XLA_FLAGS`` once per process, when JAX starts its backend):
importing ``solver`` first makes XLA compile the pendulum's whole step loop as
one kernel (a "small call" in the optimised program) and turns JAX's
asynchronous CPU dispatch off, LLVM accepts the unroll bound (an option it
did not know would end the process), a user's own values win, and importing
``solver`` after JAX started warns and names the fix.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from solver.integrate.xla_setup import (OPTION, SMALL_LOOP_BYTES, UNROLL_MAX_TRIPS, UNROLL_OPTION, with_mechsweep_options,
                              with_small_loop_option)

ROOT = Path(__file__).resolve().parents[1]
ENTRY = f"{OPTION}={SMALL_LOOP_BYTES}"
UNROLL = f"{UNROLL_OPTION}={UNROLL_MAX_TRIPS}"


@pytest.mark.parametrize("flags, expected", [
    ("", f"--xla_backend_extra_options={ENTRY}"),
    ("--xla_cpu_enable_fast_math=false", f"--xla_cpu_enable_fast_math=false --xla_backend_extra_options={ENTRY}"),
    ("--xla_backend_extra_options=xla_cpu_fold_all_constants=true --xla_dump_to=/tmp/d",
     f"--xla_backend_extra_options=xla_cpu_fold_all_constants=true,{ENTRY} --xla_dump_to=/tmp/d"),
    ("--xla_backend_extra_options=", f"--xla_backend_extra_options={ENTRY}"),
    (f"--xla_backend_extra_options={OPTION}=0", f"--xla_backend_extra_options={OPTION}=0"),
])
def test_the_option_joins_the_users_flags_and_never_replaces_a_threshold_they_chose(flags, expected):
    assert with_small_loop_option(flags) == expected


@pytest.mark.parametrize("state, flags, threshold, whole", [
    ("set", "", SMALL_LOOP_BYTES, True),
    ("user", f"--xla_backend_extra_options=a=1,{OPTION}=0", 0, False),
    ("user", f"--xla_backend_extra_options={OPTION}=2000000000", 2_000_000_000, True),
    ("user", f"--xla_backend_extra_options={OPTION}=lots", 1024, False),
    ("late", "", 1024, False),
])
def test_the_threshold_in_effect_decides_the_loop_shapes(monkeypatch, state, flags, threshold, whole):
    # Integrator._run shapes a single run's loop for whole compilation (no
    # LAPACK, one output chunk) only where XLA will compile it whole.
    from solver.integrate import xla_setup

    monkeypatch.setattr(xla_setup, "STATE", state)
    monkeypatch.setenv("XLA_FLAGS", flags)
    assert xla_setup.loop_byte_threshold() == threshold
    assert xla_setup.loops_compiled_whole() is whole


@pytest.mark.parametrize("flags, expected", [
    ("", f"--xla_backend_extra_options={ENTRY},{UNROLL}"),
    ("--xla_dump_to=/tmp/d --xla_backend_extra_options=a=1", f"--xla_dump_to=/tmp/d --xla_backend_extra_options=a=1,{ENTRY},{UNROLL}"),
    (f"--xla_backend_extra_options={OPTION}=0", f"--xla_backend_extra_options={OPTION}=0,{UNROLL}"),
    (f"--xla_backend_extra_options={UNROLL_OPTION}=4294967295",
     f"--xla_backend_extra_options={UNROLL_OPTION}=4294967295,{ENTRY}"),
    (f"--xla_backend_extra_options={UNROLL_OPTION}=2,{OPTION}=5", f"--xla_backend_extra_options={UNROLL_OPTION}=2,{OPTION}=5"),
])
def test_both_options_are_added_and_each_one_the_user_set_is_kept(flags, expected):
    assert with_mechsweep_options(flags) == expected


def test_only_the_last_extra_options_flag_is_extended():
    # XLA keeps the last --xla_backend_extra_options; an entry added to an earlier one would be lost.
    flags = "--xla_backend_extra_options=a=1 --xla_backend_extra_options=b=2"
    assert with_small_loop_option(flags) == f"--xla_backend_extra_options=a=1 --xla_backend_extra_options=b=2,{ENTRY}"


_PROBE = r"""
import json, os, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    if sys.argv[1] == "jax-first":
        import jax
        jax.devices()
    if sys.argv[1] == "jax-imported":
        import jax
    import numpy as np, jax, jax.numpy as jnp
    import solver
    from solver.integrate.integrator import order_for_tol
    from solver.integrate.initialize import parse_values
jax.config.update("jax_enable_compilation_cache", False)

def residual(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]

dae = solver.DAE(residual, ["x", "y", "lam"], {"g": 9.81, "L": 1.0})
comp = solver.compiled_model(dae, order_for_tol(1e-10), "auto")
integ = comp.integrator
params = {"g": jnp.asarray(9.81), "L": jnp.asarray(1.0)}
spec = parse_values(integ, {"x": 0.6, "y": 0.8, "x'": 0.0}, ["x", "x'"])
z = jnp.asarray(comp.consistent_point(params, 0.0, spec))
args = (params, z, jnp.asarray(spec.u_guess), 0.0, 1.0, jnp.linspace(0.0, 1.0, 11), 1e-10, 100000, jnp.inf, 0.0)
text = integ._run_jit.lower(*args).compile().as_text()
entry = text[text.index("\nENTRY"):]
entry = entry[:entry.index("\n}")]
print("PROBE " + json.dumps({"state": solver.integrate.xla_setup.STATE, "x64": z.dtype == np.float64, "small_calls": text.count("xla_cpu_small_call"),
                             "flags": os.environ["XLA_FLAGS"],
                             "async_dispatch": jax.config.read("jax_cpu_enable_async_dispatch"),
                             "entry_loops": entry.count(" while("),
                             "warnings": [str(w.message) for w in caught
                                          if w.category.__name__ == "PerformanceWarning"]}))
"""


def _probe(mode: str, xla_flags: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    proc = subprocess.run([sys.executable, "-c", _PROBE, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")]
    assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(line[0][6:])


@pytest.mark.xla_internals
def test_importing_solver_first_compiles_the_pendulums_step_loop_as_one_kernel():
    hoisted = _probe("solver-first")
    assert hoisted["state"] == "set" and not hoisted["warnings"]
    # LLVM read the unroll bound and compiled with it (an unknown option ends the process).
    assert hoisted["flags"].endswith(f"{ENTRY},{UNROLL}")
    # The step loop is no longer a loop of the entry program but one kernel ("small call").
    assert hoisted["small_calls"] >= 1 and hoisted["entry_loops"] == 0
    # Runs execute on the calling thread (no hand-over to JAX's dispatch thread).
    assert hoisted["async_dispatch"] is False
    # The user's own threshold wins: 0 turns the hoisting off; dispatch is still synchronous.
    off = _probe("solver-first", f"--xla_backend_extra_options={OPTION}=0")
    assert off["state"] == "user" and off["small_calls"] == 0 and off["entry_loops"] >= 1
    assert off["flags"] == f"--xla_backend_extra_options={OPTION}=0,{UNROLL}"
    assert off["async_dispatch"] is False


def test_importing_solver_after_jax_started_warns_and_names_the_fix():
    late = _probe("jax-first")
    assert late["state"] == "late" and late["entry_loops"] >= 1
    # A backend already running keeps JAX's dispatch as it was started.
    assert late["async_dispatch"] is True
    assert len(late["warnings"]) == 1
    assert "Import solver (or sweep) before the first JAX computation" in late["warnings"][0]
    assert f"XLA_FLAGS='--xla_backend_extra_options={ENTRY},{UNROLL}'" in late["warnings"][0]


def test_importing_solver_after_jax_but_before_its_first_computation_still_sets_everything():
    # JAX imported but its backend not started: the settings are made at once, not through the import hook.
    early = _probe("jax-imported")
    assert early["state"] == "set" and not early["warnings"]
    assert early["small_calls"] >= 1 and early["async_dispatch"] is False and early["x64"] is True


_IMPORTS = r"""
import json, sys
import {module}
heavy = ["jax", "scipy", "xarray", "pandas", "dask", "solver.api"]
print("IMPORTS " + json.dumps([m for m in heavy if m in sys.modules]))
import jax, jax.numpy as jnp
print("CONFIG " + json.dumps([str(jnp.zeros(1).dtype), jax.config.read("jax_cpu_enable_async_dispatch")]))
"""


@pytest.mark.parametrize("module", ["solver", "solver.errors", "sweep.cli.app", "sweep.store",
                                    "sweep.store.check, sweep.store.report, sweep.store.tree"])
def test_importing_the_package_or_the_cli_loads_no_numerics_and_jax_still_gets_its_settings(module):
    # `mechsweep --help` and `status` (the last three modules) must not wait for JAX, SciPy, xarray
    # and Dask; whoever imports JAX afterwards still gets float64 and synchronous dispatch (set by a
    # one-shot import hook).
    proc = subprocess.run([sys.executable, "-c", _IMPORTS.format(module=module)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert json.loads(lines["IMPORTS"]) == []
    assert json.loads(lines["CONFIG"]) == ["float64", False]


_CHAIN_PROBE = r"""
import json, sys
import numpy as np
import solver
from solver.integrate import single_run
from solver.numerics import linalg
if sys.argv[1] == "whole":
    single_run.WHOLE_LOOP_MAX_UNKNOWNS = 10_000
# LAPACK's factorisations and solves traced into the run's program (not the consistent start's).
in_run, lapack = [False], []
for name in ("lu_factor", "lu_solve"):
    def counted(*a, _f=getattr(linalg.jsl, name), _n=name, **k):
        if in_run[0]:
            lapack.append(_n)
        return _f(*a, **k)
    setattr(linalg.jsl, name, counted)
run_traced = single_run.SingleRun._run_traced
def traced(self, *a, **k):
    in_run[0] = True
    try:
        return run_traced(self, *a, **k)
    finally:
        in_run[0] = False
single_run.SingleRun._run_traced = traced
model = solver.load("configs/mechanisms/pendulum_chain3d.yaml", overrides={"PhysicalParams": {"N": 6}})
from solver.integrate.integrator import order_for_tol
integ = solver.compiled_model(model.dae, model.order or order_for_tol(model.tol), "auto").integrator
run = model.solve(t_span=(0.0, 0.3), t_eval=np.linspace(0.0, 0.3, 7), sensitivities=["l"])
print("PROBE " + json.dumps({"unknowns": int(integ.c.shape[0]), "whole": integ.loop_compiled_whole(),
                             "x": np.asarray(run["P6"]).tolist(), "dx": np.asarray(run["dP6_dl"]).tolist(),
                             "status": int(run.status), "lapack": lapack}))
"""


def test_a_run_past_the_size_limit_runs_kernel_by_kernel_with_xla_loops_and_gives_the_same_motion():
    """A 3-D chain of 6 pendula (24 unknowns) is over ``WHOLE_LOOP_MAX_UNKNOWNS``: its step loop
    runs kernel by kernel, its factorisations and inverse still XLA loops (no LAPACK call traced into
    it, as in the loop compiled whole), and its motion and its sensitivities equal those of the loop
    written to be compiled whole, to rounding."""
    runs = {}
    for how in ("default", "whole"):
        proc = subprocess.run([sys.executable, "-c", _CHAIN_PROBE, how], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")]
        assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-3000:]
        runs[how] = json.loads(line[0][6:])
    assert runs["default"]["unknowns"] == 24
    assert runs["default"]["whole"] is False and runs["whole"]["whole"] is True
    assert runs["default"]["status"] == runs["whole"]["status"] == 0
    assert runs["default"]["lapack"] == runs["whole"]["lapack"] == []
    assert abs(np.asarray(runs["default"]["x"]) - np.asarray(runs["whole"]["x"])).max() < 1e-9
    # and its forward-mode sensitivities (through the projection's reverse-mode Jacobian, which such a
    # run takes: Stepper._projection_jacobian) equal those of the other build
    assert abs(np.asarray(runs["default"]["dx"]) - np.asarray(runs["whole"]["dx"])).max() < 1e-7
