"""The README and the tutorials do what they say, run as a user would run them.

Each page is run in a fresh folder (with ``configs/`` of the repository
linked into it), its fenced blocks in order:

* a ```yaml block whose first line is ``# file: NAME`` is written to NAME;
* a ```console block's lines ``$ mechsweep ...`` run through the
  ``mechsweep`` entry point named in ``pyproject.toml``, in this process,
  and must exit 0, or N where the line ends with a comment ``# exits N``;
* a ```python block runs in one namespace per page, unless its first line
  is ``# not run``.

Other blocks (```text transcripts, fragments) are only shown.  The
first-sweep tutorial is the acceptance test of the documentation: a model
file, a sweep file, ``mechsweep sweep`` and the store opened with xarray.
"""

import importlib
import os
import re
import shlex
import tomllib
from pathlib import Path

import pytest

# The README's and tutorials' sweeps start a local Dask cluster: the integration tier.
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/tutorials/first-model.md", "docs/tutorials/python-api.md",
         "docs/tutorials/first-sweep.md", "docs/tutorials/design-tasks.md"]

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_EXITS = re.compile(r"#\s*exits\s+(\d+)")


def blocks(page: str) -> list[tuple[str, str, int]]:
    """(language, text, line) of every fenced block of a page, in order."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]


def mechsweep_entry():
    """The function that runs the ``mechsweep`` console script's commands, called here in-process.

    The script (``[project.scripts]``) is ``run`` of its module, which ends
    the process: its commands are that module's ``main``.
    """
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["mechsweep"].partition(":")
    assert attr == "run", scripts["mechsweep"]
    return getattr(importlib.import_module(module), "main")


def commands(console: str) -> list[tuple[list[str], int]]:
    """(arguments after ``mechsweep``, expected exit code) of a console block's ``$`` lines."""
    out = []
    for line in console.splitlines():
        if not line.startswith("$ "):
            continue
        expected = _EXITS.search(line)
        words = shlex.split(line[2:], comments=True)
        assert words[0] == "mechsweep", f"only mechsweep commands are run: {line}"
        out.append((words[1:], int(expected.group(1)) if expected else 0))
    return out


def run_page(page: str, folder: Path) -> None:
    """Run a page's blocks in ``folder`` as the module docstring says."""
    (folder / "configs").symlink_to(ROOT / "configs")
    main = mechsweep_entry()
    namespace: dict = {"__name__": "__docs__"}
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        for lang, text, line in blocks(page):
            where = f"{page}:{line}"
            first = text.splitlines()[0].strip() if text.strip() else ""
            if lang == "yaml" and first.startswith("# file:"):
                (folder / first.partition(":")[2].strip()).write_text(text, encoding="utf-8")
            elif lang == "console":
                for args, expected in commands(text):
                    assert main(args) == expected, f"{where}: mechsweep {' '.join(args)}"
            elif lang == "python" and not first.startswith("# not run"):
                exec(compile(text, where, "exec"), namespace)
    finally:
        os.chdir(cwd)
        import matplotlib.pyplot as plt

        plt.close("all")


def test_the_pages_have_code_to_run():
    for page in PAGES:
        langs = [lang for lang, _, _ in blocks(page)]
        assert "python" in langs, page
    readme = [lang for lang, _, _ in blocks("README.md")]
    assert {"yaml", "console", "python"} <= set(readme)


def test_the_readme_is_short_and_links_the_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024 and len(text.splitlines()) <= 170
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).is_file(), target


@pytest.mark.parametrize("page", [p for p in PAGES if p != "docs/tutorials/first-sweep.md"])
def test_page_runs(page, tmp_path):
    run_page(page, tmp_path)


def test_the_first_sweep_tutorial_as_a_user_follows_it(tmp_path):
    """Model file, sweep file, ``mechsweep sweep``, the store opened with xarray: as the page says."""
    page = "docs/tutorials/first-sweep.md"
    kinds = [lang for lang, _, _ in blocks(page)]
    assert kinds.count("yaml") >= 2 and "console" in kinds and "python" in kinds
    run_page(page, tmp_path)
    assert (tmp_path / "release.zarr" / "summary.png").is_file()
    assert (tmp_path / "release.png").is_file()
    import xarray as xr

    ds = xr.open_zarr(tmp_path / "release.zarr")
    assert ds.sizes["point"] == 6 and sorted(set(ds.status.values.tolist())) == [0, 5]
