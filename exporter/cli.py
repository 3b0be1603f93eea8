"""mirrorwatch-exporter: parse flags over MIRRORWATCH_* settings, then serve until told to stop.

A bad flag, variable, scenario or listen address ends the process with exit code 2 and one
line that names it; nothing else is started by then.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import NoReturn

import uvicorn
from pydantic import ValidationError

from mirrorwatch.exporter import __version__
from mirrorwatch.exporter.app import create_app
from mirrorwatch.exporter.factory import build_backend
from mirrorwatch.exporter.logs import configure_logging, logging_config
from mirrorwatch.exporter.settings import Settings, parse_listen
from mirrorwatch.exporter.simulate.scenario import ScenarioError, builtin_scenarios

PROG = "mirrorwatch-exporter"


class UsageError(Exception):
    """A bad flag, variable or file: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        # No prefixes: `--ingest-token SECRET` must not pass as `--ingest-token-file`.
        allow_abbrev=False,
        description="Serve NVML GPU metrics (or a simulated host) for Prometheus. "
        "Every flag can also be set as MIRRORWATCH_<FLAG>, e.g. MIRRORWATCH_LISTEN.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--listen", metavar="HOST:PORT", help="default 0.0.0.0:9848")
    parser.add_argument(
        "--simulate", metavar="SCENARIO", help="built-in scenario name or a scenario YAML file"
    )
    parser.add_argument("--gpus", type=int, metavar="N", help="simulated GPU count, 1..64")
    parser.add_argument(
        "--expected-gpus", type=int, metavar="N", help="GPUs this host should have (GpuMissing)"
    )
    parser.add_argument(
        "--collectors", metavar="LIST", help="comma-separated collectors to run (default all)"
    )
    parser.add_argument(
        "--nvml-retry-max-seconds", type=float, metavar="S", help="longest NVML retry wait"
    )
    parser.add_argument(
        "--ingest-token-file",
        metavar="PATH",
        help="file holding the ingest bearer token (or MIRRORWATCH_INGEST_TOKEN; "
        "without either, only loopback clients may push)",
    )
    # Refused with a hint, never echoed: a token on the command line shows in `ps`.
    parser.add_argument("--ingest-token", dest="ingest_token_flag", help=argparse.SUPPRESS)
    parser.add_argument(
        "--run-ttl", type=float, metavar="S", help="seconds until a silent worker is inactive"
    )
    parser.add_argument("--max-runs", type=int, metavar="N", help="training runs tracked at most")
    parser.add_argument("--max-workers", type=int, metavar="N", help="workers tracked at most")
    parser.add_argument("--max-replicas", type=int, metavar="N", help="replicas per worker at most")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["json", "text"])
    parser.add_argument(
        "--list-scenarios", action="store_true", help="print the built-in scenarios and exit"
    )
    return parser


def load_settings(args: argparse.Namespace) -> Settings:
    """Flags win over MIRRORWATCH_* variables, which win over defaults."""
    if getattr(args, "ingest_token_flag", None) is not None:
        raise UsageError(
            "--ingest-token: a token on the command line shows in `ps`; "
            "set MIRRORWATCH_INGEST_TOKEN or --ingest-token-file instead"
        )
    given = {
        name: value
        for name, value in vars(args).items()
        if value is not None and name in Settings.model_fields
    }
    try:
        settings = Settings(**given)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "settings"
        where = "--" + field.replace("_", "-") if field in given else f"MIRRORWATCH_{field.upper()}"
        raise UsageError(f"{where}: {first['msg']}") from None
    if settings.gpus is not None and settings.simulate is None:
        raise UsageError("--gpus: only applies with --simulate (real hosts report their own GPUs)")
    return settings


def bind(listen: str) -> socket.socket:
    """Bind the listening socket first, so a busy port is a clear exit 2, not a traceback."""
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every keep-alive response waits ~40 ms on Nagle and delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise UsageError(f"--listen {listen}: {error.strerror or error}") from None
    return sock


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_scenarios:
        print("\n".join(builtin_scenarios()))
        return 0
    settings = load_settings(args)
    try:
        backend = build_backend(settings)
    except ScenarioError as error:
        raise UsageError(str(error)) from None
    sock = bind(settings.listen)
    configure_logging(settings.log_level, settings.log_format)
    config = uvicorn.Config(
        create_app(settings, backend),
        log_config=logging_config(settings.log_level, settings.log_format),
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(argv)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        code = 2
    sys.exit(code)
