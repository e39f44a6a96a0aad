"""Long structures (issue 27): a record of very many turns is rejected before it is converted.

``max_turns`` (default 10,000) bounds the messages of one record and the content parts of one
message; a record over it is a counted ``too_many_turns`` reject, found while the format adapter
walks the record, before a message is built, rendered or tokenized.
"""

from __future__ import annotations

import gc
import re
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from chute import JsonlSource, Recipe, SampleError
from chute.cache.config import RecipeConfig
from chute.cli import app
from chute.errors import SAMPLE_ERROR_KINDS, ConfigError
from chute.formats import FormatReader, FormatSpec
from chute.formats.content import reader_for, record_hash
from chute.formats.spec import MAX_TURNS
from chute.recipe.outcome import judge
from chute.recipe.validate import validate_source
from chute.sources.record import Record
from recipe_helpers import tiny_tokenizer

SRC = Path(__file__).resolve().parents[2] / "src" / "chute"


def turns(n: int) -> list[dict[str, str]]:
    return [{"from": "human" if i % 2 == 0 else "gpt", "value": "hi"} for i in range(n)]


def test_more_messages_than_max_turns_is_too_many_turns() -> None:
    reader = FormatReader(FormatSpec("sharegpt"), max_turns=4)
    assert len(reader({"conversations": turns(4)}).messages) == 4
    with pytest.raises(SampleError) as info:
        reader({"conversations": turns(6)})
    assert info.value.kind == "too_many_turns" and info.value.field == "conversations"
    assert "6 messages, more than max_turns=4; raise max_turns" in info.value.message
    bare = FormatReader(FormatSpec("auto"), max_turns=4)
    with pytest.raises(SampleError, match="too_many_turns: 6 messages"):
        bare([{"role": "user", "content": "hi"}] * 6)  # a bare list of messages


def test_content_parts_and_alpaca_history_count_too() -> None:
    parts = [{"type": "text", "text": "a"}] * 5
    record = {
        "messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": "b"}]
    }
    reader = FormatReader(FormatSpec("messages"), max_turns=4)
    with pytest.raises(SampleError, match="5 content parts in message 0") as info:
        reader(record)
    assert info.value.kind == "too_many_turns" and info.value.field == "messages[0].content"
    alpaca = {"instruction": "q", "output": "a", "history": [["u", "a"]] * 2}
    assert len(FormatReader(FormatSpec("alpaca"), max_turns=6)(alpaca).messages) == 6
    with pytest.raises(SampleError, match="6 messages \\(with the history\\), more than"):
        FormatReader(FormatSpec("alpaca"), max_turns=5)(alpaca)


def test_the_default_limit_and_no_limit() -> None:
    assert MAX_TURNS == 10_000
    reader = FormatReader(FormatSpec("auto"))
    assert len(reader({"conversations": turns(MAX_TURNS)}).messages) == MAX_TURNS
    with pytest.raises(SampleError, match="too_many_turns"):
        reader({"conversations": turns(MAX_TURNS + 2)})
    unbounded = FormatReader(FormatSpec("auto"), max_turns=None)
    assert len(unbounded({"conversations": turns(MAX_TURNS + 2)}).messages) == MAX_TURNS + 2


def test_the_recipe_rejects_before_templating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml", max_turns=8)
    rendered: list[Any] = []
    real = recipe.template.render
    monkeypatch.setattr(
        recipe.template, "render", lambda conv, ctx: rendered.append(conv) or real(conv, ctx)
    )
    data = tmp_path / "d.jsonl"
    rows = [{"conversations": turns(2)}, {"conversations": turns(20)}, {"conversations": turns(8)}]
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    source = JsonlSource(data)
    with pytest.raises(SampleError, match=r"d.jsonl:2: too_many_turns: 20 messages"):
        recipe(source[1])
    out = recipe.batch(list(source))
    assert [x.kind if isinstance(x, SampleError) else "ok" for x in out] == [
        "ok",
        "too_many_turns",
        "ok",
    ]
    assert sorted(len(c.messages) for c in rendered) == [2, 8]  # the long one never rendered
    report = validate_source(source, recipe, workers=1)
    assert dict(report.tally.counts) == {"too_many_turns": 1}
    pair = {"chosen": turns(20), "rejected": turns(2)}
    with pytest.raises(SampleError, match="too_many_turns"):
        Recipe(tokenizer=tiny_tokenizer(), template="chatml", task="preference", max_turns=8)(pair)


def test_a_rejected_record_is_freed_at_once_not_at_the_next_collection() -> None:
    # chunk work runs with few cyclic collections: a reject's traceback (frames holding the
    # parsed record) kept a million-turn parse alive into the next record's (2x the peak)
    recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml", max_turns=100)
    raw = orjson.dumps({"conversations": turns(20_000)})

    def reject() -> Any:
        return judge(recipe, [Record(raw, path="d.jsonl", line=1, index=0)])[0]

    reject()  # warm up (the reader's tables)
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        error = reject()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    assert peak > 2 << 20 and held < 256 << 10, (held, peak)  # parsed, then gone
    assert error.kind == "too_many_turns" and error.__traceback__ is None


def test_max_turns_is_checked_and_fingerprinted_only_when_set() -> None:
    tok = tiny_tokenizer()
    for bad in (0, -1, True, "10"):
        with pytest.raises(ConfigError, match=r"^max_turns: expected a positive number"):
            Recipe(tokenizer=tok, template="chatml", max_turns=bad)
    assert "max_turns" not in Recipe(tokenizer=tok, template="chatml").fingerprint()  # as before
    assert Recipe(tokenizer=tok, template="chatml", max_turns=50).fingerprint()["max_turns"] == 50
    assert Recipe(tokenizer=tok, template="raw", max_turns=None).fingerprint()["max_turns"] is None
    assert RecipeConfig(tokenizer="t", max_turns=5).max_turns == 5
    with pytest.raises(ConfigError, match="max_turns"):
        RecipeConfig(tokenizer="t", max_turns=0)


def test_chute_validate_takes_max_turns(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    rows = [{"conversations": turns(2)}] * 5 + [{"conversations": turns(12)}]
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    runner = CliRunner()
    args = ["validate", str(data), "--json", "--workers", "1", "--format", "sharegpt"]
    out = orjson.loads(runner.invoke(app, [*args, "--max-turns", "10"]).stdout)
    assert out["by_reason"] == {"too_many_turns": 1}
    assert out["examples"]["too_many_turns"][0].startswith(f"{data}:6: too_many_turns: 12 mess")
    assert "--max-turns 10; raise --max-turns" in out["examples"]["too_many_turns"][0]
    assert orjson.loads(runner.invoke(app, args).stdout)["rejected"] == 0
    bare = runner.invoke(app, ["validate", str(data), "--max-turns", "10"])
    assert bare.exit_code == 2 and "--max-turns need --tokenizer" in bare.output


def test_content_hashes_do_not_depend_on_the_limit() -> None:
    conv = {"conversations": turns(MAX_TURNS + 2)}
    tight = Record(orjson.dumps(conv), path="a", line=1, index=0)
    spaced = Record(orjson.dumps(conv, option=orjson.OPT_INDENT_2), path="a", line=1, index=0)
    reader = reader_for("sharegpt")  # by content, however long: not by the raw bytes
    assert record_hash(reader, tight) == record_hash(reader, spaced)


def test_every_reject_kind_raised_is_declared() -> None:
    raised = set()
    for path in SRC.rglob("*.py"):
        raised |= set(re.findall(r'SampleError\(\s*"([a-z_]+)"', path.read_text()))
    assert {"record_too_large", "too_many_turns"} <= raised
    assert raised <= set(SAMPLE_ERROR_KINDS), raised - set(SAMPLE_ERROR_KINDS)
