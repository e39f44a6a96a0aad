"""LLaMA-Factory's run-wide keys that shape data, and what each becomes in a mixture's recipe.

``chute migrate llamafactory`` (``chute.mixture.migrate``) maps the datasets and amounts; this
module maps the rest of the training YAML, noting each key it cannot carry over exactly
(``chute.mixture.migration.Note``)::

    LLaMA-Factory                    chute recipe
    model_name_or_path (a folder)    tokenizer (a Hub id: kept, noted: chute reads local files;
                                     --tokenizer DIR replaces it)
    template                         template: the same built-in (qwen3, llama3, llama2,
                                     mistral, vicuna, alpaca, chatml); qwen3_nothink and qwen:
                                     chatml (Qwen's markup without think blocks); a Qwen-VL
                                     template: the tokenizer's own (null); others: null, noted
    cutoff_len                       max_length (noted: the end is truncated, not both parts)
    media_dir                        media_root (default: the data folder)
    train_on_prompt / mask_history   train_on: all / last
    default_system                   system
    image_max_pixels, image_min_     image_tokens: a dynamic rule (Qwen2-VL / Qwen3-VL patches)
      pixels                         with those bounds; a Qwen-VL template without them gets
                                     LLaMA-Factory's defaults (768 x 768, 32 x 32)
    packing, tokenized_path, ...     dropped, each with what to use instead (DROPPED)

Example:
    >>> recipe, notes = lf_recipe({"model_name_or_path": ".", "template": "qwen3_nothink"},
    ...                           media_root="data")
    >>> recipe["template"], [n.key for n in notes]
    ('chatml', ['template'])
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from chute._internal.spelling import spell
from chute.errors import ConfigError
from chute.mixture.migration import Note

__all__ = [
    "DROPPED",
    "TEMPLATES",
    "amount_notes",
    "dropped_notes",
    "lf_recipe",
    "read_dataset_info",
]

_GUIDE = "docs/guides/migrate-llama-factory.md"
_LF_QWEN_EXTRAS = (
    "LLaMA-Factory also trains the newline after <|im_end|> and writes a blank line before the "
    "tools: recipe.template_vars {train_newline: true, tools_blank_line: true} reproduce that "
    f"({_GUIDE})"
)
_QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# LLaMA-Factory template -> (chute template, a note when the rendering differs)
TEMPLATES: dict[str, tuple[str | None, str | None]] = {
    "qwen3": (
        "qwen3",
        "Qwen3's own rendering; LLaMA-Factory's puts a think block in every assistant turn, "
        "trains the newline after <|im_end|> and writes a blank line before the tools: "
        "recipe.template_vars {think_every_turn: true, train_newline: true, tools_blank_line: "
        "true} reproduce it (" + _GUIDE + ")",
    ),
    "qwen3_nothink": (
        "chatml",
        "Qwen3's markup without think blocks (what the Instruct-2507 models' own template "
        f"writes); {_LF_QWEN_EXTRAS}",
    ),
    "qwen": (
        "chatml",
        f"Qwen2 / 2.5 markup, with LLaMA-Factory's default system prompt as recipe.system; "
        f"{_LF_QWEN_EXTRAS}",
    ),
    "llama3": ("llama3", None),
    "llama2": ("llama2", None),
    "mistral": ("mistral", None),
    "vicuna": ("vicuna", None),
    "alpaca": ("alpaca", None),
    "chatml": ("chatml", None),
}
# Qwen-VL templates -> (image-token preset of the family, its name)
_VL_TEMPLATES = {
    "qwen2_vl": "qwen2-vl",
    "qwen3_vl": "qwen3-vl",
    "qwen3_vl_nothink": "qwen3-vl",
}
# LLaMA-Factory's ProcessorArguments defaults: images are scaled into [32 x 32, 768 x 768] pixels
_LF_IMAGE_MAX_PIXELS = 768 * 768
_LF_IMAGE_MIN_PIXELS = 32 * 32

_VIDEO = "videos: set video_tokens per dataset (a fixed count, or frames), see docs/media.md"
_LOADER = "a loader option, not the data's"
_TOKENS = (
    "the tokenizer is read as saved: add the tokens to its tokenizer.json (save the resized "
    "tokenizer) before training"
)
# Keys that shape LLaMA-Factory's data but have no place in a mixture, with what to use instead.
DROPPED: dict[str, str] = {
    "eval_dataset": "not converted: hold out val per dataset, or convert the eval datasets with "
    "another chute migrate into their own mixture",
    "packing": f"{_LOADER}: Loader(..., plan='packed'); chute's packed rows never attend across "
    "samples",
    "neat_packing": f"{_LOADER}: Loader(..., plan='packed') (position_ids restart per sample)",
    "group_by_length": f"{_LOADER}: Loader(..., plan='grouped')",
    "tokenized_path": "chute preprocess mixture.yaml --out DIR builds the fingerprinted cache",
    "overwrite_cache": "chute preprocess --overwrite",
    "preprocessing_num_workers": "chute preprocess --workers N",
    "preprocessing_batch_size": "records per committed chunk: the mixture's cache.chunk_size",
    "streaming": "not needed: sources are read in place, at random, so the shuffle is global",
    "buffer_size": "not needed: sources are read in place, at random, so the shuffle is global",
    "enable_thinking": "no chute option (LLaMA-Factory's false puts an empty think block in the "
    f"prompt, untrained; {_GUIDE})",
    "tool_format": "the template's own tool format is used",
    "video_fps": _VIDEO,
    "video_maxlen": _VIDEO,
    "video_max_pixels": _VIDEO,
    "video_min_pixels": _VIDEO,
    "use_audio_in_video": "audio: set audio_tokens per dataset, see docs/media.md",
    "audio_sampling_rate": "audio: set audio_tokens per dataset, see docs/media.md",
    "image_do_pan_and_scan": "no chute equivalent",
    "crop_to_patches": "no chute equivalent",
    "new_special_tokens": _TOKENS,
    "add_tokens": _TOKENS,
    "add_special_tokens": _TOKENS,
    "resize_vocab": _TOKENS,
    "split_special_tokens": "chute never splits special tokens written in the text",
}


def dropped_notes(args: Mapping[str, Any]) -> list[Note]:
    """A note for each key of ``DROPPED`` that ``args`` sets (a false or empty value: none)."""
    notes = [Note(k, args[k], "dropped", hint) for k, hint in DROPPED.items() if args.get(k)]
    if args.get("ignore_pad_token_for_loss") is False:
        notes.append(
            Note("ignore_pad_token_for_loss", False, "dropped", "chute always masks padding (-100)")
        )
    return notes


def lf_recipe(
    args: Mapping[str, Any], *, media_root: str, tokenizer: str | os.PathLike[str] | None = None
) -> tuple[dict[str, Any] | None, list[Note]]:
    """The mixture's recipe from a training YAML's keys, and a note for each inexact one.

    Args:
        args: the training YAML.
        media_root: the folder relative media paths resolve against (``media_dir``, else the
            data folder).
        tokenizer: a local tokenizer to use instead of ``model_name_or_path``.

    Returns:
        ``(recipe, notes)``; the recipe is ``None`` without a tokenizer (records then read as
        already tokenized), which a note says.
    """
    notes: list[Note] = []
    name = _tokenizer(args, tokenizer, notes)
    if name is None:
        return None, notes
    recipe: dict[str, Any] = {"tokenizer": name}
    recipe["template"] = _template(args, recipe, notes)
    if args.get("cutoff_len"):
        recipe["max_length"] = int(args["cutoff_len"])
        notes.append(
            Note(
                "cutoff_len",
                args["cutoff_len"],
                "approximated",
                "max_length: chute keeps the first max_length tokens (overflow truncate; "
                "truncation turns drops whole earliest exchanges), where LLaMA-Factory shortens "
                "prompt and response in proportion",
            )
        )
    recipe["media_root"] = media_root
    if args.get("train_on_prompt"):
        recipe["train_on"] = "all"
    elif args.get("mask_history"):
        recipe["train_on"] = "last"
    if args.get("default_system"):
        recipe["system"] = str(args["default_system"])
    rule = _image_rule(args, notes)
    if rule is not None:
        recipe["image_tokens"] = rule
    return recipe, notes


def _tokenizer(
    args: Mapping[str, Any], tokenizer: str | os.PathLike[str] | None, notes: list[Note]
) -> str | None:
    if tokenizer is not None:
        return os.fspath(tokenizer)
    model = args.get("model_name_or_path")
    if not model:
        notes.append(
            Note(
                "model_name_or_path",
                None,
                "dropped",
                f"absent, and no {spell('tokenizer')}: the mixture has no recipe, so its records "
                f"would be read as already tokenized; pass {spell('tokenizer')} DIR",
            )
        )
        return None
    if not Path(str(model)).exists():
        notes.append(
            Note(
                "model_name_or_path",
                str(model),
                "needs a local copy",
                f"kept as recipe.tokenizer, but chute reads tokenizers from local files only "
                f"(no download): fetch it (huggingface-cli download {model} --include "
                f"'tokenizer*' --local-dir DIR) and pass {spell('tokenizer')} DIR, or edit "
                f"recipe.tokenizer",
            )
        )
    return str(model)


def _template(args: Mapping[str, Any], recipe: dict[str, Any], notes: list[Note]) -> str | None:
    template = args.get("template")
    if not template:
        return None  # the tokenizer's own chat template, as LLaMA-Factory's default
    template = str(template)
    if template in TEMPLATES:
        chute, note = TEMPLATES[template]
        if template == "qwen" and not args.get("default_system"):
            recipe["system"] = _QWEN_SYSTEM
        if note is not None:
            notes.append(Note("template", template, "approximated", f"{chute}: {note}"))
        return chute
    if template in _VL_TEMPLATES:
        notes.append(
            Note(
                "template",
                template,
                "approximated",
                "null: the tokenizer's own chat template renders (it writes the vision tokens "
                "as the model's processor does); check a record with chute inspect",
            )
        )
        return None
    notes.append(
        Note(
            "template",
            template,
            "approximated",
            "null: no built-in equivalent, so the tokenizer's own chat template renders; check "
            "a record with chute inspect, or set recipe.template to a built-in (chatml, qwen3, "
            "llama3, llama2, mistral, vicuna, llava-v1, alpaca, raw) or a .jinja file",
        )
    )
    return None


def _image_rule(args: Mapping[str, Any], notes: list[Note]) -> dict[str, Any] | None:
    """A dynamic image-token rule bounded as LLaMA-Factory bounds images, where it applies."""
    from chute.media.tokens import DynamicImageTokens, image_tokens_rule

    family = _VL_TEMPLATES.get(str(args.get("template") or ""))
    lf_max, lf_min = args.get("image_max_pixels"), args.get("image_min_pixels")
    if family is None and lf_max is None and lf_min is None:
        return None
    preset = image_tokens_rule(family or "qwen2-vl")
    if not isinstance(preset, DynamicImageTokens):  # the presets named above are dynamic
        raise TypeError(f"{family or 'qwen2-vl'}: expected a dynamic preset, got {preset!r}")
    rule: dict[str, Any] = {
        "patch_size": preset.patch_size,
        "merge_size": preset.merge_size,
        "min_pixels": max(int(lf_min or _LF_IMAGE_MIN_PIXELS), preset.min_pixels),
        "max_pixels": min(int(lf_max or _LF_IMAGE_MAX_PIXELS), preset.max_pixels),
    }
    if family is not None:
        rule["family"] = family
        how = f"{family}'s patches"
    else:
        how = (
            f"Qwen2-VL's patches (14 pixels, merged 2 x 2; template {args.get('template')!r} "
            f"names no Qwen-VL model: for Qwen3-VL set patch_size 16, for a model without "
            f"dynamic resolution remove image_tokens)"
        )
    for key, value in (("image_max_pixels", lf_max), ("image_min_pixels", lf_min)):
        if value is not None:
            notes.append(
                Note(
                    key,
                    value,
                    "approximated",
                    f"recipe.image_tokens {key[6:]} {rule[key[6:]]}, "
                    f"{how}: LLaMA-Factory scales each image into its bounds before the "
                    f"processor rounds it to whole patches, chute counts with the processor's "
                    f"rounding at those bounds, so a count can differ by a rounding step",
                )
            )
    return rule


def read_dataset_info(
    path: Path, *, given: bool, folder: Path, args: Mapping[str, Any]
) -> dict[str, Any]:
    """LLaMA-Factory's ``dataset_info.json``; a missing one names the options that find it."""
    if not path.is_file():
        if given:
            raise ConfigError(f"{path}: no such file", param="dataset_info")
        whence = (
            "the training YAML's dataset_dir"
            if args.get("dataset_dir")
            else "LLaMA-Factory's default data folder"
        )
        raise ConfigError(
            f"no {path} ({whence}, {folder}, read from the current directory "
            f"{Path.cwd()}); pass {spell('dataset_dir')} with LLaMA-Factory's data folder (the "
            f"one holding dataset_info.json, e.g. LLaMA-Factory/data), or "
            f"{spell('dataset_info')} with the file",
            param="dataset_dir",
        )
    try:
        info = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path} ({exc})", param="dataset_info") from None
    if not isinstance(info, dict):
        raise ConfigError(f"{path} is not a JSON object of datasets", param="dataset_info")
    return info


def amount_notes(args: Mapping[str, Any], strategy: str) -> list[Note]:
    """A note for each amount key chute maps with a difference (interleaving, subsets, val)."""
    notes = []
    if strategy.startswith("interleave"):
        notes.append(
            Note(
                "mix_strategy",
                strategy,
                "approximated",
                "weights and epoch_samples: each epoch takes that many samples in those "
                "proportions (a different subset of a down-sampled dataset each epoch), not "
                "LLaMA-Factory's sample-by-sample draw",
            )
        )
    if args.get("max_samples"):
        notes.append(
            Note(
                "max_samples",
                args["max_samples"],
                "approximated",
                "max_samples on each dataset: a fixed, seeded random subset, not the first N",
            )
        )
    if args.get("val_size"):
        notes.append(
            Note(
                "val_size",
                args["val_size"],
                "approximated",
                "val on each dataset: held out by content hash within each dataset (stable when "
                "files are re-ordered), not at random from the merged data",
            )
        )
    return notes
