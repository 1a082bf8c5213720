"""The documentation site builds without a warning, and its reference examples are true.

* ``mkdocs build --strict`` of ``mkdocs.yml`` into a temporary folder: any
  warning fails it, and ``validation`` in ``mkdocs.yml`` makes a broken link
  or anchor inside the site a warning.  The API pages render the
  docstrings (mkdocstrings), the command line page is generated from the
  argparse parser (``docs/_hooks/cli_reference.py``).
* Every YAML example of the sweep file and design file references is read
  by the project's reader, as ``tests/test_docs_models.py`` does for model
  files: a complete file must load; ``# fragment`` must load once its
  top-level keys replace those of a minimal file; ``# error: TEXT`` must be
  refused with a message containing TEXT.
* Every key the readers accept is in the reference.
* No docstring points at a document the project does not have.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pendulum_sweep import PENDULUM
from solver.errors import InputError
from solver.models.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "_hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the site
def test_the_site_builds_in_strict_mode_without_a_warning(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    out = tmp_path / "site"
    # NO_MKDOCS_2_WARNING: mkdocs-material's notice about its successor, not about this site.
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert not re.search(r"^\s*(WARNING|ERROR)\b", log, re.M), log
    for page in ("index.html", "reference/cli/index.html", "reference/api/solver/index.html",
                 "tutorials/first-sweep/index.html", "models/index.html"):
        assert (out / page).is_file(), page
    cli = (out / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--retry-failed" in cli and "--worker-timeout" in cli
    api = (out / "reference" / "api" / "solver" / "index.html").read_text(encoding="utf-8")
    assert "solve_batch" in api and "Raises" in api


def test_every_page_is_in_the_navigation():
    import yaml

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def pages(node):
        if isinstance(node, dict):
            for value in node.values():
                yield from pages(value)
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)
        elif isinstance(node, str) and node.endswith(".md"):
            yield node

    listed = set(pages(config["nav"]))
    present = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "_hooks" not in p.parts}
    assert present <= listed, present - listed
    assert listed <= present, listed - present


# ---------------------------------------------------------------- generated pages
def test_the_cli_reference_lists_every_subcommand_and_option():
    hooks = _hooks()
    text = hooks.cli_markdown()
    subs = hooks.subcommands(hooks.build_parser())
    assert {"check", "simulate", "sweep", "status", "design"} <= set(subs)
    for name, (_, sub) in subs.items():
        assert f"## mechsweep {name}" in text
        for action in hooks.arguments(sub):
            for option in action.option_strings:
                assert f"`{option}`" in text, (name, option)


# Options of the parser without help text today (the CLI's own module gives them help).
KNOWN_WITHOUT_HELP: set = set()   # every option and argument has help text


def test_no_new_option_goes_without_help_text():
    hooks = _hooks()
    missing = set()
    for name, (_, sub) in hooks.subcommands(hooks.build_parser()).items():
        for action in hooks.arguments(sub):
            if not action.help:
                label = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
                missing.add((name, label))
    assert missing <= KNOWN_WITHOUT_HELP, missing - KNOWN_WITHOUT_HELP


def test_the_status_table_has_every_code():
    from solver import status

    text = _hooks().status_markdown()
    for name, code in status.CODES.items():
        assert f"| {code} | `{name}` |" in text


def test_the_generated_tables_have_their_markers():
    hooks = _hooks()
    assert hooks.MARKER in (DOCS / hooks.PAGE).read_text(encoding="utf-8")
    assert hooks.STATUS_MARKER in (DOCS / hooks.STATUS_PAGE).read_text(encoding="utf-8")


# ---------------------------------------------------------------- sweep and design file examples
_FENCE = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
BASES = {
    "reference/sweep-files.md": "Model: pendulum.yaml\nSweep: {product: {L: [1.0, 1.2]}}\n",
    "reference/design-files.md": ("Model: pendulum.yaml\nParameters: {L: {start: 1.0, bounds: [0.5, 2]}}\n"
                                  "Objective: {path: x, target: {design: {L: 1.2}}}\n"),
}


def _examples():
    out = []
    for page in BASES:
        text = (DOCS / page).read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append(pytest.param(page, m.group(1), id=f"{page}:{line}"))
    return out


def _load(page: str, text: str, folder: Path):
    from sweep.design.spec import load_design
    from sweep.spec import load_sweep

    (folder / "pendulum.yaml").write_text(PENDULUM)
    path = folder / "example.yaml"
    path.write_text(text)
    return (load_sweep if "sweep" in page else load_design)(path)


@pytest.mark.parametrize("page, block", _examples())
def test_reference_example(page, block, tmp_path):
    import yaml

    first = block.splitlines()[0].strip()
    if first.startswith("# error:"):
        with pytest.raises(InputError) as err:
            _load(page, block, tmp_path)
        assert first[len("# error:"):].strip() in str(err.value)
    elif first.startswith("# fragment"):
        base, _ = load_yaml(BASES[page])
        data, _ = load_yaml(block)
        base.update(data)
        _load(page, yaml.safe_dump(base, sort_keys=False), tmp_path)
    else:
        _load(page, block, tmp_path)


def test_every_example_sort_is_there():
    for page in BASES:
        firsts = [m.group(1).splitlines()[0] for m in _FENCE.finditer((DOCS / page).read_text())]
        assert any(f.startswith("# error:") for f in firsts), page
        assert any(not f.startswith("#") for f in firsts), page


@pytest.mark.parametrize("page, keys", [
    ("reference/sweep-files.md", "sweep.spec:TOP_KEYS GROUPS AXIS_KINDS SAMPLE_METHODS REDUCTIONS EVENT_REDUCTIONS"),
    ("reference/design-files.md", "sweep.design.spec:TOP_KEYS METHODS TARGET_KINDS REDUCTIONS"),
])
def test_every_key_the_readers_accept_is_documented(page, keys):
    module, _, names = keys.partition(":")
    mod = importlib.import_module(module)
    text = (DOCS / page).read_text(encoding="utf-8")
    for name in names.split():
        missing = [k for k in getattr(mod, name) if f"`{k}`" not in text and not re.search(
            rf"`[^`\n]*\b{re.escape(k)}\b[^`\n]*`", text)]
        assert not missing, (name, missing)


def test_docstrings_point_at_pages_of_the_project():
    pattern = re.compile(r"METHOD\.md|DESIGN\.md|README's \"|README \"")
    found = [f"{p.relative_to(ROOT)}:{n}" for folder in ("solver", "sweep") for p in (ROOT / folder).rglob("*.py")
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not found, found
    for p in list((ROOT / "solver").rglob("*.py")) + list((ROOT / "sweep").rglob("*.py")):
        for ref in re.findall(r"docs/([\w/.-]+\.md)", p.read_text(encoding="utf-8")):
            assert (DOCS / ref).is_file(), (p, ref)
