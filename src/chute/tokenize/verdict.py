"""What a load of compiled tables may skip: the checks against ``tokenizers`` already passed.

Loading a ``tokenizer.json`` whose tiktoken tables are cached used to parse the file with
``tokenizers`` every time (1-2 s for Qwen3's 11 MB) only to run the probes against it, answer
``vocab_size`` and ``token_to_id``, and compare the first texts of each process. A *verdict*,
kept beside the tables (``<key>.verdict.json``), records that this was done once and passed:

* the probes (``verify.check_probes``) agreed, for the probe set whose digest it names;
* ``SHADOW_CHECKS`` texts of the user's own data agreed in one process, ids and labels;
* what ``tokenizers`` answered that the tables do not hold: the vocabulary size, and the ids of
  vocabulary tokens left out of the tables (never produced, or not byte-level text).

It names the SHA-256 of the tables file it was made for: tables rewritten since (a compile
by another process, a damaged file) void it, and the load checks again as before. A difference
found later (a shadow check in any process) replaces it with a ``differs`` verdict, so later
loads keep ``tokenizers`` and say why instead of trusting the tables. The key of the tables
(and so of the verdict) is the ``tokenizer.json``'s SHA-256 with the library versions: a file
changed in any byte, same size and mtime or not, has another key.

Example:
    >>> v = Verdict("ab" * 32, "cd" * 8, 10, {"Ġx": 7})
    >>> Verdict.from_json(v.to_json()) == v
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chute.tokenize.compile_tiktoken import BPETables, token_bytes

__all__ = ["Verdict", "extra_tokens", "probe_digest", "read_verdict", "write_verdict"]

log = logging.getLogger("chute.tokenize")
_FORMAT = 1


@dataclass(frozen=True)
class Verdict:
    """The checks a compiled tokenizer passed, or the difference that turned it off.

    Attributes:
        tables_sha256: the SHA-256 of the tables file it was made for.
        probes: the digest of the probe set that agreed (``probe_digest``).
        vocab_size: ``tokenizers``' vocabulary size, added tokens included.
        tokens: vocabulary tokens the tables leave out, with their ids.
        differs: the input on which the fast path differed (the verdict then turns it off).
    """

    tables_sha256: str
    probes: str
    vocab_size: int
    tokens: Mapping[str, int] = field(default_factory=dict)
    differs: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "tables_sha256": self.tables_sha256,
            "probes": self.probes,
            "vocab_size": self.vocab_size,
            "tokens": dict(self.tokens),
            "differs": self.differs,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        if data.get("format") != _FORMAT:
            raise ValueError(f"verdict format {data.get('format')!r}, expected {_FORMAT}")
        tokens = data["tokens"]
        if not isinstance(tokens, dict):
            raise ValueError("tokens is not a mapping")
        differs = data.get("differs")
        return cls(
            str(data["tables_sha256"]),
            str(data["probes"]),
            int(data["vocab_size"]),
            {str(k): int(v) for k, v in tokens.items()},
            None if differs is None else str(differs),
        )

    def token_to_id(self, tables: BPETables, token: str) -> int | None:
        """``tokenizers``' ``token_to_id``: added tokens first, then the model's vocabulary.

        A vocabulary token is written in the byte alphabet; the tables hold it as its bytes.
        """
        for added in tables.added:
            if added.content == token:
                return added.id
        as_bytes = token_bytes(token)
        if as_bytes is None:
            return self.tokens.get(token)
        found = tables.ranks.get(as_bytes)
        return found if found is not None else self.tokens.get(token)


def probe_digest(texts: list[str]) -> str:
    """A short hash of the probe set: new probes in a new chute void older verdicts."""
    return hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def extra_tokens(rust: Any, tables: BPETables) -> dict[str, int]:
    """Vocabulary tokens (not added ones) whose bytes the tables do not map to their id."""
    out = {}
    for token, i in rust.get_vocab(with_added_tokens=False).items():
        as_bytes = token_bytes(token)
        if as_bytes is None or tables.ranks.get(as_bytes) != i:
            out[token] = i
    return out


def read_verdict(path: Path) -> Verdict | None:
    """The verdict at ``path``, or ``None`` (absent or unreadable: the checks run again)."""
    try:
        return Verdict.from_json(json.loads(path.read_bytes()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("chute: ignoring the unreadable tokenizer verdict %s: %s", path, exc)
        return None


def write_verdict(path: Path, verdict: Verdict, *, replace: bool) -> None:
    """Keep ``verdict`` at ``path``, atomically.

    ``replace=False`` keeps a verdict already there: a process that found a difference may have
    written it, and one that found none must not hide it. Failing to write (a read-only cache
    root) only means the checks run again next time.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(verdict.to_json(), ensure_ascii=False).encode())
            if replace:
                os.replace(tmp, path)
            else:
                with contextlib.suppress(FileExistsError):  # a verdict there stays
                    os.link(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        log.debug("chute: cannot keep the tokenizer verdict at %s: %s", path, exc)
