#!/usr/bin/env bash
# Builds the testbed's control plane (kube-apiserver, kube-scheduler,
# kube-controller-manager, etcd, kwok) from Go modules into a versioned cache
# directory outside the repository, and reuses it when every binary is already
# there; a cache missing one (kube-controller-manager came later) gets just that
# one built. Prints the bin directory last.
#
#   FRACNB_TESTBED_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/fracnb-testbed)
#
# Builds started together (two `./dev test` runs on a fresh machine) take turns: each holds
# an flock on the cache root's .build.lock while it builds, and the next one then finds the
# binaries built; a build never writes another's half-written .partial file.
#
# A cold build takes 7 to 8 minutes on two cores without kube-controller-manager
# (only the dra cluster runs it), about 10 with it (docs/testbed.md). Progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${FRACNB_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fracnb-testbed}
bin_dir="$cache_root/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}/bin"
binaries=(kube-apiserver kube-scheduler kube-controller-manager etcd kwok)

say() { printf '[testbed build] %s\n' "$*" >&2; }

# KWOK v0.8.0 has no built-in stages: assemble the ones the testbed uses from the kwok
# module (it is in the module cache after the kwok build) next to the binaries.
kwok_stages=(
  node/fast/node-initialize.yaml
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml
  pod/fast/pod-complete.yaml
  pod/fast/pod-delete.yaml
  pod/chaos/pod-container-running-failed.yaml
)
install_kwok_stages() {
  local target="$bin_dir/kwok-stages.yaml" module_dir stage
  [ -f "$target" ] && return
  module_dir=$(cd "$here/kwok" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$module_dir/kustomize/stage" ] || { say "error: kwok module not found for its stages"; return 1; }
  for stage in "${kwok_stages[@]}"; do
    cat "$module_dir/kustomize/stage/$stage"; printf '\n---\n'
  done > "$target.partial"
  mv "$target.partial" "$target"
  say "kwok stages written to $target"
}

all_present() {
  local name
  for name in "${binaries[@]}"; do [ -x "$bin_dir/$name" ] || return 1; done
}

reuse() {
  say "reusing cached binaries in $bin_dir"
  if command -v go >/dev/null; then install_kwok_stages || true; fi
  echo "$bin_dir"
  exit 0
}

if all_present && [ -f "$bin_dir/kwok-stages.yaml" ]; then reuse; fi

mkdir -p "$bin_dir"
exec 9>"$cache_root/.build.lock"
if ! flock --nonblock 9; then
  say "another build of the testbed holds $cache_root/.build.lock: waiting for it to finish"
  flock 9
fi
if all_present; then reuse; fi  # the build we waited for made them

command -v go >/dev/null || { say "error: Go is not installed; the testbed needs Go >= 1.26 to build the control plane"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly"
parallel=$(nproc 2>/dev/null || echo 2)
started=$(date +%s)

# Go prints nothing while compiling; a heartbeat shows the build is alive.
heartbeat() {
  while sleep 30 >/dev/null 2>&1; do  # the sleep holds no output pipe open past the build
    say "... still building ($(( $(date +%s) - started ))s elapsed)"; done
}
heartbeat 9>&- &  # not holding the lock: a killed build must not leave it taken
heartbeat_pid=$!
trap 'kill $heartbeat_pid 2>/dev/null || true' EXIT

build_step() {  # build_step NAME DIR PACKAGE [LDFLAGS]
  local name=$1 dir=$2 package=$3 ldflags=${4:-"-s -w"}
  if [ -x "$bin_dir/$name" ]; then say "$name: cached"; return; fi
  say "$name: downloading modules"
  (cd "$here/$dir" && go mod download)
  say "$name: compiling $package"
  local t0; t0=$(date +%s)
  (cd "$here/$dir" && go build -p "$parallel" -ldflags "$ldflags" -o "$bin_dir/$name.partial" "$package")
  mv "$bin_dir/$name.partial" "$bin_dir/$name"
  say "$name: done in $(( $(date +%s) - t0 ))s"
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
k8s_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

build_step etcd etcd go.etcd.io/etcd/server/v3
build_step kwok kwok sigs.k8s.io/kwok/cmd/kwok
build_step kube-scheduler k8s k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
build_step kube-apiserver k8s k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build_step kube-controller-manager k8s k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"

install_kwok_stages
say "all binaries ready in $bin_dir after $(( $(date +%s) - started ))s"
echo "$bin_dir"
