"""The online shop pipeline: purchases -> invoices and shipments, exactly once, on PySpark.

One streaming query reads `purchases` read_committed with the gregor_kafka source and
writes an invoice and a shipment per purchase through the exactly-once gregor_kafka sink
(each row carries its output topic). Everything an output row holds is derived from the
purchase (the shipment id too), so a replayed batch writes the same rows.

    python -m gregor_spark.shop topics   --bootstrap 127.0.0.1:9092
    python -m gregor_spark.shop generate --bootstrap 127.0.0.1:9092 --count 1000
    python -m gregor_spark.shop run      --bootstrap 127.0.0.1:9092 --checkpoint /tmp/shop-ckpt
    python -m gregor_spark.shop check    --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from gregor_spark import kafka
from gregor_spark.source import OffsetRange, read_range

if TYPE_CHECKING:  # pyspark is imported where the pipeline runs
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

PURCHASE_SCHEMA = (
    "purchase_id string, user_id string, user_full_name string, product_id string, "
    "quantity int, total_price double"
)
ADDRESS = "SomeStreet 12/18, 00-006 Warsaw"


@dataclass(frozen=True, slots=True)
class Topics:
    purchases: str = "purchases"
    invoices: str = "invoices"
    shipments: str = "shipments"


# -- the pipeline -------------------------------------------------------------------------


def shop_rows(purchases: DataFrame, topics: Topics) -> DataFrame:
    """(topic, key, value) rows: an invoice and a shipment per purchase record."""
    from pyspark.sql import functions as F

    p = (purchases.select(F.from_json(F.col("value").cast("string"), PURCHASE_SCHEMA).alias("p"))
         .select("p.*").where(F.col("purchase_id").isNotNull()))
    invoice = F.to_json(F.struct("purchase_id", "user_id", "product_id", "quantity", "total_price"))
    shipment = F.to_json(F.struct(
        F.concat(F.lit("ship-"), F.col("purchase_id")).alias("shipment_id"), "purchase_id",
        "product_id", "user_full_name", F.lit(ADDRESS).alias("address"), "quantity"))
    key = F.col("purchase_id")
    both = F.array(
        F.struct(F.lit(topics.invoices).alias("topic"), key.alias("key"), invoice.alias("value")),
        F.struct(F.lit(topics.shipments).alias("topic"), key.alias("key"), shipment.alias("value")),
    )
    return p.select(F.explode(both).alias("out")).select("out.*")


def start_pipeline(
    spark: SparkSession,
    bootstrap: str,
    checkpoint: str,
    topics: Topics = Topics(),
    trigger_ms: int = 500,
    available_now: bool = False,
    max_offsets: int | None = None,
    sink_options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start the query: purchases from the earliest offset on first start."""
    reader = (spark.readStream.format("gregor_kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topics.purchases).option("startingOffsets", "earliest"))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    writer = (shop_rows(reader.load(), topics).writeStream.format("gregor_kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("checkpointLocation", checkpoint)
              .queryName("shop"))
    for k, v in (sink_options or {}).items():
        writer = writer.option(k, v)
    trigger = {"availableNow": True} if available_now else {"processingTime": f"{trigger_ms} milliseconds"}
    return writer.trigger(**trigger).start()


# -- topics, purchases and the check ----------------------------------------------------


def create_topics(bootstrap: str, topics: Topics, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=kafka.TIMEOUT_S).topics
    new = [NewTopic(t, partitions if t == topics.purchases else 1, 1)
           for t in (topics.purchases, topics.invoices, topics.shipments) if t not in existing]
    for future in (admin.create_topics(new).values() if new else []):
        try:
            future.result(kafka.TIMEOUT_S)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise


def purchase(purchase_id: str, rng: random.Random) -> dict[str, Any]:
    quantity = rng.randint(1, 5)
    return {
        "purchase_id": purchase_id,
        "user_id": f"user-{rng.randint(1, 500)}",
        "user_full_name": rng.choice(["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra"]),
        "product_id": f"product-{rng.randint(1, 100)}",
        "quantity": quantity,
        "total_price": round(quantity * rng.uniform(1, 200), 2),
    }


def generate(
    bootstrap: str,
    topic: str,
    count: int,
    per_txn: int = 50,
    abort_every: int = 0,
    seed: int | None = None,
) -> list[str]:
    """Produce `count` purchases in transactions of `per_txn`; every `abort_every`-th
    transaction is aborted (cancelled carts). Returns the ids of the committed ones."""
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:8]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"shop-generator-{run}",
                         "linger.ms": 5})
    producer.init_transactions(kafka.TIMEOUT_S)
    committed: list[str] = []
    for n, first in enumerate(range(0, count, per_txn), start=1):
        ids = [f"{run}-{i}" for i in range(first, min(count, first + per_txn))]
        producer.begin_transaction()
        for pid in ids:
            producer.produce(topic, json.dumps(purchase(pid, rng)).encode(), pid.encode())
        if abort_every and n % abort_every == 0:
            producer.flush(kafka.TIMEOUT_S)
            producer.abort_transaction(kafka.TIMEOUT_S)
        else:
            producer.commit_transaction(kafka.TIMEOUT_S)
            committed.extend(ids)
    return committed


def committed_keys(bootstrap: str, topic: str) -> list[str]:
    """The keys of every record of `topic` a read_committed consumer sees now."""
    options = {"kafka.bootstrap.servers": bootstrap, "kafka.isolation.level": "read_committed"}
    consumer = kafka.open_consumer(options)
    try:
        marks = kafka.watermarks(consumer, kafka.partitions_of(consumer, [topic]))
    finally:
        consumer.close()
    return [bytes(row[0]).decode() for (t, p), (low, lso) in sorted(marks.items()) if lso > low
            for row in read_range(options, OffsetRange(t, p, low, lso))]


@dataclass(frozen=True, slots=True)
class Check:
    purchases: int
    invoices: int
    shipments: int
    missing: list[str]
    duplicated: list[str]
    unexpected: list[str]

    @property
    def exactly_once(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected)


def check(bootstrap: str, topics: Topics) -> Check:
    """Every committed purchase has exactly one invoice and one shipment, and nothing else."""
    purchases = set(committed_keys(bootstrap, topics.purchases))
    invoices = Counter(committed_keys(bootstrap, topics.invoices))
    shipments = Counter(committed_keys(bootstrap, topics.shipments))
    outputs = set(invoices) | set(shipments)
    return Check(
        len(purchases),
        sum(invoices.values()),
        sum(shipments.values()),
        missing=sorted(p for p in purchases if invoices[p] == 0 or shipments[p] == 0),
        duplicated=sorted(p for p in outputs if invoices[p] > 1 or shipments[p] > 1),
        unexpected=sorted(outputs - purchases),
    )


# -- command line -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    topics = Topics(args.purchases, args.invoices, args.shipments)
    if args.command == "topics":
        create_topics(args.bootstrap, topics, args.partitions)
    elif args.command == "generate":
        create_topics(args.bootstrap, topics)
        ids = generate(args.bootstrap, topics.purchases, args.count, args.per_txn, args.abort_every)
        print(f"committed {len(ids)} of {args.count} purchases", flush=True)
    elif args.command == "run":
        return _run(args, topics)
    elif args.command == "check":
        result = check(args.bootstrap, topics)
        print(f"purchases {result.purchases} invoices {result.invoices} shipments {result.shipments} "
              f"missing {len(result.missing)} duplicated {len(result.duplicated)} "
              f"unexpected {len(result.unexpected)}", flush=True)
        return 0 if result.exactly_once else 1
    return 0


def _run(args: argparse.Namespace, topics: Topics) -> int:
    from gregor_spark.session import local_session

    create_topics(args.bootstrap, topics)
    spark = local_session(args.master, app="gregor-shop")
    sink_options = dict(kv.split("=", 1) for kv in args.option)
    query = start_pipeline(spark, args.bootstrap, args.checkpoint, topics, args.trigger_ms,
                           args.available_now, args.max_offsets_per_trigger, sink_options)
    print(f"shop query {query.id} started", flush=True)
    try:
        query.awaitTermination()
    finally:
        spark.stop()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gregor_spark.shop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["topics", "generate", "run", "check"])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--purchases", default="purchases")
    parser.add_argument("--invoices", default="invoices")
    parser.add_argument("--shipments", default="shipments")
    parser.add_argument("--partitions", type=int, default=2, help="topics: partitions of purchases")
    parser.add_argument("--count", type=int, default=1000, help="generate: purchases")
    parser.add_argument("--per-txn", type=int, default=50, help="generate: purchases per transaction")
    parser.add_argument("--abort-every", type=int, default=0, help="generate: abort every Nth transaction")
    parser.add_argument("--checkpoint", default="shop-checkpoint", help="run: Spark's checkpoint dir")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--trigger-ms", type=int, default=500)
    parser.add_argument("--available-now", action="store_true", help="run: process what is there, stop")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="run: a sink option, e.g. kafka.transaction.timeout.ms=10000")
    return parser


if __name__ == "__main__":
    sys.exit(main())
