"""Mixtures from LLaMA-Factory and XTuner configs: the same datasets, amounts and hold-outs.

``from_llamafactory(...)`` reads a training YAML's data arguments (``dataset``,
``dataset_dir``, ``mix_strategy``, ``interleave_probs``, ``max_samples``, ``val_size``,
``media_dir``, ``cutoff_len``, ``template``, ``model_name_or_path``) and the entries of
``dataset_info.json`` (``file_name``, ``formatting``, ``columns``, ``tags``, ``num_samples``)::

    mix_strategy      LLaMA-Factory                               chute
    concat            datasets end to end, shuffled              every dataset repeat 1
    interleave_under  draw with interleave_probs until the       weights = probs,
                      first dataset runs out                      epoch_samples = min(n_i / p_i)
    interleave_over   ... until every dataset has run out         epoch_samples = max(n_i / p_i)
    max_samples: N    the first N records of each dataset         max_samples: N (a seeded subset)
    val_size: 0.1     10% of the merged data, at random           val: 0.1 on each dataset, by
                                                                  content hash
    num_samples: N    (dataset_info) N records, resampled         samples: N

Keys a mixture cannot carry over exactly (a Hub tokenizer id, a template chute renders a little
differently, ``packing``, ...) are noted: ``migrate_llamafactory`` and ``migrate_xtuner`` return
the mixture with its ``Note``s (``chute.mixture.migration``), which ``chute migrate`` prints as
warnings and writes as comments atop the YAML; the recipe keys are mapped in
``chute.mixture.llamafactory``.

``from_xtuner(config)`` reads an XTuner ``ConcatDataset`` (each dataset once, end to end): the
``train_dataset`` dict of a config, or the config file itself (evaluated with stand-ins for
XTuner's imports, so XTuner need not be installed). See docs/guides/migrate-*.md.

Example:
    >>> mix = from_llamafactory({"dataset": "alpaca_en_demo,identity",
    ...                          "mix_strategy": "interleave_under",
    ...                          "interleave_probs": "0.8,0.2", "val_size": 0.05},
    ...                         dataset_dir="data/")  # doctest: +SKIP
    >>> mix["identity"].weight, mix["identity"].val  # doctest: +SKIP
    (0.2, 0.05)
"""

from __future__ import annotations

import math
import os
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from chute._internal.spelling import spell
from chute.errors import ConfigError
from chute.formats import FormatSpec
from chute.mixture.config import Mixture
from chute.mixture.entry import MixtureEntry
from chute.mixture.llamafactory import amount_notes, dropped_notes, lf_recipe, read_dataset_info
from chute.mixture.migration import Migration, Note

__all__ = [
    "from_llamafactory",
    "from_xtuner",
    "load_xtuner_config",
    "migrate_llamafactory",
    "migrate_xtuner",
]

_LF_REMOTE = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value or []]


def from_llamafactory(
    args: Mapping[str, Any] | str | os.PathLike[str],
    *,
    dataset_dir: str | os.PathLike[str] | None = None,
    dataset_info: str | os.PathLike[str] | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
) -> Mixture:
    """A mixture equivalent to a LLaMA-Factory run's data arguments (see the module docstring).

    ``migrate_llamafactory`` takes the same arguments and also returns the notes on every key
    not carried over exactly.

    Args:
        args: the training YAML (path or mapping), or just its data keys.
        dataset_dir: overrides ``args["dataset_dir"]`` (LLaMA-Factory's default ``data``).
        dataset_info: the ``dataset_info.json`` (default: in ``dataset_dir``).
        tokenizer: a local tokenizer (folder or file) for the recipe, instead of
            ``model_name_or_path`` (often a Hub id, which chute cannot download).

    Raises:
        ConfigError: no ``dataset_info.json``, unknown datasets, hub datasets (chute reads
            local files), a mix strategy or probabilities it cannot map; each named.
    """
    return migrate_llamafactory(
        args, dataset_dir=dataset_dir, dataset_info=dataset_info, tokenizer=tokenizer
    ).mixture


def migrate_llamafactory(
    args: Mapping[str, Any] | str | os.PathLike[str],
    *,
    dataset_dir: str | os.PathLike[str] | None = None,
    dataset_info: str | os.PathLike[str] | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
) -> Migration:
    """``from_llamafactory``'s mixture, with a ``Note`` on each key not carried over exactly."""
    source = "" if isinstance(args, Mapping) else os.fspath(args)
    if not isinstance(args, Mapping):
        args = _read_yaml(args)
    folder = Path(dataset_dir or args.get("dataset_dir") or "data")
    info_path = Path(dataset_info) if dataset_info else folder / "dataset_info.json"
    info = read_dataset_info(info_path, given=dataset_info is not None, folder=folder, args=args)
    names = _names(args.get("dataset"))
    if not names:
        raise ConfigError("no datasets: set dataset (a comma-separated list)", param="dataset")
    problems = []
    for name in names:
        entry = info.get(name)
        if entry is None:
            problems.append(f"{name}: not in {info_path}")
        elif "file_name" not in entry:
            hub = next((k for k in _LF_REMOTE if k in entry), "no file_name")
            problems.append(
                f"{name}: {hub}={entry.get(hub)!r}; chute reads local files (download it, add "
                f"its files as sources)"
            )
    if problems:
        raise ConfigError("cannot convert:\n  " + "\n  ".join(problems), param="dataset")
    strategy = str(args.get("mix_strategy") or "concat")
    probs = [float(p) for p in _names(args.get("interleave_probs"))] or None
    if probs is not None and len(probs) != len(names):
        raise ConfigError(
            f"interleave_probs has {len(probs)} values for {len(names)} datasets",
            param="interleave_probs",
        )
    val = args.get("val_size") or None
    datasets = []
    for k, name in enumerate(names):
        entry = info[name]
        path = folder / entry["file_name"]
        sources = [str(path / "*") if path.is_dir() else str(path)]
        spec = FormatSpec.from_dataset_info(info_path, name)
        options: dict[str, Any] = {"format": spec.name}
        if spec.columns:
            options["columns"] = dict(spec.columns)
        if spec.tags:
            options["tags"] = dict(spec.tags)
        amount: dict[str, Any] = {}
        if entry.get("num_samples"):
            amount["samples"] = int(entry["num_samples"])
        elif strategy.startswith("interleave"):
            amount["weight"] = probs[k] if probs else 1.0
        datasets.append(
            MixtureEntry(name, sources, max_samples=args.get("max_samples"), **amount, **options)
        )
    epoch = None
    if strategy.startswith("interleave"):
        epoch = _interleave_total(datasets, strategy, probs)
    elif strategy != "concat":
        raise ConfigError(
            f"expected concat, interleave_under or interleave_over, got {strategy!r}",
            param="mix_strategy",
        )
    if val is not None:
        datasets = [_with_val(d, val, datasets) for d in datasets]
    recipe, notes = lf_recipe(
        args, media_root=str(args.get("media_dir") or folder), tokenizer=tokenizer
    )
    notes = amount_notes(args, strategy) + notes + dropped_notes(args)
    return Migration(Mixture(datasets, recipe=recipe, epoch_samples=epoch), notes, source)


def _read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}", param="config") from None
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{path} holds a YAML {type(data).__name__}, not the mapping of a training YAML",
            param="config",
        )
    return dict(data)


def _records(ds: MixtureEntry) -> int:
    from chute.sources import open_source

    return len(open_source(ds.sources))


def _interleave_total(
    datasets: list[MixtureEntry], strategy: str, probs: list[float] | None
) -> int:
    sizes = [
        _records(d) if d.max_samples is None else min(d.max_samples, _records(d)) for d in datasets
    ]
    weights = probs or [1.0 / len(datasets)] * len(datasets)
    total_w = sum(weights)
    ratios = [n / (w / total_w) for n, w in zip(sizes, weights, strict=True) if w > 0]
    if strategy == "interleave_under":
        return max(1, math.floor(min(ratios)))
    return max(1, math.ceil(max(ratios)))


def _with_val(ds: MixtureEntry, val: float | int, everything: list[MixtureEntry]) -> MixtureEntry:
    data = ds.to_dict()
    if isinstance(val, float) and val < 1:
        data["val"] = val
    else:  # a count over the merged data: each dataset holds out its share
        sizes = {d.name: _records(d) for d in everything}
        data["val"] = max(1, round(int(val) * sizes[ds.name] / sum(sizes.values())))
    return MixtureEntry.from_dict(ds.name, data)


# -- XTuner ------------------------------------------------------------------------------------

_XTUNER_FORMATS = {
    "alpaca_map_fn": "alpaca",
    "alpaca_zh_map_fn": "alpaca",
    "openai_map_fn": "messages",
    "llava_map_fn": "llava",
    "default_map_fn": "auto",
}


class _Stand:
    """A stand-in for anything a config imports: attributes and calls give more stand-ins."""

    def __init__(self, name: str):
        self.__name__ = name

    def __getattr__(self, key: str) -> _Stand:
        if key.startswith("__"):
            raise AttributeError(key)
        return _Stand(f"{self.__name__}.{key}")

    def __call__(self, *args: Any, **kwargs: Any) -> _Stand:
        return _Stand(f"{self.__name__}()")

    def __repr__(self) -> str:
        return self.__name__


def load_xtuner_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The names an XTuner config file defines, its non-standard imports replaced by stand-ins.

    The file runs as Python (it is the user's own config); ``xtuner``, ``mmengine``, ``torch``,
    ``transformers`` ... need not be installed: whatever it imports from them is a stand-in
    that only carries its name (``ConcatDataset``, ``alpaca_map_fn``).
    """
    import builtins
    import importlib

    real_import = builtins.__import__

    def fake_import(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if name.split(".")[0] in ("os", "os.path", "math", "copy", "functools", "pathlib"):
            return real_import(name, globals, locals, fromlist, level)
        module = types.ModuleType(name)
        for item in fromlist or ():
            setattr(module, item, _Stand(item))
        return module if fromlist else _Stand(name.split(".")[0])

    namespace: dict[str, Any] = {
        "__builtins__": {**vars(builtins), "__import__": fake_import},
        "__file__": os.fspath(path),
    }
    code = compile(Path(path).read_text(encoding="utf-8"), os.fspath(path), "exec")
    exec(code, namespace)
    importlib.invalidate_caches()
    return {k: v for k, v in namespace.items() if not k.startswith("__")}


def _type_name(value: Any) -> str:
    name = getattr(value, "__name__", None) or (value if isinstance(value, str) else "")
    return str(name).rsplit(".", 1)[-1]


def from_xtuner(
    config: Mapping[str, Any] | str | os.PathLike[str], *, recipe: Mapping[str, Any] | None = None
) -> Mixture:
    """A mixture of the datasets of an XTuner ``ConcatDataset`` (each once per epoch).

    Args:
        config: the ``train_dataset`` dict (``dict(type=ConcatDataset, datasets=[...])``), a
            config's namespace, or the config file.
        recipe: the run-wide recipe (default: ``max_length`` from the config, no tokenizer:
            add ``tokenizer`` before loading).
    """
    return migrate_xtuner(config, recipe=recipe).mixture


def migrate_xtuner(
    config: Mapping[str, Any] | str | os.PathLike[str], *, recipe: Mapping[str, Any] | None = None
) -> Migration:
    """``from_xtuner``'s mixture, with a ``Note`` when it has no tokenizer (so no recipe)."""
    source = "" if isinstance(config, Mapping) else os.fspath(config)
    if not isinstance(config, Mapping):
        config = load_xtuner_config(config)
    top = config.get("train_dataset", config)
    if _type_name(top.get("type")) != "ConcatDataset":
        parts: Sequence[Any] = [top]
    else:
        parts = top.get("datasets") or []
    datasets = []
    max_length = None
    part_notes: list[Note] = []
    for k, part in enumerate(parts):
        name, sources, options = _xtuner_part(part, k)
        part_notes += _xtuner_part_notes(part, name)
        length = part.get("max_length")
        if length and max_length and length != max_length:
            part_notes.append(
                Note(
                    f"{name}.max_length",
                    length,
                    "approximated",
                    f"a mixture has one max_length: {max_length}, the first dataset's",
                )
            )
        max_length = max_length or length
        datasets.append(MixtureEntry(name, sources, **options))
    if not datasets:
        raise ConfigError(
            "no datasets found (expected dict(type=ConcatDataset, datasets=[...]))", param="config"
        )
    run = dict(recipe or {})
    if max_length and "max_length" not in run:
        run["max_length"] = int(max_length)
    notes = _xtuner_template_and_packing(parts, run) + part_notes
    if "tokenizer" not in run:
        notes.append(
            Note(
                "tokenizer",
                None,
                "dropped",
                f"XTuner's is a Hub model object; without {spell('tokenizer')} the mixture has "
                f"no recipe, so its records would be read as already tokenized: pass "
                f"{spell('tokenizer')} DIR (a local tokenizer folder or tokenizer.json)",
            )
        )
    mixture = Mixture(datasets, recipe=run if "tokenizer" in run else None)
    return Migration(mixture, notes, source)


# XTuner's PROMPT_TEMPLATE entries with a built-in of the same markup (default systems and
# stop words aside: approximated)
_XTUNER_TEMPLATES = {
    "qwen_chat": "chatml",
    "llama3_chat": "llama3",
    "llama2_chat": "llama2",
    "mistral": "mistral",
    "vicuna": "vicuna",
}


def _xtuner_template_and_packing(parts: Sequence[Any], run: dict[str, Any]) -> list[Note]:
    """Notes for the parts' prompt template and packing; a built-in template set where one fits."""
    notes: list[Note] = []
    names = set()
    for part in parts:
        mapping = part.get("template_map_fn")
        if isinstance(mapping, Mapping) and mapping.get("template") is not None:
            names.add(_type_name(mapping["template"]))
    if len(names) == 1 and "template" not in run:
        (name,) = names
        builtin = _XTUNER_TEMPLATES.get(name)
        if builtin is not None:
            run["template"] = builtin
            notes.append(
                Note(
                    "prompt_template",
                    name,
                    "approximated",
                    f"template {builtin}: the same markup (check its default system prompt)",
                )
            )
        else:
            notes.append(
                Note(
                    "prompt_template",
                    name,
                    "dropped",
                    "no built-in writes it: the tokenizer's own chat template renders instead; "
                    "set recipe.template (a built-in name, a tokenizer_config.json or a .jinja)",
                )
            )
    elif len(names) > 1:
        notes.append(
            Note(
                "prompt_template",
                sorted(names),
                "dropped",
                "the datasets use different templates; a mixture renders with one recipe "
                "template: set recipe.template, or a dataset's own recipe keys",
            )
        )
    packing = [part.get("pack_to_max_length") for part in parts]
    if any(value is True for value in packing):
        notes.append(
            Note(
                "pack_to_max_length",
                True,
                "dropped",
                "chute packs when it loads, not in the data: Loader(plan='packed') or "
                "--plan packed (shuffle_before_pack: its plans shuffle before they pack)",
            )
        )
    return notes


def _xtuner_part(part: Mapping[str, Any], k: int) -> tuple[str, list[str], dict[str, Any]]:
    options: dict[str, Any] = {}
    kind = _type_name(part.get("type"))
    if part.get("max_dataset_length"):
        options["max_samples"] = int(part["max_dataset_length"])
    if kind == "LLaVADataset":
        options["format"] = "llava"
        if part.get("image_folder"):
            options["media_root"] = str(part["image_folder"])
        sources = [str(part["data_path"])]
        return f"llava{k}", sources, options
    inner = part.get("dataset") or {}
    files = inner.get("data_files") or {}
    if isinstance(files, Mapping):
        files = files.get("train", list(files.values()))
    sources = [str(f) for f in ([files] if isinstance(files, str) else files)]
    if not sources:
        raise ConfigError(
            f"dataset {k}: load_dataset(path={inner.get('path')!r}) reads the Hub; chute reads "
            f"local files (download them and use data_files)",
            param="config",
        )
    fmt = _XTUNER_FORMATS.get(_type_name(part.get("dataset_map_fn")))
    options["format"] = fmt or "auto"
    name = Path(sources[0]).stem.replace("/", "_") or f"dataset{k}"
    return name, sources, options


# A dataset's keys the mixture carries over, or whose behaviour chute has anyway (its plans
# shuffle before they pack; it keeps no unused columns), or that the notes here cover; any other
# is noted as dropped, so nothing is lost without a word
_XTUNER_KEYS_READ = frozenset(
    ("type", "dataset", "data_path", "image_folder", "dataset_map_fn", "template_map_fn",
     "max_length", "max_dataset_length", "pack_to_max_length", "shuffle_before_pack",
     "tokenizer", "remove_unused_columns", "processor", "pad_image_to_square")
)  # fmt: skip


def _xtuner_part_notes(part: Mapping[str, Any], name: str) -> list[Note]:
    """Notes for one dataset's keys that the mixture does not carry over exactly."""
    notes = []
    map_fn = part.get("dataset_map_fn")
    if map_fn is not None and _type_name(map_fn) not in _XTUNER_FORMATS:
        notes.append(
            Note(
                f"{name}.dataset_map_fn",
                _type_name(map_fn),
                "dropped",
                "no chute format maps records as it does: format auto detects the records' "
                "layout; check one with chute inspect, or set the dataset's format and columns",
            )
        )
    for key in ("processor", "pad_image_to_square"):  # LLaVA's image processing
        if part.get(key):
            notes.append(
                Note(
                    f"{name}.{key}",
                    _type_name(part[key]) if key == "processor" else part[key],
                    "dropped",
                    "the media stage is the Loader's, not the mixture's: media=MediaStage("
                    "ImageTransform(size=336, crop=336, pad_to_square=True, "
                    "tokens_per_image=576)) for LLaVA-1.5's CLIP processor and square",
                )
            )
    for key in sorted(set(part) - _XTUNER_KEYS_READ):
        notes.append(
            Note(f"{name}.{key}", part[key], "dropped", "no mixture option carries it over")
        )
    return notes
