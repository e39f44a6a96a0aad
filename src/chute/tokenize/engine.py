"""Which engine encodes a ``tokenizer.json``: tiktoken (compiled and verified) or ``tokenizers``.

``tokenizer_backend`` chooses: ``auto`` (the default) uses the tiktoken fast path where the
tokenizer compiles exactly and passes the checks, ``tokenizers`` otherwise; ``tiktoken`` demands
the fast path (a ``ConfigError`` says why it cannot be had); ``hf`` keeps ``tokenizers``.

Compiling and the thorough checks (``chute.tokenize.verify``: the BPE step on the strings where
the algorithms could part, every code point in context) run once per tokenizer file and
library versions; the outcome, tables or the reason for refusing, is kept under
``<cache root>/tokenizers/`` keyed by the file's SHA-256. The probe set runs at a load until
a *verdict* beside the tables (``chute.tokenize.verdict``) says the probes and the first texts
of one process's data agreed with ``tokenizers``; from then on a load reads the tables and the
verdict and never parses ``tokenizer.json`` (it is parsed the first time ``tokenizers`` is
needed: a text the fast path hands over, ``decode``). When ``auto`` does not get the fast path
it says why in one log line (``chute.tokenize`` logger): at INFO for a tokenizer that does not
compile (SentencePiece, an unusual pre-tokenizer), at WARNING when a check found a difference,
naming the first input that differs.

Example:
    >>> choice = choose(lambda: None, None, "hf")
    >>> choice.fast is None, choice.note
    (True, "tokenizer_backend='hf'")
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chute._internal.files import atomic_file, cache_root, one_builder
from chute._internal.spelling import spell_set, spell_value
from chute.errors import ConfigError, MissingDependency
from chute.tokenize.base import file_sha256
from chute.tokenize.compile_tiktoken import AddedToken, BPETables, NotCompilable, compile_bpe
from chute.tokenize.fast import FastBPE, import_tiktoken
from chute.tokenize.verdict import (
    Verdict,
    extra_tokens,
    probe_digest,
    read_verdict,
    write_verdict,
)
from chute.tokenize.verify import check_codepoints, check_merges, check_probes, probe_texts

__all__ = ["BACKENDS", "COMPILE_VERSION", "Choice", "choose", "confirm", "differs", "disable"]

BACKENDS = ("auto", "hf", "tiktoken")
# Bump when compiling or checking changes (old cache entries are then ignored).
COMPILE_VERSION = 1
log = logging.getLogger("chute.tokenize")

# key -> FastBPE, or (kind, reason): compiled once per process, shared by every tokenizer.
_MEMO: dict[str, FastBPE | tuple[str, str]] = {}
_PROBED: dict[str, str | None] = {}
_SAID: set[str] = set()
# key -> the SHA-256 of the tables file read or written, and the verdict that holds for it
_TABLES: dict[str, str] = {}
_VERDICTS: dict[str, Verdict | None] = {}


@dataclass(frozen=True)
class Choice:
    """The outcome: the fast encoder, or ``None`` and one line saying why not.

    ``verdict``: the kept verdict the fast path was chosen on (``chute.tokenize.verdict``):
    ``tokenizers`` need not be asked for ``vocab_size``, ``token_to_id`` or the first texts.
    ``sha256``: the SHA-256 of the ``tokenizer.json`` the choice was made for (read once).
    """

    fast: FastBPE | None
    note: str
    key: str | None = None
    verdict: Verdict | None = None
    sha256: str | None = None


def choose(rust: Callable[[], Any], path: str | None, request: str) -> Choice:
    """The engine for a ``tokenizers.Tokenizer`` under ``tokenizer_backend=request``.

    Args:
        rust: returns the ``tokenizers.Tokenizer``, parsing it if it was not yet: it is
            called only where a check needs it (no verdict kept for these tables yet).
        path: the ``tokenizer.json`` it was loaded from, or ``None`` (in memory).
        request: ``auto``, ``hf`` or ``tiktoken``.

    Raises:
        ConfigError: ``request`` is unknown, or ``tiktoken`` was asked for and cannot be had.
        MissingDependency: ``tiktoken`` was asked for and is not installed.
    """
    if request not in BACKENDS:
        raise ConfigError(
            f"expected one of {', '.join(BACKENDS)}, got {spell_value(request)}",
            param="tokenizer_backend",
        )
    if request == "hf":
        return Choice(None, spell_set("tokenizer_backend", "hf"))
    try:
        tiktoken = import_tiktoken()
    except MissingDependency:
        if request == "tiktoken":
            raise
        return Choice(None, "tiktoken is not installed (pip install 'chute[tiktoken]')")
    import tokenizers

    content = file_sha256(path) if path else hashlib.sha256(rust().to_str().encode()).hexdigest()
    versions = f"{COMPILE_VERSION}-{tiktoken.__version__}-{tokenizers.__version__}"
    key = f"{content[:40]}-{hashlib.sha256(versions.encode()).hexdigest()[:12]}"
    name = _name(path)
    outcome = _MEMO.get(key)
    if outcome is None:
        loaded = _load(key)
        if loaded is None:
            # one process of the machine compiles (the ranks of a node start together)
            with one_builder(_path(key)):
                loaded = _load(key) or _compile(rust(), key)
        outcome, _TABLES[key] = loaded
        _MEMO[key] = outcome
    if _VERDICTS.get(key) is None:
        # read on each load until one is kept: this process's workers may have kept it since
        # (a preprocess or lengths pass confirms in each worker), and the next pool's need not
        _VERDICTS[key] = _kept_verdict(key, outcome)
    verdict = _VERDICTS.get(key)
    if isinstance(outcome, FastBPE) and verdict is not None and verdict.differs is not None:
        outcome = _MEMO[key] = ("differs", _differs_on(verdict.differs))
    if isinstance(outcome, FastBPE):
        if key not in _PROBED:
            added = [t.content for t in outcome.tables.added]
            _PROBED[key] = None if verdict is not None else check_probes(rust(), outcome, added)
        if _PROBED[key] is None:
            return Choice(outcome, "", key, verdict, content)
        outcome = ("differs", f"it differs from tokenizers on the probe {_PROBED[key]!r}")
    kind, reason = outcome
    if request == "tiktoken":
        raise ConfigError(
            f"{name} cannot run on tiktoken: {reason}; use {spell_set('tokenizer_backend', 'auto')} "
            f"(tokenizers where tiktoken would differ) or {spell_set('tokenizer_backend', 'hf')}",
            param="tokenizer_backend",
        )
    if key not in _SAID:
        _SAID.add(key)
        if kind == "differs":
            log.warning("chute: %s: tiktoken fast path off, %s; tokenizers encodes", name, reason)
        else:
            log.info("chute: %s: no tiktoken fast path (%s); tokenizers encodes", name, reason)
    return Choice(None, reason, key, sha256=content)


def confirm(choice: Choice, rust: Any) -> Verdict | None:
    """Keep the verdict: the probes and this process's first texts agreed with ``rust``.

    Later loads of the same tables skip parsing ``tokenizer.json``. A verdict already kept
    (another process's, perhaps one that found a difference) stays.
    """
    key = choice.key
    fast = None if key is None else _MEMO.get(key)
    if key is None or not isinstance(fast, FastBPE) or _VERDICTS.get(key) is not None:
        return None
    tables = fast.tables
    verdict = Verdict(
        _TABLES[key],
        probe_digest(probe_texts([t.content for t in tables.added])),
        rust.get_vocab_size(with_added_tokens=True),
        extra_tokens(rust, tables),
    )
    write_verdict(_verdict_path(key), verdict, replace=False)
    _VERDICTS[key] = verdict
    return verdict


def kept_since(choice: Choice) -> bool:
    """Whether a verdict that the fast path agreed was kept for ``choice``'s tables since.

    A tokenizer loaded before any verdict checks its first texts; when another process kept
    one meanwhile (another worker of the same pool, a worker of an earlier pool of this
    process), those checks were done: the tokenizer can skip them.
    """
    key = choice.key
    fast = None if key is None else _MEMO.get(key)
    if key is None or not isinstance(fast, FastBPE):
        return False
    if _VERDICTS.get(key) is None:
        _VERDICTS[key] = _kept_verdict(key, fast)
    verdict = _VERDICTS[key]
    return verdict is not None and verdict.differs is None


def disable(choice: Choice, text: str) -> Choice:
    """The fast path off for this tokenizer file: it differed on ``text``.

    Off in this process at once, and in later ones through a ``differs`` verdict.
    """
    reason = _differs_on(text)
    key = choice.key
    if key is not None:
        if isinstance(_MEMO.get(key), FastBPE) and key in _TABLES:
            found = Verdict(_TABLES[key], "", 0, {}, differs=text[:200])
            write_verdict(_verdict_path(key), found, replace=True)
            _VERDICTS[key] = found
        _MEMO[key] = ("differs", reason)
        _SAID.add(key)
    return Choice(None, reason, key, sha256=choice.sha256)


def differs(path: str | None, text: str) -> None:
    """Say once that the fast path gave other ids than ``tokenizers`` on the user's ``text``."""
    log.warning(
        "chute: %s: tiktoken fast path off, it differs from tokenizers on the input %r; "
        "tokenizers encodes (set %s to silence this)",
        _name(path),
        text[:80] + ("..." if len(text) > 80 else ""),
        spell_set("tokenizer_backend", "hf"),
    )


def _differs_on(text: str) -> str:
    return f"it differs from tokenizers on the input {text[:80]!r}"


def _name(path: str | None) -> str:
    if path is None:
        return "the tokenizer"
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def _kept_verdict(key: str, outcome: FastBPE | tuple[str, str]) -> Verdict | None:
    """The verdict kept for these very tables and this probe set, else ``None``."""
    if not isinstance(outcome, FastBPE):
        return None
    verdict = read_verdict(_verdict_path(key))
    if verdict is None or verdict.tables_sha256 != _TABLES.get(key):
        return None  # none yet, or made for tables since rewritten: check again
    if verdict.differs is not None:
        return verdict
    added = [t.content for t in outcome.tables.added]
    return verdict if verdict.probes == probe_digest(probe_texts(added)) else None


def _compile(rust: Any, key: str) -> tuple[FastBPE | tuple[str, str], str]:
    """Compile and run the thorough checks; keep the outcome on disk (and its SHA-256)."""
    if getattr(rust, "encode_special_tokens", False):
        outcome: FastBPE | tuple[str, str] = (
            "refused",
            "encode_special_tokens is on (special tokens are split like text)",
        )
    else:
        try:
            # tokenizers' own serialisation (defaults written out), parsed by orjson: ~3x json
            tables = compile_bpe(orjson.loads(rust.to_str()))
        except NotCompilable as exc:
            outcome = ("refused", str(exc))
        else:
            fast = FastBPE(tables)
            found = check_merges(tables, fast)
            if found is None:
                found = check_codepoints(rust, fast)
            outcome = fast if found is None else ("differs", f"it differs on {found!r}")
    return outcome, _save(key, outcome)


def _path(key: str) -> Path:
    return cache_root() / "tokenizers" / f"{key}.npz"


def _verdict_path(key: str) -> Path:
    return cache_root() / "tokenizers" / f"{key}.verdict.json"


def _save(key: str, outcome: FastBPE | tuple[str, str]) -> str:
    """Write the outcome; returns the SHA-256 of the file's bytes."""
    arrays: dict[str, np.ndarray] = {}
    if isinstance(outcome, FastBPE):
        t = outcome.tables
        tokens = list(t.ranks)
        meta = {
            "pattern": t.pattern,
            "added": [[a.content, a.id, a.normalized] for a in t.added],
            "normal_form": t.normal_form,
            "left_out": t.left_out,
            "multi_rule": t.multi_rule,
        }
        arrays = {
            "blob": np.frombuffer(b"".join(tokens), dtype=np.uint8),
            "ends": np.cumsum([len(b) for b in tokens], dtype=np.int64),
            "ids": np.fromiter(t.ranks.values(), dtype=np.int64, count=len(tokens)),
        }
    else:
        meta = {"kind": outcome[0], "reason": outcome[1]}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy types allow_pickle
    raw = buffer.getvalue()
    try:
        with atomic_file(_path(key)) as f:
            f.write(raw)
    except OSError as exc:  # a read-only cache root: compile again next time
        log.debug("chute: cannot keep the compiled tokenizer at %s: %s", _path(key), exc)
    return hashlib.sha256(raw).hexdigest()


def _load(key: str) -> tuple[FastBPE | tuple[str, str], str] | None:
    """The kept outcome and the SHA-256 of its file, or ``None`` (absent, unreadable)."""
    path = _path(key)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.debug("chute: ignoring the unreadable compiled tokenizer %s: %s", path, exc)
        return None
    digest = hashlib.sha256(raw).hexdigest()
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes())
            if "reason" in meta:
                return (str(meta["kind"]), str(meta["reason"])), digest
            blob = data["blob"].tobytes()
            ends = data["ends"].tolist()
            ids = data["ids"].tolist()
        starts = [0, *ends[:-1]]
        ranks = {blob[a:b]: i for a, b, i in zip(starts, ends, ids, strict=True)}
        added = [AddedToken(c, int(i), bool(n)) for c, i, n in meta["added"]]
        tables = BPETables(
            meta["pattern"], ranks, added, meta["normal_form"], meta["left_out"], meta["multi_rule"]
        )
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        log.debug("chute: ignoring the unreadable compiled tokenizer %s: %s", path, exc)
        return None
    return FastBPE(tables), digest
