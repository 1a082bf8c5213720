"""The ``mechsweep`` logger (issue 40): the library prints nothing unless asked, the CLI shows progress.

Specification:

* progress lines and notes are records of ``logging.getLogger("mechsweep")``
  and its children; with logging not configured nothing reaches stderr;
* the command line shows them on the current stderr as ``[mechsweep] ...``
  (records with ``extra=PLAIN`` bare) while a command runs, and restores the
  logger afterwards;
* ``-q/--quiet`` and ``-v/--verbose`` work before or after the command name
  and set the level (WARNING, DEBUG; INFO without them);
* the names that were importable from the split modules still are.

Nothing here compiles a model.
"""

from __future__ import annotations

import logging

import pytest

from sweep.cli.app import build_parser
from sweep.cli.common import log_level
from sweep.log import PLAIN, cli_logging, get_logger


def test_the_library_logs_nothing_visible_without_configuration(capsys):
    get_logger("design").info("start 0: converged")
    get_logger("sweep").info("summary")
    assert capsys.readouterr() == ("", "")


def test_the_cli_handler_writes_prefixed_lines_on_the_current_stderr_and_is_removed(capsys):
    logger = logging.getLogger("mechsweep")
    before = (logger.level, logger.propagate, list(logger.handlers))
    with cli_logging():
        get_logger("design").info("start from store point 3: L = 1.07")
        get_logger("sweep").info("  estimate:  compiling ...", extra=PLAIN)
        get_logger("cli").debug("not shown at INFO")
    assert capsys.readouterr().err == ("[mechsweep] start from store point 3: L = 1.07\n"
                                       "  estimate:  compiling ...\n")
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    get_logger("design").info("after the command")
    assert capsys.readouterr().err == ""


def test_quiet_hides_progress_and_verbose_shows_debugging_lines(capsys):
    with cli_logging(logging.WARNING):
        get_logger("cli").info("progress")
    assert capsys.readouterr().err == ""
    with cli_logging(logging.DEBUG):
        get_logger("cli").debug("detail")
    assert capsys.readouterr().err == "[mechsweep] detail\n"


@pytest.mark.parametrize("argv, level", [
    (["status", "s.zarr"], logging.INFO),
    (["-q", "status", "s.zarr"], logging.WARNING),
    (["status", "s.zarr", "--quiet"], logging.WARNING),
    (["-v", "sweep", "s.yaml"], logging.DEBUG),
    (["sweep", "s.yaml", "-v"], logging.DEBUG),
    (["simulate", "m.yaml", "-q"], logging.WARNING),
])
def test_log_options_before_or_after_the_command(argv, level):
    args = build_parser().parse_args(argv)
    assert log_level(args) == level


def test_sweep_verbose_still_asks_for_the_traceback():
    assert getattr(build_parser().parse_args(["sweep", "s.yaml", "--verbose"]), "verbose", False)
    assert not getattr(build_parser().parse_args(["sweep", "s.yaml"]), "verbose", False)


def test_old_import_paths_of_the_split_modules():
    from sweep.cli.app import (FINAL_MAX, check_out, cmd_design, cmd_status,  # noqa: F401
                               cmd_sweep, main, open_result, summary, write_result)
    from sweep.design.optimize import (DesignContext, build_problem, evaluate, load_design_model,  # noqa: F401
                                       rank_store, run_design)
    from sweep.pipeline import (FREE_SPACE_MARGIN, REDUCERS, check_batch_memory,  # noqa: F401
                                check_store_size, event_metric, scalar_series, solver_outputs, store_bytes)
    from sweep.structural import (STRUCTURAL_FORMAT, create_root, points_dataset, prepare_root,  # noqa: F401
                                  status_report)
    assert FREE_SPACE_MARGIN == 64 * 2**20
