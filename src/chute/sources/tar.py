r"""``TarSource``: WebDataset tar shards (local or remote) read in place, one sample = one record.

Each shard gets a member index (``chute.sources.tar_index``: key -> member names, offsets and
sizes, built once and memory-mapped); the source maps a global sample index to (shard, sample)
like every file source. Reading sample ``i`` reads only its small members (``.json``, ``.txt``,
``.cls``) by byte range; its media members (``.jpg``, ``.png``, ``.webp``, ``.mp4``, ``.wav``,
...) are not read at all: the record names each by a member reference
(``chute.sources.tar_members``), which the recipe's header read and the media stage resolve
by byte range, in place::

    shard train-000000.tar                       record (TarRecord.data)
    ───────────────────────────────              ─────────────────────────────────────────────
    000005.json  {"conversations": [...],    ──► {"conversations": [...],
                  "image": "coco/1.jpg"}          "image": "tar:1536:20480:000005.jpg:/d/train-000000.tar"}
    000005.jpg   (20480 bytes at 1536)
    000006.txt   "a dog on a beach"          ──► {"text": "a dog on a beach",
    000006.jpg                                    "images": ["tar:...:000006.jpg:/d/train-000000.tar"]}

How members become a record:

* ``.json`` is the record (an object); without one, ``.txt`` (or ``.text``, ``.caption``) is
  ``{"text": ...}``, a caption pair that the ``text`` format (pretraining) reads as image +
  text. With both, a ``.json`` without ``text`` takes the caption as ``text`` (img2dataset's
  layout: metadata in the ``.json``, the caption in the ``.txt``). ``.cls`` is ``cls`` (an int).
* Media members bind to the record: a string in the ``.json`` that names a member of the
  sample (``000005.jpg``; or, under a media key such as ``image``/``images``/``url`` and inside
  ``<img>...</img>`` tags, its extension ``jpg``, ``0.jpg``) is replaced by that member's
  reference; a conversation's text (``content``, ``value``, ...) is not (an answer may name a
  file). When the ``.json`` names none of them, they replace
  its ``image`` / ``images`` field in archive order (a LLaVA record keeps its original path
  there), or become ``images`` (``videos``, ``audios``).
* Other members (``.npy``, ``.pth``, ...) are left out of the record.

A sample that cannot become a record (bad JSON, no ``.json`` or ``.txt``) is a counted
``SampleError`` whose message names it ``shard.tar:key``; the location is ``shard.tar:N``, the
sample's number in its shard (counting from 1, as lines do). A shard replaced while the source
is open raises ``SourceChanged`` (size and mtime of a local shard checked before each read; a
remote one read with ``If-Match``), as for JSONL and Parquet files.

Under ``RemoteOptions(cache_limit=...)`` a remote shard is downloaded whole into the node's
bounded folder of remote files (``chute.sources.file_cache``, as JSONL and Parquet files are),
and both its records and its media members (the media stage's reads of ``tar:`` references in
the same process) are read from that copy: with ``plan="shards"`` a shard costs a few requests
for all its samples. A shard that cannot get room is read by byte range, as without a limit.

Example:
    >>> import tarfile, tempfile, pathlib, io
    >>> d = pathlib.Path(tempfile.mkdtemp()); p = d / "train-000000.tar"
    >>> with tarfile.open(p, "w") as tar:
    ...     for name, body in [("a.txt", b"a red square"), ("a.png", b"\x89PNG...")]:
    ...         info = tarfile.TarInfo(name); info.size = len(body)
    ...         tar.addfile(info, io.BytesIO(body))
    >>> src = TarSource(p, cache_dir=d / "cache")
    >>> r = src[0]
    >>> r.data["text"], r.data["images"][0].startswith("tar:"), r.key, r.location
    ('a red square', True, 'a', 'train-000000.tar:a')
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from chute._internal.remote import DEFAULT_OPTIONS
from chute.errors import SampleError
from chute.remote_options import RemoteOptions
from chute.sources.base import FileSource, expand_paths, shown_path
from chute.sources.jsonl import _Bytes, _bytes_of, _pread_all
from chute.sources.record import _UNPARSED, Record, parse_json
from chute.sources.remote import CachedBytes, RemoteBytes, block_cache, file_cache
from chute.sources.tar_index import TarIndex, open_tar_index
from chute.sources.tar_members import MemberRef, serve_shard, shown_name

__all__ = ["MEDIA_EXTENSIONS", "REFS_EXTENSION", "TarRecord", "TarSource"]

PathLike = str | os.PathLike[str]

# The last part of a member's extension decides what it is (``0.jpg`` is an image).
MEDIA_EXTENSIONS: dict[str, str] = {
    **dict.fromkeys(("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff"), "image"),
    **dict.fromkeys(("mp4", "avi", "mov", "mkv", "webm"), "video"),
    **dict.fromkeys(("wav", "mp3", "flac", "ogg", "m4a", "opus"), "audio"),
}
_TEXT_EXTENSIONS = ("txt", "text", "caption")
# ``chute shard``'s record of what each media member replaced: {"0.jpg": "coco/1.jpg"}
REFS_EXTENSION = "refs"
_CLASS_EXTENSIONS = ("cls", "cls2", "label")
# Members read with the record: small by nature; a larger one is a broken sample, not a read.
_MAX_TEXT_MEMBER = 64 << 20
_FIELDS = {"image": ("image", "images"), "video": ("video", "videos"), "audio": ("audio", "audios")}
# Keys whose string values are media references (top-level lists, content parts).
_MEDIA_KEYS = frozenset(
    ("image", "images", "video", "videos", "audio", "audios", "url", "path", "image_url",
     "video_url", "audio_url")
)  # fmt: skip
# Keys whose strings are what a conversation says: a member's name there is text (an answer
# that reads "000005.jpg"), never swapped for the member (``<img>`` tags aside).
_TEXT_KEYS = frozenset(
    ("content", "value", "text", "caption", "instruction", "input", "output", "prompt",
     "response", "chosen", "rejected", "completion", "query", "question", "answer", "system",
     "history")
)  # fmt: skip
# Names JSON writes as they are (no escapes), so the JSON text holds them verbatim.
_PLAIN_JSON = re.compile(r"[A-Za-z0-9_.~ -]+")
# The key a JSON string value stands under, read back from the text before it.
_KEY_BEFORE = re.compile(rb'"([A-Za-z_]+)"\s*:\s*\[?\s*$')
_IMG_TAG = re.compile(r"<img>(.*?)</img>", re.DOTALL)


class TarSource(FileSource):
    """Samples of one or many WebDataset tar shards, by global index, read in place.

    Args:
        paths: a shard, a glob (``shards/train-*.tar``), a URL or URL glob
            (``s3://bucket/shards/train-*.tar``), or a list of them; shards keep the given
            order and each glob is sorted, so sample ids are stable across runs.
        cache_dir: where member indexes live (default ``$CHUTE_CACHE_DIR`` or ``~/.cache/chute``).
        rebuild: rebuild member indexes even when a valid one exists.
        progress: called with bytes scanned while indexing (or ``False``: silent).
        remote: timeouts, retries and block cache for URLs (``RemoteOptions``).
    """

    kind = "tar"

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        *,
        cache_dir: PathLike | None = None,
        rebuild: bool = False,
        progress: Callable[[int], None] | None = None,
        remote: RemoteOptions | None = None,
    ):
        self.remote = remote or DEFAULT_OPTIONS
        self.paths = expand_paths(paths, self.remote)
        self.cache_dir = cache_dir
        self.files: list[TarIndex] = [
            open_tar_index(
                p, cache_dir=cache_dir, rebuild=rebuild, progress=progress, remote=remote
            )
            for p in self.paths
        ]
        self._starts = np.cumsum([0] + [len(f) for f in self.files], dtype=np.int64)
        self._readers = self._open_readers()

    def _open_readers(self) -> list[_Bytes]:
        remote = any(f.remote for f in self.files)
        blocks = block_cache(self.remote) if remote else None
        # Under cache_limit a remote shard is downloaded whole once (bounded, node-wide folder)
        # and its records and media members are read from the copy; ``serve_shard`` lets the
        # media stage's member reads in this process find that copy by the shard's URL.
        files = file_cache(self.remote, self.cache_dir) if remote else None
        readers = [_bytes_of(f, self.remote, blocks, files) for f in self.files]  # type: ignore[arg-type]
        for reader in readers:
            if isinstance(reader, CachedBytes):
                serve_shard(reader)
        return readers

    # -- size and identity ------------------------------------------------------------------

    blank_lines = 0

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def blocks(self) -> Any:
        """This process's block cache of remote shards, if any."""
        for r in self._readers:
            if isinstance(r, RemoteBytes):
                return r.cache
        return None

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this source's content: each shard's identity and sample count."""
        return {
            "kind": "tar",
            "records": len(self),
            "files": [
                {"path": shown_path(f.path), "records": len(f), **f.identity.to_json()}
                for f in self.files
            ],
        }

    # -- access -----------------------------------------------------------------------------

    def _read(self, file_no: int, local: int) -> TarRecord:
        f, io = self.files[file_no], self._readers[file_no]
        shard = f.data_path
        parts: dict[str, bytes] = {}
        media: list[tuple[str, str, str]] = []  # (name, extension, reference)
        members = f.members_of(local)
        key = members[0][0][: int(f.samples[local]["key_len"])]
        seen: set[str] = set()
        for name, offset, size in members:
            ext = name[len(key) + 1 :]
            if ext in seen:  # WebDataset refuses these too: which member is meant is unknown
                parts["!"] = f"two members named {name}".encode()
            seen.add(ext)
            last = ext.rsplit(".", 1)[-1].lower()
            if last in MEDIA_EXTENSIONS:
                media.append((name, ext, str(MemberRef(shard, name, offset, size))))
            elif ext == REFS_EXTENSION or (
                last == "json" or last in _TEXT_EXTENSIONS or last in _CLASS_EXTENSIONS
            ):
                if size > _MAX_TEXT_MEMBER:
                    parts[last] = b""
                    parts["!" + last] = f"{size:,} bytes".encode()
                    continue
                data = _pread_all(io, size, offset)
                if len(data) < size:
                    parts["!" + last] = b"cut short: the shard is truncated"
                parts[last] = data
        return TarRecord(
            path=f.path,
            line=local + 1,
            index=int(self._starts[file_no]) + local,
            key=key,
            parts=parts,
            media=media,
        )

    def records_between(self, i: int, j: int) -> Iterator[Record]:
        """Records ``i`` to ``j - 1`` in order."""
        for k in range(max(0, i), min(len(self), j)):
            file_no, local = self.locate(k)
            yield self._read(file_no, local)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_readers"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._readers = self._open_readers()


class TarRecord(Record):
    """One sample of a tar shard: its small members' bytes, its media members' references.

    ``data`` is built on first access (see the module docstring); a broken sample raises
    ``SampleError`` there, naming it ``shard.tar:key``. ``raw`` is the ``.json`` member (else
    the ``.txt``), what a rejects file shows.

    Example:
        >>> r = TarRecord(path="s.tar", line=1, index=0, key="7", parts={"txt": b"hi"}, media=[])
        >>> r.data, r.location
        ({'text': 'hi'}, 's.tar:7')
    """

    __slots__ = ("key", "media", "parts")

    def __init__(
        self,
        *,
        path: str,
        line: int,
        index: int,
        key: str,
        parts: dict[str, bytes],
        media: list[tuple[str, str, str]],
        window: int | None = None,
    ):
        main = parts.get("json", parts.get("txt", parts.get("text", parts.get("caption", b""))))
        super().__init__(main, path=path, line=line, index=index, window=window)
        self.key = key
        self.parts = parts
        self.media = media

    @property
    def member(self) -> str:
        """``shard.tar:key``: how messages name this sample."""
        return f"{self.path.rsplit('/', 1)[-1]}:{shown_name(self.key)}"

    @property
    def location(self) -> str:
        where = self.member
        return where if self.window is None else f"{where} (window {self.window})"

    @property
    def data(self) -> Any:
        if self._data is _UNPARSED:
            self._data = self._build()
        return self._data

    def _build(self) -> Any:
        parts, where = self.parts, self.member
        if "!" in parts:
            raise self._error(
                "duplicate_member",
                f"{where}: {parts['!'].decode()} (the key is used by two samples in a row); "
                f"give each sample its own key",
            )
        for ext in ("json", *_TEXT_EXTENSIONS, *_CLASS_EXTENSIONS):
            problem = parts.get("!" + ext)
            if problem is not None:
                kind = "record_too_large" if problem.endswith(b"bytes") else "member_truncated"
                raise self._error(kind, f"{where}.{ext}: {problem.decode()}")
        data: dict[str, Any] = {}
        bound: set[str] | None = None
        if "json" in parts:
            try:
                raw, bound = _bind_in_bytes(parts["json"], self.media)
                value = parse_json(raw)
            except SampleError as exc:
                raise self._error(exc.kind, f"{where}.json: {exc.message}") from None
            if not isinstance(value, dict):
                raise self._error(
                    "not_an_object",
                    f"{where}.json: expected a JSON object, got {type(value).__name__}",
                )
            data = value
        caption = next((parts[e] for e in _TEXT_EXTENSIONS if e in parts), None)
        if caption is not None:
            try:
                text = caption.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self._error(
                    "bad_utf8", f"{where}: invalid UTF-8 at byte {exc.start} of its caption"
                ) from None
            data.setdefault("text", text)
        label = next((parts[e] for e in _CLASS_EXTENSIONS if e in parts), None)
        if label is not None:
            try:
                data.setdefault("cls", int(label.strip()))
            except ValueError:
                raise self._error(
                    "wrong_type", f"{where}.cls: {label[:40]!r} is not an integer class"
                ) from None
        if not data:
            names = ", ".join(name for name, _, _ in self.media) or "none"
            raise self._error(
                "empty_record",
                f"{where}: the sample has no .json or .txt member to make a record of "
                f"(media members: {names})",
            )
        if self.media:
            _bind_members(data, self.media, bound)
        return data

    def _error(self, kind: str, message: str) -> SampleError:
        return SampleError(kind, message, path=self.path, line=self.line)

    @property
    def content_data(self) -> Any:
        """``data`` with each media member named as the record named it (content hashing).

        A shard ``chute shard`` wrote keeps what each member replaced (``<key>.refs``): the
        sample then hashes as its source record did, whatever its key, shard or offset. Other
        members stay references, which the content hash takes by member name.
        """
        refs = self.parts.get(REFS_EXTENSION)
        if not refs:
            return self.data
        try:
            named = orjson.loads(refs)
        except orjson.JSONDecodeError:
            return self.data
        if not isinstance(named, dict):
            return self.data
        originals = {
            ref: named[ext] for _, ext, ref in self.media if isinstance(named.get(ext), str)
        }
        return _renamed(self.data, originals) if originals else self.data

    @property
    def raw(self) -> bytes:
        raw = self._raw
        if isinstance(raw, bytes) and raw:
            return raw
        # no .json/.txt bytes (an image-only sample, an empty member): the record made of its
        # other members, or nothing where it cannot be made (its rejects line still says why)
        try:
            return orjson.dumps(self.data)
        except SampleError:
            return b""

    def with_window(self, window: int) -> TarRecord:
        other = TarRecord(
            path=self.path,
            line=self.line,
            index=self.index,
            key=self.key,
            parts=self.parts,
            media=self.media,
            window=window,
        )
        other._data = self._data
        return other

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_tar,
            (self.path, self.line, self.index, self.key, self.parts, self.media, self.window),
        )


def _rebuild_tar(
    path: str,
    line: int,
    index: int,
    key: str,
    parts: dict[str, bytes],
    media: list[tuple[str, str, str]],
    window: int | None,
) -> TarRecord:
    return TarRecord(
        path=path, line=line, index=index, key=key, parts=parts, media=media, window=window
    )


def _bind_in_bytes(raw: bytes, media: list[tuple[str, str, str]]) -> tuple[bytes, set[str] | None]:
    """Full member names swapped for their references in the JSON text itself (the fast path).

    Returns the new text and the references bound, or ``None`` when the parsed record must be
    walked instead (a bare extension that may sit under a media key, a name JSON would escape).
    """
    used: set[str] = set()
    original = raw
    for name, ext, ref in media:
        base = name.rsplit("/", 1)[-1]
        if not _PLAIN_JSON.fullmatch(base) or f'"{ext}"'.encode() in raw or b"<img>" in raw:
            return original, None
        quoted = f'"{base}"'.encode()
        at = raw.find(quoted)
        if at < 0:
            continue
        while at >= 0:  # only a media key's value: the name elsewhere (an answer) is text
            if not _under_media_key(raw, at):
                return original, None  # (or a second image of a list): walk the record
            at = raw.find(quoted, at + 1)
        raw = raw.replace(quoted, orjson.dumps(ref))
        used.add(ref)
    return raw, used


def _under_media_key(raw: bytes, at: int) -> bool:
    """Whether the JSON string at ``raw[at]`` is a media key's value or its list's first item.

    ``"image": "000005.jpg"`` and ``"images": ["000005.jpg", ...`` are.
    """
    m = _KEY_BEFORE.search(raw, max(0, at - 48), at)
    return m is not None and m.group(1).decode() in _MEDIA_KEYS


def _bind_members(
    data: dict[str, Any], media: list[tuple[str, str, str]], bound: set[str] | None = None
) -> None:
    """Point the record's references at its media members (see the module docstring).

    A member's full name (``000005.jpg``) is matched in any string but a conversation's text
    (``content``, ``value``, ``output``, ...: an answer may name a file); its bare extension
    (``jpg``, ``0.jpg``) only under a media key (``image``, ``images``, ``url``, ...). Inside
    ``<img>`` tags (Qwen-VL's, in the text) both are, so an answer that happens to read
    ``png`` or ``000005.jpg`` stays text.
    """
    if bound is not None:  # the text was bound already (_bind_in_bytes): only the fallback
        _attach(data, media, bound)
        return
    used: set[str] = set()
    full = {name.rsplit("/", 1)[-1]: ref for name, _, ref in media}
    short = {**{ext: ref for _, ext, ref in reversed(media)}, **full}

    def swap(value: Any, names: dict[str, str]) -> Any:
        if isinstance(value, str):
            ref = names.get(value)
            if ref is not None:
                used.add(ref)
                return ref
            if "<img>" in value:
                return _IMG_TAG.sub(lambda m: f"<img>{swap_tag(m.group(1))}</img>", value)
            return value
        if isinstance(value, list):
            return [swap(v, names) for v in value]
        if isinstance(value, dict):
            return {k: swap(v, names_under(value, k, names)) for k, v in value.items()}
        return value

    def names_under(parent: dict[str, Any], key: str, names: dict[str, str]) -> dict[str, str]:
        kind = key_kind(parent, key)
        return short if kind == "media" else {} if kind == "text" else names

    def swap_tag(inner: str) -> str:
        ref = short.get(inner.strip())
        if ref is None:
            return inner
        used.add(ref)
        return ref

    for k in list(data):
        data[k] = swap(data[k], names_under(data, k, full))
    _attach(data, media, used)


# The content-part types whose value is media (chute.formats.chat reads them so; the sources
# layer sits below the formats, so the names are spelled here)
_MEDIA_PART_TYPES = frozenset(
    ("image", "image_url", "input_image", "video", "video_url", "audio", "audio_url",
     "input_audio")
)  # fmt: skip


def key_kind(parent: dict[str, Any], key: str) -> str:
    """What ``parent[key]`` holds: ``media`` references, conversation ``text``, or ``other``.

    A media key (``images``, ``url``, ...) holds references; a text key (``content``,
    ``value``, ...) what a conversation says, except a media part's ``value``
    (``{"type": "image_url", "value": PATH}``, LLaMA-Factory v1's), which is its reference.
    The shard reader binds member names and the writer writes them by this one rule.

    Example:
        >>> key_kind({"type": "image", "value": "a.jpg"}, "value"), key_kind({}, "value")
        ('media', 'text')
    """
    if key in _MEDIA_KEYS or (key == "value" and parent.get("type") in _MEDIA_PART_TYPES):
        return "media"
    return "text" if key in _TEXT_KEYS else "other"


def _attach(data: dict[str, Any], media: list[tuple[str, str, str]], used: set[str]) -> None:
    """Members of a kind the record names none of replace its media field (or become it)."""
    for kind, (single, plural) in _FIELDS.items():
        refs = [
            ref for _, ext, ref in media if MEDIA_EXTENSIONS[ext.rsplit(".", 1)[-1].lower()] == kind
        ]
        if not refs or any(ref in used for ref in refs):
            continue
        field = single if single in data else plural
        old = data.get(field)
        data[field] = refs[0] if isinstance(old, str) and len(refs) == 1 else refs


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` with each string in ``names`` (and each inside ``<img>`` tags) replaced."""
    if isinstance(value, str):
        if value in names:
            return names[value]
        if "<img>" in value:
            return _IMG_TAG.sub(lambda m: f"<img>{names.get(m.group(1), m.group(1))}</img>", value)
        return value
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _renamed(v, names) for k, v in value.items()}
    return value
