// One instance of a Kafka Streams application with processing.guarantee=exactly_once_v2, for
// test_streams_eos.py: the test starts two of these (two stream threads each), kills one with
// kill -9 at random points and restarts it, and checks the output read back read_committed.
//
// usage: StreamsEos BOOTSTRAP APPLICATION_ID STATE_DIR [key=value ...]
//   (key=value: more Streams, consumer or producer properties, e.g. group.instance.id=b)
//
// The topology, over the topics the test creates (in, factors, joined, totals, windows):
//   in (key: anything, value "KEY,AMOUNT,SEQ")
//     -> selectKey(KEY)                                  a key change: the next steps repartition
//     -> join(KTable factors)                            a KStream-KTable join: "SEQ,AMOUNT*FACTOR"
//     -> to(joined)
//     -> groupByKey().aggregate(count, sum) in RocksDB   the store "totals" with its changelog
//     -> to(totals)                                      value "COUNT,SUM"
//   selectKey(KEY) -> groupByKey().windowedBy(WINDOW_MS tumbling).count()
//     -> to(windows)                                     key "KEY@WINDOW_START", value COUNT
// The line "STATE RUNNING" on stdout says the instance is processing (after a "THREAD NAME" line
// per stream thread); "STATE ERROR" that a thread died (the test fails on it).
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

public class StreamsEos {
    static final long WINDOW_MS = 2000;

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }

        KafkaStreams streams = new KafkaStreams(topology().build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                streams.metadataForLocalThreads().forEach(t -> System.out.println("THREAD " + t.threadName()));
            }
            System.out.println("STATE " + now + " " + java.time.Instant.now());
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("UNCAUGHT " + e);
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            done.countDown();
        }));
        streams.start();
        done.await();
        streams.close(Duration.ofSeconds(20));
    }

    static StreamsBuilder topology() {
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> keyed = builder.<String, String>stream("in")
            .selectKey((k, v) -> v.split(",")[0]);
        KTable<String, String> factors = builder.table("factors", Consumed.with(Serdes.String(), Serdes.String()));
        KStream<String, String> joined = keyed.join(factors, (v, factor) -> {
            String[] f = v.split(",");
            return f[2] + "," + (Long.parseLong(f[1]) * Long.parseLong(factor));
        });
        joined.to("joined", Produced.with(Serdes.String(), Serdes.String()));
        joined.groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .aggregate(
                () -> "0,0",
                (key, v, total) -> {
                    String[] t = total.split(",");
                    long amount = Long.parseLong(v.split(",")[1]);
                    return (Long.parseLong(t[0]) + 1) + "," + (Long.parseLong(t[1]) + amount);
                },
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("totals")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
            .toStream()
            .to("totals", Produced.with(Serdes.String(), Serdes.String()));
        keyed.groupByKey(Grouped.with("by-key", Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofHours(1)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("window-counts"))
            .toStream()
            .map((w, count) -> KeyValue.pair(w.key() + "@" + w.window().start(), Long.toString(count)))
            .to("windows", Produced.with(Serdes.String(), Serdes.String()));
        return builder;
    }
}
