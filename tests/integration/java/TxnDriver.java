// A line-driven Apache Kafka Java client for the transaction integration tests.
//
//   java -cp '.deps/java/*' TxnDriver.java BOOTSTRAP
//
// Reads one command per line on stdin and answers each with one line on stdout:
// "@@ OK {json}" or "@@ ERR {json}" (the exception's cause chain and message), so
// a Python test can drive transactional producers and read_committed consumers
// step by step, exactly as it drives the Python clients. Values are ASCII words.
//
//   producer NAME TRANSACTIONAL_ID TIMEOUT_MS   create a transactional KafkaProducer
//   init NAME | begin NAME | commit NAME | abort NAME | close NAME
//   send NAME TOPIC PARTITION VALUE             asynchronous send inside the transaction
//   flush NAME                                  flush; {"offsets": [...]} of the sends since the last flush
//   consume ISOLATION TOPIC:PART ...            read from the beginning up to endOffsets (same isolation)
//   end_offsets ISOLATION TOPIC:PART ...        KafkaConsumer.endOffsets with that isolation.level
//   halt                                        Runtime.halt: die without closing anything
//   exit

import java.io.*;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnDriver {
    static String bootstrap;
    static final Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
    static final Map<String, List<Future<RecordMetadata>>> pending = new HashMap<>();

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static List<TopicPartition> parseTps(String[] parts, int from) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = from; i < parts.length; i++) {
            int colon = parts[i].lastIndexOf(':');
            tps.add(new TopicPartition(parts[i].substring(0, colon), Integer.parseInt(parts[i].substring(colon + 1))));
        }
        return tps;
    }

    static KafkaProducer<byte[], byte[]> newProducer(String tid, String timeoutMs) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeoutMs);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "50");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "20");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<byte[], byte[]> newConsumer(String isolation) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    static String endOffsetsJson(Map<TopicPartition, Long> ends) {
        StringJoiner j = new StringJoiner(",", "{", "}");
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            j.add(q(e.getKey().topic() + ":" + e.getKey().partition()) + ":" + e.getValue());
        }
        return j.toString();
    }

    static String consume(String isolation, List<TopicPartition> tps) {
        try (KafkaConsumer<byte[], byte[]> c = newConsumer(isolation)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(15));
            StringJoiner recs = new StringJoiner(",", "[", "]");
            long deadline = System.currentTimeMillis() + 20000;
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, Duration.ofSeconds(15)) < ends.get(tp)) done = false;
                }
                if (done) break;
                if (System.currentTimeMillis() > deadline) {
                    throw new RuntimeException("consume did not reach the end offsets " + ends);
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    String v = r.value() == null ? "" : new String(r.value(), StandardCharsets.UTF_8);
                    recs.add("[" + q(r.topic()) + "," + r.partition() + "," + r.offset() + "," + q(v) + "]");
                }
            }
            return "{\"records\":" + recs + ",\"end\":" + endOffsetsJson(ends) + "}";
        }
    }

    static String run(String[] a) throws Exception {
        switch (a[0]) {
            case "producer": {
                producers.put(a[1], newProducer(a[2], a[3]));
                pending.put(a[1], new ArrayList<>());
                return "{}";
            }
            case "init": producers.get(a[1]).initTransactions(); return "{}";
            case "begin": producers.get(a[1]).beginTransaction(); return "{}";
            case "commit": {
                // Flushed first: the Java client 4.x at transaction version 2 can send EndTxn
                // before a batch appended just ahead of commitTransaction() (its Sender reads
                // "no unfinished batch" before it takes EndTxn off the queue, and the append
                // and the commit can both happen in between on a loaded machine). With nothing
                // added, the coordinator refuses the commit INVALID_TXN_STATE, as Kafka's does.
                producers.get(a[1]).flush();
                producers.get(a[1]).commitTransaction();
                return "{}";
            }
            case "abort": producers.get(a[1]).abortTransaction(); return "{}";
            case "close": {
                KafkaProducer<byte[], byte[]> p = producers.remove(a[1]);
                if (p != null) p.close(Duration.ofSeconds(5));
                return "{}";
            }
            case "send": {
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(
                        a[2], Integer.parseInt(a[3]), null, a[4].getBytes(StandardCharsets.UTF_8));
                pending.get(a[1]).add(producers.get(a[1]).send(r));
                return "{}";
            }
            case "flush": {
                producers.get(a[1]).flush();
                List<Future<RecordMetadata>> fs = pending.put(a[1], new ArrayList<>());
                StringJoiner offs = new StringJoiner(",", "[", "]");
                for (Future<RecordMetadata> f : fs) offs.add(String.valueOf(f.get().offset()));
                return "{\"offsets\":" + offs + "}";
            }
            case "consume": return consume(a[1], parseTps(a, 2));
            case "end_offsets": {
                try (KafkaConsumer<byte[], byte[]> c = newConsumer(a[1])) {
                    return endOffsetsJson(c.endOffsets(parseTps(a, 2), Duration.ofSeconds(15)));
                }
            }
            case "halt": Runtime.getRuntime().halt(3); return "{}";
            default: throw new IllegalArgumentException("unknown command " + a[0]);
        }
    }

    static String errorJson(Throwable t) {
        StringJoiner chain = new StringJoiner(",", "[", "]");
        String message = String.valueOf(t.getMessage());
        for (Throwable c = t; c != null; c = c.getCause()) {
            chain.add(q(c.getClass().getName()));
            if (c.getCause() == c) break;
        }
        return "{\"chain\":" + chain + ",\"message\":" + q(message) + "}";
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        out.println("@@ OK {\"ready\":true}");
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) continue;
            if (line.equals("exit")) break;
            String[] parts = line.split(" ");
            try {
                out.println("@@ OK " + run(parts));
            } catch (Throwable t) {
                out.println("@@ ERR " + errorJson(t));
            }
        }
        for (KafkaProducer<byte[], byte[]> p : producers.values()) {
            try {
                p.close(Duration.ofSeconds(2));
            } catch (Throwable ignored) {
            }
        }
        out.println("@@ OK {\"bye\":true}");
    }
}
