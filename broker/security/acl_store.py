"""The ACLs in the metadata store, and the authorizer's index kept equal to them.

One broker: the list in the local metadata file, changed here and loaded into the
authorizer at once. A cluster: one etcd key per ACL (`<root>/acls/<digest>`); every
broker's image follows the store's watch and each change reloads its authorizer's index, so
an ACL written on the controller applies on every broker as soon as its watch delivers it
(milliseconds; the tests hold it to a second). Writes happen on the controller (the
handlers forward them there).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.security.acl import AclBinding, AclFilter

if TYPE_CHECKING:
    from broker.security.authorizer import AclAuthorizer
    from broker.store.etcd_store import EtcdMetadataStore
    from broker.store.local_store import LocalMetadataStore

CLUSTER_WRITE_WAIT_S = 5.0


def digest(acl: AclBinding) -> str:
    return hashlib.sha256(acl.key.encode()).hexdigest()[:32]


def _matching(acls: Sequence[AclBinding], wanted: AclFilter) -> list[AclBinding]:
    return [acl for acl in acls if wanted.matches(acl)]


class LocalAcls:
    """ACLs of a single broker, in its metadata file."""

    def __init__(self, store: LocalMetadataStore, authorizer: AclAuthorizer) -> None:
        self._store = store
        self._authorizer = authorizer
        self._acls = [AclBinding.from_json(a) for a in store.acls()]
        authorizer.load(self._acls)

    def describe(self, wanted: AclFilter) -> list[AclBinding]:
        return _matching(self._acls, wanted)

    async def create(self, acls: Sequence[AclBinding]) -> None:
        self._replace(list(dict.fromkeys([*self._acls, *acls])))

    async def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        found = [_matching(self._acls, f) for f in filters]
        gone = {acl for matched in found for acl in matched}
        if gone:
            self._replace([acl for acl in self._acls if acl not in gone])
        return found

    def _replace(self, acls: list[AclBinding]) -> None:
        self._store.set_acls([acl.to_json() for acl in acls])
        self._acls = acls
        self._authorizer.load(acls)


class ClusterAcls:
    """ACLs of a cluster, in etcd; the authorizer reloads from the image on every change."""

    def __init__(self, store: EtcdMetadataStore, authorizer: AclAuthorizer) -> None:
        self._store = store
        self._authorizer = authorizer
        store.subscribe(self._on_change)
        self._reload()

    def _on_change(self, key: str) -> None:
        if key == "" or key.startswith("acls/"):
            self._reload()

    def _reload(self) -> None:
        self._authorizer.load(self._current())

    def _current(self) -> list[AclBinding]:
        return [AclBinding.from_json(a) for a in self._store.image.acls.values()]

    def describe(self, wanted: AclFilter) -> list[AclBinding]:
        return _matching(self._current(), wanted)

    async def create(self, acls: Sequence[AclBinding]) -> None:
        wanted = {digest(acl): acl.to_json() for acl in acls}
        await self._store.put_acls(wanted)
        await self._store.wait_for(lambda image: wanted.keys() <= image.acls.keys(), CLUSTER_WRITE_WAIT_S)

    async def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        found = [self.describe(f) for f in filters]
        gone = sorted({digest(acl) for matched in found for acl in matched})
        await self._store.delete_acls(gone)
        await self._store.wait_for(lambda image: not set(gone) & image.acls.keys(), CLUSTER_WRITE_WAIT_S)
        return found
