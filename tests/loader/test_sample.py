"""What counts as a sample, and the typed errors for everything else."""

from __future__ import annotations

import numpy as np
import pytest

from chute import Record, SampleError
from chute.sample.contract import as_tokenized, bad_values, check_sample, check_values


def test_lists_become_arrays_in_a_copy() -> None:
    raw = {"input_ids": [3, 4], "images": ["a.png"]}
    s = check_sample(raw)
    assert s["input_ids"].tolist() == [3, 4] and s["images"] == ["a.png"] and "labels" not in s
    assert raw["input_ids"] == [3, 4]  # the caller's dict is left alone


def test_a_sample_of_arrays_is_passed_through_without_copy() -> None:
    sample = {"input_ids": np.arange(5, dtype=np.int64), "labels": np.arange(5)}
    assert check_sample(sample) is sample


def test_masked_labels_are_fine() -> None:
    s = check_sample({"input_ids": [1, 2, 3], "labels": [-100, -100, 3]})
    check_values(s)
    assert s["labels"].tolist() == [-100, -100, 3]


@pytest.mark.parametrize(
    "sample, kind, message",
    [
        ({"labels": [1]}, "missing_field", "no input_ids"),
        ({"input_ids": []}, "empty_sample", "input_ids is empty"),
        ({"input_ids": "123"}, "wrong_type", "must be a list of ints, got str"),
        ({"input_ids": 5}, "wrong_type", "must be a list of ints, got int"),
        ({"input_ids": [1.0, 2.0]}, "wrong_type", "must hold integers, got float64"),
        ({"input_ids": [[1], [2]]}, "wrong_type", "must be 1-D, got shape \\(2, 1\\)"),
        ({"input_ids": [1, -3]}, "wrong_type", "input_ids holds -3; token ids are >= 0"),
        ({"input_ids": [1, 2], "labels": [1]}, "wrong_type", "labels has 1 tokens but"),
        ({"input_ids": [1, 2], "labels": [-100, -7]}, "wrong_type", "labels holds -7"),
        ([1, 2], "wrong_type", "must be a mapping"),
    ],
)
def test_bad_samples_raise_typed_errors(sample, kind: str, message: str) -> None:
    with pytest.raises(SampleError, match=message) as caught:
        check_values(check_sample(sample))
    assert caught.value.kind == kind


def test_value_checks_run_per_batch_and_name_the_culprits() -> None:
    good = [check_sample({"input_ids": [i, i + 1], "labels": [-100, i]}) for i in range(5)]
    assert bad_values(good) == []
    bad = [*good[:2], check_sample({"input_ids": [7, -1]}), *good[2:]]
    bad.append(check_sample({"input_ids": [1, 2], "labels": [-5, 2]}))
    found = bad_values(bad)
    assert [j for j, _ in found] == [2, 6]
    assert [e.field for _, e in found] == ["input_ids", "labels"]


def test_a_record_that_is_not_an_object_is_not_a_sample() -> None:
    record = Record(b"[1, 2]", path="d.jsonl", line=4, index=3)
    with pytest.raises(SampleError, match="not_an_object"):
        as_tokenized(record)
    with pytest.raises(SampleError, match="bad_json"):
        as_tokenized(Record(b"{oops", path="d.jsonl", line=5, index=4))


def test_judge_checks_token_values_per_batch_and_locates_each_bad_sample() -> None:
    import orjson

    from chute.recipe.outcome import judge

    def recipe(record: Record) -> dict:
        return {"input_ids": record.data["ids"], "labels": record.data.get("labels")}

    items = [
        Record(orjson.dumps({"ids": [1, 2]}), path="d.jsonl", line=1, index=0),
        Record(orjson.dumps({"ids": [1, -3]}), path="d.jsonl", line=2, index=1),
        Record(orjson.dumps({"ids": [4], "labels": [-100]}), path="d.jsonl", line=3, index=2),
        Record(orjson.dumps({"ids": [5, 6], "labels": [5, -7]}), path="d.jsonl", line=4, index=3),
        Record(orjson.dumps({"ids": "not ids"}), path="d.jsonl", line=5, index=4),
    ]
    out = judge(recipe, items)
    assert [o["input_ids"].tolist() for o in (out[0], out[2])] == [[1, 2], [4]]
    assert isinstance(out[1], SampleError) and "input_ids holds -3" in str(out[1])
    assert isinstance(out[3], SampleError) and "labels holds -7" in str(out[3])
    assert isinstance(out[4], SampleError)
    assert [(e.path, e.line) for e in (out[1], out[3], out[4])] == [
        ("d.jsonl", n) for n in (2, 4, 5)
    ]
