"""Converters from LLaMA-Factory's dataset_info.json + data arguments and XTuner configs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from chute.cli import app
from chute.errors import ConfigError
from chute.mixture import Mixture
from chute.mixture.migrate import from_llamafactory, from_xtuner

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
