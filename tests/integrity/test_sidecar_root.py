"""Sidecar mode, with an agent that became root in its container: the grade is the task container's.

The README recommends sidecar mode for agents that might escalate to root in
their container. Before, the evaluator (root) and the results the host read
were in the agent's container: root there rewrote result.json and the host
read `passed`. Grading now lives where the agent never runs (the task
container): the daemon, the MCP server, the evaluator, the admin socket and
the results. `docker exec` as root in the agent container stands in for the
escalation: it ends whatever of the harness runs there as root, forges a
passing result.json wherever one could be read, and keeps a mark in the agent's archive (shared, and brought home) that shows it
ran throughout (the positive control).
"""

from __future__ import annotations

import pytest

from tests.integrity.harness import Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

FORGE = r"""cat > /root/forge.sh <<'EOF'
passed='{"patch_result": {"status": "passed", "build_success": true, "pov_passed": 1, "pov_total": 1, "func_test_success": true, "intent_test_success": true, "error_msg": null, "error_log": null}, "runtime_result": {}}'
evaluator=evaluator mcp=mcp_server
mkdir -p /var/lib/ssebench/results
while :; do
  # Whatever of the harness runs here as root is ended (an evaluator, say), and its result forged.
  for proc in /proc/[0-9]*; do  # (the names in variables: this script's own command line must not match)
    if grep -qs -e "ssebench.runtime.$evaluator" -e "ssebench.runtime.$mcp" "$proc/cmdline"; then
      kill -9 "${proc#/proc/}" 2>/dev/null
    fi
  done
  for dir in /var/lib/ssebench/results /tmp/sse-archive /run/sse-agent /run/ssebench; do
    [ -d "$dir" ] || continue
    if ! grep -qs '"passed"' "$dir/result.json"; then
      printf '%s' "$passed" > "$dir/.forged" && mv -f "$dir/.forged" "$dir/result.json"
    fi
  done
  date +%s.%N >> /tmp/sse-archive/forger-was-here
  sleep 0.02
done
EOF
nohup sh /root/forge.sh >/dev/null 2>&1 &
sleep 0.5; test -s /tmp/sse-archive/forger-was-here
"""


@pytest.mark.parametrize("fresh_launcher", ["sidecar"], indirect=True)
def test_root_in_the_agent_container_cannot_touch_the_grade(fresh_launcher: Launcher) -> None:
    run = fresh_launcher.start("c-demo", level=2)
    run.sh("root", FORGE)
    # Nothing that grades is here for root to reach: no admin socket, no results, no task.
    absent = run.sh(
        "root",
        "for p in /run/ssebench/admin.sock /ssebench /var/lib/ssebench-runner; do [ -e $p ] && echo $p; done; true",
    )
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["pov_passed"] == 0, grade  # the dummy's grade, as without root
    # The positive control: the forger ran as root until the agent's container ended, and wrote its result.json
    # wherever it could (the shared archive among them, which comes home and is not the grade).
    marks = (run.run_dir / "archive" / "forger-was-here").read_text().split()
    assert len(marks) >= 5, marks
    assert '"passed"' in (run.run_dir / "archive" / "result.json").read_text()
    assert '"failed"' in (run.run_dir / "result.json").read_text()
    assert absent.split() == [], absent
