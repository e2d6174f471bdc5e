"""Words of Placer's messages: counted nouns, and the one "did you mean": a misspelt field, parameter, action
or selector key is met with the closest known name, else with the names there are.

difflib's ratio (twice the matched characters over both lengths) at 0.6, the cutoff `get_close_matches`
defaults to: `maxSpotPercent` finds `maxSpotPercentage` (0.90), `namespaceSelctor` `namespaceSelector`
(0.97), `matchLabel` `matchLabels` (0.95), while unrelated names stay below it.
"""

import difflib
from collections.abc import Iterable

CUTOFF = 0.6


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to `name`, if one is close enough to be what was meant."""
    found = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def listed(names: Iterable[str], limit: int = 12) -> str:
    """Names for a message: the first `limit`, then how many more."""
    names = list(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def unknown_name(message: str, name: str, known: Iterable[str]) -> str:
    """`message` (which says `name` is unknown) with `; did you mean `x`?` for the closest known name, else
    with the known names (in the order given): `unknown parameter for spot-share; did you mean
    `maxSpotPercentage`?`."""
    known = list(known)
    close = closest(name, known)
    if close is not None:
        return f"{message}; did you mean `{close}`?"
    return f"{message} (known: {listed(known, limit=len(known))})" if known else message


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """`1 error`, `2 errors`, `1 policy`: a count with its noun."""
    return f"{count} {singular if count == 1 else plural or singular + 's'}"
