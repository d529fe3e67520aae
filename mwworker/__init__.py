"""The MissionWeave Worker runtime (DESIGN §5; STYLE §7). Django-free.

Public API (everything else is private):

- ``Store``: the local SQLite per-Group inbox, Cursor and Work queue, with the
  apply cycle, snapshot restore and rebuild (``store.py``);
- ``ClientSession`` and its protocol events: the sans-I/O agent WebSocket
  client (``protocol.py``);
- the rows of the projection (``WorkRow``, ``GroupMeta``, ``CheckpointRow``,
  ``OutboxRow``) and the exception tree of ``errors.py``.
"""

from .errors import (
    ChainBroken,
    MalformedEvent,
    ProjectionError,
    SnapshotRefused,
    StoreLocked,
    StoreMismatch,
    WorkerError,
)
from .projection import CheckpointRow, GroupMeta, OutboxRow, WorkRow
from .protocol import (
    BadFrame,
    ClientSession,
    Closed,
    CommandRefused,
    CursorTooOld,
    EventReceived,
    MembershipChanged,
    ProtocolEvent,
    ReceiptReceived,
    ServerError,
    SessionClosed,
    SubscriptionRefused,
    Welcome,
)
from .store import Cursor, Store

__all__ = [
    "BadFrame",
    "ChainBroken",
    "CheckpointRow",
    "ClientSession",
    "Closed",
    "CommandRefused",
    "Cursor",
    "CursorTooOld",
    "EventReceived",
    "GroupMeta",
    "MalformedEvent",
    "MembershipChanged",
    "OutboxRow",
    "ProjectionError",
    "ProtocolEvent",
    "ReceiptReceived",
    "ServerError",
    "SessionClosed",
    "SnapshotRefused",
    "Store",
    "StoreLocked",
    "StoreMismatch",
    "SubscriptionRefused",
    "Welcome",
    "WorkRow",
    "WorkerError",
]
