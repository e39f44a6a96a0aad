"""Which process holds a marker file, and whether it is provably gone.

A marker (a finalizing rank's heartbeat) records its owner: host name, boot id, pid namespace,
pid and the process's start time. Another process can then tell, on the same machine, that
the owner is dead (no such pid, a zombie, or the pid reused by a process that started later)
without waiting for the heartbeat to go stale::

    marker's owner vs this process        proof the owner is gone
    ───────────────────────────────       ──────────────────────────────────────────────
    same host, boot id, pid namespace     its pid runs no more, is a zombie, or runs a
                                          process with another start time
    another host (or boot, namespace)     none: only a heartbeat older than its grace
    no /proc (not Linux)                  none: the same

Example:
    >>> me = Owner.here()
    >>> Owner.parse(me.to_bytes()) == me, me.gone()
    (True, False)
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from typing import Any

import orjson

__all__ = ["Owner"]


@dataclass(frozen=True)
class Owner:
    """One process, named so that another process can tell whether it still runs.

    Attributes:
        host: the host name.
        boot: the kernel's boot id (``None`` where there is none to read).
        pidns: the pid namespace (``None`` where unknown): the same pid in another namespace is
            another process.
        pid: the process id.
        start: the process's start time in clock ticks since boot (``None`` where unknown).
    """

    host: str
    boot: str | None
    pidns: str | None
    pid: int
    start: int | None

    @classmethod
    def here(cls) -> Owner:
        """This process."""
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), _pid_namespace(), pid, _start_time(pid))

    @classmethod
    def of(cls, pid: int) -> Owner:
        """Process ``pid`` of this machine, as it would name itself (for tests and tools)."""
        here = cls.here()
        return cls(here.host, here.boot, here.pidns, pid, _start_time(pid))

    def to_bytes(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def parse(cls, data: bytes | None) -> Owner | None:
        """The owner a marker records; ``None`` for no marker or one without an owner."""
        if not data:
            return None
        try:
            fields: Any = orjson.loads(data)
            return cls(**fields)
        except (orjson.JSONDecodeError, TypeError):
            return None  # a marker of an older chute (its content: a time, or nothing)

    def gone(self) -> bool:
        """True only when this machine can prove the process no longer runs.

        The owner must be on this host, in this boot and pid namespace, with a known start
        time; then a pid that runs nothing, a zombie, or a pid now held by a process that
        started at another time is proof. Anything else is not (``False``): a process on
        another machine can only be judged by how old its heartbeat is.
        """
        here = Owner.here()
        same_place = (self.host, self.boot, self.pidns) == (here.host, here.boot, here.pidns)
        if not same_place or None in (self.boot, self.pidns, self.start):
            return False
        now = _start_time(self.pid)
        return now is None or now != self.start


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _boot_id() -> str | None:
    return _read("/proc/sys/kernel/random/boot_id")


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """Process ``pid``'s start time (clock ticks since boot); ``None``: no process, or a zombie."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[19])
