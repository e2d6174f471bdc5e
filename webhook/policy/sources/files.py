"""Policies from files and directories (`--policies`), re-read while serving.

A file that cannot be read keeps serving its last good content; a document of it that no longer parses (an
unclosed `{`) costs only the policies it held, which keep serving their last good versions while the file's
other documents load; a policy that no longer compiles keeps serving its last good version. Either way the
error is reported, and no other policy is affected.
"""

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from webhook.policy.compiler import PolicyCompiler
from webhook.policy.errors import PolicyError
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.policy.sources.documents import (
    expand_lists,
    global_default_class_from,
    is_policy,
    namespace_from,
    read_documents_separately,
)
from webhook.policy.sources.reloader import SourceContent, combine

log = logging.getLogger(__name__)

Fingerprint = tuple[int, int, int]
_CONSISTENT_READ_ATTEMPTS = 3


@dataclass(slots=True)
class _FileState:
    fingerprint: Fingerprint | None = None
    policies: dict[str, Policy] = field(default_factory=dict)
    namespaces: dict[str, NamespaceInfo] = field(default_factory=dict)
    errors: list[PolicyError] = field(default_factory=list)
    default_priority_class: str | None = None
    kept_last_good: bool = False
    """The file could not be read or parsed: `policies` and `namespaces` are its last good content."""
    stale: list[str] = field(default_factory=list)
    """Policies that no longer compile and serve their last good version."""
    unparsed: list[str] = field(default_factory=list)
    """Policies of the file's last good content not in what parses now: with a document that no longer parses,
    they are taken to be its own and serve their last good version."""


def policy_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Each path if a file, the `*.yaml`/`*.yml` files of it if a directory, in a stable order."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()))
        elif path.exists():
            files.append(path)
    return list(dict.fromkeys(files))


class FilePolicySource:
    """Loads the policy files and rebuilds the snapshot when any of them changes."""

    interval: float | None = None
    """Refreshed at the reloader's interval (`--reload-interval`)."""

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        compiler: PolicyCompiler,
        required: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        self._paths = list(paths)
        self._required = [Path(p) for p in required]
        self._compiler = compiler
        self._files: dict[Path, _FileState] = {}

    def refresh(self) -> bool:
        """Re-read changed files; True when the snapshot must be rebuilt.

        What is read is committed only if no file changed while the files were being read, so a set of
        files replaced together (a ConfigMap volume swaps its `..data` symlink) is never served half old,
        half new. Files still changing after a few tries are left for the next round.
        """
        for _ in range(_CONSISTENT_READ_ATTEMPTS):
            current = policy_files(self._paths)
            loaded: dict[Path, _FileState] = {}
            for path in current:
                previous = self._files.get(path, _FileState())
                fingerprint = file_fingerprint(path)
                if path not in self._files or fingerprint != previous.fingerprint:
                    loaded[path] = self._read(path, previous, fingerprint)
            files = {path: loaded.get(path) or self._files[path] for path in current}
            if policy_files(self._paths) == current and all(
                file_fingerprint(path) == state.fingerprint for path, state in files.items()
            ):
                changed = bool(loaded) or set(self._files) != set(files)
                for path in loaded:
                    self._report(path, files[path])
                self._files = files
                return changed
        log.warning("policy files kept changing while being read; reading them again in the next round")
        return False

    def content(self) -> SourceContent:
        """Everything currently loaded; the first file defining a policy name wins."""
        errors: list[PolicyError] = [
            PolicyError(str(p), "no such file or directory") for p in self._required if not p.exists()
        ]
        files = [
            SourceContent(
                state.policies,
                state.namespaces,
                tuple(state.errors),
                default_priority_class=state.default_priority_class,
            )
            for state in self._files.values()
        ]
        merged = combine([SourceContent(errors=tuple(errors)), *files], self._compiler.environment)
        return SourceContent(
            {p.name: p for p in merged.every_policy},
            merged.namespaces,
            merged.errors,
            default_priority_class=merged.default_priority_class,
        )

    def snapshot(self) -> PolicySnapshot:
        """This source alone as a snapshot (the offline CLI)."""
        return combine([self.content()], self._compiler.environment)

    def _read(self, path: Path, previous: _FileState, fingerprint: Fingerprint | None) -> _FileState:
        """The file's new state; policies that no longer load keep their last good version from `previous`."""
        source = str(path)
        try:
            documents, broken = read_documents_separately(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            # Keep the last good content: a half-written file must not drop policies that were serving.
            return _FileState(
                fingerprint,
                previous.policies,
                previous.namespaces,
                [PolicyError(source, f"cannot read: {error}")],
                default_priority_class=previous.default_priority_class,
                kept_last_good=True,
            )
        documents = list(expand_lists(documents))
        state = _FileState(fingerprint)
        for document in documents:
            namespace = namespace_from(document.content)
            if namespace is not None:
                state.namespaces[namespace.name] = namespace
            state.default_priority_class = global_default_class_from(document.content) or state.default_priority_class
            if not is_policy(document.content):
                continue
            locate = document.positions.place if document.positions is not None else None
            result = self._compiler.compile(document.content, source, locate)
            state.errors.extend(result.errors)
            if result.policy is not None:
                state.policies[result.policy.name] = result.policy
            elif result.name is not None and result.name in previous.policies:
                state.policies[result.name] = previous.policies[result.name]
                state.stale.append(result.name)
        for mistake in broken:  # the other documents load; what the broken one held keeps its last good version
            state.errors.append(PolicyError(source, f"cannot read: {mistake.problem}", place=mistake.place))
        if broken:
            kept = {name: policy for name, policy in previous.policies.items() if name not in state.policies}
            state.policies.update(kept)
            state.unparsed.extend(kept)
        return state

    @staticmethod
    def _report(path: Path, state: _FileState) -> None:
        """Log a newly read file's problems once, when what is read is committed."""
        if state.kept_last_good:
            log.error("policy file %s: %s (keeping its last good content)", path, state.errors[0].message)
            return
        for name in state.stale:
            log.error("policy %s in %s does not compile; its last good version keeps serving", name, path)
        for name in state.unparsed:
            log.error("policy %s in %s: a document of the file does not parse; keeping its last good version",
                      name, path)
        for problem in state.errors:
            log.error("%s", problem)


def file_fingerprint(path: Path) -> Fingerprint | None:
    """mtime, size and inode: an atomic rename (as a ConfigMap update does) changes the inode."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)
