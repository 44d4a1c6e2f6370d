// The Apache Kafka Java client's abort race, made to happen by a debugger (JDI) rather than
// waited for (chaos seed 110 read an aborted Java transaction's values, once in about 44,000):
//
//   java -cp '.deps/java4/*:CLASSES' AbortRace BOOTSTRAP TOPIC
//
// Starts itself again as `AbortRace target BOOTSTRAP TOPIC` under a JDWP agent, attaches, and
// holds the target's sender thread in Sender.maybeSendAndPollTransactionalRequest just after
// RecordAccumulator.hasIncomplete() returned false, before its result reaches
// TransactionManager.nextRequest, which holds an EndTxn back while batches are incomplete. While
// the sender is held, the target begins a transaction, sends three values ("aborted-1..3") and
// calls abortTransaction, which queues the EndTxn. Let go, the sender sends that EndTxn at once
// (told "nothing incomplete"), the transaction ends with its batch still open in the accumulator,
// and the next transaction's send ("committed-1", same partition) joins that batch, which is
// then committed. A scheduler that deschedules the sender at that point does the same.
// The target then reads the partition with read_committed and prints one line
// "RESULT {"read": [...]}" (value@offset in order). Exits 1 on any error.

import com.sun.jdi.BooleanValue;
import com.sun.jdi.Bootstrap;
import com.sun.jdi.VMDisconnectedException;
import com.sun.jdi.VirtualMachine;
import com.sun.jdi.connect.AttachingConnector;
import com.sun.jdi.connect.Connector;
import com.sun.jdi.event.Event;
import com.sun.jdi.event.EventSet;
import com.sun.jdi.event.MethodExitEvent;
import com.sun.jdi.request.EventRequest;
import com.sun.jdi.request.MethodExitRequest;
import java.io.*;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class AbortRace {
    static final String ACCUMULATOR = "org.apache.kafka.clients.producer.internals.RecordAccumulator";

    public static void main(String[] args) throws Exception {
        if (args[0].equals("target")) target(args[1], args[2]);
        else debugger(args[0], args[1]);
    }

    // -- the debugger -------------------------------------------------------------------------

    static void debugger(String bootstrap, String topic) throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Process target = new ProcessBuilder("java",
                "-agentlib:jdwp=transport=dt_socket,server=y,suspend=n,address=127.0.0.1:" + port,
                "-cp", System.getProperty("java.class.path"), AbortRace.class.getName(), "target", bootstrap, topic)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        BufferedReader out = new BufferedReader(new InputStreamReader(target.getInputStream()));
        PrintStream in = new PrintStream(target.getOutputStream(), true);
        expect(out, "ready");
        VirtualMachine vm = attach(port);
        MethodExitRequest exits = vm.eventRequestManager().createMethodExitRequest();
        exits.addClassFilter(ACCUMULATOR);
        exits.setSuspendPolicy(EventRequest.SUSPEND_EVENT_THREAD);
        exits.enable();
        in.println("wake");  // the target flushes, so the sender runs its loop once more
        EventSet held = holdSender(vm);
        exits.disable();
        letTheRestGo(vm);
        System.err.println("debugger: sender held after hasIncomplete() returned false");
        in.println("go");
        expect(out, "aborting");  // the EndTxn is queued; abortTransaction waits for the sender
        held.resume();
        System.err.println("debugger: sender let go");
        String line;
        while ((line = out.readLine()) != null) System.out.println(line);
        try {
            vm.dispose();
        } catch (VMDisconnectedException e) {
            // the target ended first
        }
        System.exit(target.waitFor());
    }

    static VirtualMachine attach(int port) throws Exception {
        AttachingConnector c = Bootstrap.virtualMachineManager().attachingConnectors().stream()
                .filter(x -> x.name().equals("com.sun.jdi.SocketAttach")).findFirst().orElseThrow();
        Map<String, Connector.Argument> a = c.defaultArguments();
        a.get("hostname").setValue("127.0.0.1");
        a.get("port").setValue(String.valueOf(port));
        return c.attach(a);
    }

    /** The sender's exit from hasIncomplete() with false, called by the transactional step; every
     *  other exit from a RecordAccumulator method goes on at once. */
    static EventSet holdSender(VirtualMachine vm) throws Exception {
        while (true) {
            EventSet set = vm.eventQueue().remove();
            for (Event e : set) {
                if (e instanceof MethodExitEvent x && x.method().name().equals("hasIncomplete")
                        && x.returnValue() instanceof BooleanValue b && !b.value()
                        && x.thread().frame(1).location().method().name()
                               .equals("maybeSendAndPollTransactionalRequest"))
                    return set;
            }
            set.resume();
        }
    }

    /** Threads stopped by events queued before the request was disabled go on. */
    static void letTheRestGo(VirtualMachine vm) {
        Thread drain = new Thread(() -> {
            try {
                while (true) vm.eventQueue().remove().resume();
            } catch (InterruptedException | VMDisconnectedException e) {
                // the target ended
            }
        });
        drain.setDaemon(true);
        drain.start();
    }

    static void expect(BufferedReader out, String what) throws IOException {
        String line;
        while ((line = out.readLine()) != null) {
            if (line.equals(what)) return;
            System.out.println(line);
        }
        throw new EOFException("the target ended before it said " + what);
    }

    // -- the target ---------------------------------------------------------------------------

    static void target(String bootstrap, String topic) throws Exception {
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig(bootstrap, topic))) {
            producer.initTransactions();
            producer.beginTransaction();
            send(producer, topic, "committed-0");
            producer.commitTransaction();
            say("ready");
            in.readLine();  // wake
            producer.flush();  // nothing to flush: it only wakes the sender
            in.readLine();  // go: the sender is held
            producer.beginTransaction();
            for (int k = 1; k <= 3; k++) send(producer, topic, "aborted-" + k);
            Thread abort = new Thread(producer::abortTransaction);
            abort.start();
            while (abort.getState() != Thread.State.TIMED_WAITING && abort.isAlive()) Thread.onSpinWait();
            say("aborting");
            abort.join();
            producer.beginTransaction();
            send(producer, topic, "committed-1");
            producer.commitTransaction();
        }
        say("RESULT {\"read\": [" + String.join(", ", readCommitted(bootstrap, topic)) + "]}");
    }

    static Properties producerConfig(String bootstrap, String topic) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", topic + "-txn");
        p.put("linger.ms", "5");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return p;
    }

    static List<String> readCommitted(String bootstrap, String topic) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        List<String> read = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            while (consumer.position(tp) < end)
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500)))
                    read.add("\"" + new String(r.value(), StandardCharsets.UTF_8) + "@" + r.offset() + "\"");
        }
        return read;
    }

    static void send(KafkaProducer<byte[], byte[]> producer, String topic, String value) {
        producer.send(new ProducerRecord<>(topic, 0, null, value.getBytes(StandardCharsets.UTF_8)));
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
