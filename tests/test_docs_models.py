"""Every YAML example of ``docs/models.md`` does what the reference says.

A fenced ```yaml block is, by its first line:

* ``# error: TEXT`` — refused by ``solver.load`` with an :class:`InputError`
  whose message contains TEXT;
* ``# fragment: KIND`` — its top-level keys replace those of :data:`BASES`
  ``[KIND]`` (a small model of that kind) and the result loads;
* ``# fragment`` — valid YAML (read by the project's reader);
* anything else — a complete model that loads.

Loading builds the DAE and its structural analysis but compiles and
integrates nothing, so this test is cheap.  It also checks that the
reference names every key the readers accept (their valid-keys lists).
"""

import re
from pathlib import Path

import pytest

import solver
from solver.errors import InputError
from solver.models import dae_kind, lagrangian_kind, mechanism_kind, model as model_mod
from solver.models.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "models.md"

BASES = {
    "DAE": """
Kind: DAE
Variables: [x]
Equations: [x' + x]
ProblemData: {tend: 1, values: {x: 1}, fixed: [x]}
""",
    "Lagrangian": """
Kind: Lagrangian
Coordinates: {x: 1}
KineticEnergy: x'**2/2
ProblemData: {tend: 1, positions: {x: 1}, fixedpositions: [x], velocities: {x: 0}}
""",
    "Mechanism": """
Kind: Mechanism
Dimension: 2
PartData: {Fixed: {O: [0, 0]}, Particles: {B: 1}, Springs: {OB: [1, 1, 0]}}
ProblemData: {tend: 1, positions: {B: [1, 0]}}
""",
}

_FENCE = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)


def _blocks():
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(pytest.param(m.group(1), id=f"line{line}"))
    return out


BLOCKS = _blocks()


def test_the_reference_has_examples_of_every_sort():
    firsts = [b.values[0].splitlines()[0] for b in BLOCKS]
    assert len(BLOCKS) >= 15
    for marker in ("# error:", "# fragment: DAE", "# fragment: Lagrangian",
                   "# fragment: Mechanism"):
        assert any(f.startswith(marker) for f in firsts), marker
    complete = [f for f in firsts if not f.startswith(("# error:", "# fragment"))]
    assert len(complete) >= 5


@pytest.mark.parametrize("block", BLOCKS)
def test_example(block):
    first = block.splitlines()[0].strip()
    if first.startswith("# error:"):
        expected = first[len("# error:"):].strip()
        with pytest.raises(InputError) as err:
            solver.load(block)
        assert expected in str(err.value)
        return
    if first.startswith("# fragment"):
        kind = first.partition(":")[2].strip()
        data, _ = load_yaml(block)
        assert isinstance(data, dict) and data
        if not kind:
            return
        base, _ = load_yaml(BASES[kind])
        base.update(data)
        model = solver.load(_dump(base))
        assert model.kind == kind
        return
    model = solver.load(block)
    assert model.kind in ("DAE", "Lagrangian", "Mechanism")


def _dump(data) -> str:
    """YAML text of plain data (expressions stay strings, quoted as needed)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


# ---------------------------------------------------------------- coverage
def _documented(text: str, key: str) -> bool:
    return f"`{key}`" in text or re.search(rf"`[^`\n]*\b{re.escape(key)}\b[^`\n]*`", text)


@pytest.mark.parametrize("keys", [
    dae_kind.TOP_KEYS, lagrangian_kind.TOP_KEYS, lagrangian_kind.PD_KEYS,
    mechanism_kind.TOP_KEYS, mechanism_kind.PART_KINDS, mechanism_kind.FORCE_KEYS,
    mechanism_kind.PROBLEM_KEYS, model_mod.TIME_KEYS, model_mod.INIT_METHODS,
    model_mod.ENGINE_MODES, ("tol", "order", "max_steps", "h_max", "mode", "method"),
    ("Scene", "Points", "Links", "Up", "frames", "fps", "view", "limits"),
    ("values", "fixed", "rows", "cols", "push", "edges", "corners"),
    ("points", "stiffness", "length", "mass", "damping", "Geom", "Dyna"),
])
def test_every_key_the_readers_accept_is_documented(keys):
    text = DOC.read_text(encoding="utf-8")
    missing = [k for k in keys if not _documented(text, k)]
    assert not missing


def test_every_function_of_the_expression_language_is_documented():
    from solver.models.expr import FUNCTIONS

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Functions"):text.index("### Vectors")]
    assert [f for f in FUNCTIONS if not re.search(rf"\b{f}\b", section)] == []


def test_the_readme_links_the_reference_and_the_reference_links_input_limits():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/models.md" in readme
    doc = DOC.read_text(encoding="utf-8")
    assert "reference/input-limits.md" in doc
    assert "# Input limits" in (ROOT / "docs" / "reference" / "input-limits.md").read_text(encoding="utf-8")


def test_every_link_inside_the_reference_has_its_heading():
    text = DOC.read_text(encoding="utf-8")
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#{2,4} (.+)$", text, re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links <= anchors, links - anchors
