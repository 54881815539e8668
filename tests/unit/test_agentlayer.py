"""Which agent Dockerfiles are made in one commit, and the archive of their files."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ssebench.agentlayer import archive_of, simple_dockerfile
from ssebench.settings import get_settings

HEAD = "ARG SSEBENCH_TOOL\nFROM ${SSEBENCH_TOOL}\n"


def _agent(tmp_path: Path, body: str) -> Path:
    tmp_path.mkdir(parents=True)
    (tmp_path / "agent.py").write_text("print('hi')\n")
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
    "COPY --chown=1000 agent.py /opt/agent/agent.py\n",  # a flag
    "COPY *.py /opt/agent/\n",  # a wildcard
    "COPY ../outside /opt/agent/\n",  # outside the context
    "COPY missing.py /opt/agent/\n",
    "COPY agent.py relative/agent.py\n",  # a destination that depends on the image's WORKDIR
    "COPY agent.py lib /opt/agent\n",  # several sources need a folder ending in /
    "COPY lib /opt/agent/lib\n",  # a folder's contents into a path not said to be a folder
    'ENV PATH=$PATH:/opt/agent\n',  # substitution
    'COPY ["agent.py", "/opt/agent/"]\n',  # the JSON form
    "ADD agent.py /opt/agent/\n",
    "FROM debian\n",  # a second stage
])
def test_anything_else_is_built_by_docker(tmp_path: Path, body: str) -> None:
    folder = _agent(tmp_path / "a", body)
    assert simple_dockerfile(folder / "Dockerfile", folder) is None


def test_a_base_other_than_the_tool_image_is_built_by_docker(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "")
    (folder / "Dockerfile").write_text("FROM debian\nCOPY agent.py /opt/agent/agent.py\n")
    assert simple_dockerfile(folder / "Dockerfile", folder) is None
    (folder / "Dockerfile").write_text(HEAD + "COPY agent.py /opt/agent/agent.py\n")  # control: the tool image
    assert simple_dockerfile(folder / "Dockerfile", folder) is not None


def test_copies_become_one_archive_of_roots_files_with_their_modes(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "# a comment\n\nCOPY agent.py /opt/agent/\nCOPY lib /opt/agent/lib/\n"
                                     "ENV A=1 \\\n    B=2\nCMD [\"python\", \"/opt/agent/agent.py\"]\n")
    simple = simple_dockerfile(folder / "Dockerfile", folder)
    assert simple is not None and simple.changes == ("ENV A=1 B=2", 'CMD ["python", "/opt/agent/agent.py"]')
    with tarfile.open(fileobj=io.BytesIO(archive_of(simple))) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert sorted(members) == ["opt/agent/agent.py", "opt/agent/lib/tool.sh"]
        assert all(m.uid == 0 and m.gid == 0 and m.uname == "root" for m in members.values())
        assert members["opt/agent/lib/tool.sh"].mode & 0o777 == 0o755
        extracted = archive.extractfile("opt/agent/agent.py")
        assert extracted is not None and extracted.read() == b"print('hi')\n"
