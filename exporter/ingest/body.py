"""What a snapshot body must be before the schema sees it: UTF-8 JSON of bounded shape.

Checked on the raw bytes, before a single Python object is built for them: no byte order mark,
no NUL (``json.loads`` on bytes would take that as UTF-16 or UTF-32), strict UTF-8, nesting no
deeper than a snapshot's, no string longer than any field allows and no more values than a
snapshot with the replica limit has. Each count is a C-speed scan (``bytes.count``, one
bounded ``re`` pass), so a heavy body costs its size once, never a parse. Only then is it parsed,
and an object with a key given twice is refused instead of keeping the last one silently.
"""

from __future__ import annotations

import codecs
import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from mirrorwatch.exporter.ingest.errors import IngestError

_OPENERS = frozenset(b"[{")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_PLAIN_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


@functools.lru_cache(maxsize=8)
def _tokens(max_string_bytes: int) -> re.Pattern[bytes]:
    """A string of at most ``max_string_bytes`` (escapes included), a bracket, or a lone quote.

    Scanned left to right, so brackets inside strings are never taken for structure. The bound
    keeps each try short: a longer string (or one never closed) shows as a lone quote.
    """
    string = rb'"(?:[^"\\]|\\.){0,%d}+"' % max_string_bytes
    return re.compile(string + rb'|[\[\]{}]|"', re.DOTALL)


@dataclass(frozen=True)
class BodyLimits:
    """Bounds on one body's shape, a few times what a real snapshot uses."""

    max_values: int  # follows the replica limit: for_replicas
    max_depth: int = 8  # a snapshot nests 3 deep: {replica_devices: [{...}]}
    max_string_bytes: int = 1024  # the longest field (a device name) is 256 characters

    @classmethod
    def for_replicas(cls, max_replicas: int) -> BodyLimits:
        """Room for twice ``max_replicas`` replicas, so the replica limit answers its own 429:
        25 fields, 14 buckets, and 8 keys and values a replica."""
        return cls(max_values=256 + 32 * max_replicas)


def check_and_parse(body: bytes, limits: BodyLimits) -> Any:
    """The parsed JSON of ``body``, or the IngestError (400, 413, 422) saying what is wrong."""
    _check_encoding(body)
    _check_shape(body, limits)
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_unique_keys)
    except _DuplicateKeyError:
        field = _duplicate_field(body)
        raise IngestError(
            422,
            "invalid",
            f"{field}: given twice in one object; send each key once",
            field,
        ) from None
    except json.JSONDecodeError as error:
        raise IngestError(
            400, "malformed_json", f"body: not valid JSON ({error.msg})", "body"
        ) from None
    except (ValueError, RecursionError):  # a number longer than int() takes
        raise IngestError(
            400, "malformed_json", "body: could not be parsed as JSON (a number too long)", "body"
        ) from None


def _check_encoding(body: bytes) -> None:
    if body.startswith(codecs.BOM_UTF8):
        raise _not_utf8("starts with a byte order mark; send UTF-8 without one")
    if b"\x00" in body:  # never in JSON text; UTF-16 and UTF-32 are full of them
        raise _not_utf8("holds NUL bytes (UTF-16 or UTF-32?); send UTF-8")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _not_utf8(f"not UTF-8 at byte {error.start}") from None


def _not_utf8(why: str) -> IngestError:
    return IngestError(400, "malformed_json", f"body: {why}", "body")


def _check_shape(body: bytes, limits: BodyLimits) -> None:
    # At least one comma between any two values: a C-speed count bounds arrays of numbers.
    if body.count(b",") + 1 > limits.max_values:
        raise _too_heavy(f"over {limits.max_values} values")
    openers = body.count(b"[") + body.count(b"{")
    if openers <= limits.max_depth and len(body) <= limits.max_string_bytes:
        return  # the usual push: too few brackets to nest too deep, too short for a long string
    if b"\\" in body:
        _scan(body, limits)  # escapes: only a real scan knows where strings end
        return
    # No escapes: a string is exactly the bytes between two quotes, so C-speed splits decide.
    if max(map(len, body.split(b'"'))) > limits.max_string_bytes:
        _scan(body, limits)  # a long string, or long stretches outside strings: look closely
        return
    brackets = _PLAIN_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in brackets[: 2 * limits.max_values + 1]:
        depth += 1 if byte in _OPENERS else -1
        if depth > limits.max_depth:
            raise _too_deep(limits)
    if len(brackets) > 2 * limits.max_values:
        raise _too_heavy(f"over {limits.max_values} values")


def _scan(body: bytes, limits: BodyLimits) -> None:
    """String by string and bracket by bracket, stopping at the first limit crossed."""
    depth = 0
    scan = _tokens(limits.max_string_bytes).finditer(body)
    for tokens, token in enumerate(scan, start=1):  # bounded: stops past 2 * max_values
        text = token.group()
        first = text[0]
        if tokens > 2 * limits.max_values:
            raise _too_heavy(f"over {limits.max_values} values")
        if text == b'"':  # too long, or never closed: look once, then stop
            if _STRING.match(body, token.start()):
                raise _too_heavy(f"a string over {limits.max_string_bytes} bytes")
            raise IngestError(
                400, "malformed_json", "body: not valid JSON (a string never closed)", "body"
            )
        if first in _OPENERS:
            depth += 1
            if depth > limits.max_depth:
                raise _too_deep(limits)
        elif first != ord('"'):
            depth -= 1


def _too_deep(limits: BodyLimits) -> IngestError:
    return IngestError(
        400, "malformed_json", f"body: nested deeper than {limits.max_depth} levels", "body"
    )


def _too_heavy(what: str) -> IngestError:
    return IngestError(413, "too_large", f"body: {what}; a snapshot is far smaller", "body")


class _DuplicateKeyError(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKeyError
    return result


class _Marked(dict[str, Any]):
    duplicate: str | None = None


def _marking_keys(pairs: list[tuple[str, Any]]) -> _Marked:
    result = _Marked()
    for key, value in pairs:
        if key in result and result.duplicate is None:
            result.duplicate = key
        result[key] = value
    return result


def _duplicate_field(body: bytes) -> str:
    """``body.replica_devices[1].uuid``: where the first key given twice is (a rare, slow path)."""
    document = json.loads(body.decode("utf-8"), object_pairs_hook=_marking_keys)
    return _find_duplicate(document, "body") or "body"


def _find_duplicate(node: Any, where: str) -> str | None:
    if isinstance(node, _Marked):
        if node.duplicate is not None:
            return f"{where}.{node.duplicate}"
        children = [(f"{where}.{key}", value) for key, value in node.items()]
    elif isinstance(node, list):
        children = [(f"{where}[{index}]", value) for index, value in enumerate(node)]
    else:
        return None
    for child_where, child in children:
        found = _find_duplicate(child, child_where)
        if found is not None:
            return found
    return None
