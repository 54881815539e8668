#!/bin/bash
# run.sh POC: replay the PoC's steps on BytesMut handles with the
# reserve-check driver built by build.sh (integer arithmetic wrapping, as in
# a release build). Exit 0 when every reserve either made room for what was
# asked or panicked; non-zero when a reserve returned and left the handle
# claiming a capacity its storage does not have (status 1), or the driver
# failed.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
rc=0
target/debug/reserve-check "$poc" || rc=$?
case $rc in
  0) echo "run.sh: reserve kept its promise or refused the request"; exit 0 ;;
  *) echo "run.sh: reserve left a capacity the storage does not have, or the driver failed (exit $rc)" >&2; exit "$rc" ;;
esac
