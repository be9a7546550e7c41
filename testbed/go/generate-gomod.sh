#!/usr/bin/env bash
# Regenerates the testbed's go.mod files from the pinned versions.
# The replace block for k8s.io/kubernetes is derived from that module's own
# go.mod (every staging module it maps to ./staging/src), so it follows the
# staging set of each release instead of a hand-written list.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

k8s_gomod=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
staging_version="v0.${K8S_VERSION#v1.}"

cd "$here/k8s"
cat > go.mod <<GOMOD
module fracnb.testbed/k8sbins

go 1.26.0

godebug default=go1.26
GOMOD
go mod edit -require="k8s.io/kubernetes@${K8S_VERSION}"
for module in $(sed -n 's|^\s*\(k8s.io/[^ ]*\) => ./staging/src/.*|\1|p' "$k8s_gomod"); do
  go mod edit "-replace=${module}=${module}@${staging_version}"
done
go mod edit -tool=k8s.io/kubernetes/cmd/kube-apiserver -tool=k8s.io/kubernetes/cmd/kube-scheduler \
  -tool=k8s.io/kubernetes/cmd/kube-controller-manager
go mod tidy

cd "$here/etcd"
printf 'module fracnb.testbed/etcdbin\n\ngo 1.26.0\n' > go.mod
go get -tool "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
go mod tidy

cd "$here/kwok"
printf 'module fracnb.testbed/kwokbin\n\ngo 1.26.0\n' > go.mod
go get -tool "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
go mod tidy
echo "go.mod files regenerated for kubernetes ${K8S_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}"
