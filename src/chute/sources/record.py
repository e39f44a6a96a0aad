"""A raw record with its provenance: the bytes, where they came from, and (lazily) the parsed JSON."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from chute._internal.spelling import spell, spell_set
from chute.errors import SampleError

__all__ = ["MAX_RECORD_BYTES", "Record", "TextLine", "Unread", "check_size", "parse_json"]

# Records larger than this are rejected before they are read (record_too_large); generous enough
# for real long documents (a 50 MB web page, a book), small enough that a worker survives one.
MAX_RECORD_BYTES = 64 << 20


class Unread(Protocol):
    """The bytes of a large record, not read yet: their size (from the index) and a reader.

    A source hands a large record over this way so that a size guard (``check_size``) can
    reject it without reading it; ``read(n)`` reads its first ``n`` bytes (all of them when
    ``n`` is its size), checked against the index as every read is.
    """

    @property
    def size(self) -> int: ...

    def read(self, n: int) -> bytes: ...


class Record:
    r"""One raw line of a JSONL file, one element of a JSON array, or one row of a Parquet file.

    Parsing is lazy and happens on first access of ``data``: reading a record never raises for
    bad content, so a broken line becomes a counted ``SampleError`` in whichever guarded step
    touches it, not a crash of the reader. A large record may arrive unread (an ``Unread``):
    its ``size`` is known from the index, and its bytes are read on first access of ``raw`` or
    ``data``, so ``check_size`` rejects it without reading it. A Parquet row arrives already decoded
    (``Record.from_data``); its ``raw`` is then its JSON rendering, made on demand (for a
    rejects file), with binary values shown as ``"<N bytes>"``.

    Attributes:
        raw: the record's bytes (no newline, no BOM, no trailing ``\\r``).
        path: the file, as the user named it (for a compressed file: the ``.gz``/``.zst`` path).
        line: 1-based line in the file where the record begins (what an editor shows); for a
            Parquet file, the row counting from 1.
        index: the record's global index in its source.
        element: 1-based element number for JSON array files, ``None`` for JSONL.
        window: for a record split into windows (``Recipe(overflow="split")``), the window it
            stands for; ``None`` for the whole record.

    Example:
        >>> r = Record(b'{"text": "hi"}', path="d.jsonl", line=3, index=2)
        >>> r.data["text"], r.location
        ('hi', 'd.jsonl:3')
    """

    __slots__ = ("_data", "_raw", "element", "index", "line", "path", "window")

    def __init__(
        self,
        raw: bytes | Unread,
        *,
        path: str,
        line: int,
        index: int,
        element: int | None = None,
        window: int | None = None,
    ):
        self._raw: bytes | Unread | None = raw
        self.path = path
        self.line = line
        self.index = index
        self.element = element
        self.window = window
        self._data: Any = _UNPARSED

    @classmethod
    def from_data(cls, data: Any, *, path: str, line: int, index: int) -> Record:
        """A record whose value is already decoded (a Parquet row)."""
        record = cls(b"", path=path, line=line, index=index)
        record._raw = None
        record._data = data
        return record

    @property
    def size(self) -> int | None:
        """The record's size in bytes as stored, measured without parsing it.

        ``None`` for a row given as data (e.g. from Parquet): there is no text to measure. A
        record not read yet (a large one) knows its size from the index: nothing is read.
        """
        raw = self._raw
        if raw is None:
            return None
        return len(raw) if isinstance(raw, bytes) else raw.size

    @property
    def raw(self) -> bytes:
        raw = self._raw
        if isinstance(raw, bytes):
            return raw
        if raw is None:
            data = orjson.dumps(self._data, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY)
        else:
            data = raw.read(raw.size)  # a large record, read on first use
        self._raw = data
        return data

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes of ``raw``; a record not read yet reads only those.

        Example:
            >>> Record(b'{"text": "hello"}', path="d.jsonl", line=1, index=0).head(9)
            b'{"text": '
        """
        raw = self._raw
        if raw is not None and not isinstance(raw, bytes):
            return raw.read(min(n, raw.size))
        return self.raw[:n]

    @property
    def data(self) -> Any:
        """The parsed JSON value; raises ``SampleError`` (``bad_json``, ``bad_utf8``, ...)."""
        if self._data is _UNPARSED:
            self._data = parse_json(self.raw, path=self.path, line=self.line)
        return self._data

    @property
    def location(self) -> str:
        """``path:line``, plus the element number for JSON arrays and the window of a piece."""
        where = f"{self.path}:{self.line}"
        if self.element is not None:
            where += f" (element {self.element})"
        if self.window is not None:
            where += f" (window {self.window})"
        return where

    def with_window(self, window: int) -> Record:
        """This record standing for one of its windows (a copy; the parsed data is shared).

        Example:
            >>> Record(b'{"text": "hi"}', path="d.jsonl", line=3, index=2).with_window(1).location
            'd.jsonl:3 (window 1)'
        """
        other = self.__class__.__new__(self.__class__)
        for name in Record.__slots__:
            setattr(other, name, getattr(self, name))
        other.window = window
        return other

    def __repr__(self) -> str:
        preview = self.head(60).decode("utf-8", errors="replace")
        more = "..." if (self.size or len(self.raw)) > 60 else ""
        return f"{type(self).__name__}({self.location}, {preview}{more})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self._raw is None:
            return (_rebuild_row, (self._data, self.path, self.line, self.index, self.window))
        # a record not read yet travels as its bytes (a reader of the file does not pickle)
        fields = (self.raw, self.path, self.line, self.index, self.element, self.window)
        return (_rebuild_record, (type(self), *fields))


class TextLine(Record):
    """One line of a plain-text file (``.txt``): the record ``{"text": line}``.

    Pretraining corpora often come as one document per line (LLaMA-Factory's ``wiki_demo.txt``);
    such a line is read as the ``text`` format's record, so ``format="auto"`` and ``"text"`` take
    it as is.

    Example:
        >>> TextLine(b"Once upon a time.", path="wiki.txt", line=1, index=0).data
        {'text': 'Once upon a time.'}
    """

    __slots__ = ()

    @property
    def data(self) -> Any:
        if self._data is _UNPARSED:
            try:
                text = self.raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SampleError(
                    "bad_utf8",
                    f"invalid UTF-8 at byte {exc.start} of the line ({exc.reason})",
                    path=self.path,
                    line=self.line,
                ) from None
            self._data = {"text": text}
        return self._data


def _rebuild_record(
    cls: type[Record],
    raw: bytes,
    path: str,
    line: int,
    index: int,
    element: int | None,
    window: int | None = None,
) -> Record:
    return cls(raw, path=path, line=line, index=index, element=element, window=window)


def _rebuild_row(data: Any, path: str, line: int, index: int, window: int | None = None) -> Record:
    record = Record.from_data(data, path=path, line=line, index=index)
    record.window = window
    return record


def _plain(value: Any) -> Any:
    """How a decoded value orjson cannot write appears in ``raw`` (bytes: only their size)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    return str(value)


def check_size(record: Record, max_record_bytes: int | None) -> None:
    """Reject a record larger than ``max_record_bytes`` (``record_too_large``), unread.

    The size comes from the index (``Record.size``), so a rejected record costs nothing,
    however large; ``None`` means no limit. A row given as data (Parquet) has no size here.

    Example:
        >>> check_size(Record(b'{"text": "hi"}', path="d.jsonl", line=3, index=2), 10)
        Traceback (most recent call last):
        ...
        chute.errors.SampleError: d.jsonl:3: record_too_large: 14 bytes, more than max_record_bytes=10; raise max_record_bytes for such documents (memory per record grows with its size before the recipe can bound it)
    """
    size = record.size
    if max_record_bytes is not None and size is not None and size > max_record_bytes:
        raise SampleError(
            "record_too_large",
            f"{size:,} bytes, more than {spell_set('max_record_bytes', max_record_bytes)}; "
            f"raise {spell('max_record_bytes')} for such documents (memory per record grows "
            f"with its size before the recipe can bound it)",
            path=record.path,
            line=record.line,
        )


class _Unparsed:
    __slots__ = ()


_UNPARSED = _Unparsed()


def parse_json(raw: bytes, *, path: str | None = None, line: int | None = None) -> Any:
    """Parse JSON bytes with orjson, turning failures into a typed ``SampleError``.

    Example:
        >>> parse_json(b'{"a": 1}')
        {'a': 1}
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _classify(raw, str(exc), path, line) from None


def _classify(raw: bytes, message: str, path: str | None, line: int | None) -> SampleError:
    # Only the failure path pays for these checks.
    if not raw.strip():
        return SampleError("empty_record", "the record is empty", path=path, line=line)
    if b"\x00" in raw:
        at = raw.index(b"\x00")
        return SampleError(
            "nul_byte", f"NUL byte at offset {at} of the record", path=path, line=line
        )
    if "UTF-8" in message or "utf-8" in message:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            message = f"invalid UTF-8 at byte {exc.start} of the record ({exc.reason})"
        return SampleError("bad_utf8", message, path=path, line=line)
    if "depth" in message or "recursion" in message:
        return SampleError(
            "too_deep",
            f"JSON nested deeper than the parser's limit: {message}",
            path=path,
            line=line,
        )
    return SampleError("bad_json", message, path=path, line=line)
