"""Specification of sweep files (sweep.spec): format, expansion, hash, errors.

References: itertools.product for the combination order, numpy's linspace and
logspace for those axis kinds, the defining stratification properties of
Latin hypercube and Sobol' samples, and the example files in tests/data/sweep.
"""

import collections
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from solver.errors import InputError
from solver.models.model import deep_merge
from solver.models.yamlio import load_yaml
from sweep.spec import MAX_POINTS, load_sweep

DATA = Path(__file__).parent / "data" / "sweep"
MODEL = "Title: tiny\nKind: DAE\nPhysicalParams: {g: 9.81, L: 1.0}\nProblemData: {tend: 10}\n"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding a model file, where each test writes its sweep file."""
    d = tmp_path_factory.mktemp("sweeps")
    (d / "model.yaml").write_text(MODEL)
    return d


def write(folder: Path, content, name="sweep.yaml") -> Path:
    """Write a sweep file given as YAML text or as data (JSON is YAML)."""
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
    return path


# ------------------------------------------------------------ the example files

def test_pendulum_grid_example_is_the_product_of_its_axes_last_fastest():
    spec = load_sweep(DATA / "pendulum_grid.yaml")
    expected = list(itertools.product(np.linspace(0.5, 2.0, 4), [1.62, 3.71, 9.81]))
    assert spec.n_points == 12 and spec.names == ["L", "g"]
    assert list(zip(spec.points["L"], spec.points["g"])) == expected
    assert all(col.dtype == np.float64 and col.shape == (12,) for col in spec.points.values())
    assert spec.title == "Pendulum length and gravity grid"
    assert spec.model_path == (DATA / "pendulum.yaml").resolve()
    assert (spec.batch, spec.n_batches) == (5, 3)
    assert spec.batches() == [slice(0, 5), slice(5, 10), slice(10, 12)]
    assert spec.outputs.variables == ("x", "y") and spec.outputs.samples == 101
    assert {k: (m.of, m.reduce) for k, m in spec.outputs.metrics.items()} == \
        {"ymin": ("y", "min"), "xswing": ("x", "range")}


def test_override_is_deep_merged_into_the_model():
    # The sweep keeps the Override as given; loading the model merges it by
    # the one rule (solver.models.model.deep_merge).
    spec = load_sweep(DATA / "pendulum_grid.yaml")
    model, _ = load_yaml(DATA / "pendulum.yaml")
    merged = deep_merge(model, spec.override)
    # Overridden leaves change; their siblings and everything else stay.
    assert merged["ProblemData"] == {**model["ProblemData"], "tend": 5, "samples": 501}
    assert merged["SolverParams"] == {"Integration": {"tol": 1e-8, "order": 20}}
    assert {k: v for k, v in merged.items() if k not in ("ProblemData", "SolverParams")} == \
        {k: v for k, v in model.items() if k not in ("ProblemData", "SolverParams")}


def test_deep_merge_rules():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 4}
    over = {"a": {"c": [9], "e": None}, "f": {"g": 1}}
    merged = deep_merge(base, over)
    assert merged == {"a": {"b": 1, "c": [9], "e": None}, "d": 4, "f": {"g": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 4}  # inputs untouched
    merged["f"]["g"] = 2                                 # the result shares nothing
    assert over == {"a": {"c": [9], "e": None}, "f": {"g": 1}}
    assert deep_merge({"a": {"b": 1}}, {"a": 3}) == {"a": 3}


def test_mechanism0_example_zips_and_samples_by_lhs():
    spec = load_sweep(DATA / "mechanism0_lhs.yaml")
    assert spec.n_points == 3 * 16
    assert spec.names == ["k", "mu", "m"]
    np.testing.assert_array_equal(spec.points["k"], np.repeat(np.logspace(2, 3, 3), 16))
    np.testing.assert_array_equal(spec.points["mu"], np.repeat([0.25, 0.5, 1.0], 16))
    sample = spec.points["m"][:16]
    np.testing.assert_array_equal(spec.points["m"], np.tile(sample, 3))
    # Latin hypercube: each of the n equal strata of [1, 3] holds exactly one point.
    strata = np.floor((sample - 1.0) / 2.0 * 16).astype(int)
    assert sorted(strata) == list(range(16))
    assert spec.constants == {"L": 1.5}
    assert {name: col[17] for name, col in spec.points.items()} == \
        {"k": np.logspace(2, 3, 3)[1], "mu": 0.5, "m": sample[1]}
    assert spec.outputs.dt == 0.01 and spec.outputs.samples is None
    assert spec.outputs.variables is None
    merged = deep_merge(load_yaml(spec.model_path)[0], spec.override)
    assert merged["ProblemData"]["tend"] == 2
    assert merged["ProblemData"]["fixedpositions"] == {"Ax": None, "B": None}


def test_describe_reports_counts_axes_constants_outputs():
    text = load_sweep(DATA / "mechanism0_lhs.yaml").describe()
    assert "Sweep: Mechanism0 spring study" in text
    assert "points:    48 in 6 batches of 8" in text
    assert "override:  ProblemData.tend=2" in text
    lines = {ln.split()[0]: ln for ln in text.splitlines()[6:9]}
    assert lines["k"].split()[1:5] == ["zip", "logspace", "3", "values"]
    assert lines["m"].split()[1:6] == ["sample", "lhs", "n=16", "seed=7", "16"]
    assert "constants: L=1.5" in text
    assert "metrics Bymin=min(By)" in text
    grid = load_sweep(DATA / "pendulum_grid.yaml").describe()
    assert "12 in 3 batches of 5 (last has 2)" in grid
    assert "1.62, 3.71, 9.81" in grid


# ------------------------------------------------------------ axis kinds

@pytest.mark.parametrize("axis, expected", [
    ({"linspace": [0.8, 1.2, 21]}, np.linspace(0.8, 1.2, 21)),
    ({"linspace": [2, 2, 1]}, np.linspace(2, 2, 1)),
    ({"logspace": [2, 4, 5]}, np.logspace(2, 4, 5)),
    ({"logspace": [-3, 0, 4]}, np.logspace(-3, 0, 4)),
    ({"values": [3, 1.5, 2]}, [3.0, 1.5, 2.0]),
    ([0.3, 0.6], [0.3, 0.6]),
    # range: stop included when reached up to rounding, excluded otherwise
    ({"range": [0, 1, 0.1]}, np.linspace(0, 1, 11)),
    ({"range": [0, 1, 0.3]}, [0.0, 0.3, 0.6, 0.9]),
    ({"range": [5, 1, -2]}, [5.0, 3.0, 1.0]),
    ({"range": [0, 0, 1]}, [0.0]),
    ({"range": [1, 10, 3]}, [1.0, 4.0, 7.0, 10.0]),
])
def test_axis_kinds(workdir, axis, expected):
    spec = load_sweep(write(workdir, {"Model": "model.yaml", "Sweep": {"product": {"p": axis}}}))
    np.testing.assert_allclose(spec.points["p"], expected, rtol=1e-15, atol=1e-15)
    assert spec.axes[0].kind == ("values" if isinstance(axis, list) else next(iter(axis)))


def test_no_axes_is_a_single_point_with_the_constants(workdir):
    spec = load_sweep(write(workdir, {"Model": "model.yaml", "Sweep": {"constants": {"g": 1.6}}}))
    assert spec.n_points == 1 and spec.points == {} and spec.constants == {"g": 1.6}
    assert spec.n_batches == 1 and spec.batches() == [slice(0, 1)]


def test_sobol_sample_is_stratified_in_every_coordinate(workdir):
    # Scrambled Sobol' points form a (0, m, 1)-net in each coordinate: with
    # n = 2**m each interval [j/n, (j+1)/n) of a projection holds one point.
    spec = load_sweep(write(workdir, {"Model": "model.yaml", "Sweep": {"sample": {
        "method": "sobol", "n": 32, "seed": 3, "bounds": {"a": [-1, 1], "b": [10, 20]}}}}))
    for name, (lo, hi) in {"a": (-1, 1), "b": (10, 20)}.items():
        cells = np.floor((spec.points[name] - lo) / (hi - lo) * 32).astype(int)
        assert sorted(cells) == list(range(32))
    assert "not a power of 2" not in spec.describe()


def test_random_sample_stays_in_bounds_and_looks_uniform(workdir):
    spec = load_sweep(write(workdir, {"Model": "model.yaml", "Sweep": {"sample": {
        "method": "random", "n": 4000, "seed": 11, "bounds": {"x": [2, 4]}}}}))
    x = spec.points["x"]
    assert x.min() >= 2 and x.max() < 4
    # Mean of U(2, 4) is 3 with standard error sqrt(1/3 / 4000) ~ 0.009.
    assert abs(x.mean() - 3) < 0.05


def test_constants_are_in_every_point_but_not_in_points(workdir):
    spec = load_sweep(write(workdir, {"Model": "model.yaml", "Sweep": {
        "product": {"L": [1, 2]}, "constants": {"g": 1.62, "m": 3}}}))
    assert spec.constants == {"g": 1.62, "m": 3.0} and list(spec.points) == ["L"]
    assert spec.points["L"].tolist() == [1.0, 2.0]


# ------------------------------------------------------------ hash

BASE = {"Title": "t", "Model": "model.yaml", "Override": {"ProblemData": {"tend": 5, "t0": 0}},
        "Sweep": {"product": {"L": [1, 2]}, "constants": {"g": 1.0, "m": 2.0}},
        "Outputs": {"samples": 11}, "Batch": 4}
# The hash of BASE with MODEL (computed with HASH_FORMAT 1).
HASH_OF_BASE = "b1b2b5838849cfa52ca7e5f5e64da24e38dded46627630b2ab6ba0eb6261cb6f"


def test_hash_ignores_mapping_order_and_title(workdir):
    h = load_sweep(write(workdir, BASE)).hash
    reordered = dict(reversed(list(BASE.items())))
    reordered["Override"] = {"ProblemData": {"t0": 0, "tend": 5}}
    reordered["Sweep"] = {"constants": {"m": 2.0, "g": 1.0}, "product": {"L": [1, 2]}}
    reordered["Title"] = "another title"
    assert load_sweep(write(workdir, reordered)).hash == h


def test_hash_is_a_sha256_hex_digest_fixed_across_versions(workdir):
    # Stores record this hash and a resume compares it, so the same sweep must
    # give the same hash in every process and every version: a change to
    # compute_hash() must bump HASH_FORMAT on purpose (and this value).
    h = load_sweep(write(workdir, BASE)).hash
    assert re.fullmatch(r"[0-9a-f]{64}", h)
    assert h == HASH_OF_BASE


@pytest.mark.parametrize("change", [
    lambda d: d["Override"]["ProblemData"].update(tend=6),
    lambda d: d["Sweep"]["product"].update(L=[1, 3]),
    lambda d: d["Sweep"]["product"].update(L=[2, 1]),
    lambda d: d["Sweep"]["constants"].update(g=1.5),
    lambda d: d["Outputs"].update(samples=12),
    lambda d: d.update(Batch=5),
])
def test_hash_changes_with_anything_that_changes_results(workdir, change):
    h = load_sweep(write(workdir, BASE)).hash
    changed = json.loads(json.dumps(BASE))
    change(changed)
    assert load_sweep(write(workdir, changed)).hash != h


def test_hash_changes_with_the_model_text(tmp_path):
    (tmp_path / "model.yaml").write_text(MODEL)
    h = load_sweep(write(tmp_path, BASE)).hash
    (tmp_path / "model.yaml").write_text(MODEL.replace("9.81", "9.80665"))
    assert load_sweep(write(tmp_path, BASE)).hash != h


# ------------------------------------------------------------ properties

NAME_POOL = [f"p{i}" for i in range(12)]
steps = st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.5, -0.5, -1.0, -0.2])


@st.composite
def axis_defs(draw, length=None):
    """An axis definition and its expected length (optionally a given length)."""
    n = length if length is not None else draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["values", "bare", "linspace", "logspace", "range"]))
    if kind in ("values", "bare"):
        vals = draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n,
                             unique=True))
        return (vals if kind == "bare" else {"values": vals}), n
    if kind == "range":
        start, step = draw(st.integers(-50, 50)), draw(steps)
        return {"range": [start, start + (n - 1) * step, step]}, n
    lo = draw(st.floats(-3, 3))
    hi = draw(st.floats(-3, 3).filter(lambda v: v != lo)) if n > 1 else lo
    return {kind: [lo, hi, n]}, n


@st.composite
def sweeps(draw):
    """(sweep data, product lengths, zip length or 1, sample n or 1)."""
    pool = iter(draw(st.permutations(NAME_POOL)))
    sweep, prod_lengths, zip_len, sample_n = {}, [], 1, 1
    n_prod = draw(st.integers(0, 3))
    if n_prod:
        sweep["product"] = {}
        for _ in range(n_prod):
            axis, n = draw(axis_defs())
            sweep["product"][next(pool)] = axis
            prod_lengths.append(n)
    if draw(st.booleans()):
        zip_len = draw(st.integers(1, 4))
        sweep["zip"] = {next(pool): draw(axis_defs(zip_len))[0]
                        for _ in range(draw(st.integers(1, 3)))}
    if draw(st.booleans()):
        sample_n = draw(st.integers(1, 8))
        bounds = {}
        for _ in range(draw(st.integers(1, 2))):
            lo = draw(st.floats(-100, 100))
            bounds[next(pool)] = [lo, lo + draw(st.floats(0.01, 100))]
        sweep["sample"] = {"method": draw(st.sampled_from(["random", "lhs", "sobol"])),
                           "n": sample_n, "seed": draw(st.integers(0, 2**32)), "bounds": bounds}
    if draw(st.booleans()):
        sweep["constants"] = {next(pool): draw(st.floats(-10, 10)) for _ in range(2)}
    return ({"Model": "model.yaml", "Sweep": sweep, "Batch": draw(st.integers(1, 20))},
            prod_lengths, zip_len, sample_n)


PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPERTY
@given(sweeps())
def test_point_count_is_the_product_of_the_group_sizes(workdir, case):
    data, prod_lengths, zip_len, sample_n = case
    spec = load_sweep(write(workdir, data))
    assert spec.n_points == math.prod(prod_lengths) * zip_len * sample_n
    assert all(len(col) == spec.n_points for col in spec.points.values())
    assert spec.n_batches == math.ceil(spec.n_points / data["Batch"])
    batches = [range(spec.n_points)[sl] for sl in spec.batches()]
    assert len(batches) == spec.n_batches
    assert [i for r in batches for i in r] == list(range(spec.n_points))
    assert all(0 < len(r) <= spec.batch for r in batches)


@PROPERTY
@given(sweeps())
def test_each_product_value_appears_equally_often(workdir, case):
    data, *_ = case
    spec = load_sweep(write(workdir, data))
    for axis in (a for a in spec.axes if a.group == "product"):
        expected = collections.Counter(axis.values.tolist())
        repeat = spec.n_points // axis.length
        assert collections.Counter(spec.points[axis.name].tolist()) == \
            {v: c * repeat for v, c in expected.items()}


@PROPERTY
@given(sweeps())
def test_points_follow_itertools_product_of_the_groups(workdir, case):
    data, *_ = case
    spec = load_sweep(write(workdir, data))
    groups = collections.defaultdict(list)
    for a in spec.axes:
        groups[a.name if a.group == "product" else a.group].append(a)
    # Product axes in file order, then the zip group, then the sample group.
    order = [g for g in groups if g not in ("zip", "sample")] + \
        [g for g in ("zip", "sample") if g in groups]
    factors = [list(zip(*(a.values.tolist() for a in groups[g]))) for g in order]
    expected = [sum(row, ()) for row in itertools.product(*factors)]
    columns = [spec.points[a.name] for g in order for a in groups[g]]
    got = [tuple(float(c[i]) for c in columns) for i in range(spec.n_points)]
    assert got == expected
    assert [a.name for a in spec.axes] == list(spec.points)


@PROPERTY
@given(sweeps())
def test_same_file_same_points_and_hash(workdir, case):
    data, *_ = case
    path = write(workdir, data)
    first, second = load_sweep(path), load_sweep(path)
    assert first.hash == second.hash
    assert list(first.points) == list(second.points)
    for name in first.points:
        np.testing.assert_array_equal(first.points[name], second.points[name])


@PROPERTY
@given(st.sampled_from(["random", "lhs", "sobol"]), st.integers(1, 16),
       st.integers(0, 2**32), st.integers(0, 2**32))
def test_seeds_reproduce_and_differ(workdir, method, n, seed, other):
    assume(seed != other)

    def draw(s):
        return load_sweep(write(workdir, {"Model": "model.yaml", "Sweep": {"sample": {
            "method": method, "n": n, "seed": s, "bounds": {"a": [0, 1], "b": [5, 6]}}}}))

    one, again, two = draw(seed), draw(seed), draw(other)
    np.testing.assert_array_equal(one.points["a"], again.points["a"])
    assert one.hash == again.hash
    assert not np.array_equal(np.c_[one.points["a"], one.points["b"]],
                              np.c_[two.points["a"], two.points["b"]])
    assert one.hash != two.hash


@PROPERTY
@given(st.lists(st.integers(1, 6), min_size=2, max_size=4).filter(lambda ls: len(set(ls)) > 1))
def test_zip_of_unequal_lengths_always_raises(workdir, lengths):
    zipped = {f"z{i}": {"linspace": [0, 1, n]} for i, n in enumerate(lengths)}
    path = write(workdir, {"Model": "model.yaml", "Sweep": {"zip": zipped}})
    with pytest.raises(InputError) as info:
        load_sweep(path)
    listing = ", ".join(f"z{i} has {n}" for i, n in enumerate(lengths))
    assert info.value.message == f"zip axes must have the same length: {listing}"
    assert info.value.path == "Sweep.zip" and info.value.line is not None


# ------------------------------------------------------------ errors

VALID = "Model: model.yaml\nSweep:\n  product:\n    L: [1, 2]\n"


def body(sweep: str, top: str = "") -> str:
    """A sweep file whose Sweep block is ``sweep`` (indented by the caller)."""
    return f"Model: model.yaml\n{top}Sweep:\n{sweep}"


ERRORS = [
    # (file text, line, key path, message)
    ("Model: model.yaml\nSweep: {product: {L: [1]}}\nBatches: 4\n", 3, "Batches",
     "unknown key 'Batches'; valid keys: Title, Model, Override, Sweep, Outputs, Batch; "
     "did you mean 'Batch'?"),
    ("Title: t\nSweep: {product: {L: [1]}}\n", None, None,
     "missing required key 'Model'; valid keys: Title, Model, Override, Sweep, Outputs, Batch"),
    (body("  products:\n    L: [1, 2]\n"), 3, "Sweep.products",
     "unknown key 'products'; valid keys: product, zip, sample, constants; "
     "did you mean 'product'?"),
    (body("  product:\n    L: []\n"), 4, "Sweep.product.L", "empty axis: give at least one value"),
    (body("  product:\n    L: {values: []}\n"), 4, "Sweep.product.L.values",
     "empty axis: give at least one value"),
    (body("  product:\n    L: {values: [1, true]}\n"), 4, "Sweep.product.L.values[1]",
     "expected a number or a constant expression such as 'pi/4', got the boolean true"),
    (body("  product:\n    L:\n      values:\n        - 1\n        - [2, 3]\n"), 7,
     "Sweep.product.L.values[1]",
     "expected a number or a constant expression such as 'pi/4', got a list"),
    (body("  product:\n    L: {linspace: [0, 1, 0]}\n"), 4, "Sweep.product.L.linspace[2]",
     "expected a whole number >= 1, got 0"),
    (body("  product:\n    L: {linspace: [0, 1, 2.5]}\n"), 4, "Sweep.product.L.linspace[2]",
     "expected a whole number, got the number 2.5"),
    (body("  product:\n    L: {linspace: [0, 1]}\n"), 4, "Sweep.product.L.linspace",
     "expected [start, stop, n] (3 items), got 2 items"),
    (body("  product:\n    L: {logspace: [0, 1, 5, 7]}\n"), 4, "Sweep.product.L.logspace",
     "expected [start, stop, n] (3 items), got 4 items"),
    (body("  product:\n    L: {linspaces: [0, 1, 5]}\n"), 4, "Sweep.product.L.linspaces",
     "unknown key 'linspaces'; valid keys: values, linspace, logspace, range; "
     "did you mean 'linspace'?"),
    (body("  product:\n    L: {values: [1], linspace: [0, 1, 3]}\n"), 4, "Sweep.product.L",
     "an axis needs exactly one of values, linspace, logspace, range, got 2 "
     "(values, linspace)"),
    (body("  product:\n    L: 0.5\n"), 4, "Sweep.product.L",
     "expected an axis: a list of values or a mapping with one of values, linspace, logspace, "
     "range; got the number 0.5 (for a fixed value use Sweep.constants)"),
    (body("  product:\n    L: {range: [0, 1, 0]}\n"), 4, "Sweep.product.L.range[2]",
     "the step of a range must not be zero"),
    (body("  product:\n    L: {range: [0, 1, -0.5]}\n"), 4, "Sweep.product.L.range[2]",
     "empty axis: a range from 0 to 1 needs a positive step, got -0.5"),
    (body("  zip:\n    k: {logspace: [2, 4, 5]}\n    c: [1, 2, 3, 4]\n"), 3, "Sweep.zip",
     "zip axes must have the same length: k has 5, c has 4"),
    (body("  sample: {method: halton, n: 8, bounds: {m: [1, 2]}}\n"), 3, "Sweep.sample.method",
     "unknown value 'halton'; valid choices: random, lhs, sobol"),
    (body("  sample: {method: lhs, n: 8, bounds: {m: [3, 1]}}\n"), 3, "Sweep.sample.bounds.m",
     "bounds must have lo < hi, got [3, 1]"),
    (body("  sample: {method: lhs, n: 8, bounds: {m: [2, 2]}}\n"), 3, "Sweep.sample.bounds.m",
     "bounds must have lo < hi, got [2, 2]"),
    (body("  sample: {method: lhs, n: 8}\n"), 3, "Sweep.sample",
     "missing required key 'bounds'; valid keys: method, n, seed, bounds"),
    (body("  sample: {method: lhs, n: 0, bounds: {m: [1, 2]}}\n"), 3, "Sweep.sample.n",
     "expected a whole number >= 1, got 0"),
    (body("  product:\n    k: [1, 2]\n  zip:\n    k: [3, 4]\n    c: [5, 6]\n"), 6,
     "Sweep.zip.k",
     "'k' is already given in Sweep.product; a name may appear in only one place of Sweep"),
    (body("  product:\n    m: [1, 2]\n  sample:\n    method: lhs\n    n: 4\n"
          "    bounds: {m: [0, 1]}\n"), 8, "Sweep.sample.bounds.m",
     "'m' is already given in Sweep.product; a name may appear in only one place of Sweep"),
    (body("  product:\n    g: [1, 2]\n  constants: {g: 9.81}\n"), 5, "Sweep.constants.g",
     "'g' is already given in Sweep.product; a name may appear in only one place of Sweep"),
    (body("  product:\n    L: [1]\n", top="Batch: 0\n"), 2, "Batch",
     "expected a whole number >= 1, got 0"),
    (body("  product:\n    L: [1]\n", top="Batch: -64\n"), 2, "Batch",
     "expected a whole number >= 1, got -64"),
    (body("  product:\n    L: [1]\n", top="Batch: many\n"), 2, "Batch",
     "expected a whole number, got the string 'many'"),
    (body("  product:\n    L: [1]\n",
          top="Outputs:\n  metrics:\n    top: {of: B, reduce: maximum}\n"),
     4, "Outputs.metrics.top.reduce",
     "unknown value 'maximum'; valid choices: min, max, range, mean, final, absmax; "
     "did you mean 'max'?"),
    (body("  product:\n    L: [1]\n", top="Outputs:\n  metrics:\n    top: {reduce: max}\n"),
     4, "Outputs.metrics.top", "missing required key 'of'; valid keys: of, reduce"),
    (body("  product:\n    L: [1]\n", top="Outputs: {samples: 11, dt: 0.1}\n"), 2, "Outputs.dt",
     "give either samples or dt, not both"),
    (body("  product:\n    L: [1]\n", top="Outputs: {variables: B}\n"), 2, "Outputs.variables",
     "expected a list of variable names, got the string 'B'"),
    (body("  product:\n    L: [1]\n", top="Override: [tend, 5]\n"), 2, "Override",
     "expected a mapping (key: value lines), got a list"),
    (body("  product:\n    L: {linspace: [0, 1, 100000000]}\n"), 4, "Sweep.product.L.linspace[2]",
     f"100000000 values is more than the limit of {MAX_POINTS} points per sweep"),
    (body("  product:\n    a: {linspace: [0, 1, 5000]}\n    b: {linspace: [0, 1, 5000]}\n"),
     2, "Sweep", f"the sweep has 5000 x 5000 = 25000000 points, more than the limit of "
                 f"{MAX_POINTS}"),
    (body("  product:\n    L: {logspace: [0, 400, 3]}\n"), 4, "Sweep.product.L.logspace",
     "the logspace gives values too large to represent (1, 1e+200, inf)"),
    (body("  product:\n    L: [1, 2\n"), 5, None,
     "YAML syntax error: a '[...]' list is not closed (parser: did not find expected ',' or "
     "']'); while parsing a flow sequence at line 4"),
]


@pytest.mark.parametrize("text, line, path, message", ERRORS,
                         ids=[f"{i:02d}-{e[2]}" for i, e in enumerate(ERRORS)])
def test_malformed_sweep_files_are_reported_exactly(workdir, text, line, path, message):
    sweep = write(workdir, text, name="bad.yaml")
    with pytest.raises(InputError) as info:
        load_sweep(sweep)
    err = info.value
    assert (err.message, err.path, err.line, err.file) == (message, path, line, str(sweep))


def test_missing_model_file_names_where_it_was_looked_for(tmp_path):
    sweep = write(tmp_path, "Title: t\nModel: ../models/none.yaml\nSweep: {product: {L: [1]}}\n")
    with pytest.raises(InputError) as info:
        load_sweep(sweep)
    expected = (f"model file not found: {(tmp_path.parent / 'models' / 'none.yaml').resolve()} "
                f"(Model is relative to the sweep file's folder {tmp_path.resolve()})")
    assert str(info.value) == f"{sweep}:2: Model: {expected}"


def test_missing_sweep_file(tmp_path):
    with pytest.raises(InputError) as info:
        load_sweep(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: file not found"


def test_valid_minimal_file_loads(workdir):
    spec = load_sweep(write(workdir, VALID))
    assert spec.n_points == 2 and spec.requested_batch == 64 and spec.title == "sweep"
    assert spec.batch == 2 and spec.batches() == [slice(0, 2)]   # never padded past its points


# ------------------------------------------------------------ constant expressions

def test_values_may_be_constant_expressions(workdir):
    spec = load_sweep(write(workdir, body(
        "  product:\n    theta: [0, pi/4, 'pi/2']\n    w: {linspace: [0, 2*pi, 3]}\n"
        "  sample: {method: lhs, n: 4, bounds: {a: [-pi, sqrt(2)]}}\n"
        "  constants: {g: 9.81/6}\n")))
    assert spec.axes[0].values.tolist() == [0.0, math.pi / 4, math.pi / 2]
    np.testing.assert_array_equal(spec.axes[1].values, np.linspace(0, 2 * math.pi, 3))
    assert all(-math.pi <= v < math.sqrt(2) for v in spec.points["a"])
    assert spec.constants == {"g": 9.81 / 6}


@pytest.mark.parametrize("value, line, path, fragment", [
    ("[1, L/2]", 4, "Sweep.product.L[1]", "unknown name 'L'"),
    ("{linspace: [0, 1/0, 3]}", 4, "Sweep.product.L.linspace[1]", "not finite"),
    ("['[1, 2]']", 4, "Sweep.product.L[0]", "expected a single number, but '[1, 2]' is a vector"),
])
def test_bad_expressions_are_located(workdir, value, line, path, fragment):
    with pytest.raises(InputError) as info:
        load_sweep(write(workdir, body(f"  product:\n    L: {value}\n"), name="bad.yaml"))
    assert (info.value.line, info.value.path) == (line, path)
    assert fragment in info.value.message
