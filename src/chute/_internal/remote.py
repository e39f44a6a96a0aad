r"""Objects behind URLs (``s3://``, ``gs://``, ``az://``, ``hf://``, ``https://``) through fsspec.

Everything chute reads or writes remotely goes through this module, so the rules hold in one
place:

* **Credentials come only from the standard chains** of each backend (for S3: ``AWS_*``
  environment variables, ``~/.aws`` files, instance roles; ``AWS_ENDPOINT_URL`` for an
  S3-compatible server). A URL carrying one (``user:password@``, a presigned signature or a
  token in the query) is refused, and every message chute writes passes through ``redact``,
  which masks such parts and the values of credential environment variables.
* **Faults are retried**: a transient failure (a dropped connection, a timeout, a 5xx answer)
  is tried again ``retries`` times with exponential backoff and jitter; then ``RemoteError``
  names the URL, what was attempted, how often, and the last error.
* **Identity** (``chute._internal.objects``): an object is the same object while its size,
  ETag / version (or, where the store gives neither, the hash of both ends) are.
* **Connections belong to one process**: filesystems are made per process id, so DataLoader
  workers and pool processes each open their own.

::

    url ──► check_url (no credentials) ──► filesystem(protocol) per process
                                              │  timeouts, no library-level retries
                                              ▼
                      with_retries(call) ──► retry transient faults with backoff
                                              └─► RemoteError("s3://b/x.jsonl: read bytes
                                                   0-4194304 failed after 6 attempts ...")

Example:
    >>> is_url("s3://bucket/train.jsonl"), is_url("data/train.jsonl")
    (True, False)
    >>> redact("https://me:hunter2@example.com/x.jsonl?sig=abc&part=1")
    'https://***@example.com/x.jsonl?sig=***&part=1'
"""

from __future__ import annotations

import os
import posixpath
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from chute.errors import ChuteError, ConfigError, RemoteError, SourceChanged

__all__ = [
    "DEFAULT_OPTIONS",
    "ENV_OPTIONS",
    "RemoteOptions",
    "absolute",
    "check_url",
    "filesystem",
    "glob_urls",
    "is_url",
    "join_url",
    "options_from_env",
    "parent_url",
    "parse_size",
    "protocol_of",
    "redact",
    "split",
    "with_retries",
]

T = TypeVar("T")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# Query parameters that carry a credential (presigned URLs, SAS tokens, API keys).
_SECRET_PARAM = re.compile(
    r"signature|sig$|token|credential|secret|password|passwd|accesskey|access_key|apikey|"
    r"api_key|^key$|auth|x-amz-security",
    re.IGNORECASE,
)
# Environment variables whose values are credentials: never shown, whatever prints them.
_SECRET_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
)
# Protocol -> the extra that installs its fsspec backend.
_EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
    "hf": "hub",
    "http": "http",
    "https": "http",
}
_MAX_BACKOFF = 8.0


def is_url(path: Any) -> bool:
    """Whether ``path`` names an object behind a URL (any ``scheme://`` but ``file://``)."""
    if not isinstance(path, str):
        return False
    m = _SCHEME.match(path)
    return m is not None and m.group(1).lower() != "file"


def absolute(path: str | os.PathLike[str]) -> str:
    """A URL as given, a local path made absolute (``~`` expanded): the same from any folder.

    Example:
        >>> absolute("s3://b/x.jsonl"), absolute("/data/../data/x.jsonl")
        ('s3://b/x.jsonl', '/data/x.jsonl')
    """
    text = os.fspath(path)
    return text if is_url(text) else os.path.abspath(os.path.expanduser(text))


def protocol_of(url: str) -> str:
    m = _SCHEME.match(url)
    return m.group(1).lower() if m else "file"


@dataclass(frozen=True)
class RemoteOptions:
    """How chute talks to object storage: timeouts, retries, block cache and read-ahead.

    Args:
        timeout: seconds to connect, and to wait for the next bytes of an answer.
        retries: further attempts after a transient failure (a dropped connection, a timeout,
            a 5xx or 429 answer); a missing object or a refused credential is not retried.
        backoff: seconds before the first retry; doubled each time (at most 8 s), with jitter.
        block_size: bytes fetched per ranged request when records are read at random.
        cache_bytes: bytes of blocks one source keeps per process (least recently used go).
        readahead: the largest request a sequential reader grows to (bytes).
        cache_limit: bytes of whole remote files kept on local disk, shared by every process
            of the machine (``<cache>/remote-files``; least recently used out, never a file
            in use); ``None`` (the default): no local copies, ranged reads only. An int, or a
            size such as ``"20GB"`` / ``"512MiB"``.

    Example:
        >>> RemoteOptions(retries=2).retries
        2
        >>> RemoteOptions(timeout=0)
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: remote.timeout: expected a positive number of seconds, got 0
    """

    timeout: float = 30.0
    retries: int = 5
    backoff: float = 0.5
    block_size: int = 64 * 1024
    cache_bytes: int = 64 << 20
    readahead: int = 8 << 20
    cache_limit: int | None = None

    def __post_init__(self) -> None:
        limit: object = self.cache_limit
        if isinstance(limit, str):  # a size with units, from the environment, a flag or YAML
            try:
                limit = parse_size(limit)
            except ValueError as exc:
                raise ConfigError(f"remote.cache_limit: {exc}") from None
            object.__setattr__(self, "cache_limit", limit)
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ConfigError(
                f"remote.cache_limit: expected a number of bytes >= 1 or a size such as "
                f"'20GB', got {limit!r}"
            )
        for name in ("timeout", "backoff"):
            value = getattr(self, name)
            positive = name == "timeout"
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or value < 0
                or (positive and value == 0)
            ):
                want = "a positive number of seconds" if positive else "seconds >= 0"
                raise ConfigError(f"remote.{name}: expected {want}, got {value!r}")
        for name in ("retries", "block_size", "cache_bytes", "readahead"):
            value = getattr(self, name)
            low = 0 if name == "retries" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"remote.{name}: expected an integer >= {low}, got {value!r}")
        if self.cache_bytes < self.block_size:
            raise ConfigError(
                f"remote.cache_bytes: {self.cache_bytes} is smaller than one block "
                f"(remote.block_size={self.block_size}); raise cache_bytes"
            )


# Environment variables that set the defaults, for the command line and every process it
# starts (DataLoader workers, pool processes, Ray workers given the same environment).
ENV_OPTIONS = {
    "CHUTE_REMOTE_TIMEOUT": ("timeout", float),
    "CHUTE_REMOTE_RETRIES": ("retries", int),
    "CHUTE_REMOTE_BACKOFF": ("backoff", float),
    "CHUTE_REMOTE_BLOCK_SIZE": ("block_size", int),
    "CHUTE_REMOTE_CACHE_BYTES": ("cache_bytes", int),
    "CHUTE_REMOTE_READAHEAD": ("readahead", int),
    "CHUTE_REMOTE_CACHE_LIMIT": ("cache_limit", str),
}

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes of a size written ``20GB``, ``512MiB``, ``1.5T`` or ``4096``.

    ``K``, ``M``, ``G``, ``T`` (with or without ``B``) are decimal; ``KiB`` ... ``TiB`` powers of two.

    Example:
        >>> parse_size("20GB"), parse_size("512MiB"), parse_size("4096")
        (20000000000, 536870912, 4096)
        >>> parse_size("lots")
        Traceback (most recent call last):
        ...
        ValueError: expected a size such as 20GB, 512MiB or 4096 (bytes), got 'lots'
    """
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"expected a size such as 20GB, 512MiB or 4096 (bytes), got {text!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def options_from_env(env: dict[str, str] | None = None) -> RemoteOptions:
    """``RemoteOptions`` with the defaults the ``CHUTE_REMOTE_*`` variables set.

    Example:
        >>> options_from_env({"CHUTE_REMOTE_RETRIES": "8"}).retries
        8
        >>> options_from_env({"CHUTE_REMOTE_TIMEOUT": "soon"})
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: CHUTE_REMOTE_TIMEOUT: expected a number, got 'soon'
    """
    env = dict(os.environ) if env is None else env
    values: dict[str, Any] = {}
    for variable, (field, kind) in ENV_OPTIONS.items():
        text = env.get(variable, "").strip()
        if not text:
            continue
        try:
            values[field] = kind(text)
        except ValueError:
            want = "an integer" if kind is int else "a number"
            raise ConfigError(f"{variable}: expected {want}, got {text!r}") from None
    try:
        return RemoteOptions(**values)
    except ConfigError as exc:
        names = {field: variable for variable, (field, _) in ENV_OPTIONS.items()}
        message = str(exc)
        for field, variable in names.items():
            message = message.replace(f"remote.{field}:", f"{variable}:")
        raise ConfigError(message) from None


# A bad variable must not break `import chute` (local data never reads it): it is reported at
# the first remote operation instead, as a ConfigError like any other setting's.
try:
    DEFAULT_OPTIONS = options_from_env()
    _ENV_PROBLEM: ConfigError | None = None
except ConfigError as _problem:
    DEFAULT_OPTIONS = RemoteOptions()
    _ENV_PROBLEM = _problem


# -- credentials: refused in URLs, masked in every message -------------------------------------


def check_url(url: str, name: str = "path") -> str:
    """``url`` itself, once sure it carries no credential; else ``ConfigError``.

    Example:
        >>> check_url("s3://bucket/a.jsonl")
        's3://bucket/a.jsonl'
        >>> check_url("https://u:p@host/a.jsonl")
        Traceback (most recent call last):
        ...
        chute.errors.ConfigError: path: https://***@host/a.jsonl carries a credential (a user name or password in the URL); chute takes credentials only from the standard chains of the storage (for S3: AWS_* environment variables, ~/.aws files, instance roles; for the Hub: HF_TOKEN); remove it from the URL
    """
    parts = urlsplit(url)
    what = None
    if parts.username or parts.password:
        what = "a user name or password in the URL"
    elif any(_SECRET_PARAM.search(k) for k, _ in parse_qsl(parts.query, keep_blank_values=True)):
        what = "a signature, key or token in its query"
    if what is not None:
        raise ConfigError(
            f"{name}: {redact(url)} carries a credential ({what}); chute takes credentials only "
            f"from the standard chains of the storage (for S3: AWS_* environment variables, "
            f"~/.aws files, instance roles; for the Hub: HF_TOKEN); remove it from the URL"
        )
    return url


def redact(text: str) -> str:
    """``text`` with URL credentials and credential environment values masked as ``***``."""
    text = _URL_IN_TEXT.sub(lambda m: _redact_url(m.group(0)), str(text))
    for var in _SECRET_ENV:
        value = os.environ.get(var)
        if value and len(value) >= 6 and value in text:
            text = text.replace(value, "***")
    return text


def _redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={'***' if _SECRET_PARAM.search(k) else v}" for k, v in pairs)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# -- filesystems, one set per process ----------------------------------------------------------

_FILESYSTEMS: dict[tuple[Any, ...], Any] = {}
_FS_LOCK = threading.Lock()


def filesystem(protocol: str, options: RemoteOptions = DEFAULT_OPTIONS) -> Any:
    """The fsspec filesystem of ``protocol`` for this process (made once, then reused).

    Library-level retries are turned off where the backend has them (chute retries itself,
    with its own limit); timeouts are set where the backend takes them.

    Raises:
        ConfigError: the backend is not installed (naming the extra that installs it), the
            protocol is unknown, or a ``CHUTE_REMOTE_*`` variable is not valid.
    """
    if _ENV_PROBLEM is not None:
        raise _ENV_PROBLEM
    # The key holds the storage environment too, so a changed endpoint or profile (or a test
    # pointing at another server) gets a new client; the values never leave this dict.
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)))
    cls = _filesystem_class(protocol)  # in the key: a backend registered later replaces it
    key = (os.getpid(), protocol, cls, options.timeout, env)
    fs = _FILESYSTEMS.get(key)
    if fs is not None:
        return fs
    with _FS_LOCK:
        fs = _FILESYSTEMS.get(key)
        if fs is None:
            fs = cls(skip_instance_cache=True, **_settings(protocol, options))
            if protocol in ("s3", "s3a"):
                fs.retries = 1  # s3fs's own retry loop (a class attribute): chute retries
            _FILESYSTEMS[key] = fs
    return fs


_ENV_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "GCS", "HF_", "HUGGING")


def _filesystem_class(protocol: str) -> Any:
    extra = _EXTRAS.get(protocol)
    hint = f"pip install 'chute[{extra}]'" if extra else "install the fsspec backend for it"
    try:
        import fsspec
    except ImportError:
        raise ConfigError(f"{protocol}:// paths need fsspec: {hint}") from None
    try:
        return fsspec.get_filesystem_class(protocol)
    except ImportError:
        raise ConfigError(f"{protocol}:// paths need their fsspec backend: {hint}") from None
    except ValueError:
        raise ConfigError(
            f"{protocol}:// is not a storage protocol chute knows (s3, gs, az, hf, http(s) and "
            f"every protocol fsspec has a backend for)"
        ) from None


def _settings(protocol: str, options: RemoteOptions) -> dict[str, Any]:
    t = options.timeout
    if protocol in ("s3", "s3a"):
        return {
            "config_kwargs": {
                "connect_timeout": t,
                "read_timeout": t,
                "retries": {"max_attempts": 1, "mode": "standard"},
            },
        }
    if protocol in ("http", "https"):
        import aiohttp

        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_connect=t, sock_read=t)}}
    return {}


def split(url: str, options: RemoteOptions = DEFAULT_OPTIONS) -> tuple[Any, str]:
    """``(filesystem, path in it)`` of ``url``."""
    fs = filesystem(protocol_of(url), options)
    return fs, fs._strip_protocol(url)


def glob_urls(pattern: str, options: RemoteOptions = DEFAULT_OPTIONS) -> list[str]:
    """The objects matching a URL glob (``s3://b/train-*.jsonl``), sorted, as URLs."""
    fs, path = split(pattern, options)
    found = with_retries(lambda: fs.glob(path), pattern, "list", options)
    fs.invalidate_cache()  # listings must not stand in for later stats (stale ETags)
    files = [p for p in found if not str(p).endswith("/")]
    return sorted(fs.unstrip_protocol(p) for p in files)


def join_url(root: str, relative: str) -> str:
    """``relative`` under the URL folder ``root`` (``..`` resolved, never above the bucket).

    Example:
        >>> join_url("s3://b/images/", "cats/../dogs/1.jpg")
        's3://b/images/dogs/1.jpg'
    """
    scheme, rest = root.split("://", 1)
    head, _, base = rest.partition("/")
    path = posixpath.normpath(posixpath.join("/" + base, relative))
    return f"{scheme}://{head}{path}"


def parent_url(url: str) -> str:
    """The folder of the object ``url`` (``s3://b/d/x.jsonl`` -> ``s3://b/d``)."""
    return url.rsplit("/", 1)[0]


# -- retries -----------------------------------------------------------------------------------


def with_retries(
    call: Callable[[], T], url: str, what: str, options: RemoteOptions = DEFAULT_OPTIONS
) -> T:
    """``call()``, tried again after transient failures; ``RemoteError`` when they persist.

    Raises:
        RemoteError: still failing after ``options.retries`` retries, or a permanent failure
            (no such object, access refused), naming ``url`` (redacted) and the last error.
        SourceChanged: the object changed while it was read (a failed ``If-Match``).
    """
    attempts = options.retries + 1
    for attempt in range(attempts):
        try:
            return call()
        except ChuteError:
            raise
        except Exception as exc:
            if type(exc).__name__ == "FileExpired":
                raise SourceChanged(
                    f"{redact(url)}: the object changed (its ETag differs) since it was "
                    f"indexed; re-open the source to re-index it"
                ) from None
            if not _transient(exc):
                raise RemoteError(
                    f"{redact(url)}: {what} failed ({_describe(exc)})",
                    url=redact(url),
                    missing=isinstance(exc, FileNotFoundError),
                ) from None
            if attempt + 1 == attempts:
                raise RemoteError(
                    f"{redact(url)}: {what} failed after {attempts} attempts (last: "
                    f"{_describe(exc)}); check the endpoint, the network and the credentials' "
                    f"chain, or raise RemoteOptions(retries=..., timeout=...)",
                    url=redact(url),
                ) from None
            delay = min(_MAX_BACKOFF, options.backoff * (2**attempt))
            time.sleep(delay * (0.5 + random.random() / 2))
    raise AssertionError("unreachable")  # pragma: no cover


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
        return False
    if isinstance(exc, NotADirectoryError | ValueError | TypeError | KeyError):
        return False
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    return not (isinstance(status, int) and 400 <= status < 500 and status not in (408, 429))


def _describe(exc: BaseException) -> str:
    kind = None
    if isinstance(exc, FileNotFoundError):
        kind = "no such object"
    elif isinstance(exc, PermissionError):
        kind = "access refused"
    text = redact(str(exc)).strip() or type(exc).__name__
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{kind}: {text}" if kind else f"{type(exc).__name__}: {text}"
