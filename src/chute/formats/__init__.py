"""Format adapters: one record shape into one canonical ``Conversation``.

``to_conversation(data, spec)`` converts a parsed record; ``detect_format(data)`` names the
format of one record from its keys; ``sniff_format(records)`` names the format of a dataset from
its first records (and refuses a mix). With ``FormatSpec("auto")`` every record is detected on
its own, which is a pure function of the record, so all workers agree.

Detection, in order (the first rule that matches wins):

====================================================  ==================
record                                                format
====================================================  ==================
a list of ``{role, content}`` objects                 messages (bare list)
has ``messages``                                      messages
``conversations``, ``<img>..</img>`` in a user turn   qwen_vl (no ``image(s)`` list)
has ``conversations`` and ``image``                   llava
has ``conversations``                                 sharegpt
has ``instruction``                                   alpaca
has ``prompt`` and ``completion``                     prompt_completion
has ``text``                                          text
====================================================  ==================

Example:
    >>> detect_format({"instruction": "Say hi", "output": "hi"})
    'alpaca'
    >>> conv = to_conversation({"text": "A document."}, FormatSpec("auto"))
    >>> conv.kind
    'text'
"""

from chute.formats.reader import (
    FORMAT_NAMES,
    FormatReader,
    FormatSpec,
    detect_format,
    sniff_format,
    to_conversation,
)

__all__ = [
    "FORMAT_NAMES",
    "FormatReader",
    "FormatSpec",
    "detect_format",
    "sniff_format",
    "to_conversation",
]
