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

``publish`` writes a file under a temporary name that names its writer (machine, pid namespace,
pid, start time), fsyncs it, renames it into place and fsyncs the folder, so a reader (or a
resumed run) sees the old file or the whole new one. ``sweep_temps`` removes temporary files
left by killed processes of this machine.

A cache may live in object storage (``DIR`` = ``s3://bucket/caches/run1``): the layout's paths
are then those of a local mirror, and every read and write goes through its ``Storage``
(``chute.cache.storage``), which uploads each published file with one PUT (the same commit
order: a chunk's commit record after its files, the manifest last) and downloads files into
the mirror when they are read.

Example:
    >>> import tempfile
    >>> layout = Layout(tempfile.mkdtemp())
    >>> layout.chunk(7).name, layout.record(7).name
    ('000007.arrow', '000007.json')
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson

from chute._internal.files import sweep_dead_writers
from chute.cache.storage import publish, publish_parts, storage_for

__all__ = [
    "CACHE_FORMAT",
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "Layout",
    "publish",
    "publish_parts",
    "read_json",
    "sweep_temps",
]

CACHE_FORMAT = "chute.cache"
# Bump when a cache written before would be read wrongly; readers refuse other versions.
# 2: video entries hold second_per_grid_t, frame_spans and timestamps (a version 1 cache reads
# them as absent: a Qwen2.5-VL video's positions then assume 1 second per temporal group).
FORMAT_VERSION = 2
# Versions this chute reads (a version 1 cache has no video timing; its samples lack the keys).
READABLE_VERSIONS = (1, 2)

# A publish's temporary: ".NAME.WRITER.RANDOM.tmp" (``temp_beside``); an older chute's
# ".NAME.HOST.PID.tmp" matches too.
_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_-]+\.[0-9a-z]+\.tmp$")
_RECORD = re.compile(r"^(\d{6,})\.json$")


class Layout:
    """The paths of a cache directory, and its files' I/O (local, or in object storage).

    Args:
        root: the cache directory, or its URL (``s3://bucket/caches/run1``).
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
        self.storage = storage_for(root)
        self.root = self.storage.root_path  # the folder, or the local mirror of a remote cache
        self.shown = self.storage.shown  # the folder or URL, for messages
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

    @property
    def remote(self) -> bool:
        return self.storage.remote

    def recorded(self) -> set[int]:
        """Chunks whose commit record exists (one listing)."""
        return {int(m.group(1)) for m in map(_RECORD.match, self.storage.listing(self.chunks)) if m}

    def is_empty_or_absent(self) -> bool:
        """No directory, or one holding nothing but temporary files of a publish."""
        return all(_TEMP.match(name) for name in self.storage.names())

    def looks_like_cache(self) -> bool:
        names = set(self.storage.names())
        return bool(names & {"plan.json", "manifest.json", "chunks"})

    # -- I/O through the storage ---------------------------------------------------------------

    def where(self, path: Path) -> str:
        """``path`` as the user sees it: the local file, or the object's URL."""
        return self.storage.where(path)

    def publish(self, path: Path, data: Any) -> None:
        """``publish`` through the storage (``data``: bytes-like, or a list of parts)."""
        self.storage.publish(path, data if isinstance(data, list) else [data])

    def read_json(self, path: Path) -> Any:
        """A JSON file's content, or ``None`` when it is missing or not valid JSON."""
        data = self.storage.read(path)
        try:
            return None if data is None else orjson.loads(data)
        except orjson.JSONDecodeError:
            return None

    def size(self, path: Path) -> int | None:
        return self.storage.size(path)

    def exists(self, path: Path) -> bool:
        return self.storage.size(path) is not None

    def fetch(self, path: Path, size: int | None = None, blake2b: str | None = None) -> Path:
        """A local file with ``path``'s bytes (a remote cache's file is downloaded once)."""
        return self.storage.fetch(path, size, blake2b)

    def fetch_tree(self, folder: Path) -> Path:
        """A local folder with ``folder``'s files (a remote one's downloaded once)."""
        return self.storage.fetch_tree(folder)


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file's content, or ``None`` when it is missing or not valid JSON."""
    try:
        with open(path, "rb") as f:
            return orjson.loads(f.read())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None


def sweep_temps(folder: str | os.PathLike[str]) -> int:
    """Remove temporary files that processes of this machine left when they were killed.

    A temporary file names its writer; one whose process is provably gone is garbage. Files of
    other hosts or containers are left alone (their processes may be alive). Returns the count.
    """
    return sweep_dead_writers(folder)
