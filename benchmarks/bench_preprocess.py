"""Offline preprocessing: ``chute preprocess`` vs the XTuner-style ``datasets.map`` path.

Usage: ``.venv/bin/python benchmarks/bench_preprocess.py [--records 200000] [--rounds 2]
[--sides chute,chute_before,chute_hf,xtuner,batched] [--before REV] [--scaling] [--quick]
[--name NAME]`` (needs the ``bench`` extra: ``datasets``).

Data: real instruction data from ../shared/data, repeated to ``--records`` records, written as
two JSONL files: LLaMA-Factory's ``alpaca_en_demo.json`` + ``alpaca_zh_demo.json`` (alpaca,
English and Chinese) and FastChat's ``dummy_conversation.json`` (ShareGPT, 2-6 turns), 4:1.
Same tokenizer (Qwen3 ``tokenizer.json``), same ChatML formatting, ``max_length`` 2048 with
truncation, the same 2 processes, each side in a fresh interpreter (imports counted):

* **chute**: ``chute preprocess CONFIG --out DIR --workers 2`` (template ``chatml``; the
  tokenizer runs on tiktoken, the default ``tokenizer_backend=auto``).
* **chute_before**: the same command run by chute as it was before the tiktoken fast path
  (``--before``, default ``efc51e1``: checked out into a temporary git worktree and run from
  there): today's figure the fast path is measured against.
* **chute_hf**: the same with ``recipe.tokenizer_backend=hf`` (``tokenizers`` with everything
  else of the current chute).
* with ``--scaling``, **chute_1worker**: the same as **chute** with ``--workers 1``.
* **XTuner-style**: what ``xtuner.dataset.process_hf_dataset`` does: ``load_dataset("json")``,
  then ``.map`` with ``num_proc=2`` of the dataset map function (alpaca / ShareGPT into
  XTuner's ``conversation`` turns), of ``template_map_fn`` (Qwen chat template strings) and of
  ``encode_fn`` (``tokenizer.encode`` of each turn's input and output, labels ``-100`` on
  inputs, truncation), then ``save_to_disk``. The tokenizer is ``transformers``'
  ``AutoTokenizer`` over the same files, as in XTuner.
* **batched** (only when named in ``--sides``): the best a user writes with ``datasets``: one
  ``.map(batched=True, batch_size=1000, num_proc=N)`` per file that formats a batch's turns
  with the same template strings and encodes them all in one call of the fast tokenizer
  (``tokenizer(texts)``), then ``save_to_disk``: the same tokens and labels as XTuner-style.

Results are saved after every run, so a run cut short keeps the ones that finished.

chute's modules are compiled to bytecode before the runs, as ``pip install`` does for every
side's packages; before each run the previous one's files are flushed to disk (``sync``).
Rounds alternate chute and the baseline; the fastest of each is kept. Then training-time
reads: random-access samples/s from the chute cache (``cache[i]``: ``input_ids`` and
``labels`` arrays) vs ``datasets.load_from_disk(...)[i]`` on the baseline's output (python
lists, the default format; and ``with_format("numpy")``), and bytes on disk per token.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA_DIR, SHARED_DATA, save

TOKENIZER = SHARED_DATA / "tokenizers/qwen3/tokenizer.json"
MAX_LENGTH = 2048
REPO = Path(__file__).resolve().parents[1]
SIDES = "chute,chute_before,chute_hf,xtuner"  # and "batched", the best datasets.map
BEFORE = "efc51e1"  # main just before the tiktoken fast path (issue 18)

# -- the XTuner-style baseline (runs in a child process) ------------------------------------

QWEN_CHAT = {  # xtuner.utils.templates.PROMPT_TEMPLATE.qwen_chat
    "SYSTEM": "<|im_start|>system\n{system}<|im_end|>\n",
    "INSTRUCTION": "<|im_start|>user\n{input}<|im_end|>\n<|im_start|>assistant\n",
    "SUFFIX": "<|im_end|>",
    "SUFFIX_AS_EOS": True,
    "SEP": "\n",
}


def alpaca_map_fn(example: dict[str, Any]) -> dict[str, Any]:
    text = example["instruction"]
    if example.get("input"):
        text = f"{text}\n{example['input']}"
    return {"conversation": [{"input": text, "output": example["output"]}]}


def sharegpt_map_fn(example: dict[str, Any]) -> dict[str, Any]:
    turns, pending = [], None
    for msg in example["conversations"]:
        if msg["from"] == "human":
            pending = msg["value"]
        elif msg["from"] == "gpt" and pending is not None:
            turns.append({"input": pending, "output": msg["value"]})
            pending = None
    return {"conversation": turns}


def template_map_fn(example: dict[str, Any]) -> dict[str, Any]:
    out = []
    for i, turn in enumerate(example["conversation"]):
        text = QWEN_CHAT["INSTRUCTION"].format(input=turn["input"], round=i + 1)
        out.append(
            {
                "input": text,
                "output": turn["output"] + QWEN_CHAT["SUFFIX"],
                "need_eos_token": not QWEN_CHAT["SUFFIX_AS_EOS"],
                "sep": QWEN_CHAT["SEP"],
            }
        )
    return {"conversation": out}


def encode_fn(example: dict[str, Any], tokenizer: Any, max_length: int) -> dict[str, Any]:
    """xtuner.dataset.utils.encode_fn for a tokenizer without bos (Qwen)."""
    eos = [tokenizer.eos_token_id]
    input_ids: list[int] = []
    labels: list[int] = []
    for turn in example["conversation"]:
        enc = tokenizer.encode(turn["input"], add_special_tokens=False)
        input_ids += enc
        labels += [-100] * len(enc)
        out = tokenizer.encode(turn["output"], add_special_tokens=False)
        input_ids += out
        labels += list(out)
        if turn.get("need_eos_token", True):
            input_ids += eos
            labels += eos
        if turn.get("sep"):
            sep = tokenizer.encode(turn["sep"], add_special_tokens=False)
            input_ids += sep
            labels += [-100] * len(sep)
    input_ids, labels = input_ids[:max_length], labels[:max_length]
    return {"input_ids": input_ids, "labels": labels, "length": len(input_ids)}


def datasets_child(alpaca: str, sharegpt: str, out: str, tokenized: Any) -> dict[str, Any]:
    """A ``datasets`` side in this (child) process: load each file, ``tokenized(ds, path,
    tokenizer)`` it, concatenate, ``save_to_disk``; imports and the tokenizer's loading
    counted."""
    t0 = time.perf_counter()
    import datasets
    from transformers import AutoTokenizer

    datasets.disable_caching()
    datasets.disable_progress_bars()
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER.parent), local_files_only=True)
    parts = []
    for path in (alpaca, sharegpt):
        ds = datasets.load_dataset("json", data_files=path, split="train")
        parts.append(tokenized(ds, path, tokenizer))
    ds = datasets.concatenate_datasets(parts)
    ds.save_to_disk(out)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "samples": len(ds), "tokens": int(sum(ds["length"]))}


def xtuner_child(alpaca: str, sharegpt: str, out: str, num_proc: int) -> dict[str, Any]:
    def tokenized(ds: Any, path: str, tokenizer: Any) -> Any:
        map_fn = alpaca_map_fn if path == alpaca else sharegpt_map_fn
        ds = ds.map(map_fn, num_proc=num_proc, remove_columns=ds.column_names)
        ds = ds.map(template_map_fn, num_proc=num_proc)
        return ds.map(
            encode_fn,
            num_proc=num_proc,
            fn_kwargs={"tokenizer": tokenizer, "max_length": MAX_LENGTH},
            remove_columns=["conversation"],
        )

    return datasets_child(alpaca, sharegpt, out, tokenized)


# -- the batched baseline: the best a user writes with datasets (runs in a child process) -----


def batched_turns(batch: dict[str, list[Any]]) -> list[list[tuple[str, str]]]:
    """Each record of a batch as its (prompt, response) turns, alpaca or ShareGPT."""
    if "conversations" in batch:
        return [
            [
                (t["input"], t["output"])
                for t in sharegpt_map_fn({"conversations": c})["conversation"]
            ]
            for c in batch["conversations"]
        ]
    rows = zip(batch["instruction"], batch["input"], batch["output"], strict=True)
    return [[(f"{ins}\n{inp}" if inp else ins, out)] for ins, inp, out in rows]


def batched_encode(batch: dict[str, list[Any]], tokenizer: Any, max_length: int) -> dict[str, Any]:
    """One call of the fast tokenizer for every turn of the batch, then ids and labels.

    The same tokens and labels as ``encode_fn`` (each turn's prompt and response encoded
    apart, the response ending in the template's suffix, a separator after each turn), but
    formatted and tokenized a batch at a time, in Rust's thread pool, as a user who knows
    ``datasets`` writes it.
    """
    turns = batched_turns(batch)
    texts: list[str] = []
    for record in turns:
        for prompt, response in record:
            texts.append(QWEN_CHAT["INSTRUCTION"].format(input=prompt))
            texts.append(response + QWEN_CHAT["SUFFIX"])
    encoded = iter(tokenizer(texts, add_special_tokens=False)["input_ids"])
    sep = tokenizer.encode(QWEN_CHAT["SEP"], add_special_tokens=False)
    out: dict[str, list[Any]] = {"input_ids": [], "labels": [], "length": []}
    for record in turns:
        ids: list[int] = []
        labels: list[int] = []
        for _ in record:
            prompt, response = next(encoded), next(encoded)
            ids += prompt + response + sep
            labels += [-100] * len(prompt) + response + [-100] * len(sep)
        out["input_ids"].append(ids[:max_length])
        out["labels"].append(labels[:max_length])
        out["length"].append(min(len(ids), max_length))
    return out


def batched_child(alpaca: str, sharegpt: str, out: str, num_proc: int) -> dict[str, Any]:
    def tokenized(ds: Any, path: str, tokenizer: Any) -> Any:
        return ds.map(
            batched_encode,
            batched=True,
            batch_size=1000,
            num_proc=num_proc,
            fn_kwargs={"tokenizer": tokenizer, "max_length": MAX_LENGTH},
            remove_columns=ds.column_names,
        )

    return datasets_child(alpaca, sharegpt, out, tokenized)


CHILDREN = {"xtuner": xtuner_child, "batched": batched_child}


# -- the driver ------------------------------------------------------------------------------


def make_data(records: int) -> tuple[Path, Path, int]:
    rows_a: list[Any] = []
    for name in ("llama-factory/alpaca_en_demo.json", "llama-factory/alpaca_zh_demo.json"):
        rows_a += orjson.loads((SHARED_DATA / name).read_bytes())
    rows_s = orjson.loads((SHARED_DATA / "fastchat/dummy_conversation.json").read_bytes())
    n_a, n_s = records * 4 // 5, records - records * 4 // 5
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    out = []
    for rows, n, name in ((rows_a, n_a, "alpaca"), (rows_s, n_s, "sharegpt")):
        path = DATA_DIR / f"instruct_{name}_{n}.jsonl"
        if not path.is_file():
            rng = random.Random(0)
            with open(path, "wb") as f:
                for i in range(n):
                    row = dict(rows[i % len(rows)])
                    if name == "sharegpt":
                        row = {"conversations": row["conversations"]}
                    else:
                        row = {k: row[k] for k in ("instruction", "input", "output")}
                    row["id"] = rng.randrange(10**9)
                    f.write(orjson.dumps(row) + b"\n")
        out.append(path)
    return out[0], out[1], records


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


CLI = "import sys; from chute.cli import main; sys.argv[0] = 'chute'; sys.exit(main())"


def run_chute(
    paths: list[Path],
    out: Path,
    workers: int,
    backend: str | None = "auto",
    src: Path | None = None,
) -> dict[str, Any]:
    """``chute preprocess`` of ``paths``; ``src``: run the chute found there (an older one)."""
    recipe: dict[str, Any] = {
        "tokenizer": str(TOKENIZER),
        "template": "chatml",
        "max_length": MAX_LENGTH,
    }
    if backend is not None:
        recipe["tokenizer_backend"] = backend
    config = {
        "sources": [str(p) for p in paths],
        "recipe": recipe,
        "cache": {"chunk_size": 10_000},
    }
    cfg = out.parent / f"chute-{out.name}.yaml"
    cfg.write_text(json.dumps(config))
    chute = [sys.executable, "-c", CLI]
    args = ["preprocess", str(cfg), "--out", str(out), "--workers", str(workers)]
    # chute's tree first; what PYTHONPATH held stays after it (a host's carried packages)
    paths = [str(src or REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    cmd = [*chute, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*cmd, "--json", "--quiet"], capture_output=True, text=True, check=False, env=env
    )
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    report = json.loads(proc.stdout)
    chunks = sum(p.stat().st_size for p in (out / "chunks").glob("*.arrow"))
    return {
        "seconds": seconds,
        "samples": report["samples"],
        "tokens": report["tokens"],
        "bytes": chunks,
        "command": f"{'chute (' + str(src) + ')' if src else 'chute'} {' '.join(args)}",
    }


def settle() -> None:
    """Let the previous run's writes reach the disk before the next run is timed.

    The XTuner-style side writes ~160 MB (its Arrow output and ``datasets``' cache); without
    this the kernel flushes them during the next run, on the same two cores.
    """
    os.sync()
    time.sleep(1.0)


def compile_chute(trees: list[Path]) -> None:
    """Compile each chute tree's modules to bytecode, as ``pip install`` does.

    The peers' packages came with theirs from ``pip install``; without this, a machine that
    sets ``PYTHONDONTWRITEBYTECODE`` (this one does) would compile chute's ~140 modules in
    every run.
    """
    for tree in trees:
        compileall.compile_dir(str(tree), quiet=1)


def run_datasets(
    side: str, alpaca: Path, sharegpt: Path, out: Path, num_proc: int
) -> dict[str, Any]:
    """A ``datasets`` side (``xtuner`` or ``batched``) in a fresh interpreter."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(out.parent / "hf-cache")}
    args = ["--child", side, str(alpaca), str(sharegpt), str(out), str(num_proc)]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    arrow = sum(p.stat().st_size for p in out.glob("*.arrow"))
    return {**result, "seconds": seconds, "inner_seconds": result["seconds"], "bytes": arrow}


def reads(chute_dir: Path, hf_dir: Path, n: int, rounds: int) -> dict[str, Any]:
    import datasets

    from chute import open_cache

    cache = open_cache(chute_dir)
    ds = datasets.load_from_disk(str(hf_dir))
    ds_np = ds.with_format("numpy")
    rng = random.Random(1)
    idx = [rng.randrange(len(cache)) for _ in range(n)]
    hf_idx = [rng.randrange(len(ds)) for _ in range(n)]

    def chute_read() -> None:
        for i in idx:
            s = cache[i]
            s["input_ids"], s["labels"]

    def hf_read() -> None:
        for i in hf_idx:
            row = ds[i]
            row["input_ids"], row["labels"]

    def hf_np_read() -> None:
        for i in hf_idx:
            row = ds_np[i]
            row["input_ids"], row["labels"]

    best = {"chute": float("inf"), "datasets": float("inf"), "datasets_numpy": float("inf")}
    for _ in range(rounds):
        for name, fn in (
            ("chute", chute_read),
            ("datasets", hf_read),
            ("datasets_numpy", hf_np_read),
        ):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    rates = {name: round(n / t) for name, t in best.items()}
    return {
        "reads": n,
        "samples_per_s": rates,
        "chute_vs_datasets": round(rates["chute"] / rates["datasets"], 2),
        "chute_vs_datasets_numpy": round(rates["chute"] / rates["datasets_numpy"], 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs; fastest kept")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--sides", default=SIDES, help="which runs, in order")
    ap.add_argument("--before", default=BEFORE, help="the commit chute_before runs")
    ap.add_argument("--scaling", action="store_true", help="also chute with 1 worker")
    ap.add_argument("--quick", action="store_true", help="20k records, 1 round (smoke test)")
    ap.add_argument("--name", help="the result file's name (default: preprocess[_sides])")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, alpaca, sharegpt, out, num_proc = args.child
        print(json.dumps(CHILDREN[side](alpaca, sharegpt, out, int(num_proc))))
        return 0
    if args.quick:
        args.records, args.rounds, args.reads = 20_000, 1, 5_000
    if not TOKENIZER.is_file():
        print(f"needs {TOKENIZER} (set CHUTE_SHARED_DATA)", file=sys.stderr)
        return 2
    alpaca, sharegpt, n = make_data(args.records)
    work = Path(tempfile.mkdtemp(prefix="bench-preprocess-"))
    before = work / "before-tree"
    try:
        if "chute_before" in args.sides:
            git = ["git", "-C", str(REPO), "worktree"]
            subprocess.run([*git, "add", "-q", "--detach", str(before), args.before], check=True)
        compile_chute([REPO / "src", *([before / "src"] if before.exists() else [])])
        sides = args.sides.split(",") + (["chute_1worker"] if args.scaling else [])
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for r in range(args.rounds):
            for name in sides:
                out = work / f"{name}{r}"
                out.parent.mkdir(exist_ok=True)
                settle()
                if name == "chute":
                    runs[name].append(run_chute([alpaca, sharegpt], out, args.workers))
                elif name == "chute_before":
                    runs[name].append(
                        run_chute([alpaca, sharegpt], out, args.workers, None, before / "src")
                    )
                elif name == "chute_hf":
                    runs[name].append(run_chute([alpaca, sharegpt], out, args.workers, "hf"))
                elif name == "chute_1worker":
                    runs[name].append(run_chute([alpaca, sharegpt], out, 1))
                else:
                    runs[name].append(run_datasets(name, alpaca, sharegpt, out, args.workers))
                print(name, r, runs[name][-1], flush=True)
                report(args, n, runs)
                if r < args.rounds - 1:
                    shutil.rmtree(out)
                shutil.rmtree(work / "hf-cache", ignore_errors=True)
        last = args.rounds - 1
        read = None
        if runs.get("chute") and runs.get("xtuner"):
            read = reads(work / f"chute{last}", work / f"xtuner{last}", args.reads, 3)
    finally:
        if before.exists():
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False
            )
        shutil.rmtree(work, ignore_errors=True)
    report(args, n, runs, read)
    return 0


def report(
    args: argparse.Namespace,
    n: int,
    runs: dict[str, list[dict[str, Any]]],
    read: dict[str, Any] | None = None,
) -> None:
    """Save what has run so far (after every run: a run cut short keeps the finished ones)."""
    best = {name: min(v, key=lambda x: x["seconds"]) for name, v in runs.items() if v}
    ratios = {
        f"chute_vs_{name}": round(r["seconds"] / best["chute"]["seconds"], 2)
        for name, r in best.items()
        if name != "chute" and "chute" in best
    }
    if "chute_vs_chute_1worker" in ratios:  # throughput of 2 workers over 1 (ideal: 2)
        ratios["scaling"] = ratios.pop("chute_vs_chute_1worker")
    targets = {  # each judged only where its side ran
        ">= 2.5x chute before the fast path": ("chute_vs_chute_before", 2.5),
        ">= 7x xtuner": ("chute_vs_xtuner", 7),
        ">= 4x batched datasets.map": ("chute_vs_batched", 4),
        "scaling >= 1.7 (0.85 x 2)": ("scaling", 1.7),
    }
    verdicts = {k: ratios[key] >= bound for k, (key, bound) in targets.items() if key in ratios}
    if read is not None:
        verdicts["reads >= 5x"] = read["chute_vs_datasets"] >= 5
    save(
        args.name or ("preprocess" if args.sides == SIDES else "preprocess_sides"),
        {
            "data": f"{n:,} records: alpaca_en_demo + alpaca_zh_demo (alpaca) and "
            "dummy_conversation (ShareGPT) from ../shared/data, repeated, 4:1, as JSONL",
            "tokenizer": "Qwen3 tokenizer.json",
            "max_length": MAX_LENGTH,
            "processes": args.workers,
            "before": args.before if "chute_before" in args.sides else None,
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "runs": {
                name: {
                    **r,
                    "records_per_s": round(n / r["seconds"]),
                    "bytes_per_token": round(r["bytes"] / r["tokens"], 3),
                }
                for name, r in best.items()
            },
            "all_runs_seconds": {k: [round(r["seconds"], 2) for r in v] for k, v in runs.items()},
            "ratios": ratios,
            "random_reads": read,
            "targets": verdicts,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
