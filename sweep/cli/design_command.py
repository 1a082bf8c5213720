"""``mechsweep design``: run a design file and print its summary."""

from __future__ import annotations

from solver.errors import InputError
from sweep.cli.common import (EXIT_FAILED, EXIT_OK, check_out, finish_optimised_builds, model_file_arg, note_progress,
                              split_text)

__all__ = ["cmd_design"]


def cmd_design(args) -> int:
    """Run a design file (:func:`sweep.design.optimize.run_design`) and print its summary.

    Its solves start on quick builds while the optimised ones compile
    (:mod:`solver.tiered`); before it returns it waits for those, saying so.

    Returns:
        0 when some start ended on a design that solves, 1 when none did.

    Raises:
        InputError: a bad design file, store or options (exit 2).
    """
    # Float64 and the persistent compilation cache are set by the command line (sweep.cli.app) before this runs.
    from solver import tiered_compiles

    # A design's many short solves start on quick builds and move to the optimised
    # ones when they are ready (solver.tiered; MECHSWEEP_TIERED_COMPILE=off turns it off).
    with tiered_compiles(True):
        code = _design(args)
    return finish_optimised_builds(code)


def _design(args) -> int:
    from sweep.design.optimize import run_design

    if args.out:
        if not args.out.endswith(".zarr"):
            raise InputError(f"--out {args.out!r}: the design history is a Zarr store; give a "
                             f"name ending in .zarr")
        check_out(args.out, folder=True, overwrite=args.overwrite, what="a design history store")
    else:
        note_progress("no --out: the history and its picture are not written")
    result = run_design(model_file_arg(args.design), out=args.out, starts=args.starts,
                        from_store=args.from_store, workers=args.workers,
                        scheduler=args.scheduler, scheduler_file=args.scheduler_file,
                        cluster=args.cluster, overwrite=args.overwrite, plot=not args.no_plot)
    parallel = sum(r is not None for r in result.starts) > 1 and args.workers != 0
    note_progress(split_text(result.wall_seconds, result.compile_seconds, result.solve_seconds)
                  + ("; compiling and solving summed over the workers" if parallel else ""))
    print(result)
    return EXIT_OK if result.best is not None else EXIT_FAILED
