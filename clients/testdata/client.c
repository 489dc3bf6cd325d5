/*
 * The dead-lettering round trip of clients/doc.go with the RabbitMQ C
 * client library, librabbitmq (Debian librabbitmq-dev), on which amqp-tools
 * are built. Build and run as:
 *
 *	cc -o client client.c -lrabbitmq && ./client HOST PORT PREFIX
 *
 * It checks the field kinds librabbitmq decodes the x-death header into
 * and prints one line of JSON.
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static void die(const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  vfprintf(stderr, format, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static void check_reply(amqp_connection_state_t conn, const char *what) {
  amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    die("%s: reply type %d, library error %s", what, r.reply_type, amqp_error_string2(r.library_error));
  }
}

static void check_status(int status, const char *what) {
  if (status != AMQP_STATUS_OK) {
    die("%s: %s", what, amqp_error_string2(status));
  }
}

/* field returns the value of key in t, after checking its kind. */
static const amqp_field_value_t *field(const amqp_table_t *t, const char *key, uint8_t kind) {
  for (int i = 0; i < t->num_entries; i++) {
    const amqp_table_entry_t *e = &t->entries[i];
    if (e->key.len == strlen(key) && memcmp(e->key.bytes, key, e->key.len) == 0) {
      if (e->value.kind != kind) {
        die("%s has field kind '%c', want '%c'", key, e->value.kind, kind);
      }
      return &e->value;
    }
  }
  die("%s is missing", key);
  return NULL;
}

static void print_json_bytes(amqp_bytes_t b) {
  const unsigned char *s = b.bytes;
  putchar('"');
  for (size_t i = 0; i < b.len; i++) {
    if (s[i] == '"' || s[i] == '\\') {
      printf("\\%c", s[i]);
    } else if (s[i] < 0x20) {
      printf("\\u%04x", s[i]);
    } else {
      putchar(s[i]);
    }
  }
  putchar('"');
}

static void print_json_string(const amqp_table_t *t, const char *key) {
  print_json_bytes(field(t, key, AMQP_FIELD_KIND_UTF8)->value.bytes);
}

/* consume_one consumes the next message of q, without acking it. */
static amqp_envelope_t consume_one(amqp_connection_state_t conn, const char *q) {
  amqp_basic_consume_ok_t *ok =
      amqp_basic_consume(conn, 1, amqp_cstring_bytes(q), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
  check_reply(conn, "basic.consume");
  amqp_bytes_t tag = amqp_bytes_malloc_dup(ok->consumer_tag);
  amqp_envelope_t env;
  struct timeval timeout = {10, 0};
  amqp_maybe_release_buffers(conn);
  amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &timeout, 0);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    die("no message from %s within 10s: reply type %d, library error %s", q, r.reply_type,
        amqp_error_string2(r.library_error));
  }
  amqp_basic_cancel(conn, 1, tag);
  check_reply(conn, "basic.cancel");
  amqp_bytes_free(tag);
  return env;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    die("usage: client HOST PORT PREFIX");
  }
  const char *p = argv[3];
  char in[128], dlx[128], work[128], dlq[128], key[128], dead[128], body[128], id[128];
  snprintf(in, sizeof in, "%s.in", p);
  snprintf(dlx, sizeof dlx, "%s.dlx", p);
  snprintf(work, sizeof work, "%s.work", p);
  snprintf(dlq, sizeof dlq, "%s.dlq", p);
  snprintf(key, sizeof key, "%s.key", p);
  snprintf(dead, sizeof dead, "%s.dead", p);
  snprintf(body, sizeof body, "dead letter from %s", p);
  snprintf(id, sizeof id, "%s-1", p);

  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *socket = amqp_tcp_socket_new(conn);
  if (socket == NULL) {
    die("create TCP socket");
  }
  check_status(amqp_socket_open(socket, argv[1], atoi(argv[2])), "connect");
  amqp_rpc_reply_t login = amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest");
  if (login.reply_type != AMQP_RESPONSE_NORMAL) {
    die("login: reply type %d", login.reply_type);
  }
  amqp_channel_open(conn, 1);
  check_reply(conn, "channel.open");

  amqp_exchange_declare(conn, 1, amqp_cstring_bytes(in), amqp_cstring_bytes("direct"), 0, 1, 0, 0, amqp_empty_table);
  check_reply(conn, "exchange.declare in");
  amqp_exchange_declare(conn, 1, amqp_cstring_bytes(dlx), amqp_cstring_bytes("direct"), 0, 1, 0, 0, amqp_empty_table);
  check_reply(conn, "exchange.declare dlx");
  amqp_table_entry_t args[2];
  args[0].key = amqp_cstring_bytes("x-dead-letter-exchange");
  args[0].value.kind = AMQP_FIELD_KIND_UTF8;
  args[0].value.value.bytes = amqp_cstring_bytes(dlx);
  args[1].key = amqp_cstring_bytes("x-dead-letter-routing-key");
  args[1].value.kind = AMQP_FIELD_KIND_UTF8;
  args[1].value.value.bytes = amqp_cstring_bytes(dead);
  amqp_table_t qargs = {2, args};
  amqp_queue_declare(conn, 1, amqp_cstring_bytes(work), 0, 1, 0, 0, qargs);
  check_reply(conn, "queue.declare work");
  amqp_queue_declare(conn, 1, amqp_cstring_bytes(dlq), 0, 1, 0, 0, amqp_empty_table);
  check_reply(conn, "queue.declare dlq");
  amqp_queue_bind(conn, 1, amqp_cstring_bytes(work), amqp_cstring_bytes(in), amqp_cstring_bytes(key), amqp_empty_table);
  check_reply(conn, "queue.bind work");
  amqp_queue_bind(conn, 1, amqp_cstring_bytes(dlq), amqp_cstring_bytes(dlx), amqp_cstring_bytes(dead), amqp_empty_table);
  check_reply(conn, "queue.bind dlq");

  amqp_confirm_select(conn, 1);
  check_reply(conn, "confirm.select");
  amqp_basic_properties_t props;
  props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  props.message_id = amqp_cstring_bytes(id);
  check_status(amqp_basic_publish(conn, 1, amqp_cstring_bytes(in), amqp_cstring_bytes(key), 1, 0, &props,
                                  amqp_cstring_bytes(body)),
               "basic.publish");
  /* The confirm is the next frame on the channel: nothing else is due. */
  amqp_frame_t frame;
  struct timeval timeout = {10, 0};
  check_status(amqp_simple_wait_frame_noblock(conn, &frame, &timeout), "wait for the publisher confirm");
  if (frame.frame_type != AMQP_FRAME_METHOD || frame.payload.method.id != AMQP_BASIC_ACK_METHOD) {
    die("after basic.publish in confirm mode: frame type %d method 0x%08x, want basic.ack", frame.frame_type,
        frame.payload.method.id);
  }
  amqp_basic_ack_t *ack = frame.payload.method.decoded;
  if (ack->delivery_tag != 1) {
    die("basic.ack for delivery tag %llu, want 1", (unsigned long long)ack->delivery_tag);
  }

  amqp_envelope_t rejected = consume_one(conn, work);
  check_status(amqp_basic_reject(conn, 1, rejected.delivery_tag, 0), "basic.reject");
  amqp_envelope_t dl = consume_one(conn, dlq);
  check_status(amqp_basic_ack(conn, 1, dl.delivery_tag, 0), "basic.ack");

  amqp_basic_properties_t *dp = &dl.message.properties;
  if (!(dp->_flags & AMQP_BASIC_HEADERS_FLAG)) {
    die("dead letter has no headers");
  }
  const amqp_table_t *h = &dp->headers;
  printf("{\"client\":\"librabbitmq %s\",\"confirmed\":true,\"rejected\":{\"body\":", amqp_version());
  print_json_bytes(rejected.message.body);
  printf(",\"redelivered\":%s},\"dead_letter\":{\"exchange\":", rejected.redelivered ? "true" : "false");
  print_json_bytes(dl.exchange);
  printf(",\"routing_key\":");
  print_json_bytes(dl.routing_key);
  printf(",\"body\":");
  print_json_bytes(dl.message.body);
  printf(",\"delivery_mode\":%d,\"message_id\":", (dp->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) ? dp->delivery_mode : 0);
  print_json_bytes((dp->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? dp->message_id : amqp_empty_bytes);
  printf("},\"x_death\":[");
  amqp_array_t deaths = field(h, "x-death", AMQP_FIELD_KIND_ARRAY)->value.array;
  for (int i = 0; i < deaths.num_entries; i++) {
    if (deaths.entries[i].kind != AMQP_FIELD_KIND_TABLE) {
      die("x-death[%d] has field kind '%c', want 'F'", i, deaths.entries[i].kind);
    }
    const amqp_table_t *d = &deaths.entries[i].value.table;
    printf("%s{\"queue\":", i ? "," : "");
    print_json_string(d, "queue");
    printf(",\"reason\":");
    print_json_string(d, "reason");
    printf(",\"count\":%lld,\"exchange\":", (long long)field(d, "count", AMQP_FIELD_KIND_I64)->value.i64);
    print_json_string(d, "exchange");
    printf(",\"routing_keys\":[");
    amqp_array_t keys = field(d, "routing-keys", AMQP_FIELD_KIND_ARRAY)->value.array;
    for (int j = 0; j < keys.num_entries; j++) {
      if (keys.entries[j].kind != AMQP_FIELD_KIND_UTF8) {
        die("routing-keys[%d] has field kind '%c', want 'S'", j, keys.entries[j].kind);
      }
      if (j) {
        putchar(',');
      }
      print_json_bytes(keys.entries[j].value.bytes);
    }
    printf("],\"time\":%llu}", (unsigned long long)field(d, "time", AMQP_FIELD_KIND_TIMESTAMP)->value.u64);
  }
  printf("],\"first_death\":{\"queue\":");
  print_json_string(h, "x-first-death-queue");
  printf(",\"reason\":");
  print_json_string(h, "x-first-death-reason");
  printf(",\"exchange\":");
  print_json_string(h, "x-first-death-exchange");
  printf("}}\n");

  amqp_destroy_envelope(&rejected);
  amqp_destroy_envelope(&dl);
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  return 0;
}
