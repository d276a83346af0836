#!/usr/bin/env bash
# Build drillbook's OCI image from Debian packages and PyPI only: no Docker, no registry, no base
# image from anywhere else. One image serves both roles deploy/ names:
#   drillbook/runner:VERSION              the drillbook CLI, its runbooks and Jupyter kernels
#   drillbook/reference-platform:VERSION  the same image; its services are modules of the package
#
#   deploy/images/build.sh            # prints the OCI archive's path as its last line
#
# Two layers, each built only when its inputs change, cached outside the repository in
# $DRILLBOOK_IMAGE_CACHE (default ~/.cache/drillbook/images):
#   base  Debian bookworm (debootstrap, minbase) with python3, tini and postgresql-client, and a
#         virtual environment in /opt/drillbook holding drillbook's dependencies as resolved
#         from PyPI for Debian's Python (keyed by this script and pyproject.toml's dependencies);
#   app   drillbook itself, a wheel of this checkout (keyed by the files the wheel is made of).
# The archive (oci-archive, tag VERSION) goes to a registry with, for example,
#   skopeo copy oci-archive:ARCHIVE:VERSION docker://REGISTRY/drillbook/runner:VERSION
# or straight into containerd with `ctr images import --base-name NAME ARCHIVE`.
# Needs root (debootstrap, chroot), debootstrap, umoci, and a python3 with pip.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
checkout="$(cd "$here/../.." && pwd)"
SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates,tini,postgresql-client
CACHE="${DRILLBOOK_IMAGE_CACHE:-$HOME/.cache/drillbook/images}"
say() { echo "images: $*" >&2; }
die() { echo "images: $*" >&2; exit 2; }

[[ $EUID -eq 0 ]] || die "must run as root (debootstrap and chroot)"
for tool in debootstrap umoci chroot python3 sha256sum; do
  command -v "$tool" >/dev/null || die "missing $tool (Debian packages: debootstrap umoci)"
done
python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip"

mirror="${DRILLBOOK_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" && -f /etc/apt/sources.list.d/debian.sources ]]; then
  mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
elif [[ -z "$mirror" && -f /etc/apt/sources.list ]]; then
  mirror="$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)"
fi
[[ -n "$mirror" ]] || die "no Debian mirror: set DRILLBOOK_DEBIAN_MIRROR or configure apt"

version="$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$checkout/pyproject.toml")"
arch="$(uname -m)"
digest() { sha256sum | cut -c1-16; }
# The base layer depends on drillbook's runtime dependencies, not on the rest of pyproject.toml (a
# change to the test settings must not rebuild Debian and the virtual environment).
dependencies="$(python3 -c 'import json, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(json.dumps([project.get("requires-python"), sorted(project.get("dependencies", []))]))' "$checkout/pyproject.toml")"
base_key="$( { echo "$SUITE $PACKAGES $arch"; echo "$dependencies"; cat "$0"; } | digest)"
app_key="$( { echo "$base_key"; cd "$checkout" && find lib runbooks experiments loadtests gamedays targets \
  pyproject.toml setup.py MANIFEST.in -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z \
  | xargs -0 sha256sum; } | digest)"
base="$CACHE/base-$base_key"
archive="$CACHE/drillbook-$version-$app_key.tar"
if [[ -f "$archive" ]]; then
  say "cached: $archive"
  echo "$archive"
  exit 0
fi
mkdir -p "$CACHE"
work="$(mktemp -d "$CACHE/work.XXXXXX")"
trap 'rm -rf "$work"' EXIT
in_root() { env -i PATH=/opt/drillbook/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 chroot "$1" "${@:2}"; }

if [[ ! -d "$base" ]]; then
  started=$SECONDS
  say "[base 1/3] Debian $SUITE ($PACKAGES)"
  umoci init --layout "$work/base"
  umoci new --image "$work/base:base"
  umoci unpack --image "$work/base:base" "$work/bundle" >/dev/null
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/bundle/rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  pyver="$(in_root "$work/bundle/rootfs" python3 -c 'import platform; print(platform.python_version())')"

  say "[base 2/3] drillbook's dependencies from PyPI, for Debian's Python $pyver"
  python3 -m pip wheel -q --no-deps -w "$work/app" "$checkout" 2>&1 | grep -v '^WARNING' >&2 || true
  wheel="$(ls "$work"/app/drillbook-*.whl)"
  platforms=()
  for tag in manylinux_2_36 manylinux_2_28 manylinux_2_17 manylinux2014 linux; do
    platforms+=(--platform "${tag}_$arch")
  done
  python3 -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$work/bundle/rootfs/tmp/wheels" "$wheel" 2>&1 | grep -v '^WARNING' >&2 || true
  [[ -n "$(ls "$work/bundle/rootfs/tmp/wheels")" ]] || die "no wheels downloaded for Python $pyver"

  say "[base 3/3] /opt/drillbook"
  in_root "$work/bundle/rootfs" python3 -m venv /opt/drillbook
  in_root "$work/bundle/rootfs" pip install -q --no-index --find-links /tmp/wheels drillbook
  in_root "$work/bundle/rootfs" pip uninstall -q -y drillbook  # the app layer brings it
  rm -rf "$work/bundle/rootfs/tmp/wheels" "$work/bundle/rootfs/var/cache/apt/archives/"*.deb \
         "$work/bundle/rootfs/var/lib/apt/lists/"*
  umoci repack --image "$work/base:base" "$work/bundle"
  rm -rf "$work/bundle"
  mv "$work/base" "$base"
  say "base layer built in $((SECONDS - started)) s: $base"
fi

started=$SECONDS
say "[app] drillbook $version from $checkout"
cp -a "$base" "$work/layout"
umoci unpack --image "$work/layout:base" "$work/bundle" >/dev/null
if [[ ! -d "$work/app" ]]; then
  python3 -m pip wheel -q --no-deps -w "$work/app" "$checkout" 2>&1 | grep -v '^WARNING' >&2 || true
fi
cp "$work"/app/drillbook-*.whl "$work/bundle/rootfs/tmp/"
in_root "$work/bundle/rootfs" sh -c 'pip install -q --no-deps --no-index /tmp/drillbook-*.whl && rm /tmp/drillbook-*.whl'
mkdir -p "$work/bundle/rootfs/work"
umoci repack --image "$work/layout:base" "$work/bundle"
umoci config --image "$work/layout:base" --tag "$version" \
  --config.entrypoint /usr/bin/tini --config.entrypoint -- --config.entrypoint /opt/drillbook/bin/drillbook \
  --config.env PATH=/opt/drillbook/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env LANG=C.UTF-8 --config.workingdir /work \
  --config.label org.opencontainers.image.title=drillbook \
  --config.label "org.opencontainers.image.version=$version"
umoci rm --image "$work/layout:base"
umoci gc --layout "$work/layout"
tar -cf "$work/image.tar" -C "$work/layout" .
mv "$work/image.tar" "$archive"
say "app layer built in $((SECONDS - started)) s: $archive ($(du -h "$archive" | cut -f1))"
# The cache keeps the three newest archives and the two newest base layers (each change to
# drillbook makes a new archive of ~250 MB).
ls -1t "$CACHE"/drillbook-*.tar 2>/dev/null | tail -n +4 | xargs -r rm -f
ls -1dt "$CACHE"/base-* 2>/dev/null | { grep -vx "$base" || true; } | tail -n +2 | xargs -r rm -rf  # none other: fine
echo "$archive"
