#!/bin/sh
# make-certs.sh: a small CA, and the certificates of a journal collector and of its nodes.
#
#   deploy/journal-remote/make-certs.sh DIR COLLECTOR NODE...
#
# COLLECTOR is the name (or IP address) in the nodes' URL=https://COLLECTOR:19532. Each NODE
# is a node's host name. The script writes, with openssl, keys that only their owner reads:
#
#   DIR/ca.key, DIR/journal-ca.crt           the CA (keep ca.key on this machine only)
#   DIR/COLLECTOR/journal-remote.{key,crt}   the collector's server certificate
#   DIR/NODE/journal-upload.{key,crt}        each node's client certificate
#   DIR/*/journal-ca.crt                     the CA certificate, for each host
#
# Run it again with more nodes: it keeps the CA and the certificates already made.
# DAYS sets how long a new certificate lasts (default 825 days; the CA: 3650 days).
set -eu

if [ "$#" -lt 2 ]; then
    echo "usage: $0 DIR COLLECTOR [NODE...]" >&2
    exit 2
fi
dir=$1
collector=$2
shift 2
days=${DAYS:-825}
umask 077

for name in "$collector" "$@"; do
    case $name in
        '' | . | .. | */* | -*)
            echo "$0: '$name' is not a host name" >&2
            exit 2
            ;;
    esac
done

mkdir -p "$dir"
cd "$dir"

key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"
}

if [ ! -e ca.key ]; then
    key ca.key
    openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=sm-llm journal CA" \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out journal-ca.crt
fi

# issue HOST FILE USAGE SAN: HOST/FILE.key and HOST/FILE.crt, signed by the CA
issue() {
    host=$1 file=$2 usage=$3 san=$4
    mkdir -p "$host"
    cp journal-ca.crt "$host/journal-ca.crt"
    if [ -e "$host/$file.crt" ]; then
        echo "$host/$file.crt: kept"
        return
    fi
    key "$host/$file.key"
    openssl req -new -key "$host/$file.key" -subj "/CN=$host" -out "$host/$file.csr"
    printf '%s\n' \
        "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" \
        "extendedKeyUsage=$usage" \
        "subjectAltName=$san" >"$host/$file.ext"
    openssl x509 -req -in "$host/$file.csr" -CA journal-ca.crt -CAkey ca.key \
        -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" \
        -extfile "$host/$file.ext" -out "$host/$file.crt"
    rm "$host/$file.csr" "$host/$file.ext"
    chmod 0644 "$host/$file.crt" "$host/journal-ca.crt"
    echo "$host/$file.crt: made"
}

# the name the nodes connect to: an IP address gets an IP SAN, a name a DNS SAN
case $collector in
    *[!0-9.]* | '') collector_san="DNS:$collector" ;;
    *) collector_san="IP:$collector" ;;
esac
case $collector in
    *:*) collector_san="IP:$collector" ;; # an IPv6 address
esac

issue "$collector" journal-remote serverAuth "$collector_san"
for node in "$@"; do
    issue "$node" journal-upload clientAuth "DNS:$node"
done
chmod 0644 journal-ca.crt
