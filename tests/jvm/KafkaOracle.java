/*
 * Test oracle: lets the Python tests ask Apache Kafka's own code how it encodes and prints
 * __consumer_offsets records, so our decoder is checked against Kafka rather than against itself.
 *
 * Run as a single-file program with a Kafka distribution's jars on the class path:
 *   java -cp 'build/jars/kafka-4.3.1/*' tests/jvm/KafkaOracle.java
 * It reads JSON lines on stdin and answers each with exactly one JSON line on stdout:
 *
 *   {"op":"encode","message":"OffsetCommitValue","version":1,"prefix":1,"data":{...}}
 *     -> {"bytes":"<base64>"}   int16 prefix + the message serialised at `version`; the message is
 *        built from `data` by Kafka's generated JSON converter (field names as Kafka's JSON prints them)
 *   {"op":"sticky","userData":"<base64>"}
 *     -> {"partitions":[{"topic":..., "partition":...}], "generation": N | null}: the previous assignment
 *        the "sticky" assignor reads from a member's subscription user data (its own fallbacks included)
 *   {"op":"format","key":"<base64>","value":"<base64>"|null}
 *     -> {"offsets":..., "group":..., "coordinator":..., "dump":{"key":..., "value":...}}: what OffsetsMessageFormatter,
 *        GroupMetadataMessageFormatter, the generic coordinator-record JSON converters (4.x) and
 *        DumpLogSegments' offsets parser (4.x) print for the record; each is a JSON value, null when
 *        that tool prints nothing (or does not exist in this Kafka version), a JSON string when it
 *        prints something that is not JSON (DumpLogSegments' "<DELETE>"), or {"error": "..."}.
 *
 * Everything version-specific is reached by reflection so the same file runs against 3.9 and 4.x jars.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.MessageFormatter;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Optional;

public class KafkaOracle {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final String[] MESSAGE_PACKAGES = {
        "org.apache.kafka.coordinator.group.generated.",
        "org.apache.kafka.common.message.",
    };

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode request = MAPPER.readTree(line);
            JsonNode answer;
            try {
                answer = switch (request.get("op").asText()) {
                    case "encode" -> encode(request);
                    case "sticky" -> sticky(request);
                    default -> format(request);
                };
            } catch (Throwable t) {
                answer = error(t);
            }
            out.println(answer.toString());
            out.flush();
        }
    }

    private static ObjectNode error(Throwable t) {
        Throwable root = t instanceof InvocationTargetException ite ? ite.getCause() : t;
        ObjectNode node = JsonNodeFactory.instance.objectNode();
        node.put("error", root.getClass().getSimpleName() + ": " + root.getMessage());
        return node;
    }

    private static Class<?> messageClass(String simpleName) throws ClassNotFoundException {
        for (String pkg : MESSAGE_PACKAGES) {
            try {
                return Class.forName(pkg + simpleName);
            } catch (ClassNotFoundException ignored) {
                // try the next package
            }
        }
        throw new ClassNotFoundException(simpleName);
    }

    private static JsonNode encode(JsonNode request) throws Exception {
        String name = request.get("message").asText();
        short version = (short) request.get("version").asInt();
        Class<?> converter = messageClass(name + "JsonConverter");
        Method read = converter.getMethod("read", JsonNode.class, short.class);
        Message message = (Message) read.invoke(null, request.get("data"), version);
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = message.size(cache, version);
        ByteBuffer buf = ByteBuffer.allocate(2 + size);
        buf.putShort((short) request.get("prefix").asInt());
        message.write(new ByteBufferAccessor(buf), cache, version);
        ObjectNode node = JsonNodeFactory.instance.objectNode();
        node.put("bytes", Base64.getEncoder().encodeToString(buf.array()));
        return node;
    }

    /** StickyAssignor's own reading of its user data (v1, else v0, else nothing). */
    private static JsonNode sticky(JsonNode request) throws Exception {
        Method read = Class.forName("org.apache.kafka.clients.consumer.StickyAssignor")
            .getDeclaredMethod("deserializeTopicPartitionAssignment", ByteBuffer.class);
        read.setAccessible(true);
        Object memberData = read.invoke(null, ByteBuffer.wrap(b64(request.get("userData"))));
        ObjectNode node = JsonNodeFactory.instance.objectNode();
        var partitions = node.putArray("partitions");
        for (Object tp : (java.util.List<?>) memberData.getClass().getField("partitions").get(memberData)) {
            var topicPartition = (org.apache.kafka.common.TopicPartition) tp;
            partitions.addObject().put("topic", topicPartition.topic()).put("partition", topicPartition.partition());
        }
        Optional<?> generation = (Optional<?>) memberData.getClass().getField("generation").get(memberData);
        if (generation.isPresent()) {
            node.put("generation", (Integer) generation.get());
        } else {
            node.putNull("generation");
        }
        return node;
    }

    private static byte[] b64(JsonNode node) {
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    private static JsonNode format(JsonNode request) {
        byte[] key = b64(request.get("key"));
        byte[] value = b64(request.get("value"));
        ObjectNode node = JsonNodeFactory.instance.objectNode();
        node.set("offsets", viaFormatter("org.apache.kafka.tools.consumer.OffsetsMessageFormatter", key, value));
        node.set("group", viaFormatter("org.apache.kafka.tools.consumer.GroupMetadataMessageFormatter", key, value));
        node.set("coordinator", viaConverters(key, value));
        node.set("dump", viaDumpLogSegments(key, value));
        return node;
    }

    /** What a console-consumer formatter prints for one record (null when it prints nothing). */
    private static JsonNode viaFormatter(String className, byte[] key, byte[] value) {
        try {
            MessageFormatter formatter = (MessageFormatter) Class.forName(className).getConstructor().newInstance();
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            PrintStream stream = new PrintStream(bytes, true, StandardCharsets.UTF_8);
            formatter.writeTo(new ConsumerRecord<>("__consumer_offsets", 0, 0L, key, value), stream);
            String text = bytes.toString(StandardCharsets.UTF_8).trim();
            return text.isEmpty() ? null : MAPPER.readTree(text);
        } catch (Throwable t) {
            return error(t);
        }
    }

    /**
     * The 4.x coordinator-record serde and generated JSON converters for every record type, i.e. what
     * CoordinatorRecordMessageFormatter prints when no record type is filtered out.
     */
    private static JsonNode viaConverters(byte[] key, byte[] value) {
        try {
            Class<?> serdeClass = Class.forName("org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde");
            Class<?> converters = Class.forName("org.apache.kafka.coordinator.group.generated.CoordinatorRecordJsonConverters");
            Object serde = serdeClass.getConstructor().newInstance();
            Method deserialize = serdeClass.getMethod("deserialize", ByteBuffer.class, ByteBuffer.class);
            Object record = deserialize.invoke(serde, ByteBuffer.wrap(key), value == null ? null : ByteBuffer.wrap(value));
            Object keyMessage = record.getClass().getMethod("key").invoke(record);
            Object valueAndVersion = record.getClass().getMethod("value").invoke(record);
            Class<?> apiMessage = Class.forName("org.apache.kafka.common.protocol.ApiMessage");
            ObjectNode node = JsonNodeFactory.instance.objectNode();
            ObjectNode keyNode = node.putObject("key");
            keyNode.put("type", (Short) apiMessage.getMethod("apiKey").invoke(keyMessage));
            keyNode.set("data", (JsonNode) converters.getMethod("writeRecordKeyAsJson", apiMessage).invoke(null, keyMessage));
            if (valueAndVersion == null) {
                node.set("value", null);
            } else {
                short version = (Short) valueAndVersion.getClass().getMethod("version").invoke(valueAndVersion);
                Object message = valueAndVersion.getClass().getMethod("message").invoke(valueAndVersion);
                ObjectNode valueNode = node.putObject("value");
                valueNode.put("version", version);
                valueNode.set("data", (JsonNode) converters.getMethod("writeRecordValueAsJson", apiMessage, short.class)
                    .invoke(null, message, version));
            }
            return node;
        } catch (ClassNotFoundException e) {
            return null;
        } catch (Throwable t) {
            return error(t);
        }
    }

    /** JSON when the text is JSON (DumpLogSegments prints e.g. {@code <DELETE>} for a tombstone). */
    private static JsonNode jsonOrText(String text) {
        try {
            return MAPPER.readTree(text);
        } catch (java.io.IOException e) {
            return JsonNodeFactory.instance.textNode(text);
        }
    }

    /** DumpLogSegments --offsets-decoder (4.x): expands consumer-protocol subscription/assignment. */
    private static JsonNode viaDumpLogSegments(byte[] key, byte[] value) {
        try {
            Class<?> parserClass = Class.forName("org.apache.kafka.tools.DumpLogSegments$OffsetsMessageParser");
            Class<?> recordClass = Class.forName("org.apache.kafka.common.record.internal.Record");
            var ctor = parserClass.getDeclaredConstructor();
            ctor.setAccessible(true);
            Object parser = ctor.newInstance();
            Object record = Proxy.newProxyInstance(KafkaOracle.class.getClassLoader(), new Class<?>[] {recordClass},
                (proxy, method, args) -> switch (method.getName()) {
                    case "hasKey" -> key != null;
                    case "key" -> key == null ? null : ByteBuffer.wrap(key);
                    case "keySize" -> key == null ? -1 : key.length;
                    case "hasValue" -> value != null;
                    case "value" -> value == null ? null : ByteBuffer.wrap(value);
                    case "valueSize" -> value == null ? -1 : value.length;
                    default -> throw new UnsupportedOperationException(method.getName());
                });
            Method parse = parserClass.getMethod("parse", recordClass);
            parse.setAccessible(true);
            Object result = parse.invoke(parser, record);
            ObjectNode node = JsonNodeFactory.instance.objectNode();
            for (String part : new String[] {"key", "value"}) {
                Method accessor = result.getClass().getDeclaredMethod(part);
                accessor.setAccessible(true);
                Optional<?> text = (Optional<?>) accessor.invoke(result);
                node.set(part, text.isPresent() ? jsonOrText(text.get().toString()) : null);
            }
            return node;
        } catch (ClassNotFoundException e) {
            return null;
        } catch (Throwable t) {
            return error(t);
        }
    }
}
