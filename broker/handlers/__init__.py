"""Handlers, one module per API family; HANDLER_TABLE drives dispatch and ApiVersions."""

from broker.api.registry import build_table
from broker.handlers import (
    acls,
    api_versions,
    configs,
    consumer_groups,
    elect_leaders,
    fetch,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    offsets,
    produce,
    producers,
    reassignments,
    records,
    sasl,
    scram_credentials,
    topics,
    transactions,
    txn_markers,
)

HANDLER_TABLE = build_table(
    [
        api_versions, metadata, produce, producers, fetch, list_offsets,
        topics, configs, records, log_dirs, transactions, txn_markers, groups, consumer_groups, offsets,
        elect_leaders,
        reassignments, acls, sasl, scram_credentials,
    ]
)
