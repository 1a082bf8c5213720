"""The workflow recipes (workflows/) and the shipped sweep files, on real runs.

A tiny real sweep (a pendulum DAE released from x0, 6 designs of which the two
with x0 > L cannot assemble) is run in-process once and shared; the
post-analysis script, the local recipe and the SLURM driver script (with a
LocalCluster cluster file in place of SLURM) all run on it for real.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from pendulum_sweep import write_pendulum_sweep
from solver.errors import InputError
from sweep.run import SweepSummary, load_cluster_config, run_sweep
from toybatch import ToyContext, grid_spec, toy_batch

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent


def load_script(relpath: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


post = load_script("workflows/post_analysis.py", "post_analysis")


@pytest.fixture(scope="module")
def pendulum_store(tmp_path_factory):
    """The tiny pendulum sweep, run in-process (workers=0) through the real pipeline."""
    from sweep.cli.sweep_command import run_sweep_file

    folder = tmp_path_factory.mktemp("pendulum")
    store = folder / "s.zarr"
    summary = run_sweep_file(write_pendulum_sweep(folder), str(store), workers=0,
                             progress=False, plot=False, echo=lambda *a: None)
    assert summary.store_by_status == {"success": 4, "no_assembly": 2}
    return store


def red_pixels(png: Path) -> int:
    """Pixels drawn in matplotlib's "red" (the failure markers; viridis has none)."""
    a = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return int(((a[..., 0] > 200) & (a[..., 1] < 60) & (a[..., 2] < 60)).sum())


def check_png(png: Path, min_size=(300, 200)) -> Image.Image:
    with Image.open(png) as im:
        im.verify()                       # a complete, uncorrupted PNG
    im = Image.open(png)
    im.load()
    assert im.format == "PNG" and im.size[0] >= min_size[0] and im.size[1] >= min_size[1]
    return im


# ------------------------------------------------------------ post-analysis

def test_post_analysis_tables_and_draws_a_real_store_marking_failures(pendulum_store, tmp_path,
                                                                       capsys):
    assert post.main([str(pendulum_store), "--out-dir", str(tmp_path / "pa")]) == 0
    out = capsys.readouterr().out
    assert "Pendulum release study: 6 points (success 4, no_assembly 2)" in out
    assert "failed designs (2):" in out
    assert "L=1, x0=1.5: no_assembly" in out and "L=1.2, x0=1.5: no_assembly" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.strip().startswith(("y_max ", "x_range "))}
    # y_max is the lowest point the bob reaches: the rod's length L, to plotting precision.
    assert rows["y_max"][0] == "4" and float(rows["y_max"][3]) == pytest.approx(1.2, abs=1e-3)
    pngs = sorted((tmp_path / "pa").glob("*.png"))
    assert [p.name for p in pngs] == ["x_range.png", "y_max.png"]
    for png in pngs:
        check_png(png)
        assert red_pixels(png) > 50          # the two failed designs are marked


def test_post_analysis_one_metric_chosen_axes_and_default_folder(pendulum_store, capsys):
    written = post.analyse(pendulum_store, metrics=["y_max"], axes=["x0", "L"], echo=print)
    assert written == [Path(str(pendulum_store).removesuffix(".zarr") + "_analysis") / "y_max.png"]
    check_png(written[0])


def test_post_analysis_rejects_unknown_metrics_axes_and_missing_stores(pendulum_store, tmp_path,
                                                                        capsys):
    with pytest.raises(InputError, match=r"--metric: Bz_range not in the store; its metrics: "
                                         r"x_range, y_max"):
        post.analyse(pendulum_store, tmp_path, metrics=["Bz_range"])
    with pytest.raises(InputError, match=r"--axes: gamma not swept in this store; "
                                         r"swept parameters: L, x0"):
        post.analyse(pendulum_store, tmp_path, axes=["gamma"])
    assert post.main([str(tmp_path / "nothing.zarr")]) == 2
    assert "nothing.zarr: no sweep store there" in capsys.readouterr().err


def test_post_analysis_draws_samples_as_a_scatter_and_one_axis_as_a_line(tmp_path, capsys):
    rng = np.random.default_rng(3)
    n = 24
    points = {"omega": rng.uniform(1.0, 6.0, n), "zeta": rng.uniform(0.05, 0.9, n)}
    samples = SimpleNamespace(points=points, batch=8, hash="samples", title="toy samples",
                              n_points=n, n_batches=3)
    run_sweep(samples, toy_batch, ToyContext(omega_max=4.5), tmp_path / "s.zarr", workers=0,
              progress=False)
    ds = post.open_sweep(tmp_path / "s.zarr")
    assert post._choose_axes(ds, None) == (["omega", "zeta"], False)       # scattered
    assert post._choose_axes(ds, ["zeta", "omega"]) == (["zeta", "omega"], False)
    written = post.analyse(tmp_path / "s.zarr", tmp_path / "a")
    out = capsys.readouterr().out
    failed = int((points["omega"] > 4.5).sum())
    assert failed and f"failed designs ({failed}):" in out and "max_steps" in out
    assert [p.name for p in written] == ["x_end.png"]
    check_png(written[0])
    assert red_pixels(written[0]) > 20

    line = grid_spec([1.0, 2.0, 3.0, 5.0], [0.3], batch=2, title="toy line")
    run_sweep(line, toy_batch, ToyContext(omega_max=4.5), tmp_path / "l.zarr", workers=0,
              progress=False)
    assert post._choose_axes(post.open_sweep(tmp_path / "l.zarr"), None) == (["omega"], True)
    written = post.analyse(tmp_path / "l.zarr", tmp_path / "b")
    check_png(written[0])
    assert red_pixels(written[0]) > 20


def test_post_analysis_tells_zipped_axes_from_samples():
    import xarray as xr

    def design(**coords):
        n = len(next(iter(coords.values())))
        return xr.Dataset({"status": ("point", np.zeros(n, np.int8))},
                          coords={k: ("point", np.asarray(v, float)) for k, v in coords.items()},
                          attrs={"sweep_parameters": list(coords)})

    zipped = design(k=[1e2, 1e3, 1e4], c=[1.0, 2.0, 3.0])           # varied together: a line
    assert post._choose_axes(zipped, None) == (["k"], True)
    sampled = design(a=[0.7, 0.1, 0.4], b=[5.0, 9.0, 1.0])          # b jumps about along a
    assert post._choose_axes(sampled, None) == (["a", "b"], False)
    product = design(a=[1, 1, 2, 2], b=[3, 4, 3, 4])
    assert post._choose_axes(product, None) == (["a", "b"], True)
    assert post._choose_axes(product, ["b", "a"]) == (["b", "a"], True)


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part")
def test_post_analysis_without_metrics_uses_the_range_of_the_first_output(tmp_path, capsys):
    import xarray as xr

    spec = grid_spec([1.0, 2.0], [0.1, 0.5], batch=2)
    run_sweep(spec, toy_batch, ToyContext(), tmp_path / "s.zarr", workers=0, progress=False)
    ds = xr.open_zarr(tmp_path / "s.zarr").load()
    first = [v for v in ds.data_vars if ds[v].dims[:2] == ("point", "time")][0]
    assert first == "pos"                      # (point, time, axis): its x component is used
    pos_x = ds["pos"].values[..., 0]
    ds.drop_vars("x_end").to_zarr(tmp_path / "bare.zarr")
    # A copy that kept the sweep's attributes but not all its arrays opens, unverified.
    with pytest.warns(UserWarning, match="status not verified against the commit records"):
        written = post.analyse(tmp_path / "bare.zarr", tmp_path / "a")
    out = capsys.readouterr().out
    assert [p.name for p in written] == ["range_pos_0__.png"]
    check_png(written[0])
    stats = next(line.split() for line in out.splitlines()
                 if line.strip().startswith("range(pos[0])"))
    assert stats[1] == "4" and float(stats[4]) == pytest.approx(
        np.max(pos_x.max(1) - pos_x.min(1)), rel=1e-3)
    assert "failed designs: none" in out


# ------------------------------------------------------------ recipes, really run

@pytest.mark.slow
def test_run_local_recipe_sweeps_on_a_local_cluster_then_analyses(tmp_path):
    sweep_file = write_pendulum_sweep(tmp_path)
    store = tmp_path / "local.zarr"
    env = dict(os.environ, MECHSWEEP_VENV=str(VENV))
    proc = subprocess.run(["bash", str(ROOT / "workflows/local/run_local.sh"), str(sweep_file),
                           str(store), "1"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "points:    6 in 2 batches of 3" in proc.stdout           # the dry run
    assert "failed designs (2):" in proc.stdout                      # the post-analysis
    assert "Dask dashboard at" in proc.stderr                        # a LocalCluster ran it
    check_png(tmp_path / "local_analysis" / "y_max.png")


@pytest.mark.slow
def test_slurm_driver_script_runs_with_a_cluster_file(tmp_path):
    # The sbatch script run by hand, its cluster file swapped for a LocalCluster one:
    # everything but SLURM itself (the shipped file is checked below).
    sweep_file = write_pendulum_sweep(tmp_path)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("module: distributed\nclass: LocalCluster\n"
                       "kwargs: {n_workers: 1, threads_per_worker: 1, processes: true,"
                       " dashboard_address: ':0'}\n")
    store = tmp_path / "slurm.zarr"
    env = dict(os.environ, MECHSWEEP_VENV=str(VENV), MECHSWEEP_CLUSTER=str(cluster),
               MECHSWEEP_ROOT=str(ROOT), MECHSWEEP_JAX_CACHE=str(tmp_path / "cache"))
    env.pop("SLURM_SUBMIT_DIR", None)
    proc = subprocess.run(["bash", str(ROOT / "workflows/slurm/sweep.sbatch"), str(sweep_file),
                           str(store)], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "batches:    2 done, 0 pending, 2 in all" in proc.stdout      # mechsweep status
    assert "failed designs (2):" in proc.stdout
    check_png(tmp_path / "slurm_analysis" / "x_range.png")
    assert (tmp_path / "cache").is_dir()                             # the workers' JAX cache


# ------------------------------------------------------------ the SLURM cluster file

def test_shipped_slurm_cluster_file_is_valid():
    config = load_cluster_config(ROOT / "workflows/slurm/cluster.yaml")
    assert config["module"] == "dask_jobqueue" and config["class"] == "SLURMCluster"
    kwargs = config["kwargs"]
    for key in ("queue", "cores", "processes", "memory", "walltime"):
        assert key in kwargs
    assert kwargs["cores"] == kwargs["processes"]            # one single-threaded worker per core
    assert "scale" in config or "adapt" in config
    assert any("JAX_PLATFORMS=cpu" in line for line in kwargs["job_script_prologue"])


def test_cluster_file_without_dask_jobqueue_stops_with_the_pip_hint(tmp_path, monkeypatch, capsys):
    from sweep.cli.app import main

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)     # as if not installed
    cluster = ROOT / "workflows/slurm/cluster.yaml"
    with pytest.raises(InputError) as err:
        run_sweep(grid_spec([1.0], [0.1], batch=1), toy_batch, ToyContext(), tmp_path / "t.zarr",
                  cluster=str(cluster), progress=False)
    assert str(err.value).startswith(f"{cluster}: module: cannot import module 'dask_jobqueue'")
    assert str(err.value).endswith("(pip install 'mechsweep[cluster]')")
    # the same through the command line: exit code 2, one line, no traceback
    code = main(["sweep", str(write_pendulum_sweep(tmp_path)), "--out", str(tmp_path / "s.zarr"),
                 "--cluster", str(cluster)])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot import module 'dask_jobqueue'" in err and "pip install 'mechsweep[cluster]'" in err
    assert "Traceback" not in err


# ------------------------------------------------------------ sweep files and exit codes

def test_every_shipped_sweep_file_fits_its_model():
    from sweep.pipeline import build_context, load_model, structural_names
    from sweep.spec import load_sweep
    from sweep.structural import plan_groups

    files = sorted((ROOT / "configs/sweeps").glob("*.yaml"))
    assert {"cloth_stiffness.yaml", "mechanism0_spring.yaml", "rscr_lengths_angles.yaml",
            "rscr_lhs.yaml"} <= {f.name for f in files}
    for path in files:
        spec = load_sweep(path)
        model = load_model(spec)
        names = structural_names(spec, model)
        if names:   # one model and context per structure group (sweep/structural.py)
            groups = plan_groups(spec, model, names)
            assert groups and all(not g.error and g.context.schema.variables for g in groups)
            assert sum(g.n_points for g in groups) == spec.n_points
        else:
            context = build_context(spec, model)   # swept names, outputs and metrics checked
            assert context.schema.variables
        assert spec.n_points >= 1
        assert f"points:    {spec.n_points} in {spec.n_batches} batch" in spec.describe()  # "batch" or "batches"


def test_cloth_stiffness_study_is_small_and_its_metric_follows_the_pushed_particle():
    from solver.models import load
    from sweep.pipeline import build_context
    from sweep.spec import load_sweep

    spec = load_sweep(ROOT / "configs/sweeps/cloth_stiffness.yaml")
    assert spec.n_points == 12 and spec.batch == 6 and spec.names == ["k", "kd"]
    np.testing.assert_allclose(np.unique(spec.points["k"]), np.logspace(1, 2.5, 6))
    context = build_context(spec)
    dims = context.schema.variables["r"]
    assert dims[0] == "time" and len(context.schema.coords[dims[1]]) == 27    # a 3 x 3 cloth
    model = load(spec.model_path, overrides=spec.override)
    velocity = model.initial_values(model.params)["r'"]
    # r[14] is the z of the middle particle, the one pushed upward at t = 0.
    assert np.flatnonzero(velocity).tolist() == [14] and velocity[14] == 3.0
    assert context.metrics["centre_z_max"] == ("r[14]", "max")


@pytest.mark.parametrize("counts, code", [
    ({"success": 6}, 0),
    ({"success": 4, "no_assembly": 2}, 1),
    ({"success": 3, "pending": 3}, 3),              # incomplete, whatever else the store holds
    ({"success": 2, "pending": 2, "no_assembly": 2}, 3),
    ({"success": 5, "unknown(12)": 1}, 1),
])
def test_sweep_exit_code_says_done_failed_or_incomplete(monkeypatch, tmp_path, counts, code):
    from sweep.cli import sweep_command as runner_cli
    from sweep.cli.app import main

    def fake(*args, **kwargs):
        return SweepSummary("s.zarr", 6, 2, store_by_status=counts)

    monkeypatch.setattr(runner_cli, "run_sweep_file", fake)
    (tmp_path / "x.yaml").write_text("# read by the fake run only\n")  # the command line checks it is a file
    assert main(["sweep", str(tmp_path / "x.yaml"), "--out", str(tmp_path / "s.zarr")]) == code


# ------------------------------------------------------------ the benchmark's grid

def test_benchmark_grid_sizes_multiply_to_the_point_count():
    bench = load_script("workflows/benchmarks/bench_sweep.py", "bench_sweep")
    assert bench.grid_sizes(2000) == (20, 10, 10)
    assert bench.grid_sizes(100) == (5, 4, 5)
    for n in (1, 7, 45, 100, 360, 2000, 2003):
        sizes = bench.grid_sizes(n)
        assert int(np.prod(sizes)) == n and min(sizes) >= 1


def test_benchmark_splits_each_workers_time_between_its_first_task_and_the_sweeps_end():
    """bench_sweep's task-stream split: per worker, the time before its first task, in tasks, between them,
    after its last one while another still ran, and after the last task of all add up to the sweep's span."""
    bench = load_script("workflows/benchmarks/bench_sweep.py", "bench_sweep")
    compute = lambda start, stop: {"action": "compute", "start": start, "stop": stop}
    records = [
        {"worker": "a", "startstops": [{"action": "transfer", "start": 0.8, "stop": 1.0}, compute(1.0, 2.0)]},
        {"worker": "a", "startstops": [compute(2.5, 3.0)]},
        {"worker": "b", "startstops": [compute(1.5, 4.0)]},
    ]
    idle = bench.worker_idle(records, 0.5, 4.5)
    assert idle == pytest.approx({"tasks": 4.0, "before": 1.5, "between": 0.5, "tail": 1.0, "after": 1.0})
    assert sum(idle.values()) == pytest.approx(2 * (4.5 - 0.5))
    assert bench.worker_idle([], 0.0, 1.0) == {}


@pytest.mark.slow
def test_scale_benchmark_quick_measures_each_worker_count_and_leaves_complete_stores(tmp_path):
    """bench_scale.py --quick on real dask scheduler and worker processes: a table row per N
    with positive rates, and stores (written by the workers, committed by the driver) that
    pass the checksum check with every batch done."""
    from sweep.store import check_store

    out = tmp_path / "scale.txt"
    # One worker count (two workers) keeps the test to one cluster start.
    proc = subprocess.run([sys.executable, str(ROOT / "workflows/benchmarks/bench_scale.py"), "--quick",
                           "--workers", "2", "--out", str(out), "--store-dir", str(tmp_path / "stores")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = out.read_text().splitlines()
    assert lines[0].startswith("$ ") and "bench_scale.py --quick" in lines[0]
    assert any(line.startswith("date: ") for line in lines)
    assert any("so N > " in line and "oversubscription" in line for line in lines)
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["N", "points", "batches"])
    assert "points/s" in lines[head] and lines[head + 1].startswith("---")
    rows = [line.split() for line in lines[head + 2:] if line.strip()]
    rows = rows[:next((i for i, r in enumerate(rows) if not r[0].isdigit()), len(rows))]
    assert [int(r[0]) for r in rows] == [2]
    for r in rows:
        assert float(r[6]) > 0 and float(r[7]) > 0            # points/s, tasks points/s
        assert r[-1] == "0"                                   # failed points
    text = "\n".join(lines)
    assert "Old path, for comparison" in text and "one driver could feed about" in text
    for n in (2,):
        check = check_store(tmp_path / "stores" / f"scale_N{n}.zarr", "checksum")
        assert check.done == list(range(len(check.slices))) and len(check.slices) == 10
        assert check.ok and (check.codes == 0).all()          # every point a success


def test_peers_summary_is_drawn_with_a_bar_per_figure_and_none_for_n_a(tmp_path):
    """bench_peers' figure: a bar for every run and compile time measured, none where a peer
    has no row (n/a) or a figure is missing, on two log-scaled panels."""
    peers = load_script("workflows/benchmarks/bench_peers.py", "bench_peers")
    tab = peers.Tables(lambda text="": None)
    Row = peers.Row
    tab.summary = [
        ("pendulum, one run", Row("mechsweep", 1.06e-4, 1.46, 1e-11), Row("diffrax Dopri8", 1.45e-4, 0.67),
         Row("heyoka", 2.9e-5, 0.03)),
        ("RSCR mechanism, one run", Row("mechsweep", 5.95e-2, 8.1), Row("diffrax Dopri8", 7.0e-2, 1.4), None),
        ("cloth 90x90, 0.5 s", Row("mechsweep", 7.4e-2, None), None, None),
    ]
    path = tmp_path / "peers.png"
    assert tab.plot(path, "test machine") == (3 + 2 + 1) + (3 + 2)
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > image.height > 200


def test_suite_compile_profile_sums_the_workers_files(tmp_path):
    """The suite profiler's summary adds up every worker's phases and compiles,
    and lists the slowest compiles with their tests."""
    import json

    prof = load_script("workflows/benchmarks/suite_compile_profile.py", "suite_compile_profile")
    phase = "/jax/core/compile/backend_compile_duration"
    (tmp_path / "gw0.json").write_text(json.dumps({
        "phases": {"t::a": {phase: 2.0}, "t::b": {phase: 20.0}},
        "programs": [["miss", "t::a", "jit_small", 0.5], ["miss", "t::b", "jit__run", 20.0],
                     ["hit", "t::a", "jit_small", 0.0]]}))
    (tmp_path / "gw1.json").write_text(json.dumps({
        "phases": {"t::c": {phase: 6.0}}, "programs": [["miss", "t::c", "jit__run", 6.0]]}))
    text = prof.summarise(str(tmp_path), top=2)
    assert f"      28.0  {phase}" in text
    assert "programs compiled: 3 (26.5 s); loaded from the cache: 1" in text
    assert "  compiles of 15-inf s:     1,    20.0 s" in text
    assert "      2    26.0  jit__run" in text
    assert text.endswith("the 2 slowest compiles:\n    20.0 s  jit__run             t::b\n"
                         "     6.0 s  jit__run             t::c")
    # With the tests' wall-clock spans, each file's seconds split into tracing, lowering, XLA and the rest.
    trace = "/jax/core/compile/jaxpr_trace_duration"
    (tmp_path / "gw1.json").write_text(json.dumps({
        "phases": {"f.py::c": {phase: 6.0, trace: 1.5}}, "programs": [["miss", "f.py::c", "jit__run", 6.0]],
        "tests": [["f.py::c", 100.0, 110.0]]}))
    text = prof.summarise(str(tmp_path), top=2)
    assert ("the 2 longest test files split (seconds): total, trace, lower, xla, rest\n"
            "     10.0     1.5     0.0     6.0     2.5  f.py\n") in text
    assert text.endswith("the 2 longest tests split (seconds): total, trace, lower, xla, rest\n"
                         "     10.0     1.5     0.0     6.0     2.5  f.py::c")


def test_the_kernel_profile_adds_up_xla_kernels_of_a_real_trace_by_kind(tmp_path):
    """profile_kernels.py reads JAX's own profiler output: a traced run of a compiled function
    shows its kernels (here run on the calling thread) under their kinds, and nothing else."""
    import jax
    import jax.numpy as jnp

    prof = load_script("workflows/benchmarks/profile_kernels.py", "profile_kernels")
    f = jax.jit(lambda x: jnp.sort(jnp.sin(x) * 2.0)[::-1])
    x = jnp.linspace(0.0, 1.0, 4096)
    f(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        f(x).block_until_ready()
    spent, count = prof.kernel_times(str(tmp_path))
    assert count["sort"] >= 1 and spent["sort"] > 0
    assert not any(kind.startswith(("end: ", "Thunk", "PjitFunction", "$")) for kind in spent)
    with pytest.raises(FileNotFoundError, match="no profiler trace"):
        prof.kernel_times(str(tmp_path / "empty"))
