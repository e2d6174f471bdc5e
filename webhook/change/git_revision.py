"""`placer diff --base REV`: the policy paths as they were at a git revision, written to a directory.

Read with git itself (`git ls-tree`, `git show REV:path`), so any revision git understands works (a branch,
a tag, `HEAD~1`, `origin/main`). A directory is read as `placer` reads one: its `*.yaml` and `*.yml` files,
not its subdirectories."""

import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

POLICY_SUFFIXES = (".yaml", ".yml")


class RevisionError(Exception):
    """The paths cannot be read at the revision: not a git repository, no such revision, no such path."""


def policies_at(revision: str, paths: Sequence[str], into: Path) -> list[str]:
    """Each of `paths` as it was at `revision`, written under `into`; the written paths, in the same order."""
    if revision.startswith("-"):
        raise RevisionError(f"{revision}: a revision cannot start with '-'")
    found = []
    for raw in paths:
        path = Path(raw).resolve()
        anchor = next((p for p in (path, *path.parents) if p.is_dir()), Path.cwd())
        top = Path(_git(anchor, "rev-parse", "--show-toplevel",
                        error=f"{raw}: not in a git repository").strip())
        _git(top, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}",
             error=f"{revision}: not a revision of the git repository {top}")
        relative = path.relative_to(top).as_posix()
        listed = [name for name in _git(top, "ls-tree", "-r", "-z", "--name-only", revision, "--", relative,
                                        error=f"{raw}: cannot list it at {revision}").split("\0") if name]
        if not listed:
            raise RevisionError(f"{raw}: did not exist at {revision} (git ls-tree {revision} -- {relative} "
                                "lists nothing)")
        target = into / relative
        if listed == [relative]:
            _write(top, revision, relative, target)
        else:
            target.mkdir(parents=True, exist_ok=True)
            for name in listed:
                inside = PurePosixPath(name)
                if inside.parent == PurePosixPath(relative) and inside.suffix in POLICY_SUFFIXES:
                    _write(top, revision, name, target / inside.name)
        found.append(str(target))
    return found


def _write(top: Path, revision: str, name: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["git", "-C", str(top), "show", f"{revision}:{name}"], capture_output=True, check=False)
    if result.returncode:
        raise RevisionError(f"{name} at {revision}: {result.stderr.decode(errors='replace').strip()}")
    target.write_bytes(result.stdout)


def _git(where: Path, *args: str, error: str) -> str:
    try:
        result = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=False)
    except OSError as failure:
        raise RevisionError(f"{error}: git cannot run: {failure}") from None
    if result.returncode:
        detail = result.stderr.strip().splitlines()
        raise RevisionError(error + (f" ({detail[-1]})" if detail else ""))
    return result.stdout
