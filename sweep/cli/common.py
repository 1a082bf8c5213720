"""What every ``mechsweep`` command shares: the parser, argument types, exit codes, the progress logger and the file checks."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from pathlib import Path

from solver.errors import InputError, check_regular_file
from sweep.log import get_logger

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_INPUT", "check_out", "add_log_options", "log_level",
           "finish_optimised_builds"]

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2

log = get_logger("cli")


class CommandParser(argparse.ArgumentParser):
    """argparse that reports usage errors as InputError (exit 2, one message)."""

    def error(self, message):
        raise InputError(f"{message} (see 'mechsweep {self.prog.split()[-1]} --help')"
                         if " " in self.prog else f"{message} (see 'mechsweep --help')")


def _at_least(minimum: int):
    """An argparse type: a whole number >= ``minimum`` (counts such as ``--workers``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
        return value

    return parse


positive_int = _at_least(1)


def seconds_arg(text: str) -> float:
    """An argparse type: a number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}") from None
    if not value >= 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number > 0 (seconds such as ``--progress-every``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value

#: ``design --workers``: 0 runs the starts in this process.
whole_number = _at_least(0)


def add_quick_compile(parser: argparse.ArgumentParser) -> None:
    """The ``--quick-compile`` and ``--optimize`` flags of the commands that solve a model once (``args.build``).

    Without either, a model file's run goes on its optimised build where an
    earlier run with ``--optimize`` (or a tiered ``solve()``) left one in the
    program store, and on a quick build otherwise (:mod:`solver.tiered`'s
    quick mode).
    """
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick-compile", dest="build", action="store_const", const="quick", default="auto",
                       help="when solving a model file: compile every program without LLVM's optimisation, "
                            "even where an optimised build is stored (as SolverParams.Integration.optimize: "
                            "false)")
    group.add_argument("--optimize", dest="build", action="store_const", const="optimised",
                       help="when solving a model file: compile the run's optimised build, which takes about "
                            "twice as long to compile as the quick build a first run gets by default and runs up "
                            "to 10x faster; later runs of the model use it")


def add_log_options(parser: argparse.ArgumentParser, verbose_help: str | None = None) -> None:
    """``-v/--verbose`` and ``-q/--quiet``, on the top-level parser and on each command's.

    Both default to absent (``argparse.SUPPRESS``) so that a command's parser
    never resets what the top-level one was given (``mechsweep -q simulate``
    and ``mechsweep simulate -q`` are the same); read them with
    :func:`log_level`.
    """
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help=verbose_help or "also show debugging lines")
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress lines or notes on stderr (results and errors are still "
                             "written)")


def log_level(args) -> int:
    """The ``mechsweep`` logger's level for the parsed options: DEBUG (-v), WARNING (-q) or INFO."""
    import logging

    if getattr(args, "verbose", False):
        return logging.DEBUG
    return logging.WARNING if getattr(args, "quiet", False) else logging.INFO


def note_progress(message: str) -> None:
    """A progress line or note: an ``INFO`` record of ``mechsweep.cli`` (``[mechsweep] ...`` on stderr)."""
    log.info(message)


def finish_optimised_builds(code: int) -> int:
    """Wait, saying so, for the optimised builds a tiered compile left compiling (:mod:`solver.tiered`).

    The command's result is complete by then: the wait only puts the optimised
    programs in the compilation cache, so that later runs start on them.

    Args:
        code: the command's exit code.

    Returns:
        ``code``.  Ctrl-C during the wait ends the process at once with ``code``
        (the builds are compiled again by a later run).
    """
    tiered = sys.modules.get("solver.tiered")
    if tiered is None or not tiered.pending():
        return code
    note_progress("the result is complete; compiling the optimised build of its programs for later runs "
                  "(Ctrl-C skips this)")
    start = time.perf_counter()
    try:
        tiered.wait_pending()
    except KeyboardInterrupt:
        # Python would join the compiling thread on its way out: leave without it.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    note_progress(f"optimised build ready after {time.perf_counter() - start:.1f} s more")
    return code


def split_text(wall: float, compile_seconds: float, solve_seconds: float | None = None) -> str:
    """``finished in W s (C s compiling, R s solving)``: a command's time, compiling apart from solving.

    Args:
        wall: the seconds the work took.
        compile_seconds: the part JAX spent tracing and compiling
            (:class:`solver.compile_clock`); more than ``wall`` counts as all
            of it unless ``solve_seconds`` is given.
        solve_seconds: the solving seconds where they are not the rest of
            ``wall`` (work summed over parallel workers); default
            ``wall - compile_seconds``.

    Returns:
        The text, as ``simulate`` has always written it.
    """
    compile_seconds = max(float(compile_seconds), 0.0)
    if solve_seconds is None:
        compile_seconds = min(compile_seconds, wall)
        solve_seconds = wall - compile_seconds
    return f"finished in {wall:.1f} s ({compile_seconds:.1f} s compiling, {solve_seconds:.2f} s solving)"


def is_model_path(path: str) -> bool:
    return path.endswith((".yaml", ".yml"))


def model_file_arg(path: str) -> Path:
    """The MODEL argument as a path, checked to be a readable regular file.

    Always a :class:`~pathlib.Path`, so that a name that is not a file is
    never read as YAML text (``solver.load`` also accepts text).

    Raises:
        InputError: missing, a folder, or not a regular file (``/dev/null``).
    """
    check_regular_file(Path(path), path)
    return Path(path)


def _is_zarr_store(path: Path) -> bool:
    """A Zarr v3 (``zarr.json``) or v2 (``.zgroup``) store's folder."""
    return (path / "zarr.json").is_file() or (path / ".zgroup").is_file()


def check_out(out: str, *, folder: bool, overwrite: bool = False, what: str = "the output") -> None:
    """Refuse an ``--out`` target that would be misused, before any work is done.

    :func:`_check_out` with the file system's own refusals (a name too long,
    a loop of links, no permission to look) as messages instead of tracebacks.

    Raises:
        InputError: see :func:`_check_out`; also a path the system cannot
            look at.
    """
    try:
        if "://" in out:
            _check_object_store_out(out, folder=folder, what=what)
        else:
            _check_out(out, folder=folder, overwrite=overwrite, what=what)
    except OSError as exc:
        shown = out if len(out) <= 200 else out[:100] + "..." + out[-50:]
        raise InputError(f"--out {shown}: cannot use this path ({exc.strerror or exc}); choose "
                         f"another") from None


def _check_object_store_out(out: str, *, folder: bool, what: str) -> None:
    """An object-store ``--out`` (``s3://bucket/prefix``): only stores go there, into an existing bucket."""
    from sweep.location import StoreLocation

    if not folder:
        raise InputError(f"--out {out}: only Zarr stores can be written to an object store; give "
                         f"a local file name")
    try:
        where = StoreLocation(out)
    except (ImportError, ValueError) as exc:
        scheme = out.split("://", 1)[0]
        hint = " (pip install 'mechsweep[s3]')" if scheme == "s3" else ""
        raise InputError(f"--out {out}: cannot open {scheme}:// URLs here ({exc}); install the "
                         f"package for them{hint} or give a local path") from None
    bucket = where.root.split("/", 1)[0]
    if "/" not in where.root.strip("/"):
        raise InputError(f"--out {out}: give a store inside the bucket, e.g. "
                         f"{where.url.split('://')[0]}://{bucket}/sweep.zarr")
    if not where.fs.exists(bucket):
        raise InputError(f"--out {out}: the bucket {bucket!r} does not exist or cannot be seen with "
                         f"these credentials; create it first, or check the environment's credentials "
                         f"and endpoint")
    if where.exists() and not where.is_store():
        raise InputError(f"--out {out}: holds objects that are not {what} (no Zarr metadata); "
                         f"choose another prefix")


def _check_out(out: str, *, folder: bool, overwrite: bool = False, what: str = "the output") -> None:
    """Refuse an ``--out`` target that would be misused (see :func:`check_out`).

    Args:
        out: the ``--out`` value.
        folder: the output is a folder (a Zarr store) rather than a file.
        overwrite: ``--overwrite`` was given (mentioned in the messages: it
            replaces stores only, never other files or folders).
        what: the output's name in messages (``"a sweep store"``).

    Raises:
        InputError: ``out`` is a symbolic link; its folder does not exist; for
            a folder output, an existing non-folder or a non-empty folder that
            is no Zarr store; for a file output, an existing folder or special
            file.  The target is never touched.
    """
    p = Path(out)
    note = "; --overwrite replaces only a store, never other files or folders" if overwrite else ""
    if p.is_symlink():
        raise InputError(f"--out {out}: is a symbolic link; give the real path instead: mechsweep "
                         f"does not write or delete through links{note}")
    parent = p.parent
    if not parent.is_dir():
        raise InputError(f"--out {out}: the folder {parent} does not exist" if not parent.exists()
                         else f"--out {out}: {parent} is not a folder")
    if not p.exists():
        return
    if folder and not p.is_dir():
        raise InputError(f"--out {out}: is an existing file, not {what} (a .zarr folder); choose "
                         f"another path{note}")
    if folder and not _is_zarr_store(p) and any(p.iterdir()):
        raise InputError(f"--out {out}: is a folder that is not {what} (no Zarr metadata); choose "
                         f"another path{note}")
    if not folder and p.is_dir():
        raise InputError(f"--out {out}: is a folder; give a file name")
    if not folder and not p.is_file():
        raise InputError(f"--out {out}: is not a regular file; give a file name")
