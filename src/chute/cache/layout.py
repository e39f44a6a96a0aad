r"""Where a cache keeps its files, and how a file is committed: all or nothing, never half.

::

    DIR/
      plan.json              written first: the fingerprint and the chunking of the job
      config.yaml            the resolved config (rebuild: chute preprocess DIR/config.yaml ...)
      chunks/000000.arrow    Arrow IPC stream of the samples of records [0, chunk_size)
      chunks/000000.rejects.jsonl   its rejected records (only when there are some)
      chunks/000000.json     its commit record, written last: a chunk exists once this does
      ...
      lengths.npy            tokens per sample (int32), memory-mapped by readers
      image_tokens.npy       image tokens per sample (int32)
      rejects.jsonl          every rejected record, in source order
      state.json, dataset_info.json   so that datasets.load_from_disk(DIR) works
      manifest.json          written last: the cache is complete once this exists

``publish`` writes a file under a temporary name that carries this host and process id,
fsyncs it, renames it into place and fsyncs the folder, so a reader (or a resumed run) sees
the old file or the whole new one. ``sweep_temps`` removes temporary files left by killed
processes of this host.

Example:
    >>> import tempfile
    >>> layout = Layout(tempfile.mkdtemp())
    >>> layout.chunk(7).name, layout.record(7).name
    ('000007.arrow', '000007.json')
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "CACHE_FORMAT",
    "FORMAT_VERSION",
    "Layout",
    "publish",
    "publish_parts",
    "read_json",
    "sweep_temps",
]

CACHE_FORMAT = "chute.cache"
# Bump when a cache written before would be read wrongly; readers refuse other versions.
FORMAT_VERSION = 1

_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:64] or "host"
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)\.tmp$")
_RECORD = re.compile(r"^(\d{6,})\.json$")


class Layout:
    """The paths of a cache directory.

    Args:
        root: the cache directory.
    """

    # Top-level files a cache writes (``--overwrite`` deletes these and ``chunks/``, nothing else).
    FILES = (
        "manifest.json",
        "plan.json",
        "config.yaml",
        "lengths.npy",
        "image_tokens.npy",
        "rejects.jsonl",
        "state.json",
        "dataset_info.json",
        "finalizing",
    )

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.chunks = self.root / "chunks"
        self.manifest = self.root / "manifest.json"
        self.plan = self.root / "plan.json"
        self.config = self.root / "config.yaml"
        self.lengths = self.root / "lengths.npy"
        self.image_tokens = self.root / "image_tokens.npy"
        self.rejects = self.root / "rejects.jsonl"
        self.hf_state = self.root / "state.json"
        self.hf_info = self.root / "dataset_info.json"
        # touched every few seconds while a rank finalizes (stages may take minutes)
        self.finalizing = self.root / "finalizing"

    def stage_files(self, fingerprint: dict[str, Any]) -> list[Path]:
        """Files of finish-time stages a complete cache cannot be read without.

        Only the built-in ``pixels`` stage has one (its store's manifest, written last); other
        stages' outputs are the stage's own business.
        """
        stages = fingerprint.get("stages", {})
        return [self.root / "pixels" / "manifest.json"] if "pixels" in stages else []

    def name(self, k: int) -> str:
        return f"{k:06d}"

    def chunk(self, k: int) -> Path:
        """The Arrow file of chunk ``k``."""
        return self.chunks / f"{k:06d}.arrow"

    def record(self, k: int) -> Path:
        """The commit record of chunk ``k`` (its existence marks the chunk done)."""
        return self.chunks / f"{k:06d}.json"

    def rejects_part(self, k: int) -> Path:
        return self.chunks / f"{k:06d}.rejects.jsonl"

    def extra(self, k: int, suffix: str) -> Path:
        """A stage's file for chunk ``k``, e.g. ``extra(3, "pixels.npy")``."""
        return self.chunks / f"{k:06d}.{suffix}"

    def recorded(self) -> set[int]:
        """Chunks whose commit record exists (one ``listdir``)."""
        try:
            names = os.listdir(self.chunks)
        except FileNotFoundError:
            return set()
        return {int(m.group(1)) for m in map(_RECORD.match, names) if m}

    def is_empty_or_absent(self) -> bool:
        """No directory, or one holding nothing but temporary files of a publish."""
        if not self.root.exists():
            return True
        return all(_TEMP.match(p.name) for p in self.root.iterdir())

    def looks_like_cache(self) -> bool:
        return self.plan.is_file() or self.manifest.is_file() or self.chunks.is_dir()


def publish(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` (bytes-like) to ``path`` atomically and durably.

    A temporary file beside it, fsync, rename, fsync of the folder: readers and resumed runs see
    the old file or the whole new one, after a crash too.
    """
    publish_parts(path, [data])


def publish_parts(path: str | os.PathLike[str], parts: Iterable[Any]) -> None:
    """``publish`` for content made of many parts (written one after another, never joined)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file's content, or ``None`` when it is missing or not valid JSON."""
    try:
        with open(path, "rb") as f:
            return orjson.loads(f.read())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make renames in ``folder`` durable (no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sweep_temps(folder: str | os.PathLike[str]) -> int:
    """Remove temporary files that processes of this host left when they were killed.

    A temporary file names its host and process id; one whose process is gone is garbage.
    Files of other hosts are left alone (their processes may be alive). Returns the count.
    """
    removed = 0
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    for name in names:
        m = _TEMP.match(name)
        if not m or m.group("host") != _HOST or _alive(int(m.group("pid"))):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process is not writing while it sweeps
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed process nobody has reaped yet (a zombie) writes nothing either
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
