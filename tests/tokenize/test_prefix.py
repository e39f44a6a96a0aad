"""safe_prefix_end: a cut whose encoding is exactly the first tokens of the whole text's.

Each case is a text a real corpus holds or a worst case for the pre-tokenizer; the check is
against encoding the whole text, for the real Qwen3 and Llama 3.2 tokenizers.
"""

from __future__ import annotations

import random

import pytest

from chute.tokenize import load_tokenizer
from chute.tokenize.prefix import MIN_PREFIX_CHARS, safe_prefix_end

rng = random.Random(0)
WORDS = ["the", "cat", "sat", "on", "mat", "Über", "naïve", "東京", "don't", "I'll", "x2"]

# name -> (text, whether a cut must be found)
CASES = {
    "words": (" ".join(rng.choice(WORDS) for _ in range(60_000)), True),
    "code": ("def f(x):\n    return x + 1  # comment\n\tif x == '''y''':\n" * 2_000, True),
    "digit_run": ("".join(str(rng.randrange(10)) for _ in range(120_000)), True),
    "emoji": ("🙂👍🏽🎉 " * 20_000, True),
    "cjk_with_punctuation": (
        "".join(
            chr(rng.randrange(0x4E00, 0x9FFF)) + ("，" if i % 17 == 0 else "")
            for i in range(60_000)
        ),
        True,
    ),
    "blank_lines": ("line\n\n\n   \n" * 10_000, True),
    "chat_special_tokens": ("<|im_start|>user\nhi there<|im_end|>\n" * 5_000, True),
    "special_token_lookalikes": ("<|im_start|" + "|im_end|> <| x" * 8_000, True),
    "contractions": ("it's 'll 've 're 'S " * 10_000, True),
    # no safe cut within reach: the whole text must be encoded (None)
    "one_repeated_character": ("x" * 200_000, False),
    "cjk_without_punctuation": (
        "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(100_000)),
        False,
    ),
    "huge_whitespace_run": ("a" + " " * 200_000 + "\nb c", False),
}


@pytest.fixture(
    scope="module",
    params=[("qwen3", "auto"), ("qwen3", "hf"), ("llama3.2", "auto"), ("llama3.2", "hf")],
    ids=lambda p: "-".join(p),
)
def real_tokenizer(request, shared_data):  # type: ignore[no-untyped-def]
    name, backend = request.param
    tok = load_tokenizer(shared_data / "tokenizers" / name, backend=backend)
    # auto: the cut is searched with tiktoken's encodings (prefix._cut_in_window_fast)
    assert tok.engine == ("tiktoken" if backend == "auto" else "tokenizers")
    return tok


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_prefix_is_exactly_the_first_tokens(real_tokenizer, name: str) -> None:
    text, expect_cut = CASES[name]
    full = real_tokenizer.rust.encode(text, add_special_tokens=False).ids  # tokenizers' own
    for need in (1000, 2049):
        cut = safe_prefix_end(real_tokenizer, text, need)
        if cut is None:
            assert not expect_cut, f"{name}: no safe cut found for need={need}"
            continue
        head = real_tokenizer.rust.encode(text[:cut], add_special_tokens=False).ids
        assert len(head) >= need
        assert head == full[: len(head)]
        assert cut < len(text) // 2  # and it is a prefix, not the text


@pytest.mark.shared_data
def test_text_changed_by_normalization_is_encoded_whole(shared_data) -> None:
    qwen = load_tokenizer(shared_data / "tokenizers" / "qwen3")  # NFC normalizer
    decomposed = "e\u0301 " * 30_000  # NFC composes each pair: offsets would move
    assert safe_prefix_end(qwen, decomposed, 1000) is None


def test_short_texts_and_other_backends_are_encoded_whole(tmp_path) -> None:
    from chute.demo.data import write_demo_tokenizer

    tok = load_tokenizer(write_demo_tokenizer(tmp_path / "tok"))
    assert safe_prefix_end(tok, "a short text", 3) is None
    assert safe_prefix_end(object(), "word " * MIN_PREFIX_CHARS, 10) is None  # no rust pipeline
    long = "word " * MIN_PREFIX_CHARS
    cut = safe_prefix_end(tok, long, 100)
    assert cut is not None and tok.encode(long)[: len(tok.encode(long[:cut]))] == tok.encode(
        long[:cut]
    )


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["qwen3", "llama3.2"])
def test_the_split_alone_finds_the_pre_tokenizer_s_starts(shared_data, name: str) -> None:
    from tokenizers import pre_tokenizers

    from chute.tokenize.prefix import _splitting_part

    pre = load_tokenizer(shared_data / "tokenizers" / name, backend="hf").rust.pre_tokenizer
    split = _splitting_part(pre)
    assert isinstance(split, pre_tokenizers.Split)  # the faster part was found
    for text, _ in CASES.values():
        piece = text[:20_000]
        whole = [span for _, span in pre.pre_tokenize_str(piece)]
        assert [span for _, span in split.pre_tokenize_str(piece)] == whole


def test_a_unicode_form_is_not_run_on_ascii_but_other_normalizers_are() -> None:
    from tokenizers import normalizers

    from chute.tokenize.prefix import _changes

    nfc = normalizers.NFC()
    assert not _changes(nfc, "plain ascii " * 100)
    assert _changes(nfc, "e\u0301")  # composes to é
    assert not _changes(None, "anything")
    assert _changes(normalizers.Lowercase(), "ASCII BUT UPPER")  # not a Unicode form: run
