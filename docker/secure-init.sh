#!/bin/sh
# docker-compose.secure.yml's `init` service (docs/cluster.md: "Secured cluster"). Each start keeps what
# exists, so the certificates and the first users are made on the first start only:
# - a CA with Debian's openssl (its key stays in $CA_DIR, a volume mounted here only);
# - for each broker of $BROKERS a PEM keystore $SECRETS/<broker>.pem (private key, then the
#   certificate; SANs: the broker's name, localhost, 127.0.0.1 and $ADVERTISED_HOST), remade
#   when the CA or the names changed; the clients' truststore $SECRETS/ca.pem;
# - the SCRAM-SHA-512 users `broker` ($BROKER_PASSWORD, the brokers' own connections) and
#   `admin` ($ADMIN_PASSWORD), stored in etcd by `gregor storage format --add-scram` as Kafka's
#   `kafka-storage format` does, once: later changes are made with `gregor configs`.
# Then it stays up and healthy (/tmp/ready), so that `up --wait` exits 0: a service that had
# exited, even with 0, would fail the wait.
set -eu
SECRETS=${SECRETS:-/etc/gregor/secrets}
CA_DIR=${CA_DIR:-/var/lib/gregor/ca}
DAYS=3650
umask 077

say() { echo "gregor-secure-init: $*"; }

san() {  # an address as a subjectAltName entry
    case "$1" in
        *:*) printf 'IP:%s' "$1" ;;
        *[!0-9.]*) printf 'DNS:%s' "$1" ;;
        *) printf 'IP:%s' "$1" ;;
    esac
}

make_ca() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -noenc -days "$DAYS" \
        -subj "/CN=Gregor compose CA" -keyout "$CA_DIR/ca.key.new" -out "$CA_DIR/ca.pem" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    mv "$CA_DIR/ca.key.new" "$CA_DIR/ca.key"
    say "made a CA: $(openssl x509 -in "$CA_DIR/ca.pem" -noout -subject -fingerprint -sha256 | tr "\n" " ")"
}

make_keystore() {  # $1: the broker's host name, $2: its subjectAltName
    work=$(mktemp -d)
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -noenc -subj "/CN=$1" \
        -keyout "$work/key.pem" -out "$work/csr.pem" 2>/dev/null
    printf '%s\n' "subjectAltName=$2" "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
        "extendedKeyUsage=serverAuth,clientAuth" > "$work/ext"
    openssl x509 -req -in "$work/csr.pem" -CA "$CA_DIR/ca.pem" -CAkey "$CA_DIR/ca.key" \
        -CAserial "$CA_DIR/ca.srl" -CAcreateserial -days "$DAYS" -extfile "$work/ext" \
        -out "$work/cert.pem" 2>/dev/null
    cat "$work/key.pem" "$work/cert.pem" > "$SECRETS/$1.pem.new"
    mv "$SECRETS/$1.pem.new" "$SECRETS/$1.pem"
    printf '%s\n' "$2" > "$CA_DIR/$1.san"
    rm -rf "$work"
    say "made $SECRETS/$1.pem ($2)"
}

current() {  # $1: the broker; true when its keystore is the CA's and names $2
    [ -s "$SECRETS/$1.pem" ] && [ "$(cat "$CA_DIR/$1.san" 2>/dev/null)" = "$2" ] \
        && openssl verify -CAfile "$CA_DIR/ca.pem" "$SECRETS/$1.pem" >/dev/null 2>&1
}

for password in "$ADMIN_PASSWORD" "$BROKER_PASSWORD"; do
    case "$password" in
        "" | *[],\"\\]*) say 'GREGOR_ADMIN_PASSWORD and GREGOR_BROKER_PASSWORD: not empty, without , ] " or \'
                         exit 1 ;;
    esac
done

[ -s "$CA_DIR/ca.key" ] || make_ca
cp "$CA_DIR/ca.pem" "$SECRETS/ca.pem"
chmod 644 "$SECRETS/ca.pem"

extra=""
for host in ${ADVERTISED_HOST:-}; do
    case "$host" in localhost | 127.0.0.1) ;; *) extra="$extra,$(san "$host")" ;; esac
done
for broker in $BROKERS; do
    names="DNS:$broker,DNS:localhost,IP:127.0.0.1$extra"
    if current "$broker" "$names"; then say "kept $SECRETS/$broker.pem"; else make_keystore "$broker" "$names"; fi
done

if [ -e "$CA_DIR/scram-users" ]; then
    say "kept the SCRAM users stored on the first start: $(cat "$CA_DIR/scram-users")"
else
    # format reads only metadata.store; a listener and a keystore make the shared config whole
    first=${BROKERS%% *}
    gregor storage format --config /etc/gregor/broker.yaml \
        --override "listeners=INTERNAL://$first:19092" --override "ssl.keystore.location=$SECRETS/$first.pem" \
        --add-scram "SCRAM-SHA-512=[name=broker,password=$BROKER_PASSWORD]" \
        --add-scram "SCRAM-SHA-512=[name=admin,password=$ADMIN_PASSWORD]"
    echo "broker admin" > "$CA_DIR/scram-users"
fi

touch /tmp/ready
say "ready"
exec sleep infinity
