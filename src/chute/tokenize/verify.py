"""Checks that a compiled tokenizer gives the ids and labels ``tokenizers`` gives.

Three checks, from the most thorough (once per tokenizer file and library versions, cached on
disk with the compiled tables) to the cheapest (every process):

1. ``check_merges``: the BPE step alone, on the strings where the rule-based and rank-based
   algorithms could part: tokens left out of the table, and for vocabularies where several rules
   build one token (Llama 3's), each such token doubled (two equal-priority merges side by
   side), every overlap of two of its rules, and random pairs of tokens.
2. ``check_codepoints``: code points in letter, digit, space, newline and apostrophe contexts
   (every one below U+3400 and in the blocks of emoji, symbols and compatibility forms; a
   sample of the large CJK and Hangul blocks and of planes 1-3), so the two regex engines
   (Oniguruma in ``tokenizers``, fancy-regex in tiktoken) and their Unicode tables agree.
3. ``check_probes``: a built-in probe set (multilingual text, CJK, code, whitespace and newline
   runs, digits, emoji, combining characters, look-alikes of special tokens, the tokenizer's own
   added tokens) on ids *and* on which token holds every character (the labels).

The user's first records are checked as they are encoded (``HFTokenizer`` compares its first
texts with ``tokenizers``). Each check returns the first input that differs, or ``None``.

Example:
    >>> any("<|im_end|>" in p for p in probe_texts([]))
    True
"""

from __future__ import annotations

import itertools
import random
import unicodedata
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from chute.tokenize.base import hf_spans
from chute.tokenize.compile_tiktoken import BPETables, encode_ids, token_bytes
from chute.tokenize.fast import FastBPE

__all__ = ["PROBES", "check_codepoints", "check_merges", "check_probes", "probe_texts"]

_WORDS = [
    "Hello world! How's it going? I'M FINE, THANKS. They'll, we've, you'd, she's.",
    "The quick brown fox jumps over the lazy dog; 1234567890, 3.14159, 1,000,000 and 0x1F.",
    "你好，世界。这是一个测试：中文、標點符號与全角字符ＡＢＣ１２３。",
    "日本語のテキスト、カタカナとひらがな。한국어 텍스트도 있습니다.",
    "Привет, мир! Ёжик в тумане. Ελληνικά: αβγδε. Türkçe: İstanbul ıı İİ. Straße ẞ.",
    "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। สวัสดีชาวโลก ภาษาไทย",
    "Tiếng Việt: Tôi làm việc ở đây, hợp đồng nhiều điều. Čeština: jeho, Přílež.",
    "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨ 🧑🏿‍🚀 and text after.",
    "Combining: ệ ở ñ; Z̷̢a̸l̵g̴o̶ t̷e̴x̸t̵; क्षि; עִבְרִית; ﬁ ﬂ; Ⅻ ½ ² ①.",
    "Whitespace:\u00a0nbsp\u2009thin\u3000ideo\u200bzw\u0085nel\u180emvs\u2028ls\u2029ps\tx\x0bv\x0cf",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}\n<div class="x">&amp;</div>',
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; }\r\n// done\r\n",
    "Numbers 0 00 000 0000 00000 123456789012345678901234567890 ١٢٣ ๑๒๓ ① Ⅷ",
    "Apostrophes: it’s don’t I'VE 'S 'ſ ‘quoted’ “double” «guillemets» ‹›",
]
_RUNS = (
    [" " * n for n in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 64, 100, 257)]
    + ["\n" * n for n in (1, 2, 3, 4, 7, 16, 50)]
    + [
        "\t" * 5,
        " \n \n  \n",
        "\r\n\r\n\r\n",
        "a  b   c    d\n\n\ne \t f",
        "word   \n   word",
        "trailing spaces   ",
        "   leading spaces",
        "x" * 300,
        "=" * 120,
        "-" * 99 + ">",
        "ab" * 200,
        "😀" * 40,
        "你" * 120,
        "1" * 100,
        "\u0301" * 12,
    ]
)
_LOOKALIKES = [
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_end",
    "|im_end|>",
    "<<|im_start|>>",
    "<|im_end|><|im_end|>x",
    "<|endoftext|> <|endoftext|>\n<|endoftext|>",
    "<think>\n\n</think>\n\n<tool_call>{}</tool_call>",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nx<|eot_id|>",
    "<|reserved_special_token_0|><|reserved_special_token_250|><|reserved_special_token_999|>",
    "<|image_pad|><|vision_start|><|image|><image>",
    "<s></s><pad><unk>[INST][/INST]",
    "<|im_start |> < |im_end|> <|IM_END|>",
]
PROBES: tuple[str, ...] = (*_WORDS, *_RUNS, *_LOOKALIKES)


def probe_texts(added: Sequence[str]) -> list[str]:
    """The built-in probes, mixes of them, and the tokenizer's added tokens in context."""
    texts = list(PROBES)
    texts += ["".join(pair) for pair in itertools.pairwise(PROBES)]
    texts.append("\n".join(PROBES))
    for token in added:
        texts += [token, f"x{token}y", f" {token} ", f"{token}{token}\n", f"{token[:-1]}"]
    return texts


def check_probes(rust: Any, fast: FastBPE, added: Sequence[str]) -> str | None:
    """The first probe whose ids, or whose token for any character, differ; or ``None``."""
    texts = probe_texts(added)
    encodings = rust.encode_batch(texts, add_special_tokens=False)
    for text, enc in zip(texts, encodings, strict=True):
        every_char = [(c, c + 1) for c in range(len(text))]
        found = fast.encode_spans(text, every_char)  # many spans: looked up at once
        if found is None:
            continue  # tokenizers encodes this one at run time too
        if found != (enc.ids, hf_spans(enc, every_char)):
            return text
        # few spans (a template's trained ones) take the other lookup: spread over the text
        step = max(1, len(text) // 12)
        few = [(c, min(len(text), c + step + 1)) for c in range(0, len(text), step)][:12]
        if fast.encode_spans(text, few) != (enc.ids, hf_spans(enc, few)):
            return text
    return None


def check_codepoints(rust: Any, fast: FastBPE, chunk: int = 512) -> str | None:
    """The first code point whose contexts encode differently, as ``U+XXXX``; or ``None``."""
    form = fast.tables.normal_form
    batch = list(_codepoint_texts(form, chunk))
    texts = ["".join(ctx for _, ctx in group) for group in batch]
    encoded = encode_ids(rust, texts)
    for group, text, ids in zip(batch, texts, encoded, strict=True):
        if fast.encode(text) == ids:
            continue
        for cp, ctx in group:
            if fast.encode(ctx) != rust.encode(ctx, add_special_tokens=False).ids:
                return f"U+{cp:04X} ({ctx!r})"
        return f"the code points U+{group[0][0]:04X}..U+{group[-1][0]:04X} together"
    return None


# (first, end, step): every code point where scripts, symbols and emoji change between Unicode
# versions; every 8th in the big homogeneous blocks (CJK ideographs, Hangul syllables), whose
# additions come in ranges of hundreds; sparser in plane 1's historic scripts and planes 2-3.
_SWEEP = (
    (0x0000, 0x3400, 1),
    (0x3400, 0xA000, 8),
    (0xA000, 0xAC00, 1),
    (0xAC00, 0xD800, 8),
    (0xF900, 0x10000, 1),
    (0x10000, 0x1F000, 4),
    (0x1F000, 0x1FB00, 1),
    (0x1FB00, 0x20000, 4),
    (0x20000, 0x40000, 64),
    (0xE0000, 0xE0200, 1),
)


def _codepoint_texts(form: str | None, chunk: int) -> Iterator[list[tuple[int, str]]]:
    points = itertools.chain.from_iterable(range(*r) for r in _SWEEP)
    group: list[tuple[int, str]] = []
    for cp in points:
        c = chr(cp)
        ctx = f"'{c}a{c}1{c} {c}{c}\n"
        if form is not None and not unicodedata.is_normalized(form, ctx):  # type: ignore[arg-type]
            continue  # such texts go to tokenizers at run time
        group.append((cp, ctx))
        if len(group) == chunk:
            yield group
            group = []
    if group:
        yield group


def check_merges(tables: BPETables, fast: FastBPE, samples: int = 10_000) -> str | None:
    """The first byte-level string the BPE step alone encodes differently; or ``None``.

    Args:
        tables: the compiled tables, with their ``source`` (fresh from ``compile_bpe``).
        fast: the compiled encoder.
        samples: random token pairs tried (seeded: the same every time).
    """
    source = tables.source
    if source is None:
        raise ValueError("check_merges needs tables fresh from compile_bpe (with their source)")
    strings = list(source.left_out)
    if tables.multi_rule:
        rules: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for a, b in source.merges:
            rules[a + b].append((a, b))
        multi = sorted(t for t, r in rules.items() if len(r) > 1)
        strings += [t + t for t in multi]
        for rs in rules.values():
            if len(rs) > 1:
                strings += [r[0] + r[1] + s[1] for r in rs for s in rs if r != s and r[1] == s[0]]
        left_out = set(source.left_out)
        tokens = sorted(k for k in source.vocab if k not in left_out)
        rng = random.Random(0)
        strings += [rng.choice(tokens) + rng.choice(tokens) for _ in range(samples)]
        strings += [rng.choice(multi) + rng.choice(multi) for _ in range(samples)]
    if not strings:
        return None
    piece = fast.encoding._encode_single_piece
    encoded = encode_ids(source.model, strings)
    for s, ids in zip(strings, encoded, strict=True):
        if piece(token_bytes(s)) != ids:
            return s
    return None
