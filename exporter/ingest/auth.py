"""Who may push: a bearer token when one is configured, else loopback clients only."""

from __future__ import annotations

import hmac
import ipaddress

from starlette.types import Scope

from mirrorwatch.exporter.ingest.errors import IngestError


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8 and ::1 (also IPv4-mapped); a name or no address is not."""
    if host is None:
        return False
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class IngestAuth:
    """Checks one request's credentials; ``token`` None means loopback clients only."""

    def __init__(self, token: str | None) -> None:
        self._expected = token.encode() if token else None

    @property
    def loopback_only(self) -> bool:
        return self._expected is None

    def check(self, scope: Scope) -> IngestError | None:
        """None when the request may go on, else the 401 or 403 to answer with."""
        if self._expected is None:
            client = scope.get("client")
            if is_loopback(client[0] if client else None):
                return None
            return IngestError(
                403,
                "forbidden",
                "no ingest token is configured, so the ingest API answers loopback clients "
                "only; set MIRRORWATCH_INGEST_TOKEN or --ingest-token-file on the exporter",
            )
        given = [value for name, value in scope["headers"] if name == b"authorization"]
        if not given:
            return IngestError(
                401,
                "unauthorized",
                "header.authorization: missing; send 'Bearer <token>'",
                "header.authorization",
            )
        scheme, _, credentials = given[0].strip().partition(b" ")
        if len(given) != 1 or scheme.lower() != b"bearer":
            return IngestError(
                401,
                "unauthorized",
                "header.authorization: expected 'Bearer <token>'",
                "header.authorization",
            )
        # compare_digest takes time independent of where the bytes differ.
        if not hmac.compare_digest(credentials.strip(), self._expected):
            return IngestError(
                401,
                "unauthorized",
                "header.authorization: the bearer token is wrong",
                "header.authorization",
            )
        return None
