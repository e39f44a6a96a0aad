"""One strategy per kind of sample a ``Recipe`` makes: SFT, preference pairs, rated completions.

The ``task`` option picks the strategy once, when the recipe is built; the recipe's pipeline
then asks it for each record's sample instead of branching on the task's name::

    task="sft"         SftTask         one sequence (windows of it with overflow="split")
    task="preference"  PreferenceTask  chosen + rejected sharing the prompt (chute.recipe.preference)
    task="kto"         KtoTask         one completion trained after its prompt, and its ``label``

A strategy reads the recipe's parts (reader, template, encoder, ``max_length`` fit) and owns
only what differs between tasks.

Example:
    >>> TASK_STRATEGIES["preference"].batched, TASK_STRATEGIES["sft"].batched
    (False, True)
"""

from __future__ import annotations

from typing import Any, ClassVar

from chute.formats.preference import read_pair, read_rated
from chute.recipe.encode import Encoded, fit_length
from chute.recipe.preference import TASKS, mark_response, pair_sample, share_prompt
from chute.recipe.truncate import drop_exchanges
from chute.sample.conversation import Conversation

__all__ = ["TASK_STRATEGIES", "KtoTask", "PreferenceTask", "SftTask", "TaskStrategy"]

SIDES = ("chosen", "rejected")


class TaskStrategy:
    """How one kind of record becomes a sample (``recipe`` is the ``Recipe`` asking).

    Attributes:
        name: the ``task`` value that picks it.
        batched: records are encoded back to back in ``Recipe.batch`` (one conversation per
            record); ``False``: one record at a time (a pair renders several).
        trims_early: the encoder may stop one token past ``max_length`` (``encode(need=)``):
            a single sequence whose end is cut or refused anyway.
    """

    name: ClassVar[str] = ""
    batched: ClassVar[bool] = False
    trims_early: ClassVar[bool] = False

    def sample(
        self,
        recipe: Any,
        data: Any,
        where: tuple[str | None, int | None, int | None],
        window: int | None,
        draw: Any,
    ) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SftTask(TaskStrategy):
    """One sequence per record (instruction data, pretraining text); windows with ``split``."""

    name = "sft"
    batched = True
    trims_early = True

    def sample(
        self,
        recipe: Any,
        data: Any,
        where: tuple[str | None, int | None, int | None],
        window: int | None,
        draw: Any,
    ) -> dict[str, Any]:
        path, line, index = where
        if window is None:
            return recipe._sft_sample(data, path, line, index, draw)
        conv, flip_ok = recipe._placed(data, path, draw)
        sample = recipe._window_sample(conv, window, path, line, index)
        if not flip_ok:
            sample["no_flip"] = True
        return sample


class PreferenceTask(TaskStrategy):
    """A chosen and a rejected sequence sharing the prompt, as one sample (DPO, ORPO, RM)."""

    name = "preference"

    def sample(
        self,
        recipe: Any,
        data: Any,
        where: tuple[str | None, int | None, int | None],
        window: int | None,
        draw: Any,
    ) -> dict[str, Any]:
        path, line, index = where
        pair = read_pair(data, recipe._reader)
        convs = [mark_response(pair.chosen, pair.responses[0])]
        convs.append(mark_response(pair.rejected, pair.responses[1]))
        prompts: dict[str, list[int]] = {}  # both sides' prompt, encoded once

        def encode_both(cs: list[Conversation]) -> tuple[Encoded, Encoded]:
            c, r = (recipe._encode(c, path, s, prompts) for c, s in zip(cs, SIDES, strict=True))
            return share_prompt(c, r)

        sides: tuple[Encoded, ...] = encode_both(convs)
        if recipe._drops_turns(*sides) and recipe.max_length is not None:
            keep = pair.responses[0]
            sides = drop_exchanges(convs, keep, recipe.max_length, encode_both) or sides
        chosen, rejected = (
            fit_length(e, recipe.max_length, recipe.overflow, recipe.truncation) for e in sides
        )
        return {**pair_sample(chosen, rejected), "index": index, "path": path, "line": line}


class KtoTask(TaskStrategy):
    """One completion trained after its prompt, with its desirability ``label`` (TRL's KTO)."""

    name = "kto"

    def sample(
        self,
        recipe: Any,
        data: Any,
        where: tuple[str | None, int | None, int | None],
        window: int | None,
        draw: Any,
    ) -> dict[str, Any]:
        path, line, index = where
        rated = read_rated(data, recipe._reader)
        conv = mark_response(rated.conversation, rated.response)
        enc = recipe._fit(conv, recipe._encode(conv, path, "completion"), path, rated.response)
        return {**recipe._finish(enc, path, line, index), "label": rated.label}


TASK_STRATEGIES: dict[str, TaskStrategy] = {
    s.name: s for s in (SftTask(), PreferenceTask(), KtoTask())
}
if tuple(TASK_STRATEGIES) != TASKS:  # a new task in TASKS needs its strategy here
    raise RuntimeError(f"task strategies {tuple(TASK_STRATEGIES)} do not match TASKS {TASKS}")
