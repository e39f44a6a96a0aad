"""Tokenizer backends: encoding with offsets, special tokens, loading rules, fingerprints."""

from __future__ import annotations

import itertools
import json
import pickle
import sys
from pathlib import Path

import pytest

from chute.errors import ConfigError
from chute.tokenize import HFTokenizer, TiktokenTokenizer, TransformersTokenizer, load_tokenizer
from recipe_helpers import _rust, auto_tokenizer, real_tokenizer, tiny_tokenizer

TEXT = "Hello world! 你好，世界。<|im_end|>\n\n  x"


def write_tiny(folder: Path, **configs: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(_rust().to_str())
    for name, content in configs.items():
        (folder / f"{name}.json").write_text(json.dumps(content))
    return folder


def test_encode_decode_offsets_round_trip() -> None:
    tok = tiny_tokenizer()
    ids, offsets = tok.encode_with_offsets(TEXT)
    assert ids == tok.encode(TEXT)
    assert tok.decode(ids) == TEXT
    assert ids[ids.index(tok.token_to_id("<|im_end|>"))] == tok.token_to_id("<|im_end|>")
    # Offsets are character ranges, increasing, covering the text.
    assert offsets[0][0] == 0 and offsets[-1][1] == len(TEXT)
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in itertools.pairwise(offsets))
    k = ids.index(tok.token_to_id("<|im_end|>"))
    assert TEXT[offsets[k][0] : offsets[k][1]] == "<|im_end|>"


def test_special_tokens_detection_and_overrides() -> None:
    tok = tiny_tokenizer()
    assert tok.special == {
        "bos": "<s>",
        "eos": "</s>",
        "pad": "<pad>",
        "unk": None,
        "image": "<|image_pad|>",
    }
    assert tok.token_id("eos") == tok.token_to_id("</s>")
    tok2 = tiny_tokenizer(eos="<|im_end|>", image=None)
    assert tok2.eos_token == "<|im_end|>" and tok2.image_token is None
    with pytest.raises(ConfigError, match=r"special_tokens\['eos'\]: '<nope>' is not a token"):
        tiny_tokenizer(eos="<nope>")
    with pytest.raises(ConfigError, match="special_tokens: unknown name 'cls'"):
        tiny_tokenizer(cls="<s>")


def test_configs_beside_tokenizer_json(tmp_path: Path) -> None:
    folder = write_tiny(
        tmp_path / "tok",
        tokenizer_config={
            "bos_token": {"content": "<s>", "special": True},
            "eos_token": "<|im_end|>",
            "pad_token": None,
            "chat_template": [
                {"name": "default", "template": "{{ messages }}"},
                {"name": "rag", "template": "x"},
            ],
        },
        special_tokens_map={"eos_token": "</s>", "pad_token": "<pad>"},
    )
    tok = load_tokenizer(folder)
    assert isinstance(tok, HFTokenizer)
    # special_tokens_map.json wins over tokenizer_config.json, as in transformers.
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<s>", "</s>", "<pad>")
    assert tok.chat_template == "{{ messages }}"
    assert set(tok.fingerprint()["files"]) == {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    # A chat_template.jinja file (newer transformers layout) wins over the config's template.
    (folder / "chat_template.jinja").write_text("{{ 'jinja file' }}")
    assert load_tokenizer(folder / "tokenizer.json").chat_template == "{{ 'jinja file' }}"
    assert load_tokenizer(folder / "tokenizer_config.json").path == str(folder / "tokenizer.json")


def test_several_templates_without_default(tmp_path: Path) -> None:
    folder = write_tiny(
        tmp_path / "t", tokenizer_config={"chat_template": [{"name": "a", "template": "x"}]}
    )
    with pytest.raises(
        ConfigError, match="several chat templates \\(a\\) and none named 'default'"
    ):
        load_tokenizer(folder)


def test_fingerprint_is_stable_and_content_based(tmp_path: Path) -> None:
    a = load_tokenizer(write_tiny(tmp_path / "a"))
    b = load_tokenizer(write_tiny(tmp_path / "b"))
    assert a.fingerprint() == b.fingerprint()
    assert (
        a.fingerprint()
        != load_tokenizer(
            write_tiny(tmp_path / "c"), special_tokens={"eos": "<|im_end|>"}
        ).fingerprint()
    )
    json.dumps(a.fingerprint())  # JSON-able
    # An in-memory tokenizer is identified by its content too.
    assert tiny_tokenizer().fingerprint()["files"] == {
        "tokenizer.json (in memory)": tiny_tokenizer().fingerprint()["files"][
            "tokenizer.json (in memory)"
        ]
    }


def test_pickles_by_path_or_content(tmp_path: Path) -> None:
    from_path = load_tokenizer(write_tiny(tmp_path / "p"))
    state = from_path.__getstate__()
    assert state["_tok_json"] is None  # travels as its path
    for tok in (from_path, tiny_tokenizer()):
        back = pickle.loads(pickle.dumps(tok))
        assert back.encode(TEXT) == tok.encode(TEXT) and back.special == tok.special


def test_load_tokenizer_dispatch_and_errors(tmp_path: Path) -> None:
    assert isinstance(load_tokenizer(_rust()), HFTokenizer)
    tok = tiny_tokenizer()
    assert load_tokenizer(tok) is tok
    with pytest.raises(
        ConfigError, match="cannot override special tokens of a ready chute Tokenizer"
    ):
        load_tokenizer(tok, special_tokens={"eos": "</s>"})
    with pytest.raises(ConfigError, match="no such file or folder"):
        load_tokenizer(tmp_path / "missing.json")
    spm = tmp_path / "tokenizer.model"
    spm.write_bytes(b"\x0a\x0b\x00\x01binary protobuf")
    with pytest.raises(
        ConfigError, match=r"SentencePiece model loads through transformers.*chute\[sentencepiece\]"
    ):
        load_tokenizer(spm)
    bad = tmp_path / "broken.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="is not a Hugging Face tokenizers file"):
        load_tokenizer(bad)
    with pytest.raises(ConfigError, match="cannot use a builtins.int"):
        load_tokenizer(3)


def test_tiktoken_missing_extra_says_which(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    bpe = tmp_path / "x.tiktoken"
    bpe.write_text("YQ== 0\n")
    with pytest.raises(ImportError, match=r"pip install 'chute\[tiktoken\]'"):
        load_tokenizer(bpe)


def test_tiktoken_unknown_rank_count_needs_a_pattern(tmp_path: Path) -> None:
    import base64

    bpe = tmp_path / "tiny.tiktoken"
    bpe.write_text("".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256)))
    with pytest.raises(ConfigError, match="256 ranks, which matches no preset"):
        load_tokenizer(bpe)
    tok = load_tokenizer(bpe, tiktoken_pattern="gpt2", tiktoken_special_tokens={"<|end|>": 256})
    assert tok.decode(tok.encode("hi<|end|>")) == "hi<|end|>"
    assert tok.encode("hi<|end|>")[-1] == 256
    back = pickle.loads(pickle.dumps(tok))
    assert back.encode("hé") == tok.encode("hé")


# -- real tokenizers ----------------------------------------------------------------------------


@pytest.mark.shared_data
def test_qwen3_documented_ids(shared_data: Path) -> None:
    tok = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    assert tok.encode("Hello world! 你好，世界。") == [
        9707,
        1879,
        0,
        220,
        108386,
        3837,
        99489,
        1773,
    ]
    assert tok.special == {
        "bos": None,
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "unk": None,
        "image": "<|image_pad|>",
    }
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    llama = load_tokenizer(shared_data / "tokenizers/llama3.2")
    # chute never adds special tokens itself: the template writes <|begin_of_text|>.
    assert llama.encode("Hello world! 你好，世界。") == [
        9906,
        1917,
        0,
        118195,
        53901,
        3922,
        102616,
        1811,
    ]
    assert (llama.bos_token, llama.eos_token, llama.image_token) == (
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|image|>",
    )
    assert llama.chat_template is None


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("bpe", "hf", "preset"),
    [
        ("qwen/qwen.tiktoken", "qwen3/tokenizer.json", "qwen"),
        ("llama3/tokenizer.model", "llama3.2/tokenizer.json", "llama3"),
    ],
)
def test_tiktoken_presets_match_tokenizer_json(
    shared_data: Path, bpe: str, hf: str, preset: str
) -> None:
    tiktok = load_tokenizer(shared_data / "tokenizers" / bpe)
    assert isinstance(tiktok, TiktokenTokenizer) and tiktok.preset == preset
    ref = real_tokenizer(str(shared_data / "tokenizers" / hf))
    texts = [
        TEXT,
        "  leading spaces\tand tabs\r\n",
        "数字 12345 and 'quotes' they're",
        "emoji 🙂🙃 end",
    ]
    data = json.loads((shared_data / "llama-factory/alpaca_zh_demo.json").read_text())[:50]
    texts += [r["instruction"] + "\n" + r["output"] for r in data]
    specials = (
        ["<|endoftext|>", "<|im_start|>"]
        if preset == "qwen"
        else ["<|begin_of_text|>", "<|eot_id|>"]
    )
    texts += [specials[0] + "Hi" + specials[1] + " there"]
    for text in texts:
        ids, offsets = tiktok.encode_with_offsets(text)
        ref_ids, ref_offsets = ref.encode_with_offsets(text)
        assert ids == ref_ids, text
        assert offsets == [tuple(o) for o in ref_offsets], text
        assert tiktok.decode(ids) == text
    # The pattern in tokenizer.json is the preset's.
    pre = json.loads((shared_data / "tokenizers" / hf).read_text())["pre_tokenizer"][
        "pretokenizers"
    ][0]
    assert pre["pattern"]["Regex"] == tiktok.pattern
    for token in specials:
        assert tiktok.token_to_id(token) == ref.token_to_id(token)


@pytest.mark.shared_data
def test_the_qwen_preset_normalizes_to_nfc_as_qwens_tokenizers_do(shared_data: Path) -> None:
    tiktok = load_tokenizer(shared_data / "tokenizers/qwen/qwen.tiktoken")
    ref = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    decomposed = ["Cafe\u0301", "Vie\u0323\u0302t Nam", "\u1100\u1161\u11a8", "n\u0303o\u0308 a"]
    for text in decomposed:
        ids, offsets = tiktok.encode_with_offsets(text)
        assert ids == ref.encode(text) == tiktok.encode(text), text
        assert offsets[0][0] == 0 and offsets[-1][1] == len(text)  # the text as given
    assert tiktok.fingerprint()["normalizer"] == "NFC"
    # a vowel sign that composes with a starter (Tamil's ொ: U+0BC6 U+0BBE, combining class 0):
    # its offsets stay its own, so a record's labels stay on the answer (every character of the
    # text was mapped to the whole text, and every token of the record trained)
    from chute.recipe import Recipe

    recipe = Recipe(tokenizer=str(shared_data / "tokenizers/qwen/qwen.tiktoken"), template="chatml")
    for user, answer in (("hello \u0b95\u0bc6\u0bbe", "answer"), ("hi", "ans \u0b95\u0bc6\u0bbe")):
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        sample = recipe.process({"messages": messages})
        trained = [
            int(t)
            for t, label in zip(sample["input_ids"], sample["labels"], strict=True)
            if label >= 0
        ]
        assert tiktok.decode(trained) == tiktok.decode(tiktok.encode(answer + "<|im_end|>"))


@pytest.mark.shared_data
def test_a_folder_holding_llama3s_tiktoken_model_loads_it_as_tiktoken(shared_data: Path) -> None:
    # through transformers it loaded without special tokens: <|eot_id|> became six text tokens
    folder = load_tokenizer(shared_data / "tokenizers/llama3")
    file = load_tokenizer(shared_data / "tokenizers/llama3/tokenizer.model")
    assert isinstance(folder, TiktokenTokenizer) and folder.preset == "llama3"
    assert folder.encode("<|eot_id|>") == [128009] == file.encode("<|eot_id|>")
    assert folder.fingerprint() == file.fingerprint()


@pytest.mark.shared_data
def test_gpt2_preset(shared_data: Path) -> None:
    tok = load_tokenizer(shared_data / "tokenizers/gpt2-tiktoken/gpt2.tiktoken")
    assert tok.preset == "gpt2" and tok.eos_token == "<|endoftext|>"
    assert tok.encode("Hello world<|endoftext|>") == [15496, 995, 50256]


@pytest.mark.shared_data
def test_transformers_backend_matches_tokenizer_json(shared_data: Path) -> None:
    pytest.importorskip("transformers")
    folder = shared_data / "tokenizers/qwen3"
    tok = load_tokenizer(auto_tokenizer(str(folder)))
    assert isinstance(tok, TransformersTokenizer) and tok.supports_offsets
    ref = real_tokenizer(str(folder / "tokenizer.json"))
    assert tok.encode_with_offsets(TEXT) == (
        ref.encode(TEXT),
        [tuple(o) for o in ref.encode_with_offsets(TEXT)[1]],
    )
    assert tok.decode(tok.encode(TEXT)) == TEXT
    assert tok.special == ref.special
    assert tok.chat_template == ref.chat_template
    assert len(tok.fingerprint()["content_sha256"]) == 64
    assert pickle.loads(pickle.dumps(tok)).encode(TEXT) == ref.encode(TEXT)


def test_transformers_folder_loading(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    # A folder without tokenizer.json goes through AutoTokenizer (local files only).
    folder = write_tiny(
        tmp_path / "t",
        tokenizer_config={"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>"},
    )
    (folder / "tokenizer.json").rename(folder / "tok.json")
    with pytest.raises(ConfigError, match=r"no tokenizer\.json in .*\(it holds tok\.json, "):
        load_tokenizer(folder)
    (folder / "tok.json").rename(folder / "tokenizer.json")
    tok = TransformersTokenizer.from_pretrained(folder)
    assert tok.encode(TEXT) == tiny_tokenizer().encode(TEXT) and tok.eos_token == "</s>"


def test_a_folder_without_tokenizer_json_says_so_and_lists_it(tmp_path: Path) -> None:
    """Not transformers' "install sentencepiece or tiktoken" when both are installed (issue 27)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(empty)
    assert str(caught.value).startswith(
        f"tokenizer: no tokenizer.json in {empty} (it holds nothing)"
    )
    assert "install sentencepiece" not in str(caught.value)
    # configs alone are no tokenizer: refused, not loaded as a vocabulary of added tokens
    configs = tmp_path / "configs"
    configs.mkdir()
    added = {str(i): {"content": f"<|t{i}|>", "special": True} for i in range(3)}
    (configs / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": added})
    )
    (configs / "special_tokens_map.json").write_text("{}")
    with pytest.raises(
        ConfigError,
        match=r"no tokenizer\.json in .*configs \(it holds special_tokens_map\.json, "
        r"tokenizer_config\.json\); pass a tokenizer\.json",
    ):
        load_tokenizer(configs)


def test_a_vocabulary_transformers_cannot_read_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    folder = tmp_path / "spm"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(b"\x0a\x0b\x00\x01 not a model\nsecond line\n")
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(folder)
    text = str(caught.value)
    assert text.startswith(f"tokenizer: no tokenizer.json in {folder} (it holds tokenizer.model)")
    assert "transformers could not load tokenizer.model either" in text
    assert "\n" not in text  # transformers' first line, not its whole story


def test_a_sentencepiece_folder_without_the_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import chute.tokenize.load as tokenize

    monkeypatch.setattr(tokenize, "_installed", lambda module: module != "sentencepiece")
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x0b")
    with pytest.raises(ImportError, match=r"tokenizer\.model loads through sentencepiece: pip"):
        load_tokenizer(tmp_path)


def test_encode_spans_fast_path_equals_offsets() -> None:
    import random

    from chute.tokenize.base import Tokenizer

    tok = tiny_tokenizer()
    rng = random.Random(0)
    texts = [TEXT, "<|im_start|>assistant\n\n\nHi  there<|im_end|>", "你好，世界。 abc  def"]
    for text in texts:
        for _ in range(200):
            a = rng.randrange(len(text))
            b = rng.randrange(a + 1, len(text) + 1)
            spans = [(a, b)]
            fast = tok.encode_spans(text, spans)
            slow = Tokenizer.encode_spans(tok, text, spans)  # the offsets-based default
            assert fast == slow, (text, a, b)
            _, [(first, end)] = fast
            # Every character of the span is inside the selected tokens.
            _, offsets = tok.encode_with_offsets(text)
            assert offsets[first][0] <= a and offsets[end - 1][1] >= b


@pytest.mark.shared_data
def test_sentencepiece_llama2_through_transformers(shared_data: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    pytest.importorskip("google.protobuf")
    import shutil

    from chute import Recipe

    folder = tmp_path / "llama2"
    folder.mkdir()
    shutil.copy(shared_data / "tokenizers/llama2/tokenizer.model", folder / "tokenizer.model")
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
            }
        )
    )
    tok = load_tokenizer(folder)
    assert isinstance(tok, TransformersTokenizer) and tok.vocab_size == 32000
    assert tok.token_to_id("<s>") == 1 and tok.token_to_id("</s>") == 2
    recipe = Recipe(tokenizer=tok, template="llama2")
    record = {"instruction": "Name three colours.", "output": "Red, green and blue."}
    sample = recipe(record)
    text = "<s>[INST] Name three colours. [/INST] Red, green and blue. </s>"
    assert recipe.render(record).text == text
    assert sample["input_ids"].tolist() == tok.encode(text)
    assert sample["input_ids"][0] == 1 and sample["input_ids"][-1] == 2
    assert (
        tok.decode(sample["input_ids"][sample["labels"] != -100].tolist())
        == "Red, green and blue. </s>"
    )
