"""Malformed model files: every one exits with code 2 and an exact message.

Each case mutates a small valid model (``BASE``: Kind DAE, ``LAG``: Kind
Lagrangian) and runs ``mechsweep check`` on it.  The expected message names
the file (``MODEL`` here), the line, the key path, what was expected and the
valid choices.  Injection attempts are refused by the expression parser:
nothing read from a file is executed.
"""

import pytest

from solver.errors import did_you_mean, format_bytes
from sweep.cli.app import main
from models_for_tests import PENDULUM_YAML

BASE = PENDULUM_YAML
LAG = """Title: S
Kind: Lagrangian
PhysicalParams: {m: 1.0, k: 4.0}
Coordinates: {P: 2, s: 1}
KineticEnergy: m/2*dot(P', P') + m/2*s'**2
PotentialEnergy: k/2*dot(P, P)
ProblemData:
  tend: 1
  positions: {P: [1, 0], s: 0}
  fixedpositions: {P, s}
  velocities: {P: [0, 1], s: 1}
"""


def sub(base, old, new):
    """``base`` with ``old`` (which must occur) replaced by ``new``."""
    assert old in base, old
    return base.replace(old, new)


CASES = {
 "tab_indent": BASE.replace("  - x'' + lam*x", "\t- x'' + lam*x"),
 "unclosed_bracket": sub(BASE, "Variables: [x, y, lam]", "Variables: [x, y, lam"),
 "duplicate_key": BASE + "Title: again\n",
 "not_mapping": "- just\n- a list\n",
 "empty_file": "",
 "missing_kind": sub(BASE, "Kind: DAE\n", ""),
 "unknown_kind": sub(BASE, "Kind: DAE", "Kind: Dae"),
 "unknown_top_key": BASE + "Equation: [x]\n",
 "missing_equations": BASE.split("Equations:")[0] + "ProblemData: {tend: 1}\n",
 "bad_variable_name": sub(BASE, "[x, y, lam]", "[x, y, 2lam]"),
 "reserved_variable_name": sub(BASE, "[x, y, lam]", "[x, y, sin]"),
 "dunder_param": sub(BASE, "{g: 9.81, L: 1.0}", "{g: 9.81, L: 1.0, __class__: 1}"),
 "param_expr_unknown_name": sub(BASE, "{g: 9.81, L: 1.0}", "{g: 9.81, L: 2*M}"),
 "param_ragged": sub(BASE, "{g: 9.81, L: 1.0}", "{g: 9.81, L: 1.0, D: [[1, 0], 2]}"),
 "injection_import": sub(BASE, "  - x'' + lam*x", "  - __import__('os').system('true')"),
 "injection_attribute": sub(BASE, "  - x'' + lam*x", "  - x.__class__"),
 "injection_lambda": sub(BASE, "  - x'' + lam*x", "  - \"(lambda: 0)()\""),
 "injection_eval_call": sub(BASE, "  - x'' + lam*x", "  - \"eval('1')\""),
 "injection_subscript_string": sub(BASE, "  - x'' + lam*x", "  - \"x['a']\""),
 "unknown_function": sub(BASE, "  - x'' + lam*x", "  - x'' + lam*foo(x)"),
 "undefined_name": sub(BASE, "  - x'' + lam*x", "  - x'' + mu*x"),
 "vector_equation_not_square": sub(BASE, "  - x'' + lam*x", "  - x'' + [lam, x]"),
 "shape_mismatch": sub(BASE, "  - x'' + lam*x", "  - \"[x'', y] + [lam, x, y]\""),
 "variable_unused": sub(BASE, "[x, y, lam]", "[x, y, lam, z]"),
 "not_square": sub(BASE, "  - x**2 + y**2 - L**2\n", ""),
 "structurally_singular": sub(sub(sub(BASE, "  - y'' + lam*y - g", "  - x - g"), "  - x'' + lam*x", "  - x'' + lam*x + y"), "  - x**2 + y**2 - L**2", "  - x**2 - L**2"),
 "let_forward_reference": sub(BASE, "Equations:", "Let:\n  a: b + 1\n  b: x\nEquations:"),
 "let_clash": sub(BASE, "Equations:", "Let:\n  x: y\nEquations:"),
 "tend_before_t0": sub(BASE, "  tend: 1", "  t0: 2\n  tend: 1"),
 "samples_and_dt": sub(BASE, "  tend: 1", "  tend: 1\n  samples: 10\n  dt: 0.1"),
 "tol_not_number": BASE + "SolverParams: {Integration: {tol: small}}\n",
 "unknown_solver_key": BASE + "SolverParams: {Integration: {tolerance: 1e-8}}\n",
 "optimize_not_boolean": BASE + "SolverParams: {Integration: {optimize: yes}}\n",
 "value_unknown_variable": sub(BASE, "{x: L, y: 0,", "{x: L, z: 0,"),
 "value_order_too_high": sub(BASE, "{x: L, y: 0,", "{x: L, y: 0, x''': 1,"),
 "fixed_not_state": sub(BASE, "fixed: [x, x']", "fixed: [x, lam]"),
 "fixed_without_value": sub(BASE, "fixed: [x, x']", "fixed: [x, x', y']").replace(", y': 0}", "}"),
 "scalar_subscript": sub(BASE, "fixed: [x, x']", "fixed: [x, 'x[1]']"),
 "value_not_expression": sub(BASE, "{x: L, y: 0,", "{x: true, y: 0,"),
 "lag_component_out_of_range": sub(LAG, "velocities: {P: [0, 1], s: 1}", "velocities: {Pz: 1, s: 1}"),
 "lag_unknown_coordinate_value": sub(LAG, "positions: {P: [1, 0], s: 0}", "positions: {Q: [1, 0], s: 0}"),
 "lag_fixed_with_value": sub(LAG, "fixedpositions: {P, s}", "fixedpositions: {P: 1}"),
 "lag_acceleration_in_T": sub(LAG, "m/2*s'**2", "m/2*s''**2"),
 "lag_velocity_in_constraint": LAG + "Constraints: [s' - 1]\n",
 "lag_kinetic_not_scalar": sub(LAG, "KineticEnergy: m/2*dot(P', P') + m/2*s'**2", "KineticEnergy: m/2*P'"),
 "lag_force_unknown_point": LAG + "Forces: {Q: [0, 1]}\n",
 "lag_wrong_value_count": sub(LAG, "positions: {P: [1, 0], s: 0}", "positions: {P: [1, 0, 0], s: 0}"),
 "lag_size_zero": sub(LAG, "Coordinates: {P: 2, s: 1}", "Coordinates: {P: 0, s: 1}"),
 "lag_prime_of_velocity_let": sub(LAG, "KineticEnergy:", "Let:\n  V: P'\nKineticEnergy: dot(V', V') +"),
}

EXPECTED = {
    'tab_indent': (
        'MODEL:6: YAML syntax error: tab characters cannot be used for indentat'
        'ion; use spaces (parser: found character that cannot start any token);'
        ' while scanning for the next token at line 6'),
    'unclosed_bracket': (
        "MODEL:5: YAML syntax error: a '[...]' list is not closed (parser: did "
        "not find expected ',' or ']'); while parsing a flow sequence at line 4"),
    'duplicate_key': (
        "MODEL:13: duplicate key 'Title' (first given at line 1)"),
    'not_mapping': (
        'MODEL: expected a mapping of top-level keys (Title, Kind, ...), got a '
        'list'),
    'empty_file': (
        'MODEL: the file is empty; a model needs at least Kind, ProblemData and'
        ' its equations'),
    'missing_kind': (
        "MODEL: missing required key 'Kind'; valid kinds: Mechanism, Lagrangian"
        ', DAE (Mechanism is assumed when PartData is present)'),
    'unknown_kind': (
        "MODEL:2: Kind: unknown value 'Dae'; valid choices: Mechanism, Lagrangi"
        "an, DAE; did you mean 'DAE'?"),
    'unknown_top_key': (
        "MODEL:13: Equation: unknown key 'Equation'; valid keys: Title, Kind, P"
        'hysicalParams, Variables, Let, Equations, Energy, ProblemData, SolverP'
        "arams, Animation, Events, Stops, MaxEvents, Units; did you mean 'Equations'?"),
    'missing_equations': (
        "MODEL: missing required key 'Equations'; valid keys: Title, Kind, Phys"
        'icalParams, Variables, Let, Equations, Energy, ProblemData, SolverPara'
        'ms, Animation, Events, Stops, MaxEvents, Units'),
    'bad_variable_name': (
        "MODEL:4: Variables[2]: variable '2lam' is not a name (letters, digits "
        'and _, not starting with a digit)'),
    'reserved_variable_name': (
        "MODEL:4: Variables[2]: variable 'sin' is reserved (reserved names: abs"
        ', acos, asin, atan, atan2, cos, cosh, cross, dot, exp, log, max, min, norm, pi, '
        'sign, sin, sinh, sqrt, step, t, tan, tanh, where)'),
    'dunder_param': (
        "MODEL:3: PhysicalParams.__class__: parameter '__class__' contains '__'"
        ', which is reserved'),
    'param_expr_unknown_name': (
        "MODEL:3: PhysicalParams.L: unknown name 'M'; valid names (closest firs"
        't): g\n  2*M\n    ^'),
    'param_ragged': (
        'MODEL:3: PhysicalParams.D: expected a number or a regular list of numb'
        'ers (a vector or matrix); the items of this list have different shapes'),
    'injection_import': (
        "MODEL:6: Equations[0]: name '__import__' is not allowed: names contain"
        "ing '__' are reserved\n  __import__('os').system('true')\n  ^"),
    'injection_attribute': (
        "MODEL:6: Equations[0]: '.' is not allowed here: there is no attribute "
        'access (numbers are written like 0.5)\n  x.__class__\n   ^'),
    'injection_lambda': (
        "MODEL:6: Equations[0]: 'lambda' is a Python keyword and cannot appear "
        'in an expression\n  (lambda: 0)()\n   ^'),
    'injection_eval_call': (
        "MODEL:6: Equations[0]: unknown function 'eval'; valid functions: abs, "
        'acos, asin, atan, atan2, cos, cosh, cross, dot, exp, log, max, min, norm, sign, sin, s'
        "inh, sqrt, step, tan, tanh, where\n  eval('1')\n  ^"),
    'injection_subscript_string': (
        'MODEL:6: Equations[0]: a subscript must be a non-negative integer lite'
        "ral, e.g. q[0]\n  x['a']\n    ^"),
    'unknown_function': (
        "MODEL:6: Equations[0]: unknown function 'foo'; valid functions: abs, a"
        'cos, asin, atan, atan2, cos, cosh, cross, dot, exp, log, max, min, norm, sign, sin, si'
        "nh, sqrt, step, tan, tanh, where\n  x'' + lam*foo(x)\n            ^"),
    'undefined_name': (
        "MODEL:6: Equations[0]: unknown name 'mu'; valid names (closest first):"
        " lam, x, y, g, L, t\n  x'' + mu*x\n        ^"),
    'vector_equation_not_square': (
        'MODEL:5: Equations: the equations do not define a valid DAE: the resid'
        'ual has 4 equation components but there are 3 unknowns (x:1, y:1, lam:'
        '1); a DAE must be square'),
    'shape_mismatch': (
        "MODEL:6: Equations[0]: cannot add a 2-vector and a 3-vector\n  [x'', y]"
        ' + [lam, x, y]\n           ^'),
    'variable_unused': (
        'MODEL:5: Equations: the equations do not define a valid DAE: variables'
        " ['z'] do not appear in any equation; remove them or use them"),
    'not_square': (
        'MODEL:5: Equations: the equations do not define a valid DAE: the resid'
        'ual has 2 equation components but there are 3 unknowns (x:1, y:1, lam:'
        '1); a DAE must be square'),
    'structurally_singular': (
        'MODEL:5: Equations: the equations are structurally singular: structura'
        'lly singular DAE: the 2 equations f1, f2 involve only the variable x, '
        'and the 2 variables y, lam occur in only the equation f0, so no transv'
        'ersal (a distinct variable for every equation) exists. Look for a miss'
        'ing, duplicated or dependent equation. (equation fK is Equations[K], c'
        'ounted from 0)'),
    'let_forward_reference': (
        "MODEL:6: Let.a: uses 'b' before its definition; Let entries are evalua"
        'ted in file order and may only use earlier ones'),
    'let_clash': (
        "MODEL:6: Let.x: 'x' is already a variable; a Let name must be new"),
    'tend_before_t0': (
        'MODEL:11: ProblemData.tend: tend must be greater than t0 = 2, got 1'),
    'samples_and_dt': (
        "MODEL:12: ProblemData.dt: give either 'samples' (number of output time"
        "s) or 'dt' (output spacing), not both"),
    'tol_not_number': (
        'MODEL:13: SolverParams.Integration.tol: expected a number, got the str'
        "ing 'small'"),
    'unknown_solver_key': (
        "MODEL:13: SolverParams.Integration.tolerance: unknown key 'tolerance';"
        ' valid keys: tol, order, max_steps, h_max, mode, optimize'),
    'optimize_not_boolean': (
        "MODEL:13: SolverParams.Integration.optimize: expected true or false, g"
        "ot the string 'yes'"),
    'value_unknown_variable': (
        "MODEL:11: ProblemData.values.z: unknown variable 'z'; the variables ar"
        'e x, y, lam'),
    'value_order_too_high': (
        "MODEL:11: ProblemData.values.x''': 'x'''' is of derivative order 3, ab"
        "ove x's leading order 2; give x, x', x''"),
    'fixed_not_state': (
        "MODEL:12: ProblemData.fixed[1]: cannot fix 'lam': the state holds deri"
        'vatives of lam below order 0 (none); the equations determine the rest'),
    'fixed_without_value': (
        "MODEL:12: ProblemData.fixed[2]: 'y'' is fixed but has no value in Prob"
        'lemData.values; give its value there'),
    'scalar_subscript': (
        "MODEL:12: ProblemData.fixed[1]: 'x[1]': x is a scalar and takes no sub"
        'script'),
    'value_not_expression': (
        'MODEL:11: ProblemData.values.x: expected an expression, a number or a '
        'list, got True'),
    'lag_component_out_of_range': (
        "MODEL:11: ProblemData.velocities.Pz: 'Pz': P is a 2-vector and has no "
        'z component'),
    'lag_unknown_coordinate_value': (
        "MODEL:9: ProblemData.positions.Q: 'Q' is not a coordinate or a compone"
        'nt; valid names: P, s, or a component such as Px or P[0]'),
    'lag_fixed_with_value': (
        "MODEL:10: ProblemData.fixedpositions.P: 'P: 1': list names only here ("
        'write {P} or [P]); values go in ProblemData.positions'),
    'lag_acceleration_in_T': (
        "MODEL:5: KineticEnergy: s'': a Lagrangian model may use positions and "
        "velocities (s, s') only, not accelerations\n  m/2*dot(P', P') + m/2*s''"
        '**2\n                        ^'),
    'lag_velocity_in_constraint': (
        "MODEL:12: Constraints[0]: s': a constraint may depend on positions onl"
        "y, not on velocities or accelerations\n  s' - 1\n  ^"),
    'lag_kinetic_not_scalar': (
        'MODEL:5: KineticEnergy: the kinetic energy must be a scalar, got an ar'
        'ray of shape (2,)'),
    'lag_force_unknown_point': (
        "MODEL:12: Forces.Q: 'Q' is neither a coordinate (generalised force) no"
        'r a Let point (force applied there); valid names: P, s'),
    'lag_wrong_value_count': (
        'MODEL:9: ProblemData.positions.P: expected 2 value(s) (or one for all)'
        ', got 3'),
    'lag_size_zero': (
        "MODEL:4: Coordinates.P: the size of coordinate 'P' must be a whole num"
        'ber >= 1 (1 = scalar), got 0'),
    'lag_prime_of_velocity_let': (
        "MODEL:6: Let.V: P': the derivative of an expression that contains velo"
        'cities would need accelerations, which a Lagrangian cannot contain; di'
        "fferentiate expressions of positions only\n  P'\n  ^"),
}


def test_the_base_models_are_valid(tmp_path, capsys):
    for name, text in (("base", BASE), ("lag", LAG)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        assert main(["check", str(path)]) == 0
    assert "initial values (positions and velocities; the DAE's DOF): 2" in capsys.readouterr().out


def test_every_case_has_an_expected_message():
    assert set(CASES) == set(EXPECTED) and len(CASES) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_model_is_refused_with_a_located_message(name, tmp_path, capsys):
    path = tmp_path / f"{name}.yaml"
    path.write_text(CASES[name])
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mechsweep: error: ")
    assert err[len("mechsweep: error: "):].rstrip("\n").replace(str(path), "MODEL") == EXPECTED[name]
    assert "Traceback" not in err


def test_injection_never_runs(tmp_path, monkeypatch, capsys):
    # If anything were evaluated as Python, this would create the marker file.
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(sub(BASE, "  - x'' + lam*x", f"  - \"open('{marker}', 'w')\""))
    assert main(["check", str(path)]) == 2
    assert not marker.exists()
    assert "unknown function 'open'" in capsys.readouterr().err


def test_missing_file_and_bad_arguments(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err == f"mechsweep: error: {tmp_path / 'nope.yaml'}: file not found\n"
    assert main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err
    path = tmp_path / "base.yaml"
    path.write_text(BASE)
    assert main(["simulate", str(path), "--set", "Lx=2"]) == 2
    assert capsys.readouterr().err.endswith("unknown parameter 'Lx'; the parameters are g, L\n")
    assert main(["simulate", str(path), "--set", "L"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err
    assert main(["simulate", str(path), "--out", "run.csv"]) == 2
    assert "must end in .zarr or .nc" in capsys.readouterr().err


# ------------------------------------------------------------------ message helpers
@pytest.mark.parametrize("n, text", [(1000, "1000 bytes"), (1536, "1.5 KiB"), (1023.9 * 1024, "1 MiB"),
                                     (1024 ** 2, "1 MiB"), (8053063680, "7.5 GiB"), (1023.7 * 1024 ** 3, "1 TiB"), (999.4 * 1024, "999 KiB")])
def test_sizes_read_in_three_digits_of_the_unit_that_fits(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("word, choices, guess", [("sine", ["sin", "cos"], "sin"), ("Cos", ["sin", "cos"], "cos"),
                                                  ("tau", ["sin", "cos"], None), ("masS", ["Mass", "L"], "Mass")])
def test_a_misspelt_word_gets_the_closest_valid_one_in_its_own_spelling(word, choices, guess):
    assert did_you_mean(word, choices) == guess
