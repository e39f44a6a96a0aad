"""Errors chute raises, the kinds of bad samples, and the tally of rejects.

Two families of errors:

* ``ChuteError`` and its subclasses stop the job: a missing file, a bad argument, a source that
  changed under us, an error budget that ran out. Their messages name the parameter or file,
  the bad value, the constraint and the fix.
* ``SampleError`` marks one bad record. It never stops a job by itself: the loader, ``chute
  validate`` and ``chute preprocess`` catch it, count it by ``kind``, log the first of each kind
  with ``path:line`` and write the record to a rejects file.

Example:
    >>> err = SampleError("missing_field", "no 'output' key", path="a.jsonl", line=3, field="output")
    >>> str(err)
    "a.jsonl:3: missing_field: no 'output' key (field 'output')"
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chute._spelling import spell

__all__ = [
    "SAMPLE_ERROR_KINDS",
    "CacheError",
    "ChunkFailed",
    "ChuteError",
    "ConfigError",
    "ErrorBudgetExceeded",
    "FingerprintMismatch",
    "LoaderTimeout",
    "LockstepError",
    "MissingDependency",
    "RejectTally",
    "RemoteError",
    "SampleError",
    "SourceChanged",
    "SourceError",
    "StateMismatch",
    "as_sample_error",
]


class ChuteError(Exception):
    """Base of the errors that stop a chute job (as opposed to one bad sample)."""


class ConfigError(ChuteError, ValueError):
    """An argument or config value is invalid; the message names it, its value and the fix.

    Args:
        message: what is wrong and the fix. Parameters inside it are written with
            ``chute._spelling`` (``spell``, ``spell_set``), never spelled by hand, so the
            CLI says ``--media-root`` and a config ``recipe.media_root`` where Python says
            ``media_root``.
        param: the parameter at fault (its Python name); the message is then prefixed with it,
            in the current spelling, and ``exc.param`` names it for programs.

    Example:
        >>> str(ConfigError("expected a positive integer, got 0", param="max_length"))
        'max_length: expected a positive integer, got 0'
    """

    def __init__(self, message: str, *, param: str | None = None):
        self.param = param
        super().__init__(f"{spell(param)}: {message}" if param else message)

    def __reduce__(self) -> tuple[Any, ...]:
        # the text is rendered already (in the spelling of the process that raised it)
        return (_rebuild_config_error, (type(self), str(self), self.param))


def _rebuild_config_error(cls: type[ConfigError], text: str, param: str | None) -> ConfigError:
    error = cls(text)
    error.param = param
    return error


class MissingDependency(ChuteError, ImportError):
    """An optional package a feature needs is not installed; the message says how to get it."""


class SourceError(ChuteError):
    """A data file cannot be used as a source: missing, a directory, not JSON lines or array."""


class SourceChanged(SourceError):
    """A data file changed (size, mtime or bytes) while a source over it was open."""


class RemoteError(SourceError):
    """An object in remote storage is missing, refused, or still failing after the retries.

    ``url`` is the object, with any credential masked.
    """

    def __init__(self, message: str, url: str | None = None, missing: bool = False):
        super().__init__(message)
        self.url = url
        self.missing = missing  # the store says there is no such object (not a fault)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.url, self.missing))


class ErrorBudgetExceeded(ChuteError):
    """Too many bad samples: the data is broken enough that training on the rest would mislead."""

    def __init__(self, message: str, tally: RejectTally | None = None):
        super().__init__(message)
        self.tally = tally


class CacheError(ChuteError):
    """A cache directory cannot be used: not a cache, incomplete, damaged, or built elsewhere."""


class ChunkFailed(CacheError):
    """A chunk of ``chute preprocess`` could not be built (a bad record is a counted skip instead).

    The message names the chunk, its records, the record where it failed when one is to blame
    (``path:line``) and the cause; ``chunk`` and ``record`` hold them. Chunks committed before
    stay committed: fix the cause and run the same command again to resume.
    """

    def __init__(self, message: str, chunk: int | None = None, record: str | None = None):
        super().__init__(message)
        self.chunk = chunk
        self.record = record

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.chunk, self.record))


class FingerprintMismatch(CacheError, ValueError):
    """A cache was built from other sources, another recipe or another format version.

    The message names each differing field with both values and the command that rebuilds the
    cache; ``fields`` holds them as ``(dotted.name, cache_value, other_value)``.
    """

    def __init__(self, message: str, fields: list[tuple[str, Any, Any]] | None = None):
        super().__init__(message)
        self.fields = list(fields or [])

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.fields))


class StateMismatch(ChuteError, ValueError):
    """A resume state belongs to another dataset or plan; the message names each difference."""


class LockstepError(ChuteError):
    """Ranks stand at different positions of the stream, so one rank's state cannot resume all."""


class LoaderTimeout(ChuteError):
    """A batch was not ready in time: a sample's processing hangs (or a worker is stuck)."""


# Every kind of bad sample chute knows, with what it means. Later stages (recipes, media) add
# kinds here so that `chute validate`, the loader and the cache all speak the same words.
SAMPLE_ERROR_KINDS: dict[str, str] = {
    "bad_json": "the record is not valid JSON",
    "bad_utf8": "the record's bytes are not valid UTF-8",
    "nul_byte": "the record contains a NUL byte",
    "too_deep": "JSON nesting is deeper than the parser allows",
    "not_an_object": "the record is valid JSON but not an object",
    "empty_record": "a JSON array element is empty (e.g. a trailing comma)",
    "record_too_large": "the record's bytes exceed max_record_bytes (known from the index: the "
    "record is rejected unread)",
    "duplicate_member": "a sample of a tar shard holds two members with one extension (a key "
    "used twice in a row)",
    "member_truncated": "a .json or .txt member of a tar shard ends past the end of the shard (a "
    "truncated shard; a cut image member is image_corrupt)",
    # Recipe: record shape (formats)
    "unknown_format": "no format adapter recognises the record's keys (set the format, or the columns)",
    "missing_field": "a field the record's format requires is absent (for pre-tokenized samples: "
    "input_ids)",
    "wrong_type": "a field has the wrong JSON type or shape (e.g. a number where text belongs, "
    "input_ids that are not integers)",
    "empty_conversation": "the record holds no message (or only a system message, or empty text)",
    "bad_role_order": "messages are not in a trainable order (user, assistant, user, ...)",
    "unknown_role": "a message's role is not one the format's role mapping knows (set the tags)",
    "too_many_turns": "the record holds more messages (or one message more content parts) than "
    "max_turns; rejected before its messages are built",
    # Recipe: template and tokens
    "template_error": "the chat template raised, cannot express the conversation, or its output "
    "cannot be aligned with the messages",
    "no_trainable_tokens": "no token is left to train on (no assistant turn, or truncation cut them)",
    "too_long": "the sample has more tokens than max_length and the overflow policy is 'drop'",
    "too_short": "the sample has fewer tokens than min_length",
    "media_too_long_for_row": "a sample with media has more tokens than a packed row holds "
    "(a row cannot be cut through media)",
    # Recipe: media references
    "image_placeholder_mismatch": "the number of <image>/<video>/<audio> placeholders differs from "
    "the number of media the record lists",
    "no_shared_prompt": "a preference pair given as two whole conversations that differ from "
    "their first message: no prompt both sides answer",
    "media_in_response": "a preference pair's or KTO record's response holds an image (or video, "
    "audio); media belong to the prompt both sides share",
    "image_missing": "an image file does not exist (or is a directory)",
    "image_corrupt": "an image file is empty, not an image, truncated or damaged (its header or "
    "its pixels cannot be decoded)",
    "image_unsupported": "an image's size or aspect ratio is outside what the image-token rule "
    "accepts, or the path is not a regular file (a FIFO, a device)",
    "image_too_large": "an image has more pixels (or bytes) than the configured limit, or is a "
    "decompression bomb",
    "unsafe_path": "a media path escapes its media root ('..', an absolute path elsewhere, a "
    "symlink pointing outside)",
    "url_not_allowed": "a media reference is a URL outside every remote media root and "
    "allow_urls is off (chute fetches only under a media root)",
    "media_unavailable": "a media file under a remote media root could not be fetched (timeouts, "
    "dropped connections, access refused) after the retries",
    # Media stage (decoding in the loader's workers, chute validate)
    "image_token_mismatch": "the image tokens in input_ids differ from the features the "
    "decoded images give (the file changed since counting, or the sample was built elsewhere)",
    "video_missing": "a video file does not exist (or is a directory)",
    "video_corrupt": "a video file cannot be opened or decoded, or has no video stream",
    "video_too_large": "a video is longer, or its frames larger, than the configured limits",
    "video_unsupported": "a video its frame-sampling rule cannot sample: a header without the "
    "frame count or rate that sampling at a rate needs, too few frames, an aspect ratio above 200",
    "video_token_mismatch": "the video tokens in input_ids differ from the features the "
    "sampled frames give",
    "audio_missing": "an audio file does not exist (or is a directory)",
    "audio_corrupt": "an audio file is empty, or cannot be opened or decoded",
    "audio_unsupported": "an audio file in a container soundfile cannot read (MP4/M4A, WebM, "
    "AMR, raw AAC), or a path that is not a regular file (a FIFO, a device)",
    "audio_too_large": "an audio clip is longer than the configured limit",
    "audio_token_mismatch": "the audio tokens in input_ids differ from the clip's token count",
    # Augmentation and geometry (issue 33)
    "box_outside": "after a crop, a box or point in the text has nothing left inside the image "
    "(or, with outside='reject', leaves it)",
    "box_ambiguous": "coordinates in the text must move but the sample has several images, and "
    "which one a box refers to is not written",
    "box_invalid": "coordinates in the text are outside their convention's range, or a box's "
    "first corner is not its top left",
    "flip_left_right": "the text says left or right and the augmentation may flip its image "
    "(Augment(left_right='reject'))",
    "timestamp_outside": "a time in a video sample's text lies past the end of its clip (the "
    "header's duration)",
    "timestamp_ambiguous": "times in the text must snap to sampled frames but the sample has "
    "several videos, or its video's frame times are unknown",
    "unexpected_error": "processing raised an exception chute did not anticipate (see message)",
    # chute validate --overlap (a line of its rejects file)
    "duplicate": "the record's content (normalized text and media references) equals an earlier "
    "record's",
    # Loader
    "empty_sample": "the sample has no tokens",
    "sample_timeout": "processing the sample took longer than the loader's sample_timeout",
}


class SampleError(Exception):
    """One record cannot become a training sample.

    Args:
        kind: a short machine-readable reason, one of ``SAMPLE_ERROR_KINDS`` (e.g. ``bad_json``).
        message: what is wrong, for a human.
        path: the data file the record came from.
        line: the 1-based line where the record begins.
        field: the offending field, when there is one.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ):
        self.kind = kind
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        super().__init__(self._render())

    @property
    def location(self) -> str:
        """``path:line`` of the record, or ``?`` when unknown."""
        if self.path is None:
            return "?"
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    def with_location(self, path: str, line: int | None) -> SampleError:
        """Fill in where the record came from, when the raiser did not know it."""
        if self.path is None:
            self.path, self.line = path, line
            self.args = (self._render(),)
        return self

    def _render(self) -> str:
        where = f"{self.location}: " if self.path is not None else ""
        what = f" (field {self.field!r})" if self.field else ""
        return f"{where}{self.kind}: {self.message}{what}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions with keyword-only arguments do not pickle by default; DataLoader workers and
        # validate's process pool send these across process boundaries.
        return (_rebuild_sample_error, (self.kind, self.message, self.path, self.line, self.field))

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "reason": self.kind,
            "message": self.message,
            "field": self.field,
        }


def _rebuild_sample_error(kind: str, message: str, path: Any, line: Any, field: Any) -> SampleError:
    return SampleError(kind, message, path=path, line=line, field=field)


def as_sample_error(exc: BaseException, path: str | None, line: int | None) -> SampleError:
    """The ``SampleError`` for an exception raised while processing one record.

    A ``SampleError`` gets its location filled in. Any other ``Exception`` (a bug, or data shaped
    in a way no check anticipated) becomes kind ``unexpected_error`` naming the exception type,
    so one odd record is still a counted skip. Job-level errors (``ChuteError``, e.g. a source
    that changed) are re-raised: they are not about one record.

    The error comes back without its traceback: a reject is data, and the frames of a traceback
    would keep the record they processed (its parsed JSON: a million turns, hundreds of MB)
    alive as cyclic garbage until the next full collection.
    """
    if isinstance(exc, SampleError):
        exc.__traceback__ = None
        return exc.with_location(path, line) if path is not None else exc
    if isinstance(exc, ChuteError) or not isinstance(exc, Exception):
        raise exc
    return SampleError("unexpected_error", f"{type(exc).__name__}: {exc}", path=path, line=line)


@dataclass
class RejectTally:
    """Counts of rejected records by kind, with the first few examples of each.

    Tallies from worker processes merge into one (``merge``), so the main process can report
    every reject wherever it happened.

    Example:
        >>> t = RejectTally()
        >>> _ = t.add(SampleError("bad_json", "unexpected end", path="d.jsonl", line=7))
        >>> t.counts
        Counter({'bad_json': 1})
        >>> t.examples["bad_json"]
        ['d.jsonl:7: bad_json: unexpected end']
    """

    max_examples: int = 5
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, error: SampleError) -> bool:
        """Count one reject; returns True when it is the first of its kind (worth logging)."""
        first = error.kind not in self.counts
        self.counts[error.kind] += 1
        shown = self.examples.setdefault(error.kind, [])
        if len(shown) < self.max_examples:
            shown.append(str(error))
        return first

    def merge(self, other: RejectTally) -> None:
        self.counts.update(other.counts)
        for kind, shown in other.examples.items():
            mine = self.examples.setdefault(kind, [])
            mine.extend(shown[: max(0, self.max_examples - len(mine))])

    def summary(self) -> str:
        """One line per kind, most frequent first, with its first example."""
        if not self.counts:
            return "no rejected records"
        lines = []
        for kind, n in self.counts.most_common():
            example = (self.examples.get(kind) or [""])[0]
            lines.append(f"  {kind}: {n}" + (f"  e.g. {example}" if example else ""))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"by_reason": dict(self.counts), "examples": self.examples}
