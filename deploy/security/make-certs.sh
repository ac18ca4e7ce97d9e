#!/usr/bin/env bash
# A private CA and one TLS certificate per Kafka node, in the PEM files Kafka and clingate read.
#
# Usage: deploy/security/make-certs.sh OUT_DIR HOST [HOST...]
#   OUT_DIR/ca.pem      the CA certificate: brokers' truststore, clients' CLINGATE_KAFKA_SSL_CA_FILE
#   OUT_DIR/ca.key      the CA key (created once, reused on later runs; keep it out of every image)
#   OUT_DIR/HOST.pem    the node's PKCS#8 key followed by its certificate (Kafka ssl.keystore.type=PEM)
# A HOST that is an IPv4 address gets an IP subject alternative name, any other a DNS one.
# Every file it writes is its owner's only (0600), whatever the caller's umask, but the CA certificate
# (0644: every client reads it); the keys never exist with another mode.
# For development and tests; production clusters take certificates from their own CA.
set -euo pipefail
umask 077
out=${1:?usage: make-certs.sh OUT_DIR HOST [HOST...]}
shift
[ "$#" -gt 0 ] || { echo "make-certs.sh: name at least one host" >&2; exit 2; }
days=${CERT_DAYS:-825}
mkdir -p "$out"
if [ ! -f "$out/ca.key" ]; then
  openssl req -x509 -newkey rsa:3072 -sha256 -nodes -days "$days" -subj "/CN=clingate-kafka-ca" \
    -keyout "$out/ca.key" -out "$out/ca.pem" 2>/dev/null
  chmod 644 "$out/ca.pem"
fi
for host in "$@"; do
  if [[ "$host" =~ ^[0-9]+(\.[0-9]+){3}$ ]]; then san="IP:$host"; else san="DNS:$host"; fi
  openssl req -newkey rsa:3072 -sha256 -nodes -subj "/CN=$host" -keyout "$out/$host.key" \
    -out "$out/$host.csr" 2>/dev/null
  openssl x509 -req -in "$out/$host.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
    -days "$days" -sha256 -out "$out/$host.crt" \
    -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san") 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in "$out/$host.key" -out "$out/$host.pem"
  cat "$out/$host.crt" >> "$out/$host.pem"
  rm -f "$out/$host.csr" "$out/$host.key" "$out/$host.crt"
done
