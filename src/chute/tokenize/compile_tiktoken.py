r"""A byte-level BPE ``tokenizer.json`` as tiktoken's tables, or the reason it cannot be one.

tiktoken and ``tokenizers`` run the same algorithm on byte-level BPE vocabularies (Qwen2/2.5/3,
Llama 3.x, DeepSeek-V3, GPT-2 and their kin), but each states it differently, and the
differences are where ids could change. ``compile_bpe`` translates a ``tokenizer.json`` only
where the translation keeps every id, and otherwise raises ``NotCompilable`` with one line that
says why:

* **Merge priority.** ``tokenizers`` applies the merge rule listed first; tiktoken merges the
  adjacent pair whose concatenation has the lowest rank, and a token's rank is its id. The two
  agree when the rules, in order, produce tokens of non-decreasing id (``merges not in id
  order`` otherwise).
* **Pairs without a rule.** tiktoken merges *any* adjacent pair whose concatenation is a token;
  ``tokenizers`` only listed pairs. A token ``t`` that its own merges do not rebuild
  (``encode(t) != [t]`` in ``tokenizers``' BPE, e.g. 588 tokens of Llama 3's ``tokenizer.json``
  with ``ignore_merges: false``) is never produced by ``tokenizers`` at all, so it is left out of
  the tiktoken table. When every remaining token rebuilds itself, an adjacent pair whose
  concatenation is a token can only arise where a rule joins it, and the two algorithms take the
  same steps (``chute.tokenize.verify`` checks the cases where several rules build one token).
  With ``ignore_merges: true`` a whole pre-token that is such a token would come out whole in
  ``tokenizers``: that case is refused.
* **Pre-tokenizer.** ``Split(Regex, Isolated)`` + ``ByteLevel(use_regex=False)`` (Qwen2/3,
  Llama 3) gives the split pattern; ``ByteLevel(use_regex=True)`` alone (GPT-2) gives GPT-2's.
  ``add_prefix_space``, other splitters and sequences of several splits are refused.
* **Normalizer.** None, or one Unicode normal form (Qwen's NFC): the fast path encodes a text
  only when it is already in that form (almost every text) and hands the others to
  ``tokenizers``, so offsets never move.
* **Added tokens.** Matched whole before the model, longest first, as ``tokenizers`` does;
  ``lstrip``/``rstrip``/``single_word`` are refused.
* **Offsets.** A ``ByteLevel`` post-processor with ``trim_offsets`` changes which characters a
  token covers (and so the labels): refused. Truncation or padding in the file: refused.

Example:
    >>> spec = {"model": {"type": "Unigram", "vocab": []}}
    >>> try:
    ...     compile_bpe(spec)
    ... except NotCompilable as exc:
    ...     print(exc)
    the model is Unigram, not byte-level BPE
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GPT2_PATTERN",
    "NORMAL_FORMS",
    "AddedToken",
    "BPESource",
    "BPETables",
    "NotCompilable",
    "byte_alphabet",
    "compile_bpe",
    "encode_ids",
    "token_bytes",
]

# ByteLevel(use_regex=True)'s own split pattern, as ``tokenizers`` writes it.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")


class NotCompilable(Exception):
    """The tokenizer cannot be run by tiktoken with identical ids; the message says why."""


@dataclass(frozen=True)
class AddedToken:
    """An added token as ``tokenizers`` matches it: whole, before the model."""

    content: str
    id: int
    normalized: bool


@dataclass
class BPETables:
    """What tiktoken needs to reproduce a byte-level BPE ``tokenizer.json``.

    Attributes:
        pattern: the pre-tokenizer's split regex.
        ranks: token bytes -> id (the id is tiktoken's rank).
        added: added tokens (special or not), matched whole before the model.
        normal_form: the normalizer's Unicode form (``NFC``...), or ``None``.
        left_out: tokens left out because their own merges never produce them.
        multi_rule: whether some token is built by several merge rules (tiktoken-converted
            vocabularies such as Llama 3's); ``verify`` then checks ties between rules.
    """

    pattern: str
    ranks: dict[bytes, int]
    added: list[AddedToken]
    normal_form: str | None
    left_out: int = 0
    multi_rule: bool = False
    source: BPESource | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class BPESource:
    """What the tables were compiled from, for ``verify.check_merges`` (not stored on disk).

    Attributes:
        model: a ``tokenizers.Tokenizer`` holding only the BPE model (no pre-tokenizer).
        vocab: token (byte alphabet) -> id.
        merges: the merge rules in order.
        left_out: tokens left out of the tables (their own merges never produce them).
    """

    model: Any
    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    left_out: list[str]


@functools.cache
def byte_alphabet() -> dict[str, int]:
    """The ByteLevel character of each byte (GPT-2's ``bytes_to_unicode``), as char -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


@functools.cache
def _byte_translation() -> dict[int, str]:
    """``str.translate`` table: alphabet character -> the byte it stands for (as a code point)."""
    table = {ord(c): chr(b) for c, b in byte_alphabet().items()}
    for i in range(256):
        table.setdefault(i, "\uffff")  # below 256 yet outside the alphabet: not byte-level text
    return table


def token_bytes(token: str) -> bytes | None:
    """The bytes a token written in the byte alphabet stands for, or ``None`` (it is not).

    One ``translate`` and one ``encode`` in C: a generator per token cost ~1 s per 150k tokens.

    Example:
        >>> token_bytes("Ġhi"), token_bytes("<|im_end|>".replace("|", " "))
        (b' hi', None)
    """
    try:
        return token.translate(_byte_translation()).encode("latin-1")
    except UnicodeEncodeError:
        return None


def encode_ids(rust: Any, texts: list[str]) -> list[list[int]]:
    """``tokenizers``' ids of each text (no added special tokens), without offsets where it can."""
    batch = getattr(rust, "encode_batch_fast", None) or rust.encode_batch
    return [enc.ids for enc in batch(texts, add_special_tokens=False)]


def compile_bpe(spec: dict[str, Any]) -> BPETables:
    """The tiktoken tables of a parsed ``tokenizer.json``.

    Raises:
        NotCompilable: the tokenizer is not byte-level BPE, or uses a feature tiktoken cannot
            reproduce exactly (the message names it).
    """
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise NotCompilable(f"the model is {model.get('type')}, not byte-level BPE")
    for key, what in (("truncation", "truncation"), ("padding", "padding")):
        if spec.get(key):
            raise NotCompilable(f"the file sets {what}, which tiktoken does not apply")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise NotCompilable(f"the BPE model sets {key}={model[key]!r}")
    if model.get("byte_fallback"):
        raise NotCompilable("the BPE model uses byte_fallback (a SentencePiece-style vocabulary)")
    normal_form = _normal_form(spec.get("normalizer"))
    pattern = _pattern(spec.get("pre_tokenizer"))
    _check_offsets(spec.get("post_processor"))
    added = _added(spec.get("added_tokens") or [])
    ranks, merges = _vocabulary(model)
    multi_rule = _check_merge_order(merges, model["vocab"])
    bpe = _bpe_only(model["vocab"], merges)
    left_out = _left_out(bpe, model["vocab"])
    if left_out and model.get("ignore_merges"):
        raise NotCompilable(
            f"{len(left_out)} tokens are not produced by their own merges (e.g. "
            f"{sorted(left_out)[0]!r}) and ignore_merges is on, so they come out only for a "
            f"whole pre-token, which tiktoken cannot tell"
        )
    for token in left_out:
        ranks.pop(token_bytes(token), None)  # type: ignore[arg-type]  # byte-level: not None
    source = BPESource(bpe, model["vocab"], merges, left_out)
    return BPETables(pattern, ranks, added, normal_form, len(left_out), multi_rule, source)


def _normal_form(normalizer: dict[str, Any] | None) -> str | None:
    if normalizer is None:
        return None
    kind = normalizer.get("type")
    if kind == "Sequence":
        inner = normalizer.get("normalizers") or []
        if len(inner) == 0:
            return None
        if len(inner) == 1:
            return _normal_form(inner[0])
        kinds = ", ".join(str(n.get("type")) for n in inner)
        raise NotCompilable(f"the normalizer is a sequence ({kinds})")
    if kind in NORMAL_FORMS:
        return str(kind)
    raise NotCompilable(f"the normalizer {kind} is not a Unicode normal form")


def _pattern(pre: dict[str, Any] | None) -> str:
    if pre is None:
        raise NotCompilable("there is no pre-tokenizer (not byte-level)")
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    steps = list(steps or [])
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel":
        _byte_level(steps[0], regex=True)
        return GPT2_PATTERN
    if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
        split, byte_level = steps
        _byte_level(byte_level, regex=False)
        regex = (split.get("pattern") or {}).get("Regex")
        if regex is None:
            raise NotCompilable("the Split pre-tokenizer splits on a string, not a regex")
        if split.get("behavior") != "Isolated" or split.get("invert"):
            raise NotCompilable(
                f"the Split pre-tokenizer's behavior is {split.get('behavior')}"
                f"{' inverted' if split.get('invert') else ''}, not Isolated"
            )
        return str(regex)
    kinds = " + ".join(str(s.get("type")) for s in steps)
    raise NotCompilable(f"the pre-tokenizer {kinds} has no tiktoken equivalent")


def _byte_level(step: dict[str, Any], *, regex: bool) -> None:
    if step.get("add_prefix_space"):
        raise NotCompilable("the ByteLevel pre-tokenizer adds a prefix space")
    if bool(step.get("use_regex", True)) != regex:
        raise NotCompilable(
            "ByteLevel splits with its own regex after another split"
            if not regex
            else "ByteLevel alone without its regex (no split at all)"
        )


def _check_offsets(post: dict[str, Any] | None) -> None:
    steps = (post or {}).get("processors") if (post or {}).get("type") == "Sequence" else [post]
    for step in steps or []:
        if step and step.get("type") == "ByteLevel" and step.get("trim_offsets"):
            raise NotCompilable("the ByteLevel post-processor trims offsets (labels would move)")


def _added(tokens: list[dict[str, Any]]) -> list[AddedToken]:
    out = []
    for t in tokens:
        for flag in ("lstrip", "rstrip", "single_word"):
            if t.get(flag):
                raise NotCompilable(f"the added token {t['content']!r} has {flag} set")
        out.append(AddedToken(t["content"], int(t["id"]), bool(t.get("normalized"))))
    return out


def _vocabulary(model: dict[str, Any]) -> tuple[dict[bytes, int], list[tuple[str, str]]]:
    """Token bytes -> id for tokens written in the byte alphabet, and the merge rules."""
    vocab: dict[str, int] = model.get("vocab") or {}
    ranks: dict[bytes, int] = {}
    for token, i in vocab.items():
        as_bytes = token_bytes(token)
        if as_bytes is not None:  # else not byte-level text: BPE over bytes never produces it
            ranks[as_bytes] = i
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise NotCompilable(
            f"the vocabulary lacks {len(missing)} of the 256 byte tokens (not byte-level)"
        )
    merges = [
        tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])
    ]
    return ranks, merges  # type: ignore[return-value]


def _check_merge_order(merges: list[tuple[str, str]], vocab: dict[str, int]) -> bool:
    """Raise unless merge rules produce tokens in non-decreasing id.

    Returns whether some token has several rules (they are then adjacent in the list).
    """
    previous = -1
    multi = False
    for k, (a, b) in enumerate(merges):
        made = vocab.get(a + b)
        if made is None or a not in vocab or b not in vocab:
            raise NotCompilable(f"merge rule {k} ({a!r} {b!r}) names a token not in the vocabulary")
        if made < previous:
            raise NotCompilable(
                f"merges not in id order (rule {k}, {a!r} {b!r}, makes id {made} after a rule "
                f"that made id {previous}); tiktoken ranks merges by the id they produce"
            )
        multi = multi or made == previous
        previous = made
    return multi


def _bpe_only(vocab: dict[str, int], merges: list[tuple[str, str]]) -> Any:
    """``tokenizers``' own BPE, without normalizer or pre-tokenizer: a string is one word."""
    from tokenizers import Tokenizer, models

    return Tokenizer(models.BPE(vocab, merges, ignore_merges=False))


def _left_out(bpe: Any, vocab: dict[str, int]) -> list[str]:
    """Tokens that ``tokenizers``' own BPE does not rebuild from their bytes (never produced)."""
    keys = [k for k in vocab if len(k) > 1 and token_bytes(k) is not None]
    encoded = encode_ids(bpe, keys)
    return [k for k, ids in zip(keys, encoded, strict=True) if ids != [vocab[k]]]
