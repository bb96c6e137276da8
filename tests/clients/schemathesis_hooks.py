"""Hooks for the schemathesis run against `vidq dev` (tests/it/openapi.rs).

tus sends its bytes as `application/offset+octet-stream`: raw bytes, serialized like
`application/octet-stream`.
"""

import schemathesis

schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")
