// The online-shop consume-transform-produce processor of seed 003 with the Apache Kafka Java
// client: the twin of tests/integration/eos_processor.py (same arguments, hooks and JSON events).
//
//   java -cp '.deps/java/*' EosProcessor.java --bootstrap B --group G --txn-id T \
//        --purchases P --invoices I --shipments S [--batch 10] [--idle-exit 1.0] [--max-seconds 90]
//        [--group-protocol classic|consumer]
//
// A read_committed KafkaConsumer in group G and a transactional KafkaProducer: each polled batch
// of purchases `purchase-<id>` becomes `invoice-<id>` + `shipment-<id>` and the consumed positions
// are committed with sendOffsetsToTransaction(offsets, consumer.groupMetadata()) in the same
// transaction. CRASH_AT=POINT:N (mid_sends, after_sends, after_send_offsets, before_commit,
// after_commit) halts the JVM there (Runtime.halt(137): no close, no shutdown hooks) in the N-th
// transaction. Exit 0 when every partition is ours, at its end, and idle for --idle-exit seconds.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class EosProcessor {
    static final Map<String, String> args = new HashMap<>();
    static String crashPoint = null;
    static int crashTxn = -1;
    static int txn = 0;
    static final Set<TopicPartition> assigned = new HashSet<>();

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static synchronized void emit(String event, String fields) {
        String t = String.format(Locale.ROOT, "%.3f", System.currentTimeMillis() / 1000.0);
        System.out.println("{\"event\":" + q(event) + ",\"t\":" + t + (fields.isEmpty() ? "" : "," + fields) + "}");
        System.out.flush();
    }

    static void hook(String point) {
        if (point.equals(crashPoint) && txn == crashTxn) {
            emit("crash", "\"point\":" + q(point) + ",\"txn\":" + txn);
            Runtime.getRuntime().halt(137);
        }
    }

    static String errorFields(Exception e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) root = root.getCause();
        return "\"name\":" + q(root.getClass().getSimpleName()) + ",\"str\":" + q(String.valueOf(e.getMessage()))
                + ",\"outer\":" + q(e.getClass().getSimpleName());
    }

    static String partitionsJson(Collection<TopicPartition> parts) {
        StringJoiner j = new StringJoiner(",", "[", "]");
        parts.stream().map(TopicPartition::partition).sorted().forEach(p -> j.add(String.valueOf(p)));
        return j.toString();
    }

    public static void main(String[] argv) throws Exception {
        for (int i = 0; i + 1 < argv.length; i += 2) args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        String crash = System.getenv("CRASH_AT");
        if (crash != null && !crash.isEmpty()) {
            String[] parts = crash.split(":");
            crashPoint = parts[0];
            crashTxn = parts.length > 1 ? Integer.parseInt(parts[1]) : 1;
        }
        String bootstrap = args.get("bootstrap"), purchases = args.get("purchases");
        String invoices = args.get("invoices"), shipments = args.get("shipments");
        int batch = Integer.parseInt(args.getOrDefault("batch", "10"));
        double idleExit = Double.parseDouble(args.getOrDefault("idle-exit", "1.0"));
        double maxSeconds = Double.parseDouble(args.getOrDefault("max-seconds", "90"));
        int session = Integer.parseInt(args.getOrDefault("session-timeout-ms", "2000"));

        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        c.put(ConsumerConfig.CLIENT_ID_CONFIG, "eos-java-" + args.get("txn-id"));
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(batch));
        if (args.getOrDefault("group-protocol", "classic").equals("consumer")) {
            // KIP-848: the broker sets the session timeout and heartbeat interval and assigns
            c.put("group.protocol", "consumer");
        } else {
            c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, String.valueOf(session));
            c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, String.valueOf(Math.max(100, session / 5)));
            c.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, RangeAssignor.class.getName());
        }
        c.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        c.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "50");
        c.put(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG, "50");
        c.put(ConsumerConfig.RECONNECT_BACKOFF_MS_CONFIG, "50");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args.get("txn-id"));
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "eos-java-" + args.get("txn-id"));
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, args.getOrDefault("txn-timeout-ms", "10000"));
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "2");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "50");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "50");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        int code;
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        try {
            code = run(consumer, producer, purchases, invoices, shipments, idleExit, maxSeconds);
        } catch (ProducerFencedException | OutOfOrderSequenceException | InvalidProducerEpochException e) {
            emit("fatal", errorFields(e));
            code = 3;
        }
        try {
            consumer.close(Duration.ofSeconds(5));
        } catch (Exception e) {
            // best effort on the way out
        }
        producer.close(Duration.ofSeconds(5));
        emit("exit", "\"code\":" + code);
        System.exit(code);
    }

    static boolean caughtUp(KafkaConsumer<byte[], byte[]> consumer, String purchases) {
        int nparts = consumer.partitionsFor(purchases, Duration.ofSeconds(5)).size();
        if (assigned.size() != nparts) return false;
        Map<TopicPartition, Long> ends = consumer.endOffsets(assigned, Duration.ofSeconds(5));
        for (TopicPartition tp : assigned) {
            if (consumer.position(tp, Duration.ofSeconds(5)) < ends.get(tp)) return false;
        }
        return true;
    }

    static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        if (assigned.isEmpty()) return;
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned, Duration.ofSeconds(10));
        StringJoiner j = new StringJoiner(",", "{", "}");
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata om = committed.get(tp);
            if (om == null) consumer.seekToBeginning(List.of(tp));
            else consumer.seek(tp, om.offset());
            j.add(q(String.valueOf(tp.partition())) + ":" + (om == null ? -1 : om.offset()));
        }
        emit("rewound", "\"offsets\":" + j);
    }

    static int run(KafkaConsumer<byte[], byte[]> consumer, KafkaProducer<byte[], byte[]> producer,
                   String purchases, String invoices, String shipments, double idleExit, double maxSeconds) {
        producer.initTransactions();
        emit("initialized", "");
        consumer.subscribe(List.of(purchases), new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                assigned.removeAll(parts);
                emit("revoked", "\"partitions\":" + partitionsJson(parts));
            }

            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                assigned.addAll(parts);
                emit("assigned", "\"partitions\":" + partitionsJson(parts));
            }
        });
        long started = System.currentTimeMillis();
        long idleSince = started;
        while (true) {
            if (System.currentTimeMillis() - started > maxSeconds * 1000) {
                emit("max_seconds", "");
                return 4;
            }
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(300));
            if (records.isEmpty()) {
                if (System.currentTimeMillis() - idleSince >= idleExit * 1000 && caughtUp(consumer, purchases)) {
                    emit("done", "\"txns\":" + txn);
                    return 0;
                }
                continue;
            }
            idleSince = System.currentTimeMillis();
            ConsumerGroupMetadata meta = consumer.groupMetadata();
            txn++;
            producer.beginTransaction();
            List<ConsumerRecord<byte[], byte[]>> list = new ArrayList<>();
            records.forEach(list::add);
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            int half = list.size() / 2;
            for (int i = 0; i < list.size(); i++) {
                ConsumerRecord<byte[], byte[]> r = list.get(i);
                String id = new String(r.value(), StandardCharsets.UTF_8).replaceFirst("^purchase-", "");
                byte[] key = id.getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(invoices, key, ("invoice-" + id).getBytes(StandardCharsets.UTF_8)));
                producer.send(new ProducerRecord<>(shipments, key, ("shipment-" + id).getBytes(StandardCharsets.UTF_8)));
                offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                if (i + 1 == half) hook("mid_sends");
            }
            String where = "send_offsets";
            try {
                producer.flush();
                hook("after_sends");
                producer.sendOffsetsToTransaction(offsets, meta);
                hook("after_send_offsets");
                producer.flush();
                hook("before_commit");
                where = "commit";
                producer.commitTransaction();
            } catch (ProducerFencedException | OutOfOrderSequenceException | InvalidProducerEpochException e) {
                throw e;
            } catch (KafkaException e) {
                emit("txn_error", "\"where\":" + q(where) + ",\"txn\":" + txn + "," + errorFields(e));
                producer.abortTransaction();
                emit("aborted", "\"txn\":" + txn);
                rewind(consumer);
                continue;
            }
            StringJoiner j = new StringJoiner(",", "{", "}");
            offsets.forEach((tp, om) -> j.add(q(String.valueOf(tp.partition())) + ":" + om.offset()));
            emit("committed", "\"txn\":" + txn + ",\"records\":" + list.size() + ",\"offsets\":" + j
                    + ",\"first\":" + q(new String(list.get(0).value(), StandardCharsets.UTF_8))
                    + ",\"last\":" + q(new String(list.get(list.size() - 1).value(), StandardCharsets.UTF_8)));
            hook("after_commit");
        }
    }
}
