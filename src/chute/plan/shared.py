"""One plan per node: the first local rank builds an epoch's plan, every rank maps the file.

A length-aware plan of 100M samples holds ~0.4 GB of ids; eight ranks of a node building and
holding their own copy each epoch cost eight builds and eight copies, of the same arrays (plans
are pure functions of their parameters). With a ``PlanShare``, the ranks of a node meet at a
folder keyed by the plan's fingerprint (the planner's ``params()``, lengths' hash included,
the number of samples, the epoch and the world size)::

    <root>/<family>-e<epoch>/   ids.npy  batch_bounds.npy  [row_bounds.npy]  undealt.npy
                                [span_start.npy  span_end.npy]  plan.json (stats; written last)

    rank that claims it first     builds, writes a folder beside it, renames it into place
    the others                    wait for plan.json, then np.load(mmap_mode="r"): the pages
                                  are the page cache's, shared by every rank of the node

A claim (``<folder>.claim``, created exclusively, naming its owner) decides who builds. A
rank whose claim holder is provably gone (``chute._internal.owner``) or that waited
``wait_timeout`` builds the plan itself: the file is then written twice with the same bytes,
and no rank ever waits on a rank that never asks for that epoch. Folders of the same plan two
or more epochs back are removed when a new one is published (a rank still mapping one keeps
its pages until it lets go). Folders of other plans (another config, another world size: a
node writes one family per run) are collected then too, so the root stays bounded: the newest
``KEEP_OTHERS`` are kept, and any published within ``MIN_AGE`` seconds or whose claim holder
still runs (another job on the node may be using it).

Example:
    >>> import tempfile, numpy as np
    >>> from chute.plan.grouped import GroupedPlanner
    >>> share = PlanShare(tempfile.mkdtemp())
    >>> planner = GroupedPlanner(2, lengths=np.arange(1, 13)).with_share(share)
    >>> first = planner.build(12, epoch=0, world_size=2)
    >>> again = GroupedPlanner(2, lengths=np.arange(1, 13)).with_share(share)
    >>> bool((again.build(12, epoch=0, world_size=2).ids == first.ids).all())
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from chute._internal.files import CANNOT_WRITE, warn_once, writable_folder
from chute._internal.owner import Owner
from chute.plan.order import Order
from chute.plan.table import TablePlan

log = logging.getLogger("chute.plan")

__all__ = ["PlanShare", "plan_key"]

FORMAT = 1
# What planners deal for the same parameters, versioned: a plan published by an older chute is
# not this one's. 2: a packed plan's short last step is spread over every rank.
RULES = 2
# Other plans' folders kept when a plan is published, the newest first; older ones go once they
# are an hour old and nobody holds their claim.
KEEP_OTHERS = 4
MIN_AGE = 3600.0
_ARRAYS = ("ids", "batch_bounds", "row_bounds", "undealt", "span_start", "span_end")


def plan_key(params: dict[str, Any], num_samples: int, world_size: int) -> str:
    """The fingerprint of a plan family (every epoch of one planner on one world size).

    Example:
        >>> plan_key({"kind": "packed"}, 10, 2) == plan_key({"kind": "packed"}, 10, 2)
        True
    """
    text = json.dumps(
        {
            "format": FORMAT,
            "rules": RULES,
            "params": params,
            "samples": num_samples,
            "world": world_size,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class PlanShare:
    """Where the ranks of one node share their plans (see the module docstring).

    Args:
        root: a folder on a local disk of the node (the Loader uses ``<cache root>/plans``).
        wait_timeout: seconds a rank waits for another's build before it builds itself.
    """

    def __init__(self, root: str | os.PathLike[str], wait_timeout: float = 600.0):
        self.root = Path(root)
        self.wait_timeout = float(wait_timeout)

    def __repr__(self) -> str:
        return f"PlanShare({str(self.root)!r})"

    def fetch(
        self,
        build: Callable[[], TablePlan],
        params: dict[str, Any],
        order: Order,
        num_samples: int,
        epoch: int,
        world_size: int,
    ) -> TablePlan:
        """The plan in the shared folder, or ``build()`` it, publish it and map it."""
        family = plan_key(params, num_samples, world_size)
        folder = self.root / f"{family}-e{epoch}"
        plan = _load(folder, order, world_size)
        if plan is not None:
            return plan
        if not writable_folder(self.root):
            _warn_once(self.root, "cannot write plans under %s (read-only or not ours)")
            return build()  # each rank builds its own, as without a share
        claim = folder.with_name(folder.name + ".claim")
        mine = _claim(claim)
        if mine:  # the holder before may have published and let go since we looked
            plan = _load(folder, order, world_size)
            if plan is not None:
                with contextlib.suppress(OSError):
                    claim.unlink()
                return plan
        else:
            plan = self._wait(folder, claim, order, world_size)
            if plan is not None:
                return plan
        try:
            built = build()
            try:
                _publish(folder, built)
            except OSError as exc:
                if exc.errno not in CANNOT_WRITE:
                    raise
                # full: this rank keeps its plan; the ranks waiting on the claim build theirs
                _warn_once(self.root, f"cannot write plans under %s ({exc.strerror})")
                return built
            self._forget(family, epoch)
            self._collect(family)
        finally:
            if mine:
                with contextlib.suppress(OSError):
                    claim.unlink()
        return _load(folder, order, world_size) or built

    def _wait(self, folder: Path, claim: Path, order: Order, world_size: int) -> TablePlan | None:
        deadline = time.monotonic() + self.wait_timeout
        delay = 0.01
        while time.monotonic() < deadline:
            plan = _load(folder, order, world_size)
            if plan is not None:
                return plan
            if not claim.exists() or _holder_gone(claim):
                return _load(folder, order, world_size)
            time.sleep(delay)
            delay = min(0.5, delay * 2)
        return None

    def _forget(self, family: str, epoch: int) -> None:
        """Remove this family's folders of epochs before ``epoch - 1`` (best effort)."""
        for old in self.root.glob(f"{family}-e*"):
            tail = old.name[len(family) + 2 :]
            if tail.isdigit() and int(tail) < epoch - 1:
                shutil.rmtree(old, ignore_errors=True)

    def _collect(self, family: str) -> None:
        """Remove other plans' folders but the newest ``KEEP_OTHERS`` (see the module docstring).

        Only published folders (with their ``plan.json``) are candidates: one being written has
        none yet. Best effort: a folder another process removes first is skipped.
        """
        others: list[tuple[float, Path]] = []
        for folder in self.root.glob("*-e*"):
            name = folder.name
            if name.startswith((".", f"{family}-e")) or name.endswith(".claim"):
                continue
            with contextlib.suppress(OSError):
                others.append(((folder / "plan.json").stat().st_mtime, folder))
        others.sort(reverse=True)
        now = time.time()
        for published, folder in others[KEEP_OTHERS:]:
            claim = folder.with_name(folder.name + ".claim")
            held = claim.exists() and not _holder_gone(claim)
            if now - published >= MIN_AGE and not held:
                shutil.rmtree(folder, ignore_errors=True)


def _warn_once(root: Path, message: str) -> None:
    warn_once(
        log,
        message + ": each rank builds its own plan; set CHUTE_CACHE_DIR to a writable folder "
        "with room to build it once per node",
        root,
    )


def _claim(path: Path) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(Owner.here().to_bytes())
    return True


def _holder_gone(claim: Path) -> bool:
    try:
        owner = Owner.parse(claim.read_bytes())
    except OSError:  # let go of since we looked
        return False
    return owner is not None and owner.gone()  # None: being written, or not ours to judge


def _publish(folder: Path, plan: TablePlan) -> None:
    """Write ``plan`` into a folder beside ``folder`` and rename it into place (all or nothing)."""
    if (folder / "plan.json").is_file():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        arrays = {
            "ids": plan.ids,
            "batch_bounds": plan.batch_bounds,
            "row_bounds": plan.row_bounds,
            "undealt": plan.undealt,
            "span_start": None if plan.spans is None else plan.spans[0],
            "span_end": None if plan.spans is None else plan.spans[1],
        }
        for name, value in arrays.items():
            if value is not None:
                with open(tmp / f"{name}.npy", "wb") as f:
                    np.save(f, np.ascontiguousarray(value))
                    f.flush()
                    os.fsync(f.fileno())
        meta = {"format": FORMAT, "world_size": plan.world_size, "stats": plan.stats}
        (tmp / "plan.json").write_text(json.dumps(meta, default=int))
        try:
            os.rename(tmp, folder)
        except OSError:  # another rank published it first: the same bytes
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _set_aside(folder: Path, why: str) -> None:
    """Move a damaged published plan out of the way: to its readers, as if none were there.

    The plan is then built again, by this rank or the one that claims it, and published in its
    place; a rank still mapping the old files keeps its pages. Renamed first (atomic, so ranks
    that found it damaged at once do not trip over each other), then removed.
    """
    log.warning("the shared plan in %s is damaged (%s): building it again", folder, why)
    aside = folder.with_name(f".{folder.name}.damaged.{os.getpid()}.{time.monotonic_ns()}")
    with contextlib.suppress(OSError):
        os.rename(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)


def _load(folder: Path, order: Order, world_size: int) -> TablePlan | None:
    try:
        meta = json.loads((folder / "plan.json").read_text())
    except OSError:
        return None  # not published (yet)
    except ValueError as exc:
        _set_aside(folder, f"plan.json: {exc}")
        return None
    if meta.get("format") != FORMAT or meta.get("world_size") != world_size:
        return None
    arrays: dict[str, np.ndarray | None] = {}
    try:
        for name in _ARRAYS:
            path = folder / f"{name}.npy"
            arrays[name] = np.load(path, mmap_mode="r") if path.is_file() else None
    except (OSError, ValueError) as exc:  # cut short or overwritten after it was published
        _set_aside(folder, f"{path.name}: {exc}")
        return None
    ids, bounds = arrays["ids"], arrays["batch_bounds"]
    if ids is None or bounds is None:
        _set_aside(folder, "ids.npy or batch_bounds.npy is missing")
        return None
    if ids.ndim != 1 or bounds.ndim != 1 or (len(bounds) and int(bounds[-1]) > len(ids)):
        _set_aside(folder, f"ids of shape {ids.shape}, batch bounds of shape {bounds.shape}")
        return None
    start, end = arrays["span_start"], arrays["span_end"]
    return TablePlan(
        order,
        world_size,
        ids=ids,
        batch_bounds=bounds,
        row_bounds=arrays["row_bounds"],
        spans=None if start is None or end is None else (start, end),
        undealt=arrays["undealt"],
        stats=meta.get("stats", {}),
    )
