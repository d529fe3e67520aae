"""``python manage.py mwp <subcommand>``: Organizations, Principals and their key files, log checks.

    mwp create-org SLUG [--name NAME]     prints the Organization's id (``urn:uuid:``) last
    mwp create-agent --org SLUG --name NAME --out FILE [--roles r1,r2]
                                          an Agent Principal and its key file
    mwp create-human --org SLUG --username NAME --roles mission_owner[,admin] --out FILE [--name NAME]
                                          a human Principal linked to the Django user NAME (created
                                          without a password when absent), with a software key for
                                          scripts and tests; in the browser a person's key is their own.
                                          FILE is the operator's to keep: never inside the service's
                                          var dir or MWP_SERVICE_KEY_DIR (refused), which hold no
                                          person's private key
    mwp verify-log GROUP_ID       the log's sequences and hash chain; of an archived Group also its
                                  encrypted audit archive, decrypted and verified (artifacts/archive.py)
    mwp export-audit GROUP_ID --out FILE [--no-bytes]   a Group's audit bundle (artifacts/audit.py);
                                  an archived Group's is its encrypted archive, decrypted and verified
    mwp archive GROUP_ID | --due  archive a finished Mission's Group now (§7.4), or every Group past
                                  its Organization's retention delay (what Celery beat runs)
    mwp verify-audit FILE [--server-key KEY]            check a bundle offline, no database
    mwp review WORKITEM_ID        run the review pipeline of a WorkItem's latest submission
    mwp demo [--keys DIR]         the demo Organization: a key file per demo Agent in DIR
                                  (default ``var/demo/``), the people's logins (a password
                                  generated once, kept in var/demo-logins.json, mode 0600; they
                                  sign in the browser with its own key), Missions

A key file (DESIGN §4, mode 0600) is ``{"principal": {"type", "id"},
"organizationId", "keyId", "privateKey", "publicKey"}``: base64url of the raw
32-byte Ed25519 seed and public key, identifiers as ``urn:uuid:``. Every change
goes through ``accept()`` as the Organization's control plane. The command
lives in the top app because it drives all of them (audit, review, the demo of
``portal/demo.py``); under ``missions`` it tied that app to every higher one.
"""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from missions.commands import create_organization
from missions.models import Group, Organization
from missions.snapshots import archive_group, is_archived
from missions.verify import verify_group_log
from mwportal.protocol import ProtocolError
from mwportal.protocol.ids import bare, urn
from portal.keys import enrol_key


def _roles(text: str) -> list[str]:
    return [r.strip() for r in text.split(",") if r.strip()]


class Command(BaseCommand):
    help = (
        "MissionWeave administration: create-org, create-agent, create-human, verify-log, export-audit,"
        " verify-audit, archive, review, demo."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="sub", required=True, parser_class=ArgumentParser)
        org = sub.add_parser("create-org", help="create an Organization and print its id")
        org.add_argument("slug")
        org.add_argument("--name", default=None)
        agent = sub.add_parser("create-agent", help="register an Agent and write its key file")
        agent.add_argument("--org", required=True)
        agent.add_argument("--name", required=True)
        agent.add_argument("--out", required=True, type=Path, help="the key file to write (mode 0600)")
        agent.add_argument("--roles", default="", help="comma-separated Organization roles")
        human = sub.add_parser("create-human", help="register a person with a software key and write its key file")
        human.add_argument("--org", required=True)
        human.add_argument("--username", required=True, help="the Django user who signs in as this person")
        human.add_argument("--roles", required=True, help="comma-separated: mission_owner, admin, ...")
        human.add_argument("--out", required=True, type=Path, help="the key file to write (mode 0600)")
        human.add_argument("--name", default=None, help="the display name (default: the user name)")
        verify = sub.add_parser("verify-log", help="recompute a Group's sequences and hash chain")
        verify.add_argument("group_id")
        export = sub.add_parser("export-audit", help="write a Group's audit bundle")
        export.add_argument("group_id")
        export.add_argument("--out", required=True, type=Path)
        export.add_argument("--no-bytes", action="store_true", help="list Artifacts by hash only")
        check = sub.add_parser("verify-audit", help="verify an audit bundle without a database")
        check.add_argument("file", type=Path)
        check.add_argument("--server-key", default=None, help="pin the server's public key (base64url)")
        archive = sub.add_parser("archive", help="archive a finished Mission's Group (§7.4)")
        which = archive.add_mutually_exclusive_group(required=True)
        which.add_argument("group_id", nargs="?")
        which.add_argument("--due", action="store_true", help="every Group past its retention delay")
        review = sub.add_parser("review", help="run the review pipeline of a WorkItem's latest submission")
        review.add_argument("workitem_id")
        demo = sub.add_parser("demo", help="create the demo Organization, its Agents' key files, logins and Missions")
        demo.add_argument("--keys", type=Path, default=None, help="where to write the demo Agents' key files")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, "do_" + options["sub"].replace("-", "_"))(options)
        except ProtocolError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None

    def do_create_org(self, options: dict[str, Any]) -> None:
        slug = options["slug"]
        org_id, group_id = create_organization(slug, options["name"] or slug)
        self.stderr.write(f"Organization {slug}: administrative Group {urn(group_id)}")
        self.stdout.write(urn(org_id))

    def _target(self, options: dict[str, Any]) -> Path:
        if not Organization.objects.filter(slug=options["org"]).exists():
            raise CommandError(f"no Organization {options['org']!r}; create it with: mwp create-org SLUG")
        out: Path = options["out"]
        if not out.parent.is_dir():
            raise CommandError(f"{out.parent} does not exist")
        return out

    def do_create_agent(self, options: dict[str, Any]) -> None:
        out = self._target(options)
        key = enrol_key(options["org"], options["name"], "agent", _roles(options["roles"]))
        key.write(out)
        assert key.principal is not None
        self.stderr.write(f"Agent {options['name']}: key {key.key_id} written to {out} (mode 0600)")
        self.stdout.write(urn(key.principal[1]))

    def do_create_human(self, options: dict[str, Any]) -> None:
        out = self._target(options)
        for name, directory in (("var dir", settings.VAR_DIR), ("MWP_SERVICE_KEY_DIR", settings.MWP_SERVICE_KEY_DIR)):
            if out.resolve().is_relative_to(Path(directory).resolve()):
                raise CommandError(
                    f"{out} is inside the service's {name} ({directory}): the service's files hold no person's"
                    " private key (DESIGN §4); write the key file where you keep it, outside the service"
                )
        username = options["username"]
        users = get_user_model().objects
        if not users.filter(username=username).exists():
            users.create_user(username)  # no password: an admin sets one to let them sign in
            self.stderr.write(f"Django user {username!r} created without a password")
        key = enrol_key(options["org"], options["name"] or username, "person", _roles(options["roles"]), username)
        key.write(out)
        assert key.principal is not None
        self.stderr.write(f"Person {username}: key {key.key_id} written to {out} (mode 0600)")
        self.stdout.write(urn(key.principal[1]))

    def do_verify_log(self, options: dict[str, Any]) -> None:
        group_id = bare(options["group_id"], "GROUP_ID")
        group = Group.objects.filter(id=group_id).first()
        if group is None:
            raise CommandError(f"no Group {group_id}")
        count, broken = verify_group_log(group)
        if broken is not None:
            sequence, reason = broken
            raise CommandError(f"Group {group_id}: first bad sequence {sequence}: {reason}")
        self.stdout.write(f"Group {group_id}: {count} events, sequences 1..{count} and hash chain verified")
        if is_archived(group_id):
            report = self._archived_bundle(group_id, None)
            self.stdout.write(f"encrypted audit archive: {report.events} Events, chain and signatures verified")

    def _archived_bundle(self, group_id: str, out: Path | None) -> Any:
        """The archived Group's audit archive decrypted and verified (``artifacts.archive.export_archived``)."""
        from artifacts.archive import ArchiveError, export_archived
        from mwportal.protocol.audit import AuditFailure

        try:
            return export_archived(group_id, out)
        except ArchiveError as exc:
            raise CommandError(f"Group {group_id}: audit archive: {exc}") from None
        except AuditFailure as failure:
            raise CommandError(f"audit archive FAILED at {failure.where}: {failure.message}") from None

    def do_export_audit(self, options: dict[str, Any]) -> None:
        from artifacts.audit import export_audit

        group_id = bare(options["group_id"], "GROUP_ID")
        if not Group.objects.filter(id=group_id).exists():
            raise CommandError(f"no Group {group_id}")
        out: Path = options["out"]
        if is_archived(group_id):
            report = self._archived_bundle(group_id, out)
            self.stdout.write(f"{out}: the archived Group's audit log, decrypted; {report.events} Events verified")
            return
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

    def do_archive(self, options: dict[str, Any]) -> None:
        from missions.tasks import archive_groups

        if options["due"]:
            self.stdout.write(f"{archive_groups()} Groups archived")
            return
        group_id = bare(options["group_id"], "GROUP_ID")
        if not Group.objects.filter(id=group_id).exists():
            raise CommandError(f"no Group {group_id}")
        final = archive_group(group_id, retention={"trigger": "operator"})
        self.stdout.write(f"Group {group_id} archived: final snapshot {final.document['snapshotId']}")

    def do_review(self, options: dict[str, Any]) -> None:
        from artifacts.review import review_summary, run_review
        from workitems.models import WorkItem

        item_id = bare(options["workitem_id"], "WORKITEM_ID")
        receipt = run_review(item_id)
        if receipt is None:
            raise CommandError(f"WorkItem {item_id} has no submission to review")
        summary = review_summary(WorkItem.objects.get(id=item_id))
        for row in summary["criteria"]:
            self.stdout.write(f"{row['criterionId']}: {row['outcome']}")
        self.stdout.write(f"overall: {summary['review']['outcome']}")

    def do_demo(self, options: dict[str, Any]) -> None:
        from portal.demo import seed

        for line in seed(options["keys"]):
            self.stdout.write(line)
