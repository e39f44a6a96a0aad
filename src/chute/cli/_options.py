"""Option groups shared by the subcommands, each declared once.

A command asks for a group by decorating itself, and receives one value instead of a dozen
parameters::

    @guarded
    @recipe_options()
    @output_options
    def inspect(path: str = typer.Argument(...), *, recipe: RecipeArgs, output: OutputArgs):
        ...

``recipe_options`` adds every recipe flag (``--tokenizer``, ``--template``, ``--format``,
``--max-length``, ...) to the command's signature, so typer parses them, and hands the command a
``RecipeArgs``; ``output_options`` adds ``--json`` and ``--quiet`` as an ``OutputArgs``. A new
recipe flag is one ``option(..., cli=CliFlag(...))`` field of ``RecipeConfig`` (``chute.cache.config``):
its type, default, check, YAML key and flag are declared there once, and it reaches every command
that takes a recipe.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeVar

import typer
import yaml

from chute._internal.config_checks import SAME_DEFAULT, CliFlag
from chute._internal.progress import silenced
from chute._internal.spelling import Spelling
from chute.errors import ConfigError
from chute.recipe.config import RecipeConfig

__all__ = [
    "CACHE_DIR",
    "FLAGS",
    "RECIPE_FLAG_HELP",
    "RECIPE_OPTIONS",
    "OutputArgs",
    "RecipeArgs",
    "output_options",
    "parse_pairs",
    "parse_template_vars",
    "recipe_options",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class _Flag:
    """One command-line flag: the parameter name, its type, its default and its help."""

    name: str
    annotation: Any
    default: Any
    decls: tuple[str, ...]
    help: str
    parse: str | None = None  # how its text becomes the Recipe keyword (CliFlag.parse)

    def option(self, help: str | None, default: Any, panel: str) -> Any:
        return typer.Option(
            self.default if default is ... else default,
            *self.decls,
            help=help or self.help,
            rich_help_panel=panel,
        )


def _recipe_flags() -> tuple[_Flag, ...]:
    """One flag per ``RecipeConfig`` option that declares one (``CliFlag``): declared there once."""
    flags = []
    hints = typing.get_type_hints(RecipeConfig)
    for f in fields(RecipeConfig):
        cli: CliFlag | None = f.metadata.get("cli")
        if cli is None:
            continue
        default = f.default if f.default is not MISSING else None
        flags.append(
            _Flag(
                f.name,
                cli.annotation if cli.annotation is not None else hints[f.name],
                cli.default if cli.default is not SAME_DEFAULT else default,
                (cli.decl or "--" + f.name.replace("_", "-"),),
                cli.help,
                cli.parse,
            )
        )
    return tuple(flags)


RECIPE_OPTIONS: tuple[_Flag, ...] = _recipe_flags()
# the Recipe's own defaults, where leaving a flag out means "the default" (--image-tokens)
RECIPE_DEFAULTS = {f.name: f.default for f in fields(RecipeConfig) if f.default is not MISSING}
_RECIPE_BY_NAME = {flag.name: flag for flag in RECIPE_OPTIONS}
RECIPE_FLAG_HELP = {flag.name: flag.help for flag in RECIPE_OPTIONS}

# How errors name parameters on the command line: the recipe's options by their flags (a
# Recipe keyword without a flag keeps its Python name), and the other flags commands share.
FLAGS = Spelling(
    "cli",
    {
        **{flag.name: flag.decls[0] for flag in RECIPE_OPTIONS},
        "template_vars": "--template-var",
        "workers": "--workers",
        "max_bad_fraction": "--max-bad-fraction",
        "balance": "--balance",
        "cost": "--cost",
    },
    assign=" ",
    quote=False,
)

CACHE_DIR = typer.Option(
    None, "--cache-dir", help="Index cache (default $CHUTE_CACHE_DIR or ~/.cache/chute)."
)


def parse_pairs(text: str | Iterable[str] | None, option: str) -> dict[str, str]:
    """``"a=b,c=d"`` -> ``{"a": "b", "c": "d"}``; a flag given several times, all of them.

    Example:
        >>> parse_pairs("prompt=q,response=a", "--columns")
        {'prompt': 'q', 'response': 'a'}
        >>> parse_pairs(["prompt=q", "response=a"], "--columns")  # --columns twice
        {'prompt': 'q', 'response': 'a'}
    """
    if not text:
        return {}
    if not isinstance(text, str):
        return {k: v for part in text for k, v in parse_pairs(part, option).items()}
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(
                f"{option}: expected key=value pairs separated by commas, got {item!r}"
            )
        out[key.strip()] = value.strip()
    return out


def parse_template_vars(items: Iterable[str]) -> dict[str, Any]:
    """``--template-var`` values (``KEY=VALUE``) as template variables.

    A value reads as a YAML scalar (``true``, ``3``, ``null``); anything else, a date included,
    stays the text given.

    Example:
        >>> parse_template_vars(["enable_thinking=false", "date_string=2024-07-26"])
        {'enable_thinking': False, 'date_string': '2024-07-26'}
    """
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ConfigError(
                f"--template-var: expected KEY=VALUE with KEY a variable name, got {item!r}"
            )
        try:
            parsed = yaml.safe_load(text) if text.strip() else text
        except yaml.YAMLError:
            parsed = text
        scalar = parsed is None or isinstance(parsed, bool | int | float | str)
        out[name] = parsed if scalar else text
    return out


class RecipeArgs:
    """The recipe flags of one command line, and the ``Recipe`` they describe.

    Its attributes are the flags of ``RECIPE_OPTIONS`` (``args.max_length``), each the flag's
    default unless given; the flags come from ``RecipeConfig``'s declarations.

    Example:
        >>> args = RecipeArgs(template="chatml", system="Be brief.")
        >>> args.given()
        {'--template': 'chatml', '--system': 'Be brief.'}
        >>> args.refuse_without_tokenizer("leave them out")
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: --template, --system need --tokenizer (they configure the recipe); pass --tokenizer, or leave them out
    """

    __slots__ = ("_values",)

    def __init__(self, **values: Any):
        unknown = sorted(set(values) - set(_RECIPE_BY_NAME))
        if unknown:
            raise TypeError(f"unknown recipe flags: {unknown}")
        merged = {flag.name: values.get(flag.name, flag.default) for flag in RECIPE_OPTIONS}
        object.__setattr__(self, "_values", merged)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not a flag (and no recursion before _values is set)
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RecipeArgs is frozen: {name} cannot be set")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecipeArgs) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self._values.items())))

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self._values.items() if v is not None)
        return f"RecipeArgs({given})"

    def given(self, *, ignore: Iterable[str] = ()) -> dict[str, Any]:
        """``{flag: value}`` of every flag but ``--tokenizer`` set (not left out, not default)."""
        skip = {"tokenizer", *ignore}
        return {
            flag.decls[0]: getattr(self, flag.name)
            for flag in RECIPE_OPTIONS
            if flag.name not in skip
            and getattr(self, flag.name) not in (None, [], ())
            and getattr(self, flag.name) != flag.default
        }

    def refuse_without_tokenizer(self, instead: str, *, ignore: Iterable[str] = ()) -> None:
        """Raise ``ConfigError`` when recipe flags are set but ``--tokenizer`` is not.

        They configure a recipe, which needs a tokenizer; ``instead`` says what the command
        does without one.
        """
        if self.tokenizer is not None:
            return
        named = self.given(ignore=ignore)
        if named:
            raise ConfigError(
                f"{', '.join(named)} need --tokenizer (they configure the recipe); pass "
                f"--tokenizer, or {instead}"
            )

    def keywords(self) -> dict[str, Any]:
        """The ``Recipe`` keywords these flags set (``--tokenizer`` included, when given).

        Example:
            >>> RecipeArgs(image_tokens="576", template_vars=["enable_thinking=false"]).keywords()[
            ...     "template_vars"]
            {'enable_thinking': False}
        """
        return {flag.name: _parsed(flag, self._values[flag.name]) for flag in RECIPE_OPTIONS}

    def build(self, **overrides: Any) -> Any:
        """The ``Recipe`` these flags describe (``overrides`` replace recipe keywords)."""
        from chute.recipe import Recipe

        if self.tokenizer is None:
            raise ConfigError("--tokenizer is required to build a recipe")
        return Recipe(**{**self.keywords(), **overrides})


def _parsed(flag: _Flag, value: Any) -> Any:
    """A flag's value as the ``Recipe`` keyword (``CliFlag.parse`` says how)."""
    if flag.parse == "pairs":
        return parse_pairs(value, flag.decls[0])
    if flag.parse == "template_vars":
        return parse_template_vars(value or ())
    if flag.parse == "list":
        return list(value or ())
    if flag.parse == "or_default":
        return value or RECIPE_DEFAULTS[flag.name]
    if flag.name == "format":
        return value or "auto"  # a command whose --format defaults to None (validate)
    return value


@dataclass(frozen=True)
class OutputArgs:
    """``--json`` and ``--quiet``: what a command prints and whether it shows progress."""

    as_json: bool = False
    quiet: bool = False

    @property
    def progress(self) -> bool:
        """Progress bars only for people: not with ``--json`` or ``--quiet``."""
        return not (self.as_json or self.quiet)


_OUTPUT_FLAGS = (
    _Flag("as_json", bool, False, ("--json",), "Print one JSON object."),
    _Flag("quiet", bool, False, ("--quiet", "-q"), "No progress bar."),
)


def _with_group(
    flags: Iterable[_Flag],
    build: Callable[[dict[str, Any]], Any],
    into: str,
    helps: Mapping[str, str],
    defaults: Mapping[str, Any],
    panel: str,
) -> Callable[[F], F]:
    """Replace the command's ``into`` parameter by ``flags``; call it with ``build(values)``."""
    flags = tuple(flags)

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        if into not in signature.parameters:
            raise TypeError(f"{command.__name__} needs a keyword parameter {into!r}")
        kept = [p for name, p in signature.parameters.items() if name != into]
        added = [
            inspect.Parameter(
                flag.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=flag.option(helps.get(flag.name), defaults.get(flag.name, ...), panel),
                annotation=flag.annotation,
            )
            for flag in flags
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            values = {
                flag.name: kwargs.pop(flag.name, defaults.get(flag.name, flag.default))
                for flag in flags
            }
            return command(*args, **kwargs, **{into: build(values)})

        run.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return decorate


def recipe_options(
    *,
    exclude: Iterable[str] = (),
    help: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Callable[[F], F]:
    """Add the recipe flags to a command, passed to it as ``recipe: RecipeArgs``.

    Args:
        exclude: flags the command declares itself or does not take (by parameter name, e.g.
            ``"max_length"``); they keep ``RecipeArgs``' defaults.
        help: per-command help texts, by parameter name.
        defaults: per-command defaults, by parameter name (e.g. ``format=None`` where leaving
            ``--format`` out means something of its own).
    """
    excluded = set(exclude)
    unknown = (excluded | set(help or {}) | set(defaults or {})) - set(_RECIPE_BY_NAME)
    if unknown:
        raise TypeError(f"unknown recipe options: {sorted(unknown)}")
    flags = [flag for flag in RECIPE_OPTIONS if flag.name not in excluded]
    return _with_group(
        flags, lambda values: RecipeArgs(**values), "recipe", help or {}, defaults or {}, "Recipe"
    )


def output_options(command: F) -> F:
    """Add ``--json`` and ``--quiet`` to a command, passed to it as ``output: OutputArgs``.

    With either, every step the command runs reports no progress (``silenced``).
    """

    @functools.wraps(command)
    def run(*args: Any, output: OutputArgs, **kwargs: Any) -> Any:
        with silenced(not output.progress):
            return command(*args, output=output, **kwargs)

    run.__signature__ = inspect.signature(command)  # type: ignore[attr-defined]
    group = _with_group(
        _OUTPUT_FLAGS, lambda values: OutputArgs(**values), "output", {}, {}, "Output"
    )
    return group(run)  # type: ignore[return-value]
