"""Plain alpaca records are read the short way; it must agree with the full reading on every record."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from chute.errors import SampleError
from chute.formats.alpaca import _plain_record, _read_all, convert_alpaca
from chute.formats.spec import FormatSpec, ResolvedSpec

# values a text field may hold: absent, null, empty, text, a placeholder, the wrong type
VALUES: list[Any] = [..., None, "", "Add 1 and 2", "see <image> here", 3, ["a"]]
SPECS = {
    "alpaca": FormatSpec("alpaca").resolve(),
    "prompt_completion": FormatSpec("prompt_completion").resolve(),
    "remapped": FormatSpec(
        "alpaca", columns={"prompt": "q", "response": "a", "images": "meta.pics"}
    ).resolve(),
    "dotted": FormatSpec("alpaca", columns={"prompt": "x.q"}).resolve(),
}


def outcome(read: Any, data: Any, spec: ResolvedSpec) -> Any:
    try:
        conv = read(data, spec)
    except SampleError as exc:
        return ("error", str(exc))
    return [(m.role, m.content) for m in conv.messages], conv.tools, conv.kind


def records(spec: ResolvedSpec) -> list[dict[str, Any]]:
    """Every mix of the text fields' values, plus each with one non-text field added."""
    texts = [
        spec.columns[c][0] for c in ("prompt", "query", "response", "system") if spec.columns.get(c)
    ]
    found = []
    for values in itertools.product(VALUES, repeat=len(texts)):
        found.append({k: v for k, v in zip(texts, values, strict=True) if v is not ...})
    plain = {texts[0]: "Q", "output": "A", "completion": "A", "a": "A"}
    extras = [
        {"history": [["hi", "hello"]]},
        {"history": None},
        {"tools": "[]"},
        {"images": ["a.png"]},
        {"image": "a.png"},
        {"meta": {"pics": ["a.png"]}},
        {"meta.pics": ["a.png"]},
        {"unrelated": 1},
    ]
    found += [{**plain, **extra} for extra in extras]
    return found


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_short_way_reads_as_the_full_reading(name: str) -> None:
    spec = SPECS[name]
    for data in records(spec):
        assert outcome(convert_alpaca, data, spec) == outcome(_read_all, data, spec), data


def test_plain_records_take_the_short_way_and_others_do_not() -> None:
    spec = SPECS["alpaca"]
    assert _plain_record({"instruction": "Q", "input": "x", "output": "A"}, spec) is not None
    assert _plain_record({"instruction": "Q", "output": "A", "system": "S", "id": 7}, spec)
    for other in ({"history": []}, {"images": []}, {"input": 3}, {"output": None}):
        assert _plain_record({"instruction": "Q", "output": "A", **other}, spec) is None
    assert _plain_record({"instruction": "<image> Q", "output": "A"}, spec) is None
    assert _plain_record({"x": {"q": "Q"}, "output": "A"}, SPECS["dotted"]) is None


@pytest.mark.shared_data
def test_every_alpaca_record_of_the_shared_data(shared_data: Path) -> None:
    spec, short = SPECS["alpaca"], 0
    for path in sorted((shared_data / "llama-factory").glob("alpaca_*.json")):
        for data in json.loads(path.read_text()):
            assert outcome(convert_alpaca, data, spec) == outcome(_read_all, data, spec), data
            short += _plain_record(data, spec) is not None
    assert short > 1000  # the short way was taken
