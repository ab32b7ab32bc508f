#!/usr/bin/env bash
# Builds switchboard's installable tree into OUT (default ./out):
#   OUT/usr/local/bin/switchboard       static binary (CGO_ENABLED=0)
#   OUT/etc/switchboard/switchboard.yaml
#   OUT/var/lib/switchboard/            the registry's data directory
# and checks the result: the binary runs and accepts the configuration.
# The Dockerfile's build stage runs exactly this script, and the test suite
# (deploy/deploy_test.go) runs it too, so the image's steps are tested.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out}
mkdir -p "$out/usr/local/bin" "$out/etc/switchboard" "$out/var/lib/switchboard"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/usr/local/bin/switchboard" ./cmd/switchboard
install -m 0644 deploy/switchboard.yaml "$out/etc/switchboard/switchboard.yaml"
"$out/usr/local/bin/switchboard" version
"$out/usr/local/bin/switchboard" validate --config "$out/etc/switchboard/switchboard.yaml"
