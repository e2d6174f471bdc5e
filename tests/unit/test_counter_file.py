"""The rule counters' own multiprocess file: what `/metrics` reads from it is what was counted."""

import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector

from webhook.support.counter_file import CounterFile, HistogramFile

LABELS = ("policy", "rule", "outcome")


def scrape(directory: Path) -> list[str]:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    return [line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")]


def test_every_increment_is_scraped_as_a_counter_with_its_labels(tmp_path: Path) -> None:
    counter = CounterFile(str(tmp_path), "placer_rule_evaluations", "Rule evaluations.", LABELS)
    counter.increment_each([("p", "a", "applied"), ("p", "b", "not-matched")])
    counter.increment_each([("p", "a", "applied"), ("p", "a", "applied")])  # a set given twice counts twice
    counter.close()
    counter.increment_each([("p", "b", "not-matched")])  # reopened: carries on from the file
    counter.close()
    lines = scrape(tmp_path)
    assert 'placer_rule_evaluations_total{outcome="applied",policy="p",rule="a"} 3.0' in lines
    assert 'placer_rule_evaluations_total{outcome="not-matched",policy="p",rule="b"} 2.0' in lines


def test_threads_counting_together_lose_nothing(tmp_path: Path) -> None:
    counter = CounterFile(str(tmp_path), "placer_rule_evaluations", "Rule evaluations.", LABELS)
    rules = [("p", f"r{index}", "applied") for index in range(20)]

    def admissions() -> None:
        for _ in range(250):
            counter.increment_each(rules)

    threads = [threading.Thread(target=admissions) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counter.close()
    lines = scrape(tmp_path)
    assert all(f'placer_rule_evaluations_total{{outcome="applied",policy="p",rule="r{index}"}} 1000.0' in lines
               for index in range(20))


def test_a_replaced_worker_s_counts_stay_in_the_sum(tmp_path: Path) -> None:
    """A worker that exits leaves its file: the counter must not go back when its replacement starts."""
    old = CounterFile(str(tmp_path), "placer_rule_evaluations", "Rule evaluations.", LABELS)
    old.increment_each([("p", "a", "applied")] * 5)
    old.close()
    (tmp_path / next(path.name for path in tmp_path.iterdir())).rename(
        tmp_path / "counter_placer_rule_evaluations_999999.db")  # as if written by a process now gone
    new = CounterFile(str(tmp_path), "placer_rule_evaluations", "Rule evaluations.", LABELS)
    new.increment_each([("p", "a", "applied")] * 2)
    new.close()
    assert 'placer_rule_evaluations_total{outcome="applied",policy="p",rule="a"} 7.0' in scrape(tmp_path)


def test_a_histogram_is_scraped_as_prometheus_client_writes_one(tmp_path: Path) -> None:
    histogram = HistogramFile(str(tmp_path), "placer_admission_duration_seconds", "Time.", (0.0005, 0.001, 0.0025, 5.0))
    for seconds in (2**-13, 2**-11, 2**-9, 7.0):  # sums without rounding
        histogram.observe(seconds)
    histogram.close()
    histogram.observe(2**-13)  # reopened: carries on from the file
    histogram.close()
    lines = scrape(tmp_path)
    assert sorted(line for line in lines if line.startswith("placer_admission_duration_seconds")) == sorted([
        'placer_admission_duration_seconds_bucket{le="0.0005"} 3.0',
        'placer_admission_duration_seconds_bucket{le="0.001"} 3.0',
        'placer_admission_duration_seconds_bucket{le="0.0025"} 4.0',
        'placer_admission_duration_seconds_bucket{le="5.0"} 4.0',
        'placer_admission_duration_seconds_bucket{le="+Inf"} 5.0',
        'placer_admission_duration_seconds_count 5.0',
        'placer_admission_duration_seconds_sum 7.002685546875',
    ])


def test_the_file_holds_the_bytes_prometheus_client_would_write(tmp_path: Path) -> None:
    """Samples rewritten in place (through a map of the file's own) leave the file as `MmapedDict.write_value`
    leaves it, across new samples, a file that grows past its first size, and a close and reopen."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    counter = CounterFile(str(ours), "placer_rule_evaluations", "Rule evaluations.", LABELS, process_id=lambda: 7)
    reference = MmapedDict(str(theirs / "counter_placer_rule_evaluations_7.db"))  # type: ignore[no-untyped-call]
    counts: dict[str, float] = {}
    rounds = [[("p", f"r{index % 5}", "applied")] for index in range(12)]
    rounds += [[("p" * 200, f"r{index}", "applied") for index in range(400)]]  # past 64 KiB: the file grows
    rounds += [[("p", "r0", "applied"), ("p", "r1", "applied")]]
    for number, label_sets in enumerate(rounds):
        if number == 13:
            counter.close()  # reopened by the next increment
        counter.increment_each(label_sets)
        for labels in label_sets:
            key = mmap_key("placer_rule_evaluations", "placer_rule_evaluations_total", list(LABELS), list(labels),
                           "Rule evaluations.")
            counts[key] = counts.get(key, 0.0) + 1.0
            reference.write_value(key, counts[key], 0.0)  # type: ignore[no-untyped-call]
    counter.close()
    reference.close()  # type: ignore[no-untyped-call]
    written = (ours / "counter_placer_rule_evaluations_7.db").read_bytes()
    assert len(written) > 65536
    assert written == (theirs / "counter_placer_rule_evaluations_7.db").read_bytes()
