"""The MissionWeave Worker runtime (DESIGN §5; STYLE §7). Django-free.

Public API (everything else is private):

- ``Store``: the local SQLite per-Group inbox, Cursor and Work queue, with the
  apply cycle, snapshot restore and rebuild (``store.py``);
- ``ClientSession`` and its protocol events: the sans-I/O agent WebSocket
  client (``protocol.py``);
- ``Worker`` and what a capability handler sees (``SlotContext``,
  ``Result``), the ``Picker`` protocol with ``FifoPicker``, admission control
  (``admit``, ``Decline``) and the retry rule (``retry_decision``): the
  asyncio runtime (``runtime.py``); ``Identity`` and ``WorkerConfig`` (the
  key file and ``worker.toml``);
- the rows of the projection (``WorkRow``, ``GroupMeta``, ``CheckpointRow``,
  ``OutboxRow``) and the exception tree of ``errors.py``.
"""

from .admission import Decline, FifoPicker, RetryDecision, admit, retry_decision
from .config import Identity, WorkerConfig
from .context import Result, SlotContext
from .errors import (
    Blocked,
    BudgetExceeded,
    ChainBroken,
    Fatal,
    LeaseLost,
    MalformedEvent,
    PermanentFailure,
    Preempted,
    ProjectionError,
    Refused,
    SlotStopped,
    SnapshotRefused,
    StoreLocked,
    StoreMismatch,
    WorkerError,
)
from .picker import Picker
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
from .runtime import Worker
from .store import Cursor, Store

__all__ = [
    "BadFrame",
    "Blocked",
    "BudgetExceeded",
    "ChainBroken",
    "CheckpointRow",
    "ClientSession",
    "Closed",
    "CommandRefused",
    "Cursor",
    "CursorTooOld",
    "Decline",
    "EventReceived",
    "Fatal",
    "FifoPicker",
    "GroupMeta",
    "Identity",
    "LeaseLost",
    "MalformedEvent",
    "MembershipChanged",
    "OutboxRow",
    "PermanentFailure",
    "Picker",
    "Preempted",
    "ProjectionError",
    "ProtocolEvent",
    "ReceiptReceived",
    "Refused",
    "Result",
    "RetryDecision",
    "ServerError",
    "SessionClosed",
    "SlotContext",
    "SlotStopped",
    "SnapshotRefused",
    "Store",
    "StoreLocked",
    "StoreMismatch",
    "SubscriptionRefused",
    "Welcome",
    "WorkRow",
    "Worker",
    "WorkerConfig",
    "WorkerError",
    "admit",
    "retry_decision",
]
