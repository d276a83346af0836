"""OCI images for the test cluster's real node, built here with no registry and no Docker.

Two images, each a single-layer OCI layout packed by umoci and saved as an OCI archive that
`ctr images import` takes:

- ``drillbook.local/pause:3.2``: the pod sandbox (a statically linked pause built from PAUSE_C
  with the system's C compiler);
- ``drillbook.local/busybox:1``: Debian's busybox-static, a real HTTP server (``busybox httpd``)
  for the workloads the node tests kill and scale.

Archives are cached outside the repository under ~/.cache/drillbook/images/<key>, the key being a
digest of every input (source text, binary content, tool version), so a warm run builds nothing.

`drillbook()` is the product's own image (runner and reference platform), built by
deploy/images/build.sh exactly as a platform team builds it, into the same cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PAUSE_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, stop); signal(SIGTERM, stop); signal(SIGCHLD, reap);
  for (;;) pause();
}
"""
BUSYBOX = Path("/bin/busybox")
TOOLS = ("umoci", "cc")


@dataclass(frozen=True)
class Image:
    """An image built into an OCI archive: its reference, the archive's path, and other names the
    node gives it (one image serving as deploy/'s runner and reference platform)."""
    ref: str
    archive: Path
    aliases: tuple[str, ...] = ()

    @property
    def base_name(self) -> str:
        return self.ref.rsplit(":", 1)[0]


def cache_root() -> Path:
    return Path(os.environ.get("DRILLBOOK_IMAGE_CACHE") or Path.home() / ".cache" / "drillbook" / "images")


def missing_tools() -> list[str]:
    """What the build needs and this machine lacks (tools and busybox-static)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not BUSYBOX.exists():
        missing.append(f"{BUSYBOX} (Debian's busybox-static)")
    return missing


def _key(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def umoci(*args: str) -> None:
    subprocess.run(["umoci", *args], check=True, capture_output=True)


def _empty_image(work: Path, tag: str) -> tuple[Path, Path]:
    """An OCI layout with one empty image `tag`, unpacked: (layout, bundle); rootfs is bundle/rootfs."""
    layout, bundle = work / "layout", work / "bundle"
    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:{tag}")
    umoci("unpack", "--image", f"{layout}:{tag}", str(bundle))
    return layout, bundle


def _save(layout: Path, archive: Path) -> None:
    """The layout as an OCI archive, in place only once whole."""
    partial = archive.with_suffix(".partial")
    subprocess.run(["tar", "-cf", str(partial), "-C", str(layout), "."], check=True)
    partial.rename(archive)


def _pack(ref: str, binary: Path, into: str, archive: Path, work: Path) -> None:
    """One binary at `into` as the image's entrypoint, packed as an OCI archive."""
    tag = ref.rsplit(":", 1)[1]
    layout, bundle = _empty_image(work, tag)
    target = bundle / "rootfs" / into.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    target.chmod(0o755)
    umoci("repack", "--image", f"{layout}:{tag}", str(bundle))
    umoci("config", "--image", f"{layout}:{tag}", "--config.entrypoint", into)
    _save(layout, archive)


def build() -> list[Image]:
    """The pause and busybox images, from the cache where their inputs are unchanged."""
    missing = missing_tools()
    if missing:
        raise RuntimeError("cannot build the node's images, missing: " + ", ".join(missing))
    umoci_version = subprocess.run(["umoci", "--version"], capture_output=True, text=True).stdout.encode()
    cc_version = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.encode()
    folder = cache_root() / _key(PAUSE_C.encode(), cc_version, BUSYBOX.read_bytes(), umoci_version)
    images = [Image("drillbook.local/pause:3.2", folder / "pause.tar"),
              Image("drillbook.local/busybox:1", folder / "busybox.tar")]
    if all(image.archive.exists() for image in images):
        return images
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="drillbook-images-") as scratch:
        work = Path(scratch)
        (work / "pause.c").write_text(PAUSE_C)
        subprocess.run(["cc", "-static", "-O2", "-o", str(work / "pause"), str(work / "pause.c")], check=True)
        _pack(images[0].ref, work / "pause", "/pause", images[0].archive, work / "pause-image")
        _pack(images[1].ref, BUSYBOX, "/bin/busybox", images[1].archive, work / "busybox-image")
    return images


DRILLBOOK_BUILD = Path(__file__).resolve().parents[2] / "deploy" / "images" / "build.sh"
DRILLBOOK_TOOLS = ("debootstrap", "umoci", "chroot")


def drillbook_missing() -> list[str]:
    """What deploy/images/build.sh needs and this machine lacks."""
    return [tool for tool in DRILLBOOK_TOOLS if shutil.which(tool) is None]


def drillbook(timeout_s: float = 1500.0) -> Image:
    """drillbook's image from deploy/images/build.sh (cached by its inputs), named as deploy/ names it."""
    built = subprocess.run(["bash", str(DRILLBOOK_BUILD)], capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "DRILLBOOK_IMAGE_CACHE": str(cache_root())})
    if built.returncode != 0:
        raise RuntimeError(f"{DRILLBOOK_BUILD} exited {built.returncode}:\n{built.stderr[-3000:]}")
    archive = Path(built.stdout.strip().splitlines()[-1])
    from drillbook import __version__

    return Image(f"docker.io/drillbook/drillbook:{__version__}", archive,
                 aliases=(f"docker.io/drillbook/reference-platform:{__version__}",))


POSTGRES_ENTRYPOINT = r"""#!/bin/sh
# The part of the official postgres image's contract that deploy/platform/state-store.yaml uses:
# PGDATA, POSTGRES_PASSWORD, POSTGRES_DB; initialised on first start, then postgres as PID 1.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
bin=/usr/lib/postgresql/15/bin
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" > /run/postgresql/pwfile
  chown postgres /run/postgresql/pwfile
  as_postgres "$bin/initdb" -D "$PGDATA" -U postgres --pwfile=/run/postgresql/pwfile --encoding=UTF8 \
    --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm /run/postgresql/pwfile
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_postgres "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ -n "${POSTGRES_DB:-}" ]; then
    as_postgres "$bin/psql" -v ON_ERROR_STOP=1 -U postgres -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
  fi
  as_postgres "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$PGDATA" -c listen_addresses='*'
"""
POSTGRES_PACKAGES = "postgresql-15,postgresql-client-15"


def debian_mirror() -> str:
    """The Debian mirror apt uses here (as deploy/images/build.sh finds it)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    for line in Path("/etc/apt/sources.list").read_text().splitlines() if Path("/etc/apt/sources.list").exists() else []:
        if line.startswith("deb "):
            return line.split()[1]
    raise RuntimeError("no Debian mirror configured for apt")


def postgres() -> Image:
    """A stand-in for the official `postgres:15` image that deploy/platform names, from Debian's
    postgresql-15 (bookworm) with an entrypoint keeping that image's environment contract."""
    folder = cache_root() / ("postgres-" + _key(POSTGRES_ENTRYPOINT.encode(), POSTGRES_PACKAGES.encode()))
    image = Image("docker.io/library/postgres:15", folder / "postgres.tar")
    if image.archive.exists():
        return image
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="drillbook-postgres-", dir=cache_root()) as scratch:
        layout, bundle = _empty_image(Path(scratch), "15")
        rootfs = bundle / "rootfs"
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={POSTGRES_PACKAGES}", "bookworm",
                        str(rootfs), debian_mirror()], check=True, capture_output=True, timeout=900)
        for leftover in ("var/lib/postgresql/15", "etc/postgresql/15", "var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / leftover, ignore_errors=True)
        entrypoint = rootfs / "usr/local/bin/docker-entrypoint.sh"
        entrypoint.write_text(POSTGRES_ENTRYPOINT)
        entrypoint.chmod(0o755)
        umoci("repack", "--image", f"{layout}:15", str(bundle))
        umoci("config", "--image", f"{layout}:15", "--config.entrypoint", "/usr/local/bin/docker-entrypoint.sh",
              "--config.env", "PATH=/usr/lib/postgresql/15/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "--config.env", "PGDATA=/var/lib/postgresql/data")
        _save(layout, image.archive)
    return image
