"""Artifact upload and download through the real HTTP API against a plain file copy.

    python bench/artifacts.py [--quick] [--server daphne|wsgi] [--size-mib N] [--chunk-mib N]

What it measures (spec 13.1; issue 8):

- **upload** of an N MiB file (default 1024 MiB = 1 GiB; ``--quick``:
  256 MiB, and it says so) over a real socket to a server in a subprocess:
  daphne by default (the ASGI server of production and ``./mw serve``),
  through the resumable upload (``POST /api/v0.1/artifacts/uploads?groupId=``,
  one ``PATCH`` per ``chunkMax`` bytes, each appended and fsynced, then
  ``POST .../complete?contentHash=``, which hashes the staged file and moves it
  under its hash); ``--server wsgi`` (informational) sends one
  ``POST /api/v0.1/artifacts?groupId=`` to Django's threaded WSGI development
  server, which streams the body through SHA-256 into the store and fsyncs it;
- **download**: ``GET /api/v0.1/artifacts/{contentHash}`` of the same Artifact: the
  server hashes the stored bytes before the first byte leaves, then streams
  them; the timed client counts the bytes and keeps nothing (the measurement
  is the server's), and a second, untimed download checks that they hash to
  the source's SHA-256;
- **raw baseline** in the same run: a plain copy of the same bytes to a new
  file on the same disk in 1 MiB reads and writes into one reused buffer
  (the user-space path the server's reads and writes take, without its
  per-chunk allocations), with the same
  fsync (the least a durable store must do). The target ratio is against
  it. The kernel's copy (``shutil.copyfile``: ``sendfile``, no pass through
  user space) is measured too and its ratio printed, informational: no HTTP
  server can receive a request body that way. The source is dropped from the
  page cache before each copy and before the upload, so all read it from the
  same state.

Reported: each throughput (MiB/s), the API round trip (2 N MiB over upload
time + download time), the ratio round trip / plain copy (target >= 0.5),
and the server process's peak RSS above its idle RSS during the transfers,
sampled from ``/proc/<pid>/status`` every 5 ms (target < 100 MiB: a 1 GiB
Artifact never sits in memory).

**daphne buffers whole request bodies.** daphne 4.2 queues every chunk of a
request body for the application at once, without backpressure
(``http_protocol.py``: ``put_nowait`` per chunk), so a single-request upload
costs the server the Artifact's size in memory whatever the view does (a
1 GiB one measured +1058 MiB). Hence the resumable upload: each request
carries at most ``MWP_ARTIFACT_CHUNK_BYTES`` (8 MiB), and under ASGI the
portal refuses a single-request upload larger than that. Downloads under
daphne stay flat: the view's async iterator yields 64 KiB slices and gives
the event loop a turn after each, so Twisted's send buffer drains as fast as
it fills (``artifacts/store.py: achunks``).

The server runs on a scratch SQLite database and artifact root in a
temporary directory (``MWP_VAR_DIR``), with ``MWP_DEBUG=0``; the fixtures
(Organization, Agent with a session, Mission Group) are made through
``accept()`` by a child process of this script (``--setup``). Exit status 0
even when a target is missed (the numbers are the report); 1 when it crashed.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = "artifacts"
CHUNK = 1024 * 1024
TARGET_RATIO = 0.5
TARGET_RSS_MIB = 100
MIB = 1024 * 1024


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- fixtures (child process: Django configured for the scratch directory) -------


def setup_fixtures() -> None:
    """Migrate; the Organization, a person owning a Mission Group whose Worker Agent has
    a session (signed MWP 0.1 Commands through ``accept_document``); print JSON."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mwportal.settings")
    sys.path.insert(0, str(ROOT))
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from bench._commands_project import COORDINATE, make_principal, new_mission, with_card
    from missions.commands import create_organization, open_session

    create_organization("bench", "Bench")
    owner = make_principal("bench", "Olivia Owner", ["mission_owner"], kind="person")
    coordinator = with_card(make_principal("bench", "Carl Coordinator", ["coordinator"]), COORDINATE)
    worker = make_principal("bench", "Bench Worker", ["worker"])
    group = new_mission(owner, coordinator, [(worker, ["worker"])], "bench")
    token, _ = open_session(worker.id)  # the bearer token of the byte routes
    print(json.dumps({"token": token, "group": f"urn:uuid:{group}"}))


# --- measurement ---------------------------------------------------------------------


class RssSampler(threading.Thread):
    """Peak resident set size of one process, from /proc, every 5 ms."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.running = True

    @staticmethod
    def rss(pid: int) -> int:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    @staticmethod
    def breakdown(pid: int) -> str:
        with open(f"/proc/{pid}/status") as fh:
            return " ".join(line.split()[0] + line.split()[1] for line in fh if line.startswith("Rss"))

    def run(self) -> None:
        while self.running:
            try:
                self.peak = max(self.peak, self.rss(self.pid))
            except OSError:
                return
            time.sleep(0.005)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_source(path: Path, size: int) -> str:
    """Write ``size`` bytes (1 MiB random blocks, each different) and return their SHA-256."""
    digest = hashlib.sha256()
    block = os.urandom(CHUNK)
    with open(path, "wb") as fh:
        written = 0
        counter = 0
        while written < size:
            counter += 1
            chunk = counter.to_bytes(8, "little") + block[8 : min(CHUNK, size - written)]
            fh.write(chunk)
            digest.update(chunk)
            written += len(chunk)
        fh.flush()
        os.fsync(fh.fileno())  # clean pages, so dropping them from the page cache works
    return digest.hexdigest()


def plain_copy(src: Path, dst: Path) -> float:
    """Read and write the bytes through user space in 1 MiB blocks, one
    buffer reused (no allocation per block), and fsync: the least the
    server's own reads and writes could cost."""
    start = time.perf_counter()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(src, "rb", buffering=0) as fin, open(dst, "wb", buffering=0) as fout:
        while n := fin.readinto(buffer):
            fout.write(view[:n])
        os.fsync(fout.fileno())
    return time.perf_counter() - start


def kernel_copy(src: Path, dst: Path) -> float:
    """``shutil.copyfile`` (Linux: ``sendfile``, no copy through user space) and an fsync."""
    start = time.perf_counter()
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def drop_from_page_cache(path: Path) -> None:
    """Best effort: both sides then read the source from the same state."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass


def upload(port: int, token: str, group: str, src: Path, size: int) -> tuple[float, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.blocksize = CHUNK  # send the file in 1 MiB writes (default 8 KiB)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream",
               "Content-Length": str(size)}  # fmt: skip
    start = time.perf_counter()
    with open(src, "rb") as fh:
        conn.request("POST", f"/api/v0.1/artifacts?groupId={group}", body=fh, headers=headers)
        response = conn.getresponse()
        payload = response.read()
    elapsed = time.perf_counter() - start
    conn.close()
    if response.status != 201:
        raise RuntimeError(f"upload answered {response.status}: {payload[:300]!r}")
    return elapsed, json.loads(payload)


def upload_resumable(port: int, token: str, group: str, src: Path, size: int, sha: str) -> tuple[float, dict[str, Any]]:
    """The resumable upload (``POST /api/v0.1/artifacts/uploads``, a ``PATCH`` per
    ``chunkMax`` bytes, ``POST .../complete?contentHash=``) on one keep-alive
    connection: what a client of daphne does, which queues each request body
    whole in memory. The client holds one chunk at a time."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.blocksize = CHUNK
    auth = {"Authorization": f"Bearer {token}"}

    def call(method: str, url: str, body: bytes = b"", **headers: str) -> tuple[int, bytes]:
        conn.request(method, url, body=body, headers={**auth, **headers})
        response = conn.getresponse()
        return response.status, response.read()

    start = time.perf_counter()
    status, payload = call("POST", f"/api/v0.1/artifacts/uploads?groupId={group}",
                           **{"Content-Type": "application/octet-stream", "Upload-Length": str(size)})  # fmt: skip
    if status != 201:
        raise RuntimeError(f"upload start answered {status}: {payload[:300]!r}")
    created = json.loads(payload)
    url, chunk_max = f"/api/v0.1/artifacts/uploads/{created['uploadId']}", int(created["chunkMax"])
    offset = 0
    with open(src, "rb") as fh:
        while chunk := fh.read(chunk_max):
            status, payload = call("PATCH", url, chunk, **{"Content-Type": "application/offset+octet-stream",
                                                           "Upload-Offset": str(offset)})  # fmt: skip
            if status != 204:
                raise RuntimeError(f"PATCH at {offset} answered {status}: {payload[:300]!r}")
            offset += len(chunk)
    chunks_done = time.perf_counter()
    status, payload = call("POST", f"{url}/complete?contentHash=sha256:{sha}")
    elapsed = time.perf_counter() - start
    log(f"resumable upload: chunks {chunks_done - start:.2f} s, complete {elapsed - (chunks_done - start):.2f} s")
    conn.close()
    if status != 201:
        raise RuntimeError(f"upload complete answered {status}: {payload[:300]!r}")
    return elapsed, {**json.loads(payload), "chunk_max": chunk_max}


def download(port: int, token: str, sha: str, *, verify: bool) -> tuple[float, int, str]:
    """GET the Artifact in 1 MiB reads. Timed runs keep nothing and hash
    nothing (the measurement is the server's); the verifying run hashes
    what arrives."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    conn.request("GET", f"/api/v0.1/artifacts/sha256:{sha}", headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"download answered {response.status}: {response.read()[:300]!r}")
    received = 0
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    while n := response.readinto(buffer):
        if verify:
            digest.update(view[:n])
        received += n
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed, received, digest.hexdigest()


def start_server(kind: str, port: int, env: dict[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    python = sys.executable
    if kind == "daphne":
        argv = [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mwportal.asgi:application"]
    else:
        # Django's development server (threaded WSGI). Not "manage.py
        # runserver": with daphne in INSTALLED_APPS that command runs daphne.
        code = (
            "import django; django.setup();"
            "from django.core.servers.basehttp import run;"
            "from django.core.wsgi import get_wsgi_application;"
            f"run('127.0.0.1', {port}, get_wsgi_application(), threading=True)"
        )
        argv = [python, "-c", code]
    logfile = open(workdir / "server.log", "wb")  # noqa: SIM115 (the server holds it)
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=logfile, stderr=subprocess.STDOUT)  # noqa: S603


def wait_ready(port: int, proc: subprocess.Popen[bytes], workdir: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited:\n" + (workdir / "server.log").read_text()[-2000:])
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/api/v0.1/catalogue")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the server did not come up within 60 s")


def measure(kind: str, size: int, workdir: Path, chunk_mib: int | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MWP_")}
    env.update({
        "MWP_VAR_DIR": str(workdir / "var"), "MWP_DATABASE_URL": f"sqlite:///{workdir / 'var' / 'bench.sqlite3'}",
        "MWP_ARTIFACT_ROOT": str(workdir / "store"), "MWP_DEBUG": "0", "MWP_ARTIFACT_MAX_BYTES": str(size + 1),
        "MWP_LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "mwportal.settings", "PYTHONPATH": str(ROOT),
    })  # fmt: skip
    if chunk_mib:
        env["MWP_ARTIFACT_CHUNK_BYTES"] = str(chunk_mib * MIB)
    (workdir / "var").mkdir(parents=True, exist_ok=True)
    log("setting up fixtures (migrate, Organization, Agent, Mission Group)")
    setup = subprocess.run(  # noqa: S603 (this script, this interpreter)
        [sys.executable, __file__, "--setup"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if setup.returncode != 0:
        raise RuntimeError("fixture setup failed:\n" + setup.stderr[-3000:])
    fixtures = json.loads(setup.stdout.strip().splitlines()[-1])
    src = workdir / "source.bin"
    log(f"writing {size // MIB} MiB of source bytes")
    sha = make_source(src, size)

    log("raw baselines: plain file copy with fsync (user space, then the kernel's sendfile)")
    drop_from_page_cache(src)
    copy_seconds = plain_copy(src, workdir / "copy.bin")
    (workdir / "copy.bin").unlink()
    drop_from_page_cache(src)
    kernel_seconds = kernel_copy(src, workdir / "copy.bin")
    (workdir / "copy.bin").unlink()

    port = free_port()
    log(f"starting {kind} on 127.0.0.1:{port}")
    proc = start_server(kind, port, env, workdir)
    try:
        wait_ready(port, proc, workdir)
        time.sleep(0.5)
        idle = RssSampler.rss(proc.pid)
        sampler = RssSampler(proc.pid)
        sampler.start()
        drop_from_page_cache(src)
        log("upload through the API")
        if kind == "daphne":
            up_seconds, answer = upload_resumable(port, fixtures["token"], fixtures["group"], src, size, sha)
        else:
            up_seconds, answer = upload(port, fixtures["token"], fixtures["group"], src, size)
        if answer.get("contentHash") != f"sha256:{sha}":
            raise RuntimeError(f"the server named the bytes {answer.get('sha256')}, not {sha}")
        up_peak, sampler.peak = sampler.peak, 0
        log(f"after upload: {RssSampler.breakdown(proc.pid)}")
        log("download through the API")
        down_seconds, received, _ = download(port, fixtures["token"], sha, verify=False)
        sampler.running = False
        sampler.join()
        down_peak = sampler.peak
        log(f"after download: {RssSampler.breakdown(proc.pid)}")
        log("verifying download (untimed)")
        _, verified_size, got = download(port, fixtures["token"], sha, verify=True)
        if received != size or verified_size != size or got != sha:
            raise RuntimeError("the downloaded bytes differ from the uploaded ones")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {
        "size": size, "copy_s": copy_seconds, "kernel_copy_s": kernel_seconds, "up_s": up_seconds,
        "down_s": down_seconds,
        "idle_rss": idle, "peak_rss": max(up_peak, down_peak, idle), "up_peak": max(up_peak, idle),
        "down_peak": max(down_peak, idle), "chunk_max": answer.get("chunk_max"),
    }  # fmt: skip


def report(kind: str, m: dict[str, Any], quick: bool) -> None:
    mib = m["size"] / MIB
    copy_rate = mib / m["copy_s"]
    up_rate, down_rate = mib / m["up_s"], mib / m["down_s"]
    round_trip = 2 * mib / (m["up_s"] + m["down_s"])
    ratio = round_trip / copy_rate
    above = (m["peak_rss"] - m["idle_rss"]) / MIB
    upload_kind = f"resumable_chunk_mib={m['chunk_max'] / MIB:g}" if m.get("chunk_max") else "single_request"
    note = f"size_mib={mib:.0f} server={kind} upload={upload_kind}" + (
        " quick=smaller_than_1GiB" if quick and mib < 1024 else ""
    )
    if kind == "wsgi":
        note += " informational=production_runs_daphne"
    print()
    print(f"{'':24}{'seconds':>10}{'MiB/s':>10}")
    kernel_rate = mib / m["kernel_copy_s"]
    print(f"{'plain copy (+fsync)':24}{m['copy_s']:10.2f}{copy_rate:10.0f}")
    print(f"{'kernel copy (+fsync)':24}{m['kernel_copy_s']:10.2f}{kernel_rate:10.0f}")
    print(f"{'API upload':24}{m['up_s']:10.2f}{up_rate:10.0f}")
    print(f"{'API download':24}{m['down_s']:10.2f}{down_rate:10.0f}")
    print(f"{'API round trip':24}{m['up_s'] + m['down_s']:10.2f}{round_trip:10.0f}")
    up_above, down_above = (m["up_peak"] - m["idle_rss"]) / MIB, (m["down_peak"] - m["idle_rss"]) / MIB
    print(f"server RSS: idle {m['idle_rss'] / MIB:.1f} MiB, peak {m['peak_rss'] / MIB:.1f} MiB ({above:+.1f} MiB);"
          f" upload {up_above:+.1f} MiB, download {down_above:+.1f} MiB")  # fmt: skip
    if quick and mib < 1024:
        print(f"--quick: {mib:.0f} MiB instead of 1 GiB (run without --quick for the full size)")
    print()
    print(f"RESULT bench={BENCH} metric=ratio_vs_copy value={ratio:.2f} target>={TARGET_RATIO} "
          f"ok={str(ratio >= TARGET_RATIO).lower()} {note}")  # fmt: skip
    print(f"RESULT bench={BENCH} metric=server_rss_above_idle_mib value={above:.1f} target<={TARGET_RSS_MIB} "
          f"ok={str(above < TARGET_RSS_MIB).lower()} {note}")  # fmt: skip
    print(f"RESULT bench={BENCH} metric=upload_mib_s value={up_rate:.0f} {note}")
    print(f"RESULT bench={BENCH} metric=download_mib_s value={down_rate:.0f} {note}")
    print(f"RESULT bench={BENCH} metric=round_trip_mib_s value={round_trip:.0f} {note}")
    print(f"RESULT bench={BENCH} metric=copy_mib_s value={copy_rate:.0f} {note}")
    print(f"RESULT bench={BENCH} metric=kernel_copy_mib_s value={kernel_rate:.0f} {note}")
    print(f"RESULT bench={BENCH} metric=ratio_vs_kernel_copy value={round_trip / kernel_rate:.2f} {note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="256 MiB instead of 1 GiB (under two minutes)")
    parser.add_argument("--server", choices=["wsgi", "daphne"], default="daphne")
    parser.add_argument("--size-mib", type=int, default=None, help="the Artifact's size (default 1024; quick 256)")
    parser.add_argument("--chunk-mib", type=int, default=None, help="the portal's chunk_max (default: its setting)")
    parser.add_argument("--setup", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setup:
        setup_fixtures()
        return 0
    size = (args.size_mib or (256 if args.quick else 1024)) * MIB
    base = Path(os.environ.get("MWP_BENCH_TMP", tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix="mwp-bench-artifacts-", dir=base) as tmp:
        try:
            measured = measure(args.server, size, Path(tmp), args.chunk_mib)
        except Exception as exc:  # the report says what broke; exit 1
            log(f"bench/artifacts.py failed: {exc}")
            print(f"RESULT bench={BENCH} metric=ratio_vs_copy value=nan target>={TARGET_RATIO} ok=false")
            return 1
    report(args.server, measured, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
