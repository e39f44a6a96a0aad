"""The cold cost of the tiktoken fast path: compiling Qwen3's ``tokenizer.json`` and its checks.

Each measurement is a fresh process (``--src`` runs another checkout's ``src`` for before/after,
alternated with this one's): the spec (``tokenizers``' own serialisation, parsed), ``compile_bpe``,
``FastBPE`` (tiktoken's encoder) and the thorough checks (``check_merges``,
``check_codepoints``). Nothing is written to the chute cache. Usage::

    .venv/bin/python benchmarks/bench_compile_tiktoken.py --src /tmp/before/src --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save
from bench_scale import TOKENIZER

CHILD = r"""
import json, os, sys, time
import tokenizers
from chute.tokenize import compile_tiktoken as ct, verify
from chute.tokenize.fast import FastBPE
rust = tokenizers.Tokenizer.from_file(sys.argv[1])
t0 = time.perf_counter()
spec = json.loads(rust.to_str())
t1 = time.perf_counter()
tables = ct.compile_bpe(spec)
t2 = time.perf_counter()
fast = FastBPE(tables)
t3 = time.perf_counter()
assert verify.check_merges(tables, fast) is None and verify.check_codepoints(rust, fast) is None
t4 = time.perf_counter()
print(json.dumps({"spec": t1 - t0, "compile_bpe": t2 - t1, "fastbpe": t3 - t2,
                  "checks": t4 - t3, "total": t4 - t0, "load": os.getloadavg()[0]}))
"""


def measure(src: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(TOKENIZER)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {k: round(v, 2) for k, v in json.loads(out.splitlines()[-1]).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", help="the other checkout's src folder (before)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--name", default="compile_tiktoken")
    args = ap.parse_args()
    rows = []
    for _ in range(args.rounds):
        for label, src in (("before", args.src), ("after", None)):
            if label == "before" and not args.src:
                continue
            row = {"code": label, **measure(src)}
            print(row)
            rows.append(row)
    result = {"command": " ".join(["benchmarks/bench_compile_tiktoken.py", *sys.argv[1:]])}
    print("saved", save(args.name, {**result, "runs": rows}))


if __name__ == "__main__":
    main()
