// The producer side of tests/integration/test_txn_crash.py with the Apache Kafka Java client.
//
//   java -cp '.deps/java/*' TxnCrash.java BOOTSTRAP TRANSACTIONAL_ID TXN_TIMEOUT_MS commit|abort N TOPIC...
//
// Commits one transaction ("first") of N records to partitions 0 and 1 of every
// TOPIC, then writes a second one ("crashed") the same way, flushes it and ends
// it with commitTransaction or abortTransaction while the broker kills itself at
// a crash point. Record i of partition P of topic T has value "TAG:T:P:i" and
// the value's last 8 bytes as key (as the Python side writes them).
//
// With TXN_CRASH_GROUP=G in the environment, each transaction also commits an offset of
// group G for partition 0 of the first TOPIC with sendOffsetsToTransaction (1 for "first",
// 2 for "crashed"), so the offsets must follow the transaction's outcome across the crash
// (Java 4.x under transaction version 2: TxnOffsetCommit v5 without AddOffsetsToTxn).
//
// Prints "FIRST committed", then "END ok" or "END error <exception>" for the
// crashed transaction's end, and exits without closing the producer gracefully,
// so nothing is retried against the restarted broker.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnCrash {
    static void produceAll(KafkaProducer<byte[], byte[]> p, List<String> topics, int n, String tag)
            throws Exception {
        List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
        for (String topic : topics) {
            for (int part = 0; part < 2; part++) {
                for (int i = 0; i < n; i++) {
                    byte[] value = (tag + ":" + topic + ":" + part + ":" + i).getBytes(StandardCharsets.UTF_8);
                    byte[] key = Arrays.copyOfRange(value, Math.max(0, value.length - 8), value.length);
                    futures.add(p.send(new ProducerRecord<>(topic, part, key, value)));
                }
            }
        }
        p.flush();
        for (var f : futures) f.get();
    }

    static void sendOffsets(KafkaProducer<byte[], byte[]> p, String topic, long offset) {
        String group = System.getenv("TXN_CRASH_GROUP");
        if (group == null || group.isEmpty()) return;
        p.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(offset)),
                new ConsumerGroupMetadata(group));
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String tid = args[1];
        String timeoutMs = args[2];
        boolean commit = args[3].equals("commit");
        int n = Integer.parseInt(args[4]);
        List<String> topics = Arrays.asList(args).subList(5, args.length);

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeoutMs);
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "3000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "50");
        props.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "50");
        props.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "200");
        KafkaProducer<byte[], byte[]> p =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        p.initTransactions();
        p.beginTransaction();
        produceAll(p, topics, n, "first");
        sendOffsets(p, topics.get(0), 1);
        p.commitTransaction();
        System.out.println("FIRST committed");
        System.out.flush();

        p.beginTransaction();
        produceAll(p, topics, n, "crashed");
        sendOffsets(p, topics.get(0), 2);
        System.out.println("CRASHED produced");
        System.out.flush();
        try {
            if (commit) p.commitTransaction();
            else p.abortTransaction();
            System.out.println("END ok");
        } catch (Exception e) {
            System.out.println("END error " + e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
