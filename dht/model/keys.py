"""Keys are exact bytes: how they are read from a request's query and written into one.

A query parameter's value is the exact bytes its percent-decoding gives (`+` is a space,
as in every HTML form). An id that is valid UTF-8 text is its UTF-8 bytes, as before;
one that is not (`%FF`) is still its own key, never folded into another (`%FE`,
`%EF%BF%BD`). Pure functions: no request object, no I/O.
"""

from __future__ import annotations

from urllib.parse import quote_from_bytes, unquote_to_bytes


def query_params(raw_query: str) -> dict[str, bytes]:
    """Parameter name -> exact value bytes; the first of repeated names wins."""
    params: dict[str, bytes] = {}
    if not raw_query:
        return params
    for pair in raw_query.split("&"):
        name, _, value = pair.partition("=")
        if "%" in name or "+" in name:
            name = unquote_to_bytes(name.replace("+", " ")).decode("utf-8", "replace")
        if name not in params:
            params[name] = _decoded(value)
    return params


def _decoded(value: str) -> bytes:
    if "%" in value or "+" in value:
        return unquote_to_bytes(value.replace("+", " "))
    return value.encode()


def query_value(key: bytes) -> str:
    """`key` percent-encoded for a query: what `query_params` reads back as `key`."""
    return quote_from_bytes(key, safe="")
