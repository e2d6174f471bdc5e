"""What `placer apply` says about the request beyond the object: who sends it, what an UPDATE replaces, and
the exemption key, so that a tenant's or an exempt user's request can be tried offline as the API server
would send it (`--as`, `--as-group`, `--old`, `--exemption-key`)."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.engine.exemption_seal import Seals, read_key
from webhook.policy.sources.documents import expand_lists, read_documents
from webhook.support.typing import JSONObject, as_map

DEFAULT_USER = "placer-apply"


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """The request's `userInfo`, the old objects of an UPDATE (by kind/namespace/name) and the seal key."""

    username: str = DEFAULT_USER
    groups: tuple[str, ...] = ()
    old: Mapping[str, JSONObject] = field(default_factory=dict)
    key: bytes | None = None

    @classmethod
    def from_flags(cls, user: str | None, groups: Sequence[str] | None, old_paths: Sequence[str] | None,
                   key_path: str | None) -> "RequestOptions":
        """From the flags; OSError, ValueError or ManifestError for a file that cannot be used."""
        old: dict[str, JSONObject] = {}
        for path in old_paths or ():
            for document in expand_lists(read_documents(Path(path).read_text(encoding="utf-8"))):
                if isinstance(document.content, dict):
                    old[object_key(document.content, None)] = document.content
        key = read_key(Path(key_path)) if key_path else None
        return cls(user or DEFAULT_USER, tuple(groups or ()), old, key)

    @property
    def user_info(self) -> JSONObject:
        return {"username": self.username, "groups": ["system:authenticated", *self.groups]}

    def old_for(self, obj: Mapping[str, Any], namespace: str) -> JSONObject | None:
        """The object as it was before an UPDATE, when `--old` gave it."""
        return self.old.get(object_key(obj, namespace)) or self.old.get(object_key(obj, None))

    def seals(self, objects: Callable[[], Sequence[JSONObject]]) -> Seals | None:
        """Seals with the key, whose owner lookup finds a Pod's owner among `objects()` (the manifests as
        admitted so far, else as given), by kind, namespace and name, and by uid when both have one."""
        if self.key is None:
            return None

        def owner(namespace: str, reference: Mapping[str, Any], _deadline: float | None) -> JSONObject | None:
            for candidate in reversed(objects()):
                metadata = as_map(candidate.get("metadata"))
                if (candidate.get("kind") == reference.get("kind") and metadata.get("name") == reference.get("name")
                        and metadata.get("namespace", namespace) == namespace
                        and (not metadata.get("uid") or metadata.get("uid") == reference.get("uid"))):
                    return candidate
            return None

        return Seals(self.key, owner)


def object_key(obj: Mapping[str, Any], namespace: str | None) -> str:
    metadata = as_map(obj.get("metadata"))
    where = namespace if namespace is not None else str(metadata.get("namespace") or "")
    return f"{obj.get('kind')}/{where}/{metadata.get('name')}"
