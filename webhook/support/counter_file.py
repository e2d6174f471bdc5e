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
import mmap
import os
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import BinaryIO

from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.utils import floatToGoString

_WRITE = struct.Struct("dd").pack_into
"""Write a sample's value and timestamp into the map where the file holds them (`MmapedDict.write_value`
writes the same 16 bytes), without building them as bytes first."""


class SampleFile:
    """Samples of one metric family that only this process writes, in its own file of `directory` whose name
    tells the collector the family's type (`<kind>_<name>_<pid>.db`).

    prometheus_client's `MmapedDict` lays out each new sample; once laid out, a sample is rewritten in place
    through a map of the file's own (its position read back with `MmapedDict.read_all_values_from_file`):
    the 16 bytes `write_value` would write, without its two Python calls per sample (a tenth of the
    instructions of a 50-rule review went to them)."""

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
        self._positions: dict[str, int] = {}
        """Where each sample laid out in the file so far has its value, in `_view`."""
        self._view: mmap.mmap | None = None
        self._view_file: BinaryIO | None = None
        self._written_at_start: tuple[str, ...] = ()
        """Samples written as zero when the file is made, as prometheus_client writes a histogram's."""

    def _add(self, file: MmapedDict, key: str, amount: float) -> None:
        """Add `amount` to the sample `key` (under the lock, `file` this process's)."""
        value = self._values.get(key, 0.0) + amount
        self._values[key] = value
        position = self._positions.get(key)
        if position is None or self._view is None:
            self._lay_out(file, key, value)
        else:
            _WRITE(self._view, position, value, 0.0)

    def _lay_out(self, file: MmapedDict, key: str, value: float) -> None:
        """Write a sample not laid out yet (or not known to be: the file reopened) through `file`, then learn
        where every sample of the file is, mapping the file again if it grew."""
        file.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]
        path = self._path(self._pid)
        self._positions = {found: position for found, _value, _timestamp, position
                           in MmapedDict.read_all_values_from_file(path)}  # type: ignore[no-untyped-call]
        size = os.path.getsize(path)
        if self._view is None or len(self._view) != size:
            self._close_view()
            self._view_file = open(path, "r+b")  # noqa: SIM115  # kept open with its map, closed by close()
            self._view = mmap.mmap(self._view_file.fileno(), size)

    def _path(self, pid: int) -> str:
        return os.path.join(self._directory, f"{self._kind}_{self._name}_{pid}.db")

    def close(self) -> None:
        """Let the file go (the process's samples stay in it for `/metrics`); a later increment reopens it."""
        with self._lock:
            self._close_view()
            if self._file is not None:
                self._file.close()  # type: ignore[no-untyped-call]
                self._file = None

    def _close_view(self) -> None:
        if self._view is not None:
            self._view.close()
        if self._view_file is not None:
            self._view_file.close()
        self._view, self._view_file, self._positions = None, None, {}

    def _file_of_this_process(self) -> MmapedDict:
        pid = self._process_id() if self._process_id is not None else os.getpid()
        if self._file is None or pid != self._pid:  # first use, or a fork: the parent's file is not ours
            self._close_view()  # after a fork, this process's copy of the parent's map
            if self._file is not None:
                self._file.close()  # type: ignore[no-untyped-call]  # this process's copy of the parent's map
            self._file = MmapedDict(self._path(pid))  # type: ignore[no-untyped-call]
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
            self._increment_each(self._file_of_this_process(), label_sets)

    def _increment_each(self, file: MmapedDict, label_sets: Iterable[tuple[str, ...]]) -> None:
        """`increment_each`, the lock held, `file` this process's."""
        keys, values, positions, view, write = self._keys, self._values, self._positions, self._view, _WRITE
        for labels in label_sets:
            key = keys.get(labels)
            if key is None:
                key = keys[labels] = mmap_key(self._name, self._name + "_total", list(self._labelnames),
                                              list(labels), self._documentation)
            value = values.get(key, 0.0) + 1.0  # `_add`, inlined: ~50 of these per admission
            values[key] = value
            position = positions.get(key)
            if position is None or view is None:
                self._lay_out(file, key, value)
                positions, view = self._positions, self._view
            else:
                write(view, position, value, 0.0)


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
            self._observe(self._file_of_this_process(), amount)

    def _observe(self, file: MmapedDict, amount: float) -> None:
        """`observe`, the lock held, `file` this process's (`_add` for the sum and the bucket, inlined)."""
        bucket = self._bucket_keys[bisect.bisect_left(self._bounds, amount)]  # the first bound >= amount
        sum_key, values, positions, view = self._sum_key, self._values, self._positions, self._view
        total = values[sum_key] = values.get(sum_key, 0.0) + amount
        count = values[bucket] = values.get(bucket, 0.0) + 1.0
        sum_at, bucket_at = positions.get(sum_key), positions.get(bucket)
        if sum_at is None or bucket_at is None or view is None:
            self._lay_out(file, sum_key, total)
            self._lay_out(file, bucket, count)
        else:
            _WRITE(view, sum_at, total, 0.0)
            _WRITE(view, bucket_at, count, 0.0)


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
            self._requests._increment_each(self._requests._file_of_this_process(), (request,))
            self._duration._observe(self._duration._file_of_this_process(), seconds)
            self._rules._increment_each(self._rules._file_of_this_process(), rules)
