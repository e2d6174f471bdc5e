"""A keyed collection published as 256 small JSON files, each rewritten only when one of its entries changes.

The controller process publishes what it watches (namespaces, nodes) for the workers of `placer serve` this way: an
object lives in shard `crc32(name) % 256`, so a change rewrites that one shard (about 40 entries at 10,000)
instead of the whole collection, and a reader re-parses only the shards that changed. Why shards and not
one file per object: the state lives on a memory-backed emptyDir with a size limit, where every file costs
a whole page (10,000 files would take 40 MiB for 3 MiB of data). Why not one file: every change would
rewrite and re-parse everything (a quarter of a core at 3,000 namespaces and 3 changes a second).

Each shard is replaced by rename, so a reader sees the old shard or the new one, never a part.

A write that fails (ENOSPC on the size-limited emptyDir, which also holds the metrics files) leaves the old
shard file whole, and the writer remembers the shard as it is on disk, not as it was meant to be: memory
changes only after the rename. The error reaches the caller (the watch's sink), whose event is then not
counted as applied: the reflector watches again from the last event that was (`webhook.cluster.client.reflector`), the
same change arrives again and is written then.
"""

import logging
import os
import tempfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from webhook.support.json_bytes import encode_json

SHARDS = 256
PARSED_SHARDS_KEPT = 64
"""Parsed shards a reader keeps (a quarter of a collection at most); a shard not kept costs one parse."""

Entry = dict[str, Any]
Stamp = tuple[int, int, int]
"""inode, mtime and size: a file replaced by rename has a new one."""

log = logging.getLogger(__name__)


def stamp_of(stat: os.stat_result) -> Stamp:
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def write_atomically(path: Path, data: bytes) -> None:
    """A temporary file in the same directory, then renamed over `path`: readers see old or new, never a part."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as output:
            output.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_shard(path: Path, consequence: str) -> tuple[Stamp, dict[str, Entry]] | None:
    """The shard's entries with the stamp of what was read (even if replaced since); None when it is gone, or
    unreadable (never written so by the controller, which replaces by rename: logged with `consequence`)."""
    try:
        with open(path, "rb") as shard_file:
            stamp = stamp_of(os.fstat(shard_file.fileno()))
            entries = orjson.loads(shard_file.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.error("shard %s unreadable (%s); %s", path, error, consequence)
        return None
    if not isinstance(entries, dict):
        log.error("shard %s unreadable (not a JSON object); %s", path, consequence)
        return None
    return stamp, entries


def shard_of(name: str) -> int:
    return zlib.crc32(name.encode()) % SHARDS


def shard_path(directory: Path, index: int) -> Path:
    return directory / f"{index:03d}.json"


class ShardWriter:
    """Keeps every entry as its shard file holds it and rewrites a shard only when one of its entries changed
    (an update that changes nothing in the entry writes nothing). Used from one thread (a watch's).

    Memory follows the disk: a shard is changed in memory only once its file was replaced, so after a failed
    write (the OSError is raised to the caller) the same change is still a change, and is written when it is
    made again."""

    def __init__(self, directory: Path, *, write: Callable[[Path, bytes], None] = write_atomically) -> None:
        """`write(path, data)`: how a shard file is replaced (`write_atomically`; tests inject failures)."""
        self._directory = directory
        self._write_file = write
        self._shards: list[dict[str, Entry]] = [{} for _ in range(SHARDS)]
        self._known = [False] * SHARDS
        """Whether a shard's file is known to hold `_shards[index]`: not before it was first written (a previous
        controller may have left one)."""

    def __len__(self) -> int:
        return sum(len(shard) for shard in self._shards)

    def changed_by(self, entries: Mapping[str, Entry]) -> list[str]:
        """The names whose entry `replace(entries)` would change, add or drop."""
        found = [name for name, entry in entries.items() if self._shards[shard_of(name)].get(name) != entry]
        return found + [name for shard in self._shards for name in shard if name not in entries]

    def replace(self, entries: Mapping[str, Entry]) -> int:
        """Make the shards hold exactly `entries` (a list, or a list again after 410 Gone); returns shards written.
        Every shard is tried; the first write that failed is raised afterwards."""
        self._directory.mkdir(parents=True, exist_ok=True)
        fresh: list[dict[str, Entry]] = [{} for _ in range(SHARDS)]
        for name, entry in entries.items():
            fresh[shard_of(name)][name] = entry
        written = 0
        failure: OSError | None = None
        for index, shard in enumerate(fresh):
            if self._known[index] and shard == self._shards[index]:
                continue
            try:
                self._write(index, shard)
            except OSError as error:
                failure = failure or error
                continue
            written += 1
        if failure is not None:
            raise failure
        return written

    def put(self, name: str, entry: Entry) -> bool:
        """Store one entry; True when its shard was rewritten, OSError when that failed (nothing changed)."""
        index = shard_of(name)
        current = self._shards[index]
        if self._known[index] and current.get(name) == entry:
            return False
        self._write(index, {**current, name: entry})
        return True

    def delete(self, name: str) -> bool:
        """Forget one entry; True when its shard was rewritten, OSError when that failed (nothing changed)."""
        index = shard_of(name)
        current = self._shards[index]
        if self._known[index] and name not in current:
            return False
        self._write(index, {key: entry for key, entry in current.items() if key != name})
        return True

    def _write(self, index: int, shard: dict[str, Entry]) -> None:
        """Replace the shard's file, then (only then) remember what it holds."""
        path = shard_path(self._directory, index)
        if shard:
            self._directory.mkdir(parents=True, exist_ok=True)
            self._write_file(path, encode_json(shard))
        else:
            path.unlink(missing_ok=True)
        self._shards[index] = shard
        self._known[index] = True


class ParsedShard:
    """One shard as a reader parsed it, with what the reader derived from its entries (kept as long as it)."""

    __slots__ = ("derived", "entries", "stamp")

    def __init__(self, stamp: Stamp, entries: dict[str, Entry]) -> None:
        self.stamp = stamp
        self.entries = entries
        self.derived: dict[str, Any] = {}


class KeyedShards:
    """A reader's side of a published collection: `entry(key)` reads the key's shard, parsing it again only
    when it was replaced. A lookup costs one stat (about 2 µs) when the shard is unchanged; what a reader
    keeps is bounded by `kept` shards, whatever the size of the collection."""

    def __init__(self, directory: Path, consequence: str, *, kept: int = PARSED_SHARDS_KEPT) -> None:
        self._paths = [str(shard_path(directory, index)) for index in range(SHARDS)]
        """Made once: a Path built per lookup costs more than the stat it is for."""
        self._consequence = consequence
        self._kept = kept
        self._parsed: OrderedDict[int, ParsedShard] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def kept(self) -> int:
        """Parsed shards held now."""
        with self._lock:
            return len(self._parsed)

    def entry(self, key: str) -> Entry | None:
        shard = self.shard(shard_of(key))
        entry = shard.entries.get(key) if shard is not None else None
        return entry if isinstance(entry, dict) else None

    def shard(self, index: int) -> ParsedShard | None:
        path = self._paths[index]
        try:
            stamp = stamp_of(os.stat(path))
        except FileNotFoundError:
            return None
        with self._lock:
            cached = self._parsed.get(index)
            if cached is not None and cached.stamp == stamp:
                self._parsed.move_to_end(index)
                return cached
        read = read_shard(Path(path), self._consequence)
        if read is None:
            return None
        parsed = ParsedShard(*read)
        with self._lock:
            self._parsed[index] = parsed
            self._parsed.move_to_end(index)
            while len(self._parsed) > self._kept:
                self._parsed.popitem(last=False)
        return parsed
