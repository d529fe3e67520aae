"""DRF shapes of the REST API, for validation of reads and the OpenAPI schema.

Command envelopes are validated by the protocol kernel, not here: these
serializers only describe them to the schema.
"""

from rest_framework import serializers

from mwportal.protocol import ErrorCode


class ErrorSerializer(serializers.Serializer):
    """The normative error document (spec §19, ``error.schema.json``): every
    REST refusal is one, bare, with no wrapper."""

    code = serializers.ChoiceField(choices=[str(c) for c in ErrorCode])
    message = serializers.CharField(min_length=1, max_length=2000)
    retryable = serializers.BooleanField(help_text="an unchanged retry is safe (spec §19)")
    occurredAt = serializers.DateTimeField(help_text="RFC 3339, UTC, ending in Z")  # noqa: N815 (protocol names)
    fatal = serializers.BooleanField(required=False)
    relatedFrameId = serializers.CharField(required=False)  # noqa: N815
    relatedActionId = serializers.CharField(required=False)  # noqa: N815
    groupId = serializers.CharField(required=False)  # noqa: N815
    expectedRevision = serializers.IntegerField(required=False, min_value=0)  # noqa: N815
    currentRevision = serializers.IntegerField(required=False, min_value=0)  # noqa: N815
    retryAfterMs = serializers.IntegerField(  # noqa: N815
        required=False, min_value=0, help_text="wait at least this long before retrying (RATE_LIMITED, BACKPRESSURE)"
    )
    snapshotArtifactHash = serializers.CharField(required=False)  # noqa: N815
    details = serializers.DictField(required=False, help_text="what the code alone does not say (details.reason)")


class SessionRequestSerializer(serializers.Serializer):
    agent = serializers.UUIDField()
    issued_at = serializers.CharField(help_text="RFC 3339 UTC ending in Z, within 5 minutes of the server")
    nonce = serializers.CharField(min_length=8, max_length=200, help_text="single use")
    signature = serializers.CharField(help_text="Ed25519 over the canonical JSON of the other three members")


class SessionSerializer(serializers.Serializer):
    agent = serializers.UUIDField()
    token = serializers.CharField()
    session_epoch = serializers.IntegerField()


class TargetSerializer(serializers.Serializer):
    kind = serializers.CharField()
    id = serializers.UUIDField()
    revision = serializers.IntegerField(required=False, allow_null=True)


class EnvelopeSerializer(serializers.Serializer):
    type = serializers.CharField()
    action_id = serializers.UUIDField()
    actor = serializers.UUIDField()
    group = serializers.UUIDField()
    target = TargetSerializer(required=False, allow_null=True)
    session_epoch = serializers.IntegerField()
    membership_epoch = serializers.IntegerField(required=False, allow_null=True)
    ownership_epoch = serializers.IntegerField(required=False, allow_null=True)
    lease_id = serializers.UUIDField(required=False, allow_null=True)
    issued_at = serializers.CharField()
    body = serializers.DictField()
    extensions = serializers.DictField(required=False)
    signature = serializers.CharField()


class EventRefSerializer(serializers.Serializer):
    event_id = serializers.UUIDField()
    sequence = serializers.IntegerField()
    type = serializers.CharField()


class AggregateSerializer(serializers.Serializer):
    kind = serializers.CharField()
    id = serializers.CharField()
    revision = serializers.IntegerField()


class ReceiptSerializer(serializers.Serializer):
    action_id = serializers.UUIDField()
    actor = serializers.CharField()
    group = serializers.UUIDField()
    status = serializers.CharField()
    events = EventRefSerializer(many=True)
    aggregate = AggregateSerializer()
    accepted_at = serializers.CharField()
    replayed = serializers.BooleanField()
    grants = serializers.DictField(required=False)


class EventSerializer(serializers.Serializer):
    event_id = serializers.UUIDField()
    group = serializers.UUIDField()
    sequence = serializers.IntegerField()
    type = serializers.CharField()
    aggregate = AggregateSerializer()
    actor = serializers.CharField()
    action_id = serializers.UUIDField()
    occurred_at = serializers.CharField()
    body = serializers.DictField()
    prev_hash = serializers.CharField()
    hash = serializers.CharField()


class EventPageSerializer(serializers.Serializer):
    events = EventSerializer(many=True)
    head = serializers.IntegerField()


class EventQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)
