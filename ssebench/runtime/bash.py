"""The daemon's bash tool: one persistent shell as model, in the source tree.

Improvements on a plain "write to the shell's stdin and read until a prompt":

- each command runs with stdin from /dev/null, so `cat` or `read` cannot eat
  the shell's own command stream;
- completion is a random marker written after the command on both output
  streams, so output without a final newline cannot hang the call;
- a per-call timeout, after which the shell is replaced by a fresh one (a
  busy loop in the shell itself cannot be interrupted any other way);
- output is capped while it is read, keeping the tail;
- `exit` (or a crash) replaces the shell on the next call instead of
  disabling the tool;
- once closed (the agent phase is over), it starts no shell again: a call
  that waited for its turn behind another is refused when it gets it.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from sse.helper import ScriptResult

from ssebench.runtime.process import User, confined, kill_group

TIMED_OUT = 124


@dataclass
class _Tail:
    """The last `cap` bytes seen, and how many were dropped."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.cap * 2:
            cut = len(self.data) - self.cap
            self.dropped += cut
            del self.data[:cut]

    def text(self) -> str:
        if len(self.data) > self.cap:
            self.dropped += len(self.data) - self.cap
            del self.data[: len(self.data) - self.cap]
        body = self.data.decode("utf-8", errors="replace")
        if self.dropped:
            return f"[ssebench: output capped: {self.dropped} bytes dropped, the last {self.cap} bytes follow]\n{body}"
        return body


class ToolClosed(Exception):
    """The shell is closed for good: the agent phase is over."""


class BashTool:
    """A persistent shell; `run` executes one command at a time."""

    def __init__(
        self, user: User, cwd: Path, env: dict[str, str], timeout: float, output_cap: int, file_size: int | None = None
    ) -> None:
        self.user = user
        self.cwd = cwd
        self.env = env
        self.timeout = timeout
        self.output_cap = output_cap
        self.file_size = file_size
        self.closed = False
        self._shell: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def _start(self) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *confined(["bash", "--noprofile", "--norc"], self.file_size),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
            **self.user.popen_kwargs(),
        )

    async def close(self) -> None:
        """Kill the shell and refuse every later call, queued ones included."""
        self.closed = True
        shell, self._shell = self._shell, None
        if shell is not None:
            await _end(shell)

    async def _read_until(self, stream: asyncio.StreamReader, marker: bytes, tail: _Tail) -> int | None:
        """Copy the stream into `tail` until `marker` and its status; None at EOF."""
        pending = b""
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                tail.add(pending)
                return None
            pending += chunk
            at = pending.find(marker)
            if at >= 0:
                tail.add(pending[:at])
                rest = pending[at + len(marker) :]
                while b"\n" not in rest:
                    more = await stream.read(64)
                    if not more:
                        break
                    rest += more
                status = rest.split(b"\n", 1)[0].strip()
                return int(status) if status.lstrip(b"-").isdigit() else None
            # Keep enough unflushed to find a marker split across reads.
            keep = len(marker) - 1
            tail.add(pending[:-keep] if keep and len(pending) > keep else b"")
            pending = pending[-keep:] if keep and len(pending) > keep else pending

    async def run(self, command: str, timeout: float | None = None) -> ScriptResult:
        """Run one command in the shell; cd and export persist to the next call."""
        async with self._lock:
            if self.closed:
                raise ToolClosed("the agent phase is over: the shell is closed")
            if self._shell is None or self._shell.returncode is not None:
                self._shell = await self._start()
            shell = self._shell
            assert shell.stdin is not None and shell.stdout is not None and shell.stderr is not None
            nonce = secrets.token_hex(16)
            marker = f"__SSE_DONE_{nonce}__".encode()
            # The command is read from a here-document (by the shell's own
            # `read`: no process is started for it) and run by `eval`, never
            # from the shell's stdin at run time; its own stdin is /dev/null.
            # The variable's name is new each call (nothing the agent set on
            # an earlier one applies) and the document ends in a line of its
            # own: a document the shell could not make whole (no room for its
            # temporary file) runs nothing. `|| true` keeps a shell under
            # `set -e` alive at the `read`'s end-of-input status.
            var, end = f"__sse_cmd_{nonce}", f"__SSE_END_{nonce}__"
            script = (
                f"IFS= read -r -d '' {var} <<'__SSE_CMD_{nonce}__' || true\n{command}\n{end}\n__SSE_CMD_{nonce}__\n"
                f"case ${{{var}-}} in *$'\\n{end}\\n') eval \"${{{var}%{end}$'\\n'}}\" </dev/null;; "
                f"*) printf '[ssebench: the shell could not read the command whole; nothing ran]\\n' >&2; "
                f"(exit 126);; esac\n"
                f"__sse_status=$?; unset {var}; printf '\\n{marker.decode()}%s\\n' \"$__sse_status\"; "
                f"printf '\\n{marker.decode()}%s\\n' \"$__sse_status\" >&2\n"
            )
            out, err = _Tail(self.output_cap), _Tail(self.output_cap)
            try:
                shell.stdin.write(script.encode())
                await shell.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass
            limit = timeout if timeout is not None else self.timeout
            try:
                code_out, _ = await asyncio.wait_for(
                    asyncio.gather(
                        self._read_until(shell.stdout, marker, out), self._read_until(shell.stderr, marker, err)
                    ),
                    timeout=limit,
                )
            except TimeoutError:
                await self._replace(shell)
                note = (
                    f"\n[ssebench: the command did not finish within {limit:.0f} s and was killed; "
                    "the shell was restarted, so cd and export from earlier calls are reset]\n"
                )
                return ScriptResult(code=TIMED_OUT, stdout=_strip(out.text()), stderr=err.text() + note)
            if code_out is None:  # the shell ended: `exit`, or it was killed
                status = await shell.wait()
                await self._replace(shell)
                note = f"\n[ssebench: the shell exited with status {status}; the next command starts a fresh shell]\n"
                return ScriptResult(code=status, stdout=out.text(), stderr=err.text() + note)
            return ScriptResult(code=code_out, stdout=_strip(out.text()), stderr=_strip(err.text()))

    async def _replace(self, shell: asyncio.subprocess.Process) -> None:
        # Only the shell's own process group: model's other processes are the
        # agent's, and the agent keeps running.
        await _end(shell)
        if self._shell is shell:
            self._shell = None


async def _end(shell: asyncio.subprocess.Process) -> None:
    """Kill the shell's process group and let go of its pipes.

    asyncio's wait() also waits for the pipes to close, and a process the
    command left behind in another session holds them open: waiting for it
    would block the tool (and the end of the agent phase) for good.
    """
    kill_group(shell.pid)
    try:
        await asyncio.wait_for(shell.wait(), 2)
    except TimeoutError:
        transport = getattr(shell, "_transport", None)
        if transport is not None:
            transport.close()  # closes our ends of the pipes; the shell itself is dead


def _strip(text: str) -> str:
    """Drop the newline the marker line put before itself."""
    return text[:-1] if text.endswith("\n") else text
