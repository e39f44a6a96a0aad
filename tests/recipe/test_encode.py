"""Encoding rendered text: labels from character spans, media expansion, max_length."""

from __future__ import annotations

import numpy as np
import pytest

from chute.errors import SampleError
from chute.recipe.encode import Encoded, MediaSlot, encode, fit_length
from chute.sample.conversation import Part
from chute.templates.base import Rendered
from recipe_helpers import tiny_tokenizer

TOK = tiny_tokenizer()
IMG = TOK.token_to_id("<|image_pad|>")


def decode_trained(enc: Encoded) -> str:
    return TOK.decode(enc.ids[enc.labels != -100].tolist())


def test_ids_are_whole_text_encoding_and_labels_follow_spans() -> None:
    text = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\nI am fine<|im_end|>\n"
    start = text.index("I am")
    end = text.index("<|im_end|>", start) + len("<|im_end|>")
    enc = encode(Rendered(text, [(start, end)], []), TOK, {})
    assert enc.ids.dtype == np.int32 and enc.labels.dtype == np.int32
    assert enc.ids.tolist() == TOK.encode(text)
    assert decode_trained(enc) == "I am fine<|im_end|>"
    assert (enc.labels[enc.labels != -100] == enc.ids[enc.labels != -100]).all()


def test_a_token_straddling_a_span_edge_is_trained() -> None:
    text = "Hello there"
    enc = encode(Rendered(text, [(8, 11)], []), TOK, {})  # span starts inside a token
    assert decode_trained(enc).endswith("ere")
    ids, offsets = TOK.encode_with_offsets(text)
    straddler = next(k for k, (a, b) in enumerate(offsets) if a < 8 < b)
    assert enc.labels[straddler] == ids[straddler]


def test_media_tokens_expand_and_are_never_trained() -> None:
    text = "<s>look <|vision_start|><|image_pad|><|vision_end|> and <|image_pad|> ok</s>"
    r = Rendered(text, [(0, len(text))], [Part("image", "a.png"), Part("image", "b.png")])
    slots = [MediaSlot("image", IMG, 3, {"path": "a"}), MediaSlot("image", -200, 2, {"path": "b"})]
    enc = encode(r, TOK, {"image": "<|image_pad|>"}, slots)
    (s1, e1), (s2, e2) = enc.media[0]["span"], enc.media[1]["span"]
    assert enc.ids[s1:e1].tolist() == [IMG] * 3 and enc.ids[s2:e2].tolist() == [-200] * 2
    assert (enc.labels[s1:e1] == -100).all() and (enc.labels[s2:e2] == -100).all()
    assert enc.media[0]["path"] == "a" and e1 - s1 == 3
    # With one token per image and a special image token, ids equal whole-text encoding.
    one = encode(
        r, TOK, {"image": "<|image_pad|>"}, [MediaSlot("image", IMG, 1), MediaSlot("image", IMG, 1)]
    )
    assert one.ids.tolist() == TOK.encode(text)


def test_media_token_count_must_match_the_media() -> None:
    r = Rendered("a <|image_pad|> b <|image_pad|>", [], [Part("image", "x")])
    with pytest.raises(
        SampleError, match="image_placeholder_mismatch: the rendered text has media tokens"
    ):
        encode(r, TOK, {"image": "<|image_pad|>"}, [MediaSlot("image", IMG, 1)])
    literal = Rendered("text with <|image_pad|> written in it", [(0, 4)], [])
    with pytest.raises(SampleError, match="contains the media token '<\\|image_pad\\|>' 1 time"):
        encode(literal, TOK, {"image": "<|image_pad|>"}, guard=("<|image_pad|>",))
    # A media token that is not a special token of the vocabulary is plain text without media.
    assert encode(literal, TOK, {"image": "<image>"}).ids.tolist() == TOK.encode(literal.text)


def make(n_before: int, n_image: int, n_after: int, trained_after: bool = True) -> Encoded:
    ids = np.arange(n_before + n_image + n_after, dtype=np.int32)
    labels = np.full(len(ids), -100, dtype=np.int32)
    if trained_after:
        labels[n_before + n_image :] = ids[n_before + n_image :]
    media = [{"span": [n_before, n_before + n_image], "num_tokens": n_image}] if n_image else []
    return Encoded(ids, labels, media)


def test_truncate_keeps_the_start_and_never_splits_an_image() -> None:
    enc = fit_length(make(5, 0, 10), 8, "truncate")
    assert enc.truncated and len(enc.ids) == 8 and enc.ids.tolist() == list(range(8))
    # The cut would split the image (tokens 4..9): the image goes, whole.
    enc = Encoded(np.arange(20, dtype=np.int32), np.arange(20, dtype=np.int32), [{"span": [4, 10]}])
    cut = fit_length(enc, 7, "truncate")
    assert len(cut.ids) == 4 and cut.media == []
    # An image that ends before the cut stays.
    kept = fit_length(enc, 12, "truncate")
    assert len(kept.ids) == 12 and kept.media == [{"span": [4, 10]}]
    assert fit_length(make(5, 0, 10), 15, "truncate").truncated is False


def test_drop_and_no_trainable_tokens() -> None:
    with pytest.raises(
        SampleError, match=r"too_long: 15 tokens, more than max_length=8 \(overflow='drop'\)"
    ):
        fit_length(make(5, 0, 10), 8, "drop")
    with pytest.raises(
        SampleError, match="no_trainable_tokens: truncation to max_length=4 cut every trained token"
    ):
        fit_length(make(5, 0, 10), 4, "truncate")
    with pytest.raises(SampleError, match="no_trainable_tokens: no token is trained"):
        fit_length(make(5, 0, 10, trained_after=False), None, "truncate")


def test_tokenizer_without_offsets_encodes_pieces() -> None:
    class NoOffsets(type(TOK)):  # type: ignore[misc]
        supports_offsets = False

    tok = NoOffsets(TOK.rust, special=TOK.special)
    text = "<|im_start|>user\nHi<|im_end|><|im_start|>assistant\nYes<|im_end|>"
    start = text.index("Yes")
    enc = encode(Rendered(text, [(start, len(text))], []), tok, {})
    assert TOK.decode(enc.ids.tolist()) == text
    assert TOK.decode(enc.ids[enc.labels != -100].tolist()) == "Yes<|im_end|>"
