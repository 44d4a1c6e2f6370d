// The transactional producer perf loop of the benchmark (bench/transactions.py) and of the
// back-to-back transaction tests: the shape of kafka-producer-perf-test with a transaction
// around every N records.
//
//   java -cp '.deps/java/*' TxnPerf.java BOOTSTRAP TOPIC TRANSACTIONS RECORDS VALUE_BYTES MODE [WARMUP]
//
// MODE "txn": one transactional producer (acks=all) runs TRANSACTIONS transactions of
// RECORDS records each, back to back (begin, RECORDS asynchronous sends, flush, commit: the
// flush works around a race of the Java client 4.x, see TxnDriver.java, "commit").
// MODE "idempotent": the same records without transactions (enable.idempotence, acks=all),
// flushed every RECORDS records. Prints one line "RESULT {json}": seconds, transactions,
// records, bytes, and the p50/p99 of each transaction's latency (begin to commit returned)
// in milliseconds. WARMUP more transactions (default 0) run first, unmeasured (the JIT).

import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnPerf {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], mode = args[5];
        int transactions = Integer.parseInt(args[2]), records = Integer.parseInt(args[3]);
        byte[] value = new byte[Integer.parseInt(args[4])];
        Arrays.fill(value, (byte) 'x');
        boolean txn = mode.equals("txn");
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        if (txn) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "perf-" + UUID.randomUUID());
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (txn) producer.initTransactions();
            int warmup = args.length > 6 ? Integer.parseInt(args[6]) : 0;
            for (int t = 0; t < warmup; t++) once(producer, topic, records, value, txn);
            long[] latencies = new long[transactions];
            long started = System.nanoTime();
            for (int t = 0; t < transactions; t++) latencies[t] = once(producer, topic, records, value, txn);
            double seconds = (System.nanoTime() - started) / 1e9;
            Arrays.sort(latencies);
            System.out.printf(Locale.ROOT,
                "RESULT {\"seconds\": %.4f, \"transactions\": %d, \"records\": %d, \"bytes\": %d,"
                + " \"p50_ms\": %.3f, \"p99_ms\": %.3f}%n",
                seconds, transactions, (long) transactions * records, (long) transactions * records * value.length,
                latencies[transactions / 2] / 1e6, latencies[Math.min(transactions - 1, transactions * 99 / 100)] / 1e6);
        }
    }

    // One transaction (or one flushed group of records): its latency in nanoseconds.
    static long once(KafkaProducer<byte[], byte[]> producer, String topic, int records, byte[] value, boolean txn) {
        long t0 = System.nanoTime();
        if (txn) producer.beginTransaction();
        for (int r = 0; r < records; r++) producer.send(new ProducerRecord<>(topic, 0, null, value));
        producer.flush();  // before a commit too: see TxnDriver.java, "commit"
        if (txn) producer.commitTransaction();
        return System.nanoTime() - t0;
    }
}
