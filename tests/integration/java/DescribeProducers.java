// The Admin client's describeProducers (KIP-664) against a Kafka-compatible broker.
//
//   java -cp '.deps/java/*' DescribeProducers.java BOOTSTRAP TOPIC PARTITION...
//
// Prints, per partition, one line
//   PARTITION {"partition":P,"producers":[{"producerId":..,"producerEpoch":..,
//     "lastSequence":..,"lastTimestamp":..,"coordinatorEpoch":..,
//     "currentTransactionStartOffset":..}]}
// with -1 where the client reports an empty Optional, or
//   PARTITION {"partition":P,"error":"..."}
// when the partition's lookup failed. Exits 0 unless the program itself failed.

import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartition;

public class DescribeProducers {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        List<TopicPartition> tps = new ArrayList<>();
        for (int a = 2; a < args.length; a++) tps.add(new TopicPartition(topic, Integer.parseInt(args[a])));
        Map<String, Object> conf = Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000",
                AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        try (Admin admin = Admin.create(conf)) {
            DescribeProducersResult result = admin.describeProducers(tps);
            for (TopicPartition tp : tps) {
                StringBuilder sb = new StringBuilder("{\"partition\":").append(tp.partition());
                try {
                    DescribeProducersResult.PartitionProducerState st = result.partitionResult(tp).get();
                    sb.append(",\"producers\":[");
                    boolean first = true;
                    for (ProducerState ps : st.activeProducers()) {
                        sb.append(first ? "" : ",");
                        first = false;
                        sb.append("{\"producerId\":").append(ps.producerId())
                          .append(",\"producerEpoch\":").append(ps.producerEpoch())
                          .append(",\"lastSequence\":").append(ps.lastSequence())
                          .append(",\"lastTimestamp\":").append(ps.lastTimestamp())
                          .append(",\"coordinatorEpoch\":").append(ps.coordinatorEpoch().orElse(-1))
                          .append(",\"currentTransactionStartOffset\":")
                          .append(ps.currentTransactionStartOffset().orElse(-1L))
                          .append('}');
                    }
                    sb.append(']');
                } catch (ExecutionException e) {
                    sb.append(",\"error\":\"").append(e.getCause().getClass().getSimpleName()).append('"');
                }
                System.out.println("PARTITION " + sb.append('}'));
            }
        }
        System.out.flush();
    }
}
