r"""Long documents cut into windows (``Recipe(overflow="split")``): every token kept, none twice.

A sample longer than ``max_length`` becomes windows of at most ``max_length`` tokens that start
every ``max_length - stride`` tokens. A later window's first ``stride`` tokens repeat the end of
the window before it as context: their labels are -100, so every token is trained in exactly one
window. ``max_length = 8``, a document of 19 tokens::

    stride 0    window 0  t0  .. t7        window 1  t8  .. t15       window 2  t16 t17 t18
    stride 2    window 0  t0  .. t7        window 1 (t6 t7) t8 .. t13  window 2 (t12 t13) t14 .. t18
                                            ^^^^^^^ context: labels -100

With ``stride=0`` nothing is repeated, and the first token of a later window has nothing before
it in its window, so (as with Hugging Face's ``group_texts``) it is never a prediction target;
``stride=1`` is Megatron's and torchtitan's one-token overlap, which makes every token of the
document (but its first) a target exactly once. Larger strides give each window more context.

The number of windows is a pure function of the length: ``1`` when it fits, else
``1 + ceil((length - max_length) / (max_length - stride))``. So plans know every window's length
from the document's length alone (``chute.lengths.pieces``), and a window is rebuilt from its
record and its number (``Recipe(record.with_window(w))``).

Example:
    >>> window_counts(np.array([5, 8, 19]), max_length=8, stride=2).tolist()
    [1, 1, 3]
    >>> window_bounds(19, 1, max_length=8, stride=2)
    (6, 14, 2)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from chute._internal.spelling import spell, spell_set, spell_value
from chute.errors import ConfigError, SampleError

__all__ = [
    "IGNORE",
    "Windowed",
    "check_stride",
    "cut_window",
    "split_sample",
    "untrained_window",
    "window_bounds",
    "window_counts",
]

IGNORE = -100


class Windowed(NamedTuple):
    """A non-``Record`` item (a dict of an in-memory dataset) standing for one of its windows.

    A ``Record`` says it itself (``Record.with_window``).
    """

    item: Any
    window: int


def check_stride(stride: Any, max_length: int | None, overflow: str) -> int:
    """``stride`` as an int in ``[0, max_length)``, or a ``ConfigError`` naming the fix."""
    if isinstance(stride, bool) or not isinstance(stride, int | np.integer) or stride < 0:
        raise ConfigError(
            f"expected an int >= 0 (tokens of overlap), got {spell_value(stride)}", param="stride"
        )
    if stride and overflow != "split":
        raise ConfigError(
            f"{spell_set('stride', stride)} is the overlap of split windows; it needs "
            f"{spell_set('overflow', 'split')} (got {spell_set('overflow', overflow)})"
        )
    if max_length is not None and stride >= max_length:
        raise ConfigError(
            f"{spell_set('stride', stride)} must be smaller than "
            f"{spell_set('max_length', max_length)} (windows advance by {spell('max_length')} - "
            f"{spell('stride')} tokens); e.g. {spell_set('stride', 1)} or "
            f"{spell_set('stride', max_length // 8)}"
        )
    return int(stride)


def window_counts(lengths: np.ndarray, max_length: int, stride: int) -> np.ndarray:
    """Windows per document (int64); a negative length (a rejected record) counts one."""
    lens = np.asarray(lengths, dtype=np.int64)
    step = max_length - stride
    extra = np.maximum(lens - max_length, 0)
    return 1 + (extra + step - 1) // step


def window_bounds(length: int, window: int, max_length: int, stride: int) -> tuple[int, int, int]:
    """``(start, end, context)`` of window ``window`` of a document of ``length`` tokens.

    Tokens ``[start, end)``; the first ``context`` of them are context only (labels -100).

    Raises:
        IndexError: the document has no such window.
    """
    count = int(window_counts(np.array([length]), max_length, stride)[0])
    if not 0 <= window < count:
        raise IndexError(f"window {window} of a {length}-token document that has {count}")
    start = window * (max_length - stride)
    return start, min(length, start + max_length), stride if window else 0


def cut_window(sample: dict[str, Any], window: int, max_length: int, stride: int) -> dict[str, Any]:
    """Window ``window`` of a whole-document sample: its tokens, context labels masked.

    The result keeps the sample's provenance and adds ``window`` and ``windows`` (the count).
    """
    ids, labels = sample["input_ids"], sample["labels"]
    start, end, context = window_bounds(len(ids), window, max_length, stride)
    out = dict(sample)
    out["input_ids"] = ids[start:end]
    piece = labels[start:end]
    if context:
        piece = piece.copy()
        piece[:context] = IGNORE
    out["labels"] = piece
    out["length"] = end - start
    out["window"] = window
    out["windows"] = int(window_counts(np.array([len(ids)]), max_length, stride)[0])
    out["truncated"] = False
    return out


def split_sample(sample: dict[str, Any], max_length: int, stride: int) -> list[dict[str, Any]]:
    """Every window of a whole-document sample, in order (one, numbered 0, when it fits).

    Example:
        >>> s = {"input_ids": np.arange(10), "labels": np.arange(10)}
        >>> [w["labels"].tolist() for w in split_sample(s, max_length=6, stride=2)]
        [[0, 1, 2, 3, 4, 5], [-100, -100, 6, 7, 8, 9]]
    """
    n = int(window_counts(np.array([len(sample["input_ids"])]), max_length, stride)[0])
    return [cut_window(sample, w, max_length, stride) for w in range(n)]


def untrained_window(piece: dict[str, Any]) -> SampleError | None:
    """``no_trainable_tokens`` for a window with no token to learn, else ``None``.

    A window of a split record is a sample of its own: one inside a prompt longer than
    ``max_length`` (all -100) has nothing to train on, and a batch of such windows has a loss
    over no token (NaN as a mean).
    Its first label is never a target (a causal loss shifts by one), as in any sample.

    Example:
        >>> untrained_window({"labels": np.array([-100, 5, 6]), "window": 1, "windows": 3})
        >>> str(untrained_window({"labels": np.full(4, -100), "window": 0, "windows": 3}))[:46]
        'no_trainable_tokens: window 0 of 3 holds no tr'
    """
    labels = np.asarray(piece["labels"])
    if piece.get("windows", 1) <= 1 or (labels[1:] != IGNORE).any():
        return None  # a record that fits is judged whole (chute.recipe.outcome)
    return SampleError(
        "no_trainable_tokens",
        f"window {piece.get('window', 0)} of {piece.get('windows', 1)} holds no trained token "
        f"(prompt or context only: with {spell_set('overflow', 'split')} each window is a "
        f"sample of its own, and one inside a long prompt has nothing to learn); left out. "
        f"For chat data a larger {spell('max_length')} or {spell_set('overflow', 'truncate')} "
        f"keeps prompts whole",
    )
