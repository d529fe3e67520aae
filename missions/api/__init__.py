"""The REST binding of MWP 0.1 under ``/api/v0.1/`` (DESIGN §5), a project extension.

- ``sessions``: the HELLO challenge over HTTP (``sessions/challenge``, ``sessions``);
- ``commands``: a signed Command document in, its receipt out;
- ``groups``: a Group's signed Event documents after a sequence, and its snapshots;
- ``directory``: the Registry's key bindings, the caller's Memberships, the catalogue;
- ``openapi``: the OpenAPI 3.1 document, which embeds the kernel's and the
  catalogue's JSON Schemas under their ``$id``.

Every refusal is the normative error document (``missions/views.py``).
"""
