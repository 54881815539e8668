"""git as the runtime runs it: no configuration file of anyone else's can make it run a program.

Every git command of the runtime (capture, the hidden tests' `git apply`,
applying the agent's patch for grading) goes through `argv()` and `env()`:
no system or global configuration, a private HOME, no replace refs, and on
the command line, which wins over every configuration file, an override for
each setting through which a repository can make git run a program or reach
a remote. Filter and diff drivers are defined only in configuration, so a
repository whose configuration is root's (capture's) or absent has none;
textconv and external diffs are also off per command.
"""

from __future__ import annotations

from ssebench.runtime.process import ROOT_PATH

GIT = "/usr/bin/git"
NOTHING = "/bin/false"

# Settings whose value is a program git may run, or which lead git to run one.
OVERRIDES: dict[str, str] = {
    "core.fsmonitor": "false",
    "core.hooksPath": "/dev/null",
    "core.sshCommand": NOTHING,
    "core.gitProxy": NOTHING,
    "core.pager": "cat",
    "core.editor": NOTHING,
    "sequence.editor": NOTHING,
    "core.askPass": NOTHING,
    "core.alternateRefsCommand": NOTHING,
    "core.attributesFile": "/dev/null",
    "core.excludesFile": "/dev/null",
    "core.untrackedCache": "false",
    "core.splitIndex": "false",
    "diff.external": "",
    "diff.ignoreSubmodules": "all",
    "gpg.program": NOTHING,
    "gpg.ssh.program": NOTHING,
    "gpg.x509.program": NOTHING,
    "log.showSignature": "false",
    "credential.helper": "",
    "protocol.allow": "never",
    "protocol.file.allow": "never",
    "protocol.ext.allow": "never",
    "gc.auto": "0",
    "maintenance.auto": "false",
    "submodule.recurse": "false",
    "fetch.recurseSubmodules": "false",
    "status.submoduleSummary": "false",
    "safe.directory": "*",
    "core.quotePath": "false",
    "core.autocrlf": "false",
    "core.safecrlf": "false",
    "core.symlinks": "true",
    "core.fileMode": "true",
    "core.compression": "1",
}


def argv(*args: str) -> list[str]:
    """A git command line with every program-running setting overridden."""
    line = [GIT, "--no-pager"]
    for key, value in OVERRIDES.items():
        line += ["-c", f"{key}={value}"]
    return [*line, *args]


def env(home: str, **extra: str) -> dict[str, str]:
    """A cleared environment for git: nothing of the caller's, no configuration file but the repository's."""
    base = {
        "PATH": ROOT_PATH,
        "HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_ALLOW_PROTOCOL": "none",
        "GIT_NO_LAZY_FETCH": "1",
        "LC_ALL": "C",
    }
    base.update(extra)
    return base
