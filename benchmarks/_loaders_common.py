"""What every loader in bench_loaders.py shares: the data, the tokenization code, the collate.

The data is real instruction data from ../shared/data, normalised once into one JSONL file of
OpenAI-style ``messages`` records, each with a ``sample_id`` (its line number), repeated to the
size asked for. Every tool reads that same file.

``tokenize_messages`` is the code people write for a Qwen3 chat model (the template written out
by hand, as LLaMA-Factory and XTuner do, prompt tokens masked with -100), using the Rust
``tokenizers`` library directly (faster than ``transformers``' ``AutoTokenizer`` wrapper, so the
other tools are not slowed by Python overhead chute does not have). On the base records it
gives exactly the ``input_ids`` and ``labels`` of ``chute.Recipe(template="qwen3")`` (checked by
``check_same_tokens``), so every tool does the same work and produces the same tokens.

``pad_collate`` is the padding collate of a typical training script: pad to the longest row, a
``-100`` label on padding, an ``attention_mask``, and ``sample_ids`` for the audit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _common import DATA_DIR, SHARED_DATA

WORK = DATA_DIR / "loaders"
TOKENIZER = SHARED_DATA / "tokenizers" / "qwen3" / "tokenizer.json"
BASE_FILES = (
    "llama-factory/alpaca_en_demo.json",  # 999 alpaca rows (English, long answers)
    "llama-factory/alpaca_zh_demo.json",  # 1,000 alpaca rows (Chinese)
    "fastchat/dummy_conversation.json",  # 500 ShareGPT rows, 2-6 turns
)
IGNORE = -100


def base_records() -> list[list[dict[str, str]]]:
    """The real records as message lists (alpaca: instruction + "\\n" + input, LLaMA-Factory's rule)."""
    missing = [name for name in (*BASE_FILES, "tokenizers/qwen3/tokenizer.json")]
    missing = [name for name in missing if not (SHARED_DATA / name).exists()]
    if missing:
        raise SystemExit(
            f"bench_loaders needs the real data in {SHARED_DATA} (set CHUTE_SHARED_DATA); "
            f"missing: {', '.join(missing)}"
        )
    out: list[list[dict[str, str]]] = []
    for name in BASE_FILES:
        for row in json.loads((SHARED_DATA / name).read_text()):
            if "conversations" in row:
                roles = {"human": "user", "gpt": "assistant"}
                out.append(
                    [
                        {"role": roles[t["from"]], "content": t["value"]}
                        for t in row["conversations"]
                    ]
                )
            else:
                prompt = row["instruction"] + (f"\n{row['input']}" if row.get("input") else "")
                out.append(
                    [
                        {"role": "user", "content": prompt},
                        {"role": "assistant", "content": row["output"]},
                    ]
                )
    return out


def write_data(path: Path, records: int) -> Path:
    """``records`` lines cycling through the base records, ``sample_id`` = line number."""
    base = base_records()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for i in range(records):
            f.write(
                json.dumps({"sample_id": i, "messages": base[i % len(base)]}, ensure_ascii=False)
            )
            f.write("\n")
    tmp.replace(path)
    return path


# -- the tokenization code the other tools run (people's code, written out) -------------------


def load_tokenizer() -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOKENIZER))


def tokenize_messages(messages: list[dict[str, str]], tok: Any) -> tuple[list[int], list[int]]:
    """Qwen3's chat template by hand; loss on each assistant answer and its <|im_end|>."""

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    input_ids: list[int] = []
    labels: list[int] = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            head = enc("<|im_start|>assistant\n")
            think = "<think>\n\n</think>\n\n" if i == last else ""  # Qwen3: empty think, last turn
            body = enc(think + m["content"] + "<|im_end|>")
            tail = enc("\n")
            input_ids += head + body + tail
            labels += [IGNORE] * len(head) + body + [IGNORE] * len(tail)
        else:
            ids = enc(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
            input_ids += ids
            labels += [IGNORE] * len(ids)
    return input_ids, labels


def tokenize_record(record: dict[str, Any], tok: Any) -> dict[str, Any]:
    ids, labels = tokenize_messages(record["messages"], tok)
    return {"input_ids": ids, "labels": labels, "sample_id": record["sample_id"]}


def pad_collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Pad to the longest row: input_ids (pad <|endoftext|>), labels (-100), mask, sample_ids."""
    import torch

    width = max(len(x["input_ids"]) for x in items)
    n = len(items)
    input_ids = torch.full((n, width), PAD_ID, dtype=torch.long)
    labels = torch.full((n, width), IGNORE, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for row, x in enumerate(items):
        k = len(x["input_ids"])
        input_ids[row, :k] = torch.from_numpy(np.asarray(x["input_ids"], dtype=np.int64))
        labels[row, :k] = torch.from_numpy(np.asarray(x["labels"], dtype=np.int64))
        mask[row, :k] = 1
    sample_ids = torch.tensor([int(x["sample_id"]) for x in items], dtype=torch.long)
    return {
        "input_ids": input_ids,
        "labels": labels,
        "attention_mask": mask,
        "sample_ids": sample_ids,
    }


PAD_ID = 151643  # Qwen3's <|endoftext|>, its pad token (the same chute's Collate uses)


def check_same_tokens() -> dict[str, Any]:
    """Compare ``tokenize_messages`` with chute's recipe on every base record."""
    from chute import Recipe

    recipe = Recipe(tokenizer=str(TOKENIZER), template="qwen3", format="messages")
    tok = load_tokenizer()
    assert tok.token_to_id("<|endoftext|>") == PAD_ID
    same = 0
    base = base_records()
    for i, messages in enumerate(base):
        sample = recipe({"sample_id": i, "messages": messages})
        ids, labels = tokenize_messages(messages, tok)
        same += sample["input_ids"].tolist() == ids and sample["labels"].tolist() == labels
    return {"records": len(base), "equal_ids_and_labels": same}


@dataclass
class Ctx:
    """What a tool needs: the data file, its work folder, and the loader settings."""

    data: Path
    work: Path
    batch_size: int
    workers: int
    seed: int = 0
