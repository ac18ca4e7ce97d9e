#!/usr/bin/env bash
# One node (broker + controller, KRaft) of a secured clingate Kafka cluster, for clingate's Kafka image
# (`make images`; any Kafka installation with bin/kafka-storage.sh and bin/kafka-server-start.sh).
#
# Used by deploy/compose (three services) and deploy/k8s (a StatefulSet). It writes
# server.properties, formats the storage on first start with the SCRAM credentials of every
# principal (KIP-900: KRaft keeps them in the metadata log, so they must exist before any client
# can authenticate), then runs the broker. The properties mirror streams.local.broker.sasl_local_kafka,
# which the integration tests start, plus TLS and a three-node quorum:
#   clients and brokers: SASL_SSL, SCRAM-SHA-512, port 9092
#   controllers:         SASL_SSL, PLAIN (static JAAS user: controllers cannot check SCRAM
#                        credentials, which live in the log they serve), port 9093
#   authorisation:       StandardAuthorizer, deny unless an ACL allows; super user: the admin
#
# Environment:
#   KAFKA_NODE_ID        node id; unset: the StatefulSet ordinal of the host name plus 1
#   KAFKA_CLUSTER_ID     the cluster id (same on every node; `kafka-storage.sh random-uuid`)
#   KAFKA_VOTERS         controller quorum, e.g. 1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093
#   KAFKA_ADVERTISED_HOST  the name clients reach this node by (and its certificate names)
#   KAFKA_SUPER_USER     the admin principal's user name (default clingate-admin)
#   SCRAM_USERS_DIR      one file per principal, named by its user name, holding its password (the
#                        admin's included): a mounted Kubernetes Secret, or deploy/compose/secrets
#   CERT_DIR             ca.pem and <KAFKA_ADVERTISED_HOST>.pem (deploy/security/make-certs.sh)
#   KAFKA_DATA_DIR       log.dirs (default /var/lib/kafka/data)
#   KAFKA_CLIENT_PORT, KAFKA_CONTROLLER_PORT  listener ports (default 9092, 9093)
#   KAFKA_LISTEN_HOST    the address both listeners bind (default: every interface; deploy/compose,
#                        on the host's network, binds 127.0.0.1)
#   KAFKA_HOME           the Kafka installation (default /opt/kafka, as in clingate's Kafka image and
#                        Apache's)
#   KAFKA_CONFIG_FILE    where to write server.properties (default /tmp/server.properties)
set -euo pipefail

host=${KAFKA_ADVERTISED_HOST:-$(hostname -f)}
node_id=${KAFKA_NODE_ID:-$(( ${HOSTNAME##*-} + 1 ))}
super_user=${KAFKA_SUPER_USER:-clingate-admin}
users_dir=${SCRAM_USERS_DIR:-/run/secrets/scram}
cert_dir=${CERT_DIR:-/certs}
data_dir=${KAFKA_DATA_DIR:-/var/lib/kafka/data}
client_port=${KAFKA_CLIENT_PORT:-9092}
controller_port=${KAFKA_CONTROLLER_PORT:-9093}
listen_host=${KAFKA_LISTEN_HOST:-}
kafka_home=${KAFKA_HOME:-/opt/kafka}
config=${KAFKA_CONFIG_FILE:-/tmp/server.properties}

if [ ! -s "${users_dir}/${super_user}" ]; then
  echo "kafka-node: ${users_dir}/${super_user} (the super user's password) is missing or empty" >&2
  exit 2
fi
admin_password=$(cat "${users_dir}/${super_user}")

# The properties hold the super user's password: readable by this user only, from before it is written.
rm -f "$config"
install -m 600 /dev/null "$config"
cat > "$config" <<PROPERTIES
process.roles=broker,controller
node.id=${node_id}
controller.quorum.voters=${KAFKA_VOTERS:?set KAFKA_VOTERS}
listeners=SASL_SSL://${listen_host}:${client_port},CONTROLLER://${listen_host}:${controller_port}
advertised.listeners=SASL_SSL://${host}:${client_port}
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL
inter.broker.listener.name=SASL_SSL
controller.listener.names=CONTROLLER
log.dirs=${data_dir}
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="${super_user}" password="${admin_password}";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="${super_user}" password="${admin_password}" user_${super_user}="${admin_password}";
ssl.keystore.type=PEM
ssl.keystore.location=${cert_dir}/${host}.pem
ssl.truststore.type=PEM
ssl.truststore.location=${cert_dir}/ca.pem
ssl.endpoint.identification.algorithm=https
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:${super_user}
allow.everyone.if.no.acl.found=false
auto.create.topics.enable=false
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
group.initial.rebalance.delay.ms=3000
PROPERTIES

if [ ! -f "${data_dir}/meta.properties" ]; then
  scram_args=()
  for file in "${users_dir}"/*; do
    # Kubernetes mounts a Secret with hidden ..data links beside the keys; the glob skips dot files.
    [ -f "$file" ] || continue
    scram_args+=("--add-scram=SCRAM-SHA-512=[name=$(basename "$file"),password=$(cat "$file")]")
  done
  "${kafka_home}/bin/kafka-storage.sh" format --cluster-id="${KAFKA_CLUSTER_ID:?set KAFKA_CLUSTER_ID}" \
    -c "$config" "${scram_args[@]}"
fi
exec "${kafka_home}/bin/kafka-server-start.sh" "$config"
