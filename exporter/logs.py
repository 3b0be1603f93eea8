"""Structured logging: one JSON object a line (or plain text), for the exporter and uvicorn."""

from __future__ import annotations

import json
import logging
import logging.config
import threading
import time
from collections.abc import Callable
from typing import Any

from mirrorwatch.exporter.settings import flag

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_STANDARD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured copy of msg
}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object with its `extra=` fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def logging_config(level: str, fmt: str) -> dict[str, Any]:
    """A dictConfig for our loggers and uvicorn's, so every line has one shape."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "mirrorwatch": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            # One line per scrape is noise on a host scraped every few seconds.
            "uvicorn.access": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        },
    }


def configure_logging(level: str, fmt: str) -> None:
    logging.config.dictConfig(logging_config(level, fmt))


class RejectionLog:
    """Logs refused requests without letting a client flood the log.

    The first refusal of each reason is logged at once; later ones within ``interval`` seconds
    are only counted, and the next line after the interval says how many there were. An
    unauthenticated client can therefore cost at most one line per reason per interval.
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def refused(
        self, reason: str, status: int, client: str | None, limit: str | None = None
    ) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(reason)
            if last is not None and now - last < self._interval:
                self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
                return
            self._last[reason] = now
            suppressed = self._suppressed.pop(reason, 0)
        self._logger.warning(
            # A 429 names the limit (as its flag), so an operator can tell which one to raise.
            "ingest request refused: %s (%d%s) from %s; %d more like it in the last %.0f s",
            reason,
            status,
            f", {flag(limit)}" if limit else "",
            client or "unknown",
            suppressed,
            self._interval,
            extra={
                "reason": reason,
                "status": status,
                "client": client,
                "suppressed": suppressed,
                "limit": limit,
            },
        )
