"""A real S3 protocol server for the tests: moto's server mode on 127.0.0.1, and a fault proxy.

``S3Server`` starts ``moto.server.ThreadedMotoServer`` on a free port; ``Bucket`` holds a bucket of
it with helpers to upload files. ``FaultProxy`` is a TCP proxy in front of the server that drops
connections or answers slowly on demand, so retry and timeout paths meet real sockets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chute import RemoteOptions

# Short timeouts and backoff: the fault tests wait for them.
FAST = RemoteOptions(timeout=2.0, retries=2, backoff=0.01)

# Fake credentials: moto accepts any. Tests check these strings never appear in any output.
ACCESS_KEY = "AKIACHUTETESTKEY0001"
SECRET_KEY = "chute-secret-key-never-printed-7f3a"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """moto's S3 server on 127.0.0.1 (started by a session fixture)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.port = free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.stop()


def s3_env(endpoint: str) -> dict[str, str]:
    """The standard-chain environment pointing boto at ``endpoint`` with the fake credentials."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


class Bucket:
    """One fresh bucket of the server: ``url(key)``, ``put(key, data)``, ``upload(path, key)``."""

    def __init__(self, endpoint: str):
        import boto3

        self.name = f"chute-{uuid.uuid4().hex[:12]}"
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        self.client.create_bucket(Bucket=self.name)

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}"

    def put(self, key: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)
        return self.url(key)

    def upload(self, path: str | os.PathLike[str], key: str | None = None) -> str:
        return self.put(key or Path(path).name, Path(path).read_bytes())

    def get(self, key: str) -> bytes:
        return bytes(self.client.get_object(Bucket=self.name, Key=key)["Body"].read())

    def list_keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=prefix
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.name, Key=key)


class FaultProxy:
    """A TCP proxy to ``target_port`` that misbehaves on demand.

    Attributes (set them while it runs):
        drop: the next this-many connections are closed right after the request arrives.
        delay: seconds to wait before forwarding each answer (a slow server).
        connections: connections accepted so far.
    """

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.drop = 0
        self.delay = 0.0
        self.connections = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        self._sock.listen(64)
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                dropping = self.drop > 0
                if dropping:
                    self.drop -= 1
            threading.Thread(target=self._serve, args=(client, dropping), daemon=True).start()

    def _serve(self, client: socket.socket, dropping: bool) -> None:
        with contextlib.ExitStack() as stack:
            stack.callback(client.close)
            if dropping:
                with contextlib.suppress(OSError):
                    client.recv(65536)  # the request arrives, then the connection dies
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            stack.callback(upstream.close)
            threading.Thread(target=self._pipe, args=(client, upstream, 0.0), daemon=True).start()
            self._pipe(upstream, client, self.delay)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, delay: float) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if delay:
                    time.sleep(delay)
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop = True
        self._sock.close()


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    old: dict[str, Any] = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _sizes(folder: Path) -> dict[str, int]:
    out = {}
    for entry in os.scandir(folder) if folder.exists() else ():
        with contextlib.suppress(FileNotFoundError):
            out[entry.name] = entry.stat().st_size
    return out


def folder_bytes(folder: Path) -> tuple[int, set[str]]:
    """Bytes of file data under the cache folder now (complete and partial), and the names.

    One moment, from scans made one after another: complete files are counted where they are
    there before and after the scan of partial downloads. A file evicted between the scans
    and a download begun in its room would otherwise both count (a false peak one file over
    the limit, seen once on a loaded machine); a file renamed into ``data/`` meanwhile counts
    once, as the partial download it was.
    """
    before = _sizes(folder / "data")
    partial = _sizes(folder / "partial")
    after = _sizes(folder / "data")
    kept = {name: size for name, size in before.items() if name in after}
    return sum(kept.values()) + sum(partial.values()), set(before) | set(after)


class DiskSampler:
    """Samples the folder's disk use every few milliseconds from a thread, while a read runs."""

    def __init__(self, folder: Path):
        self.folder, self.peak, self.seen, self.samples = folder, 0, set[str](), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.003)

    def sample(self) -> None:
        used, names = folder_bytes(self.folder)
        self.peak, self.samples = max(self.peak, used), self.samples + 1
        self.seen |= names

    def __enter__(self) -> DiskSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
