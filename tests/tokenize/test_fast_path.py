"""The tiktoken fast path: what compiles, what is refused and why, checks, fallbacks, the cache."""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from chute.errors import ConfigError, MissingDependency
from chute.tokenize import HFTokenizer, engine, load_tokenizer
from chute.tokenize.compile_tiktoken import NotCompilable, compile_bpe
from chute.tokenize.fast import FastBPE, trie_pattern
from chute.tokenize.verify import PROBES
from recipe_helpers import CORPUS, _rust

# these tests compile tables and look at what the cache keeps:
# in this test's own chute cache, not the run's shared tables (tests/conftest.py)
pytestmark = pytest.mark.fresh_tables

TEXTS = [
    *CORPUS[:5],
    "Hello   world!\n\n\n  x <|im_end|>\n<|im_start|>assistant\n你好，世界",
    "<s>a</s><pad>",
    *PROBES,
]


@pytest.fixture(autouse=True)
def _engine_state() -> Any:
    """Each test starts as a fresh process would (no tables, probes or verdicts in memory)
    and leaves the process's state as it was: a test that turns a fast path off must not turn
    it off for the next, and a verdict an earlier test kept (which skips the checks of the
    first texts) must not decide what these tests see, whatever order the tests run in."""
    saved = (dict(engine._MEMO), dict(engine._PROBED), set(engine._SAID))
    kept = (dict(engine._TABLES), dict(engine._VERDICTS))
    for memo in (engine._MEMO, engine._PROBED, engine._SAID, engine._TABLES, engine._VERDICTS):
        memo.clear()
    yield
    engine._MEMO.clear(), engine._MEMO.update(saved[0])
    engine._PROBED.clear(), engine._PROBED.update(saved[1])
    engine._SAID.clear(), engine._SAID.update(saved[2])
    engine._TABLES.clear(), engine._TABLES.update(kept[0])
    engine._VERDICTS.clear(), engine._VERDICTS.update(kept[1])


def fresh(rust: Tokenizer, backend: str = "auto") -> HFTokenizer:
    return HFTokenizer(Tokenizer.from_str(rust.to_str()), backend=backend)


def spec_of(rust: Tokenizer) -> dict[str, Any]:
    return json.loads(rust.to_str())


def edited(**changes: Any) -> Tokenizer:
    """The tiny byte-level tokenizer with top-level ``tokenizer.json`` keys replaced."""
    spec = spec_of(_rust())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            spec[outer][inner] = value
        else:
            spec[key] = value
    return Tokenizer.from_str(json.dumps(spec))


def every_char(text: str) -> list[tuple[int, int]]:
    return [(c, c + 1) for c in range(len(text))]


def assert_same(fast: HFTokenizer, slow: HFTokenizer, texts: list[str]) -> None:
    for text in texts:
        spans = [(0, len(text)), *every_char(text), (len(text) // 3, len(text) // 2)]
        assert fast.encode_spans(text, spans) == slow.encode_spans(text, spans), text
        assert fast.encode(text) == slow.encode(text), text


# -- what compiles ---------------------------------------------------------------------------


def test_byte_level_bpe_runs_on_tiktoken_with_the_same_ids_and_labels() -> None:
    fast, slow = fresh(_rust()), fresh(_rust(), "hf")
    assert (fast.engine, fast.engine_note) == ("tiktoken", "")
    assert (slow.engine, slow.engine_note) == ("tokenizers", "tokenizer_backend='hf'")
    assert_same(fast, slow, TEXTS)
    # labels come from the same ranges as before
    text = TEXTS[5]
    assert fast.encode_spans(text, [(3, 9)])[1] == slow.encode_spans(text, [(3, 9)])[1]
    assert fast.fingerprint() == slow.fingerprint()


def test_added_tokens_longest_first_and_normalized_ones_after_the_others() -> None:
    rust = Tokenizer.from_str(_rust().to_str())
    rust.add_special_tokens(["<a>", "<a><b>"])
    # "ab" is matched on normalized text, after "bc" (normalized=False) took its characters
    rust.add_tokens([AddedToken("ab", normalized=True), AddedToken("bc", normalized=False)])
    fast, slow = fresh(rust), fresh(rust, "hf")
    assert fast.engine == "tiktoken"
    assert_same(fast, slow, ["<a><b>x<a>", "abc", "zabcab", "<a><a><b><b>", "bcab"])
    assert fast.encode("abc")[-1] == rust.token_to_id("bc")


def test_trie_pattern_is_leftmost_longest() -> None:
    import re

    words = ["<|a|>", "<|ab|>", "<|a", "x"]
    rx = re.compile(trie_pattern(words))
    assert rx.findall("<|ab|><|a|><|a><|x") == ["<|ab|>", "<|a|>", "<|a", "x"]


def test_nfc_normalizer_hands_other_texts_to_tokenizers() -> None:
    rust = Tokenizer.from_str(_rust().to_str())
    rust.normalizer = normalizers.NFC()
    fast, slow = fresh(rust), fresh(rust, "hf")
    assert fast.engine == "tiktoken"
    decomposed = "Cafe\u0301 cre\u0300me"  # not NFC: tokenizers composes it, offsets move
    compiled = fast._fast
    assert compiled is not None and compiled.encode(decomposed) is None
    assert_same(fast, slow, [decomposed, "Café crème", "e\u0301" * 5])


def test_tokens_their_merges_never_build_are_left_out() -> None:
    spec = spec_of(_rust())
    before = compile_bpe(spec).left_out  # the special tokens the trainer put in the vocabulary
    vocab = spec["model"]["vocab"]
    vocab["Hellothere"] = max(vocab.values()) + 1  # in the vocabulary, built by no merge
    rust = Tokenizer.from_str(json.dumps(spec))
    tables = compile_bpe(spec)
    assert tables.left_out == before + 1 and b"Hellothere" not in tables.ranks
    fast, slow = fresh(rust), fresh(rust, "hf")
    assert fast.engine == "tiktoken"
    assert_same(fast, slow, ["Hellothere", "Hellothere!", " Hellothere there"])
    # with ignore_merges, tokenizers would give it whole for that pre-token: refused
    spec["model"]["ignore_merges"] = True
    with pytest.raises(NotCompilable, match="not produced by their own merges.*ignore_merges"):
        compile_bpe(spec)


# -- what is refused, and why ----------------------------------------------------------------


def _wordlevel() -> Tokenizer:
    rust = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    rust.pre_tokenizer = pre_tokenizers.Whitespace()
    return rust


def _metaspace_bpe() -> Tokenizer:
    rust = Tokenizer(models.BPE(byte_fallback=True))
    rust.pre_tokenizer = pre_tokenizers.Metaspace()
    rust.decoder = decoders.Metaspace()
    rust.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    return rust


def _swapped_ids() -> Tokenizer:
    spec = spec_of(_rust())
    vocab = spec["model"]["vocab"]
    a, b = (
        "".join(m) if isinstance(m, list) else m.replace(" ", "")
        for m in spec["model"]["merges"][:2]
    )
    vocab[a], vocab[b] = vocab[b], vocab[a]
    return Tokenizer.from_str(json.dumps(spec))


REFUSED = {
    "the model is WordLevel, not byte-level BPE": _wordlevel,
    "byte_fallback": _metaspace_bpe,
    "the normalizer Lowercase is not a Unicode normal form": lambda: edited(
        normalizer={"type": "Lowercase"}
    ),
    "adds a prefix space": lambda: edited(
        pre_tokenizer={
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": False,
            "use_regex": True,
        }
    ),
    "post-processor trims offsets": lambda: edited(
        post_processor={
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        }
    ),
    "sets truncation": lambda: edited(
        truncation={"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
    ),
    "merges not in id order": _swapped_ids,
}


@pytest.mark.parametrize("reason", list(REFUSED))
def test_what_does_not_compile_says_why_and_keeps_tokenizers(
    reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    rust = REFUSED[reason]()
    with caplog.at_level(logging.INFO, logger="chute.tokenize"):
        tok = fresh(rust)
    assert tok.engine == "tokenizers" and reason in tok.engine_note
    said = [r for r in caplog.records if r.name == "chute.tokenize"]
    assert len(said) == 1 and said[0].levelno == logging.INFO and reason in said[0].getMessage()
    with pytest.raises(ConfigError, match=f"cannot run on tiktoken: .*{reason}.*tokenizer_backend"):
        fresh(rust, "tiktoken")


def test_lstrip_added_token_is_refused() -> None:
    rust = Tokenizer.from_str(_rust().to_str())
    rust.add_special_tokens([AddedToken("<mask>", lstrip=True)])
    tok = fresh(rust)
    assert tok.engine == "tokenizers" and "'<mask>' has lstrip set" in tok.engine_note


def test_backend_values_and_places(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tokenizer_backend: expected one of auto, hf, tiktoken"):
        load_tokenizer(_rust(), backend="fast")
    tiny = tmp_path / "tok"
    tiny.mkdir()
    (tiny / "tokenizer.json").write_text(_rust().to_str())
    assert load_tokenizer(tiny, backend="hf").engine == "tokenizers"
    assert load_tokenizer(tiny / "tokenizer.json", backend="tiktoken").engine == "tiktoken"
    ready = load_tokenizer(tiny)
    assert load_tokenizer(ready, backend="auto") is ready
    with pytest.raises(ConfigError, match="cannot change the engine of a ready chute Tokenizer"):
        load_tokenizer(ready, backend="hf")


def test_without_tiktoken_auto_keeps_tokenizers(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise MissingDependency("needs tiktoken: pip install 'chute[tiktoken]'")

    monkeypatch.setattr(engine, "import_tiktoken", missing)
    tok = fresh(_rust())
    assert tok.engine == "tokenizers" and "chute[tiktoken]" in tok.engine_note
    with pytest.raises(MissingDependency, match=r"chute\[tiktoken\]"):
        fresh(_rust(), "tiktoken")


# -- checks and fallbacks --------------------------------------------------------------------


def test_a_difference_on_user_data_turns_the_fast_path_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tok, slow = fresh(_rust()), fresh(_rust(), "hf")
    real = FastBPE._encode

    def wrong(self: FastBPE, text: str) -> Any:
        ids, *where = real(self, text)
        return ((ids[::-1] if "fox" in text else ids), *where)

    monkeypatch.setattr(FastBPE, "_encode", wrong)
    assert tok.encode_spans("hello", [(0, 2)]) == slow.encode_spans("hello", [(0, 2)])
    with caplog.at_level(logging.WARNING, logger="chute.tokenize"):
        text = "The quick brown fox jumps"
        assert tok.encode_spans(text, [(4, 9)]) == slow.encode_spans(text, [(4, 9)])
    assert tok.engine == "tokenizers" and "fox" in tok.engine_note
    assert "differs from tokenizers on the input 'The quick brown fox jumps'" in caplog.text
    # the tokenizer travels with the fast path off
    assert pickle.loads(pickle.dumps(tok)).engine == "tokenizers"
    # and another tokenizer of the same file in this process does not take it either
    assert fresh(_rust()).engine == "tokenizers"


def test_only_the_first_texts_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from chute.tokenize import hf

    tok = fresh(_rust())
    calls = []
    real = tok._tok.encode
    monkeypatch.setattr(tok, "_tok", _Spy(tok._tok, calls))
    for _ in range(hf.SHADOW_CHECKS + 10):
        tok.encode("Hello there")
    assert len(calls) == hf.SHADOW_CHECKS
    assert real("x").ids == tok._tok.encode("x").ids


class _Spy:
    def __init__(self, rust: Tokenizer, calls: list[str]):
        self._rust, self._calls = rust, calls

    def encode(self, text: str, **kw: Any) -> Any:
        self._calls.append(text)
        return self._rust.encode(text, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rust, name)


def test_a_probe_that_differs_keeps_tokenizers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(engine, "check_probes", lambda rust, fast, added: "Straße ẞ")
    engine._PROBED.clear()
    engine._SAID.clear()
    with caplog.at_level(logging.WARNING, logger="chute.tokenize"):
        tok = fresh(_rust())
    assert tok.engine == "tokenizers"
    assert "tiktoken fast path off, it differs from tokenizers on the probe 'Straße ẞ'" in (
        caplog.text
    )
    with pytest.raises(ConfigError, match="differs from tokenizers on the probe"):
        fresh(_rust(), "tiktoken")


def test_compiled_once_then_read_from_the_cache(
    monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    engine._MEMO.clear()
    fresh(_rust())
    kept = list((cache_dir / "tokenizers").glob("*.npz"))
    assert len(kept) == 1
    engine._MEMO.clear()

    def no_compile(spec: Any) -> Any:
        raise AssertionError("compiled again")

    monkeypatch.setattr(engine, "compile_bpe", no_compile)
    tok, slow = fresh(_rust()), fresh(_rust(), "hf")
    assert tok.engine == "tiktoken"
    assert_same(tok, slow, TEXTS[:8])
    # an unreadable entry is compiled again
    kept[0].write_bytes(b"not an npz")
    engine._MEMO.clear()
    monkeypatch.undo()
    assert fresh(_rust()).engine == "tiktoken"


def test_pickled_tokenizer_takes_the_fast_path_again() -> None:
    tok = fresh(_rust())
    back = pickle.loads(pickle.dumps(tok))
    assert back.engine == "tiktoken" and back.encode(TEXTS[5]) == tok.encode(TEXTS[5])
    hf = pickle.loads(pickle.dumps(fresh(_rust(), "hf")))
    assert hf.engine == "tokenizers"


def test_lone_surrogates_fail_as_before() -> None:
    tok = fresh(_rust())
    with pytest.raises(TypeError):
        tok.encode("a\ud800b")


def test_backend_of_other_tokenizer_kinds(tmp_path: Path) -> None:
    import base64

    bpe = tmp_path / "bytes.tiktoken"
    bpe.write_text("".join(f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)))
    tok = load_tokenizer(bpe, tiktoken_pattern="gpt2", backend="tiktoken")
    assert (tok.backend, tok.engine) == ("tiktoken", "tiktoken")
    with pytest.raises(
        ConfigError, match="tokenizer_backend='hf' chooses the engine of a tokenizer"
    ):
        load_tokenizer(bpe, tiktoken_pattern="gpt2", backend="hf")


def test_backend_in_config_and_on_the_command_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from chute.cache.config import RecipeConfig
    from chute.cli import app

    with pytest.raises(ConfigError, match="tokenizer_backend: expected one of auto, hf, tiktoken"):
        RecipeConfig(tokenizer="t", tokenizer_backend="fast")
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(_rust().to_str())
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"instruction": "Hello there", "output": "How are you?"}) + "\n")
    runner = CliRunner()
    base = ["inspect", str(data), "--tokenizer", str(folder), "--template", "chatml"]
    fast = runner.invoke(app, base)
    assert fast.exit_code == 0 and "tokenizer: tiktoken" in fast.stdout
    slow = runner.invoke(app, [*base, "--tokenizer-backend", "hf", "--json"])
    assert json.loads(slow.stdout)["tokenizer_engine"] == "tokenizers"
    bad = runner.invoke(app, [*base, "--tokenizer-backend", "fast"])
    assert bad.exit_code == 2 and "--tokenizer-backend: expected one of auto, hf, tiktoken" in (
        bad.stderr
    )


def test_many_spans_at_once_find_the_tokens_one_span_at_a_time_finds() -> None:
    """Above a few spans the lookup is vectorised over the whole text; below, walked per part."""
    fast, slow = fresh(_rust()), fresh(_rust(), "hf")
    for text in [*TEXTS, "é" * 40 + "<s>" + "你好" * 30 + " x😀y", "a" * 700]:
        spans = [*every_char(text), (0, len(text)), (5, 3), (len(text) - 1, len(text) + 9)]
        ids, many = fast.encode_spans(text, spans)
        one_by_one = [fast.encode_spans(text, [s])[1][0] for s in spans]
        assert many == one_by_one == slow.encode_spans(text, spans)[1], text
        assert ids == slow.encode(text)


def test_ids_as_an_array_are_the_ids_of_the_list_api_and_may_be_written() -> None:
    """``encode_spans_array`` (tiktoken's native buffer) gives what ``encode_spans`` gives."""
    fast, slow = fresh(_rust()), fresh(_rust(), "hf")
    fast._checks_left = 0  # past the first texts, which are checked through the list API
    for text in [*TEXTS, "", "<s>", "a" * 700 + "<s>" + "你好" * 200]:
        spans = [(0, len(text)), (len(text) // 3, len(text) - 1)]
        for tok in (fast, slow):
            ids, ranges = tok.encode_spans_array(text, spans)
            assert ids.dtype == np.int32 and ids.flags.writeable
            assert (ids.tolist(), ranges) == slow.encode_spans(text, spans), text
    kept = fast.encode_spans_array("\n", [])[0]  # short parts are kept: a copy goes out
    kept[:] = 0
    assert fast.encode("\n") == slow.encode("\n")
