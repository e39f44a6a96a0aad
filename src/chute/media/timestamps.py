"""Timestamps in the text of a video sample, checked against the clip and written as the model reads.

Temporal grounding data writes times in its text ("the goal is scored at 00:12", "from 3.5 to
7 seconds"). ``Timestamps`` finds them, rejects a sample whose time lies past the clip's end
(``timestamp_outside``: the header's duration), and, where asked, writes every time the way
Qwen2.5-VL and Qwen3-VL read time: seconds with one decimal, as Qwen3-VL's processor labels each
frame group (``<12.5 seconds>``) and in the unit of Qwen2.5-VL's absolute-time positions
(``second_per_grid_ts``)::

    forms read                              mode="seconds" writes
    00:12   1:02:03   02:03.5               12.0 seconds   3723.0 seconds   123.5 seconds
    12.5s   12.5 s   12.5 sec   12.5 seconds   12.5 seconds
    3.5 to 7 seconds   3.5-7s                 3.5 to 7.0 seconds   3.5-7.0 seconds

A clock needs two-digit seconds (``16:9`` is not a time) and is not part of a longer run of
numbers (``12:30:45:10``) nor a time of day (``10:30 am``, ``5:00 p.m.``, ``3:15 o'clock``); a
decade (``1990s``, ``the 80s``, ``'90s``) or an age (``in his 30s``) is not a time; a number
without a unit is not read. A clock time of day
written bare (``the clock shows 10:30``) is read as a time into the video: past a short clip's
end it is rejected, and the rejects file shows it. A time may be written less precisely than the clip is measured, so one is outside
only past the end by more than half its last written digit (``00:13`` of a 12.6 s clip is
kept; ``00:14`` is rejected).

With ``snap=True`` each time moves to the nearest sampled frame group's time (what Qwen3-VL's
``<t seconds>`` labels say and Qwen2.5-VL's temporal positions step by), so an answer can be
read off the frames the model sees; without it (the default) a time between two sampled
groups is kept as written: time is continuous, and the frames are a sample of it.

Example:
    >>> Timestamps("seconds").rewrite("He scores at 00:12.", [Clip(30.0)])
    'He scores at 12.0 seconds.'
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from chute.errors import ConfigError, SampleError

__all__ = ["MODES", "Clip", "Timestamps"]

# mode -> what is written ("check": nothing; the others: seconds with one decimal)
MODES = {"check": "check", "seconds": "seconds", "qwen2.5-vl": "seconds", "qwen3-vl": "seconds"}

_NUM = r"\d+(?:\.\d+)?"
_UNIT = r"(?:seconds?|secs?|s)\b"
_CLOCK = re.compile(
    r"(?<![\d:.])(?:(\d{1,2}):([0-5]\d)|(\d{1,3})):([0-5]\d)(?:\.(\d{1,3}))?(?![\d:])"
    r"(?!\s*(?i:[ap]\.?m\b|[ap]\.m\.|o'clock))"
)
_SECONDS = re.compile(
    rf"(?<![\w.])(?!(?:1[5-9]|20)\d0s\b)({_NUM})(?:(\s*(?:-|–|to)\s*)({_NUM}))?\s?{_UNIT}"
)


# "30s" after these is a decade or an age ("in her 70s", "'90s", "the late 80s"), not 30 s
_DECADE_BEFORE = re.compile(r"(?:['’]|\b(?i:his|her|their|its|my|your|our|early|mid|late)[\s-])$")
# after "the", a decade unless a word of time follows ("the 80s" but "the 30s mark")
_THE_BEFORE = re.compile(r"\b(?i:the)\s$")
_TIME_AFTER = re.compile(
    r"\s*(?i:mark|intro|outro|clip|segment|point|part|scene|section|moment|frame|timestamp|"
    r"second|of (?:the |this )?(?:video|clip|recording))\b"
)


def _is_decade(match: re.Match[str]) -> bool:
    """Whether a seconds-form match is a decade or an age: ``[1-9]0s`` after their words."""
    found = match.group(0)
    if len(found) != 3 or found[0] == "0" or found[1:] != "0s":
        return False
    before = match.string[max(0, match.start() - 8) : match.start()]
    if _DECADE_BEFORE.search(before):
        return True
    return bool(_THE_BEFORE.search(before)) and not _TIME_AFTER.match(match.string, match.end())


@dataclasses.dataclass(frozen=True)
class Clip:
    """What the header says of one video: its duration, and its frame groups' times.

    ``duration`` in seconds; ``group_times``, where known, the times of its sampled frame groups
    (``chute.media.video_rules.group_times``).
    """

    duration: float
    group_times: Sequence[float] | None = None


def _precision(text: str) -> float:
    """Half the unit of the last digit written: ``12`` -> 0.5, ``12.5`` -> 0.05."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0**-decimals


@dataclasses.dataclass(frozen=True)
class Timestamps:
    """Times in a video sample's text: checked against the clip, optionally written in seconds.

    Args:
        mode: ``check`` (times past the clip's end are rejected, the text is kept), or
            ``seconds`` (checked, then written as seconds with one decimal:
            ``12.0 seconds``); ``qwen2.5-vl`` and ``qwen3-vl`` are the models' names for
            ``seconds``.
        snap: move each time to the nearest sampled frame group's time (needs the recipe's
            ``video_tokens`` to sample frames of a ``DynamicResolution``, and one video per
            sample; several are ``timestamp_ambiguous``).

    Example:
        >>> Timestamps("check").rewrite("at 00:40", [Clip(30.0)])
        Traceback (most recent call last):
        ...
        chute.errors.SampleError: timestamp_outside: 00:40 is 40.0 s into a clip of 30.0 s ...
    """

    mode: str = "check"
    snap: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(
                f"expected one of {', '.join(MODES)}, got {self.mode!r}", param="timestamps"
            )
        if not isinstance(self.snap, bool):
            raise ConfigError(f"expected a bool, got {self.snap!r}", param="snap")

    @classmethod
    def of(cls, value: TimestampsOption) -> Timestamps | None:
        """``None``, a ``Timestamps``, a mode name, or a mapping of the fields."""
        if value is None or isinstance(value, Timestamps):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            fields: dict[str, Any] = dict(value)  # each field checked in __post_init__
            return cls(**fields)
        raise ConfigError(
            f"expected a mode ({', '.join(MODES)}) or a Timestamps, got {type(value).__name__}",
            param="timestamps",
        )

    @property
    def writes(self) -> bool:
        """Whether times are rewritten (in seconds, or snapped)."""
        return MODES[self.mode] == "seconds" or self.snap

    def fingerprint(self) -> dict[str, Any]:
        # rules: 2 (decades and ages are not times): caches of the earlier texts not reused
        return {"mode": MODES[self.mode], "snap": self.snap, "rules": 2}

    @staticmethod
    def find(text: str) -> bool:
        """Whether ``text`` holds a time in one of the forms read."""
        return bool(_CLOCK.search(text) or _SECONDS.search(text))

    def rewrite(self, text: str, clips: Sequence[Clip]) -> str:
        """``text`` with its times checked against ``clips`` (and written, per ``mode``).

        With several clips a time is checked against the longest (which clip a time refers to
        is not written down).

        Raises:
            SampleError: ``timestamp_outside`` (a time past the clip's end),
                ``timestamp_ambiguous`` (``snap`` with several videos).
        """
        if not clips or not self.find(text):
            return text
        if self.snap and len(clips) > 1:
            raise SampleError(
                "timestamp_ambiguous",
                f"the text holds times and the sample {len(clips)} videos: which video's "
                f"frames a time refers to is not written, so it cannot snap to them",
            )
        end = max(c.duration for c in clips)
        groups = clips[0].group_times if self.snap else None
        if self.snap and not groups:
            raise SampleError(
                "timestamp_ambiguous",
                "snap=True needs the sampled frames' times, which this video's header does "
                "not give (no frame count or rate)",
            )
        # one pass over both forms, left to right, so a rewritten time is never read again
        both = re.compile(f"{_CLOCK.pattern}|{_SECONDS.pattern}")
        return both.sub(functools.partial(self._one, end=end, groups=groups), text)

    def _one(self, match: re.Match[str], end: float, groups: Sequence[float] | None) -> str:
        found = match.group(0)
        h, m, m_only, s, frac, first, sep, second = match.groups()
        if s is None and _is_decade(match):
            return found
        if s is not None:  # a clock
            seconds = int(s) + (float("0." + frac) if frac else 0.0)
            seconds += 60 * int(m if m is not None else m_only) + 3600 * int(h or 0)
            times, tol = [seconds], (0.5 * 10.0 ** -len(frac) if frac else 0.5)
        else:
            times = [float(first)] + ([float(second)] if second is not None else [])
            tol = _precision(second if second is not None else first)
        for t in times:
            if t - end > tol:
                raise SampleError(
                    "timestamp_outside",
                    f"{found} is {t:.1f} s into a clip of {end:.1f} s (its header's duration): "
                    f"the time points past the video's end",
                )
        if not self.writes:
            return found
        if groups:
            times = [min(groups, key=lambda g: abs(g - t)) for t in times]
        times = [min(t, end) for t in times]  # within its written precision of the end
        if s is not None or second is None:
            return f"{times[0]:.1f} seconds"
        return f"{times[0]:.1f}{sep}{times[1]:.1f} seconds"


# What ``Recipe(timestamps=...)`` takes (see ``Timestamps.of``).
TimestampsOption = Timestamps | str | Mapping[str, str | bool] | None
