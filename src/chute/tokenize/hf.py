"""``HFTokenizer``: a Hugging Face ``tokenizers`` tokenizer (a ``tokenizer.json`` file).

This is the fast, dependency-light path: the ``tokenizers`` library is a core dependency, a
``tokenizer.json`` holds the whole tokenizer, and encoding returns character offsets for free.

Example:
    >>> tok = HFTokenizer.from_path("tokenizers/qwen3/tokenizer.json")  # doctest: +SKIP
    >>> tok.encode("Hello world!")  # doctest: +SKIP
    [9707, 1879, 0]
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _RustTokenizer

from chute.errors import ConfigError
from chute.tokenize.base import Tokenizer, file_sha256, read_tokenizer_config

__all__ = ["HFTokenizer"]


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` behind chute's protocol.

    Args:
        tokenizer: the ``tokenizers.Tokenizer``.
        special: special tokens found in config files (see ``read_tokenizer_config``).
        special_tokens: overrides, e.g. ``{"eos": "<|endoftext|>"}``.
        path: the ``tokenizer.json`` it was loaded from (it then pickles as its path).
        config_files: config files read beside it (hashed into the fingerprint).
        chat_template: the chat template found beside it.
    """

    backend = "tokenizers"

    def __init__(
        self,
        tokenizer: _RustTokenizer,
        *,
        special: Mapping[str, str | None] | None = None,
        special_tokens: Mapping[str, str | None] | None = None,
        path: str | None = None,
        config_files: Sequence[str | os.PathLike[str]] = (),
        chat_template: str | None = None,
    ):
        super().__init__()
        self._tok = tokenizer
        self.path = path
        self.config_files = [os.fspath(p) for p in config_files]
        self.chat_template = chat_template
        self._set_special(special or {}, special_tokens)

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        special_tokens: Mapping[str, str | None] | None = None,
    ) -> HFTokenizer:
        """Load ``tokenizer.json`` (or a folder holding one) and the configs beside it."""
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise ConfigError(
                f"{path} has no tokenizer.json; pass a tokenizer.json file or the "
                f"folder that holds it",
                param="tokenizer",
            )
        try:
            tok = _RustTokenizer.from_file(os.fspath(p))
        except Exception as exc:
            raise ConfigError(
                f"{p} is not a Hugging Face tokenizers file ({exc})", param="tokenizer"
            ) from None
        special, template, files = read_tokenizer_config(p.parent)
        return cls(
            tok,
            special=special,
            special_tokens=special_tokens,
            path=os.fspath(p),
            config_files=files,
            chat_template=template,
        )

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self._tok.encode(text, add_special_tokens=False)
        return enc.ids, enc.offsets

    def encode_spans(
        self, text: str, spans: Sequence[tuple[int, int]]
    ) -> tuple[list[int], list[tuple[int, int]]]:
        # Two char_to_token calls per span instead of a Python tuple per token: the offsets
        # list costs as much as the rest of the recipe together.
        enc = self._tok.encode(text, add_special_tokens=False)
        ranges = []
        to_token = enc.char_to_token
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
        return enc.ids, ranges

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def rust(self) -> _RustTokenizer:
        """The wrapped ``tokenizers.Tokenizer``."""
        return self._tok

    def _identity(self) -> dict[str, Any]:
        files: dict[str, str] = {}
        if self.path is not None:
            files[Path(self.path).name] = file_sha256(self.path)
        else:
            digest = hashlib.sha256(self._tok.to_str().encode()).hexdigest()
            files["tokenizer.json (in memory)"] = digest
        for f in self.config_files:
            files[Path(f).name] = file_sha256(f)
        return {"files": files}

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k != "_tok"}
        # A tokenizer loaded from a file travels as its path (workers reload it); one built in
        # memory travels as its JSON.
        state["_tok_json"] = None if self.path is not None else self._tok.to_str()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        blob = state.pop("_tok_json")
        self.__dict__.update(state)
        if blob is not None:
            self._tok = _RustTokenizer.from_str(blob)
        else:
            self._tok = _RustTokenizer.from_file(str(self.path))
