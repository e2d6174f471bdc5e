"""Policies from files and directories (`--policies`), re-read while serving (DESIGN §8).

A file that no longer parses keeps serving its last good content; a policy that no longer compiles keeps
serving its last good version. Either way the error is reported, and no other policy is affected.
"""

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from webhook.policy.compiler import PolicyCompiler
from webhook.policy.documents import ManifestError, expand_lists, is_policy, namespace_from, read_documents
from webhook.policy.errors import PolicyError
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.policy.sources import SourceContent, combine

log = logging.getLogger(__name__)

Fingerprint = tuple[int, int, int]


@dataclass(slots=True)
class _FileState:
    fingerprint: Fingerprint | None = None
    policies: dict[str, Policy] = field(default_factory=dict)
    namespaces: dict[str, NamespaceInfo] = field(default_factory=dict)
    errors: list[PolicyError] = field(default_factory=list)


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
        """Re-read changed files; True when the snapshot must be rebuilt."""
        changed = False
        current = policy_files(self._paths)
        for gone in set(self._files) - set(current):
            del self._files[gone]
            changed = True
        for path in current:
            state = self._files.setdefault(path, _FileState())
            fingerprint = file_fingerprint(path)
            if fingerprint != state.fingerprint:
                self._load(path, state, fingerprint)
                changed = True
        return changed

    def content(self) -> SourceContent:
        """Everything currently loaded; the first file defining a policy name wins."""
        errors: list[PolicyError] = [
            PolicyError(str(p), "no such file or directory") for p in self._required if not p.exists()
        ]
        files = [SourceContent(state.policies, state.namespaces, tuple(state.errors)) for state in self._files.values()]
        merged = combine([SourceContent(errors=tuple(errors)), *files], self._compiler.environment)
        return SourceContent({p.name: p for p in merged.policies}, merged.namespaces, merged.errors)

    def snapshot(self) -> PolicySnapshot:
        """This source alone as a snapshot (the offline CLI)."""
        return combine([self.content()], self._compiler.environment)

    def _load(self, path: Path, state: _FileState, fingerprint: Fingerprint | None) -> None:
        source = str(path)
        try:
            documents = list(expand_lists(read_documents(path.read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, ManifestError) as error:
            # Keep the last good content: a half-written file must not drop policies that were serving.
            state.errors = [PolicyError(source, f"cannot read: {error}")]
            log.error("policy file %s: %s (keeping its last good content)", source, error)
            return
        previous = state.policies
        state.fingerprint = fingerprint
        state.policies, state.namespaces, state.errors = {}, {}, []
        for document in documents:
            namespace = namespace_from(document.content)
            if namespace is not None:
                state.namespaces[namespace.name] = namespace
            if not is_policy(document.content):
                continue
            result = self._compiler.compile(document.content, source)
            state.errors.extend(result.errors)
            if result.policy is not None:
                state.policies[result.policy.name] = result.policy
            elif result.name is not None and result.name in previous:
                state.policies[result.name] = previous[result.name]
                log.error("policy %s in %s does not compile; its last good version keeps serving", result.name, source)
        for problem in state.errors:
            log.error("%s", problem)


def file_fingerprint(path: Path) -> Fingerprint | None:
    """mtime, size and inode: an atomic rename (as a ConfigMap update does) changes the inode."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)
