r"""``FastBPE``: tiktoken running a compiled ``tokenizer.json``, with labels from byte lengths.

``encode(text)`` gives the ids ``tokenizers`` gives (``add_special_tokens=False``), or ``None``
for a text the fast path does not take (not in the normalizer's form; lone surrogates): the
caller then asks ``tokenizers``. Added tokens are cut out first, longest match first and
leftmost, as ``tokenizers`` does (tokens with ``normalized: false`` before those with
``normalized: true``), and the pieces between go to tiktoken's ``encode_ordinary``; this is
faster than tiktoken's own special-token search.

``encode_spans(text, spans)`` answers ``Tokenizer.encode_spans`` without a Python object per
token. ``tokenizers`` says which token holds a character through offsets (a token covers every
character one of its bytes belongs to) and ``char_to_token`` (the first token covering it). So
the first token covering character ``c`` is the token holding ``c``'s first byte. Where ``c``
starts a part of the text cut at added tokens (as a template's trained spans almost always do:
after ``<|im_start|>assistant\n``, through ``<|im_end|>``) or lies in an added token, that is
known from the cut alone; elsewhere a walk over the byte lengths of that part's tokens from its
nearer end finds it (a span starts a token or two after a role header), or, for a character
far from both ends, a binary search of its byte position in their cumulative lengths::

    text    :  H  i     你            (你 is 3 bytes: e4 bd a0)
    bytes   :  0  1  2  3  4  5
    tokens  : [Hi][ 你 (bytes 2-4)][...]   ends = cumsum(lengths) = [2, 5, ...]
    char 2 (你) starts at byte 3 -> searchsorted(ends, 3, "right") = token 1

Example:
    >>> from chute.tokenize.compile_tiktoken import AddedToken, BPETables
    >>> ranks = {bytes([b]): b for b in range(256)}
    >>> ranks[b"ab"] = 256
    >>> fast = FastBPE(BPETables(r"\S+|\s+", ranks, [AddedToken("<s>", 300, False)], None))
    >>> fast.encode("ab<s>a b")
    [256, 300, 97, 32, 98]
    >>> fast.encode_spans("ab<s>a b", [(2, 5), (5, 8), (6, 7)])
    ([256, 300, 97, 32, 98], [(1, 2), (2, 5), (3, 4)])
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from chute.errors import MissingDependency
from chute.tokenize.compile_tiktoken import AddedToken, BPETables

__all__ = ["FastBPE", "import_tiktoken", "trie_pattern"]

# parts of at most _SHORT characters have their ids kept (at most _SHORT_KEPT of them)
_SHORT = 16
_SHORT_KEPT = 4096
# more spans than this are looked up at once, with numpy
_MANY_SPANS = 16
# a token this many bytes or more from the nearer end of its part is searched with numpy, a
# nearer one found by walking the token lengths in Python
_WALK = 256
_NEVER = "\x00chute: never a special token\x00"


def import_tiktoken() -> Any:
    try:
        import tiktoken
    except ImportError:
        raise MissingDependency(
            "the tiktoken fast path needs the tiktoken package: pip install 'chute[tiktoken]'"
        ) from None
    return tiktoken


class FastBPE:
    """A compiled byte-level BPE tokenizer run by tiktoken.

    Args:
        tables: the output of ``compile_bpe``.
    """

    def __init__(self, tables: BPETables):
        tiktoken = import_tiktoken()
        self.tables = tables
        top = max([*tables.ranks.values(), *(t.id for t in tables.added)], default=0)
        self.encoding = tiktoken.Encoding(
            "chute-compiled",
            pat_str=tables.pattern,
            mergeable_ranks=tables.ranks,
            # tiktoken hands ids over in a native buffer only through its special-token search;
            # this one token, never allowed, keeps that search to a scan for NUL bytes
            special_tokens={_NEVER: top + 1},
        )
        core = self.encoding._core_bpe
        self._buffer: Callable[[str], memoryview] = _buffer_encoder(core)
        self._form = tables.normal_form
        self._added_ids = {t.content: _ids_view([t.id]) for t in tables.added}
        self._split_raw = _splitter([t for t in tables.added if not t.normalized])
        self._split_norm = _splitter([t for t in tables.added if t.normalized])
        lengths = np.zeros(top + 1, dtype=np.int64)
        count = len(tables.ranks)  # at once: a loop over 150k tokens costs 0.1-0.2 s a load
        ids = np.fromiter(tables.ranks.values(), dtype=np.int64, count=count)
        lengths[ids] = np.fromiter(map(len, tables.ranks), dtype=np.int64, count=count)
        for t in tables.added:
            lengths[t.id] = len(t.content.encode("utf-8"))
        self._lengths = lengths
        self._length_list: list[int] = lengths.tolist()
        # short parts between added tokens repeat in every conversation ("\n", "user\n"):
        # their ids are kept, which saves a call into tiktoken per part
        self._short: dict[str, memoryview] = {}

    def encode(self, text: str) -> list[int] | None:
        """The ids of ``text`` (added tokens included), or ``None`` for ``tokenizers`` to do."""
        found = self._encode(text)
        return None if found is None else found[0].tolist()

    def encode_spans(
        self, text: str, spans: Sequence[tuple[int, int]]
    ) -> tuple[list[int], list[tuple[int, int]]] | None:
        """``encode(text)``, and per character span the range of tokens overlapping it.

        The ranges are ``[first, end)`` per span ``[a, b)``, as ``HFTokenizer.encode_spans``
        gives them (``(0, 0)`` for an empty span). ``None``: for ``tokenizers`` to do.
        """
        found = self.encode_spans_array(text, spans)
        return None if found is None else (found[0].tolist(), found[1])

    def encode_spans_array(
        self, text: str, spans: Sequence[tuple[int, int]]
    ) -> tuple[np.ndarray, list[tuple[int, int]]] | None:
        """``encode_spans`` with the ids as an ``int32`` array (no Python list in between)."""
        found = self._encode(text)
        if found is None:
            return None
        ids, parts, chars, tokens = found
        n = len(text)
        if len(spans) > _MANY_SPANS:
            return ids, self._token_ranges(text, ids, spans)
        out = []
        for a, b in spans:
            b = min(b, n)
            if a >= b:
                out.append((0, 0))
            else:
                first = self._token_of(a, ids, parts, chars, tokens)
                out.append((first, self._token_of(b - 1, ids, parts, chars, tokens) + 1))
        return ids, out

    def _encode(self, text: str) -> tuple[np.ndarray, list[str], list[int], list[int]] | None:
        """``(ids, parts, chars, tokens)``, or ``None`` for ``tokenizers`` to do.

        ``ids`` is an ``int32`` array; ``parts`` is the text cut at added tokens (odd items);
        part ``k`` starts at character ``chars[k]`` and token ``tokens[k]`` (both lists end with
        the totals).
        """
        form = self._form
        if form is not None and not text.isascii() and not unicodedata.is_normalized(form, text):  # type: ignore[arg-type]
            return None  # normalizing moves offsets: tokenizers keeps them right
        parts = [text] if self._split_raw is None else self._split_raw(text)
        added = self._added_ids
        text_ids = self._text_ids
        try:  # a text part, then the added token after it, and so on: each one's uint32 ids
            pieces = [added[part] if k & 1 else text_ids(part) for k, part in enumerate(parts)]
        except UnicodeEncodeError:
            return None  # lone surrogates: tokenizers refuses them, as before
        chars = list(accumulate(map(len, parts), initial=0))
        tokens = list(accumulate([piece.nbytes >> 2 for piece in pieces], initial=0))
        # one writable copy (kept pieces are shared); every id is below 2**31: uint32 is int32
        return np.frombuffer(bytearray().join(pieces), dtype=np.int32), parts, chars, tokens

    def _text_ids(self, part: str) -> memoryview:
        """Ids of a part between added tokens; a short one's are kept (up to ``_SHORT_KEPT``)."""
        if len(part) > _SHORT:
            return self._pieces(part)
        got = self._short.get(part)
        if got is None:
            got = self._pieces(part)
            if len(self._short) < _SHORT_KEPT:
                self._short[part] = got
        return got

    def _token_ranges(
        self, text: str, ids: np.ndarray, spans: Sequence[tuple[int, int]]
    ) -> list[tuple[int, int]]:
        """``encode_spans``'s ranges for many spans at once (e.g. one per character).

        The token holding a character's first byte is found by searching that byte's position
        in the cumulative byte lengths of all tokens (added tokens included: their bytes are
        the text's, and every part of the text starts a token).
        """
        ends = np.cumsum(self._lengths[ids])
        if text.isascii():
            at = np.arange(len(text) + 1)
        else:
            points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            width = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
            at = np.concatenate(([0], np.cumsum(width)))
        n = len(text)
        bounds = np.array(spans, dtype=np.int64).reshape(-1, 2)
        a = bounds[:, 0]
        b = np.minimum(bounds[:, 1], n)
        empty = a >= b
        a = np.where(empty, 0, a)
        last = np.where(empty, 0, b - 1)
        first = np.searchsorted(ends, at[a], side="right")
        end = np.searchsorted(ends, at[last], side="right") + 1
        first[empty] = 0
        end[empty] = 0
        return list(zip(first.tolist(), end.tolist(), strict=True))

    def _token_of(
        self, c: int, ids: np.ndarray, parts: list[str], chars: list[int], tokens: list[int]
    ) -> int:
        """The token holding character ``c``'s first byte (the first token covering ``c``)."""
        j = bisect_right(chars, c) - 1  # the part holding c (empty parts precede their successor)
        begin, first, end = chars[j], tokens[j], tokens[j + 1]
        if c == begin or j & 1:
            return first  # a part's first character, or inside an added token
        part = parts[j]
        offset = c - begin
        lengths = self._length_list
        # a span starts just after a role header and ends just before an end-of-turn token:
        # walk the byte lengths from the nearer end of the part. A token holds at least one
        # byte, so the walk over d bytes meets at most d + 1 tokens.
        if 2 * offset < len(part):
            before = offset if part.isascii() else len(part[:offset].encode("utf-8"))
            if before < _WALK:
                at, k = 0, first
                for i in ids[first : min(end, first + before + 1)].tolist():
                    at += lengths[i]  # the end of token k
                    if at > before:
                        return k
                    k += 1
            return first + int(
                np.searchsorted(np.cumsum(self._lengths[ids[first:end]]), before, "right")
            )
        after = len(part) - offset if part.isascii() else len(part[offset:].encode("utf-8"))
        if after < _WALK:
            back, k = 0, end - 1
            for i in reversed(ids[max(first, end - after - 1) : end].tolist()):
                back += lengths[i]  # from the start of token k to the part's end
                if back >= after:
                    return k
                k -= 1
        ends = np.cumsum(self._lengths[ids[first:end]])
        return first + int(np.searchsorted(ends, int(ends[-1]) - after, "right"))

    def _pieces(self, text: str) -> memoryview:
        """Ids (``uint32``) of text holding no ``normalized: false`` added token."""
        if self._split_norm is None:
            return self._buffer(text)
        parts = self._split_norm(text)
        if len(parts) == 1:
            return self._buffer(text)
        pieces = [
            self._added_ids[part] if k & 1 else self._buffer(part)
            for k, part in enumerate(parts)
            if part
        ]
        return _ids_view(np.frombuffer(bytearray().join(pieces), dtype=np.uint32))


def _buffer_encoder(core: Any) -> Callable[[str], memoryview]:
    """``text -> uint32 ids`` from tiktoken's core, without a Python int per id where it can.

    The ids stay in tiktoken's own buffer (``nbytes >> 2`` counts them: its ``len`` is in bytes).
    """
    to_buffer = getattr(core, "encode_to_tiktoken_buffer", None)
    if to_buffer is None:  # an older tiktoken: through a list
        ordinary = core.encode_ordinary
        return lambda text: _ids_view(ordinary(text))
    nothing_allowed: set[str] = set()
    return lambda text: memoryview(to_buffer(text, nothing_allowed))


def _ids_view(ids: Any) -> memoryview:
    return memoryview(np.asarray(ids, dtype=np.uint32).data)


def _splitter(tokens: list[AddedToken]) -> Callable[[str], list[str]] | None:
    """``re.split`` that cuts out the tokens (odd items), longest match first, or ``None``."""
    if not tokens:
        return None
    return re.compile(f"({trie_pattern([t.content for t in tokens])})").split


def trie_pattern(words: Sequence[str]) -> str:
    """A regex matching any of ``words``, the longest at a position first, as a prefix tree.

    A flat alternation of 256 Llama 3 special tokens is tried one by one at every ``<``; the
    tree reads each character once.

    Example:
        >>> trie_pattern(["<a>", "<ab>", "<b>"])
        '<(?:a(?:>|b>)|b>)'
        >>> re.findall(trie_pattern(["ab", "abc"]), "abcab")
        ['abc', 'ab']
    """
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        ends = "" in node
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        if ends:  # a word ends here and longer ones go on: try the longer first
            return f"(?:{body})?" if len(branches) == 1 else f"{body}?"
        return body

    return emit(trie)
