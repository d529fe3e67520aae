"""Commit notices between the processes of one machine (DESIGN §4, departure).

Every daphne process's hub binds a Unix datagram socket in one directory per
database (``directory()``); a committing process, after COMMIT, sends each
Group's head notice, with the Events the commit appended (the notice the
channel layer carries, see ``missions.delivery``), to every socket in it.
That is one hop from the committing process to the serving process, where
the channel layer is two (committer to Redis to the hub) or, with the
in-memory layer, none at all between processes.

It is an addition to the channel layer, not a replacement: the layer (Redis
across machines), the embedded database's file watch and the periodic head
check still run, and a hub takes whichever notice comes first (a later one
is old news). A datagram that cannot be sent (a hub's queue is full, a hub
has gone) costs latency only. Order and completeness never depend on it:
the hub uses carried Events only when they continue its feed by sequence and
hash chain (``Hub.notice_now``).

The directory is private to the user running the service (created with mode
0700; one that is not, or is not this user's, or is a symlink, turns local
notices off with a warning), so only that user's processes can send a hub a
notice. ``MWP_LOCAL_NOTICES=0`` turns them off; ``MWP_NOTICE_DIR`` names the
directory.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import hashlib
import json
import logging
import os
import secrets
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connections

log = logging.getLogger(__name__)

SUFFIX = ".sock"
# The largest datagram read: a notice carries its Events up to
# delivery.MAX_CARRIED_BYTES (below this); a bigger one goes as the head alone.
MAX_DATAGRAM = 72 * 1024
RECEIVE_BUFFER = 4 * 1024 * 1024  # asked for; the kernel caps it (net.core.rmem_max)
# A directory listing is trusted while the directory's modification time is
# unchanged, unless that time is this recent: two changes within one tick of
# the file system's clock can leave the same time.
LISTING_SETTLE_SECONDS = 0.05


def database_file() -> str | None:
    """The embedded SQLite database's file, when the default database is one."""
    conn = connections["default"]
    name = str(conn.settings_dict["NAME"])
    if conn.vendor != "sqlite" or name.startswith(("file:", ":memory:")) or not os.path.exists(name):
        return None
    return os.path.abspath(name)


def _database_key() -> str | None:
    """What names the default database across processes; None for a
    database no other process can open (in-memory SQLite)."""
    conn = connections["default"]
    if conn.vendor == "sqlite":
        return database_file()
    cfg = conn.settings_dict
    return f"{conn.vendor}|{cfg.get('HOST') or 'localhost'}|{cfg.get('PORT') or ''}|{cfg['NAME']}"


def database_digest() -> str | None:
    """A short name of the default database, the same in every process
    that opens it; None for a database no other process can open."""
    key = _database_key()
    return None if key is None else hashlib.sha256(key.encode()).hexdigest()[:16]


def directory() -> str | None:
    """The notice directory of the default database, created if needed;
    None when local notices are off or the directory cannot be trusted."""
    if not settings.MWP_LOCAL_NOTICES:
        return None
    if settings.MWP_NOTICE_DIR:
        return _private_directory(os.path.abspath(settings.MWP_NOTICE_DIR))
    digest = database_digest()
    if digest is None:
        return None
    # Short, so that socket paths stay within the 108 bytes of sun_path.
    return _private_directory(os.path.join(tempfile.gettempdir(), f"mwp-notices-{os.getuid()}-{digest}"))


@functools.lru_cache(maxsize=16)
def _private_directory(path: str) -> str | None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        log.warning("local commit notices are off: cannot create %s (%s)", path, e)
        return None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        log.warning("local commit notices are off: %s is not a directory private to this user", path)
        return None
    return path


def encode(message: dict[str, Any]) -> bytes:
    """A notice as sent to a hub (``delivery.notice_bytes`` keeps it within
    ``MAX_DATAGRAM``)."""
    return json.dumps(message, separators=(",", ":")).encode()


def pack(notices: list[bytes]) -> list[bytes]:
    """A commit's notices (each ``encode``d) in as few datagrams as hold
    them, in order: each datagram a JSON array of notices, at most
    ``MAX_DATAGRAM`` bytes. One datagram is one send per hub and one
    wake-up of it."""
    datagrams: list[bytes] = []
    batch: list[bytes] = []
    size = 1
    for notice in notices:
        if batch and size + len(notice) + 1 > MAX_DATAGRAM:
            datagrams.append(b"[" + b",".join(batch) + b"]")
            batch, size = [], 1
        batch.append(notice)
        size += len(notice) + 1
    if batch:
        datagrams.append(b"[" + b",".join(batch) + b"]")
    return datagrams


class Sender:
    """Sends datagrams to every hub socket of a directory, from any thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self.pid = 0
        self.listed_mtime: int | None = None
        self.peers: tuple[str, ...] = ()

    def hubs(self) -> tuple[str, ...]:
        """The hub sockets in the directory (a stat; a listing when it changed)."""
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            return ()
        if mtime != self.listed_mtime:
            try:
                names = os.listdir(self.path)
            except OSError:
                return ()
            self.peers = tuple(os.path.join(self.path, n) for n in names if n.endswith(SUFFIX))
            settled = time.time_ns() - mtime > LISTING_SETTLE_SECONDS * 1e9
            self.listed_mtime = mtime if settled else None
        return self.peers

    def send(self, datagrams: list[bytes]) -> set[str]:
        """Send each datagram to every hub; the names (``Receiver.name``) of
        the hubs that took them all."""
        hubs = self.hubs()
        took: set[str] = set()
        if not hubs or not datagrams:
            return took
        if self.sock is None or self.pid != os.getpid():  # a forked child makes its own
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.sock.setblocking(False)
            self.pid = os.getpid()
        for hub in hubs:
            try:
                for data in datagrams:
                    self.sock.sendto(data, hub)
            except (BlockingIOError, InterruptedError):
                log.debug("the notice queue of %s is full; it catches up another way", hub)
                continue
            except (ConnectionRefusedError, FileNotFoundError):
                # A hub that has gone without removing its socket.
                with contextlib.suppress(OSError):
                    os.unlink(hub)
                self.listed_mtime = None
                continue
            except OSError:
                log.warning("could not send a commit notice to %s", hub, exc_info=True)
                continue
            took.add(os.path.basename(hub))
        return took


_senders: dict[str, Sender] = {}


def sender() -> Sender | None:
    """This process's sender for the default database's hubs, or None."""
    path = directory()
    if path is None:
        return None
    found = _senders.get(path)
    if found is None:
        found = _senders[path] = Sender(path)
    return found


class Receiver:
    """A hub's socket: each notice of a datagram (a JSON array of objects,
    ``pack``, or one object) is handed to ``handle`` on the event loop, in
    order, as it arrives."""

    def __init__(self, path: str, handle: Callable[[dict[str, Any]], None]) -> None:
        self.directory = path
        self.handle = handle
        self.sock: socket.socket | None = None
        self.path = ""

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        path = os.path.join(self.directory, f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.bind(path)
        except OSError as e:
            sock.close()
            log.warning("local commit notices are off for this process: cannot bind %s (%s)", path, e)
            return False
        self.sock, self.path = sock, path
        loop.add_reader(sock.fileno(), self._readable)
        atexit.register(self._unlink)
        return True

    def _readable(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                log.warning("reading a commit notice failed", exc_info=True)
                return
            try:
                decoded = json.loads(data)
            except ValueError:
                log.warning("a malformed commit notice (%d bytes) was dropped", len(data))
                continue
            for message in decoded if isinstance(decoded, list) else [decoded]:
                if not isinstance(message, dict):
                    log.warning("a commit notice that is not an object was dropped")
                    continue
                try:
                    self.handle(message)
                except Exception:
                    log.exception("a commit notice failed: %r", message.get("group"))

    @property
    def name(self) -> str:
        """How senders and the hub registry (``missions.delivery``) know this hub."""
        return os.path.basename(self.path)

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.sock is None:
            return
        if not loop.is_closed():
            loop.remove_reader(self.sock.fileno())
        self.sock.close()
        self.sock = None
        self._unlink()
        atexit.unregister(self._unlink)

    def _unlink(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
