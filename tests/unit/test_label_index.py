"""`LabelIndex`: the names a selector may select, found by label instead of by testing every name."""

from webhook.support.selectors import LabelIndex, LabelSelector


def selector(raw: dict[str, object]) -> LabelSelector:
    found = LabelSelector.from_object(raw)
    assert found is not None
    return found


def index_of(**namespaces: dict[str, str]) -> LabelIndex:
    index = LabelIndex()
    for name, labels in namespaces.items():
        index.put(name, labels)
    return index


def test_candidates_are_a_superset_of_what_the_selector_selects_and_narrow_where_labels_allow() -> None:
    labels = {"a": {"team": "ml", "env": "prod"}, "b": {"team": "web", "env": "prod"}, "c": {"team": "ml"},
              "d": {}}
    index = index_of(**labels)
    cases: list[tuple[dict[str, object], set[str]]] = [
        ({"matchLabels": {"team": "ml"}}, {"a", "c"}),
        ({"matchLabels": {"team": "ml", "env": "prod"}}, {"a", "c"}),  # the narrowest term: team=ml
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["web", "ops"]}]}, {"b"}),
        ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, {"a", "b"}),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["ml"]}]}, {"a", "b", "c", "d"}),
        ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, {"a", "b", "c", "d"}),
        ({}, {"a", "b", "c", "d"}),
    ]
    for raw, expected in cases:
        chosen = selector(raw)
        assert index.candidates(chosen) == expected, raw
        assert {name for name, own in labels.items() if chosen.matches(own)} <= index.candidates(chosen), raw
    assert index.candidates(None) == {"a", "b", "c", "d"}


def test_a_name_put_again_or_removed_leaves_no_trace_of_its_old_labels() -> None:
    index = index_of(a={"team": "ml"}, b={"team": "ml"})
    index.put("a", {"team": "web"})
    assert index.candidates(selector({"matchLabels": {"team": "ml"}})) == {"b"}
    assert index.candidates(selector({"matchLabels": {"team": "web"}})) == {"a"}
    index.remove("b")
    index.remove("missing")
    assert index.candidates(selector({"matchLabels": {"team": "ml"}})) == set()
    assert len(index) == 1
