"""Converters from LLaMA-Factory's dataset_info.json + data arguments and XTuner configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chute.cli import app
from chute.errors import ConfigError
from chute.mixture import Mixture
from chute.mixture.migrate import from_llamafactory, from_xtuner, migrate_xtuner

runner = CliRunner()


def test_llamafactory_interleave_maps_to_weights_and_epoch_samples(shared_data: Path) -> None:
    lf = shared_data / "llama-factory"
    mix = from_llamafactory(
        {
            "dataset": "alpaca_en_demo, glaive_toolcall_en_demo,mllm_demo",
            "mix_strategy": "interleave_under",
            "interleave_probs": "0.5,0.3,0.2",
            "max_samples": 500,
            "val_size": 0.1,
            "cutoff_len": 1024,
            "template": "qwen3",
            "model_name_or_path": str(shared_data / "tokenizers/qwen3"),
        },
        dataset_dir=lf,
    )
    assert mix.names == ["alpaca_en_demo", "glaive_toolcall_en_demo", "mllm_demo"]
    assert [d.weight for d in mix] == [0.5, 0.3, 0.2]
    assert all(d.max_samples == 500 and d.val == 0.1 for d in mix)
    assert mix.epoch_samples == 30  # stops when mllm_demo (6 records, p=0.2) runs out: 6 / 0.2
    assert mix["mllm_demo"].recipe_options["tags"]["role_tag"] == "role"
    assert mix["glaive_toolcall_en_demo"].recipe_options["columns"] == {
        "messages": "conversations",
        "tools": "tools",
    }
    assert mix.recipe == {
        "tokenizer": str(shared_data / "tokenizers/qwen3"),
        "template": "qwen3",
        "max_length": 1024,
        "media_root": str(lf),
    }
    over = from_llamafactory(
        {
            "dataset": "alpaca_en_demo,identity",
            "mix_strategy": "interleave_over",
            "interleave_probs": "0.5,0.5",
        },
        dataset_dir=lf,
    )
    assert over.epoch_samples == 2 * 999  # until alpaca (the larger) runs out
    concat = from_llamafactory({"dataset": "alpaca_en_demo,identity"}, dataset_dir=lf)
    assert [d.weight for d in concat] == [None, None] and concat.epoch_samples is None


def test_llamafactory_refuses_hub_datasets_naming_them(shared_data: Path) -> None:
    with pytest.raises(ConfigError, match=r"ultrachat_200k: hf_hub_url='HuggingFaceH4/ultrachat"):
        from_llamafactory(
            {"dataset": "alpaca_en_demo,ultrachat_200k"}, dataset_dir=shared_data / "llama-factory"
        )


def test_cli_writes_a_mixture_yaml(shared_data: Path, tmp_path: Path) -> None:
    train = tmp_path / "train.yaml"
    train.write_text(
        f"dataset: alpaca_en_demo,identity\ndataset_dir: "
        f"{shared_data / 'llama-factory'}\nval_size: 0.05\n"
    )
    out = tmp_path / "mix.yaml"
    result = runner.invoke(app, ["migrate", "llamafactory", str(train), "-o", str(out)])
    assert result.exit_code == 0, result.output
    mix = Mixture.load(out)
    assert mix.names == ["alpaca_en_demo", "identity"] and mix["identity"].val == 0.05


XTUNER = """
from datasets import load_dataset
from xtuner.dataset import ConcatDataset, process_hf_dataset
from xtuner.dataset.map_fns import alpaca_map_fn, openai_map_fn, template_map_fn_factory
from xtuner.utils import PROMPT_TEMPLATE

alpaca_path = "{alpaca}"
max_length = 2048
alpaca_en = dict(type=process_hf_dataset,
                 dataset=dict(type=load_dataset, path="json", data_files=dict(train=alpaca_path)),
                 max_length=max_length, dataset_map_fn=alpaca_map_fn,
                 template_map_fn=dict(type=template_map_fn_factory,
                                      template=PROMPT_TEMPLATE.internlm2_chat))
openai = dict(type=process_hf_dataset,
              dataset=dict(type=load_dataset, path="json", data_files=dict(train="{openai}")),
              max_length=max_length, dataset_map_fn=openai_map_fn)
train_dataset = dict(type=ConcatDataset, datasets=[alpaca_en, openai])
"""


def test_xtuner_concat_dataset_without_xtuner_installed(shared_data: Path, tmp_path: Path) -> None:
    config = tmp_path / "cfg.py"
    config.write_text(
        XTUNER.format(
            alpaca=shared_data / "llama-factory/alpaca_en_demo.json",
            openai=shared_data / "xtuner/resource/openai_sft.jsonl",
        )
    )
    mix = from_xtuner(config, recipe={"tokenizer": "tok.json"})
    assert mix.names == ["alpaca_en_demo", "openai_sft"]
    assert [d.recipe_options["format"] for d in mix] == ["alpaca", "messages"]
    assert all(d.weight is None and d.repeat is None for d in mix)  # each once: ConcatDataset
    assert mix.recipe == {"tokenizer": "tok.json", "max_length": 2048}
    # the template and packing it cannot carry over are notes, not silence
    notes = {n.key: n for n in migrate_xtuner(config, recipe={"tokenizer": "tok.json"}).notes}
    assert notes["prompt_template"].value == "internlm2_chat"
    assert notes["prompt_template"].kind == "dropped"
    packed = config.read_text().replace(
        "max_length=max_length,", "max_length=max_length, pack_to_max_length=True,"
    )
    config.write_text(packed.replace("internlm2_chat", "qwen_chat"))
    moved = migrate_xtuner(config, recipe={"tokenizer": "tok.json"})
    assert moved.mixture.recipe["template"] == "chatml"
    assert {n.key: n.kind for n in moved.notes} == {
        "prompt_template": "approximated",
        "pack_to_max_length": "dropped",
    }


# -- every key dropped or approximated is a warning and a comment (issue 27) -------------------


@pytest.fixture
def lf_folder(tmp_path: Path) -> Path:
    """A LLaMA-Factory data folder: dataset_info.json with one local alpaca dataset."""
    import json

    data = tmp_path / "lf" / "data"
    data.mkdir(parents=True)
    (data / "dataset_info.json").write_text(json.dumps({"mini": {"file_name": "mini.json"}}))
    records = [{"instruction": f"Say {i}", "input": "", "output": str(i)} for i in range(5)]
    (data / "mini.json").write_text(json.dumps(records))
    return data


def _train_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(text)
    return path


def test_without_a_data_folder_the_error_names_dataset_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    train = _train_yaml(tmp_path, "dataset: mini\n")
    result = runner.invoke(app, ["migrate", "llamafactory", str(train)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    line = result.output.strip()
    assert line.startswith("error: --dataset-dir: no data/dataset_info.json")
    assert "pass --dataset-dir with LLaMA-Factory's data folder" in line
    assert "or --dataset-info with the file" in line


def test_a_hub_model_id_warns_and_tokenizer_replaces_it(lf_folder: Path, tmp_path: Path) -> None:
    hub = "Qwen/Qwen3-4B-Instruct-2507"
    train = _train_yaml(tmp_path, f"model_name_or_path: {hub}\ndataset: mini\n")
    out = tmp_path / "mix.yaml"
    args = ["migrate", "llamafactory", str(train), "--dataset-dir", str(lf_folder), "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    warning = f"warning: model_name_or_path: {hub}: needs a local copy: kept as recipe.tokenizer"
    assert warning in result.output and "pass --tokenizer DIR" in result.output
    assert f"#   model_name_or_path: {hub}: needs a local copy" in out.read_text()
    local = tmp_path / "tok"
    local.mkdir()
    result = runner.invoke(app, [*args, "--tokenizer", str(local)])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    assert Mixture.load(out).recipe["tokenizer"] == str(local)
    # --json: one object, the notes as data, nothing else on stdout
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["out"] == str(out) and got["yaml"] == out.read_text()
    (note,) = got["notes"]
    assert (note["key"], note["value"], note["kind"]) == (
        "model_name_or_path",
        hub,
        "needs a local copy",
    )


def test_qwen3_nothink_and_image_max_pixels_are_mapped_and_noted(
    lf_folder: Path, tmp_path: Path
) -> None:
    train = _train_yaml(
        tmp_path,
        f"model_name_or_path: {tmp_path}\ndataset: mini\ntemplate: qwen3_nothink\n"
        "image_max_pixels: 262144\npacking: true\nmax_samples: 3\n",
    )
    out = tmp_path / "mix.yaml"
    args = ["migrate", "llamafactory", str(train), "--dataset-dir", str(lf_folder), "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    mix = Mixture.load(out)
    assert mix.recipe["template"] == "chatml"  # Qwen3's markup without think blocks
    assert mix.recipe["image_tokens"]["max_pixels"] == 262144
    warnings = [ln for ln in result.output.splitlines() if ln.startswith("warning: ")]
    keys = [ln.removeprefix("warning: ").split(":")[0] for ln in warnings]
    assert keys == ["max_samples", "template", "image_max_pixels", "packing"]
    assert warnings[1].startswith("warning: template: qwen3_nothink: approximated: chatml: ")
    assert "dropped: a loader option" in warnings[3]
    comments = [ln for ln in out.read_text().splitlines() if ln.startswith("#   ")]
    assert [c.removeprefix("#   ") for c in comments] == [
        w.removeprefix("warning: ") for w in warnings
    ]


def test_migrate_llamafactory_in_python_returns_the_notes(lf_folder: Path) -> None:
    from chute.mixture.migrate import migrate_llamafactory

    migration = migrate_llamafactory(
        {"dataset": "mini", "template": "qwen3", "model_name_or_path": "org/model"},
        dataset_dir=lf_folder,
        tokenizer="tok/",
    )
    assert migration.mixture.recipe["tokenizer"] == "tok/"
    assert [(n.key, n.kind) for n in migration.notes] == [("template", "approximated")]
    assert "think_every_turn: true" in migration.notes[0].text
    assert from_llamafactory({"dataset": "mini"}, dataset_dir=lf_folder).recipe is None


def test_xtuner_without_a_tokenizer_warns(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text('{"instruction": "hi", "output": "ho"}\n')
    config = tmp_path / "cfg.py"
    config.write_text(XTUNER.format(alpaca=tmp_path / "a.jsonl", openai=tmp_path / "b.jsonl"))
    result = runner.invoke(app, ["migrate", "xtuner", str(config)])
    assert result.exit_code == 0, result.output
    assert "warning: tokenizer: null: dropped: XTuner's is a Hub model object" in result.output
    assert "pass --tokenizer DIR" in result.output


def test_xtuner_dataset_keys_are_carried_over_or_noted(tmp_path: Path) -> None:
    """max_dataset_length becomes max_samples; a map function with no chute format, LLaVA's
    pad_image_to_square and any other key left behind are notes, not silence."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text('{"instruction": "hi", "output": "ho"}\n')
    text = XTUNER.format(alpaca=tmp_path / "a.jsonl", openai=tmp_path / "b.jsonl")
    text = text.replace(
        "max_length=max_length, dataset_map_fn=openai_map_fn)",
        "max_length=max_length, dataset_map_fn=oasst1_map_fn, max_dataset_length=50,\n"
        "              use_varlen_attn=True)",
    ).replace("import alpaca_map_fn,", "import alpaca_map_fn, oasst1_map_fn,")
    text += (
        "llava = dict(type=LLaVADataset, data_path='c.json', image_folder='imgs',\n"
        "             pad_image_to_square=True)\n"
        "train_dataset = dict(type=ConcatDataset, datasets=[alpaca_en, openai, llava])\n"
    )
    config = tmp_path / "cfg.py"
    config.write_text("from xtuner.dataset import LLaVADataset\n" + text)
    moved = migrate_xtuner(config, recipe={"tokenizer": "tok.json"})
    b = moved.mixture.datasets[1]
    assert b.name == "b" and b.max_samples == 50 and b.recipe_options["format"] == "auto"
    notes = {n.key: n for n in moved.notes}
    assert notes["b.dataset_map_fn"].value == "oasst1_map_fn"
    assert notes["b.use_varlen_attn"].kind == "dropped"
    assert "pad_to_square=True" in notes["llava2.pad_image_to_square"].text


def test_xtuner_llava_keys_and_differing_lengths_are_noted(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"instruction": "hi", "output": "ho"}\n')
    config = tmp_path / "cfg.py"
    config.write_text(
        "from datasets import load_dataset\n"
        "from xtuner.dataset import ConcatDataset, LLaVADataset, process_hf_dataset\n"
        "from transformers import CLIPImageProcessor\n"
        f"a = dict(type=process_hf_dataset, max_length=2048, dataset=dict(type=load_dataset, "
        f"path='json', data_files=dict(train='{tmp_path / 'a.jsonl'}')))\n"
        "llava = dict(type=LLaVADataset, data_path='c.json', image_folder='imgs', max_length=4096,\n"
        "             max_dataset_length=7, processor=dict(type=CLIPImageProcessor))\n"
        "train_dataset = dict(type=ConcatDataset, datasets=[a, llava])\n"
    )
    moved = migrate_xtuner(config, recipe={"tokenizer": "tok.json"})
    assert moved.mixture.datasets[1].max_samples == 7
    notes = {n.key: n for n in moved.notes}
    assert notes["llava1.processor"].kind == "dropped"
    assert notes["llava1.max_length"].text.startswith("a mixture has one max_length: 2048")
