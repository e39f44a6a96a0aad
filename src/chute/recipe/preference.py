r"""Preference samples: a chosen and a rejected sequence sharing their prompt, or a rated one.

``Recipe(task="preference")`` turns a record into one sample holding both sequences back to
back, ``chosen_length`` marking where the rejected one starts, so every guarantee that works on
samples (lengths, plans, the cache, exact-once, resume, rejects) works on pairs unchanged::

    input_ids     [ p p p p c c c | p p p p r r ]        chosen_length = 7
    labels        [ - - - - c c c | - - - - r r ]        - is -100: the prompt is not trained
                    chosen          rejected

What is trained is what TRL's ``DPOTrainer`` and LLaMA-Factory train: everything the template
writes after the prompt (the prompt rendered up to the assistant's generation header), through
the end of the text: the response, its end-of-turn token and what the template adds after it.
Exactly as TRL, the response starts where the prompt's own encoding and the whole sequence's
diverge, the same token for both sides (``train_after_prompt``, ``share_prompt``).
``pair_sides(sample)`` gives the two sequences; ``PreferenceCollate`` pads them per batch.

``max_length`` applies to each side with the same policy, and the pair stays one unit: with
``overflow="drop"`` the pair is dropped when either side is too long; truncation cuts both sides
the same way (``turns`` drops the same earliest exchanges of the shared prompt from both); a pair
with either side left without a trained token is rejected (``no_trainable_tokens``), as TRL drops
a pair whose prompt alone fills ``max_length``.

``Recipe(task="kto")`` (TRL's unpaired preference) makes an ordinary sample of the prompt and its
completion, trained after the prompt as above, plus ``label`` (``True``: desirable).

Example:
    >>> import numpy as np
    >>> sample = {"input_ids": np.arange(6), "labels": np.arange(6), "chosen_length": 4}
    >>> [(k, v.tolist()) for k, v in pair_sides(sample)[1].items()]
    [('input_ids', [4, 5]), ('labels', [4, 5])]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from chute.errors import SampleError
from chute.recipe.choices import TASKS
from chute.recipe.encode import IGNORE, Encoded
from chute.sample.conversation import Conversation
from chute.templates import Rendered

__all__ = [
    "TASKS",
    "mark_response",
    "pair_sample",
    "pair_sides",
    "prompt_media",
    "response_rendered",
    "share_prompt",
    "train_after_prompt",
]


def mark_response(conv: Conversation, response: int) -> Conversation:
    """``conv`` with its prompt masked and its last ``response`` messages trained (in place)."""
    cut = len(conv.messages) - response
    for i, message in enumerate(conv.messages):
        message.loss = i >= cut
    return conv


def response_rendered(rendered: Rendered, media_tokens: Mapping[str, str]) -> Rendered:
    """Everything from the first trained character to the end is trained (TRL's rule).

    Media stay where they are, but only in the prompt: both sides of a pair show the same
    images, which are decoded once per pair.

    Raises:
        SampleError: ``media_in_response``: a media item after the prompt.
    """
    if not rendered.spans:
        return rendered
    start = rendered.spans[0][0]
    if len(rendered.media) > prompt_media(rendered.text[:start], media_tokens):
        raise SampleError(
            "media_in_response",
            f"a response holds media ({', '.join(p.kind for p in rendered.media)} in the "
            f"conversation); in preference and KTO data the images belong to the prompt, "
            f"which both sides share",
        )
    return Rendered(rendered.text, [(start, len(rendered.text))], rendered.media)


def prompt_media(prompt: str, media_tokens: Mapping[str, str]) -> int:
    """How many media items the prompt text holds (each is one media token in the text)."""
    return sum(prompt.count(token) for token in set(media_tokens.values()))


def train_after_prompt(enc: Encoded, prompt_ids: list[int]) -> Encoded:
    """Train from where ``enc`` stops agreeing with the prompt's own encoding, to the end.

    That is TRL's rule: the completion starts where the tokenized prompt and the tokenized
    prompt + completion diverge (``" III"`` alone, ``" II" "IS" "ure"`` before ``"Sure"``: the
    completion starts at ``" II"``), which is the prompt's end unless tokens merge across it.
    """
    ids = enc.ids
    n = min(len(prompt_ids), len(ids))
    same = np.asarray(prompt_ids[:n], dtype=np.int64) == ids[:n]
    first = n if same.all() else int(np.argmin(same))
    enc.labels[:first] = IGNORE
    enc.labels[first:] = ids[first:]
    enc.first = None  # labels changed: read from them again
    return enc


def share_prompt(chosen: Encoded, rejected: Encoded) -> tuple[Encoded, Encoded]:
    """Both sides trained from the same token: where the earlier of the two responses starts.

    A token can merge across the end of the prompt on one side only; TRL takes the shorter
    prompt for both sides (the shared prompt is what both tokenizations agree on), so does chute.
    """
    starts = [int(np.argmax(e.labels != IGNORE)) for e in (chosen, rejected) if _trained(e)]
    if not starts:
        return chosen, rejected
    first = min(starts)
    for e in (chosen, rejected):
        e.labels[first:] = np.where(e.labels[first:] == IGNORE, e.ids[first:], e.labels[first:])
        e.first = None  # labels changed: read from them again
    return chosen, rejected


def _trained(enc: Encoded) -> bool:
    return bool((enc.labels != IGNORE).any())


def pair_sample(chosen: Encoded, rejected: Encoded) -> dict[str, Any]:
    """The sample of a pair: both sequences back to back, ``chosen_length`` between them.

    Media (always in the shared prompt) are listed once, as the chosen side has them, each
    with ``rejected_span``: where its tokens lie in the rejected side (in the pair's
    ``input_ids``). The media stage decodes each item once and checks both spans.

    Raises:
        SampleError: ``too_long`` when truncation left the two sides different media.
    """
    k = len(chosen.ids)
    if [_media_key(m) for m in chosen.media] != [_media_key(m) for m in rejected.media]:
        raise SampleError(
            "too_long",
            f"the pair's two sides keep different media after max_length cut them "
            f"({len(chosen.media)} and {len(rejected.media)} items); raise max_length",
        )
    kinds: dict[str, list[dict[str, Any]]] = {"image": [], "video": [], "audio": []}
    for mine, theirs in zip(chosen.media, rejected.media, strict=True):
        item = {key: value for key, value in mine.items() if key != "kind"}
        item["rejected_span"] = [theirs["span"][0] + k, theirs["span"][1] + k]
        kinds[mine["kind"]].append(item)
    return {
        "input_ids": np.concatenate([chosen.ids, rejected.ids]),
        "labels": np.concatenate([chosen.labels, rejected.labels]),
        "length": len(chosen.ids) + len(rejected.ids),
        "chosen_length": k,
        "images": kinds["image"],
        "videos": kinds["video"],
        "audios": kinds["audio"],
        "num_image_tokens": 2 * sum(int(m["num_tokens"]) for m in kinds["image"]),
        "truncated": chosen.truncated or rejected.truncated,
    }


def _media_key(item: Mapping[str, Any]) -> tuple[Any, ...]:
    return item["kind"], item.get("path"), item["span"][1] - item["span"][0]


def pair_sides(sample: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(chosen, rejected)``: each side's ``input_ids`` and ``labels`` (views, no copies).

    With media, each side gets ``images`` / ``videos`` / ``audios`` with its own ``span`` (the
    same items, so a model sees the same pixels for both), and the media stage's outputs
    (``pixel_values``, ``image_grid_thw``, ...) are given to both sides.
    """
    k = int(sample["chosen_length"])
    ids = sample["input_ids"]
    labels = sample.get("labels")
    if labels is None:
        labels = ids
    chosen: dict[str, Any] = {"input_ids": ids[:k], "labels": labels[:k]}
    rejected: dict[str, Any] = {"input_ids": ids[k:], "labels": labels[k:]}
    for key in MEDIA_REFS:
        refs = sample.get(key)
        if not refs:
            continue
        chosen[key] = refs
        rejected[key] = [
            {**ref, "span": [ref["rejected_span"][0] - k, ref["rejected_span"][1] - k]}
            for ref in refs
        ]
    for key in MEDIA_OUTPUTS:
        if key in sample:
            chosen[key] = rejected[key] = sample[key]
    return chosen, rejected


# Where a sample lists its media, and what the media stage adds for them.
MEDIA_REFS = ("images", "videos", "audios")
MEDIA_OUTPUTS = (
    "pixel_values",
    "image_grid_thw",
    "image_sizes",
    "pixel_values_videos",
    "video_grid_thw",
    "second_per_grid_ts",
    "audio_values",
)
