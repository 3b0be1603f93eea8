"""The --web-config-file: Prometheus exporter-toolkit's web configuration, read and checked.

The format is the one node_exporter and dcgm-exporter read (exporter-toolkit,
docs/web-configuration.md), so one file and ``promtool check web-config`` serve them all.
Relative paths are relative to the file's folder, as the toolkit resolves them. Keys the
toolkit knows but Python's ``ssl`` cannot honour (Go's cipher suite and curve names, HTTP/2,
response headers, client certificates accepted unverified) are refused with their names,
never silently ignored; keys the toolkit does not know are refused as it refuses them.
"""

from __future__ import annotations

import logging
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Go's tls.ClientAuthType names (exporter-toolkit's tls_config.go) and Python's verify mode.
# RequestClientCert and RequireAnyClientCert accept a certificate nobody verified; Python's
# ssl always verifies a certificate it asks for, so those two are refused.
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"}
_TLS_KEYS |= {"max_version", "prefer_server_cipher_suites"}
# The toolkit's keys this exporter cannot honour in Python, each named when refused.
_UNSUPPORTED = {
    "tls_server_config": {"cert", "key", "client_allowed_sans", "cipher_suites"}
    | {"curve_preferences"},
    "http_server_config": {"http2", "headers"},
    "": {"rate_limit"},
}
_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
# bcrypt's modular crypt format: $2a$, $2b$ or $2y$, a two-digit cost, 22 + 31 characters.
_BCRYPT = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")


class WebConfigError(ValueError):
    """The web config file cannot be used; the message names the key or file and why."""


@dataclass(frozen=True)
class TlsSettings:
    """tls_server_config, with every path absolute."""

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    prefer_server_cipher_suites: bool = True


@dataclass(frozen=True)
class WebConfig:
    """What a web config file says: TLS (None: plain HTTP) and the basic auth users."""

    path: Path
    tls: TlsSettings | None = None
    users: dict[str, bytes] = field(default_factory=dict)


def load_web_config(path: Path) -> WebConfig:
    """The checked contents of ``path``; WebConfigError saying what is wrong.

    Only the file's own shape is checked here; the certificates are read by ``tls_context``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise WebConfigError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"{path} is not UTF-8 text") from None
    # Imported here: an exporter without --web-config-file never loads PyYAML (0.9 MiB of RSS,
    # bench/rss_bench.py).
    import yaml

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise WebConfigError(f"{path} is not valid YAML{where}") from None
    if document is None:
        return WebConfig(path.absolute())  # an empty file: plain HTTP, no auth (as the toolkit)
    top = _mapping(document, "the file")
    _refuse_keys(top, _TOP_KEYS, "")
    tls_section = _mapping(top.get("tls_server_config") or {}, "tls_server_config")
    http_section = _mapping(top.get("http_server_config") or {}, "http_server_config")
    _refuse_keys(tls_section, _TLS_KEYS | _UNSUPPORTED["tls_server_config"], "tls_server_config.")
    _refuse_keys(http_section, _UNSUPPORTED["http_server_config"], "http_server_config.")
    unsupported = [key for key in sorted(top) if key in _UNSUPPORTED[""]]
    unsupported += [
        f"{section}.{key}"
        for section, keys in (
            ("tls_server_config", tls_section),
            ("http_server_config", http_section),
        )
        for key in sorted(keys)
        if key in _UNSUPPORTED[section]
    ]
    if unsupported:
        raise WebConfigError(
            f"not supported by mirrorwatch-exporter: {', '.join(unsupported)} "
            "(Python's ssl cannot honour them; remove them)"
        )
    folder = path.absolute().parent
    tls = _tls_settings(tls_section, folder) if tls_section else None
    return WebConfig(path.absolute(), tls, _users(top.get("basic_auth_users") or {}))


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise WebConfigError(f"{where}: expected a mapping of names to values")
    return value


def _refuse_keys(section: dict[str, Any], known: set[str], prefix: str) -> None:
    unknown = sorted(key for key in section if key not in known)
    if unknown:
        names = ", ".join(prefix + key for key in unknown)
        raise WebConfigError(f"unknown key {names} (not in the exporter-toolkit's format)")


def _text(section: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = section.get(key, default)
    if value is not None and not isinstance(value, str):
        raise WebConfigError(f"tls_server_config.{key}: expected text, got {value!r}")
    return value or default


def _tls_settings(section: dict[str, Any], folder: Path) -> TlsSettings:
    cert, key = _text(section, "cert_file"), _text(section, "key_file")
    if not cert or not key:
        missing = "cert_file" if not cert else "key_file"
        raise WebConfigError(f"tls_server_config.{missing}: missing (both files are needed)")
    client_auth = _text(section, "client_auth_type", "NoClientCert") or "NoClientCert"
    if client_auth in _UNVERIFIED_CLIENT_AUTH:
        raise WebConfigError(
            f"tls_server_config.client_auth_type: {client_auth} is not supported by "
            "mirrorwatch-exporter (Python's ssl verifies every client certificate it asks "
            "for); use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        )
    if client_auth not in CLIENT_AUTH:
        raise WebConfigError(
            f"tls_server_config.client_auth_type: expected one of {', '.join(CLIENT_AUTH)}, "
            f"got {client_auth!r}"
        )
    ca = _text(section, "client_ca_file")
    if ca and client_auth == "NoClientCert":
        # The toolkit's own refusal: a CA file that would never be used is a mistake.
        raise WebConfigError(
            "tls_server_config.client_ca_file: set, but client_auth_type is NoClientCert"
        )
    if not ca and client_auth != "NoClientCert":
        raise WebConfigError(
            f"tls_server_config.client_ca_file: needed to verify clients ({client_auth})"
        )
    versions = []
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        version = _text(section, name, default) or default
        if version not in TLS_VERSIONS:
            raise WebConfigError(
                f"tls_server_config.{name}: expected one of {', '.join(TLS_VERSIONS)}, "
                f"got {version!r}"
            )
        versions.append(version)
    if TLS_VERSIONS[versions[0]] > TLS_VERSIONS[versions[1]]:
        raise WebConfigError(
            f"tls_server_config.min_version: {versions[0]} is above max_version {versions[1]}"
        )
    prefer = section.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError("tls_server_config.prefer_server_cipher_suites: expected true/false")
    return TlsSettings(
        cert_file=folder / cert,
        key_file=folder / key,
        client_auth_type=client_auth,
        client_ca_file=folder / ca if ca else None,
        min_version=versions[0],
        max_version=versions[1],
        prefer_server_cipher_suites=prefer,
    )


def _users(value: object) -> dict[str, bytes]:
    users = _mapping(value, "basic_auth_users")
    checked = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT.match(hashed):
            raise WebConfigError(
                f"basic_auth_users.{user}: expected a bcrypt hash ($2y$10$... as htpasswd -B "
                "or Python's bcrypt writes it)"
            )
        checked[user] = hashed.encode("ascii")
    return checked


def tls_context(tls: TlsSettings) -> ssl.SSLContext:
    """A server context with the certificates read; WebConfigError naming a bad file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # HTTP/1.1 only: the exporter serves no HTTP/2 (Prometheus negotiates http/1.1 too).
    context.set_alpn_protocols(["http/1.1"])
    apply_tls(context, tls)
    return context


def apply_tls(context: ssl.SSLContext, tls: TlsSettings) -> None:
    """Reads ``tls``'s files into ``context``; new connections see them, open ones keep theirs.

    Client CAs are added to those already loaded (Python's ssl cannot remove one).
    """
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except FileNotFoundError as error:
        raise WebConfigError(
            f"tls_server_config: cannot read {error.filename or tls.cert_file}: no such file"
        ) from None
    except (OSError, ssl.SSLError) as error:
        raise WebConfigError(
            f"tls_server_config: {tls.cert_file} and {tls.key_file} are not a PEM certificate "
            f"and its key ({getattr(error, 'reason', None) or error})"
        ) from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except FileNotFoundError:
            raise WebConfigError(
                f"tls_server_config.client_ca_file: cannot read {tls.client_ca_file}"
            ) from None
        except (OSError, ssl.SSLError) as error:
            raise WebConfigError(
                f"tls_server_config.client_ca_file: {tls.client_ca_file} holds no PEM "
                f"certificate ({getattr(error, 'reason', None) or error})"
            ) from None
    context.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version]
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE


class ServedTls:
    """The live server context and the file it came from; ``reload`` is for SIGHUP."""

    def __init__(self, path: Path, tls: TlsSettings) -> None:
        self.path = path
        self.context = tls_context(tls)

    def reload(self) -> bool:
        """Reads the file and its certificates again; on any error the old ones keep serving."""
        try:
            config = load_web_config(self.path)
            if config.tls is None:
                raise WebConfigError("tls_server_config: gone; serving plain HTTP takes a restart")
            tls_context(config.tls)  # every file read once before the live context changes
            apply_tls(self.context, config.tls)
        except WebConfigError as error:
            log.error("certificates not reloaded, the ones before still serve: %s", error)
            return False
        log.info("certificates reloaded from %s", config.tls.cert_file)
        return True
