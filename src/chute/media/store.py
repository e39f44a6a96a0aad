"""``PixelStore``: pre-decoded, resized uint8 pixels, so training reads no JPEG.

Decoding a JPEG and resizing it costs milliseconds per image; reading the already-resized pixels
from a memory map and normalising them costs a fraction of that. A pixel store keeps the output
of a transform's geometry step (``transform.prepare``: resize, crop or pad, uint8 ``(H, W, 3)``)
for every image of a dataset; the media stage then runs only ``transform.finish`` (rescale,
normalise, patches) on a hit::

    store/
      manifest.json        format, version, the transform's geometry fingerprint, counts (no
                           timings: the same images give the same bytes, however built)
      index.npy            one row per image, sorted by key: key (64-bit hash of the real path),
                           file size and mtime_ns when stored, chunk, offset, height, width,
                           the path's place in paths.bin
      paths.bin            the real paths, UTF-8, back to back (a hit compares the whole path)
      chunk-00000.bin ...  uint8 pixels, image after image
      failures.jsonl       images that could not be stored: path, kind, message

A lookup is a binary search in ``index.npy`` and one ``stat`` of the image file: an image whose
size or mtime changed since it was stored is a miss (the stage decodes the file), so a store is
never trusted just because it exists. Opening a store with a transform whose geometry differs
raises ``ConfigError`` naming each differing field. Writing is parallel (one chunk file per task,
renamed into place when complete) and the manifest is written last, atomically: a store without
a manifest is never opened.

This module is standalone; the offline token cache (``chute preprocess``) can keep a pixel store
in a subfolder of the cache and give it to the media stage.

Example:
    >>> report = build_pixel_store(paths, ImageTransform(), "cache/pixels")  # doctest: +SKIP
    >>> stage = MediaStage(ImageTransform(), store=PixelStore("cache/pixels"))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chute._internal.files import atomic_file
from chute._internal.pools import process_pool
from chute._internal.progress import ProgressArg
from chute._internal.progress import progress as progress_of
from chute.errors import ConfigError, SampleError
from chute.media.images import DecodeOptions, decode_image
from chute.sources.tar_members import MemberRef, is_member_ref

__all__ = [
    "STORE_FORMAT",
    "STORE_VERSION",
    "PixelStore",
    "PixelStores",
    "StoreReport",
    "build_pixel_store",
]

STORE_FORMAT = "chute-pixels"
STORE_VERSION = 1
ENTRY = np.dtype(
    [
        ("key", "<u8"),
        ("size", "<i8"),
        ("mtime_ns", "<i8"),
        ("chunk", "<i4"),
        ("offset", "<i8"),
        ("height", "<i4"),
        ("width", "<i4"),
        ("path_start", "<i8"),
        ("path_end", "<i8"),
    ]
)


# map_tasks(fn, tasks) -> [fn(task) for task in tasks], in order
MapTasks = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]


def path_key(path: str) -> int:
    """The 64-bit key of a real path."""
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "little")


@dataclass
class StoreReport:
    """What ``build_pixel_store`` wrote."""

    images: int = 0
    bytes: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def build_pixel_store(
    paths: Iterable[str],
    transform: Any,
    out: str | os.PathLike[str],
    *,
    decode: DecodeOptions | None = None,
    workers: int | None = None,
    per_task: int = 512,
    extra: dict[str, Any] | None = None,
    progress: ProgressArg = None,
    map_tasks: MapTasks | None = None,
) -> StoreReport:
    """Decode and prepare every image of ``paths`` once, into a store at ``out``.

    Args:
        paths: image paths (duplicates are stored once); use the resolved ``path`` of the
            samples' image references.
        transform: an ``ImageTransform`` or ``DynamicResolution`` (its ``prepare`` runs).
        out: the store's folder (created; an existing store there is replaced).
        decode: decoding limits.
        workers: processes (default: all cores; 1 runs here).
        per_task: images per chunk file.
        extra: more JSON-able facts for the manifest (e.g. what the store was built from).
        progress: ``None``: a bar on a terminal, else a log line now and then, on rank 0
            (``chute._internal.progress``); ``False``: silent; or called with images done.
        map_tasks: runs the decoding tasks instead of a local process pool:
            ``map_tasks(fn, tasks)`` yields ``fn(t)`` for each task, in order (e.g. as Ray
            tasks; each task writes one chunk file, atomically, into ``out``, so ``out`` must
            be on a filesystem every task sees). ``workers`` is then not used.

    Returns:
        A ``StoreReport``; images that fail to decode are listed in ``failures.jsonl`` and
        counted by kind (the stage decodes them at training time and skips them there).
    """
    import time

    t0 = time.perf_counter()
    if not hasattr(transform, "prepare"):
        raise ConfigError(
            "a pixel store needs a transform with a geometry step (ImageTransform "
            f"or DynamicResolution), got {type(transform).__name__}",
            param="transform",
        )
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)  # the store is incomplete from here on
    for stale in folder.glob("chunk-*.bin"):
        stale.unlink()
    unique = sorted(set(map(os.fspath, paths)))
    tasks = [
        (k, unique[lo : lo + per_task], transform, decode or DecodeOptions(), os.fspath(folder))
        for k, lo in enumerate(range(0, len(unique), per_task))
    ]
    workers = max(1, workers or os.cpu_count() or 1)
    results: list[tuple[list[tuple[Any, ...]], list[dict[str, Any]]]] = []
    bar = progress_of(len(unique), "pixels", unit="img", enabled=progress)
    with bar, contextlib.ExitStack() as stack:
        outputs: Iterable[Any]
        if map_tasks is not None:
            outputs = map_tasks(_write_chunk_task, tasks)
        elif workers == 1 or len(tasks) <= 1:
            outputs = map(_write_chunk_task, tasks)
        else:
            pool = stack.enter_context(process_pool(min(workers, len(tasks))))
            outputs = pool.map(_write_chunk_task, tasks)
        for task, result in zip(tasks, outputs, strict=True):
            results.append(result)
            bar.update(len(task[1]))
    rows: list[tuple[Any, ...]] = []
    failures: list[dict[str, Any]] = []
    for entries, failed in results:
        rows.extend(entries)
        failures.extend(failed)
    rows.sort(key=lambda r: (r[0], r[-1]))
    blob = bytearray()
    index = np.zeros(len(rows), dtype=ENTRY)
    for i, (key, size, mtime, chunk, offset, h, w, path) in enumerate(rows):
        raw = path.encode()
        index[i] = (key, size, mtime, chunk, offset, h, w, len(blob), len(blob) + len(raw))
        blob += raw
    with atomic_file(folder / "index.npy") as f:
        np.save(f, index)
    with atomic_file(folder / "paths.bin") as f:
        f.write(bytes(blob))
    with atomic_file(folder / "failures.jsonl") as f:
        for item in failures:
            f.write(json.dumps(item).encode() + b"\n")
    report = StoreReport(
        images=len(rows),
        bytes=int(sum(int(r[5]) * int(r[6]) * 3 for r in rows)),
        seconds=time.perf_counter() - t0,
    )
    for item in failures:
        report.failures[item["kind"]] = report.failures.get(item["kind"], 0) + 1
    manifest = {
        "format": STORE_FORMAT,
        "version": STORE_VERSION,
        "transform": transform.fingerprint(),
        "images": report.images,
        "bytes": report.bytes,
        "chunks": len(tasks),
        "failures": report.failures,
        **(extra or {}),
    }
    with atomic_file(folder / "manifest.json") as f:
        f.write(json.dumps(manifest, indent=2).encode())
    return report


def _write_chunk_task(task: tuple[Any, ...]) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    return _write_chunk(*task)


def _write_chunk(
    k: int, paths: list[str], transform: Any, decode: DecodeOptions, folder: str
) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    entries: list[tuple[Any, ...]] = []
    failures: list[dict[str, Any]] = []
    offset = 0
    with atomic_file(os.path.join(folder, f"chunk-{k:05d}.bin")) as f:
        for path in paths:
            try:
                st = _stat(path)
                pixels = transform.prepare(decode_image(path, decode))
            except SampleError as exc:
                failures.append({"path": path, "kind": exc.kind, "message": exc.message})
                continue
            except OSError as exc:
                failures.append({"path": path, "kind": "image_missing", "message": str(exc)})
                continue
            data = np.ascontiguousarray(pixels, dtype=np.uint8)
            f.write(data.tobytes())
            h, w = data.shape[:2]
            entries.append((path_key(path), st.st_size, st.st_mtime_ns, k, offset, h, w, path))
            offset += data.nbytes
    return entries, failures


class PixelStore:
    """A pixel store opened for reading (memory-mapped; picklable for DataLoader workers).

    Args:
        path: the store's folder.
        transform: when given, its geometry must equal the store's (``ConfigError`` otherwise).

    Raises:
        ConfigError: no complete store there, another format version, another transform.
    """

    def __init__(self, path: str | os.PathLike[str], transform: Any = None):
        self.path = Path(path)
        manifest = self.path / "manifest.json"
        if not manifest.is_file():
            raise ConfigError(
                f"{self.path} holds no complete pixel store (no manifest.json); build "
                f"one with chute.media.build_pixel_store(paths, transform, {str(self.path)!r})",
                param="store",
            )
        self.manifest = json.loads(manifest.read_text())
        if (self.manifest.get("format"), self.manifest.get("version")) != (
            STORE_FORMAT,
            STORE_VERSION,
        ):
            raise ConfigError(
                f"{self.path} is {self.manifest.get('format')} version "
                f"{self.manifest.get('version')}; this chute reads {STORE_FORMAT} version "
                f"{STORE_VERSION}: rebuild it with build_pixel_store",
                param="store",
            )
        self._index: np.ndarray | None = None
        self._paths: np.ndarray | None = None
        self._chunks: dict[int, np.ndarray] = {}
        if transform is not None:
            self.check_transform(transform)

    def check_transform(self, transform: Any) -> None:
        """Raise ``ConfigError`` naming each geometry field that differs from the store's."""
        want = transform.fingerprint() if hasattr(transform, "fingerprint") else None
        have = self.manifest.get("transform")
        if want == have:
            return
        keys = sorted(set(want or {}) | set(have or {}))
        diffs = [
            f"{k}: store {(have or {}).get(k)!r}, transform {(want or {}).get(k)!r}"
            for k in keys
            if (have or {}).get(k) != (want or {}).get(k)
        ]
        raise ConfigError(
            f"{self.path} was built with another transform ({'; '.join(diffs)}); "
            f"rebuild it with build_pixel_store(paths, transform, {str(self.path)!r})",
            param="store",
        )

    def __len__(self) -> int:
        return int(self.manifest["images"])

    def _load(self) -> tuple[np.ndarray, np.ndarray]:
        if self._index is None or self._paths is None:
            self._index = np.load(self.path / "index.npy", mmap_mode="r")
            size = os.path.getsize(self.path / "paths.bin")
            self._paths = (
                np.memmap(self.path / "paths.bin", dtype=np.uint8, mode="r")
                if size
                else np.zeros(0, dtype=np.uint8)
            )
        return self._index, self._paths

    def get(self, path: str) -> np.ndarray | None:
        """The stored uint8 ``(H, W, 3)`` pixels of ``path``, or ``None`` (absent or changed)."""
        index, paths = self._load()
        if not len(index):
            return None
        key = np.uint64(path_key(path))
        i = int(np.searchsorted(index["key"], key))
        raw = path.encode()
        while i < len(index) and index["key"][i] == key:
            row = index[i]
            if bytes(paths[row["path_start"] : row["path_end"]]) == raw:
                try:
                    st = _stat(path)
                except OSError:
                    return None
                if st.st_size != row["size"] or st.st_mtime_ns != row["mtime_ns"]:
                    return None  # the file changed since it was stored
                return self._pixels(row)
            i += 1
        return None

    def _pixels(self, row: Any) -> np.ndarray:
        chunk = int(row["chunk"])
        data = self._chunks.get(chunk)
        if data is None:
            data = np.memmap(self.path / f"chunk-{chunk:05d}.bin", dtype=np.uint8, mode="r")
            self._chunks[chunk] = data
        h, w, offset = int(row["height"]), int(row["width"]), int(row["offset"])
        return data[offset : offset + h * w * 3].reshape(h, w, 3)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_index=None, _paths=None, _chunks={})  # maps reopen in each process
        return state

    def __repr__(self) -> str:
        return f"PixelStore({str(self.path)!r}, images={len(self)})"


class PixelStores:
    """Several pixel stores read as one: each image from the first store that holds it.

    A mixture's caches (``chute preprocess --pixels`` of a mixture) keep one store per dataset;
    a Loader over them reads every dataset's images through this. ``check_transform`` checks
    each store, so stores made for different geometries are refused, naming the one that
    differs.

    Example:
        >>> PixelStores([]).get("a.png") is None
        True
    """

    def __init__(self, stores: Sequence[Any]):
        self.stores = list(stores)

    def check_transform(self, transform: Any) -> None:
        for store in self.stores:
            store.check_transform(transform)

    def get(self, path: str) -> np.ndarray | None:
        """The pixels of ``path`` from the first store that holds them, or ``None``."""
        for store in self.stores:
            pixels = store.get(path)
            if pixels is not None:
                return pixels
        return None

    def __len__(self) -> int:
        return sum(len(s) for s in self.stores)

    def __repr__(self) -> str:
        return f"PixelStores({self.stores!r})"


class _Stat:
    """What the store compares of a stored image: its size and mtime."""

    __slots__ = ("st_mtime_ns", "st_size")

    def __init__(self, size: int, mtime_ns: int):
        self.st_size, self.st_mtime_ns = size, mtime_ns


def _stat(path: str) -> Any:
    """``os.stat`` of a file; a tar member's size and offset (its reference pins its bytes)."""
    if is_member_ref(path):
        ref = MemberRef.parse(path)
        return _Stat(ref.size, ref.offset)
    return os.stat(path)
