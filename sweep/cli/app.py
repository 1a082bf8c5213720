"""The ``mechsweep`` command line (docs/reference/cli.md).

::

    mechsweep check MODEL.yaml
    mechsweep simulate MODEL.yaml [--set NAME=VALUE ...] [--out run.zarr|run.nc] [--json]
    mechsweep equilibrium MODEL.yaml [--set NAME=VALUE ...] [--guess NAME=VALUE ...] [--json]
    mechsweep plot RUN.zarr|RUN.nc|MODEL.yaml [--vars x y ...] --out fig.png
    mechsweep animate MODEL.yaml|RUN --out anim.gif|anim.mp4|anim.html
    mechsweep sweep SWEEP.yaml --out STORE.zarr [...]
    mechsweep status STORE.zarr [--verify]   (exit 1: a damaged batch)
    mechsweep design DESIGN.yaml [--out OUT.zarr] [--from STORE.zarr --starts K] [--workers N]
    mechsweep run-default          (make run: the default sweep)

Exit codes: 0 success, 1 failed simulation (or failed sweep points), 2 bad
input (every :class:`solver.errors.InputError` is printed on stderr without a
traceback), 3 an incomplete sweep (batches left pending: interrupted,
scheduler lost, storage fault; the message gives the command that resumes).

``mechsweep`` and every command take ``-q/--quiet`` (no progress lines or
notes on stderr) and ``-v/--verbose`` (debugging lines too; for ``sweep``
also the traceback of a storage or cluster fault).

The parser and :func:`main` are here; the commands are in
:mod:`sweep.cli.solver_commands` (check, simulate, equilibrium, plot,
animate), :mod:`sweep.cli.sweep_command` (sweep, run-default),
:mod:`sweep.cli.store_commands` (status) and :mod:`sweep.cli.design_command`
(design), sharing :mod:`sweep.cli.common`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import Sequence

from solver.errors import InputError
from solver.module_aliases import lazy_names
from sweep.log import cli_logging
from sweep.cli.common import (EXIT_FAILED, EXIT_INPUT, EXIT_OK, CommandParser, add_quick_compile,  # noqa: F401
                              positive_float, positive_int, seconds_arg, whole_number,
                              add_log_options, check_out, is_model_path, log_level, model_file_arg)

# The commands live in one module per group, imported when their command runs
# (a simulate does not wait for Dask, Zarr and the sweep pipeline to import);
# their entry points stay importable from here (__getattr__).
__getattr__, __dir__ = lazy_names(__name__, {
    "sweep.cli.results": ("NC_JSON_ATTRS", "open_result", "write_result"),
    "sweep.cli.solver_commands": ("FINAL_MAX", "cmd_animate", "cmd_check", "cmd_equilibrium", "cmd_plot",
                                  "cmd_simulate", "summary"),
    "sweep.cli.store_commands": ("cmd_status",),
    "sweep.cli.design_command": ("cmd_design",),
    "sweep.cli.sweep_command": ("cmd_run_default", "cmd_sweep", "main_default", "main_sweep"),
})

__all__ = ["main", "run", "build_parser", "summary"]

#: The arguments that name a YAML input file: the model of check, simulate and equilibrium, the
#: sweep file and the design file (plot's and animate's source may be a stored run's folder).
YAML_INPUTS = ("model", "sweep", "design")


def add_dask_target(parser: argparse.ArgumentParser, what: str) -> None:
    """Where a command's Dask work runs: ``--scheduler``, ``--scheduler-file`` or ``--cluster`` (one of them).

    Args:
        parser: the command's parser.
        what: the verb phrase of the help texts (``"run"``, ``"run the starts"``).
    """
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--scheduler", metavar="ADDRESS",
                        help=f"{what} on a running Dask scheduler (tcp://host:8786) instead of local workers")
    target.add_argument("--scheduler-file", metavar="FILE",
                        help=f"{what} on the Dask scheduler that this scheduler file names (dask scheduler "
                             f"--scheduler-file FILE)")
    target.add_argument("--cluster", metavar="CLUSTER.yaml",
                        help=f"start the Dask cluster this cluster file describes (module, class, kwargs, "
                             f"scale, adapt), e.g. SLURM through dask-jobqueue, and {what} there")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = CommandParser(prog="mechsweep", description="Mechanism simulation and design sweeps "
                "(Taylor-series DAE solver).")
    add_log_options(p)
    sub = p.add_subparsers(dest="command", parser_class=CommandParser, metavar="COMMAND")
    sub.required = True
    c = sub.add_parser("check", help="structure of a model (variables, Σ offsets, index, DOF) and "
                       "the condition of its system Jacobian at the consistent initial point "
                       "(exit 2 when singular)")
    c.add_argument("model", help="the model file (MODEL.yaml)")
    s = sub.add_parser("simulate", help="solve a model once")
    s.add_argument("model", help="the model file (MODEL.yaml)")
    s.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a parameter (repeatable); a structural one (a size, such as "
                        "the number of repeated parts) builds the model again")
    s.add_argument("--out", help="write the result (.zarr or .nc)")
    s.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    add_quick_compile(s)
    eq = sub.add_parser("equilibrium", help="a stationary equilibrium of a model: configuration, "
                        "multipliers, stiffness eigenvalues, frequencies and stability (exit 2 "
                        "when none is found)")
    eq.add_argument("model", help="the model file (MODEL.yaml)")
    eq.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a parameter (repeatable)")
    eq.add_argument("--guess", action="append", default=[], metavar="NAME=VALUE",
                    help="starting value of a variable instead of the model's positions "
                         "(repeatable): x=0.5, A=[0.7,0.7], A[1]=-L; values may use the parameters")
    eq.add_argument("--method", default="auto", choices=("auto", "newton", "settle", "ipopt"),
                    help="auto (default): Newton from the guess, where it fails let the model "
                         "settle (over-damped motion: a stable equilibrium; pushed off an "
                         "unstable one it reaches or starts at), then IPOPT")
    eq.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    pl = sub.add_parser("plot", help="time series of a run or model as a PNG")
    pl.add_argument("source", help="RUN.zarr, RUN.nc or MODEL.yaml (simulated first)")
    pl.add_argument("--vars", nargs="+", help="variables to plot (default: all unknowns)")
    pl.add_argument("--out", required=True, help="the picture to write (PNG)")
    add_quick_compile(pl)
    an = sub.add_parser("animate", help="animation of a run or model (GIF, MP4 or HTML)")
    an.add_argument("source", help="MODEL.yaml, or a run written by simulate --out")
    an.add_argument("--model", help="model file for a run (default: the one the run records)")
    an.add_argument("--out", required=True, help="the animation to write: .gif, .mp4 or .html")
    an.add_argument("--frames", type=positive_int,
                    help="number of frames (default: Animation.frames)")
    add_quick_compile(an)
    sw = sub.add_parser("sweep", help="run a design sweep into a Zarr store")
    sw.add_argument("sweep", metavar="SWEEP.yaml", help="the sweep file")
    sw.add_argument("--out", metavar="STORE.zarr",
                    help="the sweep store: a local folder or s3://bucket/prefix.zarr (required unless "
                         "--dry-run); it must be new unless --resume, --overwrite or --retry-failed")
    sw.add_argument("--workers", type=positive_int, help="local worker processes (>= 1)")
    add_dask_target(sw, "run")
    mode = sw.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true",
                      help="continue the sweep in an existing store: run only its batches not yet "
                           "committed or found damaged")
    mode.add_argument("--overwrite", action="store_true",
                      help="delete an existing sweep store at --out and start again")
    mode.add_argument("--retry-failed", action="store_true",
                      help="resume, and also run again the batches whose points failed")
    sw.add_argument("--dry-run", action="store_true",
                    help="check the sweep against its model (parameter and output names, store "
                         "size) and print points, batches and axes; runs nothing")
    sw.add_argument("--estimate", action="store_true",
                    help="with --dry-run (implied): compile and run the first batch and print "
                         "compile seconds, seconds per point and the estimated total")
    sw.add_argument("--progress-every", type=positive_float, default=30.0, metavar="SECONDS",
                    help="when stderr is not a terminal (a batch job's log): a progress line at "
                         "most every SECONDS (default 30)")
    sw.add_argument("--worker-timeout", type=seconds_arg, default=None, metavar="SECONDS",
                    help="stop (exit 3, batches left pending) when the Dask cluster has had no worker "
                         "for SECONDS (default 60; 0 waits for ever)")
    stat = sub.add_parser("status", help="progress, status counts and integrity of a sweep store "
                          "(exit 1 when a batch is damaged)")
    stat.add_argument("store", help="the sweep store (a folder or s3://bucket/prefix.zarr)")
    stat.add_argument("--verify", action="store_true",
                      help="read, checksum and decode every chunk (default: a quick check of "
                           "commit records and chunk files)")
    de = sub.add_parser("design", help="kinematic design: fit design parameters so that a "
                        "point's path follows a target curve (gradients from sensitivities)")
    de.add_argument("design", metavar="DESIGN.yaml", help="the design file")
    de.add_argument("--out", help="write the optimisation history (a .zarr store) and its "
                    "picture (OUT.png)")
    de.add_argument("--from", dest="from_store", metavar="STORE.zarr",
                    help="start from the best points of this sweep store")
    de.add_argument("--starts", type=positive_int, metavar="K",
                    help="with --from: how many of its best points to start from (default 1)")
    de.add_argument("--workers", type=whole_number,
                    help="LocalCluster worker processes (default: one per core, at most one per "
                         "start; a single start runs in this process); 0 runs the starts one "
                         "after another in this process")
    add_dask_target(de, "run the starts")
    de.add_argument("--overwrite", action="store_true", help="replace an existing history store")
    de.add_argument("--no-plot", action="store_true", help="do not write OUT.png")
    sub.add_parser("run-default", help="the default RSCR sweep into out/rscr.zarr (make run)")
    for name, command in sub.choices.items():
        add_log_options(command, "also show debugging lines and the traceback of a storage or cluster "
                                 "fault" if name == "sweep" else None)
    return p


#: command -> the name of the function that runs it (imported on first use, see _HOMES).
COMMANDS = {"run-default": "cmd_run_default", "check": "cmd_check", "simulate": "cmd_simulate",
            "equilibrium": "cmd_equilibrium", "plot": "cmd_plot",
            "animate": "cmd_animate", "sweep": "cmd_sweep", "status": "cmd_status", "design": "cmd_design"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mechsweep`` command line.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0 success, 1 failed simulation (or failed sweep
        points), 2 bad input, 3 an incomplete sweep (see the module
        docstring).

    Progress lines and notes are records of the ``mechsweep`` logger, shown
    on stderr while the command runs (:func:`sweep.log.cli_logging`; ``-q``
    hides them, ``-v`` adds debugging lines); results go to stdout.
    """
    with contextlib.ExitStack() as stack:
        return _run(stack, argv)


def _load_programs_ahead(stack: contextlib.ExitStack, args) -> None:
    """Start loading the executables this command's last run on this file used (``solver.programs_loaded_ahead``).

    For the commands that compile in their own process: those that solve a
    model file, a design, and a sweep's ``--estimate`` (its first batch);
    the record for the next run is written when the command ends.  A file
    that cannot be read is left to the command, which says why.
    """
    where = {"simulate": "model", "equilibrium": "model", "plot": "source", "animate": "source",
             "design": "design", "sweep": "sweep" if getattr(args, "estimate", False) else None}.get(args.command)
    source = getattr(args, where, None) if where else None
    if not isinstance(source, str) or not is_model_path(source):
        return
    try:
        text = Path(source).read_bytes()
    except OSError:
        return
    from solver import programs_loaded_ahead

    stack.enter_context(programs_loaded_ahead(args.command, str(getattr(args, "build", "")), text))


def _run(stack: contextlib.ExitStack, argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        stack.enter_context(cli_logging(log_level(args)))
        for name in YAML_INPUTS:   # a mistyped file name is told before the command loads the solver
            if isinstance(getattr(args, name, None), str):
                model_file_arg(getattr(args, name))
        if args.command in ("check", "simulate", "equilibrium", "plot", "animate", "design") or \
                getattr(args, "estimate", False):
            # The sweep workers' persistent compilation cache: a second
            # simulate of the same model loads its compiled program.
            from sweep.jax_cache import configure_jax, default_jax_cache_dir

            configure_jax(default_jax_cache_dir())
            _load_programs_ahead(stack, args)
        return __getattr__(COMMANDS[args.command])(args)
    except InputError as err:
        print(f"mechsweep: error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except KeyboardInterrupt:
        print("mechsweep: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The ``mechsweep`` console script: :func:`main` on ``sys.argv``, then the process ends with its exit code.

    After the command returns, the process does what Python's own exit does,
    in its order: it shuts its threads down (the hooks of thread pools, such
    as ``concurrent.futures``', then a wait for every thread that is not a
    daemon) and runs every exit handler that was registered (logging's
    flush, Dask's clean-up, anything a library registered); then it flushes
    the standard streams and ends, without the interpreter's teardown of its
    modules: with JAX and xarray loaded that teardown took 0.3-0.5 s of
    every command after its work was done
    (``workflows/benchmarks/results/startup.txt``). Every file a command
    writes is closed before it returns. An exception that escapes
    :func:`main` ends the process as Python does, with its traceback.

    A command that failed while programs were still compiling ahead for it
    (:mod:`solver.ahead`: a run's program, started before its consistent
    point, which then failed) does not wait for them: nothing would use them,
    and the error was told already.  It skips the threads' shutdown; the
    exit handlers still run.

    Raises:
        SystemExit: with :func:`main`'s exit code, where this Python lacks
            the two steps of its exit that this needs (then the teardown is kept).
    """
    code = main()
    # The two steps of Python's own exit before the teardown (Py_FinalizeEx): private
    # names, so a Python without them exits the ordinary way.
    shut_threads = getattr(threading, "_shutdown", None)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if shut_threads is None or run_exit_handlers is None:
        sys.exit(code)
    ahead = sys.modules.get("solver.ahead")
    if not (code != 0 and ahead is not None and ahead.running()):
        shut_threads()
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
