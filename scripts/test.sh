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

# The global rate-limit tests (ratelimit/redis) start their own redis-server
# on a free loopback port; under CI=true they fail rather than skip without it.
if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    say "installing redis-server"
    apt_install redis-server
  else
    die "redis-server is not installed and we are not root: install the Debian package redis-server (the ratelimit/redis tests need it), or run this script as root"
  fi
fi

say "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bench/out/*'))
[ -z "$unformatted" ] || die "gofmt would change: $unformatted"

say "go vet"
go vet ./...

say "staticcheck"
staticcheck ./...

say "go test -race"
go test -race -count=1 -timeout 14m ./...
