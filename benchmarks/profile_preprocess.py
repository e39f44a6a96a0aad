"""Where a ``chute preprocess`` worker's time goes, per record, on the preprocess benchmark's data.

Usage: ``.venv/bin/python benchmarks/profile_preprocess.py [--chunks 0,4,8,9] [--parts formats]``
(``--parts``: only those, the others keep their last result; results:
``benchmarks/results/profile_preprocess.json``). Data, tokenizer and recipe as in
``bench_preprocess.py`` (100,000 records: alpaca + ShareGPT from ../shared/data, Qwen3 on the
tiktoken fast path, ChatML, ``max_length`` 2048, chunks of 10,000 records).

Parts, all in this one process (one core):

* **stages**: the chosen chunks are built as a worker builds them (``run_chunk``, into a
  temporary cache) while a ``SIGPROF`` timer samples the Python stack (asked for every 0.5 ms
  of CPU time; the kernel delivers at its tick, every ~4 ms on this host: ``samples`` says how
  many); each sample goes to the stage of the innermost frame that names one (C calls count for
  the Python frame that made them). A stack sampler, not cProfile: cProfile charges every Python
  call and would inflate the small functions this is about.
* **gc**: the same chunks built with the interpreter's default collector settings and under
  ``chute._internal.collector.fewer_collections`` (what ``run_chunk`` uses): collections,
  seconds spent in them, and the build's wall time.
* **start**: ``chute preprocess`` of the first 1,000 records (one chunk, ~0.1 s of work) in a
  fresh interpreter, best of 5: what every run pays before its chunks (imports, loading and
  checking the tokenizer, planning) and after them; ``seconds_with_teardown`` is the same
  command called as a library function (``python -c``), where the interpreter frees everything
  before it exits (the ``chute`` program skips that, see ``chute.cli.main``).
* **ids**: for the alpaca records' rendered texts, tiktoken's ids as a Python list turned into
  an ``int32`` array, against its native buffer read as one (best of 7).
* **formats**: reading 40,000 parsed alpaca records into conversations (``format="auto"``,
  detection included), the short way plain records take against the full reading of every
  column (``chute.formats.alpaca._read_all``), best of 5.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, save
from bench_preprocess import MAX_LENGTH, REPO, TOKENIZER, compile_chute, make_data
from chute._internal.collector import fewer_collections
from chute.cache.config import load_config
from chute.cache.engines import run_chunk
from chute.cache.writer import ChunkJob
from chute.sources import open_source

# innermost match wins: (path fragment, function name or None for any) -> stage
STAGES: list[tuple[str, str | None, str]] = [
    ("tokenize/fast.py", "<lambda>", "tiktoken encoding"),
    ("tokenize/hf.py", "_checked", "first-record checks (tokenizers)"),
    ("tokenize/", None, "cutting at added tokens, span lookup"),
    ("formats/", None, "format reading"),
    ("sample/conversation.py", None, "format reading"),
    ("templates/", None, "template rendering"),
    ("recipe/encode.py", None, "labels, length fit, checks"),
    ("recipe/outcome.py", None, "labels, length fit, checks"),
    ("sample/contract.py", None, "labels, length fit, checks"),
    ("cache/", None, "cache writer"),
    ("sources/", None, "JSONL reading and parsing"),
    ("recipe/recipe.py", None, "recipe batch bookkeeping"),
]


def stage_of(frame: FrameType | None) -> str:
    while frame is not None:
        path, name = frame.f_code.co_filename, frame.f_code.co_name
        for fragment, function, stage in STAGES:
            if fragment in path and (function is None or function == name):
                return stage
        frame = frame.f_back
    return "other"


def job_for(chunk_size: int = 10_000) -> ChunkJob:
    alpaca, sharegpt, _ = make_data(100_000)
    cfg = load_config(
        {
            "sources": [str(alpaca), str(sharegpt)],
            "recipe": {"tokenizer": str(TOKENIZER), "template": "chatml", "max_length": MAX_LENGTH},
        }
    ).resolved()
    source = open_source(cfg.sources)
    root = tempfile.mkdtemp(prefix="profile-preprocess-")
    (Path(root) / "chunks").mkdir()
    starts = np.cumsum([0] + [len(f) for f in source.files[:-1]]).tolist()
    return ChunkJob(source, cfg.recipe.build(), root, chunk_size, "uint32", starts)


def stages_part(job: ChunkJob, chunks: list[int]) -> dict[str, Any]:
    samples: Counter[str] = Counter()

    def on_tick(signum: int, frame: FrameType | None) -> None:
        samples[stage_of(frame)] += 1

    job.run(chunks[0])  # warm: the first chunk's tokenizer checks and caches
    previous = signal.signal(signal.SIGPROF, on_tick)
    signal.setitimer(signal.ITIMER_PROF, 0.0005, 0.0005)
    t0 = time.perf_counter()
    try:
        records = sum(run_chunk(job, k)["records"][1] - job.bounds(k)[0] for k in chunks)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, previous)
    seconds = time.perf_counter() - t0
    total = sum(samples.values())
    return {
        "records": records,
        "us_per_record": round(seconds / records * 1e6, 1),
        "samples": total,
        "share": {k: round(v / total, 3) for k, v in samples.most_common()},
    }


def gc_part(job: ChunkJob, chunks: list[int]) -> dict[str, Any]:
    spent = [0.0, 0]
    began = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - began[0]
            spent[1] += 1

    gc.callbacks.append(on_gc)
    out: dict[str, Any] = {}
    try:
        for _ in range(2):  # alternate, keep each side's fastest
            for side in ("default", "fewer_collections"):
                spent[:] = [0.0, 0]
                t0 = time.perf_counter()
                if side == "default":
                    for k in chunks:
                        job.run(k)
                else:
                    with fewer_collections():
                        for k in chunks:
                            job.run(k)
                run = {
                    "seconds": round(time.perf_counter() - t0, 3),
                    "collections": spent[1],
                    "gc_seconds": round(spent[0], 3),
                }
                if side not in out or run["seconds"] < out[side]["seconds"]:
                    out[side] = run
    finally:
        gc.callbacks.remove(on_gc)
    return out


def ids_part(job: ChunkJob) -> dict[str, Any]:
    fast = job.recipe.tokenizer._fast
    if fast is None:
        return {"skipped": "the tokenizer is not on the tiktoken fast path"}
    texts = [job.recipe.render(r).text for r in job.source.records_between(0, 2000)]
    core = fast.encoding._core_bpe
    nothing: set[str] = set()

    def as_list() -> None:
        for t in texts:
            np.array(core.encode_ordinary(t), dtype=np.int32)

    def as_buffer() -> None:
        for t in texts:
            np.frombuffer(core.encode_to_tiktoken_buffer(t, nothing), dtype=np.int32)

    best = {"list_then_array": 1e9, "native_buffer": 1e9}
    for _ in range(7):
        for name, fn in (("list_then_array", as_list), ("native_buffer", as_buffer)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    tokens = sum(len(core.encode_ordinary(t)) for t in texts)
    return {
        "texts": len(texts),
        "tokens_per_text": round(tokens / len(texts), 1),
        "us_per_text": {k: round(v / len(texts) * 1e6, 2) for k, v in best.items()},
    }


def start_part(job: ChunkJob) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="profile-start-"))
    small = work / "first_1000.jsonl"
    with open(job.source.files[0].path, "rb") as f:
        small.write_bytes(b"".join(line for _, line in zip(range(1000), f, strict=False)))
    config = work / "chute.yaml"
    recipe = {"tokenizer": str(TOKENIZER), "template": "chatml", "max_length": MAX_LENGTH}
    config.write_text(json.dumps({"sources": [str(small)], "recipe": recipe}))
    # argv[0] "chute": the program (it skips the interpreter's teardown); "-c": any other caller
    cli = "import sys; sys.argv[0] = {!r}; from chute.cli import main; main()"
    compile_chute([REPO / "src"])  # as bench_preprocess.py runs it
    runs: dict[str, list[float]] = {"chute": [], "-c": []}
    for k in range(5):
        for argv0, times in runs.items():
            out = work / f"out{k}{argv0}"
            args = ["preprocess", str(config), "--out", str(out), "--quiet", "--json"]
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", cli.format(argv0), *args], check=True, capture_output=True
            )
            times.append(round(time.perf_counter() - t0, 3))
    shutil.rmtree(work, ignore_errors=True)
    return {
        "records": 1000,
        "seconds": min(runs["chute"]),
        "runs": runs["chute"],
        "seconds_with_teardown": min(runs["-c"]),
        "runs_with_teardown": runs["-c"],
    }


def formats_part(job: ChunkJob) -> dict[str, Any]:
    import orjson

    from chute.formats import FormatReader, FormatSpec
    from chute.formats import alpaca as alpaca_format

    with open(job.source.files[0].path, "rb") as f:
        data = [orjson.loads(line) for _, line in zip(range(40_000), f, strict=False)]
    best: dict[str, float] = {}
    short_way = alpaca_format._plain_record
    for name in ("short_way", "full_reading"):
        # the full reading: the short way never answers
        alpaca_format._plain_record = short_way if name == "short_way" else (lambda d, s: None)
        try:
            reader = FormatReader(FormatSpec("auto"))
            for _ in range(5):
                t0 = time.perf_counter()
                for record in data:
                    reader(record)
                seconds = time.perf_counter() - t0
                best[name] = min(best.get(name, seconds), seconds)
        finally:
            alpaca_format._plain_record = short_way
    return {
        "records": len(data),
        "us_per_record": {k: round(v / len(data) * 1e6, 2) for k, v in best.items()},
    }


PARTS = ("stages", "gc", "start", "ids", "formats")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", default="0,4,8,9", help="chunks of 10,000 records to build")
    ap.add_argument(
        "--parts", default=",".join(PARTS), help="parts to run; the others keep their last result"
    )
    args = ap.parse_args()
    if not TOKENIZER.is_file():
        print(f"needs {TOKENIZER} (set CHUTE_SHARED_DATA)", file=sys.stderr)
        return 2
    chunks = [int(k) for k in args.chunks.split(",")]
    job = job_for()
    kept = RESULTS_DIR / "profile_preprocess.json"
    found = json.loads(kept.read_text()) if kept.is_file() else {}
    runs = {
        "stages": lambda: stages_part(job, chunks),
        "gc": lambda: gc_part(job, chunks),
        "start": lambda: start_part(job),
        "ids": lambda: ids_part(job),
        "formats": lambda: formats_part(job),
    }
    parts = {name: found.get(name) for name in PARTS}
    for name in args.parts.split(","):
        parts[name] = runs[name]()
    save("profile_preprocess", {"chunks": chunks, **parts})
    return 0


if __name__ == "__main__":
    sys.exit(main())
