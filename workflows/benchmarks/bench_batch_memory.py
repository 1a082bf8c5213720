"""Peak resident memory of a sweep worker against the dry run's estimate of it (issue 45).

For each case a sweep file is written (a shipped model, N points, Batch B, T output
times), run by `run_sweep_file` on a one-worker LocalCluster (a real worker process:
JAX set-up, compile, batches, writes), and the worker's peak resident memory
(ru_maxrss) is read from it with client.run. Each case gets a new persistent
compilation cache (unless --shared-cache), so that its worker compiles: the peak the
estimate (sweep.sizes.batch_memory_estimate) is for. The last column is
estimate / measured; the target is every row within 2x (0.5 to 2).
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def peak_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def case(name, model, sweep_block, outputs, batch, points, samples, tmp):
    variables = "" if outputs == "null" else f"  variables: {outputs}\n"   # null: every variable
    text = f"""Title: memory {name}
Model: {ROOT / 'configs' / 'mechanisms' / model}
Sweep:
{sweep_block}
Outputs:
{variables}  samples: {samples}
Batch: {batch}
"""
    path = Path(tmp) / f"{name}.yaml"
    path.write_text(text)
    return path


def main():
    from distributed import Client, LocalCluster

    from sweep.cli.sweep_command import run_sweep_file
    from sweep.pipeline import build_context, load_model
    from sweep.sizes import batch_memory_estimate, check_batch_memory
    from sweep.spec import load_sweep

    cases = [
        ("pendulum_B10_T101", "pendulum.yaml", "  product:\n    L: {linspace: [0.5, 2.0, 20]}", "[x, y]", 10, 20, 101),
        ("rscr_B10_T101", "rscr.yaml", "  product:\n    L2: {linspace: [0.98, 1.18, 4]}\n    gamma: {linspace: [1.25, 1.45, 5]}", "[B, C1, lam]", 10, 20, 101),
        ("pendulum_B1000_T101", "pendulum.yaml", "  product:\n    L: {linspace: [0.5, 2.0, 2000]}", "[x, y]", 1000, 2000, 101),
        ("pendulum_B4000_T101", "pendulum.yaml", "  product:\n    L: {linspace: [0.5, 2.0, 8000]}", "[x, y]", 4000, 8000, 101),
        ("pendulum_B1000_T1001", "pendulum.yaml", "  product:\n    L: {linspace: [0.5, 2.0, 2000]}", "[x, y]", 1000, 2000, 1001),
        ("rscr_B100_T101", "rscr.yaml", "  product:\n    L2: {linspace: [0.98, 1.18, 20]}\n    gamma: {linspace: [1.25, 1.45, 10]}", "[B, C1, lam]", 100, 200, 101),
        ("rscr_B400_T101", "rscr.yaml", "  product:\n    L2: {linspace: [0.98, 1.18, 40]}\n    gamma: {linspace: [1.25, 1.45, 20]}", "[B, C1, lam]", 400, 800, 101),
        ("rscr_B400_T1001", "rscr.yaml", "  product:\n    L2: {linspace: [0.98, 1.18, 40]}\n    gamma: {linspace: [1.25, 1.45, 20]}", "[B, C1, lam]", 400, 800, 1001),
        # Other shipped models, one small batch each: the compile share of the estimate.
        ("double_pendulum_B10_T101", "double_pendulum.yaml", "  product:\n    m1: {linspace: [0.9, 1.1, 10]}", "null", 10, 10, 101),
        ("chain5_B10_T101", "chain5.yaml", "  product:\n    m: {linspace: [0.9, 1.1, 10]}", "null", 10, 10, 101),
        ("pleiades_B10_T101", "pleiades.yaml", "  product:\n    G: {linspace: [0.9, 1.1, 10]}", "null", 10, 10, 101),
        ("cloth_B10_T101", "cloth.yaml", "  product:\n    M: {linspace: [0.09, 0.11, 10]}", "null", 10, 10, 101),
    ]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated case names")
    parser.add_argument("--out", default=None, help="also write the JSON lines to this file")
    parser.add_argument("--shared-cache", action="store_true",
                        help="use the user's persistent compilation cache (default: a new one per case, "
                             "so that every worker compiles: the peak the estimate is for)")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    rows = []
    # One optimised build per worker, as the estimate assumes: a tiered worker would
    # hold a quick build beside it (solver.tiered).  The workers inherit this.
    os.environ.setdefault("MECHSWEEP_TIERED_COMPILE", "off")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, block, outs, batch, n, samples in cases:
            if only and name not in only:
                continue
            if not args.shared_cache:
                os.environ["MECHSWEEP_JAX_CACHE"] = str(Path(tmp) / f"jax-cache-{name}")
            path = case(name, model, block, outs, batch, n, samples, tmp)
            spec = load_sweep(path)
            built = load_model(spec)
            ctx = build_context(spec, built)
            line = check_batch_memory(spec, ctx, built).strip()
            estimate = batch_memory_estimate(built, ctx.batch, len(ctx.time), len(ctx.sensitivities)).total / 2**20
            with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                    Client(cluster) as client:
                base = list(client.run(peak_kib).values())[0]
                t = time.perf_counter()
                run_sweep_file(str(path), str(Path(tmp) / f"{name}.zarr"), scheduler=cluster.scheduler_address,
                               plot=False)
                wall = time.perf_counter() - t
                peak = list(client.run(peak_kib).values())[0]
            rows.append({"case": name, "batch": batch, "samples": samples, "estimate_line": line,
                         "worker_start_MiB": round(base / 1024, 1), "worker_peak_MiB": round(peak / 1024, 1),
                         "estimate_MiB": round(estimate, 1), "wall_s": round(wall, 1),
                         "estimate / measured": round(estimate / (peak / 1024), 2)})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        command = "$ .venv/bin/python workflows/benchmarks/bench_batch_memory.py" + (
            f" --only {args.only}" if args.only else "") + (" --shared-cache" if args.shared_cache else "") + (
            f" --out {args.out}")
        ratios = [r["estimate / measured"] for r in rows]
        missed = [r["case"] for r in rows if not 0.5 <= r["estimate / measured"] <= 2.0]
        verdict = (f"estimate / measured from {min(ratios):.2f} to {max(ratios):.2f}: "
                   + (f"{len(missed)} rows outside 2x: {', '.join(missed)}" if missed else
                      "every row within 2x") if rows else "no rows")
        cache = ("the user's persistent compilation cache" if args.shared_cache else
                 "a new compilation cache per case (every worker compiles)")
        Path(args.out).write_text(command + "\n(" + time.strftime("%Y-%m-%d %H:%M") + f"; {cache})\n\n"
                                  + "\n".join(json.dumps(r) for r in rows) + f"\n\n{verdict}\n")


if __name__ == "__main__":
    main()
