"""The one status table (solver.status): codes, names, CF attributes.

Codes are written into result files and sweep stores that outlive any one
version, so their numbers are pinned here: a failing test means a code was
renumbered, which must never happen (new codes are appended).
"""

import re

import numpy as np
import pytest

from solver import status as st

PINNED = {"pending": -1, "success": 0, "max_steps": 1, "step_too_small": 2,
          "singular_jacobian": 3, "nonfinite": 4, "no_assembly": 5, "worker_lost": 6,
          "error": 7, "stopped_by_event": 8, "zeno": 9, "event_overflow": 10}


def test_codes_keep_their_numbers():
    assert {name: st.CODES[name] for name in PINNED} == PINNED
    for name, code in PINNED.items():
        assert getattr(st, name.upper()) == code


def test_codes_and_names_are_unique_and_one_word():
    codes = list(st.CODES.values())
    assert len(set(codes)) == len(codes)
    assert all(isinstance(c, int) and -128 <= c <= 127 for c in codes)  # int8 in stores
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", name) for name in st.CODES)  # CF flag meanings
    assert st.MEANINGS == {code: name for name, code in st.CODES.items()}


def test_every_code_has_a_description():
    assert set(st.DESCRIPTIONS) == set(st.MEANINGS)
    assert all(text.strip() and "\n" not in text for text in st.DESCRIPTIONS.values())


def test_cf_attrs_follow_the_table():
    attrs = st.cf_attrs()
    assert set(attrs) == {"long_name", "flag_values", "flag_meanings"} and attrs["long_name"]
    values = attrs["flag_values"]
    assert isinstance(values, np.ndarray) and values.dtype == np.int8  # the variable's type
    meanings = attrs["flag_meanings"].split(" ")
    assert dict(zip(values.tolist(), meanings)) == st.MEANINGS
    assert len(meanings) == len(values) == len(st.CODES)
    assert values.tolist() == sorted(values.tolist())


def test_cf_attrs_are_a_fresh_copy_each_time():
    st.cf_attrs()["flag_values"][:] = 99
    assert st.cf_attrs()["flag_values"].tolist() == list(st.CODES.values())


@pytest.mark.parametrize("code, name", [(0, "success"), (np.int8(3), "singular_jacobian"),
                                        (np.int64(-1), "pending"), (7.0, "error")])
def test_meaning_of_known_codes(code, name):
    assert st.meaning(code) == name


@pytest.mark.parametrize("code", [11, 12, -2, np.int8(-128)])
def test_meaning_of_unknown_codes_names_the_number(code):
    # A store written by a newer version may hold codes this one does not know.
    assert st.meaning(code) == f"unknown({int(code)})"


def test_is_failure():
    assert st.is_failure(st.MAX_STEPS) is True
    assert st.is_failure(st.SUCCESS) is False and st.is_failure(st.PENDING) is False
    assert st.is_failure(np.int8(st.ERROR)) is True
    codes = np.array([[-1, 0], [3, 6]], dtype=np.int8)
    assert st.is_failure(codes).tolist() == [[False, False], [True, True]]


def test_a_run_that_stops_as_asked_is_not_a_failure():
    # A terminal event and an accumulation of impacts end a run early, as the model asked.
    assert st.is_failure(st.STOPPED_BY_EVENT) is False and st.is_failure(st.ZENO) is False
    assert st.is_failure(st.EVENT_OVERFLOW) is True
    codes = np.array([st.SUCCESS, st.STOPPED_BY_EVENT, st.ZENO, st.EVENT_OVERFLOW, st.MAX_STEPS], dtype=np.int8)
    assert st.is_failure(codes).tolist() == [False, False, False, True, True]
