"""Structured logging: one JSON object a line (or plain text), for the exporter and uvicorn."""

from __future__ import annotations

import json
import logging
import logging.config
from typing import Any

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
