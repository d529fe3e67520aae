"""Every Artifact records the producing Agent Card and capability versions (PROTOCOL §6.1, §13.1).

§6.1: an Artifact carries the versions of the Agent Card and capabilities that produced it. They are the versions
the WorkItem's assignment pinned (``work.offer.accepted``'s ``agentCardVersion`` and ``capabilityPins``): a
manifest naming others is refused, at the member that differs.
"""

from __future__ import annotations

import uuid

from artifacts.models import Artifact
from missions.handlers.sessions import capability, issue_agent_card
from mwportal.protocol import ErrorCode
from mwportal.protocol.ids import urn
from tests.artifacts.conftest import Artifacts, events_of
from tests.conftest import refused
from workitems.models import WorkItem


def test_the_artifact_records_the_pinned_card_and_capability_versions_6_1(art: Artifacts) -> None:
    item = art.active_item()
    pins = WorkItem.objects.get(id=item).pins
    accepted = events_of(art.group, "work.offer.accepted")[-1]["payload"]
    assert (accepted["agentCardVersion"], accepted["capabilityPins"]) == (1, [{"id": "text.summarize",
                                                                              "version": "1.2.0"}])  # fmt: skip
    sha = art.upload(b"# pinned\n")
    manifest = art.manifest(item, sha, b"# pinned\n")
    assert manifest["producer"] == {"agentId": art.worker.urn, "agentCardVersion": 1,
                                    "capabilities": accepted["capabilityPins"]}  # fmt: skip
    art.publish(item, manifest)
    row = Artifact.objects.get(artifact_id=manifest["artifactId"].removeprefix("urn:uuid:"))
    assert (row.agent_card_version, row.versions["capabilities"]) == (1, pins["capabilities"])
    assert events_of(art.group, "artifact.published")[-1]["payload"]["artifact"]["producer"] == manifest["producer"]


def test_a_manifest_naming_other_versions_than_the_pinned_ones_is_refused_6_1(art: Artifacts) -> None:
    item = art.active_item()
    # A later card the Worker holds now is not the one its assignment pinned (a compatible upgrade continues
    # under the pins).
    evidence = [urn(uuid.uuid4())]
    issue_agent_card(art.worker.id, [capability("text.summarize", "1.3.0", verified_evidence=evidence)])
    sha = art.upload(b"# other versions\n")
    producer = {"agentId": art.worker.urn, "agentCardVersion": 1, "capabilities": [{"id": "text.summarize",
                                                                                   "version": "1.2.0"}]}  # fmt: skip
    cases = [
        ({**producer, "agentCardVersion": 2}, "/payload/artifact/producer/agentCardVersion"),
        ({**producer, "capabilities": [{"id": "text.summarize", "version": "1.3.0"}]},
         "/payload/artifact/producer/capabilities"),
        ({**producer, "capabilities": [*producer["capabilities"], {"id": "text.translate", "version": "1.0.0"}]},
         "/payload/artifact/producer/capabilities"),
    ]  # fmt: skip
    for named, field in cases:
        manifest = art.manifest(item, sha, b"# other versions\n", producer=named)
        error = refused(ErrorCode.SCHEMA_VALIDATION_FAILED, art.publish, item, manifest)
        assert error.details["field"] == field
    assert not Artifact.objects.filter(workitem_id=item).exists()
    art.publish(item, art.manifest(item, sha, b"# other versions\n", producer=producer))
    assert Artifact.objects.filter(workitem_id=item).count() == 1
