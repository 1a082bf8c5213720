"""``solver.import_hooks.after_import``: code run the moment a module is first imported, not before."""

import subprocess
import sys
from pathlib import Path

import pytest

from solver.import_hooks import after_import

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_callbacks_run_in_order_once_the_module_has_run_and_before_the_importer_gets_it(tmp_path):
    (tmp_path / "hooked_probe.py").write_text("VALUE = 1\n")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from solver.import_hooks import after_import\n"
        "seen = []\n"
        "after_import('hooked_probe', lambda m: seen.append(('first', m.VALUE)))\n"
        "after_import('hooked_probe', lambda m: setattr(m, 'VALUE', 2) or seen.append(('second', m.VALUE)))\n"
        "print('hooked_probe' in sys.modules, seen)\n"
        "import hooked_probe\n"
        "print(hooked_probe.VALUE, seen)\n"
        "import importlib; importlib.reload(hooked_probe)\n"
        "print(hooked_probe.VALUE, seen)\n")
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["False []", "2 [('first', 1), ('second', 2)]",
                                       "1 [('first', 1), ('second', 2)]"]


def test_a_module_imported_already_gets_the_callback_at_once():
    seen = []
    after_import("json", seen.append)
    assert seen == [sys.modules["json"]]


def test_only_top_level_modules_are_accepted():
    with pytest.raises(ValueError, match="top-level module name, got 'xarray.core'"):
        after_import("xarray.core", print)
