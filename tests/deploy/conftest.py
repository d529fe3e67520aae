"""Helpers of the deployment suite (issue 16 items 2, 3, 8 and 9).

``settings_process`` runs Python in a fresh process with a chosen
environment, so a test sees what ``mwportal/settings.py`` does at start-up
(refusals, generated files, their modes) instead of the test process's
already-loaded settings. ``PRODUCTION_ENV`` is the production environment
docs/deploy.md documents.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.delivery.conftest import ROOT, daphne, daphne_env, head_poll_seconds  # noqa: F401  (fixtures)
from tests.portal.conftest import _artifact_root, flow, obi, owner, pat, pat_client  # noqa: F401  (fixtures)

# docs/deploy.md, "Production settings" (the secret is a test value of the documented form).
PRODUCTION_ENV = {
    "MWP_PRODUCTION": "1",
    "MWP_SECRET_KEY": "k3Xq9-test-only-secret-of-fifty-characters-or-more-QzT7",
    "MWP_ALLOWED_HOSTS": "portal.example.org",
    "MWP_CSRF_TRUSTED_ORIGINS": "https://portal.example.org",
}


def base_env(var_dir: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without any MWP_ setting or pytest
    variable, pointed at ``var_dir``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MWP_", "PYTEST", "DJANGO_"))}
    env.update({"MWP_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "mwportal.settings", **extra})
    return env


def settings_process(env: dict[str, str], code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` after ``django.setup()`` in a new interpreter."""
    script = "import django\ndjango.setup()\nfrom django.conf import settings\n" + code
    return subprocess.run(  # noqa: S603  (a fixed interpreter and our own script)
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
