r"""Rendered text -> ``input_ids`` and ``labels``, with media tokens expanded; ``max_length``.

The rendered text is encoded once; a token is trained when any of its characters lies in a
trained span (the tokenizer maps each span's first and last character to tokens) (so every trained character is covered, and a token that
straddles a span edge, rare with real templates, counts as trained). The ids are therefore
exactly ``tokenizer.encode(rendered_text)``.

Media: the text holds one media token per item (``<|image_pad|>``, ``<image>``); the text is cut
at those tokens, each piece encoded, and each item becomes ``count`` copies of its token id
(a Qwen3-VL video: its frame groups with their timestamps, ``chute.media.video_layout``).
When the media token is one special token of the tokenizer (Qwen's ``<|image_pad|>``) this is
identical to encoding the whole text; when it is not (``<image>`` with a Llama-2 vocabulary) it
is LLaVA's rule (text on both sides encoded separately). Media tokens are never trained::

    text   : <|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>...
    ids    : 151644 872 198 151652 [151655 x 66] 151653 13048 151645 ...
    labels : -100   -100 ... -100  [-100   x 66] -100   -100  -100   ...

Truncation (``overflow="truncate"``) keeps the first ``max_length`` tokens, moving the cut to
the start of an image it would split (``truncation="left"``: the last ones, the cut moved past
the image); ``overflow="drop"`` rejects the sample (``too_long``); ``overflow="split"`` keeps it
whole for ``chute.recipe.windows`` to cut into windows.

Example:
    >>> from chute.templates.base import Rendered
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from chute.tokenize import HFTokenizer
    >>> vocab = {"[UNK]": 0, "a": 1, "b": 2, "c": 3}
    >>> rust = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    >>> rust.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> enc = encode(Rendered("a b c", [(4, 5)], []), HFTokenizer(rust), {})
    >>> enc.ids.tolist(), enc.labels.tolist()
    ([1, 2, 3], [-100, -100, 3])
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute._internal.spelling import spell, spell_set
from chute.errors import SampleError
from chute.media.refs import MediaSlot
from chute.recipe.outcome import (
    NOTHING_TRAINED,
    TOO_LONG,
    TRUNCATED,
    first_trained,
    overflow_outcome,
)
from chute.templates.base import Rendered
from chute.tokenize.base import Tokenizer
from chute.tokenize.prefix import safe_prefix_end

__all__ = [
    "Encoded",
    "MediaSlot",
    "check_guard",
    "encode",
    "encode_piece",
    "fit_length",
]

IGNORE = -100


@dataclass(slots=True)
class Encoded:
    """Token ids, labels, and media entries (each with ``span`` = [start, end) in ``ids``)."""

    ids: np.ndarray
    labels: np.ndarray
    media: list[dict[str, Any]]
    truncated: bool = False
    # False when encoding stopped once what is kept was known (encode(need=)): the text has
    # more tokens than ``ids``
    complete: bool = True
    # a window of a document (encode(keep=)): where ids[0] lies in the whole encoding, and the
    # whole encoding's length
    offset: int = 0
    total: int | None = None
    # the position of the first trained token where encoding knew it (else read from labels)
    first: int | None = None


def _labels(ids: np.ndarray, ranges: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(ids, dtype=np.int32)
    labels = np.full(len(arr), IGNORE, dtype=np.int32)
    for first, end in ranges:
        labels[first:end] = arr[first:end]
    return arr, labels


def encode_piece(
    tok: Tokenizer, text: str, spans: list[tuple[int, int]], lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """Ids and labels of ``text[lo:hi]``; ``spans`` are in whole-text coordinates."""
    piece = text[lo:hi]
    if not piece:
        empty = np.empty(0, dtype=np.int32)
        return empty, empty
    local = [(max(a, lo) - lo, min(b, hi) - lo) for a, b in spans if a < hi and b > lo]
    if tok.supports_offsets:
        return _labels(*tok.encode_spans_array(piece, local))
    # No offsets (slow transformers tokenizers): encode the piece cut at span edges. Tokens
    # cannot merge across a cut, so ids may differ from whole-text encoding at those edges.
    cuts = sorted({0, len(piece), *(x for s in local for x in s)})
    all_ids: list[int] = []
    label_list: list[int] = []
    for a, b in itertools.pairwise(cuts):
        seg = tok.encode(piece[a:b])
        trained = any(s <= a and b <= e for s, e in local)
        all_ids.extend(seg)
        label_list.extend(seg if trained else [IGNORE] * len(seg))
    return np.array(all_ids, dtype=np.int32), np.array(label_list, dtype=np.int32)


# A long text is encoded in pieces of about this many tokens, cut where the tokenizer cannot merge
# across (chute.tokenize.prefix): peak memory follows the piece, not the document.
PIECE_TOKENS = 8192


def _encode_stream(
    tok: Tokenizer,
    text: str,
    spans: list[tuple[int, int]],
    lo: int,
    hi: int,
    need: int | None = None,
    keep: tuple[int, int] | None = None,
    marks: list[tuple[int, int]] | None = None,
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """``encode_piece`` of ``text[lo:hi]`` for a text of any size, in bounded memory.

    Args:
        tok: the tokenizer.
        text: the whole rendered text.
        spans: trained character spans, in whole-text coordinates.
        lo: where the piece starts in ``text``.
        hi: where it ends.
        need: stop once this many tokens are known (the caller keeps no more).
        keep: keep only tokens ``[a, b)`` of the piece; the others are counted, not kept.
        marks: if given, ``(character, tokens before it)`` of each place the text was cut is
            appended (``lo`` first): encoding may start again at any of them with the same
            tokens after it (``chute.recipe.restarts``).

    Returns:
        ``(ids, labels, tokens, complete)``: the kept tokens, how many tokens were encoded, and
        whether the whole piece was (``False`` when ``need`` or ``keep`` stopped it early).
    """
    stop_at = need  # with keep, the rest is still counted (a window says how many there are)
    id_parts: list[np.ndarray] = []
    label_parts: list[np.ndarray] = []
    n = 0
    pos = lo
    while pos < hi:
        if marks is not None:
            marks.append((pos, n))
        budget = PIECE_TOKENS if stop_at is None else max(1, min(PIECE_TOKENS, stop_at - n))
        cut = safe_prefix_end(tok, text, budget, pos, hi)
        end = hi if cut is None else cut
        ids, labels = encode_piece(tok, text, spans, pos, end)
        if keep is not None:
            a, b = max(keep[0] - n, 0), max(min(keep[1] - n, len(ids)), 0)
            id_parts.append(ids[a:b])
            label_parts.append(labels[a:b])
        else:
            id_parts.append(ids)
            label_parts.append(labels)
        n += len(ids)
        pos = end
        if stop_at is not None and n >= stop_at:
            break
    if not id_parts:
        empty = np.empty(0, dtype=np.int32)
        return empty, empty, 0, True
    ids = id_parts[0] if len(id_parts) == 1 else np.concatenate(id_parts)
    labels = label_parts[0] if len(label_parts) == 1 else np.concatenate(label_parts)
    return ids, labels, n, pos >= hi


def encode(
    rendered: Rendered,
    tokenizer: Tokenizer,
    media_tokens: dict[str, str],
    slots: list[MediaSlot] | None = None,
    guard: tuple[str, ...] = (),
    pre: tuple[np.ndarray, list[tuple[int, int]]] | None = None,
    need: int | None = None,
    keep: tuple[int, int] | None = None,
    marks: list[tuple[int, int]] | None = None,
) -> Encoded:
    """Encode ``rendered``; expand its media tokens into ``slots`` (one per media part, in order).

    Args:
        rendered: text, trained spans, media parts.
        tokenizer: the tokenizer.
        media_tokens: kind -> the token string that marks one item in the text.
        slots: the expansion of each media part of ``rendered.media``.
        guard: media tokens that are special tokens of the tokenizer: a text-only sample that
            contains one literally is rejected (the model would look for an image there).
        pre: for a sample without media, ``tokenizer.encode_spans_array(text, spans)`` done
            (``Recipe.batch`` encodes many texts back to back first).
        need: only the first ``need`` tokens matter (``max_length + 1`` when the rest would be
            cut): encoding may stop there, so a huge record costs what is kept.
        keep: a sample without media: keep only tokens ``[a, b)`` (a window of a long
            document); ``Encoded.offset`` is ``a`` and ``Encoded.total`` the whole count.
        marks: a sample without media encoded in pieces: where it was cut (``_encode_stream``).

    Raises:
        SampleError: ``image_placeholder_mismatch`` when the text's media tokens do not match
            the media parts (e.g. the user text contains ``<|image_pad|>`` literally).
    """
    text, spans = rendered.text, rendered.spans
    if not rendered.media:
        check_guard(text, guard)
        if pre is not None:
            ids, labels = _labels(*pre)
            first = len(ids)  # the first trained token: the earliest start of a non-empty range
            for a, b in pre[1]:
                if a < first and a < b:
                    first = a
            return Encoded(ids, labels, [], first=first)
        ids, labels, n, complete = _encode_stream(
            tokenizer, text, spans, 0, len(text), need, keep, marks
        )
        if keep is not None:
            return Encoded(ids, labels, [], offset=keep[0], total=n if complete else None)
        return Encoded(ids, labels, [], complete=complete)
    slots = slots or []
    kinds = {tok: kind for kind, tok in media_tokens.items()}
    pattern = re.compile("|".join(re.escape(t) for t in sorted(kinds, key=len, reverse=True)))
    found = list(pattern.finditer(text))
    expected = [p.kind for p in rendered.media]
    if [kinds[m.group()] for m in found] != expected:
        _literal_media_token(text, media_tokens, len(expected), found, expected)
    id_parts: list[np.ndarray] = []
    label_parts: list[np.ndarray] = []
    media: list[dict[str, Any]] = []
    pos = 0
    n = 0
    complete = True
    for m, slot in zip(found, slots, strict=True):
        rest = None if need is None else need - n
        ids, labels, _, complete = _encode_stream(tokenizer, text, spans, pos, m.start(), rest)
        id_parts.append(ids)
        label_parts.append(labels)
        n += len(ids)
        if not complete or (need is not None and n >= need):
            complete = False
            break  # what follows lies past the tokens kept
        # count copies of the token, or the item's own expansion (a Qwen3-VL video)
        ids = slot.ids if slot.ids is not None else np.full(slot.count, slot.token_id, np.int32)
        id_parts.append(ids)
        label_parts.append(np.full(len(ids), IGNORE, dtype=np.int32))
        media.append(_shifted({"kind": slot.kind, **slot.info, "span": [0, len(ids)]}, n))
        n += len(ids)
        pos = m.end()
    else:
        rest = None if need is None else need - n
        if rest is None or rest > 0:
            ids, labels, _, complete = _encode_stream(tokenizer, text, spans, pos, len(text), rest)
            id_parts.append(ids)
            label_parts.append(labels)
            n += len(ids)
        else:
            complete = pos >= len(text)
    return Encoded(np.concatenate(id_parts), np.concatenate(label_parts), media, complete=complete)


def check_guard(text: str, guard: tuple[str, ...]) -> None:
    """Reject a text-only sample holding a media token that is a special token (``guard``)."""
    for token in guard:
        if token in text:
            _literal_media_token(text, {"": token}, 0)


def _count(enc: Encoded) -> str:
    """The sample's token count for messages: exact, or a lower bound when encoding stopped."""
    n = len(enc.ids)
    return str(n) if enc.complete else f"over {n - 1}"


def _literal_media_token(
    text: str,
    media_tokens: dict[str, str],
    n_media: int,
    found: list[Any] | None = None,
    expected: list[str] | None = None,
) -> None:
    if found is None:
        token = next(t for t in media_tokens.values() if t in text)
        raise SampleError(
            "image_placeholder_mismatch",
            f"the rendered text contains the media token {token!r} {text.count(token)} time(s) "
            f"but the record has no media; remove it from the text (or set "
            f"{spell('placeholders')} if it "
            f"marks an image)",
        )
    got = [m.group() for m in found]
    raise SampleError(
        "image_placeholder_mismatch",
        f"the rendered text has media tokens {got[:6]}{'...' if len(got) > 6 else ''} but the "
        f"record has {n_media} media ({', '.join(expected or [])}); a media token written "
        f"literally in the text cannot be told apart from a real one",
    )


def fit_length(
    enc: Encoded, max_length: int | None, overflow: str, truncation: str = "right"
) -> Encoded:
    """Apply ``max_length``: keep, cut (never inside a media item), reject, or leave for splitting.

    ``chute.recipe.outcome.overflow_outcome`` decides, as it does for ``chute stats``.

    Args:
        enc: the encoded sample.
        max_length: the limit (``None``: none).
        overflow: ``truncate``, ``drop`` or ``split`` (the whole sample is kept; the caller
            cuts it into windows, see ``chute.recipe.windows``).
        truncation: with ``truncate``: ``right`` keeps the first ``max_length`` tokens,
            ``left`` the last ones (``turns`` is handled before, on the conversation; what is
            still too long then is cut on the right).

    Raises:
        SampleError: ``too_long`` (``overflow="drop"``, or a sample with media that
            ``overflow="split"`` would have to cut); ``no_trainable_tokens`` when nothing is
            left to train on (checked with or without truncation).
    """
    n = len(enc.ids)
    over = max_length is not None and n > max_length
    if overflow == "split":
        if over and enc.media:
            raise SampleError(
                "too_long",
                f"{n} tokens with {len(enc.media)} media item(s), more than "
                f"{spell_set('max_length', max_length)}; {spell_set('overflow', 'split')} cuts "
                f"documents into windows of text only (a window must not cut an image apart): "
                f"raise {spell('max_length')}, or use {spell_set('overflow', 'truncate')} for "
                f"such data",
            )
        max_length = None  # the whole sample is kept: windows are cut from it later
    if over and overflow == "truncate" and truncation == "left" and max_length is not None:
        enc = _keep_end(enc, n - max_length)
        if first_trained(enc.labels) >= len(enc.ids):
            raise SampleError(
                "no_trainable_tokens",
                f"truncation to the last {spell_set('max_length', max_length)} tokens "
                f"({spell_set('truncation', 'left')}) cut every trained token; raise "
                f"{spell('max_length')}, or use {spell_set('overflow', 'drop')} to skip such "
                f"samples",
            )
        return enc
    first = enc.first if enc.first is not None else first_trained(enc.labels)
    outcome = overflow_outcome(n, first, max_length, overflow)
    if outcome == TOO_LONG:
        raise SampleError(
            "too_long",
            f"{_count(enc)} tokens, more than {spell_set('max_length', max_length)} "
            f"({spell_set('overflow', 'drop')}); raise {spell('max_length')} or use "
            f"{spell_set('overflow', 'truncate')}",
        )
    if outcome == NOTHING_TRAINED:
        if max_length is not None and n > max_length:
            why = f"truncation to {spell_set('max_length', max_length)} cut every trained token"
            fix = (
                f"raise {spell('max_length')}, or use {spell_set('overflow', 'drop')} to skip "
                f"such samples"
            )
        else:
            why = "no token is trained (no assistant turn, or every turn has loss off)"
            fix = f"check the roles, or use {spell_set('train_on', 'all')}"
        raise SampleError("no_trainable_tokens", f"{why}; {fix}")
    if outcome == TRUNCATED:
        cut = max_length if max_length is not None else n  # TRUNCATED: n > max_length
        for item in enc.media:
            start, end = item["span"]
            if start < cut < end:
                cut = start
                break
        enc = Encoded(
            enc.ids[:cut].copy(),
            enc.labels[:cut].copy(),
            [m for m in enc.media if m["span"][1] <= cut],
            truncated=True,
        )
    return enc


def _keep_end(enc: Encoded, cut: int) -> Encoded:
    """Drop the first ``cut`` tokens, moving the cut forward past a media item it would split."""
    for item in enc.media:
        start, end = item["span"]
        if start < cut < end:
            cut = end
    media = [_shifted(item, -cut) for item in enc.media if item["span"][0] >= cut]
    return Encoded(enc.ids[cut:].copy(), enc.labels[cut:].copy(), media, truncated=True)


def _shifted(item: dict[str, Any], by: int) -> dict[str, Any]:
    """A media entry whose token spans (``span``, a video's ``frame_spans``) moved by ``by``."""
    a, b = item["span"]
    out = {**item, "span": [a + by, b + by]}
    if item.get("frame_spans") is not None:
        out["frame_spans"] = [[a + by, b + by] for a, b in item["frame_spans"]]
    return out
