"""The inter-broker client against a real broker: pipelined calls answered by
correlation id (flexible and non-flexible versions), in-flight calls failed
when the broker dies, and a fresh connection once it is back."""

from __future__ import annotations

import asyncio

import pytest

from broker.net.client import BrokerClient, BrokerUnreachable
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS
from tests.integration.harness import BrokerProcess
from tests.integration.wire import create_topics_request, metadata_request

API_VERSIONS = 18


def api_versions_request(version: int) -> object:
    return REQUESTS[API_VERSIONS](version=version, client_software_name="gregor", client_software_version="0")


async def test_pipelined_calls_each_get_their_own_answer(broker: BrokerProcess) -> None:
    client = BrokerClient("127.0.0.1", broker.port, "gregor-test")
    try:
        versions = await client.call(api_versions_request(3), 3)
        assert versions.error_code == ErrorCode.NONE and versions.api_keys
        created = await client.call(create_topics_request([f"t{i}" for i in range(5)], 2, version=5), 5)
        assert all(t.error_code == ErrorCode.NONE for t in created.topics)
        answers = await asyncio.gather(*(
            client.call(metadata_request([f"t{i % 5}"], version=v), v) for i, v in enumerate([1, 9, 12] * 10)
        ))
        assert [a.topics[0].name for a in answers] == [f"t{i % 5}" for i in range(30)]
        assert all(len(a.topics[0].partitions) == 2 for a in answers)
    finally:
        await client.close()


async def test_a_dead_broker_fails_calls_and_a_restarted_one_is_reached_again(broker: BrokerProcess) -> None:
    client = BrokerClient("127.0.0.1", broker.port, "gregor-test", connect_timeout_s=1)
    try:
        await client.call(api_versions_request(3), 3)
        broker.kill9()
        with pytest.raises(BrokerUnreachable):
            await client.call(metadata_request(None, version=9), 9, timeout_s=5)
        broker.start()
        answer = await client.call(metadata_request(None, version=9), 9, timeout_s=5)
        assert answer.brokers[0].port == broker.port
    finally:
        await client.close()
