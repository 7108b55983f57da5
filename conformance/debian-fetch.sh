#!/usr/bin/env bash
# Fetches pinned packages from Debian 13 (trixie) and unpacks them into a
# directory, without installing anything on the machine.
#
#   conformance/debian-fetch.sh LOCKFILE DEST
#
# LOCKFILE has one package a line: `name version sha256` (`#` comments).
# Each .deb is downloaded with apt-get from Debian's archive through a
# private apt configuration under target/conformance/apt (the machine's own
# sources, lists and dpkg database are not touched), checked against its
# SHA-256 and unpacked with `dpkg -x` into DEST. DEST is rebuilt only when
# the lockfile changed.
#
# Why trixie: these machines run bookworm, whose archive has no client-go,
# and the Go module proxy cannot be reached from them; trixie's
# golang-*-dev packages carry the Go sources of client-go and its
# dependencies, and trixie's kubectl runs on bookworm's libc.
set -euo pipefail

lock=$1
dest=$2
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/target/conformance/apt"
stamp="$dest/.lock.sha256"
want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
# The Debian archive the machine's own apt uses, asked for another suite.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
archive=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(IDENTIFIER)' |
    awk -v c="$codename" '$2 == c && $3 == "Packages" { print $1; exit }')
if [ -z "$archive" ]; then
    echo "debian-fetch: no Debian archive for suite '${codename}' in the machine's apt sources" >&2
    exit 1
fi
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $archive trixie main" >"$work/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$work/sources.list"
    -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache=$work/cache"
    -o Dir::State::status=/dev/null
    -o APT::Architecture=amd64
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::CNF::DefaultEnabled=false
)
# The index is fetched once per machine (about 10 MB) and reused.
if [ ! -f "$work/lists/.updated" ]; then
    apt-get "${apt_opts[@]}" -q update >/dev/null
    touch "$work/lists/.updated"
fi

specs=()
while read -r name version sha; do
    case "$name" in '' | '#'*) continue ;; esac
    specs+=("$name=$version")
done <"$lock"
(
    cd "$work/debs"
    # apt-get drops to the _apt user to download unless it can write here.
    chmod 0777 . 2>/dev/null || true
    missing=()
    for spec in "${specs[@]}"; do
        name=${spec%%=*}
        version=${spec#*=}
        # Debian writes an epoch's colon as %3a in file names.
        ls "${name}_${version/:/%3a}_"*.deb >/dev/null 2>&1 || missing+=("$spec")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        if ! apt-get "${apt_opts[@]}" -q download "${missing[@]}" >/dev/null; then
            echo "debian-fetch: could not download ${missing[*]} from trixie; if trixie has moved on, pin the versions it now has in $lock" >&2
            exit 1
        fi
    fi
)

rm -rf "$dest"
mkdir -p "$dest"
while read -r name version sha; do
    case "$name" in '' | '#'*) continue ;; esac
    deb=$(ls "$work/debs/${name}_${version/:/%3a}_"*.deb)
    got=$(sha256sum "$deb" | cut -d' ' -f1)
    if [ "$got" != "$sha" ]; then
        echo "debian-fetch: $deb has SHA-256 $got, $lock pins $sha" >&2
        exit 1
    fi
    dpkg -x "$deb" "$dest"
done <"$lock"
echo "$want" >"$stamp"
