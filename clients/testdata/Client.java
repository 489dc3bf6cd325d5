// The dead-lettering round trip of clients/doc.go with the RabbitMQ Java
// client (Debian librabbitmq-client-java). Run as a single-file source
// program: java -cp amqp-client.jar:slf4j-api.jar Client.java HOST PORT PREFIX
// It checks the x-death header's Java types and prints one line of JSON.
import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.BuiltinExchangeType;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.Delivery;
import com.rabbitmq.client.LongString;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Date;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

public class Client {
    public static void main(String[] args) throws Exception {
        String p = args[2];
        ConnectionFactory f = new ConnectionFactory();
        f.setHost(args[0]);
        f.setPort(Integer.parseInt(args[1]));
        try (Connection conn = f.newConnection("clients-" + p)) {
            Channel ch = conn.createChannel();
            ch.exchangeDeclare(p + ".in", BuiltinExchangeType.DIRECT, true);
            ch.exchangeDeclare(p + ".dlx", BuiltinExchangeType.DIRECT, true);
            Map<String, Object> qargs = new HashMap<>();
            qargs.put("x-dead-letter-exchange", p + ".dlx");
            qargs.put("x-dead-letter-routing-key", p + ".dead");
            ch.queueDeclare(p + ".work", true, false, false, qargs);
            ch.queueDeclare(p + ".dlq", true, false, false, null);
            ch.queueBind(p + ".work", p + ".in", p + ".key");
            ch.queueBind(p + ".dlq", p + ".dlx", p + ".dead");

            ch.confirmSelect();
            AMQP.BasicProperties props = new AMQP.BasicProperties.Builder()
                    .deliveryMode(2).messageId(p + "-1").build();
            ch.basicPublish(p + ".in", p + ".key", true, props,
                    ("dead letter from " + p).getBytes(StandardCharsets.UTF_8));
            ch.waitForConfirmsOrDie(10_000); // throws on nack or timeout

            Delivery rejected = consumeOne(ch, p + ".work");
            ch.basicReject(rejected.getEnvelope().getDeliveryTag(), false);
            Delivery dl = consumeOne(ch, p + ".dlq");
            ch.basicAck(dl.getEnvelope().getDeliveryTag(), false);

            Map<String, Object> h = dl.getProperties().getHeaders();
            List<?> xdeath = as(List.class, h.get("x-death"), "x-death");
            StringBuilder deaths = new StringBuilder();
            for (Object e : xdeath) {
                Map<?, ?> d = as(Map.class, e, "x-death entry");
                List<String> keys = new ArrayList<>();
                for (Object k : as(List.class, d.get("routing-keys"), "routing-keys")) {
                    keys.add(str(k, "routing-keys entry"));
                }
                long count = as(Long.class, d.get("count"), "count");
                Date time = as(Date.class, d.get("time"), "time");
                if (deaths.length() > 0) deaths.append(',');
                deaths.append(String.format(
                        "{\"queue\":%s,\"reason\":%s,\"count\":%d,\"exchange\":%s,\"routing_keys\":[%s],\"time\":%d}",
                        json(str(d.get("queue"), "queue")), json(str(d.get("reason"), "reason")), count,
                        json(str(d.get("exchange"), "exchange")),
                        String.join(",", keys.stream().map(Client::json).toList()), time.getTime() / 1000));
            }
            System.out.println(String.format(
                    "{\"client\":%s,\"confirmed\":true,\"rejected\":{\"body\":%s,\"redelivered\":%b},"
                            + "\"dead_letter\":{\"exchange\":%s,\"routing_key\":%s,\"body\":%s,\"delivery_mode\":%d,\"message_id\":%s},"
                            + "\"x_death\":[%s],\"first_death\":{\"queue\":%s,\"reason\":%s,\"exchange\":%s}}",
                    json("java amqp-client " + ConnectionFactory.class.getPackage().getImplementationVersion()),
                    json(new String(rejected.getBody(), StandardCharsets.UTF_8)), rejected.getEnvelope().isRedeliver(),
                    json(dl.getEnvelope().getExchange()), json(dl.getEnvelope().getRoutingKey()),
                    json(new String(dl.getBody(), StandardCharsets.UTF_8)), dl.getProperties().getDeliveryMode(),
                    json(dl.getProperties().getMessageId()), deaths,
                    json(str(h.get("x-first-death-queue"), "x-first-death-queue")),
                    json(str(h.get("x-first-death-reason"), "x-first-death-reason")),
                    json(str(h.get("x-first-death-exchange"), "x-first-death-exchange"))));
        }
    }

    // consumeOne consumes the next message of q, without acking it.
    static Delivery consumeOne(Channel ch, String q) throws Exception {
        BlockingQueue<Delivery> got = new ArrayBlockingQueue<>(16);
        String tag = ch.basicConsume(q, false, (t, d) -> got.add(d), t -> {});
        Delivery d = got.poll(10, TimeUnit.SECONDS);
        if (d == null) throw new IllegalStateException("no message from " + q + " within 10s");
        ch.basicCancel(tag);
        return d;
    }

    // as checks that v has the Java type the client library gives an AMQP
    // field of that kind.
    static <T> T as(Class<T> c, Object v, String what) {
        if (!c.isInstance(v)) {
            throw new IllegalStateException(what + " is " + (v == null ? "missing" : v.getClass().getName()) + ", want " + c.getName());
        }
        return c.cast(v);
    }

    // Long strings arrive as LongString, not String.
    static String str(Object v, String what) {
        return as(LongString.class, v, what).toString();
    }

    static String json(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
