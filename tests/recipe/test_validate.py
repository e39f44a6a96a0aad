from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from chute import JsonlSource, SampleError
from chute.errors import RejectTally
from chute.recipe.validate import validate_source


def make_dataset(path: Path, n: int, bad_every: int) -> set[int]:
    bad_lines = set()
    with open(path, "wb") as f:
        for i in range(n):
            if i % bad_every == 3:
                f.write(b'{"id": ' + str(i).encode() + b", oops\n")
                bad_lines.add(i + 1)
            else:
                f.write(orjson.dumps({"id": i}) + b"\n")
    return bad_lines


@pytest.mark.parametrize("workers", [1, 2])
def test_counts_examples_and_rejects_file_in_source_order(tmp_path: Path, workers: int) -> None:
    p = tmp_path / "d.jsonl"
    bad_lines = make_dataset(p, 25_000, 10)
    rejects = tmp_path / "rejects.jsonl"
    report = validate_source(JsonlSource(p), workers=workers, rejects=rejects)
    assert report.records == 25_000
    assert report.rejected == len(bad_lines) == 2_500
    assert report.valid == 22_500
    assert dict(report.tally.counts) == {"bad_json": 2_500}
    assert len(report.tally.examples["bad_json"]) == 5
    assert report.tally.examples["bad_json"][0].startswith(f"{p}:4: bad_json:")
    lines = [orjson.loads(x) for x in rejects.read_bytes().splitlines()]
    assert [x["line"] for x in lines] == sorted(bad_lines)
    assert lines[0]["reason"] == "bad_json" and lines[0]["raw"] == '{"id": 3, oops'
    assert report.to_json()["by_reason"] == {"bad_json": 2_500}


def _picky(record) -> None:  # type: ignore[no-untyped-def]
    if record.data["id"] % 7 == 0:
        raise SampleError("wrong_type", "multiples of seven are not welcome", field="id")
    if record.data["id"] == 11:
        raise KeyError("surprise")


def test_custom_checks_and_unexpected_errors_are_counted_with_locations(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_bytes(b"".join(orjson.dumps({"id": i}) + b"\n" for i in range(30)))
    report = validate_source(JsonlSource(p), _picky, workers=2)
    assert dict(report.tally.counts) == {"wrong_type": 5, "unexpected_error": 1}
    assert report.tally.examples["unexpected_error"] == [
        f"{p}:12: unexpected_error: KeyError: 'surprise'"
    ]
    assert (
        report.tally.examples["wrong_type"][1]
        == f"{p}:8: wrong_type: multiples of seven are not welcome (field 'id')"
    )


def test_tally_merge_keeps_at_most_five_examples() -> None:
    a, b = RejectTally(), RejectTally()
    for i in range(4):
        a.add(SampleError("bad_json", str(i)))
        b.add(SampleError("bad_json", str(10 + i)))
    a.merge(b)
    assert a.counts["bad_json"] == 8 and len(a.examples["bad_json"]) == 5


def test_a_recipe_check_runs_in_batches_and_counts_as_one_record_at_a_time(
    tmp_path: Path,
) -> None:
    """``SampleCheck.batch`` (what ``chute validate --tokenizer`` runs) gives the same report
    and the same rejects file as the check called per record; the recipe sees batches."""
    from chute import Recipe
    from chute.demo.data import write_demo_dataset, write_demo_tokenizer
    from chute.recipe.outcome import SampleCheck

    data, planted = write_demo_dataset(tmp_path / "d.jsonl", 1500)
    tok = write_demo_tokenizer(tmp_path / "tok")
    # short enough that some records are too long: three kinds of reject, and valid ones
    recipe = Recipe(tokenizer=tok, template="chatml", max_length=96, overflow="drop")
    batched = SampleCheck(recipe)
    sizes: list[int] = []
    judged = batched.batch

    def counted(records: list[object]) -> list[object]:
        sizes.append(len(records))
        return judged(records)

    batched.batch = counted  # type: ignore[method-assign]

    def one_at_a_time(record: object) -> object:
        return SampleCheck(recipe)(record)

    reports = {}
    for name, check in (("batched", batched), ("per_record", one_at_a_time)):
        rejects = tmp_path / f"{name}.jsonl"
        report = validate_source(JsonlSource(data), check, workers=1, rejects=rejects)
        reports[name] = (report.to_json() | {"seconds": 0, "rejects_file": 0}, rejects.read_bytes())
    assert reports["batched"] == reports["per_record"]
    got = reports["batched"][0]
    assert got["by_reason"]["too_long"] > 0 and got["valid"] > 0
    assert sum(got["by_reason"].values()) - got["by_reason"]["too_long"] == len(planted)
    assert max(sizes) == 256 and sum(sizes) == got["records"]
