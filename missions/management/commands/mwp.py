"""``python manage.py mwp <subcommand>``: Organizations, Agents, log checks.

    mwp create-org SLUG [--name NAME]
    mwp create-agent --org SLUG --name NAME --roles r1,r2 --out key.json [--kind agent|person] [--user U]
    mwp verify-log GROUP_ID
    mwp demo [--password PW]      the demo Organization: MissionOwner and Coordinator logins, Missions

Every change goes through ``accept()`` as the system actor.
"""

from __future__ import annotations

import json
import os
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from missions.commands import create_organization, register_agent
from missions.models import ORG_ROLES, Group, Organization
from missions.verify import verify_group_log
from mwportal.protocol import ProtocolError, generate_keypair, parse_uuid


def write_key_file(path: Path, content: dict[str, Any]) -> None:
    """Write ``content`` as JSON readable by the owner only (mode 0600).

    The file is created with 0600 from the start (never world-readable, not
    even for an instant) and replaced atomically.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(content, fh, indent=2)
            fh.write("\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


class Command(BaseCommand):
    help = "MissionWeave administration: create-org, create-agent, verify-log, demo."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="sub", required=True, parser_class=ArgumentParser)
        org = sub.add_parser("create-org", help="create an Organization and print its id")
        org.add_argument("slug")
        org.add_argument("--name", default=None)
        agent = sub.add_parser("create-agent", help="register an Agent and write its key file")
        agent.add_argument("--org", required=True)
        agent.add_argument("--name", required=True)
        agent.add_argument("--roles", required=True, help=f"comma-separated: {','.join(ORG_ROLES)}")
        agent.add_argument("--out", required=True, type=Path)
        agent.add_argument("--kind", default="agent", choices=["agent", "person"])
        agent.add_argument("--user", default=None, help="link a person Agent to this Django user")
        verify = sub.add_parser("verify-log", help="recompute a Group's sequences and hash chain")
        verify.add_argument("group_id")
        demo = sub.add_parser("demo", help="create the demo Organization, its logins and Missions")
        demo.add_argument("--password", default="missionweave")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, "do_" + options["sub"].replace("-", "_"))(options)
        except ProtocolError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None

    def do_create_org(self, options: dict[str, Any]) -> None:
        slug = options["slug"]
        org_id, group_id = create_organization(slug, options["name"] or slug)
        self.stdout.write(org_id)
        self.stderr.write(f"Organization {slug}: id {org_id}, administrative Group {group_id}")

    def do_create_agent(self, options: dict[str, Any]) -> None:
        if not Organization.objects.filter(slug=options["org"]).exists():
            raise CommandError(f"no Organization {options['org']!r}; create it with: mwp create-org SLUG")
        roles = [r.strip() for r in options["roles"].split(",") if r.strip()]
        out: Path = options["out"]
        if not out.parent.exists():
            raise CommandError(f"{out.parent} does not exist")
        private_key, public_key = generate_keypair()
        agent_id = register_agent(options["org"], options["name"], options["kind"], roles, public_key, options["user"])
        org = Organization.objects.get(slug=options["org"])
        write_key_file(
            out,
            {"agent_id": agent_id, "organization": str(org.id), "private_key": private_key, "public_key": public_key},
        )
        self.stdout.write(agent_id)
        self.stderr.write(f"Agent {options['name']} ({agent_id}); key written to {out} (mode 0600)")

    def do_verify_log(self, options: dict[str, Any]) -> None:
        group_id = parse_uuid(options["group_id"], "GROUP_ID")
        group = Group.objects.filter(id=group_id).first()
        if group is None:
            raise CommandError(f"no Group {group_id}")
        count, broken = verify_group_log(group)
        if broken is not None:
            sequence, reason = broken
            raise CommandError(f"Group {group_id}: first bad sequence {sequence}: {reason}")
        self.stdout.write(f"Group {group_id}: {count} events, sequences 1..{count} and hash chain verified")

    def do_demo(self, options: dict[str, Any]) -> None:
        from portal.demo import seed

        for line in seed(options["password"]):
            self.stdout.write(line)
