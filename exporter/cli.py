"""mirrorwatch-exporter: parse flags over MIRRORWATCH_* settings, then serve until told to stop.

The flags are generated from the Settings fields (settings.py), so a new setting is a new flag.

A bad flag, variable, scenario or listen address ends the process with exit code 2 and one
line that names it; nothing else is started by then.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import types
from typing import Any, Literal, Union, get_args, get_origin

import uvicorn
from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo

from mirrorwatch.contract.plain_errors import (
    Parser,
    UsageError,
    number,
    plain_message,
    usage_line,
    whole_number,
)
from mirrorwatch.contract.vocabulary import Address
from mirrorwatch.exporter import __version__
from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.collectors.registry import select_collectors
from mirrorwatch.exporter.factory import build_backend
from mirrorwatch.exporter.ingest.protocol import bounded_protocol
from mirrorwatch.exporter.logs import configure_logging, logging_config
from mirrorwatch.exporter.server import QuietServer
from mirrorwatch.exporter.settings import (
    ENV_PREFIX,
    Settings,
    flag,
    only_loopback,
    proxy_networks,
)
from mirrorwatch.exporter.web_config import ServedTls, WebConfig, WebConfigError, load_web_config

PROG = "mirrorwatch-exporter"
log = logging.getLogger("mirrorwatch.exporter")
_REFUSED = "refused_"  # where a secret given as a flag lands, to be refused


def _variable(name: str) -> str:
    return f"{ENV_PREFIX}{name.upper()}"


def _kinds(annotation: object) -> tuple[object, ...]:
    """The types a field takes, ``None`` left out: ``int | None`` -> ``(int,)``."""
    if isinstance(annotation, types.UnionType) or get_origin(annotation) is Union:
        return tuple(kind for kind in get_args(annotation) if kind is not type(None))
    return (annotation,)


def _is_secret(field: FieldInfo) -> bool:
    return SecretStr in _kinds(field.annotation)


def _argument(name: str, field: FieldInfo) -> dict[str, Any]:
    """add_argument's options for a settings field: type or choices, placeholder and help."""
    options: dict[str, Any] = {"dest": name}
    kind = _kinds(field.annotation)[0]
    if get_origin(kind) is Literal:
        options["choices"] = list(get_args(kind))
    elif kind is int:
        options["type"] = whole_number  # said before pydantic sees it
    elif kind is float:
        options["type"] = number
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "metavar" in extra:
        options["metavar"] = extra["metavar"]
    default = field.default
    shown = f"{default:g}" if isinstance(default, float) else default
    default_text = "" if default is None else f"default {shown}, "
    help_text = f"{field.description or name} ({default_text}${_variable(name)})"
    options["help"] = help_text.replace("%", "%%")  # argparse formats help with %
    return options


def build_parser() -> argparse.ArgumentParser:
    """A flag for each Settings field, its help from the field's description.

    A secret field's flag exists only to be refused (load_settings says why).
    """
    parser = Parser(
        prog=PROG,
        # No prefixes: `--ingest-token SECRET` must not pass as `--ingest-token-file`.
        allow_abbrev=False,
        description="Serve NVML GPU metrics (or a simulated host) for Prometheus. "
        f"Every flag can also be set as {ENV_PREFIX}<FLAG>, e.g. {_variable('listen')}.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    for name, field in Settings.model_fields.items():
        if _is_secret(field):
            # Refused with a hint, never echoed: a secret on the command line shows in `ps`.
            parser.add_argument(flag(name), dest=_REFUSED + name, help=argparse.SUPPRESS)
        else:
            parser.add_argument(flag(name), **_argument(name, field))
    parser.add_argument(
        "--list-scenarios",
        action="store_true",
        help="print the built-in scenarios, each with what it simulates, and exit",
    )
    return parser


def load_settings(args: argparse.Namespace) -> Settings:
    """Flags win over MIRRORWATCH_* variables, which win over defaults."""
    for name in Settings.model_fields:
        if getattr(args, _REFUSED + name, None) is not None:
            file_flag = f" or {flag(name)}-file" if f"{name}_file" in Settings.model_fields else ""
            raise UsageError(
                f"{flag(name)}: a token on the command line shows in `ps`; "
                f"set {_variable(name)}{file_flag} instead"
            )
    given = {
        name: value
        for name, value in vars(args).items()
        if value is not None and name in Settings.model_fields
    }

    def source(name: str) -> str:
        return flag(name) if name in given else _variable(name)

    try:
        settings = Settings(**given)
    except ValidationError as error:
        first = error.errors()[0]
        where = source(str(first["loc"][0])) if first["loc"] else "settings"
        raise UsageError(f"{where}: {plain_message(first)}") from None
    try:
        select_collectors(settings.collectors)
    except ValueError as error:
        raise UsageError(f"{source('collectors')}: {error}") from None
    if os.environ.get("FORWARDED_ALLOW_IPS") is not None:
        # uvicorn's own variable would otherwise look like it applies; it does not here.
        raise UsageError(
            f"FORWARDED_ALLOW_IPS: not read by {PROG}; set {flag('trusted_proxies')} "
            f"or {_variable('trusted_proxies')} instead"
        )
    if settings.ingest_token_value() is None and not only_loopback(
        proxy_networks(settings.trusted_proxies)
    ):
        raise UsageError(
            f"{source('trusted_proxies')}: with no ingest token the ingest API trusts loopback "
            "clients, so proxies beyond loopback must not name them; set "
            f"{_variable('ingest_token')} or {flag('ingest_token_file')}"
        )
    if settings.gpus is not None and settings.simulate is None:
        raise UsageError("--gpus: only applies with --simulate (real hosts report their own GPUs)")
    return settings


def bind(address: Address) -> socket.socket:
    """Bind the listening socket first, so a busy port is a clear exit 2, not a traceback."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every keep-alive response waits ~40 ms on Nagle and delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address.host, address.port))
    except OSError as error:
        sock.close()
        raise UsageError(f"--listen {address}: {error.strerror or error}") from None
    return sock


def load_web(settings: Settings, from_flag: bool) -> tuple[WebConfig | None, ServedTls | None]:
    """The --web-config-file and, when it says TLS, the server context with its certificates."""
    path = settings.web_config_file
    if path is None:
        return None, None
    try:
        web_config = load_web_config(path)
        served = ServedTls(path, web_config.tls) if web_config.tls is not None else None
    except WebConfigError as error:
        where = flag("web_config_file") if from_flag else _variable("web_config_file")
        raise UsageError(f"{where} {path}: {error}") from None
    return web_config, served


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The simulator is imported only when asked for: on a GPU host it would be ~3 MiB of RSS
    # (YAML, scenario models) for nothing.
    if args.list_scenarios:
        from mirrorwatch.exporter.simulate.listing import scenario_list

        print(scenario_list())
        return 0
    settings = load_settings(args)
    web_config, served_tls = load_web(settings, from_flag=args.web_config_file is not None)
    try:
        backend = build_backend(settings)
    except Exception as error:
        from mirrorwatch.exporter.simulate.scenario import ScenarioError

        if isinstance(error, ScenarioError):
            raise UsageError(str(error)) from None
        raise
    sock = bind(settings.listen_address)
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(settings, backend, web_config=web_config)
    config = uvicorn.Config(
        app,
        # httptools, bounded before the app: head size and time (ingest/protocol.py).
        http=bounded_protocol(
            settings.max_header_bytes, settings.header_timeout, app.state.rejections
        ),
        # The app applies X-Forwarded-For itself, from --trusted-proxies only (app.py).
        proxy_headers=False,
        log_config=logging_config(settings.log_level, settings.log_format),
        timeout_graceful_shutdown=5,
    )
    if served_tls is not None:
        config.load()
        config.ssl = served_tls.context  # asyncio wraps each new connection with it
        # Certificates again on SIGHUP (certbot's and cert-manager's renewals send it); run
        # between bytecodes on the main thread, the event loop's, so no handshake is mid-way.
        signal.signal(signal.SIGHUP, lambda signum, frame: served_tls.reload())
    scheme = "https" if served_tls is not None else "http"
    host, port = sock.getsockname()[:2]
    log.info(
        "%s %s serving %s://%s/ (backend %s)",
        PROG,
        __version__,
        scheme,
        Address(host, port),
        backend.kind,
        extra={"listen": str(Address(host, port)), "backend": backend.kind},
    )
    # What start-up made (imported modules, the app: ~90k objects) lives as long as the
    # process; frozen, the collector's full passes skip it. Unfrozen, each full pass while
    # pushes arrive scanned it all and stalled the scrape that triggered it (55-70 ms, every
    # few push rounds at the ingest limits; bench/limits_bench.py).
    gc.freeze()
    # No 10 Hz tick: idle, the exporter's event loop sleeps (server.py).
    # The TLS handshake gets the head's time bound: a client stalling in it is cut off alike.
    QuietServer(config, ssl_handshake_timeout=settings.header_timeout).run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(argv)
    except UsageError as error:
        print(usage_line(PROG, error), file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        # uvicorn shuts down cleanly on Ctrl-C, then raises the signal again (server.py,
        # capture_signals) so the default handler ends the process: for SIGINT that is this
        # KeyboardInterrupt, which is the normal way out, not an error to show a traceback for.
        code = 130
    sys.exit(code)
