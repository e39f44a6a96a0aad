"""Tokenizers behind one small protocol, and ``load_tokenizer`` to pick a backend.

``load_tokenizer`` accepts:

* a chute ``Tokenizer`` (returned as is);
* a ``tokenizers.Tokenizer`` object, a ``tokenizer.json`` path, or a folder holding one
  (``HFTokenizer``; special tokens and chat template from the configs beside it);
* a ``transformers`` tokenizer object, or a folder without ``tokenizer.json`` that holds a
  vocabulary (``TransformersTokenizer``, extra ``transformers``; a SentencePiece
  ``tokenizer.model`` with its ``tokenizer_config.json``, extra ``sentencepiece``; a folder of
  configs alone is refused, its files listed);
* a tiktoken BPE file (``*.tiktoken``, Llama 3's ``tokenizer.model``) or a ``tiktoken.Encoding``
  (``TiktokenTokenizer``, extra ``tiktoken``).

``backend`` picks the engine of a ``tokenizer.json``: ``auto`` (default) runs byte-level BPE
tokenizers on tiktoken where they compile exactly and pass the checks (``chute.tokenize.engine``),
``tiktoken`` demands that, ``hf`` keeps ``tokenizers``. The ids are the same either way.

Example:
    >>> tok = load_tokenizer("tokenizers/qwen3/tokenizer.json")  # doctest: +SKIP
    >>> tok.special["eos"], tok.token_id("image")  # doctest: +SKIP
    ('<|im_end|>', 151655)
"""

from chute.tokenize.load import (
    BACKENDS,
    SPECIAL_NAMES,
    HFTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    TransformersTokenizer,
    load_tokenizer,
    read_tokenizer_config,
)

__all__ = [
    "BACKENDS",
    "SPECIAL_NAMES",
    "HFTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TransformersTokenizer",
    "load_tokenizer",
    "read_tokenizer_config",
]
