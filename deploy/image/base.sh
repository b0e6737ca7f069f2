#!/bin/sh
# The image's base built from Debian's own archive with debootstrap, for machines that reach no
# public image registry: a minbase bookworm root filesystem imported into podman's local store.
# Usage (as root): deploy/image/base.sh [IMAGE]   (default localhost/rebalance-monitor-base:bookworm)
# An image already in the store is kept: `podman rmi IMAGE` to build it again.
set -eu

IMAGE=${1:-localhost/rebalance-monitor-base:bookworm}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if podman image exists "$IMAGE"; then
    echo "$IMAGE is already in podman's store"
    exit 0
fi

rootfs=$(mktemp -d /var/tmp/rebalance-monitor-base.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR"
# debootstrap lists only the release; the image's apt-get should also see point and security fixes.
cat > "$rootfs/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
SOURCES
# As Debian's slim images: no manuals, docs or translations, now or from later installs (copyrights stay).
cat > "$rootfs/etc/dpkg/dpkg.cfg.d/excludes" <<EXCLUDES
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EXCLUDES
# The directories stay: update-alternatives fails on a missing man1 (the JRE's java.1 link).
find "$rootfs/usr/share/doc" "$rootfs/usr/share/man" "$rootfs/usr/share/info" "$rootfs/usr/share/locale" \
    "$rootfs/usr/share/lintian" ! -type d ! -name copyright -delete
# debootstrap copied this host's name and resolver: container engines mount their own at run time.
: > "$rootfs/etc/hostname"
: > "$rootfs/etc/resolv.conf"
chmod 0644 "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"
# The image's layers run apt-get update themselves; the bootstrap's lists and .debs are dead weight.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/var/log/bootstrap.log

# PATH as Debian's own images set it: the Dockerfile's ENV PATH extends it.
tar --numeric-owner -C "$rootfs" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$IMAGE"
