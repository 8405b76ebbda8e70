from __future__ import annotations

import pytest

from controller.cache.store import CONTROLLER_UID_INDEX, NAMESPACE_INDEX, Store
from tests.unit.controller.fake_source import pod


def owned(name: str, rv: str, uid: str, ns: str = "ns") -> dict:
    return pod(
        name,
        rv,
        ns,
        ownerReferences=[{"uid": "other", "controller": False}, {"uid": uid, "controller": True}],
    )


def names(objs: list[dict]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_indexes_follow_updates_and_deletes() -> None:
    s = Store()
    s.upsert(owned("a", "1", "job-1"))
    s.upsert(owned("b", "2", "job-1"))
    s.upsert(owned("c", "3", "job-2", ns="other"))
    assert names(s.by_index(CONTROLLER_UID_INDEX, "ns/job-1")) == ["a", "b"]
    assert names(s.by_index(CONTROLLER_UID_INDEX, "ns/other")) == [], "non-controller refs ignored"
    assert names(s.by_index(NAMESPACE_INDEX, "other")) == ["c"]
    # an ownerReference names no namespace: a claim from another one is another owner's
    assert names(s.by_index(CONTROLLER_UID_INDEX, "ns/job-2")) == []
    assert names(s.by_index(CONTROLLER_UID_INDEX, "other/job-2")) == ["c"]

    s.upsert(owned("b", "4", "job-2"))  # re-owned
    assert names(s.by_index(CONTROLLER_UID_INDEX, "ns/job-1")) == ["a"]
    assert names(s.by_index(CONTROLLER_UID_INDEX, "ns/job-2")) == ["b"]

    assert s.delete("ns/a") is not None
    assert s.by_index(CONTROLLER_UID_INDEX, "ns/job-1") == []
    assert s.get("ns", "a") is None
    assert s.delete("ns/a") is None


def test_unknown_index_is_an_error() -> None:
    with pytest.raises(KeyError):
        Store().by_index("nope", "x")


def test_replace_reports_added_updated_deleted() -> None:
    s = Store()
    s.upsert(pod("keep", "1"))
    s.upsert(pod("gone", "2"))
    result = s.replace([pod("keep", "5"), pod("new", "6")])
    assert names(result.added) == ["new"]
    assert [
        (o["metadata"]["resourceVersion"], n["metadata"]["resourceVersion"])
        for o, n in result.updated
    ] == [("1", "5")]
    assert names(result.deleted) == ["gone"]
    assert sorted(s.keys()) == ["ns/keep", "ns/new"]
    assert names(s.by_index(NAMESPACE_INDEX, "ns")) == ["keep", "new"]


def test_cluster_scoped_keys() -> None:
    s = Store()
    s.upsert({"metadata": {"name": "node-1", "resourceVersion": "1"}})
    assert s.get_by_key("node-1") is not None
    assert s.get("", "node-1") is not None
