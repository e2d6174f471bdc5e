"""Namespaces published in shards: a change costs one shard, a lookup one stat, and a bad shard never an error."""

import logging
from pathlib import Path

import pytest

from webhook.policy.snapshot import LayeredNamespaces, NamespaceInfo
from webhook.policy.state.namespace_shards import NamespaceShards, entry_of
from webhook.policy.state.shards import SHARDS, ShardWriter, shard_of, shard_path


class NamespaceShardWriter:
    """What the controller's namespace sink does: each namespace's projection into its shard."""

    def __init__(self, directory: Path) -> None:
        self.shards = ShardWriter(directory)

    def __len__(self) -> int:
        return len(self.shards)

    def replace(self, infos: dict[str, NamespaceInfo]) -> int:
        return self.shards.replace({name: entry_of(info) for name, info in infos.items()})

    def put(self, namespace: NamespaceInfo) -> bool:
        return self.shards.put(namespace.name, entry_of(namespace))

    def delete(self, name: str) -> bool:
        return self.shards.delete(name)


def info(name: str, team: str = "a") -> NamespaceInfo:
    return NamespaceInfo(name, {"team": team}, {"owner": "x"},
                         {"metadata": {"uid": f"uid-{name}"}, "status": {"phase": "Active"}})


def written(directory: Path) -> dict[str, int]:
    return {path.name: path.stat().st_ino for path in directory.glob("*.json")}


def test_a_namespace_reads_back_as_namespace_object_shows_it(tmp_path: Path) -> None:
    writer = NamespaceShardWriter(tmp_path)
    writer.replace({"team-a": info("team-a")})
    found = NamespaceShards(tmp_path)["team-a"]
    assert found == info("team-a")
    assert found.as_cel()["metadata"]["uid"] == "uid-team-a"
    assert found.as_cel()["status"] == {"phase": "Active"}
    assert NamespaceShards(tmp_path).get("missing") is None
    assert "missing" not in NamespaceShards(tmp_path)


def test_one_change_rewrites_one_shard_and_an_unchanged_namespace_none(tmp_path: Path) -> None:
    writer = NamespaceShardWriter(tmp_path)
    assert writer.replace({f"ns-{i}": info(f"ns-{i}") for i in range(1000)}) == SHARDS
    before = written(tmp_path)
    assert len(before) == SHARDS and len(writer) == 1000

    assert not writer.put(info("ns-5")), "same content: nothing written"
    assert writer.put(info("ns-5", team="b"))
    after = written(tmp_path)
    assert [name for name in before if before[name] != after[name]] == [shard_path(Path(), shard_of("ns-5")).name]
    assert writer.replace({f"ns-{i}": info(f"ns-{i}", "b" if i == 5 else "a") for i in range(1000)}) == 0

    assert writer.delete("ns-5") and not writer.delete("ns-5")
    assert "ns-5" not in NamespaceShards(tmp_path) and len(NamespaceShards(tmp_path)) == 999


def test_an_emptied_shard_is_removed_and_a_new_writer_clears_what_an_old_one_left(tmp_path: Path) -> None:
    NamespaceShardWriter(tmp_path).replace({"old": info("old"), "kept": info("kept")})
    NamespaceShardWriter(tmp_path).replace({"kept": info("kept")})  # a restarted controller's first list
    assert sorted(NamespaceShards(tmp_path)) == ["kept"]
    assert len(written(tmp_path)) == 1


def test_a_reader_parses_a_shard_again_only_when_it_changed(tmp_path: Path) -> None:
    writer = NamespaceShardWriter(tmp_path)
    writer.replace({"a": info("a")})
    reader = NamespaceShards(tmp_path)
    first = reader["a"]
    assert reader["a"] is first, "unchanged shard: the same parsed namespace"
    writer.put(info("a", team="b"))
    assert reader["a"].labels == {"team": "b", "kubernetes.io/metadata.name": "a"}


def test_what_a_reader_keeps_is_bounded_whatever_the_number_of_namespaces(tmp_path: Path) -> None:
    NamespaceShardWriter(tmp_path).replace({f"ns-{i}": info(f"ns-{i}") for i in range(2000)})
    reader = NamespaceShards(tmp_path, kept=4)
    assert all(reader[f"ns-{i}"].name == f"ns-{i}" for i in range(2000))
    assert reader.shards_kept == 4


def test_an_unreadable_shard_reads_as_missing_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    NamespaceShardWriter(tmp_path).replace({"a": info("a")})
    shard_path(tmp_path, shard_of("a")).write_text("{not json")
    with caplog.at_level(logging.ERROR, logger="webhook.policy"):  # the CLI tests quiet it in-process
        assert NamespaceShards(tmp_path).get("a") is None
    assert "unreadable" in caplog.text and "read from the API server" in caplog.text


def test_layers_answer_first_wins_without_copying(tmp_path: Path) -> None:
    NamespaceShardWriter(tmp_path).replace({"both": info("both", "cluster"), "cluster-only": info("cluster-only")})
    layered = LayeredNamespaces([NamespaceShards(tmp_path), {"both": info("both", "file"),
                                                             "file-only": info("file-only")}])
    assert layered["both"].labels == {"team": "cluster", "kubernetes.io/metadata.name": "both"}
    assert layered.get("file-only") == info("file-only") and layered.get("nowhere") is None
    assert sorted(layered) == ["both", "cluster-only", "file-only"]
    with pytest.raises(KeyError):
        layered["nowhere"]


def test_layers_are_reduced_to_the_fewest_that_answer_the_same(tmp_path: Path) -> None:
    shards = NamespaceShards(tmp_path)
    first, second = {"a": info("a", "first")}, {"a": info("a", "second"), "b": info("b")}
    merged = LayeredNamespaces.of([first, LayeredNamespaces([second, {}])])
    assert isinstance(merged, dict) and merged["a"].labels["team"] == "first" and set(merged) == {"a", "b"}
    layered = LayeredNamespaces.of([shards, first, second])
    assert isinstance(layered, LayeredNamespaces) and layered._layers[0] is shards and len(layered._layers) == 2
