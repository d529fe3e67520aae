"""The MissionWeave Worker runtime (DESIGN §6; STYLE §7): MWP 0.1 end to end. Django-free.

Public API (everything else is private):

- ``Store``: the local SQLite per-Group inbox, Cursor and Work queue, with the
  apply cycle, snapshot restore and rebuild (``store.py``); ``EventVerifier``
  and ``KeyCache``: the Group Authority signature check of every Event
  (``events.py``);
- ``ClientSession`` and its protocol events: the sans-I/O ``/mwp/0.1``
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
    SignatureRefused,
    SlotStopped,
    SnapshotRefused,
    StoreLocked,
    StoreMismatch,
    WorkerError,
)
from .events import EventVerifier, KeyCache
from .picker import Picker
from .projection import CheckpointRow, GroupMeta, OutboxRow, WorkRow
from .protocol import (
    Backpressure,
    BadFrame,
    ClientSession,
    Closed,
    CommandAccepted,
    CommandRefused,
    CursorTooOld,
    EventReceived,
    HelloRefused,
    Pong,
    ProtocolEvent,
    ServerError,
    SessionClosed,
    SubscriptionRefused,
    Welcome,
)
from .runtime import Worker
from .store import Cursor, Store

__all__ = [
    "Backpressure",
    "BadFrame",
    "Blocked",
    "BudgetExceeded",
    "ChainBroken",
    "CheckpointRow",
    "ClientSession",
    "Closed",
    "CommandAccepted",
    "CommandRefused",
    "Cursor",
    "CursorTooOld",
    "Decline",
    "EventReceived",
    "EventVerifier",
    "Fatal",
    "FifoPicker",
    "GroupMeta",
    "HelloRefused",
    "Identity",
    "KeyCache",
    "LeaseLost",
    "MalformedEvent",
    "OutboxRow",
    "PermanentFailure",
    "Picker",
    "Pong",
    "Preempted",
    "ProjectionError",
    "ProtocolEvent",
    "Refused",
    "Result",
    "RetryDecision",
    "ServerError",
    "SessionClosed",
    "SignatureRefused",
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
