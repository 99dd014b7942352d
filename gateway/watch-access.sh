#!/bin/sh
# Reloads nginx when the gateway's access folder changes: `python -m gateway.certs rotate|revoke|issue`
# replaces api-keys.map and revoked-serials.map there (by rename, under its lock), and nginx re-reads
# them only at a reload (SIGHUP: new workers take the new maps, old ones finish their requests).
#
#   watch-access.sh DIR PID [INTERVAL]   # compose: /etc/nginx/secrets/access 1 2 (PID 1 is nginx)
#
# Compares a checksum of DIR/*.map every INTERVAL seconds; on a change, sends SIGHUP to PID once PID is
# an nginx (before the entrypoint execs nginx, PID 1 is the shell: it is left alone and asked again).
# An invalid map is nginx's to refuse: it logs the error and keeps the config it runs.
set -u
dir=$1
pid=$2
interval=${3:-2}
state() { cat "$dir"/*.map 2>/dev/null | cksum; }
last=$(state)
while sleep "$interval"; do
  now=$(state)
  [ "$now" = "$last" ] && continue
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = nginx ] && kill -HUP "$pid" 2>/dev/null; then
    echo "watch-access: $dir changed: nginx $pid reloads it" >&2
    last=$now
  fi
done
