"""The ranks of one node opening the same JSONL files at once, as every rank under torchrun does.

``--ranks N`` processes start together (a barrier file) with one empty chute cache, each opening
``JsonlSource(files)``, as a training script does before its Loader. Measured: the wall time
until every rank has its source, the CPU seconds of all ranks, and how many indexes were built
(files scanned, over all ranks) where each file needs one. With ``--drop-caches`` (root
on Linux) the page cache is emptied first, so the files come from the disk. Usage::

    .venv/bin/python benchmarks/bench_index_ranks.py --records 10000000 --ranks 8 --drop-caches
    PYTHONPATH=<other src> .venv/bin/python benchmarks/bench_index_ranks.py ...  # another tree

The records are ``bench_scale.py``'s (alpaca-derived, about 740 bytes each, two files), written
under ``--dir`` once.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save
from bench_scale import drop_page_cache, write_records


def rank(paths: list[str], go: Path) -> None:
    """One rank: wait for the start, open the source, print what it did."""
    from chute import JsonlSource

    while not go.exists():
        time.sleep(0.001)
    t0 = time.perf_counter()
    source = JsonlSource(paths)
    seconds = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "records": len(source),
                "built": sum(f.built for f in source.files),
                "seconds": round(seconds, 3),
                "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
            }
        )
    )


def run(paths: list[Path], ranks: int, drop: bool) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="index-ranks-cache-"))
    go = cache / "go"
    dropped = drop_page_cache() if drop else False
    env = {**os.environ, "CHUTE_CACHE_DIR": str(cache)}
    cmd = [sys.executable, __file__, "--rank", "--go", str(go), "--paths", *map(str, paths)]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) for _ in range(ranks)
    ]
    time.sleep(2.0)  # every rank imported chute and waits at the start
    t0 = time.perf_counter()
    go.touch()
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.perf_counter() - t0
    subprocess.run(["rm", "-rf", str(cache)], check=False)
    return {
        "ranks": ranks,
        "page_cache": "dropped before the run" if dropped else "as left",
        "wall_seconds": round(wall, 2),
        "cpu_seconds_all_ranks": round(sum(o["cpu_seconds"] for o in outs), 2),
        # files scanned, summed over the ranks (the files once each is the least)
        "index_builds": sum(o["built"] for o in outs),
        "files": len(paths),
        "records": sorted({o["records"] for o in outs}),
        "rank_seconds": sorted(o["seconds"] for o in outs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--dir", help="where the records go (default: a temp dir)")
    ap.add_argument("--drop-caches", action="store_true", help="empty the page cache first")
    ap.add_argument("--name", default="index_ranks")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--go", help=argparse.SUPPRESS)
    ap.add_argument("--paths", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank:
        rank(args.paths, Path(args.go))
        return
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-index-ranks-"))
    root.mkdir(parents=True, exist_ok=True)
    paths = write_records(root, args.records)
    result = {
        "records": args.records,
        "bytes": sum(p.stat().st_size for p in paths),
        "run": run(paths, args.ranks, args.drop_caches),
        "command": " ".join(["benchmarks/bench_index_ranks.py", *sys.argv[1:]]),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    print("saved", save(args.name, result))


if __name__ == "__main__":
    main()
