// The Admin client's KIP-664 calls against a Kafka-compatible broker, as
// kafka-transactions.sh uses them: listTransactions, describeTransactions of
// TRANSACTIONAL_ID (when given), describeProducers, then abortTransaction for the open
// transaction starting at START_OFFSET.
//
//   java -cp '.deps/java/*' TxnTools.java BOOTSTRAP TOPIC PARTITION START_OFFSET [TRANSACTIONAL_ID]
//
// Prints
//   listing TRANSACTIONAL_ID STATE        (one per listed transaction)
//   described STATE pid PID epoch EPOCH timeout MS started YES|NO partitions [TOPIC-P, ...]
//   producer PID epoch EPOCH start OFFSET (one per producer with an open transaction)
//   aborted PID
// Exits non-zero when a call fails or no open transaction starts at START_OFFSET.

import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartition;

public class TxnTools {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        TopicPartition tp = new TopicPartition(args[1], Integer.parseInt(args[2]));
        long startOffset = Long.parseLong(args[3]);
        Map<String, Object> conf = Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000",
                AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        try (Admin admin = Admin.create(conf)) {
            for (TransactionListing l : admin.listTransactions().all().get()) {
                System.out.println("listing " + l.transactionalId() + " " + l.state());
            }
            if (args.length > 4) {
                TransactionDescription d = admin.describeTransactions(List.of(args[4])).all().get().get(args[4]);
                List<String> tps = new ArrayList<>();
                for (TopicPartition t : d.topicPartitions()) tps.add(t.toString());
                Collections.sort(tps);
                System.out.println("described " + d.state() + " pid " + d.producerId() + " epoch " + d.producerEpoch()
                        + " timeout " + d.transactionTimeoutMs()
                        + " started " + (d.transactionStartTimeMs().isPresent() ? "YES" : "NO")
                        + " partitions " + tps);
            }
            ProducerState open = null;
            for (ProducerState ps : admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers()) {
                if (ps.currentTransactionStartOffset().isEmpty()) continue;
                long start = ps.currentTransactionStartOffset().getAsLong();
                System.out.println("producer " + ps.producerId() + " epoch " + ps.producerEpoch() + " start " + start);
                if (start == startOffset) open = ps;
            }
            if (open == null) {
                System.out.println("no open transaction starts at " + startOffset);
                System.exit(2);
            }
            AbortTransactionSpec spec = new AbortTransactionSpec(
                    tp, open.producerId(), (short) open.producerEpoch(), open.coordinatorEpoch().orElse(0));
            admin.abortTransaction(spec).all().get();
            System.out.println("aborted " + open.producerId());
        }
    }
}
