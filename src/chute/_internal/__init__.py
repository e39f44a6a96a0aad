"""Private helpers every layer may use; nothing here is public API.

* ``files``: crash-safe writes (``atomic_file``), file identities and hashes, the cache root.
* ``remote``: URLs, credentials refused and masked, fsspec filesystems per process, retries.
* ``objects``: one object behind a URL (identity, ranged reads, streams); local-or-remote
  helpers (``object_identity``, ``open_binary``).
* ``pools``: the start method of chute's process pools.
* ``lazy_torch``: torch imported where needed, with an install hint when it is missing.
* ``lazy``: a package's public names imported on first use (``lazy_exports``).
* ``fields``: field-by-field differences of nested values, for mismatch messages.
* ``tables``: plain aligned text tables for summaries.
"""
