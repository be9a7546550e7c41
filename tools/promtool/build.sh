#!/usr/bin/env bash
# Builds promtool, Prometheus's rule checker and unit-test runner, from its Go module (pinned in
# go.mod beside this script) into a versioned cache directory outside the repository, and reuses it
# when it is there. The tests check helm-values/prometheus-rules.yaml and the dashboard's queries
# with it. Prints the binary's path last; progress goes to stderr.
#
#   FRACNB_PROMTOOL_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/fracnb-promtool)
#
# Builds started together take turns through an flock on the cache root's .build.lock; the
# next one then finds the binary built.
#
# Built with the tag remove_all_sd: promtool's rule checks and tests need none of Prometheus's
# cloud service discoveries (AWS, Azure, GCE, ...), whose SDKs would be most of the build.
# Regenerate go.mod and go.sum for another version with:
#   go get -tool github.com/prometheus/prometheus/cmd/promtool@vX.Y.Z && go mod tidy
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=github.com/prometheus/prometheus
tags=remove_all_sd

say() { printf '[promtool build] %s\n' "$*" >&2; }

version=$(sed -n "s|^[[:space:]]*${module} \(v[^ ]*\).*|\1|p" "$here/go.mod")
[ -n "$version" ] || { say "error: no ${module} version in $here/go.mod"; exit 1; }
cache_root=${FRACNB_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fracnb-promtool}
bin_dir="$cache_root/prometheus-${version}_${tags}"
binary="$bin_dir/promtool"

reuse() {
  say "reusing $binary"
  echo "$binary"
  exit 0
}

if [ -x "$binary" ]; then reuse; fi

mkdir -p "$bin_dir"
exec 9>"$cache_root/.build.lock"
if ! flock --nonblock 9; then
  say "another build of promtool holds $cache_root/.build.lock: waiting for it to finish"
  flock 9
fi
if [ -x "$binary" ]; then reuse; fi  # the build we waited for made it

command -v go >/dev/null || { say "error: Go is not installed; promtool is built from its Go module (Go >= 1.26)"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
started=$(date +%s)

heartbeat() {  # Go prints nothing while compiling
  while sleep 30 >/dev/null 2>&1; do  # the sleep holds no output pipe open past the build
    say "... still building ($(( $(date +%s) - started ))s elapsed)"; done
}
heartbeat 9>&- &  # not holding the lock: a killed build must not leave it taken
heartbeat_pid=$!
trap 'kill $heartbeat_pid 2>/dev/null || true' EXIT

# Module v0.3XX.Y is Prometheus 3.XX.Y; promtool --version says so.
minor=${version#v0.}; patch=${minor#*.}; minor=${minor%%.*}
release="3.$(( minor - 300 )).${patch}"
say "downloading what it needs of ${module}@${version} and compiling promtool (Prometheus ${release}, tags ${tags})"
(cd "$here" && go build -p "$(nproc 2>/dev/null || echo 2)" -tags "$tags" \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=${release}" \
  -o "$binary.partial" "${module}/cmd/promtool")
mv "$binary.partial" "$binary"
say "promtool ready in $bin_dir after $(( $(date +%s) - started ))s"
echo "$binary"
