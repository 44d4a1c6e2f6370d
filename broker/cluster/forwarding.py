"""Requests that only the controller may carry out, sent on to it (Kafka's forwarding).

A broker that is not the controller re-sends CreateTopics, DeleteTopics and
CreatePartitions, as they came, to the controller named in the image, over the
inter-broker client, and answers with the controller's response. While no controller is
elected (an election under way: the last one's lease ended) it waits for one, at most
ELECTION_WAIT_S, as Kafka's forwarding waits for its controller: only then does the client
hear NOT_CONTROLLER.
"""

from __future__ import annotations

from broker.base.caller import Caller
from broker.net.client import BrokerClient, BrokerUnreachable
from broker.security.client import ClientSecurity
from broker.security.forwarded import forwarding_client_id
from broker.store.etcd_store import EtcdMetadataStore
from broker.store.image import ClusterImage
from protocol.messages import Request, Response

FORWARD_TIMEOUT_S = 30.0
ELECTION_WAIT_S = 15.0


class NoController(BrokerUnreachable):
    """No controller is elected, or it cannot be reached."""


class ControllerChannel:
    def __init__(
        self, store: EtcdMetadataStore, node_id: int, security: ClientSecurity | None = None
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.security = security
        self._client: BrokerClient | None = None

    def _controller_client(self) -> BrokerClient:
        image = self.store.image
        controller = image.controller
        registration = image.brokers.get(controller.node_id) if controller is not None else None
        if registration is None:
            raise NoController("no controller is elected")
        client = self._client
        if client is None or (client.host, client.port) != (registration.host, registration.port):
            client = self._client = BrokerClient(
                registration.host, registration.port, f"gregor-forward-{self.node_id}", security=self.security
            )
        return client

    async def call(self, request: Request, version: int, original: Caller | None = None) -> Response:
        """Forward `request`; `original` (who sent it here) rides in the client id."""
        await self.store.wait_for(_controller_known, ELECTION_WAIT_S)
        client = self._controller_client()
        client_id = forwarding_client_id(client.client_id, original) if original is not None else None
        return await client.call(request, version, timeout_s=FORWARD_TIMEOUT_S, client_id=client_id)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _controller_known(image: ClusterImage) -> bool:
    return image.controller is not None and image.controller.node_id in image.brokers
