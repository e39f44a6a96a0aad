"""``HFTokenizer``: a Hugging Face ``tokenizers`` tokenizer (a ``tokenizer.json`` file).

This is the dependency-light path: the ``tokenizers`` library is a core dependency, a
``tokenizer.json`` holds the whole tokenizer, and encoding returns character offsets for free.

Byte-level BPE tokenizers (Qwen2/2.5/3, Llama 3.x, GPT-2 and kin) encode ~4-5x faster through
tiktoken: with ``backend="auto"`` (the default) the tokenizer is compiled to tiktoken's tables
where that keeps every id, checked (see ``chute.tokenize.engine``), and used; ``engine`` says
which library encodes, ``engine_note`` why it is not tiktoken. Until a verdict is kept beside
the compiled tables (``chute.tokenize.verdict``), the first ``SHADOW_CHECKS`` texts a process
encodes are also encoded by ``tokenizers`` and compared, ids and labels; a difference turns the
fast path off with a one-line warning naming the text (and keeps it off for later loads). Once
the verdict is kept, ``from_path`` does not parse ``tokenizer.json`` at all (1-2 s for an
11 MB file): it is parsed where ``tokenizers`` is needed (a text the fast path hands over,
``decode``, ``encode_with_offsets``, ``rust``). Either way the ids are ``tokenizers``' ids, so
the fingerprint does not depend on the engine.

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

import numpy as np
from tokenizers import Tokenizer as _RustTokenizer

from chute.errors import ConfigError
from chute.tokenize.base import Tokenizer, file_sha256, hf_spans, read_tokenizer_config
from chute.tokenize.engine import Choice, choose, confirm, differs, disable, kept_since
from chute.tokenize.fast import FastBPE

__all__ = ["SHADOW_CHECKS", "HFTokenizer"]

# Texts each process encodes with both engines before trusting the fast one alone.
SHADOW_CHECKS = 64


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` behind chute's protocol.

    Args:
        tokenizer: the ``tokenizers.Tokenizer``, or ``None`` to parse ``path`` where needed.
        special: special tokens found in config files (see ``read_tokenizer_config``).
        special_tokens: overrides, e.g. ``{"eos": "<|endoftext|>"}``.
        path: the ``tokenizer.json`` it was loaded from (it then pickles as its path).
        config_files: config files read beside it (hashed into the fingerprint).
        chat_template: the chat template found beside it.
        backend: ``auto`` (tiktoken where it gives the same ids, else ``tokenizers``),
            ``tiktoken`` (required: a ``ConfigError`` says why it cannot be had) or ``hf``.

    Attributes:
        engine: the library that encodes: ``tiktoken`` or ``tokenizers``.
        engine_note: why the engine is not tiktoken (one line), or ``""``.
    """

    backend = "tokenizers"

    def __init__(
        self,
        tokenizer: _RustTokenizer | None,
        *,
        special: Mapping[str, str | None] | None = None,
        special_tokens: Mapping[str, str | None] | None = None,
        path: str | None = None,
        config_files: Sequence[str | os.PathLike[str]] = (),
        chat_template: str | None = None,
        backend: str = "auto",
    ):
        super().__init__()
        if tokenizer is None and path is None:
            raise ConfigError("pass a tokenizers.Tokenizer or the path of its tokenizer.json")
        # None until tokenizers is needed: a load whose checks are kept never parses the file
        self._tok: _RustTokenizer | None = tokenizer
        self._fast: FastBPE | None = None
        self._checks_left = 0
        self.path = path
        self.config_files = [os.fspath(p) for p in config_files]
        self.chat_template = chat_template
        self.backend_request = backend
        self._use(choose(self._rust, path, backend))
        if self._fast is None:
            self._rust()  # tokenizers encodes: a file it cannot read fails here, at load
        # the first checks are for the user's texts, not the image-token candidates tried here
        checks, self._checks_left = self._checks_left, 0
        self._set_special(special or {}, special_tokens)
        self._checks_left = checks

    def _rust(self) -> _RustTokenizer:
        """The ``tokenizers.Tokenizer``, parsed from ``path`` the first time it is needed."""
        if self._tok is None:
            self._tok = _parse(str(self.path))
        return self._tok

    def _use(self, choice: Choice) -> None:
        self._choice = choice
        self._fast = choice.fast
        self.engine = "tokenizers" if choice.fast is None else "tiktoken"
        self.engine_note = choice.note
        # a kept verdict says the first texts of an earlier process agreed already
        checked = choice.fast is None or choice.verdict is not None
        self._checks_left = 0 if checked else SHADOW_CHECKS

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        special_tokens: Mapping[str, str | None] | None = None,
        backend: str = "auto",
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
        special, template, files = read_tokenizer_config(p.parent)
        return cls(
            None,
            special=special,
            special_tokens=special_tokens,
            path=os.fspath(p),
            config_files=files,
            chat_template=template,
            backend=backend,
        )

    def encode(self, text: str) -> list[int]:
        fast = self._fast
        if fast is not None:
            ids = fast.encode(text)
            if ids is not None:
                return ids if not self._checks_left else self._checked(text, ids, None, ())[0]
        return self._rust().encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self._rust().encode(text, add_special_tokens=False)
        return enc.ids, enc.offsets

    def encode_spans(
        self, text: str, spans: Sequence[tuple[int, int]]
    ) -> tuple[list[int], list[tuple[int, int]]]:
        fast = self._fast
        if fast is not None:
            found = fast.encode_spans(text, spans)
            if found is not None:
                if not self._checks_left:
                    return found
                return self._checked(text, found[0], found[1], spans)
        enc = self._rust().encode(text, add_special_tokens=False)
        return enc.ids, hf_spans(enc, spans)

    def encode_spans_array(
        self, text: str, spans: Sequence[tuple[int, int]]
    ) -> tuple[np.ndarray, list[tuple[int, int]]]:
        fast = self._fast
        if fast is not None and not self._checks_left:
            found = fast.encode_spans_array(text, spans)
            if found is not None:
                return found
        ids, ranges = self.encode_spans(text, spans)  # checked, or by tokenizers
        return np.array(ids, dtype=np.int32), ranges

    def _checked(
        self,
        text: str,
        ids: list[int],
        ranges: list[tuple[int, int]] | None,
        spans: Sequence[tuple[int, int]],
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """The fast path's answer checked against ``tokenizers``'.

        On a difference ``tokenizers``' answer is returned and the fast path turned off (for
        every tokenizer of this file in this process).
        """
        if self._checks_left == SHADOW_CHECKS and kept_since(self._choice):
            # another process kept the verdict since this was loaded: no need to parse the
            # file and check (each forked worker of a pool would, 0.5-2 s apiece)
            self._checks_left = 0
            return ids, ranges if ranges is not None else []
        self._checks_left -= 1
        rust = self._rust()
        enc = rust.encode(text, add_special_tokens=False)
        expected = hf_spans(enc, spans) if ranges is not None else []
        if enc.ids == ids and (ranges is None or ranges == expected):
            if not self._checks_left:
                confirm(self._choice, rust)  # later loads need not parse tokenizer.json
            return ids, expected
        differs(self.path, text)
        self._use(disable(self._choice, text))
        return enc.ids, expected

    def decode(self, ids: Sequence[int]) -> str:
        return self._rust().decode(list(ids), skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        verdict, fast = self._choice.verdict, self._fast
        if self._tok is None and verdict is not None and fast is not None:
            return verdict.token_to_id(fast.tables, token)
        return self._rust().token_to_id(token)

    @property
    def vocab_size(self) -> int:
        verdict = self._choice.verdict
        if self._tok is None and verdict is not None and self._fast is not None:
            return verdict.vocab_size
        return self._rust().get_vocab_size(with_added_tokens=True)

    @property
    def rust(self) -> _RustTokenizer:
        """The wrapped ``tokenizers.Tokenizer`` (parsed now if it was not yet)."""
        return self._rust()

    def _identity(self) -> dict[str, Any]:
        files: dict[str, str] = {}
        if self.path is not None:  # the bytes the engine was chosen for, hashed once
            files[Path(self.path).name] = self._choice.sha256 or file_sha256(self.path)
        else:
            digest = hashlib.sha256(self._rust().to_str().encode()).hexdigest()
            files["tokenizer.json (in memory)"] = digest
        for f in self.config_files:
            files[Path(f).name] = file_sha256(f)
        return {"files": files}

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_tok", "_fast", "_choice")}
        # A tokenizer loaded from a file travels as its path (workers reload it); one built in
        # memory travels as its JSON.
        state["_tok_json"] = None if self.path is not None else self._rust().to_str()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        blob = state.pop("_tok_json")
        self.__dict__.update(state)
        # from its path where needed (not at all where the verdict is kept), or from its JSON
        self._tok = None if blob is None else _RustTokenizer.from_str(blob)
        if self.engine == "tiktoken":  # chosen again here: the compiled tables do not travel
            self._use(choose(self._rust, self.path, self.backend_request))
        else:  # tokenizers stays (also where a check in the sending process found a difference)
            self._use(Choice(None, self.engine_note))


def _parse(path: str) -> _RustTokenizer:
    """``tokenizers``' own parse of a ``tokenizer.json``, or a ``ConfigError`` saying why not."""
    try:
        return _RustTokenizer.from_file(path)
    except Exception as exc:
        raise ConfigError(
            f"{path} is not a Hugging Face tokenizers file ({exc})", param="tokenizer"
        ) from None
