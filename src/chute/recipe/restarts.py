"""A window of a long document without encoding the whole document again (``overflow="split"``).

The Loader reading records straight from JSONL builds each window of a long document from its
record (``Recipe(record.with_window(k))``). Keeping a window's tokens meant encoding the whole
document, so a document of W windows cost W whole encodings (a 100k-token document cut at 4,096:
25 of them). Encoding a long text already goes in pieces, cut where the tokenizer cannot merge
across (``chute.tokenize.prefix``), and each cut is a place encoding can begin again with
exactly the tokens that follow it in the whole encoding. ``RestartPoints`` keeps, per document
this process has encoded, those cuts (``(character, tokens before it)``) and the document's
token count; a later window of the same document re-encodes the pieces that hold it, each on
its own as the first encoding did (so with the same tokens), and no cut is searched for::

    document  |---- piece 0 ----|---- piece 1 ----|---- piece 2 ----|--|
    cuts      0                 c1                c2                c3
    window k                         [=====]                             encoded: c1 .. c2

A piece is about ``PIECE_TOKENS`` (8,192) tokens, but the last one runs to the text's end and
can be a few times that (a cut is searched for only where the text goes on for twice the search
window); a window costs at most the two pieces it touches.

A document is known by its record (path, index) and its rendered text's length and hash, so a
record that changed is encoded whole again. Texts too short to be cut
(``MIN_PREFIX_CHARS``) have only the cut at 0: they are encoded whole, as before, at most a few
windows each. Per process (each DataLoader worker keeps its own), at most ``capacity`` documents
(a few numbers per 8,192 tokens each); the oldest are forgotten first.

Example:
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from chute.tokenize import HFTokenizer
    >>> rust = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    >>> rust.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> text = "a b " * 30_000  # 60,000 tokens: encoded in pieces of 8,192
    >>> rendered = Rendered(text, [(0, len(text))], [])
    >>> restarts = RestartPoints()
    >>> tok = HFTokenizer(rust)
    >>> first = restarts.window(rendered, tok, (), (0, 4), ("doc.jsonl", 0))  # encodes it all
    >>> later = restarts.window(rendered, tok, (), (50_000, 50_004), ("doc.jsonl", 0))
    >>> later.ids.tolist(), later.total, len(restarts)
    ([1, 2, 1, 2], 60000, 1)
"""

from __future__ import annotations

import contextlib
import itertools
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np

from chute.recipe.encode import Encoded, check_guard, encode, encode_piece
from chute.templates.base import Rendered
from chute.tokenize.base import Tokenizer

__all__ = ["RestartPoints"]


class RestartPoints:
    """Where each long document seen in this process can be encoded from again.

    Args:
        capacity: documents kept (the least recently used are forgotten first).
    """

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        # key -> (cut characters, tokens before each cut, the document's tokens)
        self._known: OrderedDict[Hashable, tuple[list[int], list[int], int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._known)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RestartPoints, (self.capacity,))  # a copy sent elsewhere starts empty

    def remember(self, key: Hashable, marks: list[tuple[int, int]], total: int) -> None:
        """Keep a ``total``-token text's ``marks`` (``(character, tokens before it)``, in order)."""
        self._known[key] = ([c for c, _ in marks], [n for _, n in marks], total)
        self._known.move_to_end(key)
        while len(self._known) > self.capacity:
            self._known.popitem(last=False)

    def window(
        self,
        rendered: Rendered,
        tokenizer: Tokenizer,
        guard: tuple[str, ...],
        keep: tuple[int, int],
        record: tuple[Any, ...],
    ) -> Encoded:
        """``encode(rendered, keep=keep)`` of a text without media, from a known cut if any.

        Args:
            rendered: the document's rendered text and trained spans.
            tokenizer: the recipe's tokenizer.
            guard: media tokens that must not appear in a text-only sample.
            keep: the window's tokens ``[a, b)`` in the whole document.
            record: what identifies the record (its path and index).

        Returns:
            The window's ids and labels, with ``offset`` ``a`` and ``total`` the document's
            token count (``None`` only where the first encoding stopped early).
        """
        text = rendered.text
        key = (*record, len(text), hash(text))
        known = self._known.get(key)
        if known is None:
            marks: list[tuple[int, int]] = []
            enc = encode(rendered, tokenizer, {}, guard=guard, keep=keep, marks=marks)
            if enc.total is not None:
                self.remember(key, marks, enc.total)
            return enc
        with contextlib.suppress(KeyError):  # another thread may have just forgotten it
            self._known.move_to_end(key)
        check_guard(text, guard)
        return self._from_pieces(known, rendered, tokenizer, keep)

    @staticmethod
    def _from_pieces(
        known: tuple[list[int], list[int], int],
        rendered: Rendered,
        tokenizer: Tokenizer,
        keep: tuple[int, int],
    ) -> Encoded:
        """The window from the pieces of the first encoding that hold it, encoded again alike.

        The first encoding cut the text at ``chars`` and encoded each piece on its own; the same
        pieces give the same tokens. No cut is searched for here (that search is the costly
        part of encoding a long text in pieces).
        """
        chars, tokens, total = known
        text = rendered.text
        first = bisect_right(tokens, keep[0]) - 1  # the piece holding the window's first token
        last = bisect_left(tokens, keep[1])  # the cut at or after its end (or the text's end)
        bounds = [*chars[first:last], len(text) if last == len(chars) else chars[last]]
        pieces = [
            encode_piece(tokenizer, text, rendered.spans, lo, hi)
            for lo, hi in itertools.pairwise(bounds)
        ]
        a, b = keep[0] - tokens[first], keep[1] - tokens[first]
        ids = np.concatenate([p[0] for p in pieces])[a:b]
        labels = np.concatenate([p[1] for p in pieces])[a:b]
        return Encoded(ids, labels, [], offset=keep[0], total=total)
