#!/bin/bash
# run.sh POC: log the untrusted text of the PoC through a fmt subscriber with
# the log-check driver built by build.sh. Exit 0 when the log output holds no
# terminal control character; non-zero when the text's escape sequences reach
# the output unescaped (status 1) or the driver fails.
set -uo pipefail
poc=${1:?usage: run.sh POC_FILE}
rc=0
target/debug/log-check "$poc" || rc=$?
case $rc in
  0) echo "run.sh: no terminal control character reached the log"; exit 0 ;;
  *) echo "run.sh: terminal control characters reached the log, or the driver failed (exit $rc)" >&2; exit "$rc" ;;
esac
