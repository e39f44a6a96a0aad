r"""What a record *says*, as a 64-bit hash: the key of validation splits and duplicate checks.

Two records are the same sample when their conversations are the same after normalisation,
whatever format, file or position they come from: an alpaca record and a ShareGPT record holding
the same exchange hash alike. The key covers, per message, the role, the text (Unicode NFC,
whitespace runs collapsed, ends stripped), the media references in place (as written, with
``\\`` as ``/`` and ``./`` removed; a tar shard's member by its name, not by its shard and
offset), tool calls and the conversation's tool definitions. Recipe options (a system prompt
the recipe adds, the template) are not part of it: they are not the record's content. A record
no format can read hashes its raw bytes, so identical broken lines still match each other::

    {"instruction": "Hi  there", "output": "Hello"}            ──┐
    {"conversations": [{"from": "human", "value": "Hi there"},  ──┴─► same content hash
                       {"from": "gpt", "value": "Hello"}]}

Example:
    >>> reader = FormatReader(FormatSpec("auto"))
    >>> a = record_hash(reader, {"instruction": "Hi  there", "output": "Hello"})
    >>> b = record_hash(reader, {"conversations": [{"from": "human", "value": "Hi there"},
    ...                                            {"from": "gpt", "value": "Hello"}]})
    >>> a == b, 0 <= a < 2**64
    (True, True)
"""

from __future__ import annotations

import hashlib
import posixpath
import unicodedata
from typing import Any

import orjson

from chute.errors import SampleError
from chute.formats import FormatReader, FormatSpec
from chute.sample.conversation import Conversation
from chute.sources.record import Record
from chute.sources.tar_members import MEMBER_PREFIX, MemberRef, is_member_ref

__all__ = ["CONTENT_VERSION", "content_key", "normalize_text", "reader_for", "record_hash"]

# Bump when the same record would hash differently (split membership and caches key on it).
CONTENT_VERSION = 2  # 2: a tar member by its name, not its shard and offset
_SEP_MESSAGE, _SEP_FIELD = b"\x1e", b"\x1f"


def normalize_text(text: str) -> str:
    r"""NFC, whitespace runs as one space, no leading or trailing space.

    Example:
        >>> normalize_text("  Caf\u0065\u0301\n\n ok ")
        'Café ok'
    """
    if not text.isascii():  # ASCII is its own NFC form: the common case skips the table
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


def _media_ref(value: str) -> str:
    if is_member_ref(value):
        # a tar member by its name: where it lies (the shard's path, the member's offset) is
        # not the record's content, so moved or re-sharded shards keep their hold-outs
        try:
            return MEMBER_PREFIX + MemberRef.parse(value).name
        except SampleError:
            return value
    ref = value.replace("\\", "/")
    if "://" in ref or ref.startswith("data:"):
        return ref
    return posixpath.normpath(ref).removeprefix("./")


def content_key(conv: Conversation) -> bytes:
    """The normalised bytes two records share exactly when they hold the same sample."""
    out = [conv.kind.encode()]
    if conv.tools:
        out.append(orjson.dumps(conv.tools, option=orjson.OPT_SORT_KEYS))
    for message in conv.messages:
        parts = [message.role]
        content = message.content
        if isinstance(content, str):
            parts.append(normalize_text(content))
        else:
            text: list[str] = []
            for part in content:
                if part.kind == "text":
                    text.append(part.value)
                else:  # a media reference in place, between the texts around it
                    parts.append(normalize_text("".join(text)))
                    parts.append(f"<{part.kind}:{_media_ref(part.value)}>")
                    text = []
            parts.append(normalize_text("".join(text)))
        if message.tool_calls:
            parts.append(orjson.dumps(message.tool_calls, option=orjson.OPT_SORT_KEYS).decode())
        out.append(_SEP_FIELD.join([p.encode("utf-8", "surrogatepass") for p in parts if p]))
    return _SEP_MESSAGE.join(out)


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def record_hash(reader: FormatReader, record: Record | Any) -> int:
    """The content hash of a record (a ``Record`` or parsed data) under ``reader``'s format."""
    try:
        if isinstance(record, Record):  # a tar sample names its media as its source did
            data = getattr(record, "content_data", record.data)
        else:
            data = record
        return _hash64(content_key(reader(data)))
    except SampleError:
        if isinstance(record, Record):
            return _hash64(b"raw\x1f" + record.raw)
        return _hash64(b"raw\x1f" + orjson.dumps(record, default=str))


def reader_for(spec: FormatSpec | str) -> FormatReader:
    """A ``FormatReader`` for a spec or a format name.

    It has no ``max_turns``: a hash keeps its value whatever the recipe's limits.
    """
    return FormatReader(spec if isinstance(spec, FormatSpec) else FormatSpec(spec), max_turns=None)
