#!/usr/bin/env bash
# make-fixtures.sh — record RabbitMQ 3.10's management API as reference fixtures.
#
#   make-fixtures.sh fixtures      write rabbitmq-3.10/*.json from the node at $MGMT / $AMQP,
#                                  in vhost /fixtures with users fx-*, all deleted afterwards
#   make-fixtures.sh definitions   build the /orders + /billing topology on the node at
#                                  $MGMT / $AMQP, verify it, export it to
#                                  rabbitmq-3.10-definitions.json, delete it, re-import the
#                                  file and verify again, delete it again
#   make-fixtures.sh import        POST the definitions file to $MGMT (e.g. a fresh node),
#                                  replay the expectations, delete what it created
#   make-fixtures.sh verify        replay rabbitmq-3.10-definitions.expect.json against $AMQP
#                                  (the topology must be in place)
#
# Needs curl, python3 and go (for amqptool, the AMQP half). See README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
MGMT=${MGMT:-http://127.0.0.1:15690}
AMQP=${AMQP:-127.0.0.1:5690}
out=$here/rabbitmq-3.10
defs=$here/rabbitmq-3.10-definitions.json
expect=$here/rabbitmq-3.10-definitions.expect.json

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tool=$work/amqptool
(cd "$root" && go build -o "$tool" ./mgmt/testdata/amqptool)

# ---------------------------------------------------------------------------
# HTTP helpers

# api METHOD PATH [BODY] — a call whose response is not recorded; prints the
# body, fails on a status >= 400. AUTH=user:password overrides guest:guest.
api() {
	local method=$1 path=$2 args=(-sS -g -f -X "$1" -u "${AUTH:-guest:guest}")
	if [[ $# -ge 3 ]]; then args+=(-H 'content-type: application/json' --data-binary "$3"); fi
	curl "${args[@]}" "$MGMT$path"
}

# cap NAME METHOD PATH [BODY] — make the call and record it as
# $out/NAME.json. AUTH=user:password (default guest:guest, "none": no
# Authorization header) and HDR="Name: value" (one extra request header).
cap() {
	local name=$1 method=$2 path=$3 t
	t=$(mktemp -d "$work/cap.XXXX")
	local args=(-sS -g -X "$method" -D "$t/headers" -o "$t/body" -w '%{http_code}')
	local auth=${AUTH:-guest:guest}
	[[ $auth != none ]] && args+=(-u "$auth")
	: >"$t/req"
	if [[ $# -ge 4 ]]; then
		args+=(-H 'content-type: application/json' --data-binary "$4")
		printf '%s' "$4" >"$t/req"
	fi
	: >"$t/reqheaders"
	if [[ -n ${HDR:-} ]]; then
		args+=(-H "$HDR")
		printf '%s' "$HDR" >"$t/reqheaders"
	fi
	curl "${args[@]}" "$MGMT$path" >"$t/status"
	python3 - "$out/$name.json" "$method" "$path" "$auth" $# "$t" <<'PY'
import json, os, sys
dest, method, path, auth, nargs, t = sys.argv[1:]
def read(n):
    with open(os.path.join(t, n), "rb") as f:
        return f.read().decode("utf-8", "replace")
def parse(s):
    try:
        return json.loads(s)
    except ValueError:
        return s
def canon(name):
    if name.lower() == "www-authenticate":
        return "WWW-Authenticate"
    return "-".join(w.capitalize() for w in name.split("-"))
headers = {}
for line in read("headers").splitlines()[1:]:
    if ":" in line:
        k, v = line.split(":", 1)
        if k.lower() != "date":
            headers[canon(k.strip())] = v.strip()
rec = {
    "method": method,
    "path": path,
    "user": None if auth == "none" else auth.split(":", 1)[0],
}
rh = read("reqheaders")
if rh:
    k, v = rh.split(":", 1)
    rec["request_headers"] = {k.strip(): v.strip()}
rec["request_body"] = parse(read("req")) if int(nargs) >= 4 else None
rec["status"] = int(read("status"))
rec["headers"] = headers
rec["body"] = parse(read("body"))
with open(dest, "w") as f:
    json.dump(rec, f, indent=2, ensure_ascii=False)
    f.write("\n")
print("%3d %-6s %-60s %s" % (rec["status"], method, path, os.path.basename(dest)))
PY
}

# wait_until PATH PYEXPR — poll a GET until PYEXPR (over the parsed body `b`)
# holds. The management API shows queue and connection statistics only after
# the next statistics emission (collect_statistics_interval, 5 s by default),
# so there is no event to wait for: poll, bounded.
wait_until() {
	local path=$1 expr=$2 i
	for i in $(seq 1 60); do
		if api GET "$path" 2>/dev/null | python3 -c "import json,sys; b=json.load(sys.stdin); sys.exit(0 if ($expr) else 1)" 2>/dev/null; then
			return 0
		fi
		sleep 1
	done
	echo "gave up waiting for $path to satisfy $expr" >&2
	return 1
}

# hash ALGORITHM PASSWORD — RabbitMQ's password_hash: base64(salt ++ H(salt ++ password))
# with a 4-byte salt; ALGORITHM is sha256, sha512 or md5.
hash() {
	python3 -c 'import base64,hashlib,os,sys; s=os.urandom(4); print(base64.b64encode(s+hashlib.new(sys.argv[1], s+sys.argv[2].encode()).digest()).decode())' "$1" "$2"
}

enc() { python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }

# ---------------------------------------------------------------------------
# fixtures: one file per call in $out

fixtures_cleanup() {
	api DELETE /api/vhosts/%2Ffixtures >/dev/null 2>&1 || true
	local u
	for u in fx-admin fx-mgmt fx-monitor fx-policy fx-none fx-hashed fx-nopw fx-notags fx-badalg; do
		api DELETE "/api/users/$u" >/dev/null 2>&1 || true
	done
	if [[ -n ${HOLD_PID:-} ]]; then kill "$HOLD_PID" 2>/dev/null || true; fi
}

fixtures() {
	mkdir -p "$out"
	find "$out" -name '*.json' ! -name 'definitions-*' -delete
	trap 'fixtures_cleanup; rm -rf "$work"' EXIT
	fixtures_cleanup
	local V=%2Ffixtures

	# --- writes: vhost, users, permissions, policies, exchanges, queues, bindings
	cap put-vhost-created PUT /api/vhosts/$V '{"description":"fixtures vhost","tags":"fixtures,test","default_queue_type":"classic"}'
	cap put-vhost-existing PUT /api/vhosts/$V '{"description":"fixtures vhost","tags":"fixtures,test"}'
	cap put-user-password PUT /api/users/fx-admin '{"password":"fx-admin-pw","tags":"administrator"}'
	cap put-user-password-existing PUT /api/users/fx-admin '{"password":"fx-admin-pw","tags":"administrator"}'
	cap put-user-hash-sha512 PUT /api/users/fx-mgmt "{\"password_hash\":\"$(hash sha512 fx-mgmt-pw)\",\"hashing_algorithm\":\"rabbit_password_hashing_sha512\",\"tags\":\"management\"}"
	cap put-user-hash-md5 PUT /api/users/fx-hashed "{\"password_hash\":\"$(hash md5 fx-hashed-pw)\",\"hashing_algorithm\":\"rabbit_password_hashing_md5\",\"tags\":\"\"}"
	cap put-user-monitoring PUT /api/users/fx-monitor '{"password":"fx-monitor-pw","tags":"monitoring"}'
	cap put-user-policymaker PUT /api/users/fx-policy '{"password":"fx-policy-pw","tags":["policymaker"]}'
	cap put-user-no-tags PUT /api/users/fx-none '{"password":"fx-none-pw","tags":""}'
	cap put-permissions-created PUT /api/permissions/$V/fx-admin '{"configure":".*","write":".*","read":".*"}'
	cap put-permissions-existing PUT /api/permissions/$V/fx-admin '{"configure":".*","write":".*","read":".*"}'
	cap put-permissions-restricted PUT /api/permissions/$V/fx-mgmt '{"configure":"^$","write":"^fx\\.","read":"^fx\\."}'
	api PUT /api/permissions/$V/fx-policy '{"configure":".*","write":".*","read":".*"}'
	api PUT /api/permissions/$V/fx-none '{"configure":".*","write":".*","read":".*"}'
	api PUT /api/permissions/$V/fx-monitor '{"configure":"","write":"","read":".*"}'

	cap put-policy-created PUT /api/policies/$V/fx-dlx '{"pattern":"^fx\\.work$","definition":{"dead-letter-exchange":"fx.dlx","max-length-bytes":1048576,"message-ttl":3600000},"priority":7,"apply-to":"queues"}'
	cap put-policy-existing PUT /api/policies/$V/fx-dlx '{"pattern":"^fx\\.work$","definition":{"dead-letter-exchange":"fx.dlx","max-length-bytes":1048576,"message-ttl":3600000},"priority":7,"apply-to":"queues"}'
	cap put-policy-exchanges PUT /api/policies/$V/fx-ae '{"pattern":"^fx\\.topic$","definition":{"alternate-exchange":"fx.ae"},"apply-to":"exchanges"}'
	cap put-operator-policy-created PUT /api/operator-policies/$V/fx-op '{"pattern":"^fx\\.","definition":{"max-length":50,"message-ttl":7200000,"expires":86400000},"priority":1,"apply-to":"queues"}'

	cap put-exchange-created PUT /api/exchanges/$V/fx.direct '{"type":"direct","durable":true,"auto_delete":false,"internal":false,"arguments":{"alternate-exchange":"fx.ae"}}'
	cap put-exchange-existing PUT /api/exchanges/$V/fx.direct '{"type":"direct","durable":true,"auto_delete":false,"internal":false,"arguments":{"alternate-exchange":"fx.ae"}}'
	cap put-exchange-minimal PUT /api/exchanges/$V/fx.ae '{"type":"fanout"}'
	cap put-exchange-internal PUT /api/exchanges/$V/fx.topic '{"type":"topic","durable":true,"internal":true}'
	api PUT /api/exchanges/$V/fx.dlx '{"type":"fanout","durable":true}'

	cap put-queue-created PUT /api/queues/$V/fx.work '{"durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"fx.dlx","x-dead-letter-routing-key":"dead","x-message-ttl":600000,"x-max-length":10,"x-overflow":"reject-publish"}}'
	cap put-queue-existing PUT /api/queues/$V/fx.work '{"durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"fx.dlx","x-dead-letter-routing-key":"dead","x-message-ttl":600000,"x-max-length":10,"x-overflow":"reject-publish"}}'
	cap put-queue-minimal PUT /api/queues/$V/fx.get '{}'
	cap put-queue-quorum PUT /api/queues/$V/fx.quorum '{"durable":true,"arguments":{"x-queue-type":"quorum","x-delivery-limit":3}}'
	api PUT /api/queues/$V/fx.dead '{"durable":true}'
	api PUT /api/queues/$V/fx.unrouted '{"durable":true}'
	api PUT /api/queues/$V/fx.audit '{"durable":true}'

	cap post-binding-queue POST /api/bindings/$V/e/fx.direct/q/fx.work '{"routing_key":"work","arguments":{}}'
	cap post-binding-queue-args POST /api/bindings/$V/e/fx.direct/q/fx.work '{"routing_key":"work","arguments":{"x-tag":"a"}}'
	cap post-binding-exchange POST /api/bindings/$V/e/fx.direct/e/fx.topic '{"routing_key":"audit"}'
	cap post-binding-no-body-key POST /api/bindings/$V/e/fx.dlx/q/fx.dead '{}'
	api POST /api/bindings/$V/e/fx.ae/q/fx.unrouted '{"routing_key":""}' >/dev/null
	api POST /api/bindings/$V/e/fx.topic/q/fx.audit '{"routing_key":"#"}' >/dev/null

	# --- reads of the static topology
	cap get-vhosts GET /api/vhosts
	cap get-vhost GET /api/vhosts/$V
	cap get-vhost-permissions GET /api/vhosts/$V/permissions
	cap get-users GET /api/users
	cap get-user GET /api/users/fx-admin
	cap get-user-hashed GET /api/users/fx-mgmt
	cap get-user-permissions GET /api/users/fx-mgmt/permissions
	cap get-permissions GET /api/permissions
	cap get-permission GET /api/permissions/$V/fx-mgmt
	cap get-policies GET /api/policies
	cap get-policies-vhost GET /api/policies/$V
	cap get-policy GET /api/policies/$V/fx-dlx
	cap get-operator-policies GET /api/operator-policies
	cap get-operator-policies-vhost GET /api/operator-policies/$V
	cap get-operator-policy GET /api/operator-policies/$V/fx-op
	cap get-exchanges-vhost GET /api/exchanges/$V
	cap get-exchange GET /api/exchanges/$V/fx.direct
	cap get-exchange-default GET /api/exchanges/$V/amq.default
	cap get-exchange-bindings-source GET /api/exchanges/$V/fx.direct/bindings/source
	cap get-bindings-vhost GET /api/bindings/$V
	cap get-bindings-e-q GET /api/bindings/$V/e/fx.direct/q/fx.work
	cap get-binding-e-q-props GET /api/bindings/$V/e/fx.direct/q/fx.work/work
	cap get-bindings-e-e GET /api/bindings/$V/e/fx.direct/e/fx.topic
	cap get-queue-bindings GET /api/queues/$V/fx.work/bindings

	# --- live state: messages, a consumer with unacked deliveries, a named connection
	"$tool" publish-get -url "amqp://guest:guest@$AMQP/%2Ffixtures" -queue fx.get
	exec {hold_out}< <("$tool" hold -url "amqp://guest:guest@$AMQP/%2Ffixtures" -name fixtures-consumer \
		-exchange fx.direct -key work -queue fx.work -publish 5 -prefetch 2 & echo "pid $!"; wait)
	local line
	read -r line <&"$hold_out"
	HOLD_PID=${line#pid }
	read -r line <&"$hold_out"
	[[ $line == ready ]] || { echo "hold: $line" >&2; return 1; }
	wait_until /api/queues/$V/fx.work 'b.get("messages")==5 and b.get("messages_unacknowledged")==2 and b.get("consumers")==1'
	wait_until /api/queues/$V/fx.get 'b.get("messages")==4'
	wait_until /api/connections 'any(c.get("user_provided_name")=="fixtures-consumer" and c.get("channels")==2 and "recv_oct" in c for c in b)'
	wait_until /api/channels 'sum(1 for c in b if c.get("vhost")=="/fixtures" and "message_stats" in c)==2'
	local cname
	cname=$(api GET /api/connections | python3 -c 'import json,sys; print([c["name"] for c in json.load(sys.stdin) if c.get("user_provided_name")=="fixtures-consumer"][0])')
	local CN; CN=$(enc "$cname")

	cap get-overview GET /api/overview
	cap get-whoami GET /api/whoami
	cap get-queues GET /api/queues
	cap get-queues-vhost GET /api/queues/$V
	cap get-queues-vhost-columns GET "/api/queues/$V?columns=name,messages,messages_ready,messages_unacknowledged,consumers,arguments,policy"
	cap get-queues-vhost-paged GET "/api/queues/$V?page=1&page_size=2&name=fx&use_regex=false&sort=name"
	cap get-queue GET /api/queues/$V/fx.work
	cap get-queue-quorum GET /api/queues/$V/fx.quorum
	cap get-queue-plain GET /api/queues/$V/fx.get
	cap get-connections GET /api/connections
	cap get-vhost-connections GET /api/vhosts/$V/connections
	cap get-connection GET "/api/connections/$CN"
	cap get-connection-channels GET "/api/connections/$CN/channels"
	cap get-channels GET /api/channels
	local chname; chname=$(api GET "/api/connections/$CN/channels" | python3 -c 'import json,sys; print(sorted(c["name"] for c in json.load(sys.stdin))[1])')
	cap get-channel GET "/api/channels/$(enc "$chname")"
	cap get-consumers GET /api/consumers/$V
	cap get-definitions GET /api/definitions
	cap get-definitions-vhost GET /api/definitions/$V
	cap get-health-alarms GET /api/health/checks/alarms
	cap get-aliveness GET /api/aliveness-test/$V

	# --- /get on fx.get: 1 props+headers text, 2 binary, 3 x-death-like, 4 long text
	cap post-get-ack-requeue-true POST /api/queues/$V/fx.get/get '{"count":4,"ackmode":"ack_requeue_true","encoding":"auto","truncate":50000}'
	cap post-get-truncate POST /api/queues/$V/fx.get/get '{"count":4,"ackmode":"ack_requeue_true","encoding":"auto","truncate":10}'
	cap post-get-base64 POST /api/queues/$V/fx.get/get '{"count":4,"ackmode":"ack_requeue_true","encoding":"base64"}'
	cap post-get-reject-requeue-true POST /api/queues/$V/fx.get/get '{"count":1,"ackmode":"reject_requeue_true","encoding":"auto"}'
	cap post-get-ack-requeue-false POST /api/queues/$V/fx.get/get '{"count":1,"ackmode":"ack_requeue_false","encoding":"auto"}'
	cap post-get-reject-requeue-false POST /api/queues/$V/fx.get/get '{"count":1,"ackmode":"reject_requeue_false","encoding":"auto"}'
	cap post-get-count-more-than-ready POST /api/queues/$V/fx.get/get '{"count":10,"ackmode":"ack_requeue_true","encoding":"auto"}'
	cap post-get-string-count POST /api/queues/$V/fx.get/get '{"count":"1","ackmode":"ack_requeue_true","encoding":"auto","truncate":"5"}'
	cap err-post-get-bad-ackmode POST /api/queues/$V/fx.get/get '{"count":1,"ackmode":"nope","encoding":"auto"}'
	cap err-post-get-bad-encoding POST /api/queues/$V/fx.get/get '{"count":1,"ackmode":"ack_requeue_true","encoding":"nope"}'
	cap err-post-get-missing-fields POST /api/queues/$V/fx.get/get '{}'
	cap err-post-get-absent-queue POST /api/queues/$V/fx.absent/get '{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}'
	# a real dead-lettered message: reject one of fx.work's ready messages, read it in fx.dead
	cap post-get-work-reject-requeue-false POST /api/queues/$V/fx.work/get '{"count":1,"ackmode":"reject_requeue_false","encoding":"auto"}'
	wait_until /api/queues/$V/fx.dead 'b.get("messages")==1'
	cap post-get-dead-lettered POST /api/queues/$V/fx.dead/get '{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}'
	cap delete-queue-contents DELETE /api/queues/$V/fx.get/contents
	cap post-get-empty POST /api/queues/$V/fx.get/get '{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}'
	cap err-delete-queue-contents-absent DELETE /api/queues/$V/fx.absent/contents

	# --- access control
	AUTH=guest:wrong cap err-wrong-password GET /api/overview
	AUTH=nobody:nothing cap err-unknown-user GET /api/overview
	AUTH=none cap err-no-auth GET /api/overview
	AUTH=fx-none:fx-none-pw cap err-no-tags-overview GET /api/overview
	AUTH=fx-none:fx-none-pw cap err-no-tags-whoami GET /api/whoami
	AUTH=fx-mgmt:fx-mgmt-pw cap mgmt-whoami GET /api/whoami
	AUTH=fx-mgmt:fx-mgmt-pw cap mgmt-overview GET /api/overview
	AUTH=fx-mgmt:fx-mgmt-pw cap mgmt-vhosts GET /api/vhosts
	AUTH=fx-mgmt:fx-mgmt-pw cap mgmt-queues GET /api/queues
	AUTH=fx-mgmt:fx-mgmt-pw cap mgmt-connections GET /api/connections
	AUTH=fx-mgmt:fx-mgmt-pw cap err-mgmt-users GET /api/users
	AUTH=fx-mgmt:fx-mgmt-pw cap err-mgmt-user GET /api/users/fx-admin
	AUTH=fx-mgmt:fx-mgmt-pw cap err-mgmt-permissions GET /api/permissions
	AUTH=fx-mgmt:fx-mgmt-pw cap err-mgmt-put-vhost PUT /api/vhosts/%2Ffixtures-denied '{}'
	AUTH=fx-mgmt:fx-mgmt-pw cap err-mgmt-definitions GET /api/definitions
	AUTH=fx-mgmt:fx-mgmt-pw cap err-mgmt-put-policy PUT /api/policies/$V/fx-denied '{"pattern":"^x$","definition":{"max-length":1}}'
	AUTH=fx-mgmt:fx-mgmt-pw cap err-mgmt-delete-connection DELETE "/api/connections/$CN"
	AUTH=fx-mgmt:fx-mgmt-pw cap mgmt-policies GET /api/policies/$V
	AUTH=fx-mgmt:fx-mgmt-pw cap mgmt-put-queue-no-configure PUT /api/queues/$V/fx.mgmt-declared '{"durable":true}'
	AUTH=fx-monitor:fx-monitor-pw cap monitor-connections GET /api/connections
	AUTH=fx-monitor:fx-monitor-pw cap err-monitor-users GET /api/users
	AUTH=fx-monitor:fx-monitor-pw cap err-monitor-put-vhost PUT /api/vhosts/%2Ffixtures-denied '{}'
	AUTH=fx-policy:fx-policy-pw cap policymaker-put-policy PUT /api/policies/$V/fx-by-policymaker '{"pattern":"^fx\\.nothing$","definition":{"max-length":1}}'
	AUTH=fx-policy:fx-policy-pw cap err-policymaker-users GET /api/users
	AUTH=fx-hashed:fx-hashed-pw cap err-md5-user-no-tags-whoami GET /api/whoami

	# --- errors
	cap err-post-overview POST /api/overview '{}'
	cap err-delete-overview DELETE /api/overview
	cap err-put-vhosts-collection PUT /api/vhosts '{}'
	cap err-bad-json PUT /api/vhosts/%2Ffixtures-bad '{"description":'
	cap err-bad-json-policy PUT /api/policies/$V/fx-bad '{"pattern":"x","definition":{'
	cap err-policy-message-ttl-string PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"message-ttl":"abc"},"apply-to":"queues"}'
	cap err-policy-message-ttl-negative PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"message-ttl":-1},"apply-to":"queues"}'
	cap err-policy-unknown-key PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"no-such-key":1},"apply-to":"queues"}'
	cap err-policy-two-errors PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"max-length":"x","no-such-key":1}}'
	cap err-policy-overflow-value PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"overflow":"drop-tail"}}'
	cap err-policy-dlx-not-string PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"dead-letter-exchange":1}}'
	cap put-policy-dlrk-without-dlx PUT /api/policies/$V/fx-bad '{"pattern":"^fx\\.nothing$","definition":{"dead-letter-routing-key":"k"}}'
	api DELETE /api/policies/$V/fx-bad
	cap err-policy-bad-apply-to PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"max-length":1},"apply-to":"everything"}'
	cap err-policy-bad-regex PUT /api/policies/$V/fx-bad '{"pattern":"(","definition":{"max-length":1}}'
	cap err-policy-missing-pattern PUT /api/policies/$V/fx-bad '{"definition":{"max-length":1}}'
	cap err-policy-missing-definition PUT /api/policies/$V/fx-bad '{"pattern":".*"}'
	cap err-policy-empty-definition PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{}}'
	cap err-policy-priority-string PUT /api/policies/$V/fx-bad '{"pattern":".*","definition":{"max-length":1},"priority":"high"}'
	cap err-operator-policy-unsupported-key PUT /api/operator-policies/$V/fx-bad '{"pattern":".*","definition":{"dead-letter-exchange":"x"},"apply-to":"queues"}'
	cap err-policy-unknown-vhost PUT /api/policies/%2Fnope/fx-bad '{"pattern":".*","definition":{"max-length":1}}'
	cap err-get-policy-absent GET /api/policies/$V/fx-absent
	cap err-get-vhost-unknown GET /api/vhosts/%2Fnope
	cap err-get-queues-unknown-vhost GET /api/queues/%2Fnope
	cap err-get-exchanges-unknown-vhost GET /api/exchanges/%2Fnope
	cap err-put-queue-unknown-vhost PUT /api/queues/%2Fnope/q '{"durable":true}'
	cap err-put-exchange-unknown-vhost PUT /api/exchanges/%2Fnope/x '{"type":"direct"}'
	cap err-get-queue-absent GET /api/queues/$V/fx.absent
	cap err-get-exchange-absent GET /api/exchanges/$V/fx.absent
	cap err-get-user-absent GET /api/users/fx-absent
	cap err-get-permission-absent GET /api/permissions/$V/fx-monitor-absent
	cap err-put-queue-inequivalent PUT /api/queues/$V/fx.work '{"durable":true,"arguments":{"x-max-length":20}}'
	cap err-put-queue-inequivalent-durable PUT /api/queues/$V/fx.work '{"durable":false,"arguments":{"x-dead-letter-exchange":"fx.dlx","x-dead-letter-routing-key":"dead","x-message-ttl":600000,"x-max-length":10,"x-overflow":"reject-publish"}}'
	cap err-put-queue-bad-arg PUT /api/queues/$V/fx.bad '{"durable":true,"arguments":{"x-max-length":"ten"}}'
	cap err-put-queue-bad-overflow PUT /api/queues/$V/fx.bad '{"durable":true,"arguments":{"x-overflow":"drop-tail"}}'
	cap err-put-queue-amq-prefix PUT /api/queues/$V/amq.fx '{"durable":true}'
	cap err-put-exchange-inequivalent PUT /api/exchanges/$V/fx.direct '{"type":"fanout","durable":true}'
	cap err-put-exchange-bad-type PUT /api/exchanges/$V/fx.bad '{"type":"no-such-type"}'
	cap put-exchange-missing-type PUT /api/exchanges/$V/fx.notype '{"durable":true}'
	cap get-exchange-missing-type GET /api/exchanges/$V/fx.notype
	cap put-user-no-password PUT /api/users/fx-nopw '{"tags":"management"}'
	cap err-put-user-password-no-tags PUT /api/users/fx-notags '{"password":"fx-notags-pw"}'
	cap err-put-user-hash-no-tags PUT /api/users/fx-badalg '{"password_hash":"abc","hashing_algorithm":"rabbit_password_hashing_sha512"}'
	cap put-user-unknown-algorithm PUT /api/users/fx-badalg '{"password_hash":"'"$(hash sha256 x)"'","hashing_algorithm":"rabbit_password_hashing_sha1","tags":""}'
	cap get-user-unknown-algorithm GET /api/users/fx-badalg
	api DELETE /api/users/fx-badalg
	cap err-put-user-bad-hash PUT /api/users/fx-badalg '{"password_hash":"not base64!","hashing_algorithm":"rabbit_password_hashing_sha256","tags":""}'
	cap err-put-user-bad-tags PUT /api/users/fx-badalg '{"password":"x","tags":42}'
	cap err-put-permissions-unknown-user PUT /api/permissions/$V/fx-absent '{"configure":".*","write":".*","read":".*"}'
	cap err-put-permissions-unknown-vhost PUT /api/permissions/%2Fnope/fx-admin '{"configure":".*","write":".*","read":".*"}'
	cap err-put-permissions-bad-regex PUT /api/permissions/$V/fx-admin '{"configure":"(","write":".*","read":".*"}'
	cap err-put-permissions-missing-field PUT /api/permissions/$V/fx-admin '{"configure":".*"}'
	cap err-post-binding-absent-queue POST /api/bindings/$V/e/fx.direct/q/fx.absent '{"routing_key":"k"}'
	cap err-post-binding-absent-exchange POST /api/bindings/$V/e/fx.absent/q/fx.work '{"routing_key":"k"}'
	cap err-get-binding-absent GET /api/bindings/$V/e/fx.direct/q/fx.work/absent
	cap err-delete-queue-if-empty DELETE "/api/queues/$V/fx.work?if-empty=true"
	cap err-delete-queue-if-unused DELETE "/api/queues/$V/fx.work?if-unused=true"
	cap err-delete-queue-absent DELETE /api/queues/$V/fx.absent
	cap err-delete-exchange-absent DELETE /api/exchanges/$V/fx.absent
	cap err-delete-binding-absent DELETE /api/bindings/$V/e/fx.direct/q/fx.work/absent
	cap err-delete-policy-absent DELETE /api/policies/$V/fx-absent
	cap err-delete-user-absent DELETE /api/users/fx-absent
	cap err-delete-vhost-absent DELETE /api/vhosts/%2Fnope
	cap err-delete-connection-absent DELETE /api/connections/nope
	cap err-aliveness-unknown-vhost GET /api/aliveness-test/%2Fnope
	cap err-get-unknown-path GET /api/no-such-thing

	# --- close the held connection with a reason; hold prints what the client saw
	HDR="X-Reason: closed by make-fixtures" cap delete-connection DELETE "/api/connections/$CN"
	read -r line <&"$hold_out"
	printf '%s\n' "$line" >"$work/close.json"
	# what the AMQP client saw goes into the fixture as "client_close"
	python3 - "$work/close.json" "$out/delete-connection.json" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
rec = json.load(open(sys.argv[2]))
rec["client_close"] = rep
with open(sys.argv[2], "w") as f:
    json.dump(rec, f, indent=2, ensure_ascii=False)
    f.write("\n")
print("client saw:", rep)
PY
	wait_until /api/queues/$V/fx.work 'b.get("consumers")==0 and b.get("messages_unacknowledged")==0'
	cap get-queue-after-close GET /api/queues/$V/fx.work

	# --- deletes
	local props
	props=$(api GET /api/bindings/$V/e/fx.direct/q/fx.work | python3 -c 'import json,sys; print([b["properties_key"] for b in json.load(sys.stdin) if b["arguments"]][0])')
	cap delete-binding-args DELETE "/api/bindings/$V/e/fx.direct/q/fx.work/$(enc "$props")"
	cap delete-binding DELETE /api/bindings/$V/e/fx.direct/q/fx.work/work
	cap delete-binding-e-e DELETE /api/bindings/$V/e/fx.direct/e/fx.topic/audit
	cap delete-queue DELETE /api/queues/$V/fx.work
	cap delete-queue-if-empty DELETE "/api/queues/$V/fx.get?if-empty=true&if-unused=true"
	cap delete-exchange DELETE /api/exchanges/$V/fx.direct
	cap err-delete-exchange-if-unused DELETE "/api/exchanges/$V/fx.ae?if-unused=true"
	cap delete-policy DELETE /api/policies/$V/fx-dlx
	cap delete-operator-policy DELETE /api/operator-policies/$V/fx-op
	cap delete-permissions DELETE /api/permissions/$V/fx-mgmt
	cap delete-user DELETE /api/users/fx-mgmt
	cap delete-vhost DELETE /api/vhosts/$V
	cap err-get-vhost-deleted GET /api/vhosts/$V
	fixtures_cleanup
	trap 'rm -rf "$work"' EXIT
	exec {hold_out}<&-
}

# ---------------------------------------------------------------------------
# definitions: a realistic two-vhost topology, exported, re-imported, replayed

# The users of the definitions file and their passwords (README.md lists them).
DEF_USERS=(ops-admin orders-app billing-app monitor billing-worker)

definitions_cleanup() {
	api DELETE /api/vhosts/%2Forders >/dev/null 2>&1 || true
	api DELETE /api/vhosts/%2Fbilling >/dev/null 2>&1 || true
	local u
	for u in "${DEF_USERS[@]}"; do api DELETE "/api/users/$u" >/dev/null 2>&1 || true; done
}

definitions_build() {
	local O=%2Forders B=%2Fbilling
	api PUT /api/vhosts/$O '{"description":"Order processing","tags":"orders,production"}'
	api PUT /api/vhosts/$B '{"description":"Invoices and payments","tags":"billing"}'

	api PUT /api/users/ops-admin '{"password":"ops-admin-secret","tags":"administrator"}'
	api PUT /api/users/orders-app "{\"password_hash\":\"$(hash sha512 orders-app-secret)\",\"hashing_algorithm\":\"rabbit_password_hashing_sha512\",\"tags\":\"management\"}"
	api PUT /api/users/billing-app "{\"password_hash\":\"$(hash md5 billing-app-secret)\",\"hashing_algorithm\":\"rabbit_password_hashing_md5\",\"tags\":\"policymaker\"}"
	api PUT /api/users/monitor '{"password":"monitor-secret","tags":"monitoring"}'
	api PUT /api/users/billing-worker '{"password":"billing-worker-secret","tags":""}'

	api PUT /api/permissions/$O/ops-admin '{"configure":".*","write":".*","read":".*"}'
	api PUT /api/permissions/$B/ops-admin '{"configure":".*","write":".*","read":".*"}'
	api PUT /api/permissions/$O/orders-app '{"configure":"^$","write":"^orders\\.","read":"^orders\\."}'
	api PUT /api/permissions/$B/billing-app '{"configure":".*","write":".*","read":".*"}'
	api PUT /api/permissions/$O/monitor '{"configure":"^$","write":"^$","read":".*"}'
	api PUT /api/permissions/$B/monitor '{"configure":"^$","write":"^$","read":".*"}'
	api PUT /api/permissions/$B/billing-worker '{"configure":"^$","write":"^billing$","read":"^billing\\.invoices$"}'

	# /orders: a topic exchange with an alternate exchange and an exchange-to-exchange
	# binding into an internal fanout, a headers exchange, a direct DLX with one DLQ per reason.
	api PUT /api/exchanges/$O/orders.topic '{"type":"topic","durable":true,"arguments":{"alternate-exchange":"orders.unrouted"}}'
	api PUT /api/exchanges/$O/orders.unrouted '{"type":"fanout","durable":true}'
	api PUT /api/exchanges/$O/orders.internal '{"type":"fanout","durable":true,"internal":true}'
	api PUT /api/exchanges/$O/orders.headers '{"type":"headers","durable":true}'
	api PUT /api/exchanges/$O/orders.dlx '{"type":"direct","durable":true}'
	api PUT /api/queues/$O/orders.new '{"durable":true,"arguments":{"x-dead-letter-exchange":"orders.dlx","x-dead-letter-routing-key":"rejected"}}'
	api PUT /api/queues/$O/orders.all '{"durable":true}'
	api PUT /api/queues/$O/orders.audit '{"durable":true}'
	api PUT /api/queues/$O/orders.delay '{"durable":true,"arguments":{"x-message-ttl":1000,"x-dead-letter-exchange":"orders.dlx","x-dead-letter-routing-key":"expired"}}'
	api PUT /api/queues/$O/orders.capped '{"durable":true,"arguments":{"x-max-length":2,"x-overflow":"drop-head","x-dead-letter-exchange":"orders.dlx","x-dead-letter-routing-key":"overflow"}}'
	api PUT /api/queues/$O/orders.retry '{"durable":true}'
	api PUT /api/queues/$O/orders.qq '{"durable":true,"arguments":{"x-queue-type":"quorum","x-delivery-limit":2,"x-dead-letter-exchange":"orders.dlx","x-dead-letter-routing-key":"poison"}}'
	api PUT /api/queues/$O/orders.unrouted '{"durable":true}'
	api PUT /api/queues/$O/orders.priority '{"durable":true}'
	api PUT /api/queues/$O/orders.express '{"durable":true}'
	local r
	for r in rejected expired overflow policy poison; do
		api PUT /api/queues/$O/orders.dlq.$r '{"durable":true}'
		api POST /api/bindings/$O/e/orders.dlx/q/orders.dlq.$r "{\"routing_key\":\"$r\"}"
	done
	api POST /api/bindings/$O/e/orders.topic/q/orders.new '{"routing_key":"order.created.*"}'
	api POST /api/bindings/$O/e/orders.topic/q/orders.all '{"routing_key":"order.#"}'
	api POST /api/bindings/$O/e/orders.topic/q/orders.qq '{"routing_key":"order.paid.*"}'
	api POST /api/bindings/$O/e/orders.topic/e/orders.internal '{"routing_key":"order.*.eu"}'
	api POST /api/bindings/$O/e/orders.internal/q/orders.audit '{"routing_key":""}'
	api POST /api/bindings/$O/e/orders.unrouted/q/orders.unrouted '{"routing_key":""}'
	api POST /api/bindings/$O/e/orders.headers/q/orders.priority '{"routing_key":"","arguments":{"x-match":"all","priority":"high","region":"eu"}}'
	api POST /api/bindings/$O/e/orders.headers/q/orders.express '{"routing_key":"","arguments":{"x-match":"any","express":true,"region":"us"}}'
	api PUT /api/policies/$O/orders-dlx '{"pattern":"^orders\\.(new|all)$","definition":{"dead-letter-exchange":"orders.dlx","dead-letter-routing-key":"policy"},"priority":10,"apply-to":"queues"}'
	api PUT /api/policies/$O/orders-retry '{"pattern":"^orders\\.retry$","definition":{"message-ttl":1500,"dead-letter-exchange":"orders.topic","dead-letter-routing-key":"order.retried.eu"},"priority":5,"apply-to":"queues"}'
	api PUT /api/policies/$O/orders-audit-ttl '{"pattern":"^orders\\.audit$","definition":{"message-ttl":604800000},"priority":0,"apply-to":"queues"}'
	api PUT /api/operator-policies/$O/orders-limits '{"pattern":".*","definition":{"max-length":100000,"max-length-bytes":1073741824},"priority":0,"apply-to":"queues"}'

	# /billing: a direct exchange whose alternate exchange is set by policy, a headers
	# exchange, a fanout DLX; an invoices queue that dead-letters refused publishes.
	api PUT /api/exchanges/$B/billing '{"type":"direct","durable":true}'
	api PUT /api/exchanges/$B/billing.headers '{"type":"headers","durable":true}'
	api PUT /api/exchanges/$B/billing.dlx '{"type":"fanout","durable":true}'
	api PUT /api/exchanges/$B/billing.unrouted '{"type":"fanout","durable":true}'
	api PUT /api/queues/$B/billing.invoices '{"durable":true,"arguments":{"x-max-length":3,"x-overflow":"reject-publish-dlx","x-dead-letter-exchange":"billing.dlx"}}'
	api PUT /api/queues/$B/billing.refunds '{"durable":true}'
	api PUT /api/queues/$B/billing.payments.eu '{"durable":true}'
	api PUT /api/queues/$B/billing.payments.large '{"durable":true}'
	api PUT /api/queues/$B/billing.dlq '{"durable":true}'
	api PUT /api/queues/$B/billing.unrouted '{"durable":true}'
	api POST /api/bindings/$B/e/billing/q/billing.invoices '{"routing_key":"invoice"}'
	api POST /api/bindings/$B/e/billing/q/billing.refunds '{"routing_key":"refund"}'
	api POST /api/bindings/$B/e/billing.headers/q/billing.payments.eu '{"routing_key":"","arguments":{"x-match":"all","region":"eu","currency":"EUR"}}'
	api POST /api/bindings/$B/e/billing.headers/q/billing.payments.large '{"routing_key":"","arguments":{"x-match":"any","size":"large","priority":"high"}}'
	api POST /api/bindings/$B/e/billing.dlx/q/billing.dlq '{"routing_key":""}'
	api POST /api/bindings/$B/e/billing.unrouted/q/billing.unrouted '{"routing_key":""}'
	api PUT /api/policies/$B/billing-ae '{"pattern":"^billing$","definition":{"alternate-exchange":"billing.unrouted"},"priority":0,"apply-to":"exchanges"}'
	api PUT /api/policies/$B/billing-dlx '{"pattern":"^billing\\.(refunds|payments\\..*)$","definition":{"dead-letter-exchange":"billing.dlx"},"priority":1,"apply-to":"queues"}'
	api PUT /api/operator-policies/$B/billing-ttl-cap '{"pattern":"^billing\\.","definition":{"message-ttl":2592000000},"priority":0,"apply-to":"queues"}'
}

replay() { "$tool" verify -amqp "$AMQP" -http "$MGMT" -defs "$defs" -expect "$expect" "$@"; }

definitions() {
	trap 'definitions_cleanup; rm -rf "$work"' EXIT
	definitions_cleanup
	definitions_build
	# policies apply asynchronously to existing queues; wait until they show
	wait_until /api/queues/%2Forders/orders.retry 'b.get("policy")=="orders-retry" and b.get("operator_policy")=="orders-limits"'
	wait_until /api/queues/%2Fbilling/billing.refunds 'b.get("policy")=="billing-dlx"'
	curl -sS -f -u guest:guest -o "$work/export.json" "$MGMT/api/definitions"
	python3 - "$work/export.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
foreign = sorted(v["name"] for v in d["vhosts"] if v["name"] not in ("/", "/orders", "/billing"))
root = [o for k in ("queues", "exchanges", "bindings", "policies") for o in d.get(k, []) if o.get("vhost") == "/"]
if foreign or root:
    sys.exit("the node holds objects other than this topology (%s, %d in /): use a fresh node" % (foreign, len(root)))
PY
	cp "$work/export.json" "$defs"
	echo "== replay on the node the topology was built on"
	replay

	echo "== delete the topology, import the file, replay again"
	definitions_cleanup
	cap definitions-post POST /api/definitions "$(cat "$defs")"
	wait_until /api/queues/%2Forders/orders.retry 'b.get("policy")=="orders-retry"'
	replay
	AUTH=guest:guest cap definitions-post-bad-json POST /api/definitions '{"users":['
	curl -sS -f -u guest:guest -o "$work/vhost-export.json" "$MGMT/api/definitions/%2Forders"
	api DELETE /api/vhosts/%2Forders
	api PUT /api/vhosts/%2Forders '{}'
	# a per-vhost export carries no users or permissions; the vhost's permissions went with it
	api PUT /api/permissions/%2Forders/ops-admin '{"configure":".*","write":".*","read":".*"}'
	cap definitions-post-vhost POST /api/definitions/%2Forders "$(cat "$work/vhost-export.json")"
	wait_until /api/queues/%2Forders/orders.retry 'b.get("policy")=="orders-retry"'
	replay -only routes,dead_letters
	# 3.10 exports vhosts by name only, but imports description and tags
	cap definitions-post-vhost-metadata POST /api/definitions '{"vhosts":[{"name":"/meta","description":"from import","tags":["a","b"]}]}'
	cap definitions-vhost-metadata-imported GET /api/vhosts/%2Fmeta
	api DELETE /api/vhosts/%2Fmeta
	definitions_cleanup
	trap 'rm -rf "$work"' EXIT
}

# import: POST the definitions file to a node (e.g. a fresh one), replay the
# expectations, then delete what the file created (but not "/" or guest).
import_verify() {
	trap 'definitions_cleanup; rm -rf "$work"' EXIT
	api POST /api/definitions "$(cat "$defs")"
	wait_until /api/queues/%2Forders/orders.retry 'b.get("policy")=="orders-retry"'
	wait_until /api/queues/%2Fbilling/billing.refunds 'b.get("policy")=="billing-dlx"'
	replay
	definitions_cleanup
	trap 'rm -rf "$work"' EXIT
}

case ${1:-} in
fixtures) fixtures ;;
definitions) definitions ;;
import) import_verify ;;
verify) replay ;;
*)
	echo "usage: $0 fixtures|definitions|import|verify" >&2
	exit 2
	;;
esac
