#!/bin/bash
# Build, then run kvrec's unit tests.
set -euo pipefail
/ssebench/scripts/build.sh
go test -count=1 ./...
