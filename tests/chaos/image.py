"""Print the cluster image as JSON (run inside the client namespace by `ChaosCluster.view`):
`python -m tests.chaos.image ETCD_URL`."""

from __future__ import annotations

import asyncio
import json
import sys

from broker.store.address import EtcdAddress
from broker.store.etcd_store import EtcdMetadataStore


async def _view(url: str) -> dict[str, object]:
    store = EtcdMetadataStore(EtcdAddress.parse(url))
    await store.open(attempts=2, interval_s=0.2)
    try:
        held = await store.controller_held()
    finally:
        await store.close()
    image = store.image
    return {
        "brokers": sorted(image.brokers),
        "controller": image.controller.node_id if image.controller else None,
        "controller_held": held,
        "leaders": {f"{t}/{p}": s.leader for (t, p), s in image.partitions.items()},
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_view(sys.argv[1]))))
