#!/usr/bin/env bash
# The whole test suite: formatting, vet, staticcheck and every test with the
# race detector. On a fresh Debian machine (as root) it installs what the
# suite needs first. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== %s\n' "$*"; }
die() { printf 'scripts/test.sh: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "Go is not installed (need Go 1.26 or newer on PATH)"
export PATH="$(go env GOPATH)/bin:$PATH"

STATICCHECK_VERSION=v0.8.2
if ! command -v staticcheck >/dev/null; then
  say "installing staticcheck $STATICCHECK_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" || die "could not install staticcheck from the Go module proxy"
fi

# apt_install installs Debian packages, running apt-get update once per run.
apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then
    apt-get update -qq || die "apt-get update failed"
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

# need_pkg installs a Debian package when the check command fails.
need_pkg() { # need_pkg PACKAGE WHY CHECK...
  local pkg=$1 why=$2; shift 2
  "$@" >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || die "the Debian package $pkg is not installed and we are not root: install it ($why), or run this script as root"
  say "installing $pkg ($why)"
  apt_install "$pkg"
}

# Servers and clients the tests start themselves, on loopback; under CI=true
# the tests fail rather than skip without them.
need_pkg redis-server "the ratelimit/redis tests start a redis-server" command -v redis-server
need_pkg etcd-server "the registry/etcd tests start an etcd" test -x /usr/bin/etcd
need_pkg python3-consul "registryd's conformance test runs python-consul" /usr/bin/python3 -c 'import consul'
need_pkg nodejs "registryd's conformance test runs node-consul" command -v node
need_pkg npm "installs node-consul for registryd's conformance test" command -v npm
need_pkg strace "proxy/tcpproxy's test that bytes move with splice(2) runs strace" command -v strace
need_pkg zsh "the CLI's completion test checks the zsh script" command -v zsh
need_pkg fish "the CLI's completion test runs the fish script" command -v fish
need_pkg systemd "deploy's test runs systemd-analyze verify on the unit" command -v systemd-analyze
need_pkg file "deploy's test checks that the binary is static" command -v file
need_pkg chromium "the dashboard's browser test drives headless Chromium" command -v chromium
need_pkg pebble "the ACME tests (proxy/acme, cmd/switchboard/internal/plane) start pebble, Let's Encrypt's test CA" command -v pebble

# node-consul, pinned by its package-lock.json.
nodeclient=registryd/testdata/nodeclient
if [ -f "$nodeclient/package-lock.json" ] && [ ! -d "$nodeclient/node_modules" ]; then
  say "npm ci ($nodeclient)"
  npm ci --prefix "$nodeclient" --no-audit --no-fund >/dev/null || die "npm ci in $nodeclient failed"
fi

say "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bench/out/*'))
[ -z "$unformatted" ] || die "gofmt would change: $unformatted"

say "go vet"
go vet ./...

say "staticcheck"
staticcheck ./...

# The library and the binary build beyond Linux (the event-loop engine and
# splice are Linux's; elsewhere the portable paths serve): keep it so.
say "go build for darwin and windows"
GOOS=darwin go build ./... || die "go build ./... fails for darwin"
GOOS=windows go build ./... || die "go build ./... fails for windows"

say "go test -race"
go test -race -count=1 -timeout 14m ./...

# HTTP and TCP listeners run on the event-loop engine by default on Linux
# (engine: auto); the proxy's tests and the TCP proxy's run once more on
# the goroutine engine, which serves TLS listeners, SNI and PROXY-reading
# TCP listeners, other systems and engine: goroutine.
say "go test -race, the proxy's tests on the goroutine engine"
SWITCHBOARD_TEST_ENGINE=goroutine go test -race -count=1 -timeout 10m ./cmd/switchboard/internal/plane ./proxy/tcpproxy
