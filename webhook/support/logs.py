"""One JSON object per log line, and the admission record.

The admission record names the object and what Placer did; it never contains the object or the patch
values: container env values and annotations can hold secrets.
"""

import io
import logging
import sys
import time
from typing import Any

import orjson

from webhook.support.json_bytes import encode_json

ADMISSION_LOGGER = "placer.admission"
_ENTRY_KEYS = frozenset({"time", "level", "logger", "message"})


_MILLISECONDS = tuple(f".{millisecond:03d}Z" for millisecond in range(1000))
"""The end of a time, by its millisecond: formatting `:03d` per line cost as much as the rest of the time."""


class Timestamps:
    """RFC 3339 UTC times with milliseconds; the part up to the second is formatted once a second
    (`strftime` costs a few µs, a tenth of an admission's whole log line)."""

    __slots__ = ("_cached",)

    def __init__(self) -> None:
        self._cached = (-1, "")
        """(second, its text), one attribute: threads asking at once never pair one second with another's text."""

    def __call__(self, created: float) -> str:
        second = int(created)
        cached_second, text = self._cached
        if second != cached_second:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._cached = (second, text)
        millisecond = int((created - second) * 1000)
        if 0 <= millisecond < 1000:  # any time since 1970
            return text + _MILLISECONDS[millisecond]
        return f"{text}.{millisecond:03d}Z"


def json_entry(time_text: str, level: str, logger: str, message: str, fields: dict[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"time": time_text, "level": level, "logger": logger, "message": message}
    if fields:
        entry.update(fields)
    return entry


def _line(entry: dict[str, Any]) -> str:
    return encode_json(entry, default=str).decode()


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self.timestamps = Timestamps()

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        entry = json_entry(self.timestamps(record.created), record.levelname.lower(), record.name, record.getMessage(),
                           fields if isinstance(fields, dict) else None)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _line(entry)


class JsonLineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream of JSON lines that also takes lines already formatted (`AdmissionLog`)."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())

    def write_line(self, line: str) -> None:
        with self.lock:  # type: ignore[union-attr]
            try:
                stream = self.stream
                terminator = self.terminator
                stream.write(line + terminator)
                if not (type(stream) is io.TextIOWrapper and stream.line_buffering and "\n" in terminator):
                    # not `self.flush()`, which takes the lock held here again (5 % of a cached review); not at
                    # all where the write flushed already: a line-buffered text stream (stderr, since Python
                    # 3.9) flushes each write holding a newline (`TextIOWrapper`, `line_buffering`)
                    stream.flush()
            except Exception:
                self.handleError(logging.makeLogRecord({"msg": line}))


class AdmissionLog:
    """The line written for every admission, at a fraction of the logging module's cost per record.

    `logger.info` builds a LogRecord, looks up its caller, takes the handler's lock and formats it: about
    40 µs, as much as a 2-rule admission's rules. When every handler the admission logger reaches writes
    JSON lines (as `configure_logging` sets up), the line is formatted once and written to them directly;
    with any other handler, filter or formatter (a test's, an embedding application's) it goes through
    `logger.info` as before. Levels are honoured either way.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(ADMISSION_LOGGER)
        self.timestamps = Timestamps()
        self._middles: dict[tuple[str, str], str] = {}
        """What follows the time in a line of this logger and message, up to the fields (see `_encode`)."""

    def info(self, message: str, fields: dict[str, Any]) -> None:
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        handlers = _json_line_handlers(logger)
        if handlers is None:
            logger.info(message, extra={"fields": fields})
            return
        line = self._encode(self.timestamps(time.time()), logger.name, message, fields)
        for handler in handlers:
            handler.write_line(line)

    def _encode(self, time_text: str, logger: str, message: str, fields: dict[str, Any]) -> str:
        """`_line(json_entry(...))`, the same text: the entry's first four members are the same in every line
        of one logger and message but for the time, so they are encoded once and only the time and the fields
        are encoded per line. Any fields that would not simply follow them (none, one named as a member, one
        orjson refuses) make the whole entry as before."""
        if fields and _ENTRY_KEYS.isdisjoint(fields):
            try:
                encoded = orjson.dumps(fields, default=str)
                middle = self._middles.get((logger, message))
                if middle is None:
                    middle = self._middles[(logger, message)] = orjson.dumps(
                        {"level": "info", "logger": logger, "message": message})[1:-1].decode()
            except (orjson.JSONEncodeError, TypeError):
                pass
            else:
                return f'{{"time":"{time_text}",{middle},{encoded[1:].decode()}'
        return _line(json_entry(time_text, "info", logger, message, fields))


def _json_line_handlers(logger: logging.Logger) -> list[JsonLineHandler] | None:
    """The handlers a record of `logger` at INFO reaches, when all of them are plain JSON line writers."""
    handlers: list[JsonLineHandler] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if (type(handler) is not JsonLineHandler or handler.filters or handler.level > logging.INFO
                    or type(handler.formatter) is not JsonFormatter):
                return None
            handlers.append(handler)
        if not current.propagate:
            break
        current = current.parent
    return handlers


def configure_logging(level: str) -> None:
    """Send every logger, granian's included, to stderr as JSON lines."""
    root = logging.getLogger()
    root.handlers[:] = [JsonLineHandler(sys.stderr)]
    root.setLevel(level.upper())
