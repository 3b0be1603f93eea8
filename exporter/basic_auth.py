"""Basic auth from the web config's basic_auth_users, on every endpoint but ingest PUT/DELETE.

As exporter-toolkit's handler does (web/handler.go): the user name is compared in constant
time, an unknown user still pays one bcrypt round against a fixed hash (its timing says
nothing), each outcome is cached by user, hash and password so a scrape does not pay a bcrypt
round each time (a changed hash is a new key), and bcrypt runs one check at a time, here off
the event loop. The file is looked at on each request (one ``stat``) and read again when it
changed, so a changed password applies without a restart; a file that no longer reads keeps
the users it last had, and says why once in the log.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import json
import logging
import os
import threading
from pathlib import Path

import bcrypt
from starlette.types import ASGIApp, Receive, Scope, Send

from mirrorwatch.exporter.ingest.guard import is_ingest_path
from mirrorwatch.exporter.web_config import WebConfigError, load_web_config

log = logging.getLogger(__name__)
CACHE_ENTRIES = 100  # the toolkit's cache size: (user, hash, password) outcomes kept


@functools.cache
def _dummy_hash() -> bytes:
    """Checked against when the user is unknown, so that answer takes a bcrypt round too.

    Made on first use: a bcrypt round at import would slow every start, with or without auth.
    """
    return bcrypt.hashpw(b"mirrorwatch", bcrypt.gensalt(10))


_BEARER_PATHS_METHODS = ("PUT", "DELETE")  # the ingest API's own token guards these


class BasicAuthUsers:
    """The users and their bcrypt hashes, and the outcomes already computed."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._cache: dict[bytes, bool] = {}
        self._bcrypt = threading.Lock()

    def cached(self, user: str, password: str) -> bool | None:
        """The outcome for these credentials if known, without a bcrypt round."""
        return self._cache.get(self._key(user, password))

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s; one bcrypt round when not cached (blocks)."""
        key = self._key(user, password)
        known = self._cache.get(key)
        if known is not None:
            return known
        hashed = self._hash_of(user)
        with self._bcrypt:  # also keeps the cache whole: checks run in several threads
            matches = bcrypt.checkpw(password.encode(), hashed or _dummy_hash())
            outcome = hashed is not None and matches
            if len(self._cache) >= CACHE_ENTRIES:
                # The oldest goes: a flood of guesses rotates out, the scraper's entry returns.
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = outcome
        return outcome

    def _hash_of(self, user: str) -> bytes | None:
        found = None
        given = user.encode()
        for name, hashed in self.users.items():  # every name compared, in constant time each
            if hmac.compare_digest(name.encode(), given):
                found = hashed
        return found

    def _key(self, user: str, password: str) -> bytes:
        # A digest, so the cache never holds a password; the hash in it makes a changed
        # password a new key.
        hashed = self._hash_of(user) or b""
        parts = (user.encode(), hashed, password.encode())
        return hashlib.sha256(b"\0".join(part.hex().encode() for part in parts)).digest()


class WatchedUsers:
    """basic_auth_users of the web config file, read again when the file changes."""

    def __init__(self, path: Path, users: dict[str, bytes]) -> None:
        self.path = path
        self._users = BasicAuthUsers(users)
        self._seen = self._signature()
        self._lock = threading.Lock()

    def _signature(self) -> tuple[int, int, int, int] | None:
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)

    def current(self) -> BasicAuthUsers:
        signature = self._signature()
        if signature == self._seen:
            return self._users
        with self._lock:
            if signature != self._seen:
                self._seen = signature
                self._reload()
        return self._users

    def _reload(self) -> None:
        try:
            users = load_web_config(self.path).users
        except WebConfigError as error:
            log.error("web config not reloaded, the users before it still apply: %s", error)
            return
        if users != self._users.users:
            self._users = BasicAuthUsers(users)
            log.info("web config reloaded: %d basic auth users", len(users))


def _credentials(scope: Scope) -> tuple[str, str] | None:
    given = [value for name, value in scope["headers"] if name == b"authorization"]
    if len(given) != 1:
        return None
    scheme, _, encoded = given[0].strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


class BasicAuthGuard:
    """ASGI middleware: a 401 with a Basic challenge unless the request's credentials match."""

    def __init__(self, app: ASGIApp, users: WatchedUsers) -> None:
        self.app = app
        self.users = users

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            scope["method"] in _BEARER_PATHS_METHODS and is_ingest_path(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        users = self.users.current()
        if not users.users:  # no basic_auth_users: no basic auth (as the toolkit)
            await self.app(scope, receive, send)
            return
        credentials = _credentials(scope)
        allowed = False
        if credentials is not None:
            known = users.cached(*credentials)
            # bcrypt takes tens of milliseconds: in a thread, not on the event loop.
            allowed = await asyncio.to_thread(users.check, *credentials) if known is None else known
        if allowed:
            await self.app(scope, receive, send)
            return
        await _unauthorized(send, "missing" if credentials is None else "wrong")


async def _unauthorized(send: Send, what: str) -> None:
    body = json.dumps(
        {"error": f"header.authorization: {what} user or password; send Basic credentials"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Basic realm="mirrorwatch", charset="UTF-8"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
