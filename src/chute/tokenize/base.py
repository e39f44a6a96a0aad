"""The tokenizer protocol chute needs, and what every backend shares.

A chute tokenizer encodes text *without adding anything* (templates write ``bos``/``eos`` as
text, and special-token strings in the text become their ids, as ``apply_chat_template`` does),
returns character offsets for label masking, decodes, and knows its special tokens and a stable
fingerprint of the files it came from.

Special tokens come from ``tokenizer_config.json`` (then ``special_tokens_map.json``, which
wins, as in ``transformers``) beside the tokenizer file, and the ``special_tokens`` argument
overrides both. The image token is the config's ``image_token`` or the first of
``<|image_pad|>``, ``<|image|>``, ``<image>``, ``<IMG_CONTEXT>`` that is one token.
"""

from __future__ import annotations

import hashlib
import os
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute._internal.spelling import spell
from chute.errors import ConfigError

__all__ = [
    "IMAGE_TOKEN_CANDIDATES",
    "SPECIAL_NAMES",
    "Tokenizer",
    "file_sha256",
    "hf_spans",
    "read_tokenizer_config",
]

SPECIAL_NAMES = ("bos", "eos", "pad", "unk", "image")
_START = itemgetter(0)
_END = itemgetter(1)
IMAGE_TOKEN_CANDIDATES = ("<|image_pad|>", "<|image|>", "<image>", "<IMG_CONTEXT>")


class Tokenizer:
    """Base of chute's tokenizer backends.

    The backends are ``HFTokenizer``, ``TiktokenTokenizer`` and ``TransformersTokenizer``.

    Subclasses implement ``encode``, ``encode_with_offsets``, ``decode``, ``token_to_id``,
    ``vocab_size`` and ``_identity``; this class adds special tokens and the fingerprint.

    Attributes:
        backend: ``tokenizers``, ``tiktoken`` or ``transformers``.
        engine: the library that encodes: the backend's, or ``tiktoken`` for an ``HFTokenizer``
            on the fast path (see ``chute.tokenize.engine``).
        engine_note: why an ``HFTokenizer`` is not on the fast path (one line), or ``""``.
        special: ``{"bos": str|None, "eos": ..., "pad": ..., "unk": ..., "image": ...}``.
        chat_template: the Jinja chat template found beside the tokenizer, or ``None``.
        supports_offsets: whether ``encode_with_offsets`` works (slow ``transformers``
            tokenizers have no offsets; chute then encodes template pieces one by one).
    """

    backend = "base"
    # the library that encodes (HFTokenizer: "tiktoken" on the fast path), and why not tiktoken
    engine = "base"
    engine_note = ""
    supports_offsets = True

    def __init__(self) -> None:
        self.special: dict[str, str | None] = dict.fromkeys(SPECIAL_NAMES)
        self.chat_template: str | None = None
        self._fingerprint: dict[str, Any] | None = None

    # -- what backends implement -------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in it become their ids; nothing added."""
        raise NotImplementedError

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """``(ids, offsets)``: each token's ``[start, end)`` character range in ``text``."""
        raise NotImplementedError

    def encode_spans(
        self, text: str, spans: Sequence[tuple[int, int]]
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids of ``text`` and, per character span, the range of tokens overlapping it.

        Returns ``(ids, ranges)`` with one ``[first, end)`` token range per span ``[a, b)``
        (empty when no token overlaps it).

        The default uses ``encode_with_offsets``; backends may answer without materialising
        every offset (``HFTokenizer`` asks the encoding for the two edge tokens only).
        """
        ids, offsets = self.encode_with_offsets(text)
        ranges = []
        for a, b in spans:
            first = bisect_right(offsets, a, key=_END)  # first token ending after a
            end = bisect_left(offsets, b, key=_START)  # first token starting at or after b
            ranges.append((first, max(first, end)))
        return ids, ranges

    def encode_spans_array(
        self, text: str, spans: Sequence[tuple[int, int]]
    ) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """``encode_spans`` with the ids as an ``int32`` array, what samples hold.

        Backends that make ids in native buffers (the tiktoken fast path) skip the Python list
        here: converting a list of 300 ids costs as much as a tenth of encoding them.
        """
        ids, ranges = self.encode_spans(text, spans)
        return np.array(ids, dtype=np.int32), ranges

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens included, no clean-up of spaces."""
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        """The id of a token (special or not) written as one string, or ``None``."""
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def _identity(self) -> dict[str, Any]:
        """What identifies the tokenizer's content (file hashes, or a hash of its state)."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------

    def token_id(self, name: str) -> int | None:
        """Id of the special token ``name`` (``bos``, ``eos``, ``pad``, ``unk``, ``image``)."""
        token = self.special.get(name)
        return None if token is None else self.token_to_id(token)

    @property
    def bos_token(self) -> str | None:
        return self.special["bos"]

    @property
    def eos_token(self) -> str | None:
        return self.special["eos"]

    @property
    def pad_token(self) -> str | None:
        return self.special["pad"]

    @property
    def image_token(self) -> str | None:
        return self.special["image"]

    def fingerprint(self) -> dict[str, Any]:
        """JSON-able identity: backend, content hashes, special tokens, vocabulary size.

        Example:
            >>> sorted(tok.fingerprint())  # doctest: +SKIP
            ['backend', 'files', 'special_tokens', 'vocab_size']
        """
        if self._fingerprint is None:
            self._fingerprint = {
                "backend": self.backend,
                **self._identity(),
                "special_tokens": dict(self.special),
                "vocab_size": self.vocab_size,
            }
        return self._fingerprint

    def _set_special(
        self, found: Mapping[str, str | None], overrides: Mapping[str, str | None] | None
    ) -> None:
        """Special tokens from config files, then detection of the image token, then overrides."""
        for name in SPECIAL_NAMES:
            if found.get(name):
                self.special[name] = found[name]
        if self.special["image"] is None:
            for candidate in IMAGE_TOKEN_CANDIDATES:
                if self.token_to_id(candidate) is not None and len(self.encode(candidate)) == 1:
                    self.special["image"] = candidate
                    break
        for name, token in (overrides or {}).items():
            if name not in SPECIAL_NAMES:
                raise ConfigError(
                    f"unknown name {name!r}; known names: {', '.join(SPECIAL_NAMES)}",
                    param="special_tokens",
                )
            if token is not None and not isinstance(token, str):
                raise ConfigError(
                    f"special_tokens[{name!r}]: expected a token string or None, got {token!r}"
                )
            if token is not None and name != "image" and self.token_to_id(token) is None:
                raise ConfigError(
                    f"special_tokens[{name!r}]: {token!r} is not a token of this tokenizer; "
                    f"pass a token from its vocabulary (e.g. its eos {self.special['eos']!r})"
                )
            self.special[name] = token
        self._fingerprint = None

    def __repr__(self) -> str:
        specials = ", ".join(f"{k}={v!r}" for k, v in self.special.items() if v)
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, {specials})"


def _token_text(value: Any) -> str | None:
    """A special token as written in configs: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"] or None
    return None


def read_tokenizer_config(
    folder: str | os.PathLike[str],
) -> tuple[dict[str, str | None], str | None, list[Path]]:
    """Special tokens, chat template and config files found in a tokenizer's folder.

    Reads ``tokenizer_config.json`` and ``special_tokens_map.json`` (which wins) and, for the
    chat template, ``chat_template.jinja`` or the config's ``chat_template`` (a string, or a list
    of named templates of which ``default`` is taken).

    Returns:
        ``(special, chat_template, files)`` where ``files`` are the config files read.
    """
    folder = Path(folder)
    special: dict[str, str | None] = {}
    template: str | None = None
    files: list[Path] = []
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            config = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON ({exc})", param="tokenizer") from None
        files.append(path)
        for key in SPECIAL_NAMES:
            token = _token_text(config.get(f"{key}_token"))
            if token is not None:
                special[key] = token
        if name == "tokenizer_config.json":
            template = _pick_template(config.get("chat_template"), path)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
        files.append(jinja)
    return special, template, files


def _pick_template(value: Any, path: Path) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        if "default" in named:
            return named["default"]
        raise ConfigError(
            f"{path} has several chat templates ({', '.join(map(str, named))}) and "
            f"none named 'default'; pass {spell('template')} one of them explicitly",
            param="tokenizer",
        )
    raise ConfigError(f"{path}: chat_template is neither a string nor a list", param="tokenizer")


def file_sha256(path: str | os.PathLike[str], block: int = 1 << 22) -> str:
    """SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def hf_spans(encoding: Any, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Per character span, the ``[first, end)`` range of tokens of ``encoding`` overlapping it.

    The first token is the one holding the span's first character that a token holds, the last
    the one holding its last such character (``char_to_token``: the first token covering a
    character); ``(0, 0)`` when no token holds any. Two ``char_to_token`` calls per span instead
    of a Python tuple per token: the offsets list costs as much as the rest of the recipe.
    """
    ranges = []
    to_token = encoding.char_to_token
    for a, b in spans:
        first = last = None
        for c in range(a, b):
            first = to_token(c)
            if first is not None:
                break
        if first is not None:
            for c in range(b - 1, a - 1, -1):
                last = to_token(c)
                if last is not None:
                    break
        ranges.append((first, last + 1) if first is not None and last is not None else (0, 0))
    return ranges
