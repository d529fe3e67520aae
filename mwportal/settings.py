"""Settings, read from environment variables with embedded defaults (DESIGN §6).

- ``MWP_DATABASE_URL``: ``sqlite:///path`` or ``postgres://...``; default a
  SQLite file under ``var/``.
- ``MWP_REDIS_URL``: when set, the channel layer and Celery use Redis;
  otherwise the in-memory layer and Celery's filesystem broker.
- ``MWP_SERVICE_KEY_DIR``: the Organization service Principals' key files.
- ``MWP_COMMAND_FRESHNESS_SECONDS``: how old (and how far ahead) a new signed
  Command's ``issuedAt`` may be; default 300.
- ``MWP_ONLINE_REPLAY_EVENTS``: how many Events replay stays online.
- ``MWP_SECRET_KEY``: Django's secret; without it, a per-installation key
  generated on first run into ``var/secret_key`` (mode 0600). Required when
  ``MWP_PRODUCTION=1``.
- ``MWP_DEBUG=1``: Django's debug mode (technical error pages); off unless set.
- ``MWP_ALLOWED_HOSTS``: comma-separated host names.
- ``MWP_PRODUCTION=1``: behind the documented TLS proxy (docs/deploy.md):
  HSTS, Secure cookies, HTTPS redirect trusting ``X-Forwarded-Proto``,
  ``MWP_CSRF_TRUSTED_ORIGINS``; static files come from the proxy.
- ``MWP_AUDIT_ENCRYPTION_KEY`` (base64url of 32 bytes) or
  ``MWP_AUDIT_ENCRYPTION_KEY_FILE``: the AES-256-GCM key of archived Groups'
  audit logs, kept in ``MWP_AUDIT_ARCHIVE_DIR``; ``MWP_ARCHIVE_AFTER_SECONDS``:
  the default retention delay before archival (docs/deploy.md).
- ``MWP_DB_POOL_MIN``/``MWP_DB_POOL_MAX``/``MWP_DB_POOL_TIMEOUT``: the
  per-process PostgreSQL connection pool.

Every file the server creates is its user's alone: ``var/`` is 0700, the
SQLite files and the secret key 0600, and the process umask is 077 from the
moment these settings load (issue 16 item 8).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from mwportal.security import installation_secret, private_dir, private_file

# Set before anything below creates a file: the database, the broker's
# folders, the Artifact store and the notice sockets are the server user's
# alone (issue 16 item 8). Static files, which a proxy reads, are given their
# own modes (STORAGES below).
os.umask(0o077)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = private_dir(Path(os.environ.get("MWP_VAR_DIR", BASE_DIR / "var")))

# Production behind the documented proxy (docs/deploy.md); off for the
# embedded default and the tests.
MWP_PRODUCTION = os.environ.get("MWP_PRODUCTION", "") == "1"
# Debug is opt-in: its technical pages show settings and the database URL
# (issue 16 item 3).
DEBUG = os.environ.get("MWP_DEBUG", "") == "1"
if MWP_PRODUCTION and DEBUG:
    raise ImproperlyConfigured("MWP_DEBUG=1 is refused with MWP_PRODUCTION=1: debug pages show settings and secrets")
if os.environ.get("MWP_SECRET_KEY"):
    SECRET_KEY = os.environ["MWP_SECRET_KEY"]
elif MWP_PRODUCTION:
    raise ImproperlyConfigured(
        "MWP_PRODUCTION=1 needs MWP_SECRET_KEY: set it to a long random value kept outside the checkout, "
        'e.g. python -c "import secrets; print(secrets.token_urlsafe(50))" (docs/deploy.md)'
    )
else:
    # Generated on first run, as the server's signing key is; kept across restarts.
    SECRET_KEY = installation_secret(VAR_DIR / "secret_key")
# The test client's "testserver" is added by Django's test set-up, never here.
ALLOWED_HOSTS = [h for h in os.environ.get("MWP_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "missions",
    "governance",
    "workitems",
    "conversations",
    "artifacts",
    "portal",
    # Sign-in throttling (issue 16 item 4; portal/login.py).
    "axes",
]

MIDDLEWARE = [
    # First: a Command shed past the in-flight bound costs nothing else (issue 16 item 9).
    "missions.backpressure.BackpressureMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Every portal page's Content-Security-Policy (issue 16 item 2).
    "mwportal.security.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as axes requires: turns a locked-out sign-in into the sign-in page
    # with its refusal (portal.login.lockout_response).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "mwportal.urls"
ASGI_APPLICATION = "mwportal.asgi.application"
WSGI_APPLICATION = "mwportal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "mwportal.security.csp_nonce",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("MWP_DATABASE_URL", f"sqlite:///{VAR_DIR / 'mwportal.sqlite3'}")
# No persistent PostgreSQL connections: under ASGI every request thread would
# keep its own, and two daphnes ran the server out of connections (issue 16
# item 9); they come from a bounded pool per process instead (below).
_db = dj_database_url.parse(DATABASE_URL, conn_max_age=0)
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded file has no server-side limit to exhaust, and reopening it
    # per request would rerun the PRAGMAs below: its threads keep their
    # connections (checked before reuse), as before the pool.
    _db["CONN_MAX_AGE"], _db["CONN_HEALTH_CHECKS"] = 300, True
    # The embedded database is created private (its -wal/-shm follow its mode).
    # Only where its directory exists: a command that needs no database
    # (mwp verify-audit) must start whatever the URL names; SQLite itself
    # refuses a missing directory when a database is actually opened.
    if _db["NAME"] and _db["NAME"] != ":memory:" and Path(_db["NAME"]).parent.is_dir():
        private_file(Path(_db["NAME"]))
    # WAL lets readers run beside the one writer; IMMEDIATE takes the write
    # lock at BEGIN so concurrent writers (daphne threads, Celery) queue on
    # the busy timeout instead of failing with "database is locked" when a
    # read transaction tries to upgrade (DESIGN §6).
    _db["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
    }
    # The test database is a file, not memory, so that a real daphne started
    # by the WebSocket tests reads the same database as the test.
    _db["TEST"] = {"NAME": str(VAR_DIR / "test_mwportal.sqlite3")}
elif _db["ENGINE"] in ("django.db.backends.postgresql", "django.db.backends.postgresql_psycopg2"):
    _db["ENGINE"] = "django.db.backends.postgresql"
    # Server-side binding with a prepare threshold lets psycopg prepare the
    # write path's statements after five uses (Django disables preparing
    # unless asked): PostgreSQL stops re-planning them on every Command.
    _db["OPTIONS"] = {
        "server_side_binding": True,
        "prepare_threshold": 5,
        # Per process (each daphne, each Celery worker process): at most
        # MWP_DB_POOL_MAX connections, so N processes hold at most N x max
        # (docs/deploy.md sizes it against max_connections). A request that
        # finds the pool empty waits MWP_DB_POOL_TIMEOUT seconds and then
        # fails with OperationalError, which the API answers as a retryable
        # error instead of queueing without bound.
        "pool": {
            "min_size": int(os.environ.get("MWP_DB_POOL_MIN", "2")),
            "max_size": int(os.environ.get("MWP_DB_POOL_MAX", "10")),
            "timeout": float(os.environ.get("MWP_DB_POOL_TIMEOUT", "3")),
            # Idle connections above min_size are closed after a minute, so
            # a burst's connections do not stay open on the server.
            "max_idle": float(os.environ.get("MWP_DB_POOL_MAX_IDLE", "60")),
        },
    }
    # Several checkouts may test against one server at once: each names its
    # own test database (default: Django's ``test_<name>``).
    if os.environ.get("MWP_TEST_DATABASE_NAME"):
        _db["TEST"] = {"NAME": os.environ["MWP_TEST_DATABASE_NAME"]}
DATABASES = {"default": _db}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# In production the proxy serves collectstatic's output: put it outside var/
# (MWP_STATIC_ROOT), which only the server user can enter.
STATIC_ROOT = Path(os.environ.get("MWP_STATIC_ROOT", VAR_DIR / "static"))
# Under the 077 umask collected files would be unreadable to the proxy; they
# are public by nature.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage",
        "OPTIONS": {"file_permissions_mode": 0o644, "directory_permissions_mode": 0o755},
    },
}
# Without the proxy (the embedded default, the tests) daphne serves them itself.
MWP_SERVE_STATIC = os.environ.get("MWP_SERVE_STATIC", "0" if MWP_PRODUCTION else "1") == "1"

# Portal sessions live in the database under a hash of their key: a copy of
# the database (or a reader of django_session) holds no usable session cookie.
SESSION_ENGINE = "mwportal.sessions"
X_FRAME_OPTIONS = "DENY"

if MWP_PRODUCTION:
    # Behind the TLS-terminating proxy of docs/deploy.md, which sets
    # X-Forwarded-Proto and strips it from clients (issue 16 item 3).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = int(os.environ.get("MWP_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = os.environ.get("MWP_HSTS_INCLUDE_SUBDOMAINS", "1") == "1"
    SECURE_HSTS_PRELOAD = os.environ.get("MWP_HSTS_PRELOAD", "1") == "1"
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # No page script reads the CSRF cookie (forms carry the token).
    CSRF_COOKIE_HTTPONLY = True
    CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("MWP_CSRF_TRUSTED_ORIGINS", "").split(",") if o]
    # An operator who opts out of subdomains or preloading has decided so;
    # check --deploy would otherwise warn about it forever.
    SILENCED_SYSTEM_CHECKS = [
        *([] if SECURE_HSTS_INCLUDE_SUBDOMAINS else ["security.W005"]),
        *([] if SECURE_HSTS_PRELOAD else ["security.W021"]),
    ]
# The portal's own CSS and JavaScript: local files, never a CDN (issue 7).
STATICFILES_DIRS = [BASE_DIR / "static"]

# People sign in to the portal; the admin keeps its own login page.
LOGIN_URL = "portal:login"
LOGIN_REDIRECT_URL = "portal:home"
LOGOUT_REDIRECT_URL = "portal:login"

# Sign-in throttling (issue 16 item 4; portal/login.py says how): per account
# and per address, MWP_LOGIN_FAILURE_LIMIT failures lock for
# MWP_LOGIN_COOLOFF_MINUTES, the right password included.
AUTHENTICATION_BACKENDS = ["portal.login.SignInThrottle", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = int(os.environ.get("MWP_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("MWP_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = False  # portal.login.clear_failures_on_sign_in resets (account, address) only
AXES_LOCKOUT_CALLABLE = "portal.login.lockout_response"
AXES_CLIENT_IP_CALLABLE = "portal.login.client_address"
AXES_DISABLE_ACCESS_LOG = True  # failures are what is counted; a row per success would only grow

# Commands are at most 1 MiB (DESIGN §4); the command view reads the body
# itself and answers PROTOCOL_VIOLATION for anything larger, so Django's own limit
# sits just above it.
MWP_MAX_COMMAND_BYTES = 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = MWP_MAX_COMMAND_BYTES + 1024

MWP_REDIS_URL = os.environ.get("MWP_REDIS_URL", "")
# The Organization service Principals' key files (missions/service_keys.py, DESIGN §4).
MWP_SERVICE_KEY_DIR = os.environ.get("MWP_SERVICE_KEY_DIR", str(VAR_DIR / "service-keys"))
MWP_ONLINE_REPLAY_EVENTS = int(os.environ.get("MWP_ONLINE_REPLAY_EVENTS", "100000"))
# A newly presented signed Command's issuedAt window (PROTOCOL §6.4 freshness):
# at most this old, and at most this far ahead of the server's clock.
MWP_COMMAND_FRESHNESS_SECONDS = int(os.environ.get("MWP_COMMAND_FRESHNESS_SECONDS", "300"))
MWP_COMMAND_MAX_SKEW_SECONDS = int(os.environ.get("MWP_COMMAND_MAX_SKEW_SECONDS", "300"))
# How long a session token (HELLO's server_accept) stays valid; a newer session fences it sooner.
MWP_SESSION_TOKEN_SECONDS = int(os.environ.get("MWP_SESSION_TOKEN_SECONDS", "3600"))
MWP_ARTIFACT_ROOT = os.environ.get("MWP_ARTIFACT_ROOT", str(VAR_DIR / "artifacts"))
MWP_ARTIFACT_MAX_BYTES = int(os.environ.get("MWP_ARTIFACT_MAX_BYTES", str(2 * 1024**3)))
# The largest body of one request of a resumable upload (PATCH
# /api/v0.1/artifacts/uploads/{uploadId}); under ASGI also the largest single-request
# upload (daphne holds a request body whole in memory).
MWP_ARTIFACT_CHUNK_BYTES = int(os.environ.get("MWP_ARTIFACT_CHUNK_BYTES", str(8 * 1024**2)))
# A resumable upload not completed within this long is deleted.
MWP_ARTIFACT_UPLOAD_TTL_SECONDS = int(os.environ.get("MWP_ARTIFACT_UPLOAD_TTL_SECONDS", "86400"))
# Per Agent, the resumable uploads it may hold open and the bytes their
# Upload-Length may reserve between them; past either, RATE_LIMITED (issue 16 item 8).
MWP_ARTIFACT_UPLOAD_MAX_OPEN = int(os.environ.get("MWP_ARTIFACT_UPLOAD_MAX_OPEN", "16"))
MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES = int(os.environ.get("MWP_ARTIFACT_UPLOAD_MAX_RESERVED_BYTES", str(4 << 30)))
# The storage class of Artifact bytes (dotted path; empty: a FileSystemStorage
# under MWP_ARTIFACT_ROOT).
MWP_ARTIFACT_STORAGE = os.environ.get("MWP_ARTIFACT_STORAGE", "")
# The review pipeline (spec 13.2) after each work.submit: "celery" enqueues it
# after commit, "inline" runs it after commit in the same process, "off" leaves
# it to `mwp review WORKITEM_ID` or the review task.
MWP_REVIEW_ON_SUBMIT = os.environ.get("MWP_REVIEW_ON_SUBMIT", "celery")
# How long the offer of a review WorkItem to the Group's reviewers stays open.
MWP_REVIEW_OFFER_SECONDS = int(os.environ.get("MWP_REVIEW_OFFER_SECONDS", "86400"))
# The largest output a json_schema check parses (bytes).
MWP_REVIEW_JSON_MAX_BYTES = int(os.environ.get("MWP_REVIEW_JSON_MAX_BYTES", str(16 * 1024**2)))
# WorkItem timing (spec 10.3/11.3): how long an owner has to start after
# acceptance or a checkpoint, how long an Execution Lease lasts before it must
# be renewed, and how long a blocked owner keeps ownership.
MWP_START_BY_SECONDS = int(os.environ.get("MWP_START_BY_SECONDS", "900"))
MWP_LEASE_SECONDS = int(os.environ.get("MWP_LEASE_SECONDS", "300"))
# How long after its lease expired a disconnected Worker may go on buffering
# progress of already-active reversible work (spec 11.5; MWP-WRK-021).
MWP_OFFLINE_GRACE_SECONDS = int(os.environ.get("MWP_OFFLINE_GRACE_SECONDS", "600"))
MWP_BLOCKED_LEASE_SECONDS = int(os.environ.get("MWP_BLOCKED_LEASE_SECONDS", "86400"))
MWP_MAX_OFFER_CANDIDATES = 16

if MWP_REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # Redis pub/sub: a notice is one PUBLISH that Redis pushes to
            # every subscribed process at once (the list-based core layer
            # takes three round trips to send and a blocking pop to receive,
            # about a millisecond on the live path). The layer only carries
            # "head moved" and "your Membership/session changed" notices,
            # which are best effort by design (missions/delivery.py): a
            # notice lost while a process reconnects costs latency until the
            # head check, never an Event.
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # No socket timeout: redis-py's default (5 s) would break an idle
            # subscription's read (channels_redis#422).
            "CONFIG": {"hosts": [{"address": MWP_REDIS_URL, "socket_timeout": None}]},
        }
    }
    CELERY_BROKER_URL = MWP_REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    _celery_dir = VAR_DIR / "celery"
    for _sub in ("out", "processed", "control"):
        (_celery_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_celery_dir / "out"),
        "data_folder_out": str(_celery_dir / "out"),
        "processed_folder": str(_celery_dir / "processed"),
        # Broadcast/control state too, instead of a "control" folder in the
        # current directory.
        "control_folder": str(_celery_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
# Expiry and retry sweeps (workitems/tasks.py); each is idempotent, so overlap is harmless.
MWP_EXPIRY_INTERVAL_SECONDS = float(os.environ.get("MWP_EXPIRY_INTERVAL_SECONDS", "10"))
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    name: {"task": f"workitems.{name}", "schedule": MWP_EXPIRY_INTERVAL_SECONDS}
    for name in ("expire_leases", "expire_start_by", "expire_blocked_leases", "retry_failed")
}
# The Coordinator lease (PROTOCOL §7.2): its default renewal period, and how often the beat
# records leases that ran out unrenewed.
MWP_COORDINATOR_LEASE_SECONDS = int(os.environ.get("MWP_COORDINATOR_LEASE_SECONDS", "86400"))
CELERY_BEAT_SCHEDULE["expire_coordinator_leases"] = {
    "task": "missions.expire_coordinator_leases",
    "schedule": MWP_EXPIRY_INTERVAL_SECONDS,
}
MWP_SNAPSHOT_EVERY_EVENTS = int(os.environ.get("MWP_SNAPSHOT_EVERY_EVENTS", "1000"))
CELERY_BEAT_SCHEDULE["snapshot_groups"] = {"task": "missions.snapshot_groups", "schedule": 60.0}
# Archival (§7.4): a finished Mission's Group is archived once it has been quiet for the
# Organization's retention delay (its policy's ``archive_after_seconds``, else this default);
# its audit log is then kept encrypted (AES-256-GCM) with the key below (docs/deploy.md).
MWP_ARCHIVE_AFTER_SECONDS = int(os.environ.get("MWP_ARCHIVE_AFTER_SECONDS", str(7 * 24 * 3600)))
CELERY_BEAT_SCHEDULE["archive_groups"] = {"task": "missions.archive_groups", "schedule": 300.0}
MWP_AUDIT_ENCRYPTION_KEY = os.environ.get("MWP_AUDIT_ENCRYPTION_KEY", "")
MWP_AUDIT_ENCRYPTION_KEY_FILE = os.environ.get("MWP_AUDIT_ENCRYPTION_KEY_FILE", str(VAR_DIR / "audit-encryption.key"))
MWP_AUDIT_ARCHIVE_DIR = os.environ.get("MWP_AUDIT_ARCHIVE_DIR", str(VAR_DIR / "audit-archive"))
# How often a daphne process re-reads the heads of the Groups it serves, so
# Events committed by another process reach subscribers even when the
# channel layer is in-memory (DESIGN §4).
MWP_HEAD_POLL_SECONDS = float(os.environ.get("MWP_HEAD_POLL_SECONDS", "1.0"))
# Commit notices between the processes of this machine (missions/local_notices.py):
# a commit's head notice, with its Events, goes straight to every daphne
# process serving the same database, over a Unix datagram socket in a
# private directory (MWP_NOTICE_DIR; default one per user and database under
# the system's temporary directory). Off: "0".
MWP_LOCAL_NOTICES = os.environ.get("MWP_LOCAL_NOTICES", "1") == "1"
MWP_NOTICE_DIR = os.environ.get("MWP_NOTICE_DIR", "")
# The embedded database's file watch (inotify; missions/wake_sources.py FileChanges). Off: "0".
MWP_DATABASE_WATCH = os.environ.get("MWP_DATABASE_WATCH", "1") == "1"
# WebSocket bounds (missions/ws_limits.py, which says what each means; issue
# 16 item 8). MWP_WS_ALLOWED_ORIGINS: origins besides the portal's own that a
# browser may open sockets from, comma-separated (https://host[:port]).
MWP_WS_ALLOWED_ORIGINS = [o.strip() for o in os.environ.get("MWP_WS_ALLOWED_ORIGINS", "").split(",") if o.strip()]
MWP_WS_HELLO_TIMEOUT_SECONDS = float(os.environ.get("MWP_WS_HELLO_TIMEOUT_SECONDS", "10"))
MWP_WS_MAX_UNAUTHENTICATED_PER_ADDRESS = int(os.environ.get("MWP_WS_MAX_UNAUTHENTICATED_PER_ADDRESS", "32"))
MWP_WS_MAX_SUBSCRIPTIONS = int(os.environ.get("MWP_WS_MAX_SUBSCRIPTIONS", "1024"))
MWP_WS_SUBSCRIBE_PER_SECOND = float(os.environ.get("MWP_WS_SUBSCRIBE_PER_SECOND", "50"))
MWP_WS_SUBSCRIBE_BURST = int(os.environ.get("MWP_WS_SUBSCRIBE_BURST", "1024"))
MWP_WS_PRESENCE_PER_MINUTE = float(os.environ.get("MWP_WS_PRESENCE_PER_MINUTE", "300"))
MWP_WS_PRESENCE_BURST = int(os.environ.get("MWP_WS_PRESENCE_BURST", "30"))

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "missions.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "missions.views.protocol_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "MissionWeave Portal API",
    "DESCRIPTION": "The Group Authority of MissionWeaveProtocol: signed Commands in, sequenced Events out.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

# One stderr handler for the project's and Django's loggers. A 4xx is logged
# as one line: django.request and django.security attach the exception, which
# printed a 35-line traceback per refused request (issue 16 item 8).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"one_line_client_errors": {"()": "mwportal.security.OneLineClientErrors"}},
    "formatters": {"line": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["one_line_client_errors"], "formatter": "line"}
    },
    "loggers": {
        "missions": {"handlers": ["console"], "level": os.environ.get("MWP_LOG_LEVEL", "INFO")},
        "django": {"handlers": ["console"], "level": os.environ.get("MWP_DJANGO_LOG_LEVEL", "INFO")},
    },
}
