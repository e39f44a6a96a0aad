"""The docs' examples run as written: docs/quickstart.md end to end, in a temporary directory.

Blocks run in document order, sharing one namespace, as in ``test_readme.py``:

* ```` ```python ```` blocks are executed;
* ```` ```yaml ```` blocks whose first line is ``# NAME`` are written to the file ``NAME``;
* ```` ```console ```` blocks hold ``$ chute ...`` commands, each followed by its output. Every
  command runs in-process; every output line shown must appear in the real output (timings and
  rates are normalised, ``...`` stands for lines left out). A shown ``error:`` means a failing
  exit status, anything else a zero one.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from chute import Recipe
from chute.cli import app
from conftest import REPO

BLOCK = re.compile(r"```(python|yaml|console)\n(.*?)```", flags=re.S)
# "0.91 s", "2,439 records/s", "0.128 GB/s": they change from run to run
TIMING = re.compile(r"[\d,]*\.?\d+ (s|records/s|rec/s|GB/s)\b")


def normalise(line: str) -> str:
    return TIMING.sub(r"N \1", line.rstrip())


def console_commands(block: str) -> list[tuple[str, list[str]]]:
    """``[(command, shown output lines)]`` of a console block."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
    return commands


def check_command(command: str, shown: list[str]) -> None:
    args = shlex.split(command)
    assert args[0] == "chute", f"only chute commands run here: {command}"
    result = CliRunner().invoke(app, args[1:])
    output = result.stdout + "\n" + result.stderr  # separately: progress bars stay on stderr
    failing = any(line.startswith("error:") for line in shown)
    assert (result.exit_code != 0) == failing, f"$ {command}\n{output}"
    real = {normalise(line) for line in output.splitlines()}
    for line in shown:
        if "..." in line and line.strip() == "...":
            continue
        if "..." in line:  # a line with a part left out: its pieces, in order
            pattern = ".*".join(re.escape(normalise(p)) for p in line.split("..."))
            assert any(re.fullmatch(pattern, r) for r in real), f"$ {command}\nnot shown: {line}"
            continue
        assert normalise(line) in real, f"$ {command}\nexpected line: {line!r}\ngot:\n{output}"


def run_markdown(path: Path) -> None:
    namespace: dict = {}
    for kind, body in BLOCK.findall(path.read_text()):
        if kind == "python":
            exec(compile(body, str(path), "exec"), namespace)
        elif kind == "yaml":
            first = body.splitlines()[0]
            if first.startswith("# "):
                Path(first[2:].strip()).write_text(body)
        else:
            for command, shown in console_commands(body):
                check_command(command, shown)


@pytest.mark.timeout(600)
def test_quickstart_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_markdown(REPO / "docs" / "quickstart.md")
    assert (tmp_path / "ckpt" / "loader.json").is_file()  # train.py checkpointed the loader


@pytest.mark.timeout(600)
def test_mixtures_doc_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(shared_data / "llama-factory")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "qwen3").symlink_to(shared_data / "tokenizers" / "qwen3")
    run_markdown(REPO / "docs" / "mixtures.md")
    assert (tmp_path / "cache" / "caches.json").is_file()


def test_long_context_doc_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_markdown(REPO / "docs" / "long-context.md")


def test_console_parsing() -> None:
    block = "$ chute a\nout 1\n...\n$ chute b --x\n"
    assert console_commands(block) == [("chute a", ["out 1", "..."]), ("chute b --x", [])]
    assert normalise("in 0.91 s, 2,439 records/s") == "in N s, N records/s"


# --- rendered examples in formats.md and templates.md ------------------------------------------

EXAMPLE = re.compile(r"<!-- example: (.*?) -->\n(?:```json\n(.*?)```.*?)?```text\n(.*?)```", re.S)
RECORD = re.compile(r"<!-- example-record -->\n```json\n(.*?)```", re.S)


def llama2_style_tokenizer(folder: Path) -> Path:
    """A byte-level BPE whose bos/eos are ``<s>``/``</s>`` (rendering needs only their text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<s>", "</s>", "<|begin_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["hello world"], trainer)
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def marked(rendered: Any) -> str:
    """The rendered text with each trained span between ``[[`` and ``]]``."""
    out, k = [], 0
    for a, b in rendered.spans:
        out += [rendered.text[k:a], "[[", rendered.text[a:b], "]]"]
        k = b
    return "".join([*out, rendered.text[k:]])


# options of an example that are not template variables
EXAMPLE_OPTIONS = {"template", "bos", "drop_system", "system"}


@pytest.mark.parametrize("doc", ["formats.md", "templates.md", "guides/migrate-llama-factory.md"])
def test_rendered_examples_are_what_chute_renders(doc: str, tmp_path: Path) -> None:
    tokenizer = llama2_style_tokenizer(tmp_path / "tok")
    text = (REPO / "docs" / doc).read_text()
    shared = RECORD.search(text)
    examples = EXAMPLE.findall(text)
    assert len(examples) == text.count("<!-- example: ") >= 4
    for options, record_text, shown in examples:
        opts = dict(kv.split("=", 1) for kv in shlex.split(options))
        record = json.loads(record_text or shared.group(1))  # type: ignore[union-attr]
        if opts.get("drop_system") == "true":
            record = {"messages": [m for m in record["messages"] if m["role"] != "system"]}
        special = {"bos": opts["bos"]} if "bos" in opts else None  # Llama 3's own bos
        variables = {k: v == "true" for k, v in opts.items() if k not in EXAMPLE_OPTIONS}
        recipe = Recipe(
            tokenizer=tokenizer,
            template=opts["template"],
            special_tokens=special,
            system=opts.get("system"),
            template_vars=variables,
        )
        # compared without the final newline (ChatML ends with one; a block cannot show it)
        assert marked(recipe.render(record)).rstrip("\n") == shown.rstrip("\n"), options


# --- rendered max_length examples in long-samples.md and preference.md -------------------------

TOKEN_EXAMPLE = re.compile(
    r"<!-- (max-length|split|pair)-example: (.*?) -->\n(?:```json\n(.*?)```.*?)?```text\n(.*?)```",
    re.S,
)
LONG_RECORD = re.compile(r"<!-- long-record -->\n```json\n(.*?)```", re.S)


def marked_tokens(tokenizer: Any, ids: Any, labels: Any) -> str:
    """Decoded tokens with each run of trained tokens between ``[[`` and ``]]``."""
    import itertools

    out = []
    trained = (labels != -100).tolist()
    for flag, run in itertools.groupby(range(len(ids)), key=lambda i: trained[i]):
        positions = list(run)
        text = tokenizer.decode(ids[positions[0] : positions[-1] + 1].tolist())
        out.append(f"[[{text}]]" if flag else text)
    return "".join(out)


@pytest.mark.parametrize("doc", ["long-samples.md", "preference.md"])
def test_token_examples_are_what_chute_makes(doc: str, shared_data: Path) -> None:
    from chute.recipe.preference import pair_sides

    tokenizer = shared_data / "tokenizers" / "qwen3"
    text = (REPO / "docs" / doc).read_text()
    shared = LONG_RECORD.search(text)
    examples = TOKEN_EXAMPLE.findall(text)
    assert len(examples) == text.count("-example: ") >= 1
    for kind, options, record_text, shown in examples:
        opts: dict[str, Any] = dict(kv.split("=", 1) for kv in options.split())
        for key in ("max_length", "stride"):
            if key in opts:
                opts[key] = int(opts[key])
        if kind == "split":
            recipe = Recipe(tokenizer=tokenizer, format="text", overflow="split", **opts)
            windows = recipe.pieces(recipe.process(json.loads(record_text)))
            got = "\n".join(
                f"--- window {w['window']}\n"
                + marked_tokens(recipe.tokenizer, w["input_ids"], w["labels"])
                for w in windows
            )
        elif kind == "pair":
            recipe = Recipe(tokenizer=tokenizer, task="preference", **opts)
            sample = recipe.process(json.loads(record_text))
            got = "\n".join(
                f"--- {name}\n" + marked_tokens(recipe.tokenizer, s["input_ids"], s["labels"])
                for name, s in zip(("chosen", "rejected"), pair_sides(sample), strict=True)
            )
        else:
            record = json.loads(record_text or shared.group(1))  # type: ignore[union-attr]
            recipe = Recipe(tokenizer=tokenizer, **opts)
            sample = recipe.process(record)
            got = marked_tokens(recipe.tokenizer, sample["input_ids"], sample["labels"])
        assert got.rstrip("\n") == shown.rstrip("\n"), f"{doc}: {kind} {options}"
