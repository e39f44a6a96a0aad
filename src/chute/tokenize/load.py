"""``load_tokenizer``: a tokenizer from a path, a folder or an object, with the backend asked for.

Re-exported by ``chute.tokenize``; see its docstring for the whole picture.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chute._internal.spelling import spell, spell_set, spell_value
from chute.errors import ConfigError, MissingDependency
from chute.tokenize.base import SPECIAL_NAMES, Tokenizer, read_tokenizer_config
from chute.tokenize.engine import BACKENDS
from chute.tokenize.hf import HFTokenizer
from chute.tokenize.tiktoken_backend import TiktokenTokenizer
from chute.tokenize.transformers_backend import TransformersTokenizer, is_transformers_tokenizer

__all__ = [
    "BACKENDS",
    "SPECIAL_NAMES",
    "HFTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TransformersTokenizer",
    "load_tokenizer",
    "read_tokenizer_config",
]


def load_tokenizer(
    tokenizer: Any,
    *,
    special_tokens: Mapping[str, str | None] | None = None,
    tiktoken_pattern: str | None = None,
    tiktoken_special_tokens: Mapping[str, int] | None = None,
    backend: str = "auto",
) -> Tokenizer:
    """A chute ``Tokenizer`` from a path or an object (see the module docstring).

    Args:
        tokenizer: path or object.
        special_tokens: overrides of ``bos``/``eos``/``pad``/``unk``/``image``, e.g.
            ``{"eos": "<|endoftext|>"}``.
        tiktoken_pattern: for tiktoken files: a regex or a preset name (``qwen``, ``llama3``,
            ``gpt2``); needed when the file's rank count matches no preset.
        tiktoken_special_tokens: for tiktoken files: ``{token: id}`` added to the encoding.
        backend: ``auto``, ``hf`` or ``tiktoken``: the engine of a ``tokenizer.json`` (see the
            module docstring).

    Raises:
        ConfigError: the path does not exist or is no tokenizer chute can read.
        ImportError: the backend needs an extra that is not installed (the message says which).
    """
    if backend not in BACKENDS:
        raise ConfigError(
            f"expected one of {', '.join(BACKENDS)}, got {spell_value(backend)}",
            param="tokenizer_backend",
        )
    if isinstance(tokenizer, Tokenizer):
        if special_tokens:
            raise ConfigError(
                "cannot override special tokens of a ready chute Tokenizer; "
                "pass them when you create it, or pass a path",
                param="special_tokens",
            )
        if backend != "auto" and getattr(tokenizer, "backend_request", backend) != backend:
            raise ConfigError(
                f"cannot change the engine of a ready chute Tokenizer; pass backend= when you "
                f"create it, or pass a path with {spell_set('tokenizer_backend', backend)}",
                param="tokenizer_backend",
            )
        return tokenizer
    if isinstance(tokenizer, str | os.PathLike):
        tok = _from_path(
            Path(tokenizer), special_tokens, tiktoken_pattern, tiktoken_special_tokens, backend
        )
        _check_backend(tok, backend, str(tokenizer))
        return tok
    cls = type(tokenizer)
    if cls.__module__.startswith("tokenizers") and cls.__name__ == "Tokenizer":
        return HFTokenizer(tokenizer, special_tokens=special_tokens, backend=backend)
    if cls.__module__.startswith("tiktoken"):
        raise ConfigError(
            "a tiktoken.Encoding object has no file to fingerprint; pass the BPE file "
            "path (with tiktoken_pattern= / tiktoken_special_tokens= when it is not a preset)",
            param="tokenizer",
        )
    if is_transformers_tokenizer(tokenizer):
        tok = TransformersTokenizer(tokenizer, special_tokens)
        _check_backend(tok, backend, cls.__name__)
        return tok
    raise ConfigError(
        f"cannot use a {cls.__module__}.{cls.__name__}; pass a tokenizer.json path, a "
        f"tokenizer folder, a tiktoken BPE file, or a tokenizers/transformers tokenizer object",
        param="tokenizer",
    )


def _check_backend(tok: Tokenizer, backend: str, what: str) -> None:
    """``hf`` and ``tiktoken`` name engines of a ``tokenizer.json``; elsewhere they must fit."""
    if isinstance(tok, HFTokenizer) or backend == "auto":
        return
    if backend == "tiktoken" and tok.backend == "tiktoken":
        return
    raise ConfigError(
        f"{spell_set('tokenizer_backend', backend)} chooses the engine of a tokenizer.json, and "
        f"{what} loads through {tok.backend}; leave {spell_set('tokenizer_backend', 'auto')}",
        param="tokenizer_backend",
    )


def _from_path(
    path: Path,
    special_tokens: Mapping[str, str | None] | None,
    pattern: str | None,
    tik_specials: Mapping[str, int] | None,
    backend: str = "auto",
) -> Tokenizer:
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder", param="tokenizer")
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return HFTokenizer.from_path(path, special_tokens, backend=backend)
        bpe = sorted(path.glob("*.tiktoken"))
        if not bpe:  # Llama 3's tokenizer.model is a tiktoken file, not a SentencePiece one:
            # through transformers it would load without its special tokens (<|eot_id|> as text)
            bpe = [m for m in sorted(path.glob("*.model")) if _looks_like_tiktoken(m)]
        if len(bpe) == 1:
            return _tiktoken(bpe[0], special_tokens, pattern, tik_specials)
        return _from_folder_without_json(path, special_tokens)
    if path.name == "tokenizer_config.json":
        return _from_path(path.parent, special_tokens, pattern, tik_specials, backend)
    if path.suffix == ".json":
        return HFTokenizer.from_path(path, special_tokens, backend=backend)
    if _looks_like_tiktoken(path):
        return _tiktoken(path, special_tokens, pattern, tik_specials)
    raise ConfigError(
        f"{path} is neither a tokenizer.json nor a tiktoken BPE file; a SentencePiece "
        f"model loads through transformers: pass the folder that holds it with its "
        f"tokenizer_config.json (pip install 'chute[sentencepiece]')",
        param="tokenizer",
    )


# What transformers builds a tokenizer from in a folder without tokenizer.json: SentencePiece
# models, BPE vocabularies (vocab.json with merges.txt), WordPiece vocabularies (vocab.txt).
_VOCAB_FILES = frozenset(
    {"tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "vocab.txt"}
)


def _from_folder_without_json(
    path: Path, special_tokens: Mapping[str, str | None] | None
) -> Tokenizer:
    """A folder without ``tokenizer.json``: through transformers, if it holds a vocabulary.

    A folder with only configs (a ``tokenizer_config.json`` copied alone) is refused, not
    loaded as a tokenizer of its added tokens alone; so is a folder transformers cannot read.
    Both messages list what the folder holds.
    """
    names = sorted(p.name for p in path.iterdir())
    vocab = [n for n in names if n in _VOCAB_FILES or n.endswith(".model")]
    if not vocab:
        raise ConfigError(_no_tokenizer_json(path, names), param="tokenizer")
    if any(n.endswith(".model") for n in vocab) and not _installed("sentencepiece"):
        raise MissingDependency(
            f"{spell('tokenizer')}: {path} has no tokenizer.json, and its {', '.join(vocab)} "
            f"loads through sentencepiece: pip install 'chute[sentencepiece]' (or pass a "
            f"tokenizer.json)"
        )
    try:
        return TransformersTokenizer.from_pretrained(path, special_tokens)
    except ConfigError as exc:
        reason = str(exc).partition(": ")[2] if exc.param else str(exc)
        raise ConfigError(
            f"{_no_tokenizer_json(path, names)}; transformers could not load {', '.join(vocab)} "
            f"either: {reason}",
            param="tokenizer",
        ) from None


def _no_tokenizer_json(path: Path, names: list[str]) -> str:
    shown = ", ".join(names[:8]) + (f", and {len(names) - 8} more" if len(names) > 8 else "")
    return (
        f"no tokenizer.json in {path} (it holds {shown or 'nothing'}); pass a tokenizer.json "
        f"(or the folder that holds one), a tiktoken BPE file, or a folder with a SentencePiece "
        f"tokenizer.model and its tokenizer_config.json"
    )


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _tiktoken(
    path: Path,
    special_tokens: Mapping[str, str | None] | None,
    pattern: str | None,
    tik_specials: Mapping[str, int] | None,
) -> Tokenizer:
    special, _, _ = read_tokenizer_config(path.parent)
    return TiktokenTokenizer(
        path,
        pattern=pattern,
        special_tokens=tik_specials,
        special={**special, **(special_tokens or {})},
    )


def _looks_like_tiktoken(path: Path) -> bool:
    """A tiktoken file's first line is ``<base64> <int>``; SentencePiece models are binary."""
    with open(path, "rb") as f:
        head = f.readline(4096)
    parts = head.split()
    return len(parts) == 2 and parts[1].isdigit() and all(32 < b < 127 for b in parts[0])
