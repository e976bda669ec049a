"""The store's JSON reader (runner/store/results.py `_json`) reads every stored document exactly as `json.loads` does:
the same value and the same type at every node (an integer beyond 64 bits stays an exact int, -0.0 stays negative,
NaN and Infinity read, lone surrogates kept), the same key order, and the same error where json.loads refuses the text.
orjson reads what it reads the same; json.loads reads the rest. Checked on random documents written as the store
writes them (json.dumps), on hand-picked edge cases, on random number literals and on random near-JSON text, with
orjson (the fast path, installed) and without it (json's own scanner)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runner.store import results
from runner.store.results import _json

PROPERTY = settings(derandomize=True, deadline=None, database=None, print_blob=True, max_examples=200,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
READERS = ["orjson", "scanner"]


@contextmanager
def reader(name: str) -> Iterator[None]:
    """`_json` with orjson (as installed) or without it (json's scanner, as where orjson is missing)."""
    with mock.patch.object(results, "_orjson", orjson if name == "orjson" else None):
        yield


# ---- comparing two decoded documents: value, type and key order at every node, NaN equal to NaN

def assert_same(got: Any, want: Any, path: str = "$") -> None:
    assert type(got) is type(want), f"{path}: {type(got).__name__} {got!r} != {type(want).__name__} {want!r}"
    if isinstance(want, float):
        if math.isnan(want):
            assert math.isnan(got), f"{path}: {got!r} != nan"
        else:
            assert repr(got) == repr(want), f"{path}: {got!r} != {want!r}"  # repr tells -0.0 from 0.0
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{path}: keys {list(got)!r} != {list(want)!r}"
        for key in want:
            assert_same(got[key], want[key], f"{path}[{key!r}]")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{path}: {len(got)} items != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]")
    else:
        assert got == want and repr(got) == repr(want), f"{path}: {got!r} != {want!r}"


def outcome(read: Callable[[str], Any], text: str) -> tuple[str, Any]:
    try:
        return "value", read(text)
    except Exception as e:  # noqa: BLE001  (whatever json.loads raises, _json must raise the same)
        return "error", (type(e), str(e))


def assert_reads_as_json_does(text: str) -> None:
    got, want = outcome(_json, text), outcome(json.loads, text)
    assert got[0] == want[0], f"{text[:200]!r}: _json gave {got!r}, json.loads {want!r}"
    if want[0] == "value":
        assert_same(got[1], want[1])
    else:
        assert got[1] == want[1], f"{text[:200]!r}: _json raised {got[1]!r}, json.loads {want[1]!r}"


def test_the_helper_tells_apart_what_json_tells_apart() -> None:
    """The comparison itself is strict: a test passing on it means the documents are alike node for node."""
    assert_same([float("nan"), {"a": -0.0}], [float("nan"), {"a": -0.0}])
    for got, want in [(1.0, 1), (True, 1), (0.0, -0.0), (float(2 ** 64), 2 ** 64), (2 ** 64 + 1, 2 ** 64),
                      ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ("\ud800", "\udc00"), ([1], [1, 1]), (None, 0),
                      (float("nan"), float("inf")), ([1], (1,))]:
        with pytest.raises(AssertionError):
            assert_same(got, want)


# ---- the fast path is the one tested

def test_orjson_is_installed_and_is_the_reader() -> None:
    assert results._orjson is orjson  # pyproject.toml's dependency, present in the venv the tests run in


def test_json_loads_reads_only_what_orjson_does_not_read_alike() -> None:
    calls: list[str] = []
    loads = json.loads

    def spy(text: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(text)
        return loads(text, *args, **kwargs)

    with mock.patch.object(results.json, "loads", spy):
        for text in ['{"a": [1, 2.5, "x", null, true]}', "18446744073709551615", "-9223372036854775808",
                     "[1e18, -9.2e18, 0.5]"]:
            _json(text)
        assert calls == []  # orjson alone
        fallen = ["NaN", '{"a": Infinity}', '"\\ud800"', '"\ud800"', "[1e400]", "18446744073709551616",
                  "-9223372036854775809", "1e19", "[1e300]"]
        for text in fallen:
            _json(text)
        with pytest.raises(json.JSONDecodeError):
            _json('{"a": 1} x')
        assert calls == [*fallen, '{"a": 1} x']


# ---- hand-picked cases

NESTED: list[Any] = []
for _ in range(99):
    NESTED = [NESTED]
EDGES = [
    ("12345678901234567890123", 12345678901234567890123),
    ("-12345678901234567890123", -12345678901234567890123),
    ("-9223372036854775809", -9223372036854775809),
    ("-9223372036854775808", -9223372036854775808),
    ("9223372036854775807", 9223372036854775807),
    ("9223372036854775808", 9223372036854775808),
    ("18446744073709551615", 18446744073709551615),
    ("18446744073709551616", 18446744073709551616),
    ("-18446744073709551616", -18446744073709551616),
    ("[1e400]", [float("inf")]),
    ("[-1e400]", [float("-inf")]),
    ("NaN", float("nan")),
    ('{"a": NaN}', {"a": float("nan")}),
    ('[Infinity, -Infinity]', [float("inf"), float("-inf")]),
    ('"\\ud800"', "\ud800"),
    ('"\ud800"', "\ud800"),
    ('"\\udc00\\ud800"', "\udc00\ud800"),
    ('"\\ud800\\udc00"', "\U00010000"),  # an escaped pair is one character
    ('"\ud800\udc00"', "\ud800\udc00"),  # an unescaped pair (ensure_ascii=False) stays two
    ('{"\\ud800": 1}', {"\ud800": 1}),
    ('{"a":1,"a":2}', {"a": 2}),
    ('{"a":1,"b":2,"a":3}', {"a": 3, "b": 2}),
    ('{"a": 18446744073709551616, "a": 1}', {"a": 1}),
    (' {"a": 1} ', {"a": 1}),
    ('\n\t\r {"a": 1}\r\n', {"a": 1}),
    ("1.0e-400", 0.0),
    ("-1.0e-400", -0.0),
    ("-0", 0),
    ("-0.0", -0.0),
    ("-0e0", -0.0),
    ("5e-324", 5e-324),
    ("2.2250738585072011e-308", 2.2250738585072011e-308),
    ("1.7976931348623157e308", 1.7976931348623157e308),
    ("1.7976931348623159e308", float("inf")),
    ("9223372036854775808.0", 9223372036854775808.0),
    ("1e19", 1e19),
    ("[1.0, 1, true, false, null]", [1.0, 1, True, False, None]),
    ('"\\u0000\\/\\"\\\\"', '\x00/"\\'),
    ('"é✓🎉"', "é✓🎉"),
    ("[" * 100 + "]" * 100, NESTED),
]
ERRORS = ['{"a": 1} x', "", " ", "[1,2,]", "0123", "1.", ".5", "-", "nan", "inf", '"a\x01b"', '\ufeff{"a": 1}', "{'a': 1}",
          '{"a" 1}', '"\\x41"', '"\\ud80"', "[" * 5000 + "]" * 5000]


@pytest.mark.parametrize("name", READERS)
@pytest.mark.parametrize(("text", "value"), EDGES, ids=[repr(t)[:40] for t, _ in EDGES])
def test_edge_cases_read_as_json_loads_reads_them(name: str, text: str, value: Any) -> None:
    with reader(name):
        assert_same(_json(text), value)
        assert_reads_as_json_does(text)


@pytest.mark.parametrize("name", READERS)
@pytest.mark.parametrize("text", ERRORS, ids=[repr(t)[:40] for t in ERRORS])
def test_what_json_loads_refuses_is_refused_with_its_error(name: str, text: str) -> None:
    with reader(name):
        want = outcome(json.loads, text)
        assert want[0] == "error"
        assert outcome(_json, text) == want
    if text == '{"a": 1} x':
        with pytest.raises(json.JSONDecodeError, match="Extra data"):
            _json(text)


# ---- random documents, as the store writes them

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
CHARS = st.one_of(st.characters(codec="utf-8"), SURROGATES, st.sampled_from('"\\/\x00\x1f\x7f\u2028\ufeffé✓🎉'))
STRINGS = st.text(CHARS, max_size=12)
KEYS = st.one_of(st.text(CHARS, max_size=6), st.sampled_from(["a", "b", ""]))
INTS = st.one_of(
    st.integers(),
    st.integers(min_value=-(2 ** 64) - 5, max_value=2 ** 64 + 5),
    st.integers(min_value=-(2 ** 300), max_value=2 ** 300),
    st.sampled_from([0, -1, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, 2 ** 64 + 1, -(2 ** 63),
                     -(2 ** 63) - 1, -(2 ** 64), 10 ** 40, -(10 ** 40)]),
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.floats(min_value=-1e-300, max_value=1e-300, allow_subnormal=True),
    st.floats(min_value=2.0 ** 62, max_value=2.0 ** 65),
    st.floats(min_value=-(2.0 ** 65), max_value=-(2.0 ** 62)),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 2.0 ** 63,
                     -(2.0 ** 63), 2.0 ** 64, 1e19, 1e16, 0.1, float("nan"), float("inf"), float("-inf")]),
)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, STRINGS)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                       st.dictionaries(KEYS, inner, max_size=6)), max_leaves=40)
DUMPS = st.sampled_from([
    {},
    {"ensure_ascii": False},
    {"separators": (",", ":")},
    {"ensure_ascii": False, "separators": (",", ":")},
    {"indent": 2},
    {"ensure_ascii": False, "indent": 1, "sort_keys": True},
])
WHITESPACE = st.text(st.sampled_from(" \t\n\r"), max_size=3)


@pytest.mark.parametrize("name", READERS)
@PROPERTY
@given(value=VALUES, options=DUMPS, before=WHITESPACE, after=WHITESPACE)
@example(value=[2 ** 64, -0.0, float("nan"), "\ud800"], options={}, before="", after="")
@example(value={"n": -(2 ** 63) - 1, "m": [-(2 ** 64) + 1, 2 ** 63]}, options={}, before="", after="")  # orjson: floats
@example(value={"a": [10 ** 30, {"b": float("-inf")}]}, options={"ensure_ascii": False}, before=" ", after="\n")
def test_a_stored_document_reads_as_json_loads_reads_it(name: str, value: Any, options: dict[str, Any], before: str,
                                                        after: str) -> None:
    text = before + json.dumps(value, allow_nan=True, **options) + after
    with reader(name):
        assert_reads_as_json_does(text)
        if name == "orjson":  # and the value written is the value read (a NaN is a NaN, -0.0 is -0.0)
            assert_same(_json(text), json.loads(text))


@pytest.mark.parametrize("name", READERS)
@PROPERTY
@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "\ud800"]), SCALARS), max_size=8),
       ascii_=st.booleans())
def test_an_object_with_repeated_keys_reads_as_json_loads_reads_it(name: str, pairs: list[tuple[str, Any]],
                                                                   ascii_: bool) -> None:
    """The last value of a repeated key wins, at the key's first place, whatever the earlier values were."""
    text = "{" + ", ".join(f"{json.dumps(k, ensure_ascii=ascii_)}: {json.dumps(v, ensure_ascii=ascii_)}"
                           for k, v in pairs) + "}"
    with reader(name):
        assert_reads_as_json_does(text)


NUMBER = r"-?(0|[1-9][0-9]{0,45})(\.[0-9]{1,45})?([eE][+-]?[0-9]{1,3})?"


@pytest.mark.parametrize("name", READERS)
@PROPERTY
@given(literal=st.from_regex(NUMBER, fullmatch=True), wrap=st.booleans())
@example(literal="2.4703282292062327e-324", wrap=False)  # just under half the smallest subnormal: 0.0
@example(literal="2.4703282292062328e-324", wrap=False)  # just over: 5e-324
@example(literal="1.00000000000000011102230246251565404236316680908203125", wrap=True)  # a tie: rounds to even
@example(literal="9007199254740993.0", wrap=False)
@example(literal="-9223372036854775808.5", wrap=False)
def test_any_number_literal_reads_as_json_loads_reads_it(name: str, literal: str, wrap: bool) -> None:
    """Number literals of every form (json.dumps writes only a few): long mantissas, exponents near the ends of a
    double, integers across 2**53, 2**63 and 2**64."""
    with reader(name):
        assert_reads_as_json_does(f"[{literal}]" if wrap else literal)


TOKENS = list('[]{}:,"\\ \t\n0123456789-+.eEtrufalsnNIiy\x01\ud800é🎉') + ["\\u", "\\ud800", "\\udc00", "NaN", "Infinity",
                                                                             "true", "null", "1e400", "18446744073709551616"]
NEAR_JSON = st.lists(st.sampled_from(TOKENS), max_size=30).map("".join)


@pytest.mark.parametrize("name", READERS)
@PROPERTY
@given(text=NEAR_JSON)
def test_any_text_reads_or_fails_as_json_loads_does(name: str, text: str) -> None:
    """Mostly not JSON: where json.loads refuses a text, _json raises the same error with the same message."""
    with reader(name):
        assert_reads_as_json_does(text)
