r"""``write_shards``: records and the media they reference into WebDataset tar shards.

Each record becomes one sample: its JSON as ``<key>.json`` and each media file it references
(found by the record's format adapter and resolved by the recipe's rules: ``MediaPaths``,
the same media root) as ``<key>.<n>.<ext>``; the reference inside the JSON is rewritten to the
member's name, which ``TarSource`` binds back to the member, and ``<key>.refs`` keeps what each
member replaced, so the sample's content hash (validation hold-outs, duplicate checks) is the
source record's::

    train.jsonl:3  {"image": "coco/1.jpg", "conversations": [...]}
        ──► train-000000.tar   000000002.json   {"image": "000000002.0.jpg", "conversations": ...}
                               000000002.refs   {"0.jpg": "coco/1.jpg"}
                               000000002.0.jpg  (the bytes of <media root>/coco/1.jpg)

Keys are the record's global index (9 digits): with no record skipped, sample ids read back
equal the source's (a skipped record leaves a gap in the keys, not in the ids).
Shards fill up to ``shard_size`` bytes (a sample larger than that gets a shard of its own)
and are named ``<prefix>-000000.tar``, ... Each is written under a temporary name in the
output folder and renamed when complete (or, for an fsspec URL, written locally and uploaded
whole; an object store shows an object only once its upload completes): a crash leaves no
half shard under a final name. A record whose media cannot be read is skipped and counted,
as everywhere.

Example:
    >>> import tempfile, pathlib
    >>> from chute.sources import JsonlSource
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    >>> report = write_shards(JsonlSource(d / "a.jsonl", cache_dir=d / "c"), d / "out")
    >>> report.samples, [s["name"] for s in report.shards]
    (2, ['train-000000.tar'])
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from chute._internal.remote import DEFAULT_OPTIONS, is_url, split, with_retries
from chute.errors import ConfigError, RejectTally, SampleError, as_sample_error
from chute.formats import FormatReader, FormatSpec
from chute.formats.media import inline_url
from chute.media.images import DEFAULT_MAX_BYTES
from chute.media.paths import INLINE, MediaPaths, is_remote
from chute.media.remote import RemoteMedia
from chute.remote_options import RemoteOptions
from chute.remote_options import parse_size as parse_remote_size
from chute.sources.tar import MEDIA_EXTENSIONS, REFS_EXTENSION, key_kind
from chute.sources.tar_members import MemberRef, is_member_ref, read_member

__all__ = ["ShardReport", "parse_size", "write_shards"]

_DEFAULT_EXT = {"image": "jpg", "video": "mp4", "audio": "wav"}


def parse_size(text: str | int) -> int:
    """Bytes of a size such as ``256MB``, ``1.5GB``, ``512MiB`` or ``1000000`` (or an int).

    The units are ``chute.remote_options.parse_size``'s; here an error names ``shard_size``.

    Example:
        >>> parse_size("256MB"), parse_size("1GiB"), parse_size(4096)
        (256000000, 1073741824, 4096)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        try:
            value = parse_remote_size(str(text))
        except ValueError:
            raise ConfigError(
                f"expected a size such as 256MB, 1GB or 512MiB, got {text!r}", param="shard_size"
            ) from None
    if value < 1:
        raise ConfigError(f"expected a positive size, got {text!r}", param="shard_size")
    return value


@dataclass
class ShardReport:
    """What ``write_shards`` wrote: shards (name, samples, bytes), samples, skipped records."""

    output: str
    shards: list[dict[str, Any]] = field(default_factory=list)
    samples: int = 0
    media: int = 0
    tally: RejectTally = field(default_factory=RejectTally)

    @property
    def bytes(self) -> int:
        return sum(int(s["bytes"]) for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "shards": self.shards,
            "samples": self.samples,
            "media": self.media,
            "bytes": self.bytes,
            "skipped": self.tally.total,
            "rejects": self.tally.to_json(),
        }


def write_shards(
    source: Any,
    output: str | os.PathLike[str],
    *,
    shard_size: int | str = "256MB",
    prefix: str = "train",
    format: str | FormatSpec = "auto",
    media_root: Any = None,
    allowed_roots: Any = (),
    max_media_bytes: int = DEFAULT_MAX_BYTES,
    remote: RemoteOptions | None = None,
    progress: Callable[[int], None] | None = None,
) -> ShardReport:
    """Write every record of ``source`` (and its media) into tar shards under ``output``.

    Args:
        source: a chute source (``open_source(...)``).
        output: a folder (made if missing), or an fsspec URL (``s3://bucket/shards``).
        shard_size: the most bytes per shard (``256MB``, an int); a larger sample gets its own.
        prefix: shard names are ``<prefix>-000000.tar``, ...
        format: the records' format (finds their media references), as the recipe's.
        media_root: where relative media paths point, as the recipe's (``MediaPaths``).
        allowed_roots: further folders media references may resolve into, as the recipe's.
        max_media_bytes: a larger media file is a counted skip (``image_too_large``).
        remote: timeouts and retries for an output URL and remote media.
        progress: called with 1 after each record.

    Raises:
        ConfigError: a bad ``shard_size`` or ``prefix``, or shards already in ``output``.
    """
    size = parse_size(shard_size)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", prefix):
        raise ConfigError(
            f"expected letters, digits, '.', '_' or '-', got {prefix!r}", param="prefix"
        )
    options = remote or DEFAULT_OPTIONS
    out = os.fspath(output)
    reader = FormatReader(format if isinstance(format, FormatSpec) else FormatSpec(format))
    paths = MediaPaths(media_root, allowed_roots=allowed_roots)
    fetcher = RemoteMedia(paths, max_bytes=max_media_bytes, options=options)
    report = ShardReport(out)
    with _ShardWriter(out, prefix, size, options, report) as writer:
        for record in source:
            try:
                key = f"{record.index:09d}"
                members = _sample(key, record, reader, paths, fetcher, max_media_bytes)
            except Exception as exc:  # a bad record is a counted skip; a job error is raised
                report.tally.add(as_sample_error(exc, record.path, record.line))
            else:
                writer.add(key, members)
                report.samples += 1
                report.media += sum(1 for ext, _ in members if ext not in ("json", REFS_EXTENSION))
            if progress is not None:
                progress(1)
    return report


def _sample(
    key: str,
    record: Any,
    reader: FormatReader,
    paths: MediaPaths,
    fetcher: RemoteMedia,
    max_bytes: int,
) -> list[tuple[str, bytes]]:
    """``[(extension, bytes), ...]`` of one record: its JSON first, then its media."""
    data = record.data
    conversation = reader(data)
    media = conversation.media() if callable(getattr(conversation, "media", None)) else []
    names: dict[str, str] = {}  # reference as the record holds it -> member extension
    members: list[tuple[str, bytes]] = []
    originals: dict[str, str] = {}  # member extension -> the reference it replaced
    for part in media:
        if part.value is None or part.value in names:
            continue
        body = _media_bytes(part.value, part.kind, record.path, paths, fetcher, max_bytes)
        ext = f"{len(members)}.{_extension(part.value, part.kind)}"
        names[part.value] = f"{key}.{ext}"  # the member's full name: unambiguous in any field
        members.append((ext, body))
        if not part.value.startswith(INLINE):  # bytes in the record have no name to keep
            originals[ext] = part.value
    rewritten = _rewrite(data, names)
    try:
        document = orjson.dumps(rewritten)
    except TypeError as exc:
        raise SampleError("wrong_type", f"the record cannot be written as JSON ({exc})") from None
    # what the record named: its content hash (hold-outs, duplicates) is the source record's
    refs = [(REFS_EXTENSION, orjson.dumps(originals))] if originals else []
    return [("json", document), *refs, *members]


def _media_bytes(
    value: str, kind: str, data_path: str, paths: MediaPaths, fetcher: RemoteMedia, max_bytes: int
) -> bytes:
    resolved = paths.resolve(value, data_path)
    if resolved.startswith(INLINE):
        return base64.b64decode(resolved.partition(",")[2])
    if is_member_ref(resolved):
        return read_member(MemberRef.parse(resolved, kind), max_bytes=max_bytes, kind=kind)
    if is_remote(resolved):
        return fetcher.read(resolved, data_path, kind)
    try:
        st = os.stat(resolved)
    except OSError:
        raise SampleError(f"{kind}_missing", f"{resolved}: no such file") from None
    if st.st_size > max_bytes:
        raise SampleError(
            f"{kind}_too_large", f"{resolved}: {st.st_size:,} bytes, more than {max_bytes:,}"
        )
    return Path(resolved).read_bytes()


def _extension(value: str, kind: str) -> str:
    """The member's extension: the reference's own suffix when it names a ``kind``, else a default."""
    if value.startswith(INLINE):
        mime = value[len(INLINE) :].split(";", 1)[0]
        suffix = mime.rsplit("/", 1)[-1].lower().replace("jpeg", "jpg").replace("mpeg", "mp3")
    elif is_member_ref(value):
        suffix = MemberRef.parse(value).name.rsplit(".", 1)[-1].lower()
    else:
        suffix = value.rsplit("/", 1)[-1].rsplit(".", 1)[-1].lower() if "." in value else ""
    return suffix if MEDIA_EXTENSIONS.get(suffix) == kind else _DEFAULT_EXT.get(kind, "bin")


def _rewrite(value: Any, names: dict[str, str], text: bool = False) -> Any:
    """``value`` with each media reference replaced by its member's name.

    ``text``: ``value`` stands under a conversation's text key (``content``, ``output``, ...:
    ``chute.sources.tar.key_kind``), as the shard reader reads it: an answer that reads like a reference stays
    as written (only ``<img>`` tags, Qwen-VL's references in the text, are rewritten).
    """
    if isinstance(value, str):
        if value in names and not text:
            return names[value]
        if "<img>" in value:
            return re.sub(
                r"<img>(.*?)</img>",
                lambda m: f"<img>{names.get(m.group(1).strip(), m.group(1))}</img>",
                value,
                flags=re.DOTALL,
            )
        return value
    if isinstance(value, bytes | bytearray):  # a binary column: its data: URL was the reference
        return names.get(inline_url(bytes(value)), f"<{len(value)} bytes>")
    if isinstance(value, dict):
        blob = value.get("bytes")
        if isinstance(blob, bytes | bytearray) and blob:  # the Hub's Image / Audio struct
            ext = names.get(inline_url(bytes(blob)))
            if ext is not None:
                return ext
        return {k: _rewrite(v, names, key_kind(value, k) == "text") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rewrite(v, names, text) for v in value]
    return value


class _ShardWriter:
    """Fills shards up to a size; each is published whole (rename, or one upload)."""

    def __init__(
        self, output: str, prefix: str, size: int, options: RemoteOptions, report: ShardReport
    ):
        self.output, self.prefix, self.size, self.options = output, prefix, size, options
        self.report = report
        self.remote = is_url(output)
        if self.remote:
            self.staging = Path(tempfile.mkdtemp(prefix="chute-shards-"))
        else:
            self.staging = Path(output)
            self.staging.mkdir(parents=True, exist_ok=True)
            if any(self.staging.glob(f"{prefix}-*.tar")):
                raise ConfigError(
                    f"{output} already holds {prefix}-*.tar shards; write to an empty folder "
                    f"(or another prefix) so old and new shards never mix",
                    param="output",
                )
        self.tar: tarfile.TarFile | None = None
        self.tmp: Path | None = None
        self.count = 0
        self.samples = 0

    def __enter__(self) -> _ShardWriter:
        return self

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is None:
            self._close()
        else:  # a failed run leaves no shard under a final name
            if self.tar is not None:
                self.tar.close()
            if self.tmp is not None:
                with contextlib.suppress(OSError):
                    self.tmp.unlink()
        if self.remote:
            with contextlib.suppress(OSError):
                self.staging.rmdir()

    def add(self, key: str, members: list[tuple[str, bytes]]) -> None:
        need = sum(512 + -(-len(body) // 512) * 512 for _, body in members)
        if self.tar is not None and self.samples and self.tar.offset + need > self.size:
            self._close()
        if self.tar is None:
            name = f"{self.prefix}-{self.count:06d}.tar"
            self.tmp = self.staging / f".{name}.tmp-{os.getpid()}"
            self.tar = tarfile.open(self.tmp, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        for ext, body in members:
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(body)
            info.mode = 0o644
            self.tar.addfile(info, io.BytesIO(body))
        self.samples += 1

    def _close(self) -> None:
        if self.tar is None or self.tmp is None:
            return
        self.tar.close()
        name = f"{self.prefix}-{self.count:06d}.tar"
        size = self.tmp.stat().st_size
        if self.remote:
            target = self.output.rstrip("/") + "/" + name
            fs, path = split(target, self.options)
            tmp = self.tmp
            with_retries(lambda: fs.put_file(str(tmp), path), target, "upload", self.options)
            self.tmp.unlink()
        else:
            target = str(self.staging / name)
            with open(self.tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(self.tmp, target)
        self.report.shards.append(
            {"name": name, "path": target, "samples": self.samples, "bytes": size}
        )
        self.tar, self.tmp = None, None
        self.count += 1
        self.samples = 0
