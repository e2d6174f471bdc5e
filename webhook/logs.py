"""One JSON object per log line, and the admission record (DESIGN §7).

The admission record names the object and what Placer did; it never contains the object or the patch
values: container env values and annotations can hold secrets.
"""

import logging
import sys
import time
from typing import Any

from webhook.json_bytes import encode_json

ADMISSION_LOGGER = "placer.admission"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return encode_json(entry, default=str).decode()


def configure_logging(level: str) -> None:
    """Send every logger, gunicorn's included, to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
