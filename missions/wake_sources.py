"""The live path's wake sources: what tells the hub (``missions.hub``) that a head moved.

Besides the channel layer's receive loop and the periodic head check (in the
hub), two sources cut the wait: the Redis pub/sub layer's queue handing a
notice to the hub as it is received (``immediate_notices``), and a watch on
the embedded database's files (``FileChanges``), written by every commit of
any process. Each only says "look now"; what is delivered is still decided
by the feed core (``missions.feed``) from what the database holds.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import struct
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class _ImmediateQueue(asyncio.Queue[Any]):
    """The hub's channel queue in the Redis pub/sub layer: a message the hub
    can act on at once (``Hub.notice_now``) is handled as the layer's reader
    hands it over, without waiting for the hub's receive loop to be
    scheduled; any other is queued for it as usual."""

    def __init__(self, deserialize: Callable[[bytes], dict[str, Any]], handle: Callable[[dict[str, Any]], bool]):
        super().__init__()
        self.deserialize = deserialize
        self.handle = handle

    def put_nowait(self, item: Any) -> None:
        try:
            handled = self.handle(self.deserialize(item))
        except Exception:
            log.exception("an immediate head notice failed; the hub's receive loop takes it")
            handled = False
        if not handled:
            super().put_nowait(item)


def immediate_notices(layer: Any, channel: str, handle: Callable[[dict[str, Any]], bool]) -> bool:
    """Let ``handle`` take ``channel``'s messages as they arrive, when
    ``layer`` is channels_redis's pub/sub layer (which queues each received
    message on the channel's ``asyncio.Queue`` with ``put_nowait``); True
    when installed. Other layers keep their own queues."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    if not isinstance(layer, RedisPubSubChannelLayer):
        return False
    queues = layer.channels  # this event loop's layer: channel name -> queue
    if type(queues.get(channel)) is not asyncio.Queue:
        return False
    queues[channel] = _ImmediateQueue(layer.deserialize, handle)
    return True


class FileChanges:
    """Calls ``on_change`` when a file named in ``names`` in ``directory`` is
    written (Linux inotify, through the C library; no polling).

    The hub watches the embedded SQLite database with it: every commit, in
    any process, writes its write-ahead log, so a commit of a Celery task or
    a management command is noticed as it happens, not at the next periodic
    head check. ``start`` answers False where inotify is not available; the
    periodic check then stays the only way (DESIGN §4)."""

    IN_MODIFY = 0x2
    _HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name

    def __init__(self, directory: str, names: set[str], on_change: Callable[[], None]) -> None:
        self.directory = directory
        self.names = {os.fsencode(n) for n in names}
        self.on_change = on_change
        self.fd = -1

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        if not sys.platform.startswith("linux"):
            return False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return False
            if libc.inotify_add_watch(fd, os.fsencode(self.directory), self.IN_MODIFY) < 0:
                os.close(fd)
                return False
        except (OSError, AttributeError):
            return False
        self.fd = fd
        loop.add_reader(fd, self._readable)
        return True

    def _readable(self) -> None:
        changed = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + self._HEADER.size <= len(data):
                _, _, _, length = self._HEADER.unpack_from(data, offset)
                start = offset + self._HEADER.size
                name = data[start : start + length].rstrip(b"\0")
                changed = changed or name in self.names
                offset = start + length
        if changed:
            self.on_change()

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.fd >= 0:
            if not loop.is_closed():
                loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
