"""The `placer test` cases a policy change breaks: each suite whose policies include some of the changed
paths is run twice, with its own (new) policies and with the old versions of those paths in their place; a
case that passes with the old and fails with the new is named. A case failing with both was failing before
the change and is not the change's doing."""

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol


class Case(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def passed(self) -> bool: ...


RunSuite = Callable[[Path, Callable[[list[str]], list[str]] | None], Sequence[Case]]
"""`suites.run_suite`: a suite file, and what to put in place of its policy paths -> its cases."""


def broken_cases(suites: Sequence[Path], new: Sequence[str], old: Sequence[str], run: RunSuite) -> list[str]:
    """`suite: case` for every case the change from `old` to `new` policy paths breaks."""
    swap = _swapper([Path(p).resolve() for p in new], [Path(p).resolve() for p in old])
    broken: list[str] = []
    for suite in suites:
        swapped: list[bool] = []

        def with_old(paths: list[str], swapped: list[bool] = swapped) -> list[str]:
            replaced = swap(paths)
            swapped.append(replaced != paths)
            return replaced

        old_cases = {case.name: case.passed for case in run(suite, with_old)}
        if not any(swapped):
            continue  # none of its policies changed
        broken.extend(f"{suite}: {case.name}" for case in run(suite, None)
                      if not case.passed and old_cases.get(case.name, False))
    return broken


def _swapper(new: list[Path], old: list[Path]) -> Callable[[list[str]], list[str]]:
    """Policy paths -> the same with each changed one replaced by its old version: paired in order when as
    many old paths as new are given (a file for a file, a directory's file for the same file in the old
    directory); otherwise every old path stands for all the new ones."""

    def swap(paths: list[str]) -> list[str]:
        result: list[str] = []
        for raw in paths:
            path = Path(raw).resolve()
            hit = next((index for index, changed in enumerate(new) if path == changed or path.is_relative_to(changed)),
                       None)
            if hit is None:
                result.append(raw)
            elif len(old) == len(new):
                inside = path.relative_to(new[hit])
                result.append(str(old[hit] / inside) if inside.parts else str(old[hit]))
            else:
                result.extend(str(p) for p in old)
        return list(dict.fromkeys(result))

    return swap
