"""Print the cluster image as JSON (run inside the client namespace by `ChaosCluster.view`):
`python -m tests.chaos.image ETCD_URL`."""

from __future__ import annotations

import asyncio
import json
import sys

from broker.cluster.address import EtcdAddress
from broker.cluster.etcd_store import EtcdMetadataStore


async def _view(url: str) -> dict[str, object]:
    store = EtcdMetadataStore(EtcdAddress.parse(url))
    await store.open(attempts=2, interval_s=0.2)
    try:
        held = await _controller_held(store)
    finally:
        await store.close()
    image = store.image
    return {
        "brokers": sorted(image.brokers),
        "controller": image.controller.node_id if image.controller else None,
        "controller_held": held,
        "leaders": {f"{t}/{p}": s.leader for (t, p), s in image.partitions.items()},
    }


async def _controller_held(store: EtcdMetadataStore) -> bool:
    """Whether the controller record is held by its broker's registration lease (a record
    under no lease outlives its broker: no broker campaigns again; 6527edb)."""
    root = store.address.root
    record = await store.client.get(f"{root}/controller".encode())
    if record is None or not record.lease:
        return False
    node = json.loads(bytes(record.value))["node_id"]
    registration = await store.client.get(f"{root}/brokers/{node}".encode())
    return registration is not None and registration.lease == record.lease


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_view(sys.argv[1]))))
