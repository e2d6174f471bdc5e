"""A labelled counter written straight to this process's file in prometheus_client's multiprocess directory.

Placer counts every rule it evaluates, by policy, rule and outcome: about 50 increments per admission with
50 rules. Through prometheus_client each increment is eight Python calls (the counter, its observability
check, the value, its lock, the fork check, the file) and cost 1.5 µs, 75 µs an admission: more than the
rest of the admission's bookkeeping. This writes one admission's increments under one lock, each a map
lookup and an 8-byte write to the same kind of memory-mapped file (`prometheus_client.mmap_dict`), in the
directory `MultiProcessCollector` reads for `/metrics`: 21 µs for 50. The file is this process's own
(`counter_<name>_<pid>.db`, counted as a counter by the collector, kept after the process exits as
prometheus_client keeps its counters); a forked child opens its own.

The admission counter and duration histogram, written on every admission, are kept the same way
(`HistogramFile`, `AdmissionFiles`): through prometheus_client they were a tenth of a review answered from
the sibling cache.
"""

import bisect
import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence

from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.utils import floatToGoString


class SampleFile:
    """Samples of one metric family that only this process writes, in its own file of `directory` whose name
    tells the collector the family's type (`<kind>_<name>_<pid>.db`)."""

    def __init__(self, directory: str, kind: str, name: str, documentation: str, *,
                 process_id: Callable[[], int] | None = None) -> None:
        self._process_id = process_id
        """This process's id (`metrics.ProcessId` answers from memory); None: `os.getpid()`, a system call."""
        self._directory = directory
        self._kind = kind
        self._name = name
        self._documentation = documentation
        self._lock = threading.Lock()
        self._pid = 0
        self._file: MmapedDict | None = None
        self._values: dict[str, float] = {}
        self._written_at_start: tuple[str, ...] = ()
        """Samples written as zero when the file is made, as prometheus_client writes a histogram's."""

    def _add(self, file: MmapedDict, key: str, amount: float) -> None:
        """Add `amount` to the sample `key` (under the lock, `file` this process's)."""
        value = self._values.get(key, 0.0) + amount
        self._values[key] = value
        file.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Let the file go (the process's samples stay in it for `/metrics`); a later increment reopens it."""
        with self._lock:
            if self._file is not None:
                self._file.close()  # type: ignore[no-untyped-call]
                self._file = None

    def _file_of_this_process(self) -> MmapedDict:
        pid = self._process_id() if self._process_id is not None else os.getpid()
        if self._file is None or pid != self._pid:  # first use, or a fork: the parent's file is not ours
            if self._file is not None:
                self._file.close()  # type: ignore[no-untyped-call]  # this process's copy of the parent's map
            self._file = MmapedDict(os.path.join(self._directory, f"{self._kind}_{self._name}_{pid}.db"))  # type: ignore[no-untyped-call]
            if pid != self._pid:
                self._pid, self._values = pid, {}
                for key in self._written_at_start:
                    self._add(self._file, key, 0.0)
            else:  # reopened after close(): carry on from what the file holds
                self._values = {key: self._file.read_value(key)[0] for key in self._values}  # type: ignore[no-untyped-call]
        return self._file


class CounterFile(SampleFile):
    """One counter family (name, help, label names) whose samples only this process writes, in `directory`."""

    def __init__(self, directory: str, name: str, documentation: str, labelnames: tuple[str, ...], *,
                 process_id: Callable[[], int] | None = None) -> None:
        super().__init__(directory, "counter", name, documentation, process_id=process_id)
        self._labelnames = labelnames
        self._keys: dict[tuple[str, ...], str] = {}
        """The file's key for each label set seen (`mmap_key`: a JSON document, costly to build)."""

    def increment_each(self, label_sets: Iterable[tuple[str, ...]]) -> None:
        """Add one to the sample of every label set given (a set given twice gets two)."""
        with self._lock:
            self._increment_each(label_sets)

    def _increment_each(self, label_sets: Iterable[tuple[str, ...]]) -> None:
        """`increment_each`, the lock held."""
        file = self._file_of_this_process()
        keys, values = self._keys, self._values
        for labels in label_sets:
            key = keys.get(labels)
            if key is None:
                key = keys[labels] = mmap_key(self._name, self._name + "_total", list(self._labelnames),
                                              list(labels), self._documentation)
            value = values.get(key, 0.0) + 1.0  # `_add`, inlined: ~50 of these per admission
            values[key] = value
            file.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]


class HistogramFile(SampleFile):
    """A histogram without labels, written as prometheus_client's `Histogram` writes one in multiprocess mode:
    an observation adds to `_sum` and one to the first bucket whose upper bound holds it (the collector adds
    the buckets up into the cumulative `_bucket` samples and `_count`)."""

    def __init__(self, directory: str, name: str, documentation: str, buckets: Sequence[float], *,
                 process_id: Callable[[], int] | None = None) -> None:
        super().__init__(directory, "histogram", name, documentation, process_id=process_id)
        bounds = [float(bound) for bound in buckets]
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        self._sum_key = mmap_key(name, name + "_sum", [], [], documentation)
        les: list[str] = [floatToGoString(bound) for bound in bounds]  # type: ignore[no-untyped-call]
        self._bucket_keys = tuple(mmap_key(name, name + "_bucket", ["le"], [le], documentation) for le in les)
        self._written_at_start = (self._sum_key, *self._bucket_keys)  # every bucket is scraped, even empty

    def observe(self, amount: float) -> None:
        with self._lock:
            self._observe(amount)

    def _observe(self, amount: float) -> None:
        """`observe`, the lock held."""
        bucket = self._bucket_keys[bisect.bisect_left(self._bounds, amount)]  # the first bound >= amount
        file = self._file_of_this_process()
        self._add(file, self._sum_key, amount)
        self._add(file, bucket, 1.0)


class AdmissionFiles:
    """What every admission writes, under one lock: its count by kind, operation and result, its duration and
    the count of each rule it evaluated; each family in a file of its own, as `CounterFile` and `HistogramFile`
    write them. Through prometheus_client the request counter alone (its child, observability check, value,
    lock, fork check and file) cost as much as the other two together."""

    def __init__(self, requests: CounterFile, duration: HistogramFile, rules: CounterFile) -> None:
        self._requests = requests
        self._duration = duration
        self._rules = rules
        self._lock = threading.Lock()
        """Held for the three: the files are written by nothing else (each file's own lock is not taken)."""

    def observe(self, request: tuple[str, str, str], seconds: float, rules: Iterable[tuple[str, ...]]) -> None:
        with self._lock:
            self._requests._increment_each((request,))
            self._duration._observe(seconds)
            self._rules._increment_each(rules)
