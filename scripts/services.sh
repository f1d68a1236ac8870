#!/usr/bin/env bash
# Makes sure the servers the tests need answer on this machine: Redis on 127.0.0.1:6379,
# MariaDB on 127.0.0.1:3306 (root, empty password, database `test`) and PostgreSQL on
# 127.0.0.1:5432 (user postgres, trust authentication from 127.0.0.1, database `test`). A
# server that answers is left alone; one that does not is installed (Debian packages) if
# missing, then started.
# etcd: the tests start throwaway members of their own (__test__/fixtures/etcd.js); this only
# installs the binary (Debian's etcd-server) when it is missing.
# tools: the other programs the tests run, installed from Debian's packages when missing: a C
# compiler (the Rust build, and the fault harness's clock shim for a server clock that
# jumps), openssl (throwaway CAs for the TLS tests), pgbouncer (started in front of PostgreSQL
# by __test__/pgbouncer.test.js), chromium (the dashboard test drives it headless through
# playwright-core; no browser is downloaded) and tmux (the `top` test).
# Usage: scripts/services.sh [redis] [mariadb] [postgres] [etcd] [tools]   (default: all five)
set -euo pipefail

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(redis mariadb postgres etcd tools)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
apt_install() {
  if [ $apt_updated = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 100); do port_open "$1" && return 0; sleep 0.1; done
  echo "services.sh: nothing answers on 127.0.0.1:$1" >&2
  return 1
}

ensure_redis() {
  if port_open 6379; then echo "redis: answering on 6379"; return; fi
  command -v redis-server >/dev/null || apt_install redis-server
  as_root mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/deadbolt.log
  wait_port 6379
  echo "redis: started on 6379"
}

ensure_mariadb() {
  if port_open 3306; then
    echo "mariadb: answering on 3306"
  else
    command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server
    as_root mkdir -p /run/mysqld
    as_root chown mysql:mysql /run/mysqld
    if [ ! -d /var/lib/mysql/mysql ]; then
      as_root mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    fi
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
    wait_port 3306
    echo "mariadb: started on 3306"
  fi
  # The tests connect as root over TCP with an empty password, to database `test`.
  for _ in $(seq 1 50); do
    if mariadb -uroot -h127.0.0.1 -e 'CREATE DATABASE IF NOT EXISTS test' 2>/dev/null; then return; fi
    as_root mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS test; ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); FLUSH PRIVILEGES;" 2>/dev/null || true
    sleep 0.2
  done
  echo "services.sh: cannot log in to MariaDB as root over TCP" >&2
  return 1
}

ensure_postgres() {
  if ! port_open 5432; then
    [ -d /etc/postgresql ] && ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || apt_install postgresql
    local version
    version=$(ls /usr/lib/postgresql | sort -n | tail -1)
    [ -d "/etc/postgresql/$version/main" ] || as_root pg_createcluster "$version" main >/dev/null
    # The tests log in as postgres from 127.0.0.1 without a password: trust that address
    # only (listed first, so it wins over the package's password rule for it).
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    if ! as_root grep -q '^host all postgres 127.0.0.1/32 trust' "$hba"; then
      as_root sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
    fi
    # Installing the package may have started the cluster already: then reload the rules.
    if port_open 5432; then
      as_root pg_ctlcluster --skip-systemctl-redirect "$version" main reload
    else
      as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
    fi
    wait_port 5432
    echo "postgres: started on 5432"
  else
    echo "postgres: answering on 5432"
  fi
  for _ in $(seq 1 50); do
    if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null)" = 1 ]; then return; fi
    psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test' 2>/dev/null || true
    sleep 0.2
  done
  echo "services.sh: cannot log in to PostgreSQL as postgres over TCP or create database test" >&2
  return 1
}

ensure_etcd() {
  command -v etcd >/dev/null || apt_install etcd-server
  echo "etcd: $(etcd --version | head -1)"
}

ensure_tools() {
  local need=()
  command -v cc >/dev/null || need+=(build-essential)
  command -v openssl >/dev/null || need+=(openssl)
  [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || need+=(pgbouncer)
  command -v chromium >/dev/null || need+=(chromium)
  command -v tmux >/dev/null || need+=(tmux)
  [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
  echo "tools: cc, openssl, pgbouncer, chromium, tmux"
}

for s in "${want[@]}"; do
  case "$s" in
    redis) ensure_redis ;;
    mariadb|mysql) ensure_mariadb ;;
    postgres|postgresql) ensure_postgres ;;
    etcd) ensure_etcd ;;
    tools) ensure_tools ;;
    *) echo "services.sh: unknown service $s" >&2; exit 2 ;;
  esac
done
