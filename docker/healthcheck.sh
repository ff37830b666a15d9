#!/bin/bash
# Container health check: GET /healthz on retryproxy's admin listener; healthy
# (exit 0) only on a 200. bash's /dev/tcp does the HTTP, so the image needs
# no HTTP client.
#   retryproxy-healthcheck [HOST:PORT]     default 127.0.0.1:9901
set -u
addr=${1:-127.0.0.1:9901}
host=${addr%:*}
port=${addr##*:}
host=${host#[}
host=${host%]}

if ! { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null; then
	echo "healthcheck: cannot connect to $addr" >&2
	exit 1
fi
# One write of the whole request; a server that answers early must not kill
# the script with SIGPIPE before it reads the answer.
trap '' PIPE
printf -v request 'GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$addr"
printf '%s' "$request" >&3 2>/dev/null
if ! IFS= read -r -t 3 status <&3; then
	echo "healthcheck: no answer from $addr" >&2
	exit 1
fi
status=${status%$'\r'}
case $status in
"HTTP/1."[01]" 200"*) exit 0 ;;
esac
echo "healthcheck: $addr/healthz answered: $status" >&2
exit 1
