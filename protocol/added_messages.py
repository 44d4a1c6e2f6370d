"""Message classes for the APIs kafka-python lacks, built from ``protocol/schemas/*.json``.

The schemas are data in Kafka's JSON message format (the versions Apache Kafka 4.3 serves);
kafka-python's schema-driven ``ApiMessage`` turns each into a class exactly as it does its
own. ``protocol.messages`` indexes these with kafka-python's; an API kafka-python ships
later is taken from kafka-python.
"""

from __future__ import annotations

import types

from kafka.protocol.api_message import ApiMessage

import protocol.schemas as _schemas

NAMES = (
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
)


def _message_class(name: str) -> type[ApiMessage]:
    """The class of ``protocol/schemas/<name>.json`` (the metaclass loads it by the name)."""
    return types.new_class(
        name, (ApiMessage,), {"load_json": _schemas}, lambda ns: ns.update(__module__=__name__)
    )


ADDED: tuple[type[ApiMessage], ...] = tuple(_message_class(name) for name in NAMES)
