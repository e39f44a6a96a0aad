"""Bounded time and memory per record: one huge record through validate and a Loader, before/after.

Usage: ``.venv/bin/python benchmarks/bench_hostile.py [--before REV] [--quick]``

``--before`` is the commit to compare with (default: the one before the bounded encoding
landed); it is checked out into a temporary git worktree and run from there, so "before" is the
real earlier code, not a switch in today's. Each measurement runs in a fresh process; peak RSS is
that process's ``ru_maxrss`` (records are written by another child, so the parent never holds
one: Linux keeps ``ru_maxrss`` across fork + exec).

Records are alpaca records whose ``output`` is N MB of: ``words`` (``"word " * k``),
``x`` (one repeated character: one pre-token, where no exact cut exists and the whole text is
encoded, before and after), ``cjk`` (CJK text with a comma every 17 characters). The tokenizer is
Qwen3 from ../shared/data, ``--max-length 2048``. The cost on ordinary data is ``Recipe.batch``
over alpaca_en_demo.json, before and after, interleaved, best of 5.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from _common import machine, save  # noqa: E402

SHARED = Path(os.environ.get("CHUTE_SHARED_DATA", REPO.parent / "shared" / "data"))
TOKENIZER = SHARED / "tokenizers" / "qwen3"
DEFAULT_BEFORE = "993001c"  # main just before the bounded encoding (issue 21)

VALIDATE = """
import json, resource, sys, time
from chute.cli import app
t0 = time.perf_counter()
try:
    app(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

LOADER = """
import json, resource, sys, time
from chute import JsonlSource, Loader, Recipe, World
recipe = Recipe(tokenizer=sys.argv[2], max_length=2048)
t0 = time.perf_counter()
loader = Loader(JsonlSource(sys.argv[1]), recipe, batch_size=1, world=World(), num_workers=0)
n = sum(len(b["sample_ids"]) for b in loader)
print(json.dumps({"seconds": time.perf_counter() - t0, "samples": n,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

ORDINARY = """
import json, sys, time
from chute import JsonlSource, Recipe
recipe = Recipe(tokenizer=sys.argv[2], max_length=2048)
records = list(JsonlSource(sys.argv[1]))
recipe.batch(records[:50])
best = 1e9
for _ in range(5):
    t0 = time.perf_counter()
    recipe.batch(records)
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"records_per_s": len(records) / best}))
"""


def write_record(path: Path, kind: str, megabytes: int) -> None:
    n = megabytes * 1_000_000
    if kind == "words":
        text = "word " * (n // 5)
    elif kind == "x":
        text = "x" * n
    else:
        rng = random.Random(0)
        chars = [chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(n // 3)]
        for i in range(0, len(chars), 17):
            chars[i] = "，"
        text = "".join(chars)
    with open(path, "w", encoding="utf-8") as f:
        # UTF-8 as written by real corpora (ensure_ascii would make CJK 2x bigger, as \\uXXXX)
        f.write(
            json.dumps(
                {"instruction": "Summarise.", "input": "", "output": text}, ensure_ascii=False
            )
        )
        f.write("\n")


def run(src: Path, code: str, *args: str, timeout: float = 900) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no result from {args}: {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> int:
    if sys.argv[1:2] == ["--write"]:
        write_record(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default=DEFAULT_BEFORE)
    ap.add_argument("--quick", action="store_true", help="1 and 10 MB only")
    ap.add_argument("--kinds", default="words,x,cjk", help="record kinds to run")
    ap.add_argument("--no-ordinary", action="store_true", help="skip the ordinary-data check")
    args = ap.parse_args()
    sizes = [1, 10] if args.quick else [1, 10, 50]
    work = Path(tempfile.mkdtemp(prefix="chute-hostile-"))
    before = work / "before"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(before), args.before],
        check=True,
    )
    trees = {"before": before / "src", "after": REPO / "src"}
    rows = []
    try:
        for kind in args.kinds.split(","):
            for mb in sizes:
                data = work / f"{kind}-{mb}.jsonl"
                # written by a child process: ru_maxrss survives fork + exec, so a parent that
                # once held the record would inflate every later child's peak
                subprocess.run(
                    [sys.executable, __file__, "--write", str(data), kind, str(mb)], check=True
                )
                for when, src in trees.items():
                    cache = work / f"cache-{when}"
                    validate = run(
                        src,
                        VALIDATE,
                        "validate",
                        str(data),
                        "--tokenizer",
                        str(TOKENIZER),
                        "--max-length",
                        "2048",
                        "--workers",
                        "1",
                        "--no-decode",
                        "--quiet",
                        "--cache-dir",
                        str(cache),
                    )
                    row = {"kind": kind, "mb": mb, "code": when, "validate": validate}
                    if kind == "words":
                        row["loader"] = run(src, LOADER, str(data), str(TOKENIZER))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                data.unlink()
        ordinary: dict[str, float] = {}
        alpaca = SHARED / "llama-factory" / "alpaca_en_demo.json"
        for _ in range(0 if args.no_ordinary else 2):  # interleaved: before, after, before, after
            for when, src in trees.items():
                r = run(src, ORDINARY, str(alpaca), str(TOKENIZER))["records_per_s"]
                ordinary[when] = max(ordinary.get(when, 0.0), r)
        print(json.dumps({"ordinary": ordinary}), flush=True)
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False
        )
    save(
        "hostile",
        {
            "command": " ".join(sys.argv),
            "machine": machine(),
            "load_average": os.getloadavg(),
            "before": args.before,
            "rows": rows,
            "ordinary_records_per_s": ordinary,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
