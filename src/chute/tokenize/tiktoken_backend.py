"""``TiktokenTokenizer``: a tiktoken BPE file plus a pre-tokenizer pattern and special tokens.

The file holds one ``base64-token rank`` per line. Needs the ``tiktoken`` extra:
``pip install 'chute[tiktoken]'``.

A BPE file holds neither the pre-tokenizer pattern nor the special tokens, so they come from a
preset or from the caller. Presets (picked by name, or by the file's rank count when it matches
exactly one):

============  =========  ==========================================================
preset        ranks      special tokens (ids from the number of ranks up)
============  =========  ==========================================================
``qwen``      151,643    ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<|extra_0..204|>``
``llama3``    128,000    Llama 3 / 3.1 / 3.2: ``<|begin_of_text|>`` ... 256 in all
``gpt2``      50,256     ``<|endoftext|>``
============  =========  ==========================================================

The ``qwen`` preset normalizes text to NFC first, as Qwen's tokenizers do (Qwen1's
``QWenTokenizer`` and the NFC normalizer of Qwen2/3's ``tokenizer.json``): a decomposed ``é``
(``e`` + U+0301) is the composed one's token. Offsets still index the text as given.

Example:
    >>> tok = TiktokenTokenizer.from_file("tokenizers/qwen/qwen.tiktoken")  # doctest: +SKIP
    >>> tok.encode("Hello world!")  # doctest: +SKIP
    [9707, 1879, 0]
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chute.errors import ConfigError, MissingDependency
from chute.tokenize.base import Tokenizer, file_sha256

__all__ = ["PATTERNS", "PRESETS", "TiktokenTokenizer"]

# Pre-tokenizer patterns, as the models' own tokenizer.json files write them.
PATTERNS = {
    "qwen": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt2": r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s",
}

_LLAMA3_NAMED = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]
_LLAMA3_SPECIALS = _LLAMA3_NAMED + [
    f"<|reserved_special_token_{i}|>" for i in range(2, 2 + 256 - len(_LLAMA3_NAMED))
]
_QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [
    f"<|extra_{i}|>" for i in range(205)
]

# preset -> (pattern, ordered special tokens, rank count, default bos/eos/pad)
PRESETS: dict[str, tuple[str, list[str], int, dict[str, str | None]]] = {
    "qwen": (
        PATTERNS["qwen"],
        _QWEN_SPECIALS,
        151643,
        {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>"},
    ),
    "llama3": (
        PATTERNS["llama3"],
        _LLAMA3_SPECIALS,
        128000,
        {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "pad": "<|finetune_right_pad_id|>"},
    ),
    "gpt2": (PATTERNS["gpt2"], ["<|endoftext|>"], 50256, {"bos": None, "eos": "<|endoftext|>"}),
}


def _import_tiktoken() -> Any:
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError:
        raise MissingDependency(
            "reading a tiktoken BPE file needs the tiktoken package: pip install 'chute[tiktoken]'"
        ) from None
    return tiktoken, load_tiktoken_bpe


class TiktokenTokenizer(Tokenizer):
    """A tiktoken ``Encoding`` built from a local BPE file.

    Args:
        path: the BPE file (``*.tiktoken``, Llama 3's ``tokenizer.model``).
        preset: ``qwen``, ``llama3``, ``gpt2`` or ``None`` (guess from the rank count).
        pattern: the pre-tokenizer regex, or a preset name; overrides the preset's.
        special_tokens: ``{token: id}`` added to the encoding, overriding the preset's.
        special: bos/eos/pad/unk/image names, e.g. ``{"eos": "<|im_end|>"}``.
    """

    backend = "tiktoken"
    engine = "tiktoken"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        preset: str | None = None,
        pattern: str | None = None,
        special_tokens: Mapping[str, int] | None = None,
        special: Mapping[str, str | None] | None = None,
    ):
        super().__init__()
        self.path = os.fspath(path)
        self._args = (preset, pattern, dict(special_tokens or {}), dict(special or {}))
        self._build()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> TiktokenTokenizer:
        return cls(path, **kwargs)

    def _build(self) -> None:
        tiktoken, load_bpe = _import_tiktoken()
        preset, pattern, extra, special = self._args
        if not Path(self.path).is_file():
            raise ConfigError(f"{self.path}: no such file", param="tokenizer")
        try:
            ranks = load_bpe(self.path)
        except Exception as exc:
            raise ConfigError(
                f"{self.path} is not a tiktoken BPE file (base64 token and rank per line): {exc}",
                param="tokenizer",
            ) from None
        n = len(ranks)
        if preset is None:
            preset = next((name for name, p in PRESETS.items() if p[2] == n), None)
        if preset is not None and preset not in PRESETS:
            raise ConfigError(
                f"unknown tiktoken preset {preset!r}; choose {', '.join(PRESETS)} or "
                f"pass pattern= and special_tokens=",
                param="tokenizer",
            )
        specials: dict[str, int] = {}
        defaults: dict[str, str | None] = {}
        if preset is not None:
            pat, names, _, defaults = PRESETS[preset]
            specials = {tok: n + i for i, tok in enumerate(names)}
        else:
            pat = None
        if pattern is not None:
            pat = PATTERNS.get(pattern, pattern)
        if pat is None:
            raise ConfigError(
                f"{self.path} has {n:,} ranks, which matches no preset "
                f"({', '.join(f'{k}: {v[2]:,}' for k, v in PRESETS.items())}); pass "
                f"tiktoken_pattern= (a regex or a preset name) and special tokens",
                param="tokenizer",
            )
        specials.update(extra)
        self.preset, self.pattern = preset, pat
        self.normal_form = "NFC" if preset == "qwen" else None
        self._enc = tiktoken.Encoding(
            name=Path(self.path).stem,
            pat_str=pat,
            mergeable_ranks=ranks,
            special_tokens=specials,
        )
        self._specials = specials
        self._all_special = frozenset(specials)
        self._set_special(defaults, special)

    def encode(self, text: str) -> list[int]:
        if self._denormal(text):
            text = unicodedata.normalize(self.normal_form, text)  # type: ignore[arg-type]
        return self._ids(text)

    def _ids(self, text: str) -> list[int]:
        """The ids of ``text`` as it is (normalized already, or on purpose not)."""
        return self._enc.encode(text, allowed_special=self._all_special, disallowed_special=())

    def _denormal(self, text: str) -> bool:
        form = self.normal_form
        return form is not None and not text.isascii() and not unicodedata.is_normalized(form, text)  # type: ignore[arg-type]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        if self._denormal(text):
            mapped = normalize_mapped(text, self.normal_form)  # type: ignore[arg-type]
            if mapped is None:  # no character map: the text as given (exact offsets)
                return self._encode_with_offsets(text)
            normal, starts, ends = mapped
            ids, offsets = self._encode_with_offsets(normal)
            return ids, [
                (starts[a], ends[b - 1]) if b > a else (starts[a], starts[a]) for a, b in offsets
            ]
        return self._encode_with_offsets(text)

    def _encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and offsets of ``text`` as it is."""
        ids = self._ids(text)
        if not ids:
            return ids, []
        pieces = self._enc.decode_tokens_bytes(ids)
        data = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        # The character a byte belongs to: count of UTF-8 lead bytes up to it, minus one.
        char_of_byte = np.cumsum((data & 0xC0) != 0x80) - 1
        ends = np.cumsum([len(p) for p in pieces])
        starts = ends - [len(p) for p in pieces]
        first = char_of_byte[np.minimum(starts, len(data) - 1)]
        last = char_of_byte[ends - 1] + 1
        return ids, list(zip(first.tolist(), last.tolist(), strict=True))

    def decode(self, ids: Sequence[int]) -> str:
        return self._enc.decode(list(ids))

    def token_to_id(self, token: str) -> int | None:
        if token in self._specials:
            return self._specials[token]
        try:
            return self._enc.encode_single_token(token.encode("utf-8"))
        except KeyError:
            return None

    @property
    def vocab_size(self) -> int:
        return self._enc.n_vocab

    def _identity(self) -> dict[str, Any]:
        identity = {
            "files": {Path(self.path).name: file_sha256(self.path)},
            "pattern": self.pattern,
            "added_tokens": dict(sorted(self._specials.items(), key=lambda kv: kv[1])),
        }
        if self.normal_form is not None:  # only where it is: other presets' keys stay as they were
            identity["normalizer"] = self.normal_form
        return identity

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_args": self._args}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Tokenizer.__init__(self)
        self.path, self._args = state["path"], state["_args"]
        self._build()


def _joins(segment: str, char: str, form: str) -> bool:
    """Whether normalizing may join ``char`` to the ``segment`` before it.

    Combining marks and Hangul's medial vowels and final consonants always may; so may a
    character that composes with the segment though its combining class is 0 (Tamil's ொ is
    U+0BC6 + U+0BBE, two "starters"): normalizing the two apart then differs from together.
    """
    if unicodedata.combining(char) != 0 or "\u1160" <= char <= "\u11ff":
        return True
    if char.isascii():
        return False
    apart = unicodedata.normalize(form, segment) + unicodedata.normalize(form, char)  # type: ignore[arg-type]
    return unicodedata.normalize(form, segment + char) != apart  # type: ignore[arg-type]


def normalize_mapped(text: str, form: str) -> tuple[str, list[int], list[int]] | None:
    """``text`` in the Unicode normal ``form``, and the span of ``text`` each character is from.

    ``(normal, starts, ends)``: character ``j`` of ``normal`` came from ``text[starts[j]:
    ends[j]]``. Normalized segment by segment (a character and what may join it); ``None``
    where that still differs from normalizing the whole text (the caller then encodes the
    text as given: a span of the whole text for every character would train every token).

    Example:
        >>> normalize_mapped("Cafe\u0301!", "NFC")
        ('Café!', [0, 1, 2, 3, 5], [1, 2, 3, 5, 6])
        >>> normalize_mapped("\u0b95\u0bc6\u0bbe a", "NFC")[1:]  # Tamil: two starters, one letter
        ([0, 1, 3, 4], [1, 3, 4, 5])
    """
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        k = i + 1
        while k < n and _joins(text[i:k], text[k], form):
            k += 1
        piece = unicodedata.normalize(form, text[i:k])  # type: ignore[arg-type]
        out.append(piece)
        starts += [i] * len(piece)
        ends += [k] * len(piece)
        i = k
    normal = "".join(out)
    if normal != unicodedata.normalize(form, text):  # type: ignore[arg-type]
        return None
    return normal, starts, ends
