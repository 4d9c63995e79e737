#!/usr/bin/env bash
# Build the offline bundles of edge-agent: one tarball per target (architecture, CPython version)
# that an installer carries to an air-gapped gateway. Runs on a machine that reaches a package
# registry (pip's own configuration: an index, --find-links, a local mirror); the gateway needs
# none (the bundle's install.sh installs with `pip --no-index`). docs/install.md says how.
#
#   packaging/build.sh                       # all four: linux-{x86_64,aarch64} x CPython 3.11, 3.12
#   packaging/build.sh --target linux-x86_64:3.11 --out dist/bundles
#   packaging/build.sh --source /tmp/older-tree --cache .bundle-cache   # another tree, shared downloads
#
# A bundle holds: wheels/ (edge-agent's wheel, every runtime dependency's wheel for the target, and
# pip's own wheel), ledger/ (the extra wheels of `edge-agent[ledger]`), systemd/ (units, drop-ins,
# tmpfiles), the example configs, docs, BUNDLE (what it is) and install.sh. Every set is checked
# complete for its platform without being installed: `pip install --dry-run --no-index
# --only-binary=:all: --platform ...` finds every requirement among the bundle's wheels alone.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
source_dir="$(cd "$here/.." && pwd)"
out=""
cache=""
targets=()
python="${PYTHON:-python3}"

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_dir="$(cd "$2" && pwd)"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; usage 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(linux-x86_64:3.11 linux-x86_64:3.12 linux-aarch64:3.11 linux-aarch64:3.12)
out="$(mkdir -p "${out:-$source_dir/dist/bundles}" && cd "${out:-$source_dir/dist/bundles}" && pwd)"
cache="$(mkdir -p "${cache:-$out/.cache}" && cd "${cache:-$out/.cache}" && pwd)"

log() { printf 'build.sh: %s\n' "$*"; }

# The bundle's identity: the project's version and the commit it was built from. Installed side by
# side as /opt/edge-agent/<version>-<commit>, so two builds of one version never overwrite each other.
version="$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$source_dir/pyproject.toml")"
commit="$(git -C "$source_dir" rev-parse --short=10 HEAD 2>/dev/null || echo nogit)"
if [ "$commit" != nogit ] && [ -n "$(git -C "$source_dir" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit.dirty"
fi
[ -z "${BUNDLE_COMMIT:-}" ] || commit="$BUNDLE_COMMIT"   # a tree without .git (git archive) names its commit
ident="$version-$commit"

# The project is pure Python: one py3-none-any wheel serves every target.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log "edge-agent $ident: building its wheel from $source_dir"
"$python" -m pip wheel -q --no-deps -w "$work/own" "$source_dir" >"$work/wheel.log" 2>&1 \
  || { cat "$work/wheel.log"; exit 1; }
own_wheel="$(ls "$work"/own/edge_agent-*.whl)"

platform_flags() {  # $1 = x86_64 | aarch64: manylinux wheels up to glibc 2.28 (psycopg-binary's aarch64 wheel is manylinux_2_27)
  local m="$1"
  printf -- '--platform manylinux2014_%s --platform manylinux_2_17_%s --platform manylinux_2_28_%s' "$m" "$m" "$m"
}

# Resolve and fetch for one target. Downloads stay in $cache (one directory per target) and the next
# build reuses them; the set copies exactly the files pip names for this resolution (the cache may
# hold other versions from other builds).
fetch() {  # $1 = machine, $2 = python version, $3 = requirement, $4 = destination
  local machine="$1" py="$2" req="$3" dest="$4"
  local dl="$cache/$machine-cp${py/./}"
  mkdir -p "$dl" "$dest"
  # shellcheck disable=SC2046
  "$python" -m pip download --only-binary=:all: $(platform_flags "$machine") --python-version "$py" \
    --implementation cp -d "$dl" "$req" >"$work/fetch.log" 2>&1 || { cat "$work/fetch.log"; return 1; }
  sed -n 's/^ *\(Saved\|File was already downloaded\) \(.*\.whl\)$/\2/p' "$work/fetch.log" | while read -r f; do
    case "$(basename "$f")" in edge_agent-*) ;; *) cp "$f" "$dest/" ;; esac
  done
  # The project's wheel never goes through the cache (another tree's wheel has the same name).
  rm -f "$dl"/edge_agent-*.whl
  case "$req" in "$own_wheel"*) cp "$own_wheel" "$dest/" ;; esac
}

# The check: pip resolves the set for the target's platform from the bundle's wheels alone.
check_set() {  # $1 = machine, $2 = python version, $3 = bundle dir, $4 = requirement, more: find-links
  local machine="$1" py="$2" dir="$3" req="$4"; shift 4
  local links=()
  for d in "$@"; do links+=(--find-links "$dir/$d"); done
  # shellcheck disable=SC2046
  env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null \
    "$python" -m pip install --dry-run --ignore-installed \
    --no-index "${links[@]}" --only-binary=:all: $(platform_flags "$machine") --python-version "$py" \
    --implementation cp --target "$work/never-written" --report "$work/check.json" "$req" >"$work/check.log" 2>&1 \
    || { echo "build.sh: INCOMPLETE: $req for $machine CPython $py from $(basename "$dir"): $*"; cat "$work/check.log"; return 1; }
  "$python" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["install"]))' "$work/check.json"
}

# The oldest glibc a set runs on: per wheel the lowest manylinux tag it carries, the highest of those.
glibc_of() {  # $@ = directories of wheels
  "$python" - "$@" <<'PY'
import re, sys
from pathlib import Path
need = (2, 5)
for whl in (w for d in sys.argv[1:] for w in Path(d).glob("*.whl")):
    tags = [(2, 5) if t == "manylinux1" else (2, 12) if t == "manylinux2010" else (2, 17) if t == "manylinux2014"
            else (int(t.split("_")[1]), int(t.split("_")[2])) for t in re.findall(r"(manylinux(?:1|2010|2014|_\d+_\d+))_", whl.name)]
    if tags:
        need = max(need, min(tags))
print("%d.%d" % need)
PY
}

sizes=()
for t in "${targets[@]}"; do
  target="${t%%:*}"; py="${t##*:}"; machine="${target#linux-}"
  case "$target" in linux-x86_64|linux-aarch64) ;; *) echo "build.sh: unknown target $target" >&2; exit 2 ;; esac
  name="edge-agent-$ident-$target-cp${py/./}"
  dir="$work/$name"
  log "$name: fetching wheels for $machine CPython $py"
  fetch "$machine" "$py" "$own_wheel" "$dir/wheels"
  fetch "$machine" "$py" "pip" "$dir/wheels"           # install.sh runs pip from its wheel: no ensurepip needed
  fetch "$machine" "$py" "$own_wheel[ledger]" "$work/ledger-all"
  mkdir -p "$dir/ledger"
  for w in "$work"/ledger-all/*.whl; do
    [ -e "$dir/wheels/$(basename "$w")" ] || mv "$w" "$dir/ledger/"
  done
  rm -rf "$work/ledger-all"
  n_base="$(check_set "$machine" "$py" "$dir" edge-agent wheels)"
  n_ledger="$(check_set "$machine" "$py" "$dir" 'edge-agent[ledger]' wheels ledger)"
  log "$name: complete for $machine CPython $py (pip --dry-run --no-index): edge-agent $n_base packages, with [ledger] $n_ledger"

  glibc="$(glibc_of "$dir/wheels")"; glibc_ledger="$(glibc_of "$dir/wheels" "$dir/ledger")"
  mb() { du -sb "$@" | awk '{s += $1} END {printf "%.1f MB", s / 1e6}'; }
  wheels_mb="$(mb "$dir/wheels")"; ledger_mb="$(mb "$dir/ledger")"
  mkdir -p "$dir/systemd" "$dir/docs"
  cp "$source_dir"/systemd/* "$dir/systemd/"
  cp "$source_dir/config.example.yaml" "$source_dir/ledger.example.yaml" "$source_dir/README.md" "$dir/"
  cp "$source_dir/docs/service.md" "$dir/docs/"
  [ ! -e "$source_dir/docs/install.md" ] || cp "$source_dir/docs/install.md" "$dir/docs/"
  cp "$here/install.sh" "$dir/install.sh"     # always today's installer, also for an older tree
  chmod 0755 "$dir/install.sh"
  cat >"$dir/BUNDLE" <<INFO
NAME=$name
VERSION=$version
COMMIT=$commit
IDENT=$ident
TARGET=$target
MACHINE=$machine
PYTHON=$py
GLIBC=$glibc
GLIBC_LEDGER=$glibc_ledger
BUILT=$(date -u +%Y-%m-%dT%H:%M:%SZ)
INFO
  (cd "$dir" && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum >SHA256SUMS)
  tar -C "$work" -czf "$out/$name.tar.gz" "$name"
  rm -rf "$dir"
  sizes+=("$name.tar.gz: $(mb "$out/$name.tar.gz") (wheels/ $wheels_mb, $n_base packages; ledger/ $ledger_mb, [ledger] $n_ledger packages; glibc >= $glibc, with [ledger] >= $glibc_ledger)")
done

log "bundles in $out:"
for s in "${sizes[@]}"; do printf '  %s\n' "$s"; done
