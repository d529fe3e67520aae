"""People sign their own Commands in the browser (issue 19 item 2, DESIGN §4, PROTOCOL §6.4, §15.1).

In Debian's Chromium against the portal as served: on a person's first sign-in
the page makes a non-extractable WebCrypto Ed25519 key, keeps it in IndexedDB
and enrols its public half; every Command the person issues is built and
signed by ``static/portal/sign.js`` and verified by the six stages like any
other. The tests capture every request the browser sends.
"""

from __future__ import annotations

import base64
import json
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from playwright.sync_api import Browser, Page, Request

from missions.models import GroupEvent, Mission, Organization, SigningKey, SigningKeyValidity
from missions.service_keys import GROUP_AUTHORITY, principal_id
from mwportal.protocol import ErrorCode, ed25519, jcs
from mwportal.protocol.ids import urn
from mwportal.protocol.signing import verify
from tests.browser.conftest import base_url, shot
from tests.conftest import refused
from tests.delivery.conftest import Daphne
from tests.portal.conftest import Person, admin_group, make_person
from tests.portal.test_final import submit_for_approval
from tests.workitems.flow import Flow

pytestmark = pytest.mark.django_db(transaction=True)

COMMANDS = "/api/v0.1/commands"
KEY_OF_PAGE = "async () => { const k = await window.mwpKey(); return {keyId: k.keyId, publicKey: k.publicKeyB64}; }"
# What the page may do with its private key: sign. Exporting it fails in every format.
EXPORT_ATTEMPTS = """async () => {
  const k = await window.mwpKey();
  const out = {extractable: k.privateKey.extractable, type: k.privateKey.type, algorithm: k.privateKey.algorithm.name};
  for (const format of ["pkcs8", "jwk", "raw"]) {
    try { await crypto.subtle.exportKey(format, k.privateKey); out[format] = "exported"; }
    catch (e) { out[format] = e.name; }
  }
  return out;
}"""


class Browsing:
    """One person's browser context, signed in, with every request it sent."""

    def __init__(self, browser: Browser, root: str, username: str, password: str) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.sent: list[Request] = []
        self.context.on("request", lambda request: self.sent.append(request))
        self.page: Page = self.context.new_page()
        self.root = root
        self.page.goto(root + "/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(root + "/")
        self.page.wait_for_selector("body[data-key-state=ready]", timeout=15_000)

    def key(self) -> dict[str, str]:
        return dict(self.page.evaluate(KEY_OF_PAGE))

    def commands(self) -> list[dict[str, Any]]:
        return [json.loads(r.post_data or "{}") for r in self.sent if r.method == "POST" and r.url.endswith(COMMANDS)]

    def press(self, selector: str) -> None:
        """Press a form's button, the page's earlier answer cleared first."""
        self.page.evaluate("() => document.querySelectorAll('.signed-outcome, .messages').forEach(e => e.remove())")
        self.page.click(selector)

    def outcome(self) -> str:
        """The page's answer to the last Command: the accepted flash after reload, or the refusal in the form."""
        box = self.page.wait_for_selector(".msg-success, .signed-outcome.refusal", timeout=15_000)
        assert box is not None
        return box.inner_text()


@pytest.fixture
def root(server: Daphne) -> str:
    return base_url(server)


def seeds_of(public_keys: set[bytes], blobs: Iterable[bytes]) -> list[bytes]:
    """Every Ed25519 seed of one of ``public_keys`` written in ``blobs``: base64url, base64 or hex text,
    or raw 32-byte windows of a short binary value."""
    found = []
    for blob in blobs:
        candidates: set[bytes] = set()
        for token in re.findall(rb"[A-Za-z0-9_\-+/]{43,44}=?", blob):
            for decode in (base64.urlsafe_b64decode, base64.b64decode):
                try:
                    raw = decode(token.rstrip(b"=") + b"=")
                except ValueError:
                    continue
                if len(raw) == 32:
                    candidates.add(raw)
        candidates.update(bytes.fromhex(t.decode()) for t in re.findall(rb"[0-9a-fA-F]{64}", blob))
        if len(blob) <= 4096:
            candidates.update(blob[i : i + 32] for i in range(max(0, len(blob) - 31)))
        found += [c for c in candidates if len(c) == 32 and ed25519.public_key(c) in public_keys]
    return found


def raw_key(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=")


def stored_blobs() -> Iterator[bytes]:
    """Every row of every table, and every file of the service's directories (var dir, service keys, Artifacts)."""
    for model in apps.get_models():
        for row in model._default_manager.values_list():
            yield repr(row).encode()
            yield from (bytes(value) for value in row if isinstance(value, bytes | memoryview))
    for directory in {settings.VAR_DIR, settings.MWP_SERVICE_KEY_DIR, settings.MWP_ARTIFACT_ROOT}:
        for path in Path(str(directory)).rglob("*"):
            if path.is_file():
                yield path.read_bytes()


def test_first_sign_in_enrols_a_non_extractable_key_and_no_private_key_is_stored_or_sent_design_4(
    server: Daphne, browser: Browser, root: str, flow: Flow, pat: Person
) -> None:
    you = Browsing(browser, root, "pat", "pw-pat")
    key = you.key()
    attempts = you.page.evaluate(EXPORT_ATTEMPTS)
    assert attempts["extractable"] is False and attempts["type"] == "private" and attempts["algorithm"] == "Ed25519"
    assert {attempts[f] for f in ("pkcs8", "jwk", "raw")}.isdisjoint({"exported"}), attempts
    # The Registry binds the public half to Pat under the key ID it minted (§6.4, a urn:uuid: key ID).
    row = SigningKey.objects.get(key_id=key["keyId"])
    assert (row.principal_type, row.principal_id, row.public_key) == ("human", pat.actor["id"], key["publicKey"])
    (enrolment,) = [r for r in you.sent if r.url.endswith("/keys/enrol")]
    assert json.loads(enrolment.post_data or "") == {"publicKey": key["publicKey"]}
    (event,) = [e.as_wire() for e in GroupEvent.objects.filter(type="ext.mwportal.registry.principal_key_enrolled")
                if e.body["keyId"] == key["keyId"]]  # fmt: skip
    assert event["payload"]["principal"] == pat.actor and event["actor"]["type"] == "service"
    # A second browser (a new device) is a new key ID for the same person.
    other = Browsing(browser, root, "pat", "pw-pat").key()
    assert other["keyId"] != key["keyId"] and other["publicKey"] != key["publicKey"]

    # No seed of the browser's key in anything the browser sent; no seed of any person's key
    # (the browser's, the other browser's, the fixtures' software keys) in any table or service file.
    sent = [r.post_data_buffer or b"" for r in you.sent]
    assert seeds_of({raw_key(key["publicKey"])}, sent) == []
    humans = SigningKey.objects.filter(principal_type="human").values_list("public_key", flat=True)
    people = {raw_key(k) for k in humans}
    assert raw_key(key["publicKey"]) in people and len(people) >= 3
    assert seeds_of(people, stored_blobs()) == []
    # The same search does find a seed where one is kept: the Group Authority's, in MWP_SERVICE_KEY_DIR.
    authority = SigningKey.objects.get(principal_id=urn(_service_id(flow, GROUP_AUTHORITY)))
    assert seeds_of({raw_key(authority.public_key)}, stored_blobs())


def _service_id(flow: Flow, role: str) -> str:
    return principal_id(str(Mission.objects.get(group_id=flow.group).organization_id), role)


def test_a_person_creates_a_mission_signed_in_the_browser_spec_7_1_15_1(
    server: Daphne, browser: Browser, root: str, flow: Flow, pat: Person
) -> None:
    you = Browsing(browser, root, "pat", "pw-pat")
    you.page.click("#nav-new-mission")
    you.page.fill("input[name=title]", "Quarterly report")
    you.page.fill("textarea[name=objective]", "Write the quarterly report.")
    you.page.fill("input[name=done]", "The board accepts it.")
    you.page.select_option("select[name=coordinator]", flow.coordinator.urn)
    you.page.click("#create-mission")
    you.page.wait_for_url(re.compile(r".*/missions/[0-9a-f-]{36}/$"))
    assert "Accepted: mission.created" in you.outcome()
    shot(you.page, "browser-signed-mission-create")
    (document,) = you.commands()
    key = you.key()
    # §15.1: a human's mission.create carries no epoch; the signature is the page's key's, over JCS.
    assert document["kind"] == "mission.create" and document["actor"] == pat.actor
    assert not {"sessionEpoch", "membershipEpoch", "coordinatorEpoch"} & set(document)
    signature = document["signature"]
    assert signature["algorithm"] == "Ed25519" and signature["keyId"] == key["keyId"]
    assert signature["createdAt"] == document["issuedAt"]
    assert verify(key["publicKey"], document, signature["value"])
    assert jcs.signing_bytes(document) == jcs.canonicalize({k: v for k, v in document.items() if k != "signature"})
    mission = Mission.objects.get(title="Quarterly report")
    assert urn(mission.group_id) == document["groupId"] and mission.created_by_id == pat.agent.id


def test_the_owner_requests_changes_then_approves_signing_the_approval_in_the_browser_spec_7_1_7_3(
    server: Daphne, browser: Browser, root: str, flow: Flow, pat: Person
) -> None:
    artifacts = submit_for_approval(flow)
    you = Browsing(browser, root, "pat", "pw-pat")
    key = you.key()
    you.page.goto(f"{root}/missions/{flow.group}/final/")
    you.page.fill("textarea[name=feedback]", "Add the appendix.")
    you.page.click("#request-changes")
    assert "Accepted: mission.changes_requested" in you.outcome()
    assert Mission.objects.get(group_id=flow.group).status == "active"
    flow.coordinator.send("mission.submit_for_approval", flow.group, {"artifactHashes": artifacts},
                          coordinator_epoch=1)  # fmt: skip
    you.page.goto(f"{root}/missions/{flow.group}/final/")
    you.page.fill("textarea[name=note]", "Ship it.")
    you.page.click("#approve-mission")
    assert "Accepted: mission.approved" in you.outcome()
    you.page.goto(f"{root}/missions/{flow.group}/")
    assert you.page.inner_text("h1 .chip") == "approved"
    shot(you.page, "browser-signed-mission-approved")
    approve = you.commands()[-1]
    approval = approve["payload"]["approval"]
    # §7.3: the Approval document is the owner's, signed in the page over exactly the submitted revision
    # and Artifact set; the Command carrying it is signed too.
    assert approval["approver"] == pat.actor and sorted(approval["artifactHashes"]) == artifacts
    assert approval["signature"]["keyId"] == key["keyId"] and approval["signature"]["createdAt"] == approval[
        "occurredAt"]  # fmt: skip
    assert verify(key["publicKey"], approval, approval["signature"]["value"])
    assert verify(key["publicKey"], approve, approve["signature"]["value"])
    assert "membershipEpoch" in approve and "sessionEpoch" not in approve


def test_a_tampered_signature_is_refused_and_the_page_says_so_spec_6_4(
    server: Daphne, browser: Browser, root: str, flow: Flow, pat: Person
) -> None:
    submit_for_approval(flow)
    you = Browsing(browser, root, "pat", "pw-pat")

    def tamper(route: Any) -> None:
        document = json.loads(route.request.post_data)
        value = document["signature"]["value"]
        document["signature"]["value"] = ("B" if value[0] == "A" else "A") + value[1:]
        route.continue_(post_data=json.dumps(document))

    you.page.route(f"**{COMMANDS}", tamper)
    you.page.goto(f"{root}/missions/{flow.group}/final/")
    you.page.fill("textarea[name=feedback]", "Add the appendix.")
    you.page.click("#request-changes")
    assert you.outcome().startswith("AUTH_INVALID_SIGNATURE")
    assert not GroupEvent.objects.filter(group_id=flow.group, type="mission.changes_requested").exists()
    # Untampered, the same form is accepted.
    you.page.unroute(f"**{COMMANDS}")
    you.page.goto(f"{root}/missions/{flow.group}/final/")
    you.page.fill("textarea[name=feedback]", "Add the appendix.")
    you.page.click("#request-changes")
    assert "Accepted: mission.changes_requested" in you.outcome()


def test_an_admin_revokes_a_browser_key_and_its_next_command_is_refused_design_4_spec_6_4(
    server: Daphne, browser: Browser, root: str, flow: Flow, pat: Person
) -> None:
    submit_for_approval(flow)
    make_person("ada", ["admin"])
    you = Browsing(browser, root, "pat", "pw-pat")
    key = you.key()
    you.page.goto(f"{root}/missions/{flow.group}/final/")  # loaded while the key is valid

    admin = Browsing(browser, root, "ada", "pw-ada")
    admin.page.goto(f"{root}/keys/")
    row = admin.page.locator(f'tr[data-key-id="{key["keyId"]}"]')
    row.locator("input[name=reason]").fill("laptop lost")
    row.locator("button[name=revoke]").click()
    assert "Accepted: ext.mwportal.registry.principal_key_revoked" in admin.outcome()
    status = SigningKeyValidity.objects.get(key__key_id=key["keyId"])
    assert status.revoked_at is not None
    (revoke,) = admin.commands()
    assert revoke["actor"]["id"] != pat.actor["id"] and revoke["payload"]["keyId"] == key["keyId"]

    you.page.fill("textarea[name=feedback]", "Add the appendix.")
    you.page.click("#request-changes")
    assert you.outcome().startswith("AUTH_INVALID_SIGNATURE")
    assert not GroupEvent.objects.filter(group_id=flow.group, type="mission.changes_requested").exists()
    you.page.goto(f"{root}/keys/")
    assert you.page.get_attribute("body", "data-key-state") == "revoked"
    # Only an admin revokes: Pat, signing with a key still valid, cannot revoke Ada's.
    assert you.page.locator("button[name=revoke]").count() == 0
    ada_key = SigningKey.objects.filter(principal_type="human").exclude(principal_id=pat.actor["id"]).first()
    assert ada_key is not None
    refused(ErrorCode.AUTH_FORBIDDEN, pat.key.send, "ext.mwportal.registry.principal_key_revoke", admin_group(),
            {"keyId": ada_key.key_id})  # fmt: skip
    assert not SigningKeyValidity.objects.filter(key=ada_key).exists()


def tricky_documents() -> list[Any]:
    """JSON values where a naive canonical form goes wrong (RFC 8785 §3.2): member order by UTF-16
    code units (an astral character sorts before U+FFFF), escapes, ECMAScript number forms."""
    rng = random.Random(19)
    fixed: list[Any] = [
        {"\U0001f600": 1, "\uffff": 2, "a": 3, "B": 4, "": 5, "\u00e9": 6},
        {"s": 'line\nbreak "quoted" back\\slash \u0001 \u007f \u2028 é 😀'},
        {"n": [0, -0.0, 1, -1, 0.1, 1e21, 1e-7, 123456789012345, 2**53 - 1, 1.5e300, 5e-324, 100, 1e20]},
        {"nested": {"z": [True, False, None, {"b": [], "a": {}}], "a": "x"}},
    ]
    alphabet = 'aZ09_-é😀\u00ff\u4e2d"\\/\n\t'
    for _ in range(40):
        doc = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))): rng.choice(
            [rng.randint(-(2**53) + 1, 2**53 - 1), rng.random() * 10 ** rng.randint(-8, 20), "".join(
                rng.choice(alphabet) for _ in range(rng.randint(0, 6))), [rng.randint(0, 9)], None, True])
            for _ in range(rng.randint(1, 6))}  # fmt: skip
        fixed.append(doc)
    return fixed


def test_the_pages_canonical_form_is_the_servers_byte_for_byte_rfc_8785(server: Daphne, browser: Browser) -> None:
    """What the page signs (sign.js' JCS) is what the server verifies (``mwportal.protocol.jcs``)."""
    page = browser.new_page()
    page.goto(base_url(server) + "/login/")
    documents = tricky_documents()
    in_page = page.evaluate("docs => docs.map(d => window.mwpJcs(d))", documents)
    assert [s.encode() for s in in_page] == [jcs.canonicalize(d) for d in documents]
    # And the comparison can fail: a member order by code point is not RFC 8785's.
    assert page.evaluate("() => window.mwpJcs({'\\uffff': 1, '\\ud83d\\ude00': 2})") != '{"\uffff":1,"😀":2}'


def test_the_policy_editor_and_an_override_grant_are_built_and_signed_in_the_page_spec_11_1_20(
    server: Daphne, browser: Browser, root: str, flow: Flow, pat: Person, org: dict[str, str]
) -> None:
    you = Browsing(browser, root, "pat", "pw-pat")
    you.page.goto(f"{root}/policy/")
    new_class = you.page.locator("#classes tbody tr").last
    new_class.locator(".class-name").fill("gold")
    weight = new_class.locator(".class-weight").get_attribute("name")
    you.page.click("#save-policy")  # a class without a weight
    assert you.outcome() == f'{weight}: "" is not a number'  # refused in the page: nothing sent
    assert you.commands() == []
    new_class.locator(".class-weight").fill("6")
    you.page.fill(f"input[name=group_class_{flow.group}]", "gold")
    you.page.fill(f"input[name=group_quota_{flow.group}]", "2")
    you.press("#save-policy")
    assert "Accepted: ext.mwportal.scheduling.priority_policy_changed" in you.outcome()
    policy = Organization.objects.get(id=org["id"]).priority_policy
    assert policy["classes"]["gold"] == 6 and policy["groups"] == {flow.group: {"class": "gold", "quota": 2}}

    you.page.goto(f"{root}/missions/{flow.group}/")
    form = you.page.locator("#override-form")
    form.locator("select[name=policy_name]").select_option("message_rate")
    form.locator("select[name=beneficiary]").select_option(label="Wanda Worker")
    form.locator("input[name=target_kind]").fill("message.post")
    form.locator("input[name=target_action]").fill(urn("00000000-0000-4000-8000-0000000000aa"))
    form.locator("input[name=reason]").fill("the incident needs it")
    form.locator("#grant-override").click()
    assert "Accepted: policy.cooperation_override.granted" in you.outcome()
    grant = you.commands()[-1]["payload"]
    assert grant["beneficiary"] == flow.worker.actor and grant["grantId"].startswith("urn:uuid:")
