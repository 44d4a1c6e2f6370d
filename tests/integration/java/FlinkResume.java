// The Flink Kafka connector's recovery commit, step by step with its own producer class
// (FlinkKafkaInternalProducer, connector 5.0.0-2.2), for test_flink_eos.py: what a KafkaSink
// restored from a checkpoint does with the transaction that checkpoint holds.
//
// usage: FlinkResume BOOTSTRAP TOPIC TRANSACTIONAL_ID
//
// 1. a producer begins a transaction, writes one record "resumed" and flushes it (its
//    partitions added), as the writer does before a checkpoint; it then stops without ending it,
//    as a process killed after the checkpoint completed and before its commit;
// 2. a new producer resumes that transaction with the producer id and epoch the checkpoint
//    stored (no InitProducerId: FlinkKafkaInternalProducer.resumeTransaction) and commits it;
// 3. another one resumes and commits it once more, as a second restore from the same
//    checkpoint does: fenced, the first commit's epoch bump came between;
// 4. a producer of that transactional id initializes (InitProducerId, as the writer's probing
//    for lingering transactions does), and the transaction is resumed and committed again.
// Each committer first asks for the topic's partitions, so that it has heard the broker's
// ApiVersions (finalized transaction.version 2) before it commits. The Java client (4.2) looks at
// the finalized features when it commits; a resumed producer that learns of version 2 only then
// commits with EndTxn at version 1 and bumps its epoch right after with InitProducerId (its own
// producer id and epoch), so the second commit's stored epoch is fenced. Without the look-up the
// outcome depends on whether the client's ApiVersions answer has arrived by the commit (a race
// that Apache Kafka and Gregor both show under load); with it, both answer the same every time.
// Lines on stdout: "PRODUCER ID EPOCH", then "COMMIT OUTCOME", "RECOMMIT OUTCOME" and
// "AFTER_INIT OUTCOME", OUTCOME "ok" or the exception's class.
import java.util.Properties;

import org.apache.flink.connector.kafka.sink.internal.FlinkKafkaInternalProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class FlinkResume {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("bootstrap.servers", args[0]);
        props.setProperty("key.serializer", ByteArraySerializer.class.getName());
        props.setProperty("value.serializer", ByteArraySerializer.class.getName());
        props.setProperty("transaction.timeout.ms", "60000");
        String topic = args[1], transactionalId = args[2];

        FlinkKafkaInternalProducer<byte[], byte[]> writer = new FlinkKafkaInternalProducer<>(props, transactionalId);
        writer.initTransactions();
        writer.beginTransaction();
        writer.send(new ProducerRecord<>(topic, "resumed".getBytes())).get();
        writer.flush();
        long producerId = writer.getProducerId();
        short epoch = writer.getEpoch();
        System.out.println("PRODUCER " + producerId + " " + epoch);
        // The writer is left as it is, its transaction open: a kill -9 ends no transaction.

        System.out.println("COMMIT " + resumeAndCommit(props, topic, transactionalId, producerId, epoch));
        System.out.println("RECOMMIT " + resumeAndCommit(props, topic, transactionalId, producerId, epoch));
        try (FlinkKafkaInternalProducer<byte[], byte[]> prober = new FlinkKafkaInternalProducer<>(props, transactionalId)) {
            prober.initTransactions();
        }
        System.out.println("AFTER_INIT " + resumeAndCommit(props, topic, transactionalId, producerId, epoch));
        System.out.flush();
        System.exit(0);
    }

    static String resumeAndCommit(Properties props, String topic, String transactionalId, long producerId, short epoch) {
        try (FlinkKafkaInternalProducer<byte[], byte[]> committer =
                 new FlinkKafkaInternalProducer<>(props, transactionalId)) {
            committer.partitionsFor(topic);
            committer.resumeTransaction(producerId, epoch);
            committer.commitTransaction();
            return "ok";
        } catch (RuntimeException e) {
            return e.getClass().getName();
        }
    }
}
