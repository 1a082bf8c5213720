"""Repeated parts in model files (``solver/models/repeat.py``, docs/models.md).

References: the hand-written chain of 5 pendula (``configs/mechanisms/chain5.yaml``,
written term by term before repeats existed) must be the same model as its
repeated form; and the expanded text itself, written out here by hand.
"""

from pathlib import Path

import numpy as np
import pytest

import solver
from solver.errors import InputError
from solver.models.repeat import expand
from solver.models.yamlio import load_yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"

CHAIN = """Title: Chain of N pendula
Kind: Lagrangian
PhysicalParams: {m: 1.0, g: 9.81, l: 0.5, th: 0.8, push: 1.0, N: 5,
                 e: [sin(th), 0, cos(th)]}
Coordinates:
  R{i} for i in 1..N: 3
KineticEnergy: m/2*sum(dot(R{i}', R{i}') for i in 1..N)
PotentialEnergy: -m*g*sum(R{i}[2] for i in 1..N)
Constraints:
  - dot(R1, R1) - l**2
  - for i in 2..N: dot(R{i} - R{i-1}, R{i} - R{i-1}) - l**2
ProblemData:
  t0: 0
  tend: 5
  positions:
    R{i} for i in 1..N: "{i}*l*e"
  fixedpositions:
    R{i} for i in 1..N:
  velocities:
    R{i} for i in 1..N-1: [0, 0, 0]
    R{N}: [0, push, 0]
  samples: 251
"""


def _expanded(text):
    data, loc = load_yaml(text)
    return expand(data, loc), loc


def _load_error(text) -> str:
    with pytest.raises(InputError) as err:
        solver.load(text)
    return str(err.value)


# ------------------------------------------------------------------ expansion
def test_expansion_writes_out_what_a_person_would():
    out, loc = _expanded(CHAIN.replace("N: 5", "N: 3"))
    assert out["Coordinates"] == {"R1": 3, "R2": 3, "R3": 3}
    assert out["KineticEnergy"] == \
        "m/2*((dot(R1', R1')) + (dot(R2', R2')) + (dot(R3', R3')))"
    assert out["PotentialEnergy"] == "-m*g*((R1[2]) + (R2[2]) + (R3[2]))"
    assert out["Constraints"] == ["dot(R1, R1) - l**2",
                                  "dot(R2 - R1, R2 - R1) - l**2",
                                  "dot(R3 - R2, R3 - R2) - l**2"]
    assert out["ProblemData"]["positions"] == {"R1": "1*l*e", "R2": "2*l*e", "R3": "3*l*e"}
    assert out["ProblemData"]["fixedpositions"] == {"R1": None, "R2": None, "R3": None}
    assert out["ProblemData"]["velocities"] == {"R1": [0, 0, 0], "R2": [0, 0, 0],
                                                "R3": [0, "push", 0]}
    assert loc.repeat_names == {"N"}
    # Made entries take their template's line (for messages).
    assert loc.lines[("Coordinates", "R2")] == 6
    assert loc.lines[("Constraints", 2)] == 11
    assert loc.lines[("ProblemData", "velocities", "R3")] == 21


def test_files_without_repeats_are_left_as_they_are():
    for path in sorted(CONFIGS.glob("*.yaml")):
        if path.stem in ("spring_chain", "pendulum_chain3d", "pleiades"):   # written with repeats
            continue
        data, loc = load_yaml(path)
        lines = dict(loc.lines)
        assert expand(data, loc) is data, path.name
        assert loc.lines == lines and loc.repeat_names == set()


def test_sums_ranges_and_nested_clauses():
    out, _ = _expanded("""
PhysicalParams: {n: 3}
A: sum(x{i} for i in 1..0) + 1          # empty range
B: sum(sum(a{i}{j} for j in 1..i) for i in 1..2)
C:
  P{i}Q{j} for i in 1..n for j in i..n: "{i*10 + j}"
D:
  - for k in 3..1: never
  - for k in 1..2: ["k{k}", "{k}"]
Title: "Title {n} is not expanded"
""")
    assert out["A"] == "0 + 1"
    assert out["B"] == "((((a11))) + (((a21) + (a22))))"
    assert out["C"] == {"P1Q1": "11", "P1Q2": "12", "P1Q3": "13", "P2Q2": "22",
                        "P2Q3": "23", "P3Q3": "33"}
    assert out["D"] == [["k1", "1"], ["k2", "2"]]
    assert out["Title"] == "Title {n} is not expanded"


# ------------------------------------------------------------------ models
def test_spring_chain_n_is_structural_and_overrides_expand_again():
    model = solver.load(CONFIGS / "spring_chain.yaml")
    assert model.points == ["P1", "P2", "P3", "P4", "P5"]
    assert model.fixed_points == ["P0", "P6"]
    assert list(model.param_info.structural) == ["N"] and "N" not in model.params
    assert len(model.links) == 6
    with pytest.raises(InputError, match="'N' is structural"):
        model.check_params({"N": 7})
    # The model keeps the file's data as written, so a new N is expanded again.
    seven = model.with_overrides({"PhysicalParams": {"N": 7}})
    assert seven.points == [f"P{i}" for i in range(1, 8)]
    assert seven.fixed_positions()["P8"].tolist() == [4.0, 0.0]
    assert seven.dae.structure.dof == 28
    three = solver.load(CONFIGS / "spring_chain.yaml", overrides={"PhysicalParams": {"N": 3}})
    assert three.points == ["P1", "P2", "P3"]
    x = three.initial_values({"mode": 2})
    assert x["P2"][0] == pytest.approx(2 * 0.5 + 0.05 * np.sin(2 * 2 * np.pi / 4))


def test_repeated_chain_is_the_hand_written_chain5():
    hand = solver.load(CONFIGS / "chain5.yaml")
    rep = solver.load(CHAIN)
    assert [(c.name, c.size) for c in rep.dae.coords] == \
        [(c.name, c.size) for c in hand.dae.coords]
    assert rep.dae.n_c == hand.dae.n_c == 5
    assert rep.fixed == hand.fixed
    for key, value in hand.initial_values().items():
        np.testing.assert_allclose(rep.initial_values()[key], value, rtol=0, atol=1e-15)
    rng = np.random.default_rng(3)
    q = {f"R{i}": rng.normal(size=3) for i in range(1, 6)}
    qd = {f"R{i}": rng.normal(size=3) for i in range(1, 6)}
    np.testing.assert_allclose(rep.dae.constraints_at(0.0, q), hand.dae.constraints_at(0.0, q),
                               rtol=1e-14, atol=1e-14)
    assert float(rep.dae.energy(0.0, q, qd)) == pytest.approx(float(hand.dae.energy(0.0, q, qd)),
                                                              rel=1e-14)


# ------------------------------------------------------------------ refusals
BAD = """Kind: Lagrangian
PhysicalParams: {N: 3, m: 1.0}
Coordinates:
  KEY: 1
KineticEnergy: q1'**2
ProblemData: {tend: 1}
"""


@pytest.mark.parametrize("key, message", [
    ("q{i} for i in 1..N/2", "line 4: Coordinates.q{i} for i in 1..N/2: the upper bound 'N/2' "
                             "must be a whole number, got 1.5"),
    ("q{i} for i from 1..N", "cannot read the repeat clause 'for i from 1..N'; write "
                             "'for i in A..B'"),
    ("q{m} for m in 1..N", "loop variable 'm' has the name of a PhysicalParams entry"),
    ("q{i}{i} for i in 1..2 for i in 1..2", "loop variable 'i' is already the variable of an "
                                            "outer loop"),
    ("q{i} for i in 1..M", "unknown name 'M'; valid names (closest first): N, m"),
    ("q{i/2} for i in 1..N", "the placeholder 'i/2' must be a whole number, got 0.5"),
    ("q{1} for i in 1..2", "the key 'q1' is made twice"),
    ("q{i} for lambda in 1..2", "loop variable 'lambda' is a Python keyword"),
    ("q{__import__} for i in 1..2", "name '__import__' is not allowed"),
    ("q{t} for i in 1..2", "unknown name 't'"),
    ("q{x'} for i in 1..2", "they have no derivatives"),
])
def test_bad_repeats_are_refused_with_the_place(key, message):
    assert message in _load_error(BAD.replace("KEY", key))


def test_repeats_are_bounded_by_the_input_limits(monkeypatch):
    big = BAD.replace("KEY", "q{i} for i in 1..N").replace("N: 3", "N: 10**9")
    text = _load_error(big)
    assert "too many values once the repeats are expanded: more than 1000000; the limit is " \
           "1000000 (MAX_YAML_NODES)" in text
    monkeypatch.setenv("MECHSWEEP_MAX_YAML_NODES", "50")
    text = _load_error(BAD.replace("KEY", "q{i} for i in 1..40").replace(
        "q1'**2", "sum(q{i}'**2 for i in 1..40)"))
    assert "the limit is 50 (MAX_YAML_NODES)" in text
    monkeypatch.delenv("MECHSWEEP_MAX_YAML_NODES")
    text = _load_error(BAD.replace("KEY", "q1").replace(
        "q1'**2", "sum(q1'**2 for i in 1..5000)"))
    assert "sum(...) expands to more than 10000 characters" in text
    nested = "q1'**2" + "".join(f"*sum(1 for i{k} in 1..2)" for k in range(3))
    solver.load(BAD.replace("KEY", "q1").replace("q1'**2", nested))   # 3 deep: fine
    deep = "q1'**2*" + "sum(" * 9 + "1" + "".join(f" for i{k} in 1..1)" for k in range(9))
    assert "nested more than 8 deep" in _load_error(BAD.replace("KEY", "q1").replace("q1'**2",
                                                                                     deep))


def test_a_placeholder_read_by_yaml_as_a_mapping_gets_a_hint():
    text = _load_error("""Kind: Lagrangian
PhysicalParams: {N: 2}
Coordinates:
  q{i} for i in 1..N: 2
KineticEnergy: sum(dot(q{i}', q{i}') for i in 1..N)
ProblemData:
  tend: 1
  positions:
    q{i} for i in 1..N: [{i}, 0]
""")
    assert "line 9" in text and "'{i}' inside [...] is read by YAML as a mapping" in text


def test_parameters_a_repeat_uses_are_structural_with_what_they_are_made_of():
    model = solver.load("""Kind: Lagrangian
PhysicalParams: {N: 2, M: 2*N, k: 1.5}
Coordinates:
  q{i} for i in 1..M: 1
KineticEnergy: sum(q{i}'**2 for i in 1..M)
PotentialEnergy: k*sum(q{i}**2 for i in 1..M)
ProblemData: {tend: 1}
""")
    assert [c.name for c in model.dae.coords] == ["q1", "q2", "q3", "q4"]
    # M sizes the model and is computed from N: both are fixed at load, so no
    # run can change N without M following it.
    assert set(model.param_info.structural) == {"N", "M"} and model.params == {"k": 1.5}
    with pytest.raises(InputError, match="'N' is structural"):
        model.check_params({"N": 3})
