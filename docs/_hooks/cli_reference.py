"""Reference tables generated from the code: the command line and the status codes.

An mkdocs hook. On ``reference/cli.md`` the line ``<!-- mechsweep-cli -->``
is replaced by one section per subcommand (its help, usage and a table of
its arguments), built from ``mechsweep``'s own argparse parser; on
``reference/outputs.md`` the line ``<!-- status-codes -->`` by the table of
:mod:`solver.status`.  So the pages always say what the code does.
``tests/test_docs_site.py`` imports this file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil

MARKER = "<!-- mechsweep-cli -->"
PAGE = "reference/cli.md"
STATUS_MARKER = "<!-- status-codes -->"
STATUS_PAGE = "reference/outputs.md"


def build_parser() -> argparse.ArgumentParser:
    """``mechsweep``'s parser: the ``build_parser`` of the CLI package's module that has it."""
    import sweep.cli

    names = ["sweep.cli.app"] + [f"sweep.cli.{m.name}" for m in pkgutil.iter_modules(sweep.cli.__path__)]
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "build_parser", None)):
            return module.build_parser()
    raise RuntimeError("no build_parser() in the sweep.cli package")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Subcommand name -> (its one-line help, its parser), in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}
    return {}


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a user gives (not ``--help``)."""
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{o}`" for o in action.option_strings)
    if action.nargs == 0:
        return names
    value = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                               else action.dest.upper())
    return f"{names} `{value}`"


def cli_markdown() -> str:
    """The generated part of the page: a section per subcommand."""
    parser = build_parser()
    out = ["```text", parser.format_usage().strip(), "```", ""]
    for name, (summary, sub) in subcommands(parser).items():
        out += [f"## mechsweep {name}", "", _cell(summary).replace("\\|", "|") + ".", "",
                "```text", " ".join(sub.format_usage().split()), "```", ""]
        rows = arguments(sub)
        if rows:
            out += ["| argument | default | meaning |", "|---|---|---|"]
            for a in rows:
                default = "" if a.default in (None, False, [], argparse.SUPPRESS) or a.required \
                    else f"`{a.default}`"
                if a.required and a.option_strings:
                    default = "required"
                out.append(f"| {_name(a)} | {default} | {_cell(a.help or '')} |")
            out.append("")
    return "\n".join(out)


def status_markdown() -> str:
    """The table of status codes: code, name, meaning, and whether it is a failure."""
    from solver import status

    out = ["| code | name | meaning | a failure |", "|---|---|---|---|"]
    for name, code in status.CODES.items():
        failure = "yes" if bool(status.is_failure(code)) else "no"
        out.append(f"| {code} | `{name}` | {_cell(status.DESCRIPTIONS.get(code, ''))} | {failure} |")
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:  # mkdocs hook
    """Put the generated tables in place of their markers."""
    if page.file.src_uri == PAGE and MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_markdown())
    if page.file.src_uri == STATUS_PAGE and STATUS_MARKER in markdown:
        markdown = markdown.replace(STATUS_MARKER, status_markdown())
    return markdown
