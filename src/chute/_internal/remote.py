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
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from chute.errors import ChuteError, ConfigError, RemoteError, SourceChanged
from chute.remote_options import ENV_OPTIONS, RemoteOptions, options_from_env, parse_size

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

    A URL's scheme is written in lower case (schemes ignore case; fsspec's do not).

    Example:
        >>> absolute("s3://b/x.jsonl"), absolute("S3://b/x.jsonl"), absolute("/data/../data/x")
        ('s3://b/x.jsonl', 's3://b/x.jsonl', '/data/x')
    """
    text = os.fspath(path)
    if not is_url(text):
        return os.path.abspath(os.path.expanduser(text))
    scheme = text.split("://", 1)[0]
    return scheme.lower() + text[len(scheme) :]


def protocol_of(url: str) -> str:
    m = _SCHEME.match(url)
    return m.group(1).lower() if m else "file"


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
