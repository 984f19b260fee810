#!/usr/bin/env bash
# A real Apache Kafka broker (KRaft, single node, loopback) from Maven Central jars.
#
#   kafka.sh install   fetch the broker jars (cached)
#   kafka.sh start     format storage once, start the broker, wait until it serves
#                      ($SLUICE_KAFKA_EXTRA_PROPS: extra server.properties lines)
#   kafka.sh stop      stop it (by recorded PID)
#   kafka.sh bootstrap print the bootstrap address
#   kafka.sh acl ARGS  run Kafka's AclCommand against the broker (as a super user)
#
# Besides PLAINTEXT (unauthenticated, a super user: what most tests use) the
# broker has the listeners a secured cluster has, as Strimzi sets them up:
#   SASL_SSL on $KAFKA_SASL_PORT: SCRAM-SHA-512/256 (user sluice-scram) and
#     PLAIN (user sluice-plain), passwords in $KAFKA_DIR/tls/*.password;
#   SSL on $KAFKA_MTLS_PORT with a client certificate required (user
#     sluice-mtls: $KAFKA_DIR/tls/user.crt, user.key).
# Their principals are authorized by ACLs (StandardAuthorizer) and nothing
# else, so a test proves the ACLs a job needs. Certificates are made with
# openssl, as the API server's are; the CA is $KAFKA_DIR/tls/ca.crt.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_JARS="$SLUICE_CACHE_DIR/kafka-$KAFKA_VERSION/libs"
KAFKA_DIR="$SLUICE_RUN_DIR/kafka"
TLS_DIR="$KAFKA_DIR/tls"

install() {
  [ -f "$KAFKA_JARS/.complete" ] && return 0
  command -v mvn >/dev/null || apt_install maven
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  local pomdir="$SLUICE_CACHE_DIR/kafka-$KAFKA_VERSION/pom"
  mkdir -p "$pomdir" "$KAFKA_JARS"
  cat >"$pomdir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.sluice</groupId>
  <artifactId>kafka-harness</artifactId>
  <version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <!-- Without an SLF4J binding the broker logs nothing. -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.4</version></dependency>
  </dependencies>
</project>
POM
  log "fetching Kafka $KAFKA_VERSION jars from Maven Central"
  (cd "$pomdir" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$KAFKA_JARS" -DincludeScope=runtime)
  touch "$KAFKA_JARS/.complete"
}

# A CA, the broker's serving certificate (PEM key store: key then chain)
# and a client certificate for the mTLS user; SCRAM and PLAIN passwords.
make_tls() {
  [ -f "$TLS_DIR/user.crt" ] && return 0
  mkdir -p "$TLS_DIR"
  log "creating Kafka certificates and credentials in $TLS_DIR"
  (
  cd "$TLS_DIR"
  new_ca "/O=sluice-test/CN=sluice-kafka-ca"
  sign_cert broker "/O=sluice-test/CN=kafka-broker" "IP:127.0.0.1,DNS:localhost"
  cat broker.key broker.crt ca.crt >broker.pem
  sign_cert user "/CN=sluice-mtls"
  openssl rand -hex 16 >scram.password
  openssl rand -hex 16 >plain.password
  chmod 600 ./*.key broker.pem ./*.password
  )
}

write_config() {
  mkdir -p "$KAFKA_DIR/data"
  make_tls
  cat >"$KAFKA_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_MTLS_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_MTLS_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_sluice-plain="$(cat "$TLS_DIR/plain.password")";
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
listener.name.ssl.ssl.client.auth=required
# As Strimzi maps them: the certificate CN=sluice-mtls is User:sluice-mtls.
ssl.principal.mapping.rules=RULE:^CN=(.*?)$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
# PLAINTEXT and CONTROLLER connections are User:ANONYMOUS: the harness's
# own clients and the broker itself. Everyone else needs ACLs.
super.users=User:ANONYMOUS
log.dirs=$KAFKA_DIR/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
# Records keep their event-time timestamps (the seed data is from 2023), so
# time-based retention would delete them at once: bound retention by size.
log.retention.ms=-1
log.retention.bytes=1073741824
PROPS
  # Extra broker settings for one run (a fault test shortening offsets
  # retention), one `key=value` per line; later lines override earlier ones.
  if [ -n "${SLUICE_KAFKA_EXTRA_PROPS:-}" ]; then
    printf '%s\n' "$SLUICE_KAFKA_EXTRA_PROPS" >>"$KAFKA_DIR/server.properties"
  fi
  cat >"$KAFKA_DIR/log4j2.properties" <<'L4J'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
logger.kafka.name = kafka
logger.kafka.level = warn
logger.kafkaserver.name = kafka.server.KafkaRaftServer
logger.kafkaserver.level = info
logger.akafka.name = org.apache.kafka
logger.akafka.level = warn
L4J
}

started() { grep -q "Kafka Server started" "$KAFKA_DIR/kafka.log" 2>/dev/null; }

start() {
  install
  if is_running kafka; then log "kafka already running"; return 0; fi
  write_config
  local cp="$KAFKA_JARS/*"
  if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
    # --cluster-id=…, not -t …: a base64 id can start with '-', which the
    # tool's argument parser would take for an option (a 1-in-32 failure).
    java -cp "$cp" -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" kafka.tools.StorageTool format \
      --cluster-id="$(python3 -c 'import base64,uuid;print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')" \
      -c "$KAFKA_DIR/server.properties" >"$KAFKA_DIR/format.log" 2>&1 || { cat "$KAFKA_DIR/format.log"; die "kafka storage format failed"; }
  fi
  : >"$KAFKA_DIR/kafka.log"
  start_bg kafka "$KAFKA_DIR/kafka.log" java -Xmx512m -Xms512m -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" -cp "$cp" kafka.Kafka "$KAFKA_DIR/server.properties"
  wait_until "Kafka broker on 127.0.0.1:$KAFKA_PORT" 90 started || { tail -50 "$KAFKA_DIR/kafka.log"; exit 1; }
  scram_users
}

# SCRAM credentials live in the cluster metadata: added once per data dir.
scram_users() {
  [ -f "$KAFKA_DIR/data/.sluice-scram" ] && return 0
  local pw mechanism
  pw=$(cat "$TLS_DIR/scram.password")
  # One mechanism per request: the broker refuses to alter a user twice in one.
  for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
    java -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" -cp "$KAFKA_JARS/*" kafka.admin.ConfigCommand \
      --bootstrap-server "127.0.0.1:$KAFKA_PORT" --alter --entity-type users --entity-name sluice-scram \
      --add-config "$mechanism=[password=$pw]" >"$KAFKA_DIR/scram.log" 2>&1 \
      || { cat "$KAFKA_DIR/scram.log"; die "adding the SCRAM user failed"; }
  done
  touch "$KAFKA_DIR/data/.sluice-scram"
}

acl() {
  java -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" -cp "$KAFKA_JARS/*" org.apache.kafka.tools.AclCommand \
    --bootstrap-server "127.0.0.1:$KAFKA_PORT" "$@"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop_bg kafka ;;
  bootstrap) echo "127.0.0.1:$KAFKA_PORT" ;;
  sasl-bootstrap) echo "127.0.0.1:$KAFKA_SASL_PORT" ;;
  mtls-bootstrap) echo "127.0.0.1:$KAFKA_MTLS_PORT" ;;
  tls-dir) echo "$TLS_DIR" ;;
  acl) shift; acl "$@" ;;
  *) echo "usage: $0 install|start|stop|bootstrap|sasl-bootstrap|mtls-bootstrap|tls-dir|acl ARGS" >&2; exit 2 ;;
esac
