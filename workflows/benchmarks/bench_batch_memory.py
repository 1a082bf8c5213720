"""Peak resident memory of a sweep worker against the dry run's per-batch estimate (issue 45).

For each case a sweep file is written (a shipped model, N points, Batch B, T output
times), run by `run_sweep_file` on a one-worker LocalCluster (a real worker process:
JAX set-up, compile, batches, writes), and the worker's peak resident memory
(ru_maxrss) is read from it with client.run.
"""
import argparse
import json
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
    text = f"""Title: memory {name}
Model: {ROOT / 'configs' / 'mechanisms' / model}
Sweep:
{sweep_block}
Outputs:
  variables: {outputs}
  samples: {samples}
Batch: {batch}
"""
    path = Path(tmp) / f"{name}.yaml"
    path.write_text(text)
    return path


def main():
    from distributed import Client, LocalCluster

    from sweep.cli.sweep_command import run_sweep_file
    from sweep.pipeline import build_context
    from sweep.sizes import check_batch_memory
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
    ]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated case names")
    parser.add_argument("--out", default=None, help="also write the JSON lines to this file")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, block, outs, batch, n, samples in cases:
            if only and name not in only:
                continue
            path = case(name, model, block, outs, batch, n, samples, tmp)
            spec = load_sweep(path)
            ctx = build_context(spec)
            line = check_batch_memory(spec, ctx).strip()
            with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                    Client(cluster) as client:
                base = list(client.run(peak_kib).values())[0]
                t = time.perf_counter()
                run_sweep_file(str(path), str(Path(tmp) / f"{name}.zarr"), scheduler=cluster.scheduler_address,
                               plot=False)
                wall = time.perf_counter() - t
                peak = list(client.run(peak_kib).values())[0]
            rows.append({"case": name, "batch": batch, "samples": samples, "estimate_line": line,
                         "worker_start_MiB": base / 1024, "worker_peak_MiB": peak / 1024, "wall_s": wall})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        command = "$ .venv/bin/python workflows/benchmarks/bench_batch_memory.py" + (
            f" --only {args.only}" if args.only else "") + f" --out {args.out}"
        Path(args.out).write_text(command + "\n\n" + "\n".join(json.dumps(r) for r in rows) + "\n")


if __name__ == "__main__":
    main()
