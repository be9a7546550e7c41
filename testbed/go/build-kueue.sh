#!/usr/bin/env bash
# Builds Kueue's manager from its Go module (testbed/go/kueue, a module dir of its
# own because Kueue pins older k8s.io/* modules than the control plane) into a
# versioned cache directory outside the repository, and copies from the module what
# the testbed installs: the CRDs and the webhook manifests. Reuses the cache when all
# is there. Prints the directory last (bin/kueue, manifests/crds/*.yaml,
# manifests/webhooks.yaml).
#
#   FRACNB_TESTBED_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/fracnb-testbed)
#
# A cold build takes about 13 minutes on two idle cores (1 min of module download,
# 12 of compiling; docs/testbed.md). Only the `kueue` cluster needs it: tests marked
# `kueue` skip without it. A lock file makes a second build at the same time wait
# for the first instead of writing the same files. Progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${FRACNB_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fracnb-testbed}
out_dir="$cache_root/kueue-${KUEUE_VERSION}"
say() { printf '[kueue build] %s\n' "$*" >&2; }

ready() { [ -x "$out_dir/bin/kueue" ] && [ -f "$out_dir/manifests/.complete" ]; }
if ready; then say "reusing $out_dir"; echo "$out_dir"; exit 0; fi

command -v go >/dev/null || { say "error: Go is not installed; Kueue needs Go >= 1.25 to build"; exit 1; }
mkdir -p "$out_dir/bin"
exec 9>"$out_dir/.build.lock"
if ! flock -n 9; then
  say "another build holds $out_dir/.build.lock; waiting for it"
  flock 9
fi
if ready; then say "built meanwhile by another process: $out_dir"; echo "$out_dir"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
started=$(date +%s)
heartbeat() { while sleep 30; do say "... still building ($(( $(date +%s) - started ))s elapsed)"; done; }
heartbeat &
heartbeat_pid=$!
trap 'kill $heartbeat_pid 2>/dev/null || true' EXIT

cd "$here/kueue"
say "downloading modules"
go mod download
module_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
if [ ! -f "$out_dir/manifests/.complete" ]; then
  rm -rf "$out_dir/manifests.partial" && mkdir -p "$out_dir/manifests.partial/crds"
  cp "$module_dir"/config/components/crd/bases/*.yaml "$out_dir/manifests.partial/crds/"
  cp "$module_dir"/config/components/webhook/manifests.yaml "$out_dir/manifests.partial/webhooks.yaml"
  touch "$out_dir/manifests.partial/.complete"
  rm -rf "$out_dir/manifests" && mv "$out_dir/manifests.partial" "$out_dir/manifests"
  say "CRDs and webhook manifests copied to $out_dir/manifests"
fi
if [ ! -x "$out_dir/bin/kueue" ]; then
  say "compiling sigs.k8s.io/kueue/cmd/kueue ${KUEUE_VERSION}"
  go build -p "$(nproc 2>/dev/null || echo 2)" -ldflags "-s -w" -o "$out_dir/bin/kueue.partial" sigs.k8s.io/kueue/cmd/kueue
  mv "$out_dir/bin/kueue.partial" "$out_dir/bin/kueue"
fi
say "Kueue ${KUEUE_VERSION} ready in $out_dir after $(( $(date +%s) - started ))s"
echo "$out_dir"
