#!/usr/bin/env bash
# Install edge-agent from this offline bundle: no network, no package index (pip --no-index
# finds everything in wheels/ and ledger/). Run as root on the gateway from the unpacked bundle:
#
#   sudo ./install.sh                      # install or upgrade; /opt/edge-agent/current -> this version
#   sudo ./install.sh --with-ledger        # also the ledger extra (psycopg) and edge-ledger.service
#   sudo /opt/edge-agent/current/bundle/install.sh --rollback    # current -> the previous version
#
# Options:
#   --root DIR         install under DIR instead of / (a temporary root: no systemctl is run)
#   --python PYTHON    the interpreter of the venv (default: python3.X of the bundle, else python3)
#   --store PATH       the store to look at (default: store.path of <root>/etc/edge-agent/config.yaml)
#   --no-restart       do not restart a running edge-agent.service
#   --rollback         point current back at the previous version (refused when the store is newer
#                      than that version knows; --restore-backup then puts back the copy of the
#                      store this script made before the upgrade, keeping the newer one aside)
#
# Layout: /opt/edge-agent/<version>-<commit>/ (a venv; bundle/ holds this script, BUNDLE, SCHEMA and
# the units), /opt/edge-agent/current and /opt/edge-agent/previous (symlinks, switched atomically).
# Versions are never deleted by this script. The unit is installed with
# ExecStart=/opt/edge-agent/current/bin/edge-agent. docs/install.md says more.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root=/
python=""
store=""
with_ledger=no
restart=yes
rollback=no
restore_backup=no

log() { printf 'install.sh: %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --root) root="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --store) store="$2"; shift 2 ;;
    --with-ledger) with_ledger=yes; shift ;;
    --no-restart) restart=no; shift ;;
    --rollback) rollback=yes; shift ;;
    --restore-backup) restore_backup=yes; shift ;;
    -h|--help) usage 0 ;;
    *) echo "install.sh: unknown argument $1" >&2; usage 2 ;;
  esac
done
[ -f "$here/BUNDLE" ] || die "no BUNDLE file next to $0: run the install.sh of an unpacked bundle"
root="$(mkdir -p "$root" && cd "$root" && pwd)"
r="${root%/}"                 # prefix for absolute paths ("" for /)
base="$r/opt/edge-agent"
live_system=no
if [ -z "$r" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then live_system=yes; fi

bundle_value() { sed -n "s/^$2=//p" "$1/BUNDLE"; }

# pip sees only the bundle: no configuration file, index or find-links of this machine.
offline_pip() {  # $1 = the venv's python, then pip's arguments
  local py="$1"; shift
  env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null \
    PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" "$@"
}

# The store the service uses: --store, else store.path of the installed config (under the root).
find_store() {  # $1 = a python with PyYAML (an installed version's)
  if [ -n "$store" ]; then printf '%s\n' "$store"; return; fi
  local cfg="$r/etc/edge-agent/config.yaml" path=""
  if [ -f "$cfg" ]; then
    path="$("$1" -I -c 'import sys, yaml
c = yaml.safe_load(open(sys.argv[1])) or {}
print(((c.get("store") or {}).get("path")) or "")' "$cfg" 2>/dev/null || true)"
  fi
  printf '%s%s\n' "$r" "${path:-/var/lib/edge-agent/events.db}"
}

store_schema() {  # $1 = python, $2 = store: its PRAGMA user_version, read only
  "$1" -I -c 'import sqlite3, sys, urllib.parse
db = sqlite3.connect("file:" + urllib.parse.quote(sys.argv[1]) + "?mode=ro", uri=True)
print(db.execute("PRAGMA user_version").fetchone()[0])' "$2"
}

schema_of() {  # $1 = an installed version's directory: the newest store schema it knows
  if [ -f "$1/bundle/SCHEMA" ]; then cat "$1/bundle/SCHEMA"; return; fi
  "$1/bin/python" -I -c 'from agent.store.schema import MIGRATIONS; print(MIGRATIONS[-1][0])'
}

switch_link() {  # $1 = link name in $base, $2 = target (relative): atomic (rename over the old link)
  ln -sfn "$2" "$base/.$1.new"
  mv -Tf "$base/.$1.new" "$base/$1"
}

restart_service() {
  if [ "$live_system" = yes ]; then
    systemctl daemon-reload
    if [ "$restart" = yes ] && systemctl is-active --quiet edge-agent.service; then
      log "restarting edge-agent.service"
      systemctl restart edge-agent.service
    else
      log "edge-agent.service is not running: start it with systemctl enable --now edge-agent"
    fi
  else
    log "under $root (not the running system): no systemctl"
  fi
}

# --- rollback -------------------------------------------------------------------------------
if [ "$rollback" = yes ]; then
  cur="$(readlink "$base/current" 2>/dev/null)" || die "no $base/current: nothing installed"
  prev="$(readlink "$base/previous" 2>/dev/null)" || die "no $base/previous: no earlier version to go back to"
  [ -f "$base/$prev/.complete" ] || die "$base/$prev is not a complete install: refused"
  s="$(find_store "$base/$cur/bin/python")"
  if [ -f "$s" ]; then
    have="$(store_schema "$base/$cur/bin/python" "$s")"
    knows="$(schema_of "$base/$prev")"
    if [ "$have" -gt "$knows" ]; then
      backup="$s.before-$cur"
      if [ "$restore_backup" != yes ]; then
        die "rollback to $prev refused: the store $s is at schema $have (migrated by $cur); $prev knows schema $knows and would not run on it.
  The way back: stay on $cur (nothing was changed), or go back with the store as it was before the
  upgrade: $( [ -f "$backup" ] && echo "$backup (made by install.sh)" || echo "no copy made by install.sh at $backup" ).
  Events recorded since the upgrade are only in the newer store: check \`edge-agent outbox\` shows
  nothing pending first; then stop the service and run install.sh --rollback --restore-backup
  (the newer store is kept aside, not deleted)."
      fi
      [ -f "$backup" ] || die "no copy of the store made before the upgrade to $cur at $backup: refused"
      if [ "$live_system" = yes ] && systemctl is-active --quiet edge-agent.service; then
        die "edge-agent.service is running: stop it first (systemctl stop edge-agent)"
      fi
      aside="$s.after-$cur"
      for f in "$s" "$s-wal" "$s-shm"; do
        [ ! -e "$f" ] || mv -f "$f" "$aside${f#"$s"}"
      done
      cp -p "$backup" "$s"
      log "store: $s (schema $have) kept aside as $aside; the copy from before the upgrade put back ($backup, schema $(store_schema "$base/$prev/bin/python" "$s"))"
    else
      log "store: $s is at schema $have; $prev knows $knows: it runs on it"
    fi
  else
    log "store: none at $s"
  fi
  switch_link previous "$cur"
  switch_link current "$prev"
  log "rolled back: current -> $prev (previous -> $cur; install.sh --rollback again goes forward)"
  restart_service
  exit 0
fi

# --- install or upgrade ---------------------------------------------------------------------
[ "$(id -u)" = 0 ] || [ -n "$r" ] || die "run as root (or give --root DIR)"
ident="$(bundle_value "$here" IDENT)"
pyver="$(bundle_value "$here" PYTHON)"
machine="$(bundle_value "$here" MACHINE)"
[ "$(uname -m)" = "$machine" ] || die "this bundle is for $machine; this machine is $(uname -m): use the $(uname -m) bundle"
if [ -z "$python" ]; then
  python="$(command -v "python$pyver" || command -v python3 || true)"
  [ -n "$python" ] || die "no python3 found: this bundle needs CPython $pyver (e.g. apt-get install python3)"
fi
have_py="$("$python" -I -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[ "$have_py" = "$pyver" ] || die "$python is CPython $have_py; this bundle's wheels are for CPython $pyver: use the cp${have_py/./} bundle"
"$python" -I -c 'import sqlite3, venv' 2>/dev/null || die "$python lacks sqlite3 or venv"
glibc="$(ldd --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9.]*\)$/\1/p')"
need_glibc="$(bundle_value "$here" GLIBC)"
if [ "$with_ledger" = yes ]; then need_glibc="$(bundle_value "$here" GLIBC_LEDGER)"; fi
if [ -n "$glibc" ] && [ -n "$need_glibc" ] \
  && [ "$(printf '%s\n%s\n' "$need_glibc" "$glibc" | sort -V | head -n 1)" != "$need_glibc" ]; then
  die "this machine's glibc is $glibc; the bundle's wheels need glibc >= $need_glibc"
fi
log "edge-agent $ident ($(bundle_value "$here" TARGET), CPython $have_py at $python, glibc ${glibc:-unknown}) into $base/$ident"
(cd "$here" && sha256sum --quiet -c SHA256SUMS) || die "the bundle's files do not match SHA256SUMS: copy it again"

dest="$base/$ident"
extra=""
links=(--find-links "$here/wheels")
if [ "$with_ledger" = yes ]; then extra="[ledger]"; links+=(--find-links "$here/ledger"); fi
mkdir -p "$base"
if [ -f "$dest/.complete" ] && [ "$with_ledger" = no ]; then
  log "$dest is installed already: not installed again"
else
  [ -f "$dest/.complete" ] || rm -rf "$dest"
  trap '[ -f "$dest/.complete" ] || rm -rf "$dest"' EXIT
  [ -d "$dest" ] || "$python" -m venv --without-pip "$dest"
  pip_wheel="$(ls "$here"/wheels/pip-*.whl | head -n 1)"
  start=$SECONDS
  offline_pip "$dest/bin/python" "$pip_wheel/pip" install --no-index --no-cache-dir -q "${links[@]}" \
    "edge-agent$extra==$(bundle_value "$here" VERSION)" pip
  log "installed with pip --no-index from the bundle's wheels in $((SECONDS - start)) s: $(
    offline_pip "$dest/bin/python" -m pip list --format=freeze 2>/dev/null | wc -l) packages"
  mkdir -p "$dest/bundle"
  cp -p "$here/BUNDLE" "$here/install.sh" "$dest/bundle/"
  cp -pr "$here/systemd" "$dest/bundle/"
  schema_of "$dest" >"$dest/bundle/SCHEMA.new" && mv "$dest/bundle/SCHEMA.new" "$dest/bundle/SCHEMA"
  touch "$dest/.complete"
  trap - EXIT
fi
"$dest/bin/edge-agent" --version >/dev/null || die "$dest/bin/edge-agent does not run"

# The store: its migrations run when the new version first starts; a copy of it is made first, and a
# store newer than this version knows is refused here (the version would not start on it).
knows="$(schema_of "$dest")"
s="$(find_store "$dest/bin/python")"
if [ -f "$s" ]; then
  have="$(store_schema "$dest/bin/python" "$s")"
  if [ "$have" -gt "$knows" ]; then
    die "refused: the store $s is at schema $have, newer than edge-agent $ident knows ($knows): a newer
  version migrated it and this one would not start on it. Nothing was switched (current is still
  $(readlink "$base/current" 2>/dev/null || echo none)). The way back to this version is
  install.sh --rollback --restore-backup from the newer version, which puts back the copy of the
  store made before that upgrade."
  elif [ "$have" -lt "$knows" ]; then
    backup="$s.before-$ident"
    "$dest/bin/python" -I -c 'import sqlite3, sys
src = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
dst = sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.close()' "$s" "$backup.tmp"
    mv -f "$backup.tmp" "$backup"
    log "store: $s is at schema $have; $ident migrates it to $knows on its first start; a copy as it is now (SQLite backup): $backup"
  else
    log "store: $s is at schema $have, which $ident knows: no migration"
  fi
else
  log "store: none at $s yet (the first start makes it, schema $knows)"
fi

# Switch: previous -> what was current, current -> this version (each one rename).
old="$(readlink "$base/current" 2>/dev/null || true)"
[ "$old" != "$ident" ] || old=""
if [ -n "$old" ]; then switch_link previous "$old"; fi
switch_link current "$ident"
log "current -> $ident${old:+ (previous: $old, kept; install.sh --rollback goes back)}"

# Units, tmpfiles, the config directory, docs. The unit runs /opt/edge-agent/current; local changes
# belong in drop-ins (edge-agent.service.d/), which are never overwritten.
sd="$r/etc/systemd/system"
sed 's#/opt/edge-agent/venv/bin/#/opt/edge-agent/current/bin/#' "$here/systemd/edge-agent.service" \
  | install -D -m 0644 /dev/stdin "$sd/edge-agent.service"
if [ ! -e "$sd/edge-agent.service.d/credentials.conf" ]; then
  install -D -m 0644 "$here/systemd/credentials.conf" "$sd/edge-agent.service.d/credentials.conf"
fi
if [ "$with_ledger" = yes ]; then
  sed 's#/opt/edge-agent/venv/bin/#/opt/edge-agent/current/bin/#' "$here/systemd/edge-ledger.service" \
    | install -D -m 0644 /dev/stdin "$sd/edge-ledger.service"
fi
install -D -m 0644 "$here/systemd/edge-agent.tmpfiles" "$r/usr/lib/tmpfiles.d/edge-agent.conf"
if [ "$live_system" = yes ] && command -v systemd-tmpfiles >/dev/null 2>&1; then
  systemd-tmpfiles --create edge-agent.conf
else
  install -d -m 0755 "$r/etc/edge-agent"
  install -d -m 0700 "$r/etc/edge-agent/secrets"
fi
if [ ! -e "$r/etc/edge-agent/config.yaml" ]; then
  install -m 0644 "$here/config.example.yaml" "$r/etc/edge-agent/config.yaml"
  log "config: $r/etc/edge-agent/config.yaml is the example: edit it, then edge-agent check"
fi
doc="$r/usr/share/doc/edge-agent"
install -d "$doc"
install -m 0644 "$here/README.md" "$here/config.example.yaml" "$here/ledger.example.yaml" \
  "$here/systemd/serial.conf" "$here"/docs/*.md "$doc/"
log "units: $sd/edge-agent.service (ExecStart=/opt/edge-agent/current/bin/edge-agent), tmpfiles, docs in $doc"
restart_service
log "done: $base/current/bin/edge-agent --version: $("$base/current/bin/edge-agent" --version)"
