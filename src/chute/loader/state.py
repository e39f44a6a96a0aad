"""The loader's resume state: small, JSON-serialisable, checked against the loader it resumes.

A state says where the stream stands (epoch, batches consumed, earlier layouts of the epoch) and
what shaped it (plan parameters, source fingerprint). ``check_compatible`` refuses a state whose
plan or source differs, naming every differing field with both values.

Example:
    >>> content_identity({"path": "/a/x.jsonl", "size": 3, "parts": [{"mtime_ns": 1, "n": 2}]})
    {'size': 3, 'parts': [{'n': 2}]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from chute._internal.fields import diff_fields
from chute._internal.objects import ETAG_NOTE
from chute.errors import ConfigError, StateMismatch

__all__ = [
    "STATE_FORMAT",
    "STATE_VERSION",
    "check_compatible",
    "content_identity",
    "read_position",
]

STATE_FORMAT = "chute.loader"
STATE_VERSION = 1
_SHOWN = 8  # differences listed in a message before "... and N more"


# Fingerprint fields that name where the data lies, not what it is: a state resumes on a copy of
# the data at another path or with other mtimes (another cluster, a restored backup; "mtime" is
# the LastModified of an object whose store gives no ETag).
_LOCATION_FIELDS = frozenset({"path", "mtime_ns", "mtime"})


def content_identity(fingerprint: Any) -> Any:
    """``fingerprint`` without the fields that only locate the data (paths, mtimes)."""
    if isinstance(fingerprint, Mapping):
        return {k: content_identity(v) for k, v in fingerprint.items() if k not in _LOCATION_FIELDS}
    if isinstance(fingerprint, list | tuple):
        return [content_identity(v) for v in fingerprint]
    return fingerprint


def check_compatible(state: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Refuse ``state`` unless its format, plan and source content match ``expected``.

    Sources are compared by content identity (record counts, sizes, hashes), not location, so
    a run resumes on a copy of its data at another path.

    Raises:
        StateMismatch: naming each differing field, the state's value and the loader's.
        ConfigError: when ``state`` is not a chute loader state at all.
    """
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        got = type(state).__name__ if not isinstance(state, Mapping) else state.get("format")
        raise ConfigError(
            f"load_state_dict() needs a state from chute's Loader.state_dict() (format "
            f"{STATE_FORMAT!r}), got {got!r}; pass the loader's own state, not the model's or "
            f"the optimizer's"
        )
    if state.get("version") != STATE_VERSION:
        raise StateMismatch(
            f"the state has format version {state.get('version')!r}, this chute reads version "
            f"{STATE_VERSION}; resume with the chute version that saved it"
        )
    for part, what in (("plan", "plan"), ("source", "dataset")):
        diffs = diff_fields(
            content_identity(state.get(part)), content_identity(expected[part]), part
        )
        if diffs:
            lines = [f"  {path}: state {x!r}, this loader {y!r}" for path, x, y in diffs[:_SHOWN]]
            if len(diffs) > _SHOWN:
                lines.append(f"  ... and {len(diffs) - _SHOWN} more")
            note = f"\n{ETAG_NOTE}" if any(p.endswith(".etag") for p, _, _ in diffs) else ""
            raise StateMismatch(
                f"cannot resume: the state was saved for a different {what}:\n"
                + "\n".join(lines)
                + f"\nResume with the {what} the state was saved with, or start this run "
                f"without load_state_dict().{note}"
            )


def read_position(state: Mapping[str, Any]) -> tuple[int, int, int, list[tuple[int, int]]]:
    """``(epoch, batches, world_size, segments)`` of a state, with their types checked."""
    try:
        epoch, batches, world_size = (int(state[k]) for k in ("epoch", "batches", "world_size"))
        segments = [(int(w), int(k)) for w, k in state.get("segments", [])]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"the loader state is damaged or incomplete: {exc!r}") from None
    if epoch < 0 or batches < 0 or world_size < 1 or any(w < 1 or k < 0 for w, k in segments):
        raise ConfigError(
            f"the loader state holds impossible values: epoch={epoch}, batches={batches}, "
            f"world_size={world_size}, segments={segments}"
        )
    return epoch, batches, world_size, segments


def recipe_fingerprint(recipe: Any) -> Any:
    """The recipe's fingerprint as JSON data (``None``: no recipe, or one without one)."""
    fingerprint = getattr(recipe, "fingerprint", None)
    if not callable(fingerprint):
        return None
    try:
        return orjson.loads(orjson.dumps(fingerprint(), option=orjson.OPT_SERIALIZE_NUMPY))
    except (TypeError, orjson.JSONEncodeError):
        return None


def recipe_changes(state: Mapping[str, Any], now: Any) -> str | None:
    """How the recipe differs from the one a state was saved with, or ``None``.

    A length-aware plan's lengths change with the recipe, so such a state is refused by the
    plan's comparison; the random plan's ids do not, so its rest is read with this recipe.
    """
    saved = state.get("recipe")
    if saved is None or now is None or saved == now:
        return None
    diffs = diff_fields(saved, now, "recipe")
    shown = ", ".join(f"{path} {a!r} -> {b!r}" for path, a, b in diffs[:3])
    more = f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""
    return shown + more
