"""``GET /api/v0.1/schema/``: the REST binding as an OpenAPI 3.1 document (DESIGN §5).

OpenAPI 3.1's Schema Object is JSON Schema 2020-12, so the document embeds
the protocol's schemas as they are instead of a paraphrase:

- every kernel object schema (``mwportal.protocol.schemas``: Command, Event,
  error, WebSocket frames, Membership, ...) as component ``mwp.<name>``;
- every catalogue payload schema as ``mwp.command-payload.<kind>`` and
  ``mwp.event-payload.<kind>``, and ``CommandDocument``, the Command schema
  with each kind's payload schema attached to its ``kind``.

Each keeps its ``$id``, and every ``$ref`` inside them is written as an
absolute URI (a fragment-only ``#/$defs/x`` becomes ``<$id>#/$defs/x``, the
same reference), so a reference between schemas resolves by ``$id`` to the
embedded copy and never to the root of the OpenAPI document. Operations
point at the components with ordinary ``#/components/schemas/...`` pointers.
The error component DRF generates from ``ErrorSerializer`` is replaced by a
pointer to ``mwp.error``: the document every refusal is.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.views import SpectacularAPIView

from mwportal.protocol import schemas

KERNEL_PREFIX = "mwp."
COMMAND_PAYLOAD = "mwp.command-payload."
EVENT_PAYLOAD = "mwp.event-payload."
COMMAND_DOCUMENT = "CommandDocument"


def ref(component: str, fragment: str = "") -> dict[str, str]:
    """A pointer to a component of this document (``fragment`` such as ``/$defs/helloClientInit``)."""
    return {"$ref": f"#/components/schemas/{component}{fragment}"}


def kernel(name: str, fragment: str = "") -> dict[str, str]:
    """A pointer to the embedded kernel schema ``name`` (``command``, ``event``, ``websocket-frame``, ...)."""
    return ref(KERNEL_PREFIX + name, fragment)


def hello(phase_def: str) -> dict[str, str]:
    """A HELLO frame's schema, one ``$defs`` entry of ``websocket-frame``."""
    return kernel("websocket-frame", f"/$defs/{phase_def}")


def absolute_refs(node: Any, base: str) -> Any:
    """``node`` with each fragment-only ``$ref`` written against ``base`` (the schema's ``$id``)."""
    if isinstance(node, dict):
        return {
            key: base + value
            if key == "$ref" and isinstance(value, str) and value.startswith("#")
            else absolute_refs(value, base)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [absolute_refs(value, base) for value in node]
    return node


def embedded(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = absolute_refs(schema, schema["$id"])
    return out


def protocol_components() -> dict[str, Any]:
    """Every kernel and catalogue schema, by component name."""
    from mwportal.protocol import catalogue  # compiled on first use, not at start-up

    components: dict[str, Any] = {
        KERNEL_PREFIX + name: embedded(schemas.json_schema(name)) for name in (schemas.COMMON, *schemas.NAMES)
    }
    data = catalogue.as_data()
    for kind, definition in data["commands"].items():
        components[COMMAND_PAYLOAD + kind] = embedded(definition["payloadSchema"])
    for kind, definition in data["events"].items():
        components[EVENT_PAYLOAD + kind] = embedded(definition["payloadSchema"])
    components[COMMAND_DOCUMENT] = {
        "description": "A signed Command document (§15.1) whose payload is its kind's catalogue schema.",
        "allOf": [kernel("command")],
        "oneOf": [
            {
                "type": "object",
                "required": ["kind", "payload"],
                "properties": {"kind": {"const": kind}, "payload": ref(COMMAND_PAYLOAD + kind)},
            }
            for kind in sorted(data["commands"])
        ],
    }
    return components


def embed_protocol_schemas(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: add the protocol's schemas, point ``Error`` at ``mwp.error``."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.update(protocol_components())
    components["Error"] = kernel("error")
    return result


def openapi_document() -> dict[str, Any]:
    """The document ``GET /api/v0.1/schema/`` serves, built without a request
    (for tools and tests that read it at collection time, schemathesis say)."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import patched_settings

    with patched_settings(ProtocolSchemaView.custom_settings):
        generator = SchemaGenerator()  # type: ignore[no-untyped-call]  # drf-spectacular is untyped
        document: dict[str, Any] = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    return document


class ProtocolSchemaView(SpectacularAPIView):
    """The OpenAPI 3.1 document of the REST binding (YAML, or JSON with ``?format=json``)."""

    authentication_classes: list[Any] = []
    custom_settings = {
        "OAS_VERSION": "3.1.0",
        "TITLE": "MissionWeave Portal: the MWP 0.1 REST binding",
        "DESCRIPTION": (
            "The Group Authority of MissionWeaveProtocol 0.1 over HTTP (a project extension, DESIGN §5): "
            "the HELLO challenge, signed Commands in, signed Events out, the Registry's keys and the catalogue. "
            "Every refusal is the normative error document (mwp.error)."
        ),
        "VERSION": "0.1",
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "missions.api.openapi.embed_protocol_schemas",
        ],
    }
