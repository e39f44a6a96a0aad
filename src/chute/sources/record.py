"""A raw record with its provenance: the bytes, where they came from, and (lazily) the parsed JSON."""

from __future__ import annotations

from typing import Any

import orjson

from chute.errors import SampleError

__all__ = ["Record", "TextLine", "parse_json"]


class Record:
    r"""One raw line of a JSONL file, one element of a JSON array, or one row of a Parquet file.

    Parsing is lazy and happens on first access of ``data``: reading a record never raises for
    bad content, so a broken line becomes a counted ``SampleError`` in whichever guarded step
    touches it, not a crash of the reader. A Parquet row arrives already decoded
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
        raw: bytes,
        *,
        path: str,
        line: int,
        index: int,
        element: int | None = None,
        window: int | None = None,
    ):
        self._raw: bytes | None = raw
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

        ``None`` for a row given as data (e.g. from Parquet): there is no text to measure.
        """
        return None if self._raw is None else len(self._raw)

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = orjson.dumps(self._data, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY)
        return self._raw

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
        preview = self.raw[:60].decode("utf-8", errors="replace")
        more = "..." if len(self.raw) > 60 else ""
        return f"{type(self).__name__}({self.location}, {preview}{more})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self._raw is None:
            return (_rebuild_row, (self._data, self.path, self.line, self.index, self.window))
        fields = (self._raw, self.path, self.line, self.index, self.element, self.window)
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
