"""``./mw serve``'s supervisor: the embedded default's processes as one tree that never leaves an orphan.

    python -m mwportal.supervise [--host HOST] [--port PORT]

It takes ``VAR_DIR/serve.lock``, migrates, seeds the demo (``manage.py mwp
demo``), then starts and watches its children:

=================  ==========================================================
daphne             the portal, on HOST:PORT (output to this terminal)
celery worker      ``--pool=solo``, the filesystem broker (``var/celery.log``)
celery beat        its own process (``var/celerybeat.log``), never the
                   worker's ``-B``: an embedded beat outlived a SIGKILLed
                   worker and went on queueing tasks nobody consumed, and a
                   restart started a second one (issue 16 item 11)
demo Workers       ``mwworker demo`` on MWP 0.1 (``/mwp/0.1``), one per demo
                   Worker key file (``var/demo/demo-worker-*.json``, written
                   by ``mwp demo``), once daphne listens (``var/demo/NAME.log``)
demo Reviewer      ``mwworker demo`` with the reviewer Agent's key file
                   (``var/demo/demo-reviewer.json``): the review WorkItems the
                   review pipeline offers the Group's reviewers (§13.2)
demo Coordinator   ``python -m portal.demo_coordinator``: the demo Missions'
                   Coordinator Agent (``var/demo/demo-coordinator.json``), which
                   accepts submitted results and submits each finished Mission
                   for final Approval, once daphne listens
                   (``var/demo/demo-coordinator.log``)
=================  ==========================================================

The rules that keep the tree whole:

- One supervisor per ``var/``: an exclusive ``flock`` on ``VAR_DIR/serve.lock``
  for the supervisor's whole life. A second ``./mw serve`` on the same
  ``var/`` refuses to start, so a second beat is never started.
- Every child leads its own process group and gets ``PR_SET_PDEATHSIG``
  (SIGKILL): a supervisor that is killed outright takes its children with it,
  and stopping a child stops whatever it forked.
- A child that dies is restarted after a backoff (1 s, doubling up to 10 s).
  One that dies ``RESTART_LIMIT`` times within ``RESTART_WINDOW`` seconds gives
  up: daphne, the Celery worker or beat giving up stops the whole tree (exit
  1); a demo Worker or the demo Coordinator giving up stays stopped, the
  portal runs on.
- SIGINT (Ctrl-C), SIGTERM or SIGHUP: SIGTERM to the demo Agents' groups,
  then to the others', SIGKILL to what is left after ``GRACE`` seconds each;
  exit 0. Nothing of the tree outlives the supervisor.

Debug stays as the environment says (``MWP_DEBUG``, off by default): the
supervisor passes its environment through and sets nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0
GRACE = 5.0  # seconds a stopping child gets between SIGTERM and SIGKILL
POLL = 0.1
PR_SET_PDEATHSIG = 1


def var_dir() -> Path:
    """The installation's ``var/``, as ``mwportal/settings.py`` reads it
    (the supervisor does not import Django's settings: it must start and stop
    even when they would refuse to load)."""
    return Path(os.environ.get("MWP_VAR_DIR", str(ROOT / "var")))


def say(message: str) -> None:
    print(f"==> {message}", flush=True)  # noqa: T201  (the supervisor's own output)


class AlreadyServing(Exception):
    pass


def take_lock(path: Path) -> IO[str]:
    """Hold ``path`` exclusively for this process's life (the kernel drops
    the lock when the process dies, however it dies); ``AlreadyServing``
    naming the holder's pid when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115  (held open for the supervisor's life)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise AlreadyServing(f"./mw serve already runs on {path.parent} (pid {holder})") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGKILL when the supervisor dies
    (Linux ``prctl``), and ends at once if the supervisor is already gone."""

    def set_up() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # it died between fork and prctl
            os._exit(1)

    return set_up


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path | None  # None: this terminal
    essential: bool = True
    proc: subprocess.Popen[bytes] | None = None
    deaths: deque[float] = field(default_factory=deque)
    restart_at: float | None = None
    gave_up: bool = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        out: IO[bytes] | None = open(self.log, "ab") if self.log is not None else None  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(  # noqa: S603  (our own venv's programs)
                self.argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT if out else None,
                start_new_session=True, preexec_fn=_die_with_parent(os.getpid()),  # noqa: PLW1509  (one thread)
            )  # fmt: skip
        finally:
            if out is not None:
                out.close()  # the child holds its own copy
        self.restart_at = None

    def signal_group(self, sig: int) -> None:
        """``sig`` to the child's process group (the child and what it forked)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)


def exit_text(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"status {code}"


class Supervisor:
    def __init__(self, children: Sequence[Child], later: Sequence[Child], host: str, port: int):
        self.children = list(children)
        self.later = list(later)  # started once daphne listens
        self.host, self.port = host, port
        self.stop_signal: int | None = None
        self.exit_code = 0

    def request_stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_signal = signum

    def listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.2):
            return True
        return False

    def run(self, on_ready: Callable[[], None]) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.request_stop)
        try:
            for child in self.children:
                child.start()
            ready = False
            while self.stop_signal is None:
                now = time.monotonic()
                for child in self.children:
                    self.watch(child, now)
                if self.stop_signal is not None or self.exit_code:
                    break
                if not ready and self.listening():
                    ready = True
                    for child in self.later:
                        child.start()
                    self.children += self.later
                    on_ready()
                time.sleep(POLL)
        finally:
            self.stop_all()
        return self.exit_code

    def watch(self, child: Child, now: float) -> None:
        """Restart a child that died, unless it died too often; then give up on it."""
        if child.gave_up:
            return
        if child.proc is not None and child.restart_at is None and (code := child.proc.poll()) is not None:
            child.signal_group(signal.SIGKILL)  # anything it forked into its group goes with it
            child.deaths.append(now)
            while child.deaths and child.deaths[0] < now - RESTART_WINDOW:
                child.deaths.popleft()
            if len(child.deaths) >= RESTART_LIMIT:
                child.gave_up = True
                say(f"{child.name} exited ({exit_text(code)}) {len(child.deaths)} times in {RESTART_WINDOW:.0f} s")
                if child.essential:
                    say("stopping everything")
                    self.exit_code = 1
                return
            delay = min(2.0 ** (len(child.deaths) - 1), 10.0)
            say(f"{child.name} exited ({exit_text(code)}); restarting it in {delay:.0f} s")
            child.restart_at = now + delay
        if child.restart_at is not None and now >= child.restart_at:
            child.start()

    def stop_all(self) -> None:
        """SIGTERM group by group (demo Agents first: they drain through
        daphne), SIGKILL after GRACE; every group is SIGKILLed at the end, so
        nothing a child forked survives it."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the stop short
        phases = [[c for c in self.children if not c.essential], [c for c in self.children if c.essential]]
        for phase in phases:
            alive = [c for c in phase if c.alive]
            for child in alive:
                child.signal_group(signal.SIGTERM)
            deadline = time.monotonic() + GRACE
            while any(c.alive for c in alive) and time.monotonic() < deadline:
                time.sleep(POLL)
            for child in phase:
                child.signal_group(signal.SIGKILL)
                if child.proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.proc.wait(timeout=GRACE)


DEMO_WORKER_KEYS = "demo-worker-*.json"
DEMO_COORDINATOR_KEY = "demo-coordinator.json"  # portal/demo.py's COORDINATOR key file
DEMO_REVIEWER_KEY = "demo-reviewer.json"  # portal/demo.py's REVIEWER key file


def demo_worker_keys(var: Path) -> list[Path]:
    """The demo Worker Agents' key files (DESIGN §4) that ``mwp demo`` wrote in ``var/demo/``.

    The directory also holds the key files of the demo's other Principals
    (the MissionOwner's, the Coordinator Agent's); only the Workers run here.
    """
    return sorted((var / "demo").glob(DEMO_WORKER_KEYS))


def demo_reviewer_key(var: Path) -> Path | None:
    """The demo reviewer Agent's key file that ``mwp demo`` wrote, if it did: a ``mwworker demo`` runs it."""
    path = var / "demo" / DEMO_REVIEWER_KEY
    return path if path.exists() else None


def demo_coordinator_key(var: Path) -> Path | None:
    """The demo Coordinator Agent's key file that ``mwp demo`` wrote, if it did."""
    path = var / "demo" / DEMO_COORDINATOR_KEY
    return path if path.exists() else None


def embedded_children(host: str, port: int, var: Path) -> tuple[list[Child], list[Child]]:
    """daphne, the Celery worker and beat; and the demo Agents, the Workers and the
    Coordinator (started once daphne listens)."""
    bin_dir = Path(sys.executable).parent
    celery = str(bin_dir / "celery")
    children = [
        # The transport limit sits above the protocol's 1 MiB frame limit so
        # oversized frames are answered, not dropped (mwportal/asgi.py).
        Child(
            "daphne",
            [
                str(bin_dir / "daphne"),
                "-b",
                host,
                "-p",
                str(port),
                "--websocket-max-message-size",
                "16777216",
                "--websocket-max-frame-size",
                "16777216",
                "mwportal.asgi:application",
            ],
            None,
        ),  # fmt: skip
        Child(
            "celery worker",
            [celery, "-A", "mwportal.celery", "worker", "--pool=solo", "--loglevel=warning"],
            var / "celery.log",
        ),  # fmt: skip
        # The pidfile is beat's own guard (celery refuses a second beat whose
        # pidfile names a live process); the serve lock is the first one.
        Child(
            "celery beat",
            [
                celery,
                "-A",
                "mwportal.celery",
                "beat",
                "--loglevel=warning",
                "--schedule",
                str(var / "celerybeat-schedule"),
                "--pidfile",
                str(var / "celerybeat.pid"),
            ],
            var / "celerybeat.log",
        ),  # fmt: skip
    ]
    demo = []
    reviewer = demo_reviewer_key(var)
    for key in [*demo_worker_keys(var), *([reviewer] if reviewer is not None else [])]:
        name = key.stem
        demo.append(
            Child(
                f"demo Reviewer {name}" if key == reviewer else f"demo Worker {name}",
                [
                    sys.executable,
                    "-m",
                    "mwworker",
                    "demo",
                    "--portal",
                    f"http://{host}:{port}",
                    "--key",
                    str(key),
                    "--store",
                    str(var / "demo" / f"{name}.sqlite3"),
                    "--slots",
                    "2",
                ],  # fmt: skip
                var / "demo" / f"{name}.log",
                essential=False,
            )
        )
    coordinator = demo_coordinator_key(var)
    if coordinator is not None:
        demo.append(
            Child(
                "demo Coordinator",
                [sys.executable, "-m", "portal.demo_coordinator", "--portal", f"http://{host}:{port}",
                 "--key", str(coordinator)],
                var / "demo" / f"{coordinator.stem}.log",
                essential=False,
            )
        )  # fmt: skip
    return children, demo


def prepare() -> list[str]:
    """Migrate and seed the demo; the demo's ``login:`` lines."""
    manage = [sys.executable, str(ROOT / "manage.py")]
    say("migrating the database")
    subprocess.run([*manage, "migrate", "--no-input", "-v", "0"], cwd=ROOT, check=True)  # noqa: S603
    demo = subprocess.run([*manage, "mwp", "demo"], cwd=ROOT, capture_output=True, text=True)  # noqa: S603
    if demo.returncode != 0:
        sys.stdout.write(demo.stdout + demo.stderr)
        raise SystemExit(1)
    return [line for line in demo.stdout.splitlines() if line.startswith("login:")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mw serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=os.environ.get("MWP_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("MWP_PORT", "8000")))
    args = parser.parse_args(argv)
    var = var_dir()
    try:
        lock = take_lock(var / "serve.lock")
    except AlreadyServing as exc:
        print(f"mw serve: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    with lock:
        try:
            logins = prepare()
        except subprocess.CalledProcessError as exc:
            print(f"mw serve: {exc}", file=sys.stderr)  # noqa: T201
            return 1
        children, demo = embedded_children(args.host, args.port, var)
        say("starting daphne, the Celery worker and Celery beat (filesystem broker)")
        base = f"http://{args.host}:{args.port}"

        def banner() -> None:
            lines = [
                "",
                f"    MissionWeave Portal: {base}/",
                f"    Admin (read-only):   {base}/admin/",
                f"    API schema:          {base}/api/v0.1/schema/",
                f"    Agents (MWP 0.1):    ws://{args.host}:{args.port}/mwp/0.1",
                *(f"    {line}" for line in logins),
            ]
            workers = [c for c in demo if c.name.startswith("demo Worker")]
            if workers:
                lines.append(f"    Demo Workers:        {len(workers)} (mwworker demo; logs in {var / 'demo'}/)")
            if any(c.name.startswith("demo Reviewer") for c in demo):
                lines.append("    Demo Reviewer:       mwworker demo (the review WorkItems of spec 13.2)")
            if any(c.name == "demo Coordinator" for c in demo):
                lines.append("    Demo Coordinator:    portal.demo_coordinator (accepts reviewed results, submits)")
            print("\n".join([*lines, ""]), flush=True)  # noqa: T201

        return Supervisor(children, demo, args.host, args.port).run(banner)


if __name__ == "__main__":
    raise SystemExit(main())
