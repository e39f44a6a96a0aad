r"""Encode only what is kept: the first tokens of a long text, identical to encoding all of it.

A recipe that keeps ``max_length`` tokens should not tokenize a 50 MB document whole. This module
finds a cut ``c`` in the text such that ``encode(text[:c])`` is exactly the first tokens of
``encode(text)``, encoding only a window a small multiple of the tokens needed.

Why a cut can be exact. A ``tokenizers`` pipeline splits the text into *pre-tokens* (added tokens
first, then the pre-tokenizer's regex) and runs BPE inside each pre-token alone; no merge
crosses a pre-token boundary. So if the text is cut where a pre-token starts, every pre-token
before the cut is the same in the prefix as in the whole text, and so are their tokens, provided
the splitting up to the cut does not depend on what lies after it. The GPT-style split patterns
(GPT-2, Llama 3, Qwen2/3) decide each match from the characters it covers plus at most a couple
beyond (``\s+(?!\S)`` looks one character ahead; a greedy run stops at the first character
outside it), and the normalizers in use (NFC, or none) act within a character and what combines
with it. A cut is therefore taken only where:

1. a pre-token (or added token) starts: the encoding's ``word_ids`` change there;
2. at least one complete pre-token follows it inside the window, so no run the regex read
   around the cut reaches the window's end;
3. the window is unchanged by normalization (its characters are already NFC), so character
   offsets mean the same before and after;
4. and it is checked, not only argued: ``encode(text[:c])`` must equal the window's tokens before
   ``c``, and so must the tokens of a second window twice as long.

Where no such cut exists within reach (one pre-token longer than the window, e.g. a run of one
repeated character, CJK text without any punctuation, a whitespace run of thousands of
characters; text that normalization changes; a backend that gives no pre-token boundaries),
``None`` is returned and the caller encodes the whole text, as before: exactness first. The search
itself is bounded (windows up to 256 characters per needed token), so giving up costs little.

Example:
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from chute.tokenize.hf import HFTokenizer
    >>> vocab = {"[UNK]": 0, "a": 1, "b": 2}
    >>> rust = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    >>> rust.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok = HFTokenizer(rust)
    >>> text = "a b " * 20_000
    >>> cut = safe_prefix_end(tok, text, need=10)
    >>> cut is not None and cut < 200
    True
    >>> tok.encode(text[:cut]) == tok.encode(text)[: len(tok.encode(text[:cut]))]
    True
"""

from __future__ import annotations

import json
from bisect import bisect_left
from typing import Any

__all__ = ["MIN_PREFIX_CHARS", "safe_prefix_end"]

# Below this many characters a text is encoded whole: the search would cost more than it saves.
MIN_PREFIX_CHARS = 1 << 15
# First window: this many characters per token needed (English averages ~4, code ~3, CJK ~1.5);
# too small a window only costs a doubling.
_CHARS_PER_TOKEN = 6
# The search gives up when the window passes this many characters per needed token.
_MAX_CHARS_PER_TOKEN = 256
# Pre-token starts tried in one window before a larger one is tried (each costs an encode).
_MAX_CANDIDATES = 4


def safe_prefix_end(
    tokenizer: Any, text: str, need: int, start: int = 0, end: int | None = None
) -> int | None:
    """A cut ``c`` with ``encode(text[:c])`` a prefix of ``encode(text)`` of at least ``need`` tokens.

    With ``start``/``end`` the text is ``text[start:end]`` (no copy of the rest is made) and the
    cut is an offset into ``text``; ``start`` must itself be a safe cut (0, or an earlier result),
    so that encoding ``text[start:end]`` piece by piece gives the tokens of the whole.

    Args:
        tokenizer: a chute ``Tokenizer`` with a ``tokenizers`` pipeline (``tokenizer.rust``);
            others get ``None``.
        text: the text to encode.
        need: how many leading tokens must be exact.
        start: where the text begins in ``text``.
        end: where it ends (default: the end of ``text``).

    Returns:
        The cut (a character offset), or ``None`` when the whole text must be encoded (it is
        short, no safe cut was found, or the backend cannot say where pre-tokens start).
    """
    stop = len(text) if end is None else end
    if stop - start < MIN_PREFIX_CHARS or need < 1:
        return None
    # asked only for a long text: a tokenizer loaded from kept checks parses its file for it
    rust = getattr(tokenizer, "rust", None)
    if rust is None:
        return None
    if start or end is not None:
        view = _Slice(text, start, stop)
        inner = safe_prefix_end(tokenizer, view, need)  # type: ignore[arg-type]
        return None if inner is None else start + inner
    normalizer = rust.normalizer
    # on the tiktoken fast path its own encodings check a cut (4-5x faster than tokenizers')
    fast = getattr(tokenizer, "engine", None) == "tiktoken"
    window = max(4096, need * _CHARS_PER_TOKEN)
    # Past this, a window that still holds no safe cut is one huge pre-token (a run of one
    # character, CJK without punctuation, a whitespace run): searching on would cost as much as
    # encoding the text.
    limit = max(window, need * _MAX_CHARS_PER_TOKEN)
    first = True
    while window * 2 < len(text) and window <= limit:
        if fast:
            found = _cut_in_window_fast(tokenizer, rust, normalizer, text, window, need)
        else:
            found = _cut_in_window(rust, normalizer, text, window, need)
        if found == "normalization":
            return None
        if isinstance(found, int):
            return found
        if first and _one_pre_token(rust, text[: min(len(text), limit)]):
            return None  # no pre-token starts within reach: larger windows would not help
        first = False
        window *= 2
    return None


def _cut_in_window(
    rust: Any, normalizer: Any, text: str, window: int, need: int
) -> int | str | None:
    """The cut found in ``text[:window]``, ``None`` to try a larger window, or why to give up."""
    piece = text[:window]
    longer = text[: window * 2]
    if _changes(normalizer, longer):
        return "normalization"  # offsets would move: keep exact by encoding everything
    enc = rust.encode(piece, add_special_tokens=False)
    words = enc.word_ids
    offsets = enc.offsets
    ids = enc.ids
    n = len(ids)
    if n <= need:
        return None
    last_word_start = n - 1
    while last_word_start > 0 and _same_word(words, last_word_start - 1, last_word_start):
        last_word_start -= 1
    # the candidate must leave one whole pre-token between it and the (maybe cut) last one
    second_last_start = last_word_start - 1
    while second_last_start > 0 and _same_word(words, second_last_start - 1, second_last_start):
        second_last_start -= 1
    tried = 0
    for i in range(need, second_last_start):
        if _same_word(words, i - 1, i):
            continue
        tried += 1
        if tried > _MAX_CANDIDATES:
            return None
        cut = offsets[i][0]
        if cut <= offsets[i - 1][0]:
            continue
        head = rust.encode(text[:cut], add_special_tokens=False).ids
        if head != ids[:i]:
            continue
        if rust.encode(longer, add_special_tokens=False).ids[:i] != head:
            return None
        return cut
    return None


def _cut_in_window_fast(
    tokenizer: Any, rust: Any, normalizer: Any, text: str, window: int, need: int
) -> int | str | None:
    """``_cut_in_window`` with the tokenizer's own (fast) encodings and the pre-tokenizer's split.

    The same conditions, found another way: candidates are pre-token starts of the window as
    the pre-tokenizer splits it (its regex alone, no BPE), leaving two pre-tokens after them
    inside the window; a candidate is taken when ``encode(text[:cut])`` holds at least ``need``
    tokens and is exactly the first tokens of the encoding of a window twice as long. A
    candidate inside an added token fails that check (the added token is one token in the
    whole encoding). At most ``_MAX_CANDIDATES`` encodings of a head are tried.
    """
    piece = text[:window]
    longer = text[: window * 2]
    if _changes(normalizer, longer):
        return "normalization"
    pre = _splitting_part(rust.pre_tokenizer)
    if pre is None:
        return None
    ids = tokenizer.encode(longer)
    if len(ids) <= need:
        return None
    chars_per_token = len(longer) / len(ids)
    guess = len(tokenizer.decode(ids[:need]))  # where token `need` starts (a byte-level
    # decode gives the text back; a character cut in two counts as one: off by one at most)
    # split only as far as the candidates go: the window's start is a true pre-token start, so
    # every start the split finds is one, but near where it stops (dropped with the last two)
    end = min(len(piece), guess + max(4096, guess // 4))
    starts = [span[0] for _, span in pre.pre_tokenize_str(piece[:end])][1:-2]
    k = bisect_left(starts, guess)
    for _ in range(_MAX_CANDIDATES):
        if k >= len(starts):
            return None  # the window holds too few tokens before its last pre-tokens
        cut = starts[k]
        head = tokenizer.encode(text[:cut])
        if len(head) < need:  # too early: move on by about the tokens missing
            k = max(k + 1, bisect_left(starts, cut + int((need - len(head)) * chars_per_token)))
            continue
        if ids[: len(head)] == head:
            return cut
        k += 1
    return None


_UNICODE_FORMS = {"NFC", "NFD", "NFKC", "NFKD"}


def _changes(normalizer: Any, text: str) -> bool:
    """Whether ``normalizer`` changes ``text`` (a Unicode form leaves ASCII as it is: not run)."""
    if normalizer is None:
        return False
    if text.isascii():
        try:
            kind = json.loads(normalizer.__getstate__()).get("type")
        except (AttributeError, TypeError, ValueError):
            kind = None
        if kind in _UNICODE_FORMS:
            return False
    return bool(normalizer.normalize_str(text) != text)


def _splitting_part(pre: Any) -> Any:
    """The part of a pre-tokenizer that decides where pre-tokens start.

    GPT-style files pair a regex ``Split`` with a ``ByteLevel`` step that only maps bytes to
    characters (``use_regex: false``): the ``Split`` alone finds the same starts, a third faster
    (it builds no mapped strings). Any other pre-tokenizer is used whole.
    """
    if pre is None:
        return None
    try:
        state = json.loads(pre.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return pre
    steps = state.get("pretokenizers") if state.get("type") == "Sequence" else None
    if (
        steps
        and steps[0].get("type") == "Split"
        and all(s.get("type") == "ByteLevel" and s.get("use_regex") is False for s in steps[1:])
    ):
        return pre[0]
    return pre


def _one_pre_token(rust: Any, text: str) -> bool:
    """Whether ``text`` is (nearly) one pre-token, split by the regex alone (cheap: no BPE)."""
    pre = rust.pre_tokenizer
    if pre is None:
        return True
    return len(pre.pre_tokenize_str(text)) <= 2


class _Slice:
    """``text[start:stop]`` for the search, copying only the windows it reads."""

    def __init__(self, text: str, start: int, stop: int):
        self.text, self.start, self.stop = text, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, key: slice) -> str:
        lo, hi, _ = key.indices(self.stop - self.start)
        return self.text[self.start + lo : self.start + hi]


def _same_word(words: list[int | None], a: int, b: int) -> bool:
    """Whether tokens ``a`` and ``b`` belong to one pre-token (added tokens are their own)."""
    return words[a] is not None and words[a] == words[b]
