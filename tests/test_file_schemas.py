"""The declared schemas of the input files (sweep.file_schemas) and their adapter (sweep.yamlschema).

The messages themselves are asserted where each file kind is tested
(test_sweep_spec.py, test_design.py, test_run_dask.py); here: the schemas
declare the keys the documentation names, and the adapter finds the file's
own keys and lines whatever pydantic makes of them.
"""

from __future__ import annotations

import pytest

from solver.errors import InputError
from solver.models.yamlio import Locator, load_yaml
from sweep.file_schemas import ClusterFile, DesignFile, SweepFile, SweepGroups
from sweep.yamlschema import Int, Section, validate


def test_the_schemas_declare_the_documented_keys():
    assert SweepFile.keys() == ("Title", "Model", "Override", "Sweep", "Outputs", "Batch")
    assert SweepFile.required() == ("Model", "Sweep")
    assert SweepGroups.keys() == ("product", "zip", "sample", "constants")
    assert DesignFile.keys() == ("Title", "Model", "Override", "Parameters", "Objective",
                                 "Constraints", "Optimizer")
    assert DesignFile.required() == ("Model", "Parameters", "Objective")


def _first_error(schema, text: str) -> InputError:
    data, loc = load_yaml(text, file="f.yaml")
    with pytest.raises(InputError) as err:
        validate(schema, data, loc)
    return err.value


@pytest.mark.parametrize("key, path", [("null", "Sweep.product.None"), ("true", "Sweep.product.True"),
                                       ("1.5", "Sweep.product.1.5"), ("''", "Sweep.product.")])
def test_keys_pydantic_rewrites_are_located_at_the_files_own_key(key, path):
    err = _first_error(SweepFile, f"Model: m.yaml\nSweep:\n  product:\n    a: [1]\n    {key}: [1]\n")
    assert (err.path, err.line, err.file) == (path, 5, "f.yaml")
    assert err.message.startswith("a parameter name must be a non-empty string, got ")


def test_the_first_error_in_file_order_is_reported():
    err = _first_error(SweepFile, "Model: m.yaml\nSweep: {zip: {}}\nBatch: 0\n")
    assert (err.path, err.line, err.message) == (
        "Sweep.zip", 2, "empty group: give at least one axis or remove the group")


class _Pair(Section):
    what = "a pair"
    a: Int(1)
    b: Int() = 0


def test_a_section_words_its_own_errors():
    assert _first_error(_Pair, "a: 1\nc: 2\n").message == \
        "unknown key 'c'; valid keys: a, b"
    assert _first_error(_Pair, "b: 1\n").message == "missing required key 'a'; valid keys: a, b"
    err = _first_error(_Pair, "a: 0\n")
    assert (err.path, err.line, err.message) == ("a", 1, "expected a whole number >= 1, got 0")
    assert _first_error(_Pair, "[1]\n").message == "expected a pair, got a list"
    assert _Pair.model_validate({"a": 2}).b == 0


def test_without_lines_the_cluster_file_names_file_and_key_only():
    data, _ = load_yaml("module: distributed\nclass: LocalCluster\nadapt: 3\n")
    with pytest.raises(InputError) as err:
        validate(ClusterFile, data, Locator(file="c.yaml"))
    assert str(err.value) == "c.yaml: adapt: expected a mapping, got 3"
    assert validate(ClusterFile, {"module": "distributed", "class": "LocalCluster", "scale": None},
                    Locator()).scale is None
