"""Generated data for the demo and the README: instruction records with planted faults, a tokenizer."""

from __future__ import annotations

import random
from pathlib import Path

import orjson

__all__ = ["write_demo_dataset", "write_demo_tokenizer"]

_TOPICS = ["rivers", "prime numbers", "bread", "volcanoes", "chess", "tides", "compilers", "bees"]
_VERBS = ["Explain", "Summarise", "Describe", "List three facts about", "Write a haiku about"]


def write_demo_dataset(path: Path, records: int, seed: int = 0) -> tuple[Path, list[int]]:
    """Write ``records`` alpaca-style lines (plus a few blank lines).

    Returns the path and the 1-based line numbers of the planted broken records (truncated
    JSON, a non-object, invalid UTF-8).
    """
    rng = random.Random(seed)
    planted: list[int] = []
    broken = {
        records // 7: b'{"instruction": "cut off',
        records // 3: b"[1, 2, 3]",
        records // 2: b'{"bad": "\xff\xfe"}',
    }
    line = 0
    with open(path, "wb") as f:
        for i in range(records):
            line += 1
            if i in broken:
                f.write(broken[i] + b"\n")
                planted.append(line)
                continue
            topic, verb = rng.choice(_TOPICS), rng.choice(_VERBS)
            words = " ".join(rng.choice(_TOPICS) for _ in range(rng.randint(5, 120)))
            rec = {
                "id": i,
                "instruction": f"{verb} {topic}.",
                "input": "",
                "output": f"{topic}: {words}",
            }
            f.write(orjson.dumps(rec) + b"\n")
            if i % 5000 == 4999:
                f.write(b"\n")
                line += 1
    return path, planted


def write_demo_tokenizer(
    folder: Path, corpus: list[str] | None = None, vocab_size: int = 1000
) -> Path:
    """Train a small byte-level BPE tokenizer (ChatML tokens and ``<image>``) into ``folder``.

    Real tokenizers are large downloads; this one takes a fraction of a second to train, is
    deterministic, and encodes any text (byte level), so examples and demos run offline.

    Returns:
        ``folder``, holding ``tokenizer.json`` and ``tokenizer_config.json``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    if corpus is None:
        corpus = [f"{v} {t}. {t}: {' '.join(_TOPICS)}" for v in _VERBS for t in _TOPICS] * 4
    tok.train_from_iterator([*corpus, "user assistant system"], trainer)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_bytes(orjson.dumps(config))
    return folder
