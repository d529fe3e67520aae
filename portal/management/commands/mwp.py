"""``python manage.py mwp <subcommand>``: Organizations, Agents, log checks.

    mwp create-org SLUG [--name NAME]
    mwp create-agent --org SLUG --name NAME --roles r1,r2 --out key.json     an agent and its key file
    mwp create-agent --org SLUG --name NAME --roles r1,r2 --kind person --user U
                                  a person linked to Django user U, without a key: the person
                                  supplies their own, signed in (agent.enroll; issue 16 item 5)
    mwp verify-log GROUP_ID
    mwp export-audit GROUP_ID --out FILE [--no-bytes]   a Group's audit bundle (artifacts/audit.py)
    mwp verify-audit FILE [--server-key KEY]            check a bundle offline, no database
    mwp review WORKITEM_ID        run the review pipeline of a WorkItem's latest submission
    mwp demo                      the demo Organization: MissionOwner and Coordinator logins
                                  (a password per person, generated once, kept in
                                  var/demo-logins.json, mode 0600), Missions

Every change goes through ``accept()`` as the system actor. The command
lives in the top app because it drives all of them (audit, review, the demo
of ``portal/demo.py``); under ``missions`` it tied that app to every higher one.
"""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from missions.commands import create_organization, register_agent
from missions.models import ORG_ROLES, Group, Organization
from missions.verify import verify_group_log
from mwportal.protocol import ProtocolError, generate_keypair, parse_uuid
from mwportal.security import write_private_json


class Command(BaseCommand):
    help = (
        "MissionWeave administration: create-org, create-agent, verify-log, export-audit, verify-audit, review, demo."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="sub", required=True, parser_class=ArgumentParser)
        org = sub.add_parser("create-org", help="create an Organization and print its id")
        org.add_argument("slug")
        org.add_argument("--name", default=None)
        agent = sub.add_parser("create-agent", help="register an Agent and write its key file")
        agent.add_argument("--org", required=True)
        agent.add_argument("--name", required=True)
        agent.add_argument("--roles", required=True, help=f"comma-separated: {','.join(ORG_ROLES)}")
        agent.add_argument("--out", type=Path, help="the key file of an agent (not for a person)")
        agent.add_argument("--kind", default="agent", choices=["agent", "person"])
        agent.add_argument("--user", default=None, help="link a person Agent to this Django user")
        verify = sub.add_parser("verify-log", help="recompute a Group's sequences and hash chain")
        verify.add_argument("group_id")
        export = sub.add_parser("export-audit", help="write a Group's audit bundle")
        export.add_argument("group_id")
        export.add_argument("--out", required=True, type=Path)
        export.add_argument("--no-bytes", action="store_true", help="list Artifacts by hash only")
        check = sub.add_parser("verify-audit", help="verify an audit bundle without a database")
        check.add_argument("file", type=Path)
        check.add_argument("--server-key", default=None, help="pin the server's public key (base64url)")
        review = sub.add_parser("review", help="run the review pipeline of a WorkItem's latest submission")
        review.add_argument("workitem_id")
        sub.add_parser("demo", help="create the demo Organization, its logins and Missions")

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
        if options["kind"] == "person":
            self._create_person(options, roles)
            return
        out: Path | None = options["out"]
        if out is None:
            raise CommandError("an agent needs --out FILE for its key")
        if options["user"] is not None:
            raise CommandError("--user links a person (--kind person), never an agent's key")
        if not out.parent.exists():
            raise CommandError(f"{out.parent} does not exist")
        private_key, public_key = generate_keypair()
        agent_id = register_agent(options["org"], options["name"], "agent", roles, public_key)
        org = Organization.objects.get(slug=options["org"])
        write_private_json(
            out,
            {"agent_id": agent_id, "organization": str(org.id), "private_key": private_key, "public_key": public_key},
        )
        self.stdout.write(agent_id)
        self.stderr.write(f"Agent {options['name']} ({agent_id}); key written to {out} (mode 0600)")

    def _create_person(self, options: dict[str, Any], roles: list[str]) -> None:
        """A person is registered without a key (issue 16 item 5): whoever runs
        this must never hold the private key of the person they enroll; the
        person supplies their own public key, signed in (``agent.enroll``)."""
        if options["out"] is not None:
            raise CommandError("a person gets no key file: they supply their own key, signed in (agent.enroll)")
        if options["user"] is None:
            raise CommandError("a person needs --user USERNAME, the Django user who signs in as them")
        agent_id = register_agent(options["org"], options["name"], "person", roles, "", options["user"])
        self.stdout.write(agent_id)
        self.stderr.write(
            f"Person {options['name']} ({agent_id}), linked to user {options['user']!r}; no key yet:"
            " they supply their own public key, signed in (agent.enroll)"
        )

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

    def do_export_audit(self, options: dict[str, Any]) -> None:
        from artifacts.audit import export_audit

        group_id = parse_uuid(options["group_id"], "GROUP_ID")
        if not Group.objects.filter(id=group_id).exists():
            raise CommandError(f"no Group {group_id}")
        out: Path = options["out"]
        summary = export_audit(group_id, out, include_bytes=not options["no_bytes"])
        for sha in summary.unavailable:
            self.stderr.write(f"Artifact {sha}: stored bytes do not match their hash; listed by hash only")
        self.stdout.write(
            f"{out}: {summary.events} events, {summary.artifacts_included} Artifacts with their bytes,"
            f" {len(summary.artifacts_hash_only)} by hash only"
        )

    def do_verify_audit(self, options: dict[str, Any]) -> None:
        # Django-free and database-free: the verifier is the protocol kernel's.
        from mwportal.protocol.audit import AuditFailure, verify_bundle

        try:
            report = verify_bundle(str(options["file"]), server_key=options["server_key"])
        except AuditFailure as exc:
            raise CommandError(f"audit bundle FAILED at {exc.where}: {exc.message}") from None
        for line in report.lines():
            self.stdout.write(line)
        self.stdout.write("OK")

    def do_review(self, options: dict[str, Any]) -> None:
        from artifacts.review import review_summary, run_review
        from workitems.models import WorkItem

        item_id = parse_uuid(options["workitem_id"], "WORKITEM_ID")
        receipt = run_review(item_id)
        if receipt is None:
            raise CommandError(f"WorkItem {item_id} has no submission to review")
        summary = review_summary(WorkItem.objects.get(id=item_id))
        for row in summary["criteria"]:
            self.stdout.write(f"{row['id']}: {row['outcome']}")
        self.stdout.write(f"overall: {summary['review']['outcome']}")

    def do_demo(self, options: dict[str, Any]) -> None:
        from portal.demo import seed

        for line in seed():
            self.stdout.write(line)
