"""Specification of the shared YAML reader (solver.models.yamlio).

References: the YAML 1.2 core schema (JSON is a subset of YAML 1.2, so any
JSON text must read back as what json.loads gives), Python's own float/int
parsing, and the Mechanism0 file of the talk.
"""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from solver.errors import InputError
from solver.models.yamlio import (Locator, check_keys, did_you_mean, format_path, load_yaml,
                           require_int, require_list, require_mapping, require_number,
                           require_str)

DATA = Path(__file__).parent / "data" / "sweep"


# ------------------------------------------------------------ scalars

@pytest.mark.parametrize("text", ["1e-12", "1E5", "-2.5e+3", "6.02e23", ".5", "-.5", "1.", "3.0"])
def test_float_forms_read_as_python_float_would(text):
    data, _ = load_yaml(f"x: {text}")
    assert isinstance(data["x"], float) and data["x"] == float(text)


def test_tolerance_written_as_in_the_talk_is_a_float():
    data, _ = load_yaml("SolverParams:\n  Integration:\n    tol: 1e-12\n    order: 20\n")
    assert data["SolverParams"]["Integration"] == {"tol": 1e-12, "order": 20}
    assert type(data["SolverParams"]["Integration"]["order"]) is int


@pytest.mark.parametrize("text, expected", [
    ("010", 10), ("0o17", 15), ("0x1F", 31), ("-7", -7), ("+3", 3),
    ("true", True), ("False", False), ("~", None), ("null", None), ("", None),
    (".inf", math.inf), ("-.Inf", -math.inf),
    # YAML 1.1 would turn these into booleans, the number 80 or a date:
    ("on", "on"), ("off", "off"), ("yes", "yes"), ("No", "No"), ("y", "y"),
    ("1:20", "1:20"), ("2001-12-14", "2001-12-14"), ("1_000", "1_000"),
])
def test_core_schema_scalars(text, expected):
    value = load_yaml(f"x: {text}")[0]["x"]
    assert value == expected and type(value) is type(expected)


def test_nan_reads_as_nan():
    assert math.isnan(load_yaml("x: .nan")[0]["x"])


json_data = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(categories=("L", "N", "P", "S", "Zs"))),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(st.characters(categories=("L", "N")), min_size=1), inner,
                      max_size=4),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(json_data)
def test_any_json_text_reads_as_json_loads_reads_it(data):
    # JSON is YAML 1.2; PyYAML's default (1.1) loader fails this for 1e-12.
    text = json.dumps(data, ensure_ascii=False)
    assert load_yaml(text + "\n")[0] == json.loads(text)


# ------------------------------------------------------------ the talk's file

def test_mechanism0_of_the_talk_reads_with_key_only_flow_mappings():
    data, loc = load_yaml(DATA / "mechanism0.yaml")
    pd = data["ProblemData"]
    assert pd["fixedpositions"] == {"Ax": None, "B": None}
    assert list(pd["fixedpositions"]) == ["Ax", "B"]
    assert pd["positions"] == {"A": ["L", 0], "B": ["(L+1)", 0]}
    assert pd["velocities"] == {"Ay": 10, "B": [0, 0]}
    assert data["PhysicalParams"] == {"L": 1, "M": 1, "k": 500, "l": 1, "mu": 0.5, "m": 2}
    assert data["PartData"]["Rigids"]["OA"]["Dyna"] == [["L/2", 0], "M", "M*L**2/12"]
    assert data["AppliedForces"] == {"Gravity": None}
    assert data["SolverParams"]["Integration"]["tol"] == 1e-12
    assert list(data) == ["Title", "Dimension", "PhysicalParams", "PartData", "AppliedForces",
                          "ProblemData", "SolverParams", "Animation"]


def test_primed_names_are_plain_strings():
    data, _ = load_yaml("values: {x: 1.0, x': 0.0}\nfixed: [x, x']\n")
    assert data == {"values": {"x": 1.0, "x'": 0.0}, "fixed": ["x", "x'"]}


# ------------------------------------------------------------ line numbers

def test_locator_gives_the_line_of_each_key_path():
    lines = (DATA / "mechanism0.yaml").read_text().splitlines()

    def line_of(fragment):  # reference: search the text itself
        return next(i + 1 for i, ln in enumerate(lines) if fragment in ln)

    _, loc = load_yaml(DATA / "mechanism0.yaml")
    assert loc.line(("PartData", "Springs", "AB")) == line_of("AB: [k, l, mu]")
    assert loc.line(("PartData", "Rigids", "OA", "Dyna")) == line_of("Dyna:")
    assert loc.line(("ProblemData", "fixedpositions", "B")) == line_of("fixedpositions")
    assert loc.line(("SolverParams", "Integration", "tol")) == line_of("tol: 1e-12")
    assert loc.line(("Animation", "Scene", "view", 1)) == line_of("view: [0, 90]")
    assert loc.line(("PartData", "Springs", "CD")) is None
    assert loc.nearest(("PartData", "Springs", "CD")) == line_of("Springs:")
    assert loc.file == str(DATA / "mechanism0.yaml")


def test_block_list_items_have_their_own_lines():
    _, loc = load_yaml("Equations:\n  - x'' + lam*x\n\n  - y'' + lam*y - g\n")
    assert [loc.line(("Equations", i)) for i in range(2)] == [2, 4]


def test_locator_error_names_file_path_and_line():
    _, loc = load_yaml("a:\n  b:\n    c: 1\n", file="m.yaml")
    err = loc.error("expected a number", ("a", "b", "c"))
    assert str(err) == "m.yaml:3: a.b.c: expected a number"
    assert (err.file, err.path, err.line) == ("m.yaml", "a.b.c", 3)


def test_format_path_writes_list_indices_in_brackets():
    assert format_path(("Sweep", "zip", "k", "values", 2)) == "Sweep.zip.k.values[2]"


# ------------------------------------------------------------ errors

def _error(text, file="m.yaml"):
    with pytest.raises(InputError) as info:
        load_yaml(text, file=file)
    return info.value


def test_tab_indentation_is_reported_in_plain_words_with_its_line():
    err = _error("a:\n\tb: 1\n")
    assert err.line == 2 and err.file == "m.yaml"
    assert "tab characters cannot be used for indentation; use spaces" in err.message


def test_unclosed_list_names_the_problem():
    err = _error("a: 1\nb: [1, 2\nc: 3\n")
    assert err.message.startswith("YAML syntax error: a '[...]' list is not closed")
    assert str(err).startswith("m.yaml:3: ")


def test_colon_inside_a_value_is_explained():
    err = _error("title: a: b\n")
    assert err.line == 1 and "quote a value that contains ': '" in err.message


def test_bad_indentation_is_explained():
    err = _error("a:\n  b: 1\n c: 2\n")
    assert err.line == 3
    assert "indentation of this line does not match" in err.message


def test_duplicate_keys_are_an_error_not_silently_overwritten():
    err = _error("PhysicalParams:\n  k: 1\n  m: 2\n  k: 3\n")
    assert str(err) == "m.yaml:4: PhysicalParams: duplicate key 'k' (first given at line 2)"


def test_python_tags_are_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    err = _error(f"x: !!python/object/apply:os.system ['touch {marker}']\n")
    assert "is not supported" in err.message and err.path == "x"
    assert not marker.exists()


def test_two_documents_are_refused():
    assert "more than one YAML document" in _error("a: 1\n---\nb: 2\n").message


def test_missing_file():
    err = _error_path(Path("/nonexistent/model.yaml"))
    assert str(err) == "/nonexistent/model.yaml: file not found"


def _error_path(path):
    with pytest.raises(InputError) as info:
        load_yaml(path)
    return info.value


def test_path_given_as_string_or_path(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("a: [1, 2]\n")
    assert load_yaml(str(f))[0] == load_yaml(f)[0] == {"a": [1, 2]}
    assert load_yaml(str(f))[1].file == str(f)


def test_empty_document_is_none():
    assert load_yaml("# nothing\n")[0] is None


def test_merge_keys_share_blocks():
    data, _ = load_yaml("base: &b {tol: 1e-8, order: 20}\nfine:\n  <<: *b\n  tol: 1e-12\n")
    assert data["fine"] == {"tol": 1e-12, "order": 20}


# ------------------------------------------------------------ validation helpers

def test_unknown_key_suggests_the_closest_valid_one():
    data, loc = load_yaml("ProblemData:\n  t0: 0\n  Tnd: 5\n", file="m.yaml")
    with pytest.raises(InputError) as info:
        check_keys(data["ProblemData"], ["t0", "tend", "positions"], ["tend"],
                   ("ProblemData",), loc)
    assert str(info.value) == ("m.yaml:3: ProblemData.Tnd: unknown key 'Tnd'; valid keys: "
                               "t0, tend, positions; did you mean 'tend'?")


def test_unknown_key_far_from_all_gets_no_suggestion():
    with pytest.raises(InputError) as info:
        check_keys({"zzz": 1}, ["t0", "tend"], path=("P",))
    assert str(info.value) == "P.zzz: unknown key 'zzz'; valid keys: t0, tend"


def test_missing_required_keys_are_all_named():
    data, loc = load_yaml("Sweep:\n  Title: x\n", file="s.yaml")
    with pytest.raises(InputError) as info:
        check_keys(data["Sweep"], ["Title"], ["Model", "Batch"], ("Sweep",), loc)
    assert str(info.value) == ("s.yaml:1: Sweep: missing required keys 'Model', 'Batch'; "
                               "valid keys: Title, Model, Batch")


def test_did_you_mean_ignores_case():
    assert did_you_mean("physicalparams", ["PartData", "PhysicalParams"]) == "PhysicalParams"
    assert did_you_mean("xyz", ["PartData"]) is None


def test_require_helpers_accept_good_values():
    assert require_number(3) == 3.0 and type(require_number(3)) is float
    assert require_int(1e3) == 1000 and type(require_int(1e3)) is int
    assert require_list([1, 2], length=2) == [1, 2]
    assert require_mapping(None, allow_none=True) == {}
    assert require_str("lhs", choices=["lhs", "sobol"]) == "lhs"


@pytest.mark.parametrize("call, message", [
    (lambda: require_number(True, ("k",)), "k: expected a number, got the boolean true"),
    (lambda: require_number("2*k", ("k",)), "k: expected a number, got the string '2*k'"),
    (lambda: require_number(-1, ("k",), positive=True), "k: expected a positive number, got -1"),
    (lambda: require_number(math.inf, ("k",)), "k: expected a finite number, got inf"),
    (lambda: require_int(2.5, ("n",)), "n: expected a whole number, got the number 2.5"),
    (lambda: require_int(0, ("n",), minimum=1), "n: expected a whole number >= 1, got 0"),
    (lambda: require_list(3, ("v",)), "v: expected a list, got the number 3"),
    (lambda: require_list([1], ("v",), length=3, what="[a, b, n]"),
     "v: expected [a, b, n] (3 items), got 1 item"),
    (lambda: require_list([], ("v",), nonempty=True),
     "v: expected a list with at least one item, got an empty list"),
    (lambda: require_mapping([1], ("P",)),
     "P: expected a mapping (key: value lines), got a list"),
    (lambda: require_str("lsh", ("method",), choices=["random", "lhs", "sobol"]),
     "method: unknown value 'lsh'; valid choices: random, lhs, sobol; did you mean 'lhs'?"),
    (lambda: require_str(None, ("method",), choices=["lhs", "sobol"]),
     "method: expected one of lhs, sobol, got nothing (null)"),
])
def test_require_helpers_name_what_was_expected(call, message):
    with pytest.raises(InputError) as info:
        call()
    assert str(info.value) == message


def test_helpers_use_the_locator_for_file_and_line():
    data, loc = load_yaml("a: 1\nb:\n  n: 2.5\n", file="f.yaml")
    with pytest.raises(InputError) as info:
        require_int(data["b"]["n"], ("b", "n"), loc)
    assert (info.value.file, info.value.line, info.value.path) == ("f.yaml", 3, "b.n")
    assert isinstance(loc, Locator)
