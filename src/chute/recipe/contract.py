"""What a recipe provides to the layers above it: the ``RecipeContract``.

Plans, lengths, the cache and collate decide behaviour from a few facts about the recipe that
made the samples: what kind of samples they are (``task``), whether long ones become windows
(``overflow``, ``max_length``, ``stride``), which media rule counted their tokens (``media``),
and what shaped them (``fingerprint``, the cache key). ``RecipeContract`` lists them; a recipe
enters the pipeline through ``as_recipe``, which checks it once, so nothing above reads a
recipe through ``getattr(recipe, ..., None)`` and silently takes a default.

``Recipe`` (and a mixture's recipe) satisfy the contract. A plain function is an SFT recipe
without a length limit or media: ``as_recipe`` wraps it in ``PlainRecipe``, which says so; a
callable declaring some of the contract (``max_length = 6``) keeps what it declares. One whose
declarations need what it leaves out (``overflow="split"`` without ``max_length``) is refused
with a ``ConfigError`` naming what is missing: that is how windows were lost.

Example:
    >>> def upper(record):
    ...     return {"input_ids": [1, 2], "labels": [1, 2]}
    >>> plain = as_recipe(upper)
    >>> plain.task, plain.overflow, plain.max_length, plain.media
    ('sft', 'truncate', None, None)
    >>> class Half:
    ...     overflow = "split"
    ...     def __call__(self, record):
    ...         return record
    >>> as_recipe(Half())
    Traceback (most recent call last):
    ...
    chute.errors.ConfigError: recipe: Half declares overflow='split' without max_length (the windows' length): chute.recipe.contract.RecipeContract lists what a recipe provides; declare the missing values (subclass RecipeBase for the defaults)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from chute.errors import ConfigError, SampleError
from chute.media.refs import MediaPlan
from chute.recipe.choices import OVERFLOW, TASKS

__all__ = ["CONTRACT", "PlainRecipe", "RecipeBase", "RecipeContract", "as_recipe"]

# What decides behaviour above the recipe: read once from a callable of one's own.
CONTRACT = ("max_length", "media", "overflow", "stride", "task")


@runtime_checkable
class RecipeContract(Protocol):
    """What plans, lengths, the cache and collate read from a recipe.

    Attributes:
        task: ``sft`` (one sequence), ``preference`` (chosen + rejected: pair plans and
            collates) or ``kto`` (one sequence and a ``label``).
        overflow: ``truncate``, ``drop`` or ``split`` (each record's windows are samples of
            their own: lengths and plans deal window ids).
        max_length: the longest sample in tokens (packed rows and token budgets default to
            it), or ``None``.
        stride: with ``split``, tokens each window repeats from the one before.
        media: the ``MediaPlan`` that counted image/video/audio tokens (the media stage and
            positions follow its rule), or ``None``: the recipe never makes media.
        tokenizer: the tokenizer (batches are padded with its pad id), or ``None``.
    """

    task: str
    overflow: str
    max_length: int | None
    stride: int
    media: MediaPlan | None
    tokenizer: Any

    def __call__(self, record: Any) -> dict[str, Any]:
        """One record's sample; a bad record raises ``SampleError``."""
        ...

    def batch(self, records: Iterable[Any]) -> list[dict[str, Any] | SampleError]:
        """Many records' samples, a bad one's ``SampleError`` in its place."""
        ...

    def fingerprint(self) -> dict[str, Any] | None:
        """Everything that shapes the samples (JSON-able), or ``None``: nothing is cached."""
        ...


class RecipeBase:
    """The contract's defaults for a recipe class of your own: subclass and override.

    An SFT recipe without a length limit or media, not cached (``fingerprint`` is ``None``),
    whose ``batch`` calls it once per record.

    Example:
        >>> class Ids(RecipeBase):
        ...     max_length = 8
        ...     def __call__(self, record):
        ...         return {"input_ids": record["ids"][: self.max_length]}
        >>> as_recipe(Ids()).max_length
        8
    """

    task: str = "sft"
    overflow: str = "truncate"
    max_length: int | None = None
    stride: int = 0
    media: MediaPlan | None = None
    tokenizer: Any = None

    def __call__(self, record: Any) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} must define __call__(record)")

    def batch(self, records: Iterable[Any]) -> list[dict[str, Any] | SampleError]:
        out: list[dict[str, Any] | SampleError] = []
        for record in records:
            try:
                out.append(self(record))
            except SampleError as exc:
                out.append(exc.with_traceback(None))
        return out

    def fingerprint(self) -> dict[str, Any] | None:
        return None


class PlainRecipe(RecipeBase):
    """A callable of one's own read as a recipe: by default SFT, no length limit, no media.

    Its ``fingerprint`` (cached lengths), ``batch`` and ``tokenizer`` (the pad id) are the
    function's own when it has them.
    """

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn
        self.tokenizer = getattr(fn, "tokenizer", None)  # read once, here at the entry

    def __call__(self, record: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.fn(record)
        return result

    def batch(self, records: Iterable[Any]) -> list[dict[str, Any] | SampleError]:
        own = getattr(self.fn, "batch", None)
        return list(own(list(records))) if callable(own) else super().batch(records)

    def fingerprint(self) -> dict[str, Any] | None:
        own = getattr(self.fn, "fingerprint", None)
        return own() if callable(own) else None

    def __repr__(self) -> str:
        return f"PlainRecipe({self.fn!r})"


def as_recipe(recipe: Any) -> RecipeContract | None:
    """``recipe`` checked against the contract (a callable of one's own wrapped as ``PlainRecipe``).

    ``None`` stays ``None`` (the records are samples already). A callable that declares part of
    the contract keeps what it declares (read once, here) and the defaults for the rest, unless
    what it declares needs what it leaves out.

    Raises:
        ConfigError: ``recipe`` is not callable, declares a value the contract does not allow,
            or declares ``overflow="split"`` without ``max_length`` (its windows would be lost).
    """
    if recipe is None:
        return None
    if isinstance(recipe, RecipeContract):  # a Recipe, a mixture's recipe, a RecipeBase
        _check_values(recipe, recipe)
        return recipe
    if not callable(recipe):
        raise ConfigError(
            f"expected a Recipe, a callable record -> sample, or None; got {type(recipe).__name__}",
            param="recipe",
        )
    plain = PlainRecipe(recipe)
    declared = {name: getattr(recipe, name) for name in CONTRACT if hasattr(recipe, name)}
    for name, value in declared.items():
        setattr(plain, name, value)
    _check_values(plain, recipe)
    return plain


def _check_values(plain: RecipeContract, recipe: Any) -> None:
    """Refuse contract values that are not allowed, or that need what was left out."""
    problems = []
    if plain.task not in TASKS:
        problems.append(f"task={plain.task!r} (one of {', '.join(TASKS)})")
    if plain.overflow not in OVERFLOW:
        problems.append(f"overflow={plain.overflow!r} (one of {', '.join(OVERFLOW)})")
    if plain.overflow == "split" and plain.max_length is None:
        problems.append("overflow='split' without max_length (the windows' length)")
    if plain.media is not None and not isinstance(plain.media, MediaPlan):
        problems.append(f"media={plain.media!r} (a MediaPlan or None)")
    if problems:
        raise ConfigError(
            f"recipe: {type(recipe).__name__} declares {'; '.join(problems)}: "
            f"chute.recipe.contract.RecipeContract lists what a recipe provides; declare the "
            f"missing values (subclass RecipeBase for the defaults)"
        )
