"""Policies from files and directories (`--policies`), re-read while serving (DESIGN §8).

A file that no longer parses keeps serving its last good content; a policy that no longer compiles keeps
serving its last good version. Either way the error is reported, and no other policy is affected.
"""

import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from webhook.policy.compiler import PolicyCompiler
from webhook.policy.documents import ManifestError, expand_lists, is_policy, namespace_from, read_documents
from webhook.policy.errors import PolicyError
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot

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
            fingerprint = _fingerprint(path)
            if fingerprint != state.fingerprint:
                self._load(path, state, fingerprint)
                changed = True
        return changed

    def snapshot(self) -> PolicySnapshot:
        """A snapshot of everything currently loaded; the first file defining a policy name wins."""
        policies: dict[str, Policy] = {}
        namespaces: dict[str, NamespaceInfo] = {}
        errors: list[PolicyError] = [
            PolicyError(str(p), "no such file or directory") for p in self._required if not p.exists()
        ]
        for path, state in self._files.items():
            errors.extend(state.errors)
            namespaces.update(state.namespaces)
            for name, policy in state.policies.items():
                if name in policies:
                    errors.append(
                        PolicyError(str(path), f"also defined in {policies[name].source}, ignored here", policy=name)
                    )
                else:
                    policies[name] = policy
        return PolicySnapshot.build(policies.values(), namespaces, errors, self._compiler.environment)

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


def _fingerprint(path: Path) -> Fingerprint | None:
    """mtime, size and inode: an atomic rename (as a ConfigMap update does) changes the inode."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class PolicyReloader:
    """Polls a file source in a daemon thread and hands each new snapshot to `publish`.

    Polling, not inotify: Kubernetes updates mounted ConfigMaps and Secrets by swapping a symlink, which
    inotify watches on the file do not see.
    """

    def __init__(
        self, source: FilePolicySource, publish: Callable[[PolicySnapshot], None], *, interval: float = 2.0
    ) -> None:
        self._source = source
        self._publish = publish
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placer-policy-reload", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if self._source.refresh():
                    snapshot = self._source.snapshot()
                    self._publish(snapshot)
                    log.info("policies reloaded: %d policies, %d errors", len(snapshot.policies), len(snapshot.errors))
            except Exception:  # the reloader must outlive any surprise; the last snapshot keeps serving
                log.exception("policy reload failed; the last good policies keep serving")
