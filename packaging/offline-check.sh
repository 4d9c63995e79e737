#!/usr/bin/env bash
# Proven offline (issue 34): build the bundles, install the x86_64 one with no network into a
# temporary root, check the example config and run the demo with the installed edge-agent, then
# upgrade in place over a bundle built from an earlier commit with a store that version made, and
# roll back. Every install, demo and run is inside `unshare --net --mount`: a network namespace
# whose only interface is loopback (the demo's simulated PLCs and upstream are on 127.0.0.1), with
# this machine's local package mirrors (pip's find-links and file:// indexes) hidden under empty
# mounts, so pip has nothing to reach but the bundle. Needs root and unshare; .ci/run runs it.
#
#   packaging/offline-check.sh              # earlier commit: $OLD_COMMIT (default below)
#   OLD_COMMIT=<sha> packaging/offline-check.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# The earlier commit: the last before store migration 12 (receipts), so the upgrade migrates a store
# and a rollback meets a store newer than the older version knows.
old_commit="${OLD_COMMIT:-4c8a1f1592cee56fa2e4bb28dbbe5d10026d53da}"
python="${PYTHON:-python3}"

say() { printf 'offline-check: %s\n' "$*"; }
skip() { say "SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (unshare --net --mount)"
command -v unshare >/dev/null 2>&1 || skip "no unshare (util-linux)"
unshare --net --mount true 2>/dev/null || skip "unshare --net --mount is not permitted here"
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2) to bring loopback up in the namespace"

started=$SECONDS
work="$(mktemp -d /tmp/edge-agent-offline.XXXXXX)"
chmod 0755 "$work"   # the check reads the config's files as the unit's dynamic user
trap 'rm -rf "$work"' EXIT
root="$work/root"
py="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
pyexe="$("$python" -c 'import sys; print(sys.executable)')"

# This machine's local package sources (find-links, file:// indexes): hidden inside the namespace.
mapfile -t mirrors < <(
  { "$python" -m pip config list 2>/dev/null; env | grep '^PIP_'; } | grep -o "\(file://\)\?/[^ '\"]*" \
    | sed 's#^file://##; s#/simple/\?$##' | sort -u | while read -r d; do [ -d "$d" ] && echo "$d"; done
)
offline() {  # run "$@" with no network, no local mirror, and a /dev/shm of its own (the agent's live
  # state file goes there: gone with the namespace, nothing left behind on this machine)
  unshare --net --mount --propagation private -- bash -c '
    set -e
    ip link set lo up
    for d in "${@:2:$1}"; do mount -t tmpfs -o size=1m,mode=0755 none "$d"; done
    mount -t tmpfs -o size=16m,mode=1777 none /dev/shm
    export RUNTIME_DIRECTORY=/dev/shm/edge-agent && mkdir -p "$RUNTIME_DIRECTORY"
    shift $(($1 + 1))
    exec "$@"' offline "${#mirrors[@]}" "${mirrors[@]}" "$@"
}

say "building the bundles of this tree ($(git -C "$repo" rev-parse --short=10 HEAD)): x86_64 for CPython $py and the aarch64 sets"
"$repo/packaging/build.sh" --out "$work/new" --cache "$work/cache" \
  --target "linux-x86_64:$py" --target linux-aarch64:3.11 --target linux-aarch64:3.12
new_tar="$(ls "$work"/new/edge-agent-*-linux-x86_64-cp${py/./}.tar.gz)"

if ! git -C "$repo" cat-file -e "$old_commit^{commit}" 2>/dev/null; then  # a shallow clone: ask its origin
  git -C "$repo" fetch --quiet origin "$old_commit" 2>/dev/null || true
fi
if ! git -C "$repo" cat-file -e "$old_commit^{commit}" 2>/dev/null; then
  say "SKIPPED: the earlier commit $old_commit is not in this clone and its origin did not give it (a shallow clone):"
  say "         the upgrade and rollback need it (git fetch --unshallow); the bundles above were built and checked"
  exit 0
fi
say "building the bundle of the earlier commit $old_commit (its tree, this build script; downloads reused)"
mkdir -p "$work/old-src"
git -C "$repo" archive "$old_commit" | tar -x -C "$work/old-src"
BUNDLE_COMMIT="$(git -C "$repo" rev-parse --short=10 "$old_commit")" \
  "$repo/packaging/build.sh" --source "$work/old-src" --out "$work/old" --cache "$work/cache" --target "linux-x86_64:$py"
old_tar="$(ls "$work"/old/edge-agent-*-linux-x86_64-cp${py/./}.tar.gz)"
for t in "$new_tar" "$old_tar"; do tar -xzf "$t" -C "$work"; done
new_dir="$work/$(basename "$new_tar" .tar.gz)"
old_dir="$work/$(basename "$old_tar" .tar.gz)"
built=$((SECONDS - started))

say "the namespace: $(offline ip -brief link | tr -s ' ' | paste -sd ';'); hidden: ${mirrors[*]:-none}"
offline "$pyexe" -c 'import socket
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3)
    raise SystemExit("offline-check: FAILED: the namespace reaches the internet")
except OSError as exc:
    print(f"offline-check: connect to 1.1.1.1:443 from the namespace: {exc}")'

cd "$work"   # nothing of the repository on any sys.path
ea="$root/opt/edge-agent/current/bin/edge-agent"
store="$work/store/events.db"
schema() { "$pyexe" -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA user_version").fetchone()[0])' "$1"; }
events() { offline "$ea" --db "$store" report --json | "$pyexe" -c 'import json, sys; print(json.load(sys.stdin)["summary"]["source_events"])'; }
run_briefly() {  # the installed edge-agent runs on the store for a few seconds; SIGTERM; exit 0
  offline timeout --preserve-status -s TERM "$1" "$ea" -c "$work/store/config.yaml" run >"$work/run.log" 2>&1 \
    || { cat "$work/run.log"; say "FAILED: edge-agent run"; exit 1; }
  grep -E "store migrated|started devices|stopped cleanly|Store .*newer" "$work/run.log" | sed 's/^/    run: /'
}

say "1. the earlier version, installed offline"
offline "$old_dir/install.sh" --root "$root" --python "$pyexe"
mkdir -p "$work/store"
offline "$ea" demo --keep "$work/store" >"$work/demo-old.log" 2>&1 || { cat "$work/demo-old.log"; exit 1; }
before="$(events)"
say "   its demo made a store: $(tail -n 2 "$work/demo-old.log" | head -n 1); schema $(schema "$store"), $before events"

say "2. upgrade in place to this tree's bundle, offline"
offline "$new_dir/install.sh" --root "$root" --python "$pyexe" --store "$store"
# The operator's part: the example config with its files (paths under the temporary root).
sed -i "s#/etc/edge-agent#$root/etc/edge-agent#g" "$root/etc/edge-agent/config.yaml" \
  "$root/etc/systemd/system/edge-agent.service.d/credentials.conf"
offline "$ea" certs --dir "$root/etc/edge-agent/pki" --gateway gw-line3 --host gw-line3 >/dev/null
cp "$root/etc/edge-agent/pki/agent_cert.der" "$root/etc/edge-agent/pki/trusted/comp-02.der"  # the PLC's, here a stand-in
cp "$root/etc/edge-agent/pki/agent_cert.der" "$root/etc/edge-agent/ca.crt"                    # the broker's CA, a stand-in
for s in mqtt-password historian-token opcua-password; do install -m 0600 /dev/null "$root/etc/edge-agent/secrets/$s"; done
offline "$ea" check -c "$root/etc/edge-agent/config.yaml" --unit "$root/etc/systemd/system/edge-agent.service" \
  | sed 's/^/    check: /'
mkdir -p "$work/demo-new"
offline "$ea" demo --keep "$work/demo-new" >"$work/demo-new.log" 2>&1 || { cat "$work/demo-new.log"; exit 1; }
say "   its demo: $(grep -E '^upstream' "$work/demo-new.log"); $(grep -E '^demo finished' "$work/demo-new.log" | sed 's/\. The store.*//')"
run_briefly 6
grep -q "store migrated" "$work/run.log" || { say "FAILED: the upgrade did not migrate the store"; exit 1; }
say "   the upgraded version ran on the earlier store: schema $(schema "$store"), $(events) events (before: $before)"

say "3. rollback"
if offline "$root/opt/edge-agent/current/bundle/install.sh" --rollback --root "$root" --store "$store" \
  2>"$work/refused.log"; then
  say "FAILED: a rollback onto a store newer than the earlier version knows was not refused"; exit 1
fi
sed 's/^/    /' "$work/refused.log"
offline "$root/opt/edge-agent/current/bundle/install.sh" --rollback --restore-backup --root "$root" --store "$store"
say "   current -> $(readlink "$root/opt/edge-agent/current"): $(offline "$ea" --version)"
run_briefly 6
say "   the earlier version runs on the store put back: schema $(schema "$store"), $(events) events"
say "passed in $((SECONDS - started)) s (building $built s)"
