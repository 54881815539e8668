"""Which agent Dockerfiles are made in one commit, and the archive of their files."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from ssebench.agentlayer import archive_of, simple_dockerfile
from ssebench.settings import get_settings

HEAD = "ARG SSEBENCH_TOOL\nFROM ${SSEBENCH_TOOL}\n"


def _agent(tmp_path: Path, body: str) -> Path:
    tmp_path.mkdir(parents=True)
    (tmp_path / "agent.py").write_text("print('hi')\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link.py").symlink_to("agent.py")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tool.sh").write_text("#!/bin/sh\n")
    (tmp_path / "lib" / "tool.sh").chmod(0o755)
    (tmp_path / "Dockerfile").write_text(HEAD + body)
    return tmp_path


@pytest.mark.parametrize("name", ["dummy", "reference", "chat-agent"])
def test_the_shipped_agents_are_made_in_one_commit(name: str) -> None:
    folder = get_settings().agents_dir / name
    simple = simple_dockerfile(folder / "Dockerfile", folder)
    assert simple is not None
    assert [(c.sources, c.dest) for c in simple.copies] == [(((folder / "agent.py").resolve(),),
                                                              "/opt/agent/agent.py")]
    assert simple.changes == ('CMD ["/opt/ssebench/venv/bin/python", "/opt/agent/agent.py"]',)


@pytest.mark.parametrize("body", [
    "RUN true\n",  # anything that runs
    "WORKDIR /opt/agent\n",  # a folder the build would make
    "ENV PYTHONPATH=/opt/agent\n",  # configuration beyond the command: what root's processes see
    "ENTRYPOINT [\"/opt/agent/agent.py\"]\n",  # what runs as root
    "USER model\n",
    "LABEL ssebench.hash=x\n",  # the harness's labels are its own
    "COPY agent.py /usr/local/bin/agent\n",  # anywhere but /opt/agent
    "COPY agent.py /opt/agent/../../etc/agent\n",
    "COPY --chown=1000 agent.py /opt/agent/agent.py\n",  # a flag
    "COPY *.py /opt/agent/\n",  # a wildcard
    'COPY "agent.py" /opt/agent/\n',  # quotes
    "COPY ../outside /opt/agent/\n",  # outside the context
    "COPY missing.py /opt/agent/\n",
    "COPY agent.py relative/agent.py\n",  # a destination that depends on the image's WORKDIR
    "COPY agent.py lib /opt/agent\n",  # several sources need a folder ending in /
    "COPY lib /opt/agent/lib\n",  # a folder's contents into a path not said to be a folder
    "COPY empty /opt/agent/empty/\n",  # an empty folder
    "COPY link.py /opt/agent/\n",  # a link as the source
    "COPY agent.py /opt/agent/x\nCOPY lib /opt/agent/x/\n",  # a file where another copy makes a folder
    "CMD [\"python\", \\\n  \"/opt/agent/agent.py\"]\n",  # a continued line
    'CMD ["$HOME/agent.py"]\n',  # substitution
    'CMD ["a"]\nCMD ["b"]\n',
    'COPY ["agent.py", "/opt/agent/"]\n',  # the JSON form
    "ADD agent.py /opt/agent/\n",
    "FROM debian\n",  # a second stage
])
def test_anything_else_is_built_by_docker(tmp_path: Path, body: str) -> None:
    folder = _agent(tmp_path / "a", body)
    assert simple_dockerfile(folder / "Dockerfile", folder) is None


@pytest.mark.parametrize("extra", ["dockerignore", "escape", "fifo"])
def test_what_changes_how_docker_reads_or_copies_is_left_to_docker(tmp_path: Path, extra: str) -> None:
    folder = _agent(tmp_path / "a", "COPY agent.py /opt/agent/\nCOPY lib /opt/agent/lib/\n")
    assert simple_dockerfile(folder / "Dockerfile", folder) is not None  # control
    if extra == "dockerignore":
        (folder / ".dockerignore").write_text("agent.py\n")
    elif extra == "escape":
        (folder / "Dockerfile").write_text("# escape=`\n" + (folder / "Dockerfile").read_text())
    else:
        os.mkfifo(folder / "lib" / "pipe")
    assert simple_dockerfile(folder / "Dockerfile", folder) is None


def test_a_base_other_than_the_tool_image_is_built_by_docker(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "")
    (folder / "Dockerfile").write_text("FROM debian\nCOPY agent.py /opt/agent/agent.py\n")
    assert simple_dockerfile(folder / "Dockerfile", folder) is None
    (folder / "Dockerfile").write_text(HEAD + "COPY agent.py /opt/agent/agent.py\n")  # control: the tool image
    assert simple_dockerfile(folder / "Dockerfile", folder) is not None


def test_copies_become_one_archive_of_roots_files_without_set_id_or_others_write(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "# a comment\n\nCOPY agent.py /opt/agent/\nCOPY lib /opt/agent/lib/\n"
                                     "CMD [\"python\", \"/opt/agent/agent.py\"]\n")
    (folder / "lib" / "tool.sh").chmod(0o4777)
    simple = simple_dockerfile(folder / "Dockerfile", folder)
    assert simple is not None and simple.changes == ('CMD ["python", "/opt/agent/agent.py"]',)
    with tarfile.open(fileobj=io.BytesIO(archive_of(simple))) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert sorted(members) == ["opt/agent/agent.py", "opt/agent/lib/tool.sh"]
        assert all(m.uid == 0 and m.gid == 0 and m.uname == "root" for m in members.values())
        assert members["opt/agent/lib/tool.sh"].mode & 0o7777 == 0o755  # 4777 in the folder
        extracted = archive.extractfile("opt/agent/agent.py")
        assert extracted is not None and extracted.read() == b"print('hi')\n"
