#!/usr/bin/env bash
# Install NVIDIA Nsight Systems 2022.4 (Debian bookworm non-free) into the project's cache,
# without root changes to the system: apt is pointed at a private sources file and state
# directory, and the .deb files are unpacked with `dpkg -x`.
#
# Idempotent: if the cached nsys already runs, nothing is downloaded again.
# Usage: install_nsys.sh [ROOT]   (default ROOT: $NSYS_MINE_NSYS_ROOT, else ~/.cache/nsys-mine/nsys)
# scripts/install_nsys.sh calls it with the repository's .cache/nsys.
# Prints the path of the nsys binary on its last line.
set -euo pipefail

root="${1:-${NSYS_MINE_NSYS_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/nsys-mine/nsys}}"
nsys_bin="$root/usr/bin/nsys"

if [ -x "$nsys_bin" ] && "$nsys_bin" --version >/dev/null 2>&1; then
    echo "$nsys_bin"
    exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
    echo "install_nsys: apt-get/dpkg not found; this installer supports Debian/Ubuntu x86-64 only." >&2
    echo "install_nsys: install Nsight Systems from https://developer.nvidia.com/nsight-systems" >&2
    exit 3
fi
if [ "$(uname -m)" != "x86_64" ]; then
    echo "install_nsys: only x86-64 is supported by this installer (found $(uname -m))." >&2
    exit 3
fi

work="$root.download"
lists="$work/lists"
debs="$work/debs"
mkdir -p "$lists/partial" "$debs"
sources="$work/nsys-mine.sources"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main contrib non-free
Signed-By: $keyring

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: $keyring
EOF

apt_opts=(-o "Dir::Etc::SourceList=$sources" -o "Dir::Etc::SourceParts=/dev/null"
          -o "Dir::State::Lists=$lists" -o "APT::Sandbox::User=root" -q)

echo "install_nsys: updating private package lists" >&2
apt-get "${apt_opts[@]}" update >&2
echo "install_nsys: downloading nsight-systems (~172 MB)" >&2
(cd "$debs" && apt-get "${apt_opts[@]}" download nsight-systems nsight-systems-target libssh-4 >&2)

rm -rf "$root.tmp"
mkdir -p "$root.tmp"
for deb in "$debs"/*.deb; do
    dpkg -x "$deb" "$root.tmp"
done
# The packages miss one link; without it nsys cannot find its importer and writes only a .qdstrm.
link="$root.tmp/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"
if [ ! -e "$link" ]; then
    ln -s ../../nsight-systems/host-linux-x64 "$link"
fi
rm -rf "$root"
mv "$root.tmp" "$root"
rm -rf "$work"

if ! "$nsys_bin" --version >&2; then
    echo "install_nsys: the unpacked nsys does not run" >&2
    exit 4
fi
echo "$nsys_bin"
