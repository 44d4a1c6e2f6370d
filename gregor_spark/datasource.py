"""The data source Spark sees: `spark.read/readStream/write/writeStream.format("gregor_kafka")`."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from gregor_spark.sink import KafkaBatchWriter, KafkaStreamWriter
from gregor_spark.source import SCHEMA, KafkaBatchReader, KafkaStreamReader

FORMAT = "gregor_kafka"


class KafkaDataSource(DataSource):
    """Kafka rows in (Spark's Kafka schema), rows out exactly once (key, value, topic, ...)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(self.options)

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        return KafkaBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(self.options, schema)


def register(spark: SparkSession) -> None:
    spark.dataSource.register(KafkaDataSource)
