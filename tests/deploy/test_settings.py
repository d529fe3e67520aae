"""Debug, secrets, production settings and private files (issue 16 items 3 and 8).

Each test starts a new process, since these are decisions settings make at
start-up.
"""

from __future__ import annotations

import stat
from pathlib import Path

from tests.deploy.conftest import PRODUCTION_ENV, base_env, manage, settings_process


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_it_passes_check_deploy_with_the_documented_production_environment(tmp_path: Path) -> None:
    """issue 16 item 3: `check --deploy` has no warning with docs/deploy.md's environment."""
    result = manage(base_env(tmp_path / "var", **PRODUCTION_ENV), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_sets_hsts_secure_cookies_and_the_proxy_header_in_production(tmp_path: Path) -> None:
    """issue 16 item 3: what production means, setting by setting."""
    result = settings_process(
        base_env(tmp_path / "var", **PRODUCTION_ENV),
        "print(settings.DEBUG, settings.SECURE_HSTS_SECONDS >= 31536000, settings.SESSION_COOKIE_SECURE,"
        " settings.CSRF_COOKIE_SECURE, settings.SESSION_COOKIE_HTTPONLY, settings.SECURE_SSL_REDIRECT,"
        " settings.SECURE_PROXY_SSL_HEADER, settings.CSRF_TRUSTED_ORIGINS, settings.MWP_SERVE_STATIC)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == (
        "False True True True True True ('HTTP_X_FORWARDED_PROTO', 'https') ['https://portal.example.org'] False"
    )


def test_it_refuses_to_start_in_production_without_a_secret_key(tmp_path: Path) -> None:
    """issue 16 item 3: no silent default key in production."""
    env = base_env(tmp_path / "var", **PRODUCTION_ENV)
    del env["MWP_SECRET_KEY"]
    result = manage(env, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured: MWP_PRODUCTION=1 needs MWP_SECRET_KEY" in result.stderr
    assert not (tmp_path / "var" / "secret_key").exists()  # nor a generated one


def test_it_refuses_debug_in_production(tmp_path: Path) -> None:
    result = manage(base_env(tmp_path / "var", MWP_DEBUG="1", **PRODUCTION_ENV), "check")
    assert result.returncode != 0
    assert "MWP_DEBUG=1 is refused with MWP_PRODUCTION=1" in result.stderr


def test_it_keeps_debug_off_unless_mwp_debug_is_1(tmp_path: Path) -> None:
    """issue 16 item 3: debug is opt-in (the embedded default and ./mw serve included)."""
    for extra, expected in (({}, "False"), ({"MWP_DEBUG": "0"}, "False"), ({"MWP_DEBUG": "1"}, "True")):
        result = settings_process(base_env(tmp_path / "var", **extra), "print(settings.DEBUG)")
        assert result.stdout.strip() == expected, (extra, result.stderr)


def test_it_generates_a_private_secret_key_per_installation(tmp_path: Path) -> None:
    """issue 16 item 3: the key is generated on first run, kept, 0600, and differs per installation."""
    code = "print(settings.SECRET_KEY)"
    first = settings_process(base_env(tmp_path / "a"), code)
    again = settings_process(base_env(tmp_path / "a"), code)
    other = settings_process(base_env(tmp_path / "b"), code)
    assert first.returncode == 0, first.stderr
    key = first.stdout.strip()
    assert len(key) >= 50 and len(set(key)) >= 5
    assert again.stdout.strip() == key
    assert other.stdout.strip() not in ("", key)
    assert "mwp-embedded-default" not in key
    assert (tmp_path / "a" / "secret_key").read_text().strip() == key
    assert mode(tmp_path / "a" / "secret_key") == 0o600
    # An explicit key wins, and no file is written for it.
    explicit = settings_process(base_env(tmp_path / "c", MWP_SECRET_KEY="x" * 60), code)
    assert explicit.stdout.strip() == "x" * 60
    assert not (tmp_path / "c" / "secret_key").exists()


def test_it_does_not_allow_testserver_by_default(tmp_path: Path) -> None:
    """issue 16 item 8: the test client's host is no real deployment's."""
    result = settings_process(base_env(tmp_path / "var"), "print(settings.ALLOWED_HOSTS)")
    assert result.stdout.strip() == "['localhost', '127.0.0.1', '[::1]']", result.stderr


def test_it_creates_var_and_the_sqlite_files_private(tmp_path: Path) -> None:
    """issue 16 item 8: var/ is 0700; the database and its -wal/-shm, written to
    while open, are 0600; anything else the process creates gets the 077 umask."""
    var = tmp_path / "var"
    result = settings_process(
        base_env(var),
        "from pathlib import Path\n"
        "from django.db import connection\n"
        "with connection.cursor() as cur:\n"
        "    cur.execute('CREATE TABLE t (x)')\n"
        "    cur.execute('INSERT INTO t VALUES (1)')\n"
        "    name = Path(connection.settings_dict['NAME'])\n"
        "    for p in (name, Path(str(name) + '-wal'), Path(str(name) + '-shm')):\n"
        "        print(p.name, oct(p.stat().st_mode & 0o777))\n"
        "(Path(settings.VAR_DIR) / 'later.txt').write_text('x')\n",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "mwportal.sqlite3", "0o600", "mwportal.sqlite3-wal", "0o600", "mwportal.sqlite3-shm", "0o600",
    ]  # fmt: skip
    assert mode(var) == 0o700
    assert mode(var / "later.txt") == 0o600
    assert mode(var / "celery") == 0o700


def test_it_tightens_an_installation_created_world_readable(tmp_path: Path) -> None:
    """issue 16 item 8: an existing var/ (0755) and database (0644) are made private at start-up."""
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    var.chmod(0o755)
    for name in ("mwportal.sqlite3", "mwportal.sqlite3-wal", "secret_key"):
        (var / name).write_text("" if name != "secret_key" else "k" * 60)
        (var / name).chmod(0o644)
    result = settings_process(base_env(var), "print(settings.SECRET_KEY)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "k" * 60
    assert mode(var) == 0o700
    assert {name: mode(var / name) for name in ("mwportal.sqlite3", "mwportal.sqlite3-wal", "secret_key")} == {
        "mwportal.sqlite3": 0o600, "mwportal.sqlite3-wal": 0o600, "secret_key": 0o600,
    }  # fmt: skip


def test_it_collects_static_files_readable_by_the_proxy(tmp_path: Path) -> None:
    """The 077 umask does not make collectstatic's output unreadable to the proxy (docs/deploy.md)."""
    static = tmp_path / "static"
    result = manage(base_env(tmp_path / "var", MWP_STATIC_ROOT=str(static)), "collectstatic", "--no-input", "-v", "0")
    assert result.returncode == 0, result.stderr
    assert mode(static / "portal" / "portal.css") == 0o644
    assert mode(static / "portal") == 0o755


def test_it_pools_postgresql_connections_sized_from_the_environment(tmp_path: Path) -> None:
    """issue 16 item 9: PostgreSQL gets Django's psycopg pool (no persistent
    per-thread connections); the embedded SQLite keeps its connections as before."""
    code = "d = settings.DATABASES['default']; print(d['CONN_MAX_AGE'], d['OPTIONS'].get('pool'))"
    pg = settings_process(
        base_env(tmp_path / "var", MWP_DATABASE_URL="postgres://mwp@db.invalid:5432/mwp", MWP_DB_POOL_MIN="1",
                 MWP_DB_POOL_MAX="7", MWP_DB_POOL_TIMEOUT="2.5"), code)  # fmt: skip
    assert pg.stdout.strip() == "0 {'min_size': 1, 'max_size': 7, 'timeout': 2.5, 'max_idle': 60.0}", pg.stderr
    lite = settings_process(base_env(tmp_path / "var"), code)
    assert lite.stdout.strip() == "300 None", lite.stderr
