"""Metadata's partitions are kept per topic while the topic's token is unchanged: the image
numbers each topic's last change and the brokers' last, and a token read from a replaced image
never matches its successor's."""

from __future__ import annotations

from broker.api.answers import TopicAnswers
from broker.cluster.view import BrokerInfo, ClusterView
from broker.store.image import BrokerRegistration, ClusterImage, PartitionState, encode
from protocol.types import LeaderEpoch, NodeId


def _image() -> ClusterImage:
    image = ClusterImage()
    for n in (1, 2):
        image.apply(f"brokers/{n}", encode(BrokerRegistration(NodeId(n), "localhost", 9090 + n)))
    for topic in ("a", "b"):
        for index in (0, 1):
            state = PartitionState.initial((NodeId(1), NodeId(2)), {NodeId(1), NodeId(2)})
            image.apply(f"partitions/{topic}/{index}", encode(state))
    return image


def _view(holder: list[ClusterImage]) -> ClusterView:
    return ClusterView(lambda: holder[-1], BrokerInfo(1, "localhost", 9091, None), "cluster")


def test_a_topic_token_changes_with_the_topic_or_the_brokers_only() -> None:
    holder = [_image()]
    view, image = _view(holder), holder[-1]
    a, b = view.topic_token("a"), view.topic_token("b")
    assert a is not None and b is not None and view.topic_token("missing") is None
    moved = image.partitions[("a", 1)].with_leader(NodeId(2), (NodeId(2),))
    image.apply("partitions/a/1", encode(moved))
    assert view.topic_token("a") != a and view.topic_token("b") == b
    image.apply("brokers/2", None)  # partitions led by 2 lose their leader: every topic changes
    assert view.topic_token("b") != b
    holder.append(_image())  # the same records in a new image: new numbers
    assert view.topic_token("b") not in (b, None)


def test_answers_are_kept_at_their_key_and_rebuilt_when_it_changes() -> None:
    answers: TopicAnswers[list[int]] = TopicAnswers()
    built: list[str] = []

    def build(what: str) -> list[int]:
        built.append(what)
        return [len(built)]

    first = answers.get("a", (1,), lambda: build("a"))
    assert answers.get("a", (1,), lambda: build("again")) is first
    assert answers.get("a", (2,), lambda: build("changed")) == [2]
    assert answers.get("a", None, lambda: build("unkeyed")) == [3]
    assert answers.get("a", None, lambda: build("unkeyed again")) == [4]  # None keeps nothing
    answers.get("b", (1,), lambda: build("b"))
    answers.retain(["a"])
    assert len(answers) == 0  # "a" was dropped by its unkeyed build, "b" is gone
    assert built == ["a", "changed", "unkeyed", "unkeyed again", "b"]


def test_a_leader_epoch_change_is_a_change_of_its_topic() -> None:
    image = _image()
    before = image.topic_changes["b"]
    state = image.partitions[("b", 0)]
    image.apply("partitions/b/0", encode(state.with_leader(state.leader, state.isr)))
    assert image.topic_changes["b"] > before
    assert image.partitions[("b", 0)].leader_epoch == LeaderEpoch(state.leader_epoch + 1)
