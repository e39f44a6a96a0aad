"""Duplicate checks: planted copies are found with their lines, in memory and when spilled."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from chute import Mixture, MixtureEntry
from chute.mixture.overlap import find_duplicates


def _plant(shared_data: Path, tmp_path: Path) -> tuple[Path, Path, list[dict]]:
    """An alpaca file and a ShareGPT file holding 3 alpaca records (reformatted) + a repeat."""
    alpaca = json.loads((shared_data / "llama-factory/alpaca_en_demo.json").read_text())
    chat = json.loads((shared_data / "fastchat/dummy_conversation.json").read_text())[:60]
    copies = []
    for i in (5, 77, 400):  # the same exchange written as ShareGPT, spacing changed
        r = alpaca[i]
        prompt = r["instruction"] + ("\n\n" + r["input"] if r["input"] else "")
        copies.append(
            {
                "conversations": [
                    {"from": "human", "value": "  " + prompt},
                    {"from": "gpt", "value": r["output"] + "\n"},
                ]
            }
        )
    rows = [*chat[:20], copies[0], *chat[20:40], copies[1], chat[3], *chat[40:], copies[2]]
    a = tmp_path / "alpaca.json"
    a.write_text(json.dumps(alpaca))
    b = tmp_path / "chat.jsonl"
    b.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return a, b, rows


@pytest.mark.parametrize("max_memory", [256 << 20, 512])
def test_planted_duplicates_are_found_with_their_lines(
    shared_data: Path, tmp_path: Path, max_memory: int
) -> None:
    a, b, _ = _plant(shared_data, tmp_path)
    rejects = tmp_path / "dups.jsonl"
    report = find_duplicates(
        {"alpaca": a, "chat": b}, rejects=rejects, max_memory=max_memory, progress=False, workers=1
    )
    assert (report.partitions > 1) == (max_memory == 512)
    assert report.records == {"alpaca": 999, "chat": 64}
    assert report.within["chat"] == 1  # chat[3] twice (lines 4 and 43)
    assert report.between["alpaca|chat"]["contents"] == 3
    assert report.between["alpaca|chat"]["records_chat"] == 3
    # the demo file repeats some of its own records: counted independently here
    alpaca = json.loads(a.read_text())
    keys = [
        " ".join(
            (r["instruction"] + "\n\n" + r["input"] if r["input"] else r["instruction"]).split()
        )
        + "|"
        + " ".join(r["output"].split())
        for r in alpaca
    ]
    assert report.within["alpaca"] == len(keys) - len(set(keys)) > 0
    assert report.duplicates == report.within["alpaca"] + 1 + 3
    lines = [orjson.loads(x) for x in rejects.read_bytes().splitlines()]
    assert sorted((e["group"], e["line"]) for e in lines if e["group"] == "chat") == [
        ("chat", 21),
        ("chat", 42),
        ("chat", 43),
        ("chat", 64),
    ]
    assert all(e["reason"] == "duplicate" for e in lines)
    first = {e["line"]: e["message"] for e in lines}
    assert first[43] == f"same content as chat {b}:4"
    assert first[21].startswith("same content as alpaca ") and first[21].endswith("(element 6)")
    # every example lists each copy with its path:line
    assert any(f"chat {b}:43" in ex and f"chat {b}:4" in ex for ex in report.examples)


def test_a_mixture_is_checked_per_dataset_and_split(shared_data: Path, tmp_path: Path) -> None:
    a, b, _ = _plant(shared_data, tmp_path)
    mix = Mixture(
        [
            MixtureEntry("alpaca", a, format="alpaca", val=0.1),
            MixtureEntry("chat", b, format="sharegpt"),
        ]
    )
    report = find_duplicates(mix, progress=False, workers=1)
    assert report.groups == ["alpaca:train", "alpaca:val", "chat"]
    assert report.between["alpaca:train|alpaca:val"]["contents"] == 0  # never split apart
    assert (
        report.between["alpaca:train|chat"]["contents"]
        + report.between["alpaca:val|chat"]["contents"]
    ) == 3
    assert report.records["alpaca:train"] + report.records["alpaca:val"] == 999


def test_hashing_over_processes_finds_the_same(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute.mixture import hashes

    monkeypatch.setattr(hashes, "MIN_CHUNK", 100)  # several chunks for 2 processes
    a, b, _ = _plant(shared_data, tmp_path)
    groups = {"alpaca": a, "chat": b}
    # each in its own cache folder: both compute the hashes
    one = find_duplicates(groups, progress=False, workers=1, cache_dir=tmp_path / "c1")
    two = find_duplicates(groups, progress=False, workers=2, cache_dir=tmp_path / "c2")
    assert (two.records, two.within, two.between) == (one.records, one.within, one.between)
    assert two.duplicates == one.duplicates > 0


@pytest.mark.parametrize("max_memory", [256 << 20, 512])
def test_the_check_reports_its_progress_after_the_hashes(
    shared_data: Path, tmp_path: Path, max_memory: int
) -> None:
    a, b, _ = _plant(shared_data, tmp_path)
    groups = {"alpaca": a, "chat": b}
    find_duplicates(groups, progress=False, workers=1, cache_dir=tmp_path)  # hashes cached
    steps: list[int] = []
    report = find_duplicates(
        groups, max_memory=max_memory, progress=steps.append, workers=1, cache_dir=tmp_path
    )
    records = sum(report.records.values())
    # every record counted once, and spilled once before when there are several partitions
    assert sum(steps) == records * (2 if report.partitions > 1 else 1)
    assert (report.partitions > 1) == (max_memory == 512)


def test_the_cli_check_of_a_mixture_takes_its_overrides_and_needs_no_tokenizer(
    tmp_path: Path,
) -> None:
    """Records are hashed, never tokenized: a YAML whose tokenizer is not on this machine (a
    migrated one names a Hub id) is checked; ``key=value`` items after it apply to it."""
    from typer.testing import CliRunner

    from chute.cli import app

    a = tmp_path / "a.jsonl"
    a.write_bytes(b"".join(orjson.dumps({"text": f"t{i % 40}"}) + b"\n" for i in range(60)))
    b = tmp_path / "b.jsonl"
    b.write_bytes(b"".join(orjson.dumps({"text": f"t{i}"}) + b"\n" for i in range(35, 45)))
    mix = Mixture(
        [MixtureEntry("a", str(a)), MixtureEntry("b", str(b))],
        recipe={"tokenizer": "Org/not-downloaded", "format": "text"},
    )
    config = tmp_path / "mix.yaml"
    config.write_text(mix.to_yaml())
    runner = CliRunner()
    args = ["validate", "--overlap", str(config), "datasets.a.val=0.5", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output  # a and b share contents t35..t39
    report = json.loads(result.stdout)
    assert report["groups"] == ["a:train", "a:val", "b"]
    assert sum(report["records"][g] for g in ("a:train", "a:val")) == 60
    result = runner.invoke(app, ["validate", "--overlap", str(a), "datasets.a.val=0.5"])
    assert result.exit_code == 2 and "follows the mixture YAML" in result.output
