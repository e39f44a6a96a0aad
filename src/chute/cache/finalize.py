"""The last step of a build: merge the chunks' records into the manifest and the global files.

Whoever sees every chunk committed runs it (the last rank to finish, or a waiting rank when
the last one died before finishing). It reads only the commit records and the chunks'
``length`` columns, and writes, each atomically and deterministically (no times, no hosts, so
every run of the same build writes the same bytes, and two ranks finalizing at once agree)::

    lengths.npy, image_tokens.npy      one int32 per sample, memory-mapped by readers
    rejects.jsonl                      the chunks' rejects, in source order
    state.json, dataset_info.json      for datasets.load_from_disk(DIR)
    manifest.json                      last: the cache is complete

Example:
    >>> manifest = finalize(Layout("/data/cache"), plan)  # doctest: +SKIP
    >>> manifest["samples"], manifest["by_reason"]  # doctest: +SKIP
    (199_871, {'too_long': 129})
"""

from __future__ import annotations

import functools
import io
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from chute.cache.fingerprint import digest
from chute.cache.layout import CACHE_FORMAT, FORMAT_VERSION, Layout
from chute.cache.schema import integers
from chute.cache.stages import ChunkStage
from chute.errors import CacheError, RejectTally

__all__ = ["array_problem", "finalize", "npy_bytes", "read_chunk", "tally_of"]

_JSON = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2


def _read_chunks(layout: Layout, records: list[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
    """Every committed chunk, in order (what a finalize-time stage reads)."""
    return (_chunk(layout, k, r) for k, r in enumerate(records))


def _chunk(layout: Layout, k: int, record: dict[str, Any]) -> pa.RecordBatch:
    """Chunk ``k`` (downloaded into the mirror first when the cache is remote)."""
    entry = record["files"]["arrow"]
    return read_chunk(layout.fetch(layout.chunk(k), entry["bytes"], entry["blake2b"]))


def read_chunk(path: str | os.PathLike[str]) -> pa.RecordBatch:
    """The record batch of a chunk file, memory-mapped (zero copy; no file descriptor kept)."""
    try:
        with pa.memory_map(os.fspath(path)) as source:
            batches = list(pa.ipc.open_stream(source))
    except (OSError, pa.ArrowInvalid) as exc:
        raise CacheError(
            f"{path}: not a readable cache chunk ({exc}); chute validate on the cache names "
            f"every damaged file and what rebuilds it"
        ) from None
    if len(batches) != 1:
        raise CacheError(f"{path}: a cache chunk holds one record batch, this one {len(batches)}")
    return batches[0]


def tally_of(records: list[dict[str, Any]]) -> RejectTally:
    """The rejects of many chunks, merged in chunk order."""
    tally = RejectTally()
    for r in records:
        tally.merge(RejectTally(counts=Counter(r["by_reason"]), examples=r["examples"]))
    return tally


def finalize(
    layout: Layout,
    plan: dict[str, Any],
    stages: Sequence[ChunkStage] = (),
    records: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Write the global files and the manifest from the committed chunks; returns the manifest.

    Extra stages' ``finish`` runs after the global files, before the manifest. Each chunk's
    entry in the manifest keeps the ``build_digest`` its commit record carries.

    Args:
        layout: the cache.
        plan: the build's plan.
        stages: extra stages (their ``finish``).
        records: every chunk's commit record, when the caller read them already (and checked
            they are this build's).

    Raises:
        CacheError: a chunk's commit record is missing or unreadable.
    """
    if records is None:
        records = [layout.read_json(layout.record(k)) for k in range(plan["chunks"])]
    checked: list[dict[str, Any]] = []
    for k, record in enumerate(records):
        if not isinstance(record, dict):
            raise CacheError(
                f"cannot finalize {layout.shown}: chunk {k} is not committed (no readable "
                f"{layout.where(layout.record(k))}); run the same chute preprocess command again "
                f"to build it"
            )
        checked.append(record)
    records = checked
    samples = [r["samples"] for r in records]
    total = int(sum(samples))
    for path, column in ((layout.lengths, "length"), (layout.image_tokens, "num_image_tokens")):
        parts = (_column(layout, k, r, column) for k, r in enumerate(records))
        _write_npy(layout, path, total, parts)
    layout.storage.publish(layout.rejects, _rejects(layout, records))
    tally = tally_of(records)
    hashes = [r["files"][name]["blake2b"] for r in records for name in sorted(r["files"])]
    data_digest = digest(hashes)
    files = [f"chunks/{r['files']['arrow']['name']}" for r in records]
    layout.publish(layout.hf_state, orjson.dumps(_hf_state(files, data_digest), option=_JSON))
    layout.publish(layout.hf_info, orjson.dumps(_hf_info(plan), option=_JSON))
    outputs = {}
    for stage in stages:
        folder = layout.root / stage.name
        folder.mkdir(parents=True, exist_ok=True)
        info = stage.finish(folder, functools.partial(_read_chunks, layout, records))
        layout.storage.upload_tree(folder)  # a remote cache: the stage's files, its manifest last
        if info is not None:
            outputs[stage.name] = orjson.loads(orjson.dumps(info))
    manifest = {
        "format": CACHE_FORMAT,
        "format_version": FORMAT_VERSION,
        "fingerprint": plan["fingerprint"],
        "build_digest": digest(plan["fingerprint"]),
        "data_digest": data_digest,
        "records": plan["records"],
        "chunk_size": plan["chunk_size"],
        "samples": total,
        "rejected": tally.total,
        "by_reason": dict(sorted(tally.counts.items())),
        "examples": {kind: tally.examples[kind] for kind in sorted(tally.examples)},
        "tokens": sum(r["tokens"] for r in records),
        "trained_tokens": sum(r["trained_tokens"] for r in records),
        "image_tokens": sum(r["image_tokens"] for r in records),
        "truncated": sum(r["truncated"] for r in records),
        # windows of split records with no trained token, left out (not in chunk records of
        # caches built before they were counted)
        "untrained_windows": sum(r.get("untrained_windows", 0) for r in records),
        "longest": max((r["longest"] for r in records), default=0),
        "bytes": sum(f["bytes"] for r in records for n, f in r["files"].items() if n != "rejects"),
        "chunks": [_entry(r) for r in records],
        "stage_outputs": outputs,
    }
    layout.publish(layout.manifest, orjson.dumps(manifest, option=_JSON) + b"\n")
    return manifest


def _entry(record: dict[str, Any]) -> dict[str, Any]:
    """A chunk's entry in the manifest (its build: what ``open_cache`` checks it against)."""
    entry = {"records": record["records"], "samples": record["samples"], "files": record["files"]}
    if "build_digest" in record:
        entry["build_digest"] = record["build_digest"]
    return entry


def _column(layout: Layout, k: int, record: dict[str, Any], name: str) -> np.ndarray:
    return integers(_chunk(layout, k, record).column(name)).astype(np.int32, copy=False)


def _npy_header(total: int) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.dtype(np.int32).str, "fortran_order": False, "shape": (total,)}
    )
    return header.getvalue()


def npy_bytes(total: int) -> int:
    """The size of the ``.npy`` of ``total`` int32 values that ``finalize`` writes.

    What a reader checks ``lengths.npy`` and ``image_tokens.npy`` against: a file cut short
    (a full disk, a copy stopped midway) is named at open, not met as numpy's mmap error.
    """
    return len(_npy_header(total)) + 4 * total


def array_problem(listed: Mapping[str, int], name: str, manifest: Mapping[str, Any]) -> str:
    """What is wrong with ``lengths.npy`` or ``image_tokens.npy`` by its size, or ``""``.

    ``listed``: a folder listing (name -> bytes). The size follows from the manifest's sample
    count, so a file cut short is found without reading it.
    """
    size = listed.get(name)
    if size is None:
        return f"{name} is missing"
    samples = manifest.get("samples")
    if isinstance(samples, int) and size != npy_bytes(samples):
        return f"{name} is {size} bytes, {samples} samples make {npy_bytes(samples)}"
    return ""


def _write_npy(layout: Layout, path: Path, total: int, parts: Iterator[np.ndarray]) -> None:
    """A ``.npy`` of ``total`` int32 values written part by part (never all in memory)."""
    written = 0

    def chunks() -> Iterator[bytes]:
        nonlocal written
        yield _npy_header(total)
        for part in parts:
            written += len(part)
            yield part.tobytes()

    layout.storage.publish(path, chunks())
    if written != total:
        raise CacheError(f"{path}: wrote {written} values, the commit records say {total}")


def _rejects(layout: Layout, records: list[dict[str, Any]]) -> Iterator[bytes]:
    for k, r in enumerate(records):
        if "rejects" in r["files"]:
            entry = r["files"]["rejects"]
            local = layout.fetch(layout.rejects_part(k), entry["bytes"], entry["blake2b"])
            with open(local, "rb") as f:
                while block := f.read(1 << 22):
                    yield block


def _hf_state(files: list[str], fingerprint: str) -> dict[str, Any]:
    return {
        "_data_files": [{"filename": name} for name in files],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }


def _hf_info(plan: dict[str, Any]) -> dict[str, Any]:
    recipe = plan["fingerprint"]["recipe"]
    return {
        "description": (
            "A chute token cache (https://github.com/chute-ml/chute, docs/cache.md). labels are "
            "input_ids inside each [start, end) pair of label_spans, -100 elsewhere."
        ),
        "builder_name": "chute",
        "config_name": f"{recipe.get('template', {}).get('name')}-{recipe.get('max_length')}",
        "version": {"version_str": f"{FORMAT_VERSION}.0.0"},
    }
