r"""Preference records: a prompt with a chosen and a rejected response, or one labelled response.

Every shape people use is read into two conversations that share their prompt (DPO, ORPO,
reward models), or one conversation and a desirability label (KTO's unpaired form). Each side is
built as an ordinary SFT record (the prompt plus that response) and read by the SFT adapter of
its shape, so roles, system prompts, tools, loss flags and media placeholders follow the same
rules as everywhere else.

=========================================================  ===================================
record                                                     read as
=========================================================  ===================================
``{"conversations": [...], "chosen": {from, value},``      LLaMA-Factory ShareGPT ranking
``"rejected": {from, value}}``                             (``messages`` + role/content dicts too)
``{"instruction", "input"?, "chosen": str,``               LLaMA-Factory alpaca ranking
``"rejected": str}``
``{"chosen_messages": [...], "rejected_messages": [...]}`` LLaMA-Factory v1 (whole conversations)
``{"prompt": str, "chosen": str, "rejected": str}``        TRL, standard
``{"prompt": [msgs], "chosen": [msgs], "rejected": [...]}`` TRL, conversational
``{"chosen": [msgs], "rejected": [msgs]}``                 TRL, implicit prompt (shared prefix)
``{"prompt", "completion", "label": bool}``                TRL unpaired (KTO), standard or
                                                           conversational
``{"messages": [...], "label": bool}``                     LLaMA-Factory KTO (last turn rated)
=========================================================  ===================================

Keys are remapped with ``columns={"chosen": ..., "rejected": ..., "kto_tag": ...}`` (the names of
LLaMA-Factory's ``dataset_info.json``).

Example:
    >>> from chute.formats import FormatReader, FormatSpec
    >>> pair = read_pair({"instruction": "2+2?", "chosen": "4", "rejected": "5"},
    ...                  FormatReader(FormatSpec("auto")))
    >>> [m.content for m in pair.chosen], pair.responses
    (['2+2?', '4'], (1, 1))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from chute._internal.spelling import spell
from chute.errors import SampleError
from chute.formats.chat import _json_type
from chute.formats.spec import lookup
from chute.sample.conversation import Conversation

__all__ = ["KTO_KEYS", "PAIR_KEYS", "Pair", "Rated", "read_pair", "read_rated"]

# Default keys of the preference columns (the first one present wins).
PAIR_KEYS = {"chosen": ("chosen", "chosen_messages"), "rejected": ("rejected", "rejected_messages")}
KTO_KEYS = ("label", "kto_tag")
_MESSAGE_KEYS = ("conversations", "messages")


@dataclass
class Pair:
    """The two conversations of a preference record.

    The last ``responses[i]`` messages of each are its response; the messages before are the
    shared prompt.
    """

    chosen: Conversation
    rejected: Conversation
    responses: tuple[int, int]


@dataclass
class Rated:
    """One conversation whose last ``response`` messages are rated ``label`` (KTO)."""

    conversation: Conversation
    response: int
    label: bool


def _columns(reader: Any, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    given = reader.spec.columns.get(name)
    return (given,) if given else default


def read_pair(data: Any, reader: Any) -> Pair:
    """The chosen and rejected conversations of a preference record (see the module table).

    Args:
        data: the parsed record.
        reader: the recipe's ``FormatReader`` (its spec's format and columns apply).

    Raises:
        SampleError: ``missing_field`` (no chosen/rejected), ``wrong_type``, and whatever the
            SFT adapter raises for either side (``bad_role_order``, ...).
    """
    if not isinstance(data, dict):
        raise SampleError(
            "wrong_type", f"a preference record is a JSON object, got {_json_type(data)}"
        )
    found = []
    for name in ("chosen", "rejected"):
        value, key = lookup(data, _columns(reader, name, PAIR_KEYS[name]))
        if key is None or value is None:
            raise SampleError(
                "missing_field",
                f"a preference record needs a {name!r} response (keys present: "
                f"{', '.join(sorted(data)) or 'none'}); remap it with {spell('columns')} ({name}=...)",
                field=PAIR_KEYS[name][0],
            )
        found.append((value, key))
    (chosen, ckey), (rejected, rkey) = found
    rest = {k: v for k, v in data.items() if k not in (ckey, rkey)}
    if isinstance(chosen, str) and isinstance(rejected, str) and not _has_prompt(rest, reader):
        raise SampleError(
            "missing_field",
            f"a preference record with text {ckey!r} and {rkey!r} responses needs its prompt "
            f"apart ('prompt', 'instruction' or messages; keys present: "
            f"{', '.join(sorted(data))}); two whole texts that each begin with the prompt "
            f"(TRL's implicit prompt over text) are not split: remap it with "
            f"{spell('columns')} (prompt=...)",
            field="prompt",
        )
    if isinstance(chosen, list) and isinstance(rejected, list) and not _has_prompt(rest, reader):
        # Whole conversations (TRL's implicit prompt, LLaMA-Factory v1): the prompt is their
        # longest common prefix, as TRL's extract_prompt takes it.
        shared = 0
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        if shared == 0 and chosen and rejected:
            # no prompt: the sides answer different conversations (TRL's extract_prompt finds
            # none and fails); trained whole, each side's prompt would be its "response"
            raise SampleError(
                "no_shared_prompt",
                f"the {ckey!r} and {rkey!r} conversations differ from their first message: "
                f"a pair answers one prompt, which both sides begin with",
                field=ckey,
            )
        rest[_message_key(rest, reader)] = chosen[:shared]
        chosen, rejected = chosen[shared:], rejected[shared:]
    c_conv, c_n = _conversation(rest, chosen, ckey, reader)
    r_conv, r_n = _conversation(rest, rejected, rkey, reader)
    return Pair(c_conv, r_conv, (c_n, r_n))


def read_rated(data: Any, reader: Any) -> Rated:
    """The conversation and label of an unpaired preference (KTO) record.

    Raises:
        SampleError: ``missing_field`` (no label), ``wrong_type`` (a label that is not a
            boolean), and the SFT adapter's kinds.
    """
    if not isinstance(data, dict):
        raise SampleError("wrong_type", f"a KTO record is a JSON object, got {_json_type(data)}")
    label, key = lookup(data, _columns(reader, "kto_tag", KTO_KEYS))
    if key is None:
        raise SampleError(
            "missing_field",
            f"an unpaired preference (KTO) record needs a boolean 'label' (keys present: "
            f"{', '.join(sorted(data)) or 'none'}); remap it with {spell('columns')} (kto_tag=...)",
            field=KTO_KEYS[0],
        )
    if not isinstance(label, bool):
        raise SampleError(
            "wrong_type", f"expected true or false, got {_json_type(label)}", field=key
        )
    rest = {k: v for k, v in data.items() if k != key}
    if "completion" in rest and not isinstance(rest["completion"], str):
        completion = rest.pop("completion")  # TRL conversational: messages
        conv, n = _conversation(rest, completion, "completion", reader)
    else:
        # a whole record (LLaMA-Factory: messages; TRL standard: prompt + completion): the last
        # message is the rated response
        conv, n = _read(rest, reader, "completion"), 1
    last = conv.messages[-1].role
    if last != "assistant":  # a user's text would be trained as the rated answer
        raise SampleError(
            "bad_role_order",
            f"the rated response is the last message, and it is a {last!r} one: a KTO record "
            f"ends with the assistant's answer",
            field="completion",
        )
    return Rated(conv, n, label)


def _has_prompt(rest: dict[str, Any], reader: Any) -> bool:
    columns = reader.spec.columns
    keys = [columns[k] for k in ("prompt", "messages") if k in columns]
    return lookup(rest, (*keys, "prompt", "instruction", *_MESSAGE_KEYS))[1] is not None


def _message_key(rest: dict[str, Any], reader: Any) -> str:
    """The key the SFT adapter reads messages from."""
    if reader.spec.name != "auto":
        keys = reader.resolved(reader.spec.name).columns.get("messages")
        if keys:
            return str(keys[0])
    return "conversations" if "conversations" in rest else "messages"


def _conversation(
    rest: dict[str, Any], response: Any, field: str, reader: Any
) -> tuple[Conversation, int]:
    """The prompt plus ``response`` read as an SFT record, and how many messages the response is."""
    single = isinstance(response, dict)
    if single:  # LLaMA-Factory ranking: one message
        response = [response]
    key = _message_key(rest, reader)
    prompt = rest.get(key)
    if isinstance(response, list):
        if not response:
            raise SampleError("empty_conversation", f"the {field} response is empty", field=field)
        if prompt is None:
            text, tkey = lookup(rest, ("prompt",))
            if tkey is not None and not isinstance(text, str | list):
                raise SampleError(
                    "wrong_type", f"expected text or messages, got {_json_type(text)}", field=tkey
                )
            prompt = [{"role": "user", "content": text}] if isinstance(text, str) else text or []
        if not isinstance(prompt, list):
            raise SampleError(
                "wrong_type", f"expected a list of messages, got {_json_type(prompt)}", field=key
            )
        record = {k: v for k, v in rest.items() if k != "prompt"}
        record[key] = [*prompt, *response]
        try:
            return _read(record, reader, field), len(response)
        except SampleError as exc:
            raise _named_in_response(exc, key, len(prompt), field, single) from None
    if not isinstance(response, str):
        raise SampleError(
            "wrong_type", f"expected text or messages, got {_json_type(response)}", field=field
        )
    record = dict(rest)
    if isinstance(prompt, list):  # a message list prompt and a text response
        style = prompt[0] if prompt and isinstance(prompt[0], dict) else {}
        role, content = ("from", "value") if "from" in style else ("role", "content")
        record[key] = [*prompt, {role: "assistant", content: response}]
        return _read(record, reader, field), 1
    fmt = reader.spec.name
    if fmt == "auto":
        fmt = "alpaca" if "instruction" in rest else "prompt_completion"
    keys = reader.resolved(fmt).columns.get("response")
    if not keys:
        raise SampleError(
            "wrong_type",
            f"a text {field} response needs a prompt: 'instruction' (alpaca), 'prompt' (TRL) "
            f"or a message list",
            field=field,
        )
    record[keys[0]] = response
    return _read(record, reader, field), 1


def _named_in_response(
    exc: SampleError, key: str, prompt: int, field: str, single: bool
) -> SampleError:
    """``exc`` naming the response's own field where it was found in the response's messages.

    The sides are read as the prompt's messages plus the response (``conversations[1].value``
    is the response's ``value`` when the prompt holds one message): the record has no such
    field, so the error names the one it has (``chosen.value``, ``chosen[0].value``).
    """
    match = re.fullmatch(rf"{re.escape(key)}\[(\d+)\](.*)", exc.field or "")
    if match is None or int(match[1]) < prompt:
        return exc
    k, rest = int(match[1]) - prompt, match[2]
    named = f"{field}{rest}" if single else f"{field}[{k}]{rest}"
    return SampleError(exc.kind, exc.message, path=exc.path, line=exc.line, field=named)


def _read(record: dict[str, Any], reader: Any, field: str) -> Conversation:
    try:
        return reader(record)
    except SampleError as exc:
        if exc.field is None:
            exc.field = field
        raise
