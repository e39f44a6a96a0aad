"""Checking config fields (every problem collected, each named) and dotted overrides.

Example:
    >>> check_fields({"n": "int+", "mode": choice(["a", "b"])}, {"n": 0, "mode": "c"})
    [('n', 'expected a positive integer, got 0'), ('mode', "expected one of a, b, got 'c'")]
    >>> apply_overrides({"recipe": {"max_length": 2048}},
    ...                 ["recipe.max_length=4096", "recipe.columns.prompt=question"])
    {'recipe': {'max_length': 4096, 'columns': {'prompt': 'question'}}}
"""

from __future__ import annotations

import difflib
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from chute.errors import ConfigError

__all__ = [
    "SAME_DEFAULT",
    "CliFlag",
    "Problems",
    "apply_overrides",
    "check_fields",
    "choice",
    "kinds_of",
    "option",
    "raise_problems",
    "read_config_file",
    "unknown_keys",
]

Problems = list[tuple[str, str]]


# Suffixes of data files: a command that takes a config and is handed one of these says so.
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".tar", ".txt", ".csv", ".gz", ".zst", ".bz2")


def read_config_file(
    path: str | os.PathLike[str], what: str, example: str, keys: Sequence[str] = ()
) -> Any:
    """The parsed YAML of a config file; a data file handed in its place says so.

    ``what`` names the config (``a preprocessing config``), ``example`` shows its first
    lines naming the data (``sources: [{data}]``) and ``keys`` are its top-level keys (a
    one-record JSONL parses as a mapping of none of them): a newcomer's first ``chute
    preprocess data.jsonl`` met "is not valid YAML", a list, or unknown keys.
    """
    path = Path(path)
    if not path.is_file():
        why = "no such file" if not path.exists() else "not a regular file"  # /dev/null, a folder
        raise ConfigError(f"{path}: {why} ({what})", param="config")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:  # not YAML, not UTF-8
        if path.suffix.lower() in DATA_SUFFIXES:
            raise _data_not_config(path, what, example) from None
        raise ConfigError(f"{path} is not valid YAML: {exc}", param="config") from None
    if path.suffix.lower() in DATA_SUFFIXES and (
        isinstance(data, list)  # a JSON data file
        or (isinstance(data, Mapping) and keys and not set(data) & set(keys))  # one record
    ):
        raise _data_not_config(path, what, example)
    return data


def _data_not_config(path: Path, what: str, example: str) -> ConfigError:
    first = example.format(data=path).replace("\n", "\n    ")
    return ConfigError(
        f"{path} is a data file; this command takes {what} (YAML) that names it, e.g.\n"
        f"    {first}\nsaved as config.yaml and passed in its place",
        param="config",
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _str_map(v: Any, values_may_be_none: bool = False) -> bool:
    return isinstance(v, Mapping) and all(
        isinstance(k, str) and (isinstance(x, str) or (values_may_be_none and x is None))
        for k, x in v.items()
    )


_CHECKS: dict[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "int+?": (lambda v: v is None or (_is_int(v) and v > 0), "a positive integer or null"),
    "int+": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "int0": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "int0?": (lambda v: v is None or (_is_int(v) and v >= 0), "an integer >= 0 or null"),
    "int?": (lambda v: v is None or _is_int(v), "an integer or null"),
    "int": (lambda v: _is_int(v), "an integer"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "seconds": (lambda v: _is_number(v) and v > 0, "a number of seconds > 0"),
    "fraction?": (
        lambda v: v is None or (_is_number(v) and 0 <= v <= 1),
        "a number in [0, 1] or null (no limit)",
    ),
    "map[str]": (_str_map, "a mapping of names to strings"),
    "map[str?]": (lambda v: _str_map(v, True), "a mapping of names to strings or null"),
    "map": (
        lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v),
        "a mapping with string keys",
    ),
    "root": (
        lambda v: v is None or isinstance(v, str) or _str_map(v),
        "a folder, a mapping of data files (or globs) to folders, or null",
    ),
    "count_or_rule": (
        lambda v: v is None or (_is_int(v) and v > 0) or isinstance(v, Mapping),
        "a token count, a mapping of the header-counting rule's fields, or null",
    ),
    "video_tokens": (
        lambda v: v is None or (_is_int(v) and v > 0) or isinstance(v, str | Mapping),
        "a token count, fps (sampling at a rate: fps=1,max_frames=64), frames=8, a mapping of "
        "VideoFrames fields, or null",
    ),
    "name_or_fields": (
        lambda v: (
            v is None
            or (isinstance(v, str) and v != "")
            or (isinstance(v, Mapping) and all(isinstance(k, str) for k in v))
        ),
        "a name, a mapping of its fields, or null",
    ),
    "paths": (
        lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) and x for x in v),
        "a list of folders",
    ),
    "image_tokens": (
        lambda v: v is None or (_is_int(v) and v > 0) or isinstance(v, str | Mapping),
        "auto, a token count (576), a preset (llava-1.5, qwen-vl, qwen2-vl, qwen2.5-vl), a mapping "
        "of DynamicImageTokens fields, or null",
    ),
}


def choice(values: Sequence[str]) -> tuple[Any, str]:
    return (lambda v: v in values, f"one of {', '.join(values)}")


def check_fields(kinds: Mapping[str, Any], values: Mapping[str, Any]) -> Problems:
    out: Problems = []
    for name, kind in kinds.items():
        if name not in values:
            continue
        ok, expected = _CHECKS[kind] if isinstance(kind, str) else kind
        if not ok(values[name]):
            out.append((name, f"expected {expected}, got {values[name]!r}"))
    return out


def raise_problems(
    problems: Problems, prefix: str = "", what: str = "preprocessing config"
) -> None:
    if problems:
        lines = "\n".join(f"  {prefix}{name}: {msg}" for name, msg in problems)
        raise ConfigError(f"invalid {what}:\n{lines}")


def unknown_keys(
    data: Mapping[str, Any],
    known: Sequence[str],
    prefix: str,
    aliases: Mapping[str, str] | None = None,
) -> Problems:
    """Each key of ``data`` not in ``known``, with the nearest known key as a hint.

    ``aliases`` names the key another tool's spelling means (``path`` -> ``sources``), where the
    nearest spelling would point elsewhere.

    Example:
        >>> unknown_keys({"path": "a.jsonl"}, ["sources", "repeat"], "d.", {"path": "sources"})
        [('d.path', 'unknown key (chute calls it sources)')]
    """
    out: Problems = []
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(known)}"
            if aliases and key in aliases:
                hint = f"chute calls it {aliases[key]}"
            out.append((f"{prefix}{key}", f"unknown key ({hint})"))
    return out


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A deep copy of ``data`` with each ``dotted.key=value`` set (values read as YAML).

    A mapping must be written in flow style (``{a: 1}``); text such as ``Be brief: always.`` stays
    text.

    Example:
        >>> apply_overrides({"sources": ["a"]}, ["sources=[a, b]", "cache.workers=4"])
        {'sources': ['a', 'b'], 'cache': {'workers': 4}}
    """
    out = _deep_copy(data)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(
                f"override {item!r}: expected dotted.key=value, e.g. recipe.max_length=4096"
            )
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        if isinstance(value, dict) and not text.lstrip().startswith("{"):
            value = text  # "Be brief: always." is text; a mapping is written {a: b}
        node: dict[str, Any] = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(
                    f"override {item!r}: {where} is {child!r}, not a section; set {where}=... "
                    f"instead"
                )
            node = child
        node[parts[-1]] = value
    return out


def _deep_copy(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _deep_copy(asdict(value))
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_deep_copy(v) for v in value]
    return value


# -- declarations: one per option -----------------------------------------------------------


# A flag whose default is the option's own.
SAME_DEFAULT: Any = type("SameDefault", (), {"__repr__": lambda self: "SAME_DEFAULT"})()


@dataclass(frozen=True)
class CliFlag:
    """How a config option appears on the command line (``chute.cli._options`` builds it).

    Args:
        help: the flag's help text.
        annotation: the flag's type, when it differs from the option's (``--columns`` is text).
        default: the flag's default, when it differs from the option's.
        decl: the flag's spelling (default: ``--`` and the name with dashes).
        parse: how the flag's text becomes the option's value: ``pairs`` (``a=b,c=d``),
            ``template_vars`` (repeated ``KEY=VALUE``), ``list``, or ``or_default`` (left out:
            the option's default).
    """

    help: str
    annotation: Any = None
    default: Any = SAME_DEFAULT
    decl: str | None = None
    parse: str | None = None


def option(
    default: Any = MISSING,
    *,
    factory: Any = MISSING,
    check: str | None = None,
    choices: Sequence[str] | None = None,
    minimum: int | None = 1,
    cli: CliFlag | None = None,
    doc: str | None = None,
) -> Any:
    """A config field declared once: its default, its check, its command-line flag, its doc.

    The check comes from the field's annotation (``int | None`` -> a positive integer or null,
    ``bool`` -> true or false, ``dict[str, str]`` -> a mapping of names to strings, ...);
    ``choices``, ``minimum`` (``0`` allows zero, ``None`` any integer, negative ones too) or a
    named ``check`` refine it.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Opts:
        ...     stride: int = option(0, minimum=0)
        ...     mode: str = option("a", choices=("a", "b"))
        >>> kinds_of(Opts)["stride"], kinds_of(Opts)["mode"][1]
        ('int0', 'one of a, b')
    """
    metadata = {"check": check, "choices": choices, "minimum": minimum, "cli": cli, "doc": doc}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def kinds_of(cls: type) -> dict[str, Any]:
    """Each field's check, read from its annotation (and ``option``'s refinements).

    Raises:
        TypeError: a field whose annotation says nothing checkable and names no ``check``: every
            option is checked, so a new one cannot slip through unchecked.
    """
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in fields(cls):
        meta = f.metadata
        if meta.get("check"):
            out[f.name] = meta["check"]
        elif meta.get("choices"):
            out[f.name] = choice(meta["choices"])
        else:
            out[f.name] = _kind_of(
                hints[f.name], meta.get("minimum", 1), f"{cls.__name__}.{f.name}"
            )
    return out


def _kind_of(annotation: Any, minimum: int | None, where: str) -> str:
    args = typing.get_args(annotation)
    optional = type(None) in args
    inner = [a for a in args if a is not type(None)]
    base = inner[0] if optional and len(inner) == 1 else annotation
    if base is str:
        return "str?" if optional else "str"
    if base is bool:
        return "bool"
    if base is int:
        if minimum is not None and minimum not in (0, 1):
            raise TypeError(f"{where}: minimum is 1, 0 or None (any integer), got {minimum!r}")
        kind = {1: "int+", 0: "int0", None: "int"}[minimum]
        return f"{kind}?" if optional else kind
    if base is float:
        return "seconds"
    if typing.get_origin(base) is dict:
        value = typing.get_args(base)[1]
        if value is str:
            return "map[str]"
        return "map[str?]" if value == (str | None) else "map"
    if typing.get_origin(base) is list and typing.get_args(base) == (str,):
        return "paths"
    raise TypeError(f"{where}: cannot check {annotation!r}; name a check (option(check=...))")
