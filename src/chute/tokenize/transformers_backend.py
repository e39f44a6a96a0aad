"""``TransformersTokenizer``: a ``transformers`` tokenizer object, or a local folder.

Folders are loaded with ``AutoTokenizer`` (never from the network). Needs the ``transformers``
extra: ``pip install 'chute[transformers]'``.

Fast tokenizers give offsets and behave exactly like ``HFTokenizer`` on their
``backend_tokenizer``; slow (Python) ones have no offsets, so chute encodes template pieces one
at a time with them (see ``chute.recipe.encode``).

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tok = TransformersTokenizer(AutoTokenizer.from_pretrained("path/to/model"))  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from chute.errors import ConfigError, MissingDependency
from chute.tokenize.base import Tokenizer

__all__ = ["TransformersTokenizer", "is_transformers_tokenizer"]


def is_transformers_tokenizer(obj: Any) -> bool:
    """Whether ``obj`` looks like a ``transformers`` tokenizer (without importing transformers)."""
    return any(
        cls.__module__.startswith("transformers.") and cls.__name__.endswith("TokenizerBase")
        for cls in type(obj).__mro__
    ) or (hasattr(obj, "apply_chat_template") and hasattr(obj, "convert_tokens_to_ids"))


class TransformersTokenizer(Tokenizer):
    """A ``transformers`` ``PreTrainedTokenizer(Fast)`` behind chute's protocol.

    Args:
        tokenizer: the tokenizer object.
        special_tokens: overrides of bos/eos/pad/unk/image.
    """

    backend = "transformers"
    engine = "transformers"

    def __init__(self, tokenizer: Any, special_tokens: Mapping[str, str | None] | None = None):
        super().__init__()
        self._tok = tokenizer
        self.supports_offsets = bool(getattr(tokenizer, "is_fast", False))
        self.chat_template = getattr(tokenizer, "chat_template", None)
        if isinstance(self.chat_template, dict):
            self.chat_template = self.chat_template.get("default")
        self._vocab = tokenizer.get_vocab()
        found = {
            name: getattr(tokenizer, f"{name}_token", None) for name in ("bos", "eos", "pad", "unk")
        }
        found["image"] = getattr(tokenizer, "image_token", None)
        self._set_special({k: v for k, v in found.items() if isinstance(v, str)}, special_tokens)
        self._overrides = dict(special_tokens or {})

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], special_tokens: Mapping[str, str | None] | None = None
    ) -> TransformersTokenizer:
        """Load a local tokenizer folder with ``AutoTokenizer`` (``local_files_only=True``)."""
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise MissingDependency(
                f"loading the tokenizer folder {path} needs transformers: "
                f"pip install 'chute[transformers]' (or pass a tokenizer.json file, which needs "
                f"only the tokenizers package)"
            ) from None
        try:
            tok = AutoTokenizer.from_pretrained(os.fspath(path), local_files_only=True)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]  # its first line says what failed
            raise ConfigError(
                f"transformers cannot load {path} ({type(exc).__name__}: {first})",
                param="tokenizer",
            ) from None
        return cls(tok, special_tokens)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        if not self.supports_offsets:
            raise NotImplementedError("slow transformers tokenizers have no offsets")
        enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def token_to_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    @property
    def vocab_size(self) -> int:
        return len(self._tok)

    @property
    def hf(self) -> Any:
        """The wrapped ``transformers`` tokenizer."""
        return self._tok

    def _identity(self) -> dict[str, Any]:
        backend = getattr(self._tok, "backend_tokenizer", None)
        if backend is not None:
            blob = backend.to_str().encode()
        else:
            blob = orjson.dumps(sorted(self._vocab.items(), key=lambda kv: kv[1]))
        return {
            "class": type(self._tok).__name__,
            "name_or_path": str(getattr(self._tok, "name_or_path", "")),
            "content_sha256": hashlib.sha256(blob).hexdigest(),
        }

    def __getstate__(self) -> dict[str, Any]:
        return {"_tok": self._tok, "_overrides": self._overrides}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_tok"], state["_overrides"])  # type: ignore[misc]
