#!/usr/bin/env bash
# Build a real Kubernetes control plane (kube-apiserver, kube-controller-manager, kube-scheduler
# v1.20.2) and the kubelet of a real node (tests/k8s/node.py) from Debian bookworm's own source
# package, plus etcd from Debian's etcd-server, into a cache folder OUTSIDE the repository. Skips
# everything when the cache already holds this version.
#
#   tests/k8s/cluster/build.sh            # cache: $DRILLBOOK_K8S_CACHE or ~/.cache/drillbook/kubernetes-1.20.2
#
# Nothing is installed on the system: apt runs with a private sources list and state folder
# (the system's Debian sources with deb-src added), packages are unpacked with dpkg -x, and Go
# builds in GOPATH mode with no module proxy. About 6 minutes on 2 cores, ~3 GB while building.
set -euo pipefail

VERSION="1.20.2"
DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
CACHE="${DRILLBOOK_K8S_CACHE:-$HOME/.cache/drillbook/kubernetes-$VERSION}"
BIN="$CACHE/bin"
STAMP="$BIN/.built-$DEB_VERSION-node"

if [[ -f "$STAMP" ]]; then
  for tool in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd; do
    [[ -x "$BIN/$tool" ]] || { echo "cache $BIN lacks $tool; rebuilding" >&2; rm -f "$STAMP"; break; }
  done
  [[ -f "$STAMP" ]] && { echo "kubernetes $VERSION control plane cached in $BIN"; exit 0; }
fi

WORK="$CACHE/work"
rm -rf "$WORK"
mkdir -p "$WORK/apt/sources.list.d" "$WORK/apt/state/lists/partial" "$WORK/apt/cache/archives/partial" \
         "$WORK/root" "$WORK/src" "$BIN"

SYSTEM_SOURCES=/etc/apt/sources.list.d/debian.sources
if [[ -f "$SYSTEM_SOURCES" ]]; then
  sed 's/^Types: deb$/Types: deb deb-src/' "$SYSTEM_SOURCES" > "$WORK/apt/sources.list.d/debian.sources"
elif [[ -f /etc/apt/sources.list ]]; then
  grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' > "$WORK/apt/sources.list.d/debian-src.list"
  cp /etc/apt/sources.list "$WORK/apt/sources.list.d/debian.list"
else
  echo "no Debian apt sources found (need /etc/apt/sources.list.d/debian.sources)" >&2
  exit 2
fi
APT=(apt-get -q -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$WORK/apt/sources.list.d"
     -o "Dir::State=$WORK/apt/state" -o "Dir::Cache=$WORK/apt/cache" -o "Debug::NoLocking=1"
     -o "APT::Sandbox::User=root")

echo "[1/4] package lists (private apt state)"
"${APT[@]}" update >/dev/null

echo "[2/4] source package kubernetes $DEB_VERSION and build tools"
(cd "$WORK/src" && "${APT[@]}" source --download-only "kubernetes=$DEB_VERSION" >/dev/null)
(cd "$WORK/src" && dpkg-source --no-check -x kubernetes_*.dsc tree >/dev/null)
(cd "$WORK/apt/cache/archives" && "${APT[@]}" download golang-1.19-go golang-1.19-src etcd-server rsync \
    libpopt0 libxxhash0 >/dev/null)
for deb in "$WORK"/apt/cache/archives/*.deb; do dpkg -x "$deb" "$WORK/root"; done

echo "[3/4] go build (GOPATH mode, no network)"
export PATH="$WORK/root/usr/lib/go-1.19/bin:$WORK/root/usr/bin:$PATH"
export LD_LIBRARY_PATH="$WORK/root/usr/lib/x86_64-linux-gnu:$WORK/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GOROOT="$WORK/root/usr/lib/go-1.19" GOPATH="$WORK/gopath" GO111MODULE=off GOPROXY=off GOFLAGS=-mod=vendor \
       CGO_ENABLED=0 GOCACHE="$WORK/gocache" KUBE_GIT_VERSION="v$VERSION" KUBE_GIT_TREE_STATE=clean
export GOFLAGS=""
mkdir -p "$GOPATH/src/k8s.io"
ln -s "$WORK/src/tree" "$GOPATH/src/k8s.io/kubernetes"
(cd "$GOPATH/src/k8s.io/kubernetes" && \
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet cmd/kube-proxy" >"$WORK/build.log" 2>&1) || {
  tail -30 "$WORK/build.log" >&2; exit 1; }

echo "[4/4] into $BIN"
# Each binary replaced by a rename: a running cluster keeps the file it started from.
for built in "$GOPATH/src/k8s.io/kubernetes/_output/bin/"{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy} \
             "$WORK/root/usr/bin/etcd"; do
  cp "$built" "$BIN/.$(basename "$built").new" && mv -f "$BIN/.$(basename "$built").new" "$BIN/$(basename "$built")"
done
rm -rf "$WORK"
touch "$STAMP"
echo "kubernetes $VERSION control plane built into $BIN"
