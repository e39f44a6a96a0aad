"""Bounded time and memory per record (issue 21): a huge document costs what is kept.

The recipe encodes only a prefix of a long text when the rest would be cut (``truncate`` on the
right, ``drop``), and a window of a split document without the rest of it; the ids and labels
are the same as encoding the whole text. Records over ``max_record_bytes`` are rejected before
they are parsed.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from chute import JsonlSource, Recipe, SampleError
from chute.recipe.encode import encode, fit_length
from chute.recipe.validate import validate_source
from chute.recipe.windows import split_sample
from chute.sources.record import Record, TextLine
from chute.tokenize import load_tokenizer

# the module (``chute.recipe.encode`` the attribute is the function of that name)
encode_module = importlib.import_module("chute.recipe.encode")

pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def qwen(shared_data: Path) -> str:
    return str(shared_data / "tokenizers" / "qwen3")


def _whole(recipe: Recipe, record: Record) -> dict[str, np.ndarray]:
    """What the recipe gave before issue 21: the whole text encoded, then max_length applied."""
    conv = recipe._reader(record.data)
    rendered = recipe.template.render(conv, recipe._ctx)
    enc = encode(rendered, recipe.tokenizer, recipe.media.tokens, guard=recipe.media.guard)
    assert enc.complete
    enc = fit_length(enc, recipe.max_length, recipe.overflow, recipe.truncation)
    return {"input_ids": enc.ids, "labels": enc.labels, "truncated": np.array(enc.truncated)}


def test_truncation_of_long_real_documents_equals_the_whole_encode(shared_data, qwen) -> None:
    # Wikipedia articles up to ~110k characters: the prefix path runs, and must not differ
    source = JsonlSource(shared_data / "llama-factory" / "wiki_demo.txt")
    recipe = Recipe(tokenizer=qwen, max_length=512)
    long_ones = [r for r in source if len(r.data["text"]) > 40_000]
    assert len(long_ones) >= 3
    for record in long_ones:
        got = recipe(record)
        want = _whole(recipe, record)
        assert got["input_ids"].tolist() == want["input_ids"].tolist()
        assert got["labels"].tolist() == want["labels"].tolist()
        assert got["truncated"] and len(got["input_ids"]) == 512


def test_drop_counts_a_long_record_without_encoding_it_whole(shared_data, qwen) -> None:
    source = JsonlSource(shared_data / "llama-factory" / "wiki_demo.txt")
    record = max(source, key=lambda r: len(r.data["text"]))
    with pytest.raises(SampleError, match=r"too_long: over 4096 tokens, more than max_length=4096"):
        Recipe(tokenizer=qwen, max_length=4096, overflow="drop")(record)


def test_windows_of_a_long_document_equal_cutting_the_whole_sample(shared_data, qwen) -> None:
    source = JsonlSource(shared_data / "llama-factory" / "wiki_demo.txt")
    record = max(source, key=lambda r: len(r.data["text"]))
    recipe = Recipe(tokenizer=qwen, max_length=1024, overflow="split", stride=16)
    whole = recipe.process(record.data)  # the whole document, one sample
    windows = split_sample(whole, 1024, 16)
    assert len(windows) > 5
    for k in (0, 1, len(windows) // 2, len(windows) - 1):
        got = recipe(record.with_window(k))
        assert got["input_ids"].tolist() == windows[k]["input_ids"].tolist()
        assert got["labels"].tolist() == windows[k]["labels"].tolist()
        assert (got["window"], got["windows"]) == (k, len(windows))


def test_a_record_over_max_record_bytes_is_rejected_before_parsing(tmp_path, qwen) -> None:
    data = tmp_path / "big.jsonl"
    big_and_broken = '{"text": "' + "word " * 3000 + "\n"  # not even valid JSON
    data.write_text('{"text": "fine"}\n' + big_and_broken + '{"text": "also fine"}\n')
    recipe = Recipe(tokenizer=qwen, max_record_bytes=10_000)
    source = JsonlSource(data)
    with pytest.raises(
        SampleError, match=r"big.jsonl:2: record_too_large: 15,010 bytes, more than"
    ):
        recipe(source[1])
    report = validate_source(source, recipe, workers=1)
    assert report.valid == 2 and dict(report.tally.counts) == {"record_too_large": 1}
    assert recipe.batch(list(source))[1].kind == "record_too_large"
    # the default (64 MiB) keeps it as an ordinary bad record
    with pytest.raises(SampleError, match="bad_json"):
        Recipe(tokenizer=qwen)(source[1])


def test_fields_that_are_null_say_so(qwen) -> None:
    recipe = Recipe(tokenizer=qwen)
    with pytest.raises(SampleError, match="needs 'output', which is null here"):
        recipe.process({"instruction": "Hi", "input": "", "output": None})
    with pytest.raises(SampleError, match="needs 'text', which is null here"):
        recipe.process({"text": None})


def test_audio_and_video_tokens_are_options_named_in_errors(tmp_path, qwen) -> None:
    record = {"messages": [{"role": "user", "content": "<audio>Hi"}, {"role": "assistant", "content": "Hey"}],
              "audios": ["a.wav"]}  # fmt: skip
    # Qwen3's vocabulary has no <|AUDIO|>: the default <audio> is not one token
    with pytest.raises(Exception, match="name the audio token with audio_token"):
        Recipe(tokenizer=qwen, audio_tokens=4, media_root=tmp_path).process(record)
    recipe = Recipe(
        tokenizer=qwen, audio_tokens=4, audio_token="<|image_pad|>", media_root=tmp_path
    )
    sample = recipe.process(record)
    assert len(sample["audios"]) == 1
    pad = recipe.tokenizer.token_to_id("<|image_pad|>")
    assert int((sample["input_ids"] == pad).sum()) == 4


def test_a_50_mb_record_costs_what_is_kept(tmp_path, qwen) -> None:
    """A subprocess runs the recipe over one 50 MB alpaca record at max_length 2048."""
    data = tmp_path / "huge.jsonl"
    with open(data, "w") as f:
        f.write(
            json.dumps({"instruction": "Summarise.", "input": "", "output": "word " * 10_000_000})
        )
        f.write("\n")
    script = textwrap.dedent(
        f"""
        import json, time
        from chute import JsonlSource, Recipe
        recipe = Recipe(tokenizer={qwen!r}, max_length=2048)
        record = JsonlSource({str(data)!r})[0]
        t0 = time.process_time()  # CPU time: other work on the machine does not count
        sample = recipe(record)
        seconds = time.process_time() - t0
        # VmHWM: this process's own peak (ru_maxrss would include the parent's at fork)
        status = open("/proc/self/status").read()
        peak_mb = int(status.split("VmHWM:")[1].split()[0]) / 1024
        print(json.dumps({{"seconds": seconds, "peak_mb": peak_mb,
                          "ids": sample["input_ids"].tolist(), "truncated": sample["truncated"]}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["peak_mb"] < 1024, result["peak_mb"]
    assert result["seconds"] < 5, result["seconds"]
    assert result["truncated"] and len(result["ids"]) == 2048
    # the kept prefix equals encoding a whole record with the same start (1 MB: fast enough)
    small = Recipe(tokenizer=qwen, max_length=2048)
    want = _whole(
        small,
        Record.from_data(
            {"instruction": "Summarise.", "input": "", "output": "word " * 200_000},
            path="s",
            line=1,
            index=0,
        ),
    )
    assert result["ids"] == want["input_ids"].tolist()


def test_text_lines_are_measured_without_parsing() -> None:
    assert TextLine(b"x" * 10, path="a.txt", line=1, index=0).size == 10
    assert Record.from_data({"a": 1}, path="p", line=1, index=0).size is None


def test_load_tokenizer_once_for_the_module(qwen) -> None:
    assert load_tokenizer(qwen).vocab_size > 150_000


@pytest.mark.parametrize("backend", ["auto", "hf"])
def test_later_windows_reencode_only_their_pieces_and_equal_cutting_the_whole_sample(
    shared_data, qwen, backend, monkeypatch
) -> None:
    source = JsonlSource(shared_data / "llama-factory" / "wiki_demo.txt")
    docs = sorted(source, key=lambda r: len(r.data["text"]))[-2:]  # the two longest
    recipe = Recipe(
        tokenizer=qwen, tokenizer_backend=backend, max_length=1024, overflow="split", stride=8
    )
    wanted = {r.index: split_sample(recipe.process(r.data), 1024, 8) for r in docs}
    encoded: list[int] = []  # characters handed to the tokenizer
    searches: list[int] = []  # searches for a place to cut the text (the costly part)
    tok = recipe.tokenizer
    encode_spans = tok.encode_spans_array
    monkeypatch.setattr(
        tok, "encode_spans_array", lambda t, s: encoded.append(len(t)) or encode_spans(t, s)
    )
    search = encode_module.safe_prefix_end
    monkeypatch.setattr(
        encode_module, "safe_prefix_end", lambda *a, **k: searches.append(1) or search(*a, **k)
    )
    order = [(r, k) for r in docs for k in range(len(wanted[r.index]))]
    np.random.default_rng(0).shuffle(order)
    seen: set[int] = set()
    for record, k in order:
        encoded.clear()
        searches.clear()
        got = recipe(record.with_window(k))
        want = wanted[record.index][k]
        assert got["input_ids"].tolist() == want["input_ids"].tolist(), (record.index, k)
        assert got["labels"].tolist() == want["labels"].tolist(), (record.index, k)
        assert (got["window"], got["windows"]) == (k, len(wanted[record.index]))
        text = len(recipe.render(record).text)
        if record.index not in seen:  # the first window seen encodes the whole document
            assert sum(encoded) == text and searches
            seen.add(record.index)
            continue
        chars, tokens, _ = next(
            v for key, v in recipe._restarts._known.items() if key[1] == record.index
        )
        assert not searches  # later ones re-encode the pieces the first one was cut into
        if len(chars) > 1 and (k + 1) * 1016 + 8 <= tokens[1]:
            assert sum(encoded) == chars[1], (record.index, k)  # inside the first piece: it alone
        assert sum(encoded) <= text
    assert len(recipe._restarts) == 2
    # one document was cut, so some windows re-encoded only part of it
    assert any(len(v[0]) > 1 for v in recipe._restarts._known.values())
