"""The SCRAM credentials in the metadata store: the local metadata file on one broker, one etcd
key per user and mechanism in a cluster (every broker's image follows etcd's watch, so a user
altered on one broker authenticates on the others as soon as the watch delivers it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from broker.security.scram import ScramCredential, ScramMechanism

if TYPE_CHECKING:
    from broker.store.etcd_store import EtcdMetadataStore
    from broker.store.local_store import LocalMetadataStore

Key = tuple[ScramMechanism, str]  # (mechanism, user)
CLUSTER_WRITE_WAIT_S = 5.0


def _name(key: Key) -> str:
    return f"{key[0].mechanism_name}/{key[1]}"


def _parse(name: str) -> Key | None:
    mechanism, _, user = name.partition("/")
    found = ScramMechanism.named(mechanism)
    return (found, user) if found is not None else None


class ScramCredentials:
    """Reads from a snapshot function (the local file's or the cluster image's credentials);
    writes through `put`."""

    def __init__(
        self, current: Callable[[], dict[str, list[Any]]],
        put: Callable[[dict[str, list[Any]], list[str]], Any],
    ) -> None:
        self._current = current
        self._put = put

    def lookup(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        found = self._current().get(_name((mechanism, user)))
        return ScramCredential.from_json(found) if found is not None else None

    def users(self) -> dict[str, list[tuple[ScramMechanism, int]]]:
        """Every user with a credential: its mechanisms and iterations."""
        found: dict[str, list[tuple[ScramMechanism, int]]] = {}
        for name, data in sorted(self._current().items()):
            if (key := _parse(name)) is not None:
                found.setdefault(key[1], []).append((key[0], ScramCredential.from_json(data).iterations))
        return found

    async def alter(self, upserts: dict[Key, ScramCredential], deletes: Iterable[Key]) -> None:
        result = self._put({_name(k): c.to_json() for k, c in upserts.items()}, [_name(k) for k in deletes])
        if result is not None:
            await result


def local_credentials(store: LocalMetadataStore) -> ScramCredentials:
    def put(puts: dict[str, list[Any]], deletes: list[str]) -> None:
        updated = {k: v for k, v in store.scram_credentials().items() if k not in deletes}
        store.set_scram_credentials({**updated, **puts})

    return ScramCredentials(store.scram_credentials, put)


def cluster_credentials(store: EtcdMetadataStore) -> ScramCredentials:
    async def put(puts: dict[str, list[Any]], deletes: list[str]) -> None:
        await store.put_scram(puts, deletes)
        await store.wait_for(
            lambda image: all(image.scram.get(k) == v for k, v in puts.items())
            and not set(deletes) & image.scram.keys(),
            CLUSTER_WRITE_WAIT_S,
        )

    return ScramCredentials(lambda: store.image.scram, put)
