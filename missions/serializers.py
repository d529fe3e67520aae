"""DRF shapes of the REST binding (DESIGN §5), for reading query strings and for OpenAPI.

Protocol documents (Commands, Events, HELLO frames, Memberships, errors) are
validated by the kernel's schemas, not here; OpenAPI refers to those schemas
by their ``$id`` (``missions/api/openapi.py`` embeds them), so these
serializers only describe the binding's own shapes: the receipt, the Event
page's query and the key binding.
"""

from rest_framework import serializers

from mwportal.protocol import ErrorCode


class ErrorSerializer(serializers.Serializer):
    """The normative error document (§19, ``error.schema.json``): every REST
    refusal is one, bare. OpenAPI replaces this component by a reference to
    the kernel's error schema; the fields here only name it for DRF."""

    code = serializers.ChoiceField(choices=[str(c) for c in ErrorCode])
    message = serializers.CharField(min_length=1, max_length=2000)
    retryable = serializers.BooleanField()
    occurredAt = serializers.DateTimeField()  # noqa: N815 (protocol names)


class EventRefSerializer(serializers.Serializer):
    eventId = serializers.CharField(help_text="urn:uuid: of the appended Event")  # noqa: N815
    sequence = serializers.IntegerField(required=False, help_text="its Group sequence (Group Events only)")
    kind = serializers.CharField()


class ReceiptSerializer(serializers.Serializer):
    """What ``POST /api/v0.1/commands`` answers for an accepted Command (DESIGN §5)."""

    actionId = serializers.CharField(help_text="the Command's actionId")  # noqa: N815
    events = EventRefSerializer(many=True)
    aggregateRevision = serializers.IntegerField(required=False)  # noqa: N815
    replayed = serializers.BooleanField(help_text="true: the stored receipt of an unchanged retry (MWP-EVT-003)")
    grants = serializers.DictField(required=False, help_text="what a handler grants the sender, if anything")


class EventQuerySerializer(serializers.Serializer):
    afterSequence = serializers.IntegerField(min_value=0, max_value=2**53 - 1, default=0)  # noqa: N815
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)


class PrincipalSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["agent", "human", "service"])
    id = serializers.CharField()


class KeyBindingSerializer(serializers.Serializer):
    """``GET /api/v0.1/keys/{keyId}``: a Registry key binding and its effective validity (§6.4)."""

    keyId = serializers.CharField()  # noqa: N815
    principal = PrincipalSerializer()
    algorithm = serializers.ChoiceField(choices=["Ed25519"])
    publicKey = serializers.CharField(help_text="unpadded base64url of the 32 raw bytes")  # noqa: N815
    validFrom = serializers.CharField()  # noqa: N815
    validUntil = serializers.CharField(required=False)  # noqa: N815
    revokedAt = serializers.CharField(required=False)  # noqa: N815
