// A Flink 2.2 job with Kafka connector 5.0 exactly once, on a local MiniCluster inside this JVM,
// for test_flink_eos.py: the test kills the process with kill -9 at random points, starts it
// again (it restores from the newest complete checkpoint) and reads the output read_committed.
//
// usage: FlinkEos BOOTSTRAP CHECKPOINT_DIR [key=value ...]
//   in=TOPIC, out=TOPIC, prefix=TRANSACTIONAL_ID_PREFIX, parallelism=N, naming=INCREMENTING|POOLING
//   (the sink's TransactionNamingStrategy; POOLING finds lingering transactions by DescribeProducers
//   and ListTransactions instead of probing) are the job's own settings;
//   any other key=value is a property of the KafkaSink's producers, e.g. transaction.timeout.ms
//   (unset: the connector's default of one hour).
//
// The job: KafkaSource(in, read_committed; value "KEY,SEQ")
//   -> keyBy(KEY) -> a running count per key in keyed state
//   -> KafkaSink(out, EXACTLY_ONCE; key KEY, value "COUNT,SEQ")
// Checkpoints every second to CHECKPOINT_DIR, retained; no restart inside the process (a failure
// ends it: the test restarts it, as a supervisor would). Lines on stdout: "RESTORE PATH|none",
// "STATE RUNNING" once the job runs, "FAILED CLASS: MESSAGE" for each cause of a failed job.
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Stream;

import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.sink.TransactionNamingStrategy;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

public class FlinkEos {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Path checkpoints = Paths.get(args[1]).toAbsolutePath();
        Map<String, String> job = new HashMap<>(Map.of(
            "in", "in", "out", "out", "prefix", "flink-eos", "parallelism", "2", "naming", "INCREMENTING"));
        Properties producer = new Properties();
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            String key = args[i].substring(0, eq), value = args[i].substring(eq + 1);
            if (job.containsKey(key)) {
                job.put(key, value);
            } else {
                producer.setProperty(key, value);
            }
        }
        Path restore = newestCheckpoint(checkpoints);
        System.out.println("RESTORE " + (restore == null ? "none" : restore));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(
            configuration(checkpoints, restore, Integer.parseInt(job.get("parallelism"))));
        env.fromSource(source(bootstrap, job.get("in")), WatermarkStrategy.noWatermarks(), "in")
            .uid("source")
            .keyBy(v -> v.split(",")[0])
            .process(new RunningCount()).uid("count")
            .sinkTo(sink(bootstrap, job, producer)).uid("sink");
        JobClient client = env.executeAsync("flink-eos");
        while (client.getJobStatus().get() != JobStatus.RUNNING && !client.getJobStatus().get().isTerminalState()) {
            Thread.sleep(50);
        }
        System.out.println("STATE " + client.getJobStatus().get());
        System.out.flush();
        try {
            client.getJobExecutionResult().get();
        } catch (Exception e) {
            for (Throwable t = e; t != null; t = t.getCause()) {
                System.out.println("FAILED " + t.getClass().getName() + ": " + t.getMessage());
            }
            System.out.flush();
            System.exit(1);
        }
    }

    static Configuration configuration(Path checkpoints, Path restore, int parallelism) {
        Map<String, String> conf = new HashMap<>();
        conf.put("execution.checkpointing.interval", "1s");
        conf.put("execution.checkpointing.mode", "EXACTLY_ONCE");
        conf.put("execution.checkpointing.storage", "filesystem");
        conf.put("execution.checkpointing.dir", checkpoints.toUri().toString());
        conf.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        conf.put("state.backend.type", "hashmap");
        conf.put("restart-strategy.type", "none");
        conf.put("parallelism.default", Integer.toString(parallelism));
        conf.put("rest.bind-address", "127.0.0.1");
        conf.put("rest.address", "127.0.0.1");
        conf.put("rest.bind-port", "0");
        conf.put("jobmanager.rpc.address", "127.0.0.1");
        if (restore != null) {
            conf.put("execution.state-recovery.path", restore.toUri().toString());
        }
        return Configuration.fromMap(conf);
    }

    static KafkaSource<String> source(String bootstrap, String topic) {
        return KafkaSource.<String>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(topic)
            .setGroupId("flink-eos")
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setValueOnlyDeserializer(new SimpleStringSchema())
            .setProperty("isolation.level", "read_committed")
            .build();
    }

    static KafkaSink<String> sink(String bootstrap, Map<String, String> job, Properties producer) {
        return KafkaSink.<String>builder()
            .setBootstrapServers(bootstrap)
            .setRecordSerializer(KafkaRecordSerializationSchema.<String>builder()
                .setTopic(job.get("out"))
                .setKeySerializationSchema(new KeyOf())
                .setValueSerializationSchema(new ValueOf())
                .build())
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix(job.get("prefix"))
            .setTransactionNamingStrategy(TransactionNamingStrategy.valueOf(job.get("naming")))
            .setKafkaProducerConfig(producer)
            .build();
    }

    /** "KEY,..." -> KEY (classes, not lambdas: the sink's lineage reads their type). */
    static class KeyOf implements SerializationSchema<String> {
        @Override
        public byte[] serialize(String v) {
            return v.split(",")[0].getBytes(StandardCharsets.UTF_8);
        }
    }

    /** "KEY,REST" -> REST. */
    static class ValueOf implements SerializationSchema<String> {
        @Override
        public byte[] serialize(String v) {
            return v.substring(v.indexOf(',') + 1).getBytes(StandardCharsets.UTF_8);
        }
    }

    /** "KEY,SEQ" in, "KEY,COUNT,SEQ" out: COUNT the records of KEY so far, this one included. */
    static class RunningCount extends KeyedProcessFunction<String, String, String> {
        private transient ValueState<Long> count;

        @Override
        public void open(OpenContext context) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Long.class));
        }

        @Override
        public void processElement(String value, Context ctx, Collector<String> out) throws IOException {
            long n = (count.value() == null ? 0 : count.value()) + 1;
            count.update(n);
            String[] f = value.split(",");
            out.collect(f[0] + "," + n + "," + f[1]);
        }
    }

    /** The newest checkpoint (highest chk-N of any earlier run) whose _metadata reads whole, or null. */
    static Path newestCheckpoint(Path root) throws IOException {
        if (!Files.isDirectory(root)) {
            return null;
        }
        List<Path> found = new ArrayList<>();
        try (Stream<Path> dirs = Files.find(root, 2, (p, a) -> a.isDirectory()
                && p.getFileName().toString().startsWith("chk-") && Files.exists(p.resolve("_metadata")))) {
            dirs.forEach(found::add);
        }
        found.sort(Comparator.comparingLong(
            (Path p) -> Long.parseLong(p.getFileName().toString().substring(4))).reversed());
        for (Path dir : found) {
            try (InputStream in = Files.newInputStream(dir.resolve("_metadata"))) {
                Checkpoints.loadCheckpointMetadata(
                    new DataInputStream(in), FlinkEos.class.getClassLoader(), dir.toString());
                return dir;
            } catch (IOException | RuntimeException e) {  // cut short by a kill -9: the one before
                System.out.println("SKIP " + dir + " " + e);
            }
        }
        return null;
    }
}
