"""The admission line: one JSON object per admission, written directly to JSON line handlers and through
the logging module for any other handler, with the same content and levels either way."""

import io
import json
import logging
from pathlib import Path

import pytest

from webhook.support.logs import AdmissionLog, JsonFormatter, JsonLineHandler, Timestamps

FIELDS = {"uid": "u-1", "kind": "Pod", "applied": ["p/r"], "dryRun": True, "durationMs": 0.412}


@pytest.fixture
def logger() -> logging.Logger:
    """A logger of its own, not propagating to the test runner's handlers."""
    logger = logging.Logger("placer.admission.test")
    logger.setLevel(logging.INFO)
    return logger


def test_a_json_line_handler_gets_the_line_the_formatter_would_write(logger: logging.Logger) -> None:
    stream = io.StringIO()
    logger.addHandler(JsonLineHandler(stream))

    AdmissionLog(logger).info("admission", FIELDS)

    line = stream.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    entry = json.loads(line)
    assert entry.pop("time").endswith("Z")
    assert entry == {"level": "info", "logger": logger.name, "message": "admission", **FIELDS}


def test_any_other_handler_receives_a_log_record_with_the_fields(logger: logging.Logger) -> None:
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Collect())
    AdmissionLog(logger).info("admission", FIELDS)

    assert [record.getMessage() for record in records] == ["admission"]
    assert records[0].fields == FIELDS  # type: ignore[attr-defined]


def test_a_filter_on_the_handler_is_honoured(logger: logging.Logger) -> None:
    stream = io.StringIO()
    handler = JsonLineHandler(stream)
    handler.addFilter(lambda record: False)
    logger.addHandler(handler)

    AdmissionLog(logger).info("admission", FIELDS)

    assert stream.getvalue() == ""


def test_nothing_is_written_below_the_logger_level(logger: logging.Logger) -> None:
    stream = io.StringIO()
    logger.addHandler(JsonLineHandler(stream))
    logger.setLevel(logging.WARNING)

    AdmissionLog(logger).info("admission", FIELDS)

    assert stream.getvalue() == ""


def test_the_formatter_adds_the_exception_to_the_entry() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("placer", logging.ERROR, "f", 1, "failed %s", ("x",), exc_info=True)
        record.exc_info = __import__("sys").exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed x" and entry["level"] == "error"
    assert "ValueError: boom" in entry["exception"]


@pytest.mark.parametrize(
    ("created", "text"),
    [(1700000000.0, "2023-11-14T22:13:20.000Z"), (1700000000.9996, "2023-11-14T22:13:20.999Z"),
     (1700000001.25, "2023-11-14T22:13:21.250Z")],
)
def test_timestamps_are_utc_with_milliseconds(created: float, text: str) -> None:
    timestamps = Timestamps()
    timestamps(1600000000.5)  # a cached second from earlier must not leak into a later one
    assert timestamps(created) == text


class Opaque:
    def __str__(self) -> str:
        return "opaque value"


@pytest.mark.parametrize("fields", [
    FIELDS,
    {},
    {"uid": "u-2", "reason": None, "warnings": ["zoné ☃", 'a "quoted" \\ word'], "nested": {"a": [1, 2.5]}},
    {"uid": "u-3", "message": "a field named as a member of the entry replaces it in place"},
    {"uid": "u-4", "detail": Opaque()},  # what JSON has no type for is written as its str()
    {"uid": "u-5", "warnings": ["lone \ud800 surrogate"]},  # orjson refuses: the standard encoder writes it
    {"uid": "u-6", "big": 2**70},
])
def test_the_line_is_byte_for_byte_what_the_formatter_writes(logger: logging.Logger, fields: dict[str, object],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    logger.addHandler(JsonLineHandler(stream))
    monkeypatch.setattr("time.time", lambda: 1700000000.25)
    admission_log = AdmissionLog(logger)

    admission_log.info("admission", fields)
    admission_log.info("admission", fields)  # the second line from what the first kept

    record = logging.LogRecord(logger.name, logging.INFO, "f", 1, "admission", (), None)
    record.created, record.fields = 1700000000.25, fields
    expected = JsonFormatter().format(record) + "\n"
    assert stream.getvalue() == expected * 2


@pytest.mark.parametrize("buffering", [1, -1])  # line-buffered as stderr is, and block-buffered
def test_each_line_reaches_the_file_as_it_is_written(tmp_path: Path, logger: logging.Logger, buffering: int) -> None:
    path = tmp_path / "log"
    with open(path, "w", buffering=buffering) as stream:
        logger.addHandler(JsonLineHandler(stream))
        AdmissionLog(logger).info("admission", FIELDS)
        assert path.read_text().count("\n") == 1
        AdmissionLog(logger).info("admission", FIELDS)
        assert path.read_text().count("\n") == 2
