"""Reading Kubernetes manifests: multi-document YAML, safely, with the line each document starts on."""

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.sources.yaml_positions import Positions

try:  # the C loader is an order of magnitude faster; both are safe loaders
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader  # type: ignore[assignment]


class ManifestError(ValueError):
    """The text is not valid YAML; the message has line and column, and so has `place`."""

    def __init__(self, message: str, place: tuple[int, int] | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        self.place = place
        self.problem = problem if problem is not None else message


@dataclass(frozen=True, slots=True)
class Document:
    line: int
    content: Any
    positions: Positions | None = field(default=None, compare=False, repr=False)
    """Where each value is written in the file (None for an item of a `kind: List`)."""


def read_documents(text: str) -> list[Document]:
    """Every non-empty document of a multi-document YAML text, with its starting line; ManifestError for the
    first mistake (a manifest file is read whole or not at all)."""
    documents, errors = read_documents_separately(text)
    if errors:
        raise errors[0]
    return documents


DOCUMENT_START = re.compile(r"^---(?=[ \t\r\n]|$)", re.M)
"""A document start marker: `---` at the start of a line, then a blank or the end of the line. PyYAML's scanner
reads it so wherever it stands (`Scanner.check_document_start`: column 0 is all it asks): it ends a plain
scalar, a block scalar (whose lines are indented by at least one space) and a flow collection, and inside a
quoted scalar it is an error; a `---` indented in a block scalar is text."""


DOCUMENT_MARKER = re.compile(r"(?:---|\.\.\.)(?=[ \t\r\n]|$)")
"""`---` or `...` (at the start of a line): where a document ends."""


def read_documents_separately(text: str) -> tuple[list[Document], list[ManifestError]]:
    """Every document that parses, and a ManifestError for each that does not: a mistake in one document (an
    unclosed `{`) costs that document only. The text is parsed whole first; only when that fails is it cut at
    its document markers and each part parsed alone, at its own lines."""
    try:
        return _parse(text), []
    except ManifestError:
        pass
    documents: list[Document] = []
    errors: list[ManifestError] = []
    starts = [0, *(match.start() for match in DOCUMENT_START.finditer(text) if match.start() > 0)]
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        padding = "\n" * text.count("\n", 0, start)  # the part keeps its lines: marks and places are the file's
        try:
            documents.extend(_parse(padding + text[start:end]))
        except ManifestError as error:
            errors.append(error)
    return documents, errors


def _parse(text: str) -> list[Document]:
    loader = SafeLoader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            content = loader.construct_document(node)
            if content is not None:
                documents.append(Document(node.start_mark.line + 1, content, Positions.of_node(node, text)))
    except yaml.MarkedYAMLError as error:
        raise _located(error, text) from None
    except yaml.YAMLError as error:
        raise ManifestError(str(error)) from None
    finally:
        loader.dispose()
    return documents


_OPENED = ("while parsing a flow mapping", "while parsing a flow sequence", "while scanning a quoted scalar")
"""Contexts of a construct that must be closed: `{`, `[` or a quote."""


def _located(error: yaml.MarkedYAMLError, text: str) -> ManifestError:
    """The error at the line and column of the mistake. A `{`, `[` or quote still open at the next document
    marker or the end of the text was never closed: the mistake is where it was opened (said with where the
    parser noticed); anywhere else, where the parser stopped, in the construct opened where it says."""
    problem = str(error.problem or error)
    mark, opened = error.problem_mark, error.context_mark
    if opened is not None and mark is not None and error.context and error.context.startswith(_OPENED):
        what = error.context.removeprefix("while parsing a ").removeprefix("while scanning a ")
        rest = text[mark.index:]
        if not rest.strip() or (mark.column == 0 and DOCUMENT_MARKER.match(rest)):
            problem = f"{what} not closed: {problem} (at line {mark.line + 1}, column {mark.column + 1})"
            mark = opened
        else:
            problem = f"{problem}, in the {what} opened at line {opened.line + 1}, column {opened.column + 1}"
    if mark is None:
        return ManifestError(problem)
    place = (mark.line + 1, mark.column + 1)
    return ManifestError(f"line {place[0]}, column {place[1]}: {problem}", place, problem)


def expand_lists(documents: list[Document]) -> Iterator[Document]:
    """Items of `kind: List` documents (what `kubectl get -o yaml` writes) as documents of their own."""
    for document in documents:
        content = document.content
        if isinstance(content, dict) and content.get("kind", "").endswith("List") and "items" in content:
            for item in content.get("items") or []:
                yield Document(document.line, item)
        else:
            yield document


def is_policy(content: Any) -> bool:
    return isinstance(content, dict) and content.get("kind") == "SchedulingPolicy"


def namespace_from(content: Any) -> NamespaceInfo | None:
    """A v1 Namespace manifest as the `namespaceObject` Placer will show policies, else None."""
    if not isinstance(content, dict) or content.get("kind") != "Namespace" or content.get("apiVersion") != "v1":
        return None
    metadata = content.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        return None
    return namespace_info(metadata["name"], content)


def global_default_class_from(content: Any) -> str | None:
    """The name of a `scheduling.k8s.io/v1` PriorityClass manifest with `globalDefault: true`, else None."""
    if not isinstance(content, dict) or content.get("kind") != "PriorityClass":
        return None
    if content.get("apiVersion") != "scheduling.k8s.io/v1" or content.get("globalDefault") is not True:
        return None
    name = (content.get("metadata") or {}).get("name") if isinstance(content.get("metadata"), dict) else None
    return name if isinstance(name, str) and name else None


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def served_document(obj: Any) -> dict[str, Any]:
    """A SchedulingPolicy read from the API server as it serves: without status and managed fields (what only
    the API server needs)."""
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {k: v for k, v in obj.items() if k != "status"} | {"metadata": metadata}


def namespace_info(name: str, namespace: Any, *, drop_annotations: Iterable[str] = (LAST_APPLIED,)) -> NamespaceInfo:
    """What `namespaceObject` shows of a Namespace object (a manifest, a watched or read object), without
    kubectl's last-applied annotation (a copy of the whole manifest)."""
    metadata = namespace.get("metadata") if isinstance(namespace, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    annotations = _strings(metadata.get("annotations"))
    for key in drop_annotations:
        annotations.pop(key, None)
    rest: dict[str, Any] = {key: namespace[key] for key in ("spec", "status") if isinstance(namespace.get(key), dict)}
    identity = {key: metadata[key] for key in ("uid", "creationTimestamp") if isinstance(metadata.get(key), str)}
    if identity:
        rest["metadata"] = identity
    return NamespaceInfo(name, _strings(metadata.get("labels")), annotations, rest)


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
