// The transactional clients of a chaos campaign with the Apache Kafka Java client 4.3
// (tests/chaos/transactions.py runs it on the clients' host, one JVM for both roles):
//
//   java -cp '.deps/java4/*' tests/chaos/java/ChaosTxn.java BOOTSTRAP STOP_FILE SEED java-txn,java-ctp
//
// java-txn (process j1): transactions of 2-4 values on random partitions of `txn`, one in five
// aborted. java-ctp (process jx): a read_committed consumer of `txn` in group chaos-jx and a
// transactional producer; each polled batch (at most 10 records) becomes as many values on random
// partitions of `ctp`, the consumed offsets committed in the same transaction
// (sendOffsetsToTransaction); one in five aborted, after which (and after any failure) the
// consumer rewinds to the group's committed offsets.
// Every operation is one line `OP <json>` on stdout in the history's format
// (tests/chaos/history.py), its times from System.nanoTime (CLOCK_MONOTONIC, the campaign's
// clock). A commit that fails but whose abort goes through is `fail`; one whose abort fails too
// is `info` (unknown), and the producer is replaced. A call that may block is told as it begins,
// `CALL <process> <call> <since>`, and as it returns, `CALL <process>`: the campaign notes one
// still running after 5 s (`blocked`), as for the confluent-kafka clients. Ends when STOP_FILE
// exists.

import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ChaosTxn {
    static final int PARTITIONS = 3;
    static String bootstrap;
    static Path stopFile;

    static double now() {
        return System.nanoTime() / 1e9;
    }

    static boolean stopped() {
        return Files.exists(stopFile);
    }

    static String q(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String entry(String topic, int partition, long offset, String value) {
        return "{\"key\":[" + q(topic) + "," + partition + "],\"offset\":" + offset + ",\"value\":" + q(value) + "}";
    }

    static synchronized void emit(String process, double invoked, String outcome, List<String> writes,
                                  List<String> reads, double commitS) {
        System.out.println("OP {\"process\":" + q(process) + ",\"kind\":\"txn\",\"invoke_s\":" + invoked
                + ",\"complete_s\":" + now() + ",\"outcome\":" + q(outcome) + ",\"writes\":[" + String.join(",", writes)
                + "],\"reads\":[" + String.join(",", reads) + "],\"committed_reader\":true,\"commit_s\":" + commitS + "}");
        System.out.flush();
    }

    /** `body`, told on stdout as `process`'s call `what` while it runs. */
    static <T> T call(String process, String what, Supplier<T> body) {
        System.out.println("CALL " + process + " " + what + " " + now());
        System.out.flush();
        try {
            return body.get();
        } finally {
            System.out.println("CALL " + process);
            System.out.flush();
        }
    }

    static void run(String process, String what, Runnable body) {
        call(process, what, () -> {
            body.run();
            return null;
        });
    }

    static void log(String process, String what, Exception e) {
        System.err.println(process + ": " + what + ": " + e.getClass().getSimpleName() + ": " + e.getMessage());
    }

    static KafkaProducer<byte[], byte[]> producer(String process) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "chaos-" + process);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "chaos-" + process);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "10000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "8000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "8000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        while (!stopped()) {
            KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
            try {
                run(process, "initTransactions", producer::initTransactions);
                return producer;
            } catch (RuntimeException e) {
                log(process, "initTransactions", e);
                producer.close(Duration.ZERO);
            }
        }
        return null;
    }

    /** A transaction's writes and reads so far, then its end: commit or abort. */
    static final class Txn {
        final String process;
        final double invoked = now();
        double commitS;
        final List<Future<RecordMetadata>> sent = new ArrayList<>();
        final List<String[]> planned = new ArrayList<>();  // topic, partition, value
        final List<String> reads = new ArrayList<>();

        Txn(String process) {
            this.process = process;
            commitS = invoked;
        }

        void send(KafkaProducer<byte[], byte[]> producer, String topic, int partition, String value) {
            planned.add(new String[] {topic, String.valueOf(partition), value});
            byte[] bytes = value.getBytes(StandardCharsets.UTF_8);
            ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition, null, bytes);
            sent.add(call(process, "send", () -> producer.send(r)));  // waits for metadata up to max.block.ms
        }

        /** "ok", "fail" or "info"; "info" and a failed abort also mean: replace the producer. */
        String finish(KafkaProducer<byte[], byte[]> producer, boolean abort) {
            commitS = now();
            if (!abort) {
                try {
                    run(process, "flush", producer::flush);
                    commitS = now();
                    run(process, "commitTransaction", producer::commitTransaction);
                    return "ok";
                } catch (RuntimeException e) {
                    log(process, "commit", e);
                }
            }
            try {
                run(process, "abortTransaction", producer::abortTransaction);
                return "fail";
            } catch (RuntimeException e) {
                log(process, "abort", e);
                return abort ? "fail!" : "info";  // an abort asked for can never commit
            }
        }

        void record(String outcome) {
            List<String> writes = new ArrayList<>();
            for (int i = 0; i < planned.size(); i++) {
                String[] w = planned.get(i);
                long offset = -1;
                Future<RecordMetadata> f = sent.get(i);
                if (outcome.equals("ok") && f.isDone()) {
                    try {
                        offset = f.get().offset();
                    } catch (Exception e) {
                        offset = -1;
                    }
                }
                writes.add(entry(w[0], Integer.parseInt(w[1]), offset, w[2]));
            }
            emit(process, invoked, outcome.replace("!", ""), writes, reads, commitS);
        }
    }

    static void writer(long seed) {
        Random rng = new Random(seed);
        KafkaProducer<byte[], byte[]> producer = producer("j1");
        for (int n = 0; producer != null && !stopped(); n++) {
            Txn txn = new Txn("j1");
            String outcome;
            try {
                producer.beginTransaction();
                int count = 2 + rng.nextInt(3);
                for (int i = 0; i < count; i++) txn.send(producer, "txn", rng.nextInt(PARTITIONS), "j1-" + n + "-" + i);
                outcome = txn.finish(producer, rng.nextInt(5) == 0);
            } catch (RuntimeException e) {
                log("j1", "transaction", e);
                outcome = txn.finish(producer, true);
            }
            txn.record(outcome);
            if (!outcome.equals("ok") && !outcome.equals("fail")) {
                producer.close(Duration.ZERO);
                producer = producer("j1");
            }
        }
        if (producer != null) producer.close(Duration.ofSeconds(5));
    }

    static KafkaConsumer<byte[], byte[]> consumer(String group) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
        c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        c.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        c.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        c.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "8000");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        while (!stopped()) {
            try {
                Set<TopicPartition> assigned = consumer.assignment();
                Map<TopicPartition, OffsetAndMetadata> committed =
                        call("jx", "committed", () -> consumer.committed(assigned));
                for (TopicPartition tp : assigned) {
                    OffsetAndMetadata om = committed.get(tp);
                    if (om == null) consumer.seekToBeginning(List.of(tp));
                    else consumer.seek(tp, om.offset());
                }
                return;
            } catch (RuntimeException e) {
                log("jx", "rewind", e);
            }
        }
    }

    static void transform(long seed) {
        Random rng = new Random(seed + 1);
        KafkaConsumer<byte[], byte[]> consumer = consumer("chaos-jx");
        consumer.subscribe(List.of("txn"));
        KafkaProducer<byte[], byte[]> producer = producer("jx");
        for (int n = 0; producer != null && !stopped(); n++) {
            ConsumerRecords<byte[], byte[]> records;
            try {
                records = consumer.poll(Duration.ofMillis(300));
            } catch (RuntimeException e) {
                log("jx", "poll", e);
                continue;
            }
            if (records.isEmpty()) continue;
            Txn txn = new Txn("jx");
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            String outcome;
            try {
                producer.beginTransaction();
                int i = 0;
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    txn.reads.add(entry(r.topic(), r.partition(), r.offset(), new String(r.value(), StandardCharsets.UTF_8)));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    txn.send(producer, "ctp", rng.nextInt(PARTITIONS), "jx-" + n + "-" + i++);
                }
                KafkaProducer<byte[], byte[]> p = producer;
                run("jx", "sendOffsetsToTransaction",
                        () -> p.sendOffsetsToTransaction(offsets, consumer.groupMetadata()));
                outcome = txn.finish(producer, rng.nextInt(5) == 0);
            } catch (RuntimeException e) {
                log("jx", "transaction", e);
                outcome = txn.finish(producer, true);
            }
            txn.record(outcome);
            if (!outcome.equals("ok") && !outcome.equals("fail")) {
                producer.close(Duration.ZERO);
                producer = producer("jx");
            }
            if (!outcome.equals("ok")) rewind(consumer);
        }
        if (producer != null) producer.close(Duration.ofSeconds(5));
        consumer.close();
    }

    public static void main(String[] argv) throws Exception {
        bootstrap = argv[0];
        stopFile = Paths.get(argv[1]);
        long seed = Long.parseLong(argv[2]);
        List<String> roles = Arrays.asList(argv[3].split(","));
        List<Thread> threads = new ArrayList<>();
        if (roles.contains("java-txn")) threads.add(new Thread(() -> writer(seed)));
        if (roles.contains("java-ctp")) threads.add(new Thread(() -> transform(seed)));
        for (Thread t : threads) t.start();
        for (Thread t : threads) t.join();
        System.exit(0);
    }
}
