#!/bin/bash
# Build kvrec and the kvdump CLI (./kvdump) in the current directory.
set -euo pipefail
go build ./...
go build -o kvdump ./cmd/kvdump
