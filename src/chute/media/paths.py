"""Where a media reference points, and whether chute may read it.

Every local media reference resolves under a *media root*: by default the folder of the data
file the record came from, or the folder given as ``media_root`` (one folder for every source,
or a mapping from data file, or glob, to folder, since real datasets store paths relative to
different places). The resolved path, with every symlink followed, must lie inside that root::

    media_root = /data/llava                          record says         verdict
    ───────────────────────────────────────────────   ─────────────────   ──────────────────────
    /data/llava/coco/1.jpg                            coco/1.jpg          ok
    /data/llava/coco/../../etc/passwd                 ../../etc/passwd    unsafe_path
    /etc/passwd                                       /etc/passwd         unsafe_path
    /data/llava/link.jpg -> /home/me/.ssh/id_rsa      link.jpg            unsafe_path (symlink)
    /data/llava/coco/1.jpg                            /data/llava/coco/…  ok (absolute, inside)

A root may be a URL (``media_root="s3://bucket/images"``; a remote data file's default root is
its own folder): references then resolve to URLs under it by the same rule, with ``..`` resolved
and no escape above the root, and chute fetches them (``chute.media.remote``: size limit first,
retries, a bounded local cache)::

    media_root = s3://b/images       record says         verdict
    ──────────────────────────────   ─────────────────   ─────────────────────────────────────
    s3://b/images/coco/1.jpg         coco/1.jpg          ok (fetched)
    s3://b/secret.txt                ../secret.txt       unsafe_path
    s3://b/images/coco/1.jpg         s3://b/images/...   ok (a URL inside the root)

Other URLs (``http://``, ``https://``, ``s3://``, ...) are refused as ``url_not_allowed`` unless
``allow_urls=True``; even then chute fetches nothing (a URL reference then needs a user
``fetch`` function in the media stage). ``data:`` URLs carry their bytes inline and are always
allowed. A tar member reference (``tar:<offset>:<size>:<member>:<shard>``, what a
``TarSource`` record holds, see ``chute.sources.tar_members``) is allowed when its shard is the
record's own data file, or lies inside the media root (the same rule as a file).

Example:
    >>> import tempfile, os
    >>> root = tempfile.mkdtemp()
    >>> policy = MediaPaths(root)
    >>> policy.resolve("cats/1.jpg", None) == os.path.join(os.path.realpath(root), "cats/1.jpg")
    True
    >>> policy.resolve("../x.jpg", None)
    Traceback (most recent call last):
    ...
    chute.errors.SampleError: unsafe_path: ../x.jpg resolves to ... outside the media root ...
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from typing import Any

from chute._internal.remote import check_url, is_url, join_url, parent_url
from chute._internal.spelling import PYTHON, current_spelling, spell, spell_set
from chute.errors import ConfigError, SampleError
from chute.sources.tar_members import MemberRef, is_member_ref

__all__ = ["INLINE", "REMOTE", "MediaPaths", "is_remote"]

REMOTE = ("http://", "https://", "s3://", "gs://", "ftp://", "hf://")
INLINE = "data:"

PathLike = str | os.PathLike[str]


def is_remote(source: str) -> bool:
    """Whether ``source`` is a URL chute would have to fetch."""
    return source.startswith(REMOTE) or is_url(source)


class MediaPaths:
    """The media roots of a recipe and the rule that keeps every reference inside them.

    Args:
        media_root: ``None`` (each data file's folder), one folder for every source, or a mapping
            from data file path (or glob, e.g. ``"*/v1_*.jsonl"``) to the folder its references
            are relative to; data files the mapping does not name use their own folder.
        allow_urls: keep URL references instead of refusing them (``url_not_allowed``); chute
            still fetches nothing.
        allowed_roots: further folders a reference may resolve into (through a symlink or an
            absolute path), e.g. the disk an ``images -> /mnt/coco`` link points to.

    Raises:
        ConfigError: a root that is not a folder.
    """

    def __init__(
        self, media_root: Any = None, *, allow_urls: bool = False, allowed_roots: Any = ()
    ):
        self.allow_urls = bool(allow_urls)
        if isinstance(allowed_roots, str | os.PathLike):
            allowed_roots = [allowed_roots]
        self.allowed = tuple(
            _real(_folder(r, f"allowed_roots[{i}]")) for i, r in enumerate(allowed_roots or ())
        )
        self.default: str | None = None
        self.by_source: dict[str, str] = {}
        if isinstance(media_root, Mapping):
            for pattern, folder in media_root.items():
                self.by_source[_pattern(pattern)] = _folder(folder, f"media_root[{pattern!r}]")
        elif media_root is not None:
            self.default = _folder(media_root, "media_root")
        self._real: dict[str, str] = {}

    def root_for(self, data_path: str | None) -> str:
        """The folder (or URL) relative references of ``data_path``'s records resolve against."""
        if self.by_source and data_path is not None:
            absolute = data_path if is_url(data_path) else os.path.abspath(data_path)
            for pattern, folder in self.by_source.items():
                if absolute == pattern or fnmatch.fnmatch(absolute, pattern):
                    return folder
        if self.default is not None:
            return self.default
        if data_path and is_url(data_path):
            return parent_url(data_path)
        if data_path:
            return os.path.dirname(os.path.abspath(data_path))
        return os.getcwd()

    def fetchable(self, url: str, data_path: str | None) -> bool:
        """Whether chute itself may fetch ``url``: under a remote root of ``data_path``'s records.

        The roots are ``data_path``'s media root and the remote ``allowed_roots`` entries.
        """
        root = self.root_for(data_path)
        roots = [r for r in (root, *self.allowed) if is_url(r)]
        return any(_inside_url(url, r) for r in roots)

    def resolve(self, source: str, data_path: str | None) -> str:
        """The real path of a local reference, or the URL itself when URLs are allowed.

        Raises:
            SampleError: ``unsafe_path`` (outside the root, also through a symlink),
                ``url_not_allowed`` (a URL while ``allow_urls`` is off).
        """
        if source.startswith(INLINE):
            return source
        if is_member_ref(source):
            return self._resolve_member(source, data_path)
        root = self.root_for(data_path)
        if is_url(root) and not is_remote(source):
            return self._resolve_remote(source, root)
        if is_remote(source):
            if is_url(source) and self.fetchable(normal := _normal_url(source), data_path):
                return normal
            if self.allow_urls:
                return source
            spelled = current_spelling()
            keep = (
                f", or pass {spell_set('allow_urls', True)} with a media stage that has fetch=..."
                if spelled is PYTHON or "allow_urls" in spelled.names
                else ""  # a Python-only option: no flag or key to name
            )
            raise SampleError(
                "url_not_allowed",
                f"{source} is a URL; chute fetches only under a remote media root "
                f"({spell_set('media_root', 's3://bucket/images')}, or a remote data file's own "
                f"folder): set {spell('media_root')} to the URL's folder, or download the file "
                f"and reference the local copy{keep}",
            )
        if source.startswith("file://"):
            source = source[len("file://") :]
        joined = os.path.join(root, os.path.expanduser(source))
        real = os.path.realpath(joined)
        real_root = self._real.get(root)
        if real_root is None:
            real_root = self._real[root] = os.path.realpath(root)
        if not _inside(real, real_root) and not any(_inside(real, r) for r in self.allowed):
            why = "a symlink leads" if _has_link(joined, root) else "it resolves"
            raise SampleError(
                "unsafe_path",
                f"{source} resolves to {real}, outside the media root {real_root} ({why} "
                f"there); media references must stay inside their root: set "
                f"{spell('media_root')} to the folder the dataset's paths are relative to, or name "
                f"the target's folder in {spell('media_allowed_roots')}",
            )
        return real

    def _resolve_member(self, source: str, data_path: str | None) -> str:
        """A tar member reference: its shard is the record's own file, or inside the root."""
        ref = MemberRef.parse(source)
        shard = ref.shard
        if data_path is not None and (
            shard == (data_path if is_url(data_path) else os.path.abspath(data_path))
        ):
            return source
        if is_url(shard):
            if self.fetchable(_normal_url(shard), data_path):
                return source
        else:
            real = os.path.realpath(shard)
            root = self.root_for(data_path)
            if not is_url(root) and (
                _inside(real, os.path.realpath(root)) or any(_inside(real, r) for r in self.allowed)
            ):
                return source
        raise SampleError(
            "unsafe_path",
            f"{ref.shown}: a member of {shard}, which is neither the record's own shard nor "
            f"inside the media root ({self.describe_root(data_path)}); media references must "
            f"stay inside their root: set {spell('media_root')} to the shards' folder",
        )

    def _resolve_remote(self, source: str, root: str) -> str:
        joined = join_url(root, source)
        if _inside_url(joined, root) or any(_inside_url(joined, r) for r in self.allowed):
            return joined
        raise SampleError(
            "unsafe_path",
            f"{source} resolves to {joined}, outside the media root {root}; media references "
            f"must stay inside their root: set {spell('media_root')} to the folder the dataset's "
            f"paths are relative to, or name the target's folder in {spell('media_allowed_roots')}",
        )

    def root_above(self, resolved: str, data_path: str | None, levels: int = 3) -> str | None:
        """The nearest folder above the root where a missing file's relative path exists.

        For the message of a missing file: LLaVA-style data often names its images relative to
        the folder above the data file's (``demo/images/1.png`` beside ``demo/data.json``).
        ``None`` when the path was not relative to a local root, or no folder holds it.
        """
        root = self.root_for(data_path)
        if is_url(root) or is_url(resolved):
            return None
        real_root = os.path.realpath(root)
        if not _inside(resolved, real_root) or resolved == real_root:
            return None
        relative = os.path.relpath(resolved, real_root)
        folder = real_root
        for _ in range(levels):
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent
            if os.path.isfile(os.path.join(folder, relative)):
                return folder
        return None

    def describe_root(self, data_path: str | None) -> str:
        """Which root applies to ``data_path``, in words, for error messages."""
        if self.by_source or self.default is not None:
            return f"media_root {self.root_for(data_path)}"
        return "the data file's folder"

    def to_json(self) -> dict[str, Any]:
        return {
            "media_root": self.default,
            "media_root_by_source": dict(sorted(self.by_source.items())),
            "allow_urls": self.allow_urls,
            "allowed_roots": list(self.allowed),
        }

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_real"] = {}  # realpath results belong to one process's view of the filesystem
        return state


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _normal_url(url: str) -> str:
    """``url`` with ``.`` and ``..`` resolved (never above its bucket or host)."""
    scheme, rest = url.split("://", 1)
    host, _, path = rest.partition("/")
    return join_url(f"{scheme}://{host}/", path)


def _inside_url(url: str, root: str) -> bool:
    """Whether ``url`` lies under the URL folder ``root`` (after ``..`` is resolved)."""
    if not is_url(url):
        return False
    return _normal_url(url).startswith(root.rstrip("/") + "/")


def _folder(value: Any, name: str) -> str:
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(f"expected a folder path, got {type(value).__name__}", param=name)
    if is_url(os.fspath(value)):
        return check_url(os.fspath(value), name).rstrip("/")  # existence shows per reference
    folder = os.path.abspath(os.path.expanduser(os.fspath(value)))
    if not os.path.isdir(folder):
        raise ConfigError(
            f"{folder} is not a folder; pass the folder the dataset's media paths are relative to",
            param=name,
        )
    return folder


def _pattern(entry: Any) -> str:
    """A mapping key as an absolute path or glob (``*/x.jsonl`` matches at any depth)."""
    if not isinstance(entry, str | os.PathLike):
        raise ConfigError(
            f"mapping keys are data file paths or globs, got {type(entry).__name__}",
            param="media_root",
        )
    text = os.path.expanduser(os.fspath(entry))
    if is_url(text):
        return text
    if any(c in text for c in "*?[") and (text.startswith("*") or os.path.isabs(text)):
        return text
    return os.path.abspath(text)


def _real(folder: str) -> str:
    return folder if is_url(folder) else os.path.realpath(folder)


def _has_link(path: str, root: str) -> bool:
    """Whether a component of ``path`` below ``root`` is a symlink (for the message only)."""
    rel = os.path.relpath(os.path.normpath(path), root)
    if rel.startswith(".."):
        return False
    current = root
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            return True
    return False
