"""Media references in records: ``<image>`` placeholders, top-level lists, inline ``<img>`` tags.

Formats mark where an image goes in three ways, and this module turns all three into ``Part``
values inside the messages:

* a placeholder in the text (``<image>``, ``<video>``, ``<audio>``) matched, in order, with a
  top-level list (``images``, LLaVA's ``image``): the counts must agree
  (``image_placeholder_mismatch`` otherwise). With no placeholder at all, the listed media are
  put at the start of the first user turn (what LLaVA-style datasets without placeholders mean);
* explicit parts in OpenAI-style content lists (``{"type": "image_url", ...}``), which stay where
  they are; a placeholder in the text of such a record takes them in order instead (xtuner's
  ``<IMG_CONTEXT>`` style), and a source-less part (``{"type": "image"}``) is itself a
  placeholder for the top-level list;
* Qwen-VL's inline tags, ``Picture 1: <img>path</img>``, which become image parts in place.

Example:
    >>> from chute.sample.conversation import Message
    >>> msgs = [Message("user", "<image>What is it?"), Message("assistant", "A dog.")]
    >>> bind_media(msgs, {"image": ["dog.jpg"]}, {"image": "<image>"}, {"image": "images"})
    >>> msgs[0].content
    [Part('image', 'dog.jpg'), Part('text', 'What is it?')]
"""

from __future__ import annotations

import base64
import re
from typing import Any

from chute._internal.spelling import spell
from chute.errors import SampleError
from chute.sample.conversation import Message, Part

__all__ = ["bind_media", "inline_url", "media_list", "split_inline_tags"]

_IMG_TAG = re.compile(r"<img>(.*?)</img>", re.DOTALL)


def media_list(value: Any, field: str) -> list[str]:
    r"""A top-level media field as a list of source strings (a single string is a list of one).

    Entries may be strings or objects with a ``path`` or ``url``. An object that carries the
    media itself (``{"bytes": b"...", "path": ...}``, the Hugging Face ``Image`` and ``Audio``
    features, as Parquet files hold them) becomes a ``data:`` URL of those bytes: as in
    ``datasets``, the bytes win over the path, which then only names where the file once was.
    Plain bytes (a binary column, or a list of them) become ``data:`` URLs too. The media
    stage decodes such URLs under the same limits as files (``DecodeOptions.max_bytes``,
    ``max_pixels``); a video or audio clip is copied to a local file once for its decoder.

    Example:
        >>> media_list([{"bytes": b"\x89PNG...", "path": "a.png"}], "images")
        ['data:image/png;base64,iVBORy4uLg==']
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, bytes | bytearray | dict):  # one binary column value, one struct
        value = [value]
    if not isinstance(value, list):
        raise SampleError(
            "wrong_type",
            f"expected a list of paths (or one path), got {type(value).__name__}",
            field=field,
        )
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bytes | bytearray) and item:
            out.append(inline_url(bytes(item)))
            continue
        if isinstance(item, dict):
            data = item.get("bytes")
            if isinstance(data, bytes | bytearray) and data:
                out.append(inline_url(bytes(data)))
                continue
            entry = item
            item = item.get("path") or item.get("url") or item.get("image")
            if item is None and "bytes" in entry:  # the Hub's struct, with neither filled
                raise SampleError(
                    "wrong_type",
                    f"entry {i} has no media: its bytes and its path are both empty",
                    field=f"{field}[{i}]",
                )
        if not isinstance(item, str) or not item:
            raise SampleError(
                "wrong_type",
                f"entry {i} is not a path string (or an object with 'path' or 'url')",
                field=f"{field}[{i}]",
            )
        out.append(item)
    return out


# Leading bytes of the image formats records carry inline (the decoder sniffs again anyway).
_MAGIC = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG", "image/png"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
    (b"fLaC", "audio/flac"),
    (b"OggS", "audio/ogg"),
    (b"ID3", "audio/mpeg"),
    (b"\xff\xfb", "audio/mpeg"),
    (b"\xff\xf3", "audio/mpeg"),
)


def inline_url(data: bytes) -> str:
    """A ``data:`` URL holding ``data`` (an image's or a clip's bytes), typed when recognised."""
    kind = next((t for magic, t in _MAGIC if data.startswith(magic)), None)
    if kind is None and data[:4] == b"RIFF":
        kind = {b"WEBP": "image/webp", b"WAVE": "audio/wav", b"AVI ": "video/avi"}.get(data[8:12])
    if kind is None:
        kind = "video/mp4" if data[4:8] == b"ftyp" else "image"
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def split_inline_tags(text: str) -> list[Part] | str:
    r"""Qwen-VL's ``<img>path</img>`` tags as image parts; text without tags is returned as is.

    Example:
        >>> split_inline_tags("Picture 1: <img>a.jpg</img>\nWhat?")
        [Part('text', 'Picture 1: '), Part('image', 'a.jpg'), Part('text', '\nWhat?')]
    """
    if "<img>" not in text:
        return text
    pieces = _IMG_TAG.split(text)
    if len(pieces) == 1:
        return text
    parts: list[Part] = []
    for k, piece in enumerate(pieces):
        if k % 2:
            parts.append(Part("image", piece.strip()))
        elif piece:
            parts.append(Part("text", piece))
    return parts


def bind_media(
    messages: list[Message],
    lists: dict[str, list[str]],
    placeholders: dict[str, str],
    fields: dict[str, str],
) -> None:
    """Turn placeholders into media parts and bind them to sources, in place.

    Args:
        messages: the record's messages; string contents with a placeholder become part lists.
        lists: kind -> the record's top-level sources (``{"image": ["a.jpg"]}``).
        placeholders: kind -> placeholder text (``{"image": "<image>"}``).
        fields: kind -> the record field the list came from, for error messages.

    Raises:
        SampleError: ``image_placeholder_mismatch`` when counts disagree.
    """
    if not lists and _plain_text(messages, tuple(placeholders.values())):
        return  # the common text-only record: nothing to bind, nothing to check
    counts = dict.fromkeys(placeholders, 0)
    explicit = dict.fromkeys(placeholders, 0)
    for m in messages:
        content = m.content
        if isinstance(content, str):
            if any(p in content for p in placeholders.values()):
                m.content = content = _split(content, placeholders)
            else:
                continue
        elif any(p.kind == "text" and _has(p.value, placeholders) for p in content):
            expanded: list[Part] = []
            for p in content:
                if p.kind == "text":
                    split = _split(p.value, placeholders)
                    expanded.extend(split)
                else:
                    expanded.append(p)
            m.content = content = expanded
        for p in content:
            if p.kind in counts:
                if p.value is None:
                    counts[p.kind] += 1
                else:
                    explicit[p.kind] += 1
            elif p.kind != "text" and p.value is None:
                counts[p.kind] = counts.get(p.kind, 0) + 1
                explicit.setdefault(p.kind, 0)
    for kind in set(counts) | set(lists):
        sources = lists.get(kind, [])
        n_ph, n_ex = counts.get(kind, 0), explicit.get(kind, 0)
        if sources:
            if n_ph == 0 and n_ex == 0:
                _prepend(messages, [Part(kind, s) for s in sources])
            elif n_ph == len(sources):
                _fill(messages, kind, iter(sources))
            else:
                token = placeholders.get(kind, f"{{'type': '{kind}'}}")
                raise SampleError(
                    "image_placeholder_mismatch",
                    f"{n_ph} {token} placeholder(s) in the messages but {len(sources)} "
                    f"{kind}(s) in {fields.get(kind, kind + 's')!r}; each listed {kind} needs "
                    f"exactly one placeholder, in order",
                    field=fields.get(kind),
                )
        elif n_ph:
            token = placeholders.get(kind, f"{{'type': '{kind}'}}")
            if n_ex == n_ph:
                _move_explicit(messages, kind)
            else:
                where = f"{n_ex} {kind} part(s)" if n_ex else f"no {fields.get(kind, kind + 's')!r}"
                raise SampleError(
                    "image_placeholder_mismatch",
                    f"{n_ph} {token} placeholder(s) in the messages but the record has {where}; "
                    f"list the {kind}s, or change the placeholder text ({spell('placeholders')}) if "
                    f"{token} is meant literally",
                    field=fields.get(kind),
                )


def _plain_text(messages: list[Message], texts: tuple[str, ...]) -> bool:
    """True when every message is a string without any placeholder (a hot path: no genexprs)."""
    for m in messages:
        content = m.content
        if content.__class__ is not str:
            return False
        for text in texts:
            if text in content:
                return False
    return True


def _has(text: str, placeholders: dict[str, str]) -> bool:
    return any(p in text for p in placeholders.values())


def _split(text: str, placeholders: dict[str, str]) -> list[Part]:
    """Text with placeholders -> text parts and source-less media parts (to be bound)."""
    kinds = {v: k for k, v in placeholders.items()}
    pattern = re.compile("|".join(re.escape(v) for v in sorted(kinds, key=len, reverse=True)))
    parts: list[Part] = []
    pos = 0
    for match in pattern.finditer(text):
        if match.start() > pos:
            parts.append(Part("text", text[pos : match.start()]))
        parts.append(Part(kinds[match.group()], None))  # type: ignore[arg-type]
        pos = match.end()
    if pos < len(text):
        parts.append(Part("text", text[pos:]))
    return parts


def _prepend(messages: list[Message], media: list[Part]) -> None:
    target = next((m for m in messages if m.role == "user"), messages[0] if messages else None)
    if target is None:
        return
    content = target.content
    rest = [Part("text", content)] if isinstance(content, str) else list(content)
    target.content = media + [p for p in rest if p.kind != "text" or p.value]


def _fill(messages: list[Message], kind: str, sources: Any) -> None:
    for m in messages:
        if isinstance(m.content, str):
            continue
        for p in m.content:
            if p.kind == kind and p.value is None:
                p.value = next(sources)


def _move_explicit(messages: list[Message], kind: str) -> None:
    """Placeholders take the explicit parts' sources in order; the explicit parts go away."""
    sources = iter(
        [
            p.value
            for m in messages
            if not isinstance(m.content, str)
            for p in m.content
            if p.kind == kind and p.value is not None
        ]
    )
    for m in messages:
        if isinstance(m.content, str):
            continue
        kept = []
        for p in m.content:
            if p.kind == kind:
                if p.value is None:
                    kept.append(Part(kind, next(sources)))
            else:
                kept.append(p)
        m.content = kept
