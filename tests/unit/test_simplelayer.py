"""Which Dockerfiles are assembled without Docker's builder, and the layer and image made of them."""

from __future__ import annotations

import io
import json
import os
import tarfile
from hashlib import sha256
from pathlib import Path, PurePosixPath

import pytest

from ssebench.dataset import load_tasks
from ssebench.settings import PROJECT_ROOT, get_settings
from ssebench.simplelayer import (
    AGENT,
    CASE,
    Layout,
    LeftToDocker,
    Probe,
    image_archive,
    layer_archive,
    layout,
    parent_entries,
    simple_dockerfile,
)

HEAD = "ARG SSEBENCH_TOOL\nFROM ${SSEBENCH_TOOL}\n"
CASE_HEAD = "ARG SSEBENCH_REGISTRY=ghcr.io/x/ssebench\nFROM ${SSEBENCH_REGISTRY}/base-generic-c:1.0.0\n"


def _agent(tmp_path: Path, body: str, head: str = HEAD) -> Path:
    tmp_path.mkdir(parents=True)
    (tmp_path / "agent.py").write_text("print('hi')\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link.py").symlink_to("agent.py")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "tool.sh").write_text("#!/bin/sh\n")
    (tmp_path / "lib" / "tool.sh").chmod(0o755)
    (tmp_path / "Dockerfile").write_text(head + body)
    return tmp_path


@pytest.mark.parametrize("name", ["dummy", "reference", "chat-agent"])
def test_the_shipped_agents_are_assembled(name: str) -> None:
    folder = get_settings().agents_dir / name
    simple = simple_dockerfile(folder / "Dockerfile", folder, AGENT)
    assert simple is not None
    assert [(c.sources, c.dest) for c in simple.copies] == [(((folder / "agent.py").resolve(),), "/opt/agent/agent.py")]
    assert simple.cmd == ("/opt/ssebench/venv/bin/python", "/opt/agent/agent.py")
    assert simple.parent({"SSEBENCH_TOOL": "ssebench/tool/demo/c-demo:0.1.0"}) == "ssebench/tool/demo/c-demo:0.1.0"


def test_every_demo_task_is_assembled_and_no_pilot_task_is() -> None:
    """The demo's Dockerfiles only copy; the pilot's run Debian's tools first, which only Docker does."""
    for task in load_tasks(PROJECT_ROOT / "datasets" / "demo"):
        simple = simple_dockerfile(task.dockerfile, task.path, CASE)
        assert simple is not None, task.id
        assert simple.parent({"SSEBENCH_REGISTRY": "ssebench"}) == "ssebench/base-generic-" + task.language + ":1.0.0"
        assert simple.workdirs and simple.workdirs[-1].startswith("/src/")
    for task in load_tasks(PROJECT_ROOT / "datasets" / "pilot"):
        assert simple_dockerfile(task.dockerfile, task.path, CASE) is None, task.id


@pytest.mark.parametrize(
    "body",
    [
        "RUN true\n",  # anything that runs
        "WORKDIR /opt/agent\n",  # not the agent form's to configure
        "ENV PYTHONPATH=/opt/agent\n",  # configuration beyond the command: what root's processes see
        'ENTRYPOINT ["/opt/agent/agent.py"]\n',  # what runs as root
        "USER model\n",
        "LABEL ssebench.hash=x\n",  # the harness's labels are its own
        "COPY agent.py /usr/local/bin/agent\n",  # anywhere but /opt/agent
        "COPY agent.py /opt/agent\n",  # /opt/agent itself as a file
        "COPY agent.py /opt/agent/../../etc/agent\n",
        "COPY --chown=1000 agent.py /opt/agent/agent.py\n",  # a flag
        "COPY *.py /opt/agent/\n",  # a wildcard
        'COPY "agent.py" /opt/agent/\n',  # quotes
        "COPY ../outside /opt/agent/\n",  # outside the context
        "COPY missing.py /opt/agent/\n",
        "COPY agent.py relative/agent.py\n",  # a destination that depends on the image's WORKDIR
        "COPY agent.py lib /opt/agent\n",  # several sources need a folder ending in /
        "COPY empty /opt/agent/empty/\n",  # an empty folder
        "COPY link.py /opt/agent/\n",  # a link as the source
        'CMD ["python", \\\n  "/opt/agent/agent.py"]\n',  # a continued line
        'CMD ["$HOME/agent.py"]\n',  # substitution
        "CMD python /opt/agent/agent.py\n",  # the shell form: the image's shell
        'CMD ["a"]\nCMD ["b"]\n',
        'COPY ["agent.py", "/opt/agent/"]\n',  # the JSON form
        "ADD agent.py /opt/agent/\n",
        "FROM debian\n",  # a second stage
    ],
)
def test_anything_else_is_built_by_docker(tmp_path: Path, body: str) -> None:
    folder = _agent(tmp_path / "a", body)
    assert simple_dockerfile(folder / "Dockerfile", folder, AGENT) is None


@pytest.mark.parametrize(
    "body",
    [
        "RUN true\n",
        "ENV A=b\n",
        'CMD ["true"]\n',  # not the case form's to configure
        "WORKDIR src\n",  # relative: depends on the WORKDIR before
        "WORKDIR /src/$X\n",
        "COPY agent.py /\n",  # the root itself
        "COPY agent.py src/agent.py\n",
    ],
)
def test_a_task_dockerfile_that_does_more_than_copy_is_built_by_docker(tmp_path: Path, body: str) -> None:
    folder = _agent(tmp_path / "a", "COPY lib /src/lib\nWORKDIR /src/lib\n", CASE_HEAD)
    assert simple_dockerfile(folder / "Dockerfile", folder, CASE) is not None  # control
    (folder / "Dockerfile").write_text(CASE_HEAD + body)
    assert simple_dockerfile(folder / "Dockerfile", folder, CASE) is None


@pytest.mark.parametrize(
    "head",
    [
        "ARG SSEBENCH_TOOL\nFROM ${SSEBENCH_TOOL}\n",  # the agent's base is not a task's
        "ARG SSEBENCH_REGISTRY\nFROM ${SSEBENCH_REGISTRY}/base-generic-c:1.0.0 AS build\n",  # a named stage
        "ARG SSEBENCH_REGISTRY=$X\nFROM ${SSEBENCH_REGISTRY}/base-generic-c:1.0.0\n",  # a default substituted
        "ARG OTHER\nFROM ${OTHER}/base-generic-c:1.0.0\n",
        "ARG SSEBENCH_REGISTRY\nFROM debian:bookworm\n",
    ],
)
def test_a_task_on_another_base_is_built_by_docker(tmp_path: Path, head: str) -> None:
    folder = _agent(tmp_path / "a", "COPY lib /src/lib\n", head)
    assert simple_dockerfile(folder / "Dockerfile", folder, CASE) is None


@pytest.mark.parametrize("extra", ["dockerignore", "escape", "fifo", "setuid", "setgid-folder", "two-names"])
def test_what_changes_how_docker_reads_or_copies_is_left_to_docker(tmp_path: Path, extra: str) -> None:
    folder = _agent(tmp_path / "a", "COPY agent.py /opt/agent/\nCOPY lib /opt/agent/lib/\n")
    assert simple_dockerfile(folder / "Dockerfile", folder, AGENT) is not None  # control
    if extra == "dockerignore":
        (folder / ".dockerignore").write_text("agent.py\n")
    elif extra == "escape":
        (folder / "Dockerfile").write_text("# escape=`\n" + (folder / "Dockerfile").read_text())
    elif extra == "fifo":
        os.mkfifo(folder / "lib" / "pipe")
    elif extra == "setuid":  # Docker's COPY clears set-id bits as it changes the owner
        (folder / "agent.py").chmod(0o4755)
    elif extra == "setgid-folder":
        (folder / "lib").chmod(0o2755)
    else:  # Docker keeps a file's second name in the same copy as a link
        os.link(folder / "lib" / "tool.sh", folder / "lib" / "other.sh")
    assert simple_dockerfile(folder / "Dockerfile", folder, AGENT) is None


def _layout(folder: Path, form: object = AGENT) -> Layout | str:
    """The layout, or why the layer is left to Docker."""
    simple = simple_dockerfile(folder / "Dockerfile", folder, form)  # type: ignore[arg-type]
    assert simple is not None
    try:
        return layout(simple)
    except LeftToDocker as why:
        return str(why)


def _parent_entries(lay: Layout | str, probe: Probe) -> dict[PurePosixPath, tarfile.TarInfo] | str:
    """The parent's entries, or why the layer is left to Docker."""
    assert isinstance(lay, Layout)
    try:
        return parent_entries(lay, probe)
    except LeftToDocker as why:
        return str(why)


def test_copies_that_disagree_on_what_a_path_is_are_left_to_docker(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "COPY agent.py /opt/agent/x\nCOPY lib /opt/agent/x/\n")
    assert _layout(folder) == "a copy puts a file at opt/agent/x, where a folder of the layer goes"
    (folder / "Dockerfile").write_text(HEAD + "COPY lib /opt/agent/x/\nCOPY agent.py /opt/agent/x/tool.sh/\n")
    assert isinstance(_layout(folder), str)
    (folder / "Dockerfile").write_text(HEAD + "COPY agent.py /opt/agent/x\nCOPY lib/tool.sh /opt/agent/x\n")
    lay = _layout(folder)  # control: a later file replaces an earlier one
    assert isinstance(lay, Layout) and lay.sources[PurePosixPath("opt/agent/x")].name == "tool.sh"


def test_a_folders_contents_go_into_the_destination_and_a_file_into_one_ending_in_slash(tmp_path: Path) -> None:
    folder = _agent(
        tmp_path / "a",
        "COPY lib /src/tree\nCOPY agent.py /ssebench/scripts/\nCOPY agent.py /ssebench/run.py\nWORKDIR /src/work\n",
        CASE_HEAD,
    )
    lay = _layout(folder, CASE)
    assert isinstance(lay, Layout)
    assert sorted(map(str, lay.sources)) == ["src/tree/tool.sh", "ssebench/run.py", "ssebench/scripts/agent.py"]
    assert sorted(map(str, lay.folders)) == ["src", "src/tree", "src/work", "ssebench", "ssebench/scripts"]


def _entry(name: str, kind: bytes, mode: int = 0o755, uid: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, uid, 1000
    return info


def test_folders_the_parent_has_keep_their_owner_and_mode_and_new_ones_are_roots(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "COPY lib /src/tree\nCOPY agent.py /src/tree/deep/\n", CASE_HEAD)
    (folder / "lib").chmod(0o700)
    (folder / "lib" / "tool.sh").chmod(0o775)
    lay = _layout(folder, CASE)
    assert isinstance(lay, Layout)
    asked: list[str] = []

    def probe(path: PurePosixPath) -> tarfile.TarInfo | None:
        asked.append(str(path))
        return _entry("src", tarfile.DIRTYPE, 0o750, 1234) if str(path) == "src" else None

    parents = _parent_entries(lay, probe)
    assert isinstance(parents, dict) and list(map(str, parents)) == ["src"]
    assert asked == ["src", "src/tree"]  # nothing below a folder the parent lacks is asked for
    with tarfile.open(fileobj=io.BytesIO(layer_archive(lay, parents, CASE.mask))) as archive:
        members = {m.name: m for m in archive.getmembers()}
    assert list(members) == ["src", "src/tree", "src/tree/deep", "src/tree/deep/agent.py", "src/tree/tool.sh"]
    assert (members["src"].mode, members["src"].uid) == (0o750, 1234)  # the parent's own
    assert (members["src/tree"].mode, members["src/tree"].uid) == (0o755, 0)  # made, as COPY makes it
    assert members["src/tree/tool.sh"].mode == 0o775 and members["src/tree/tool.sh"].uid == 0  # as COPY writes it


def test_an_agents_files_are_roots_without_write_for_others(tmp_path: Path) -> None:
    folder = _agent(
        tmp_path / "a", 'COPY agent.py /opt/agent/\nCOPY lib /opt/agent/lib/\nCMD ["python", "/opt/agent/agent.py"]\n'
    )
    (folder / "lib" / "tool.sh").chmod(0o777)
    (folder / "lib").chmod(0o777)
    lay = _layout(folder)
    assert isinstance(lay, Layout)
    parents = _parent_entries(lay, lambda p: _entry(str(p), tarfile.DIRTYPE) if str(p) == "opt" else None)
    assert isinstance(parents, dict)
    with tarfile.open(fileobj=io.BytesIO(layer_archive(lay, parents, AGENT.mask))) as archive:
        members = {m.name: m for m in archive.getmembers()}
        extracted = archive.extractfile("opt/agent/agent.py")
        assert extracted is not None and extracted.read() == b"print('hi')\n"
    assert sorted(members) == ["opt", "opt/agent", "opt/agent/agent.py", "opt/agent/lib", "opt/agent/lib/tool.sh"]
    assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    assert members["opt/agent/lib/tool.sh"].mode & 0o7777 == 0o755  # 777 in the folder
    assert members["opt/agent/lib"].mode & 0o7777 == 0o755  # 777 in the folder


@pytest.mark.parametrize(
    "planted, reason",
    [
        (("opt", tarfile.SYMTYPE), "the parent image has a link at /opt"),  # a link on the way
        (("opt/agent", tarfile.REGTYPE), "the parent image has a file at /opt/agent"),
        (("opt/agent/agent.py", tarfile.DIRTYPE), "the parent image has a folder at /opt/agent/agent.py"),
        (("opt/agent/agent.py", tarfile.SYMTYPE), "the parent image has a link at /opt/agent/agent.py"),
        (("opt/agent/lib/tool.sh", tarfile.LNKTYPE), "the parent image has a link at /opt/agent/lib/tool.sh"),
        (("opt/agent/lib", tarfile.DIRTYPE, 0o2775), "the parent image has a set-id folder at /opt/agent/lib"),
    ],
)
def test_a_parent_that_holds_a_link_or_another_kind_of_file_on_the_way_is_left_to_docker(
    tmp_path: Path, planted: tuple[str, bytes] | tuple[str, bytes, int], reason: str
) -> None:
    folder = _agent(tmp_path / "a", "COPY agent.py /opt/agent/\nCOPY lib /opt/agent/lib/\n")
    lay = _layout(folder)
    assert isinstance(lay, Layout)
    name, kind, *mode = planted

    def probe(path: PurePosixPath) -> tarfile.TarInfo | None:
        if str(path) == name:
            return _entry(name, kind, *mode)
        if name.startswith(str(path) + "/"):
            return _entry(str(path), tarfile.DIRTYPE)
        return None

    assert _parent_entries(lay, probe) == reason
    assert isinstance(
        _parent_entries(
            lay,
            lambda p: (
                _entry(str(p), tarfile.DIRTYPE)
                if str(p)
                in {  # control
                    "opt",
                    "opt/agent",
                    "opt/agent/lib",
                }
                else None
            ),
        ),
        dict,
    )


def test_the_image_is_the_parents_with_one_more_layer_and_the_dockerfiles_configuration(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "COPY lib /src/lib\nWORKDIR /src/lib\n", CASE_HEAD)
    simple = simple_dockerfile(folder / "Dockerfile", folder, CASE)
    assert simple is not None
    parent = {
        "Id": "sha256:" + "1" * 64,
        "Architecture": "amd64",
        "Os": "linux",
        "RootFS": {"Layers": ["sha256:" + "a" * 64, "sha256:" + "b" * 64]},
        "Config": {
            "Env": ["PATH=/usr/bin"],
            "Cmd": ["bash"],
            "WorkingDir": "/",
            "Labels": {"keep": "1"},
            "OnBuild": None,
        },
    }
    history = [
        {"Created": 1, "CreatedBy": "import", "Size": 100},
        {"Created": 2, "CreatedBy": "RUN x", "Size": 5},
        {"Created": 3, "CreatedBy": "ENV", "Size": 0},
    ]
    layer = b"layer bytes"
    with tarfile.open(
        fileobj=io.BytesIO(
            image_archive("ssebench/case/x/y:latest", parent, history, layer, simple, {"ssebench.layer": "case"})
        )
    ) as archive:
        manifest = json.loads(archive.extractfile("manifest.json").read())  # type: ignore[union-attr]
        [entry] = manifest
        raw = archive.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
        assert archive.extractfile("new/layer.tar").read() == layer  # type: ignore[union-attr]
        assert [m.name for m in archive.getmembers()] == [entry["Config"], "new/layer.tar", "manifest.json"]
    assert entry["Config"] == sha256(raw).hexdigest() + ".json" and entry["RepoTags"] == ["ssebench/case/x/y:latest"]
    assert entry["Layers"][-1] == "new/layer.tar" and len(entry["Layers"]) == 3
    config = json.loads(raw)
    assert config["rootfs"]["diff_ids"] == parent["RootFS"]["Layers"] + ["sha256:" + sha256(layer).hexdigest()]  # type: ignore[index]
    assert config["config"]["WorkingDir"] == "/src/lib" and config["config"]["Cmd"] == ["bash"]
    assert config["config"]["Labels"] == {"keep": "1", "ssebench.layer": "case"}
    assert config["config"]["Image"] == parent["Id"]
    made = [not step.get("empty_layer") for step in config["history"]]
    assert made == [True, True, False, True] and sum(made) == len(config["rootfs"]["diff_ids"])


@pytest.mark.parametrize(
    "body",
    [
        "WORKDIR /src/app\nCOPY agent.py /src/app\n",  # Docker puts the file into the folder WORKDIR made
        "COPY agent.py /src/app\nWORKDIR /src/app\n",  # Docker fails: WORKDIR on a file
        "COPY tree /src/t\nCOPY agent.py /src/t/link\n",  # a file written where a copied link is
        "COPY tree /src/t\nCOPY agent.py /src/t/link/\n",  # into a copied link
    ],
)
def test_a_workdir_or_a_link_that_a_copy_meets_is_left_to_docker(tmp_path: Path, body: str) -> None:
    folder = _agent(tmp_path / "a", body, CASE_HEAD)
    (folder / "tree").mkdir()
    (folder / "tree" / "sub").mkdir()
    (folder / "tree" / "sub" / "x").write_text("x\n")
    (folder / "tree" / "link").symlink_to("sub")
    lay = _layout(folder, CASE)
    assert isinstance(lay, str), lay
    (folder / "Dockerfile").write_text(CASE_HEAD + "COPY tree /src/t\nWORKDIR /src/app\nCOPY agent.py /src/app/\n")
    assert isinstance(_layout(folder, CASE), Layout)  # control


def test_a_name_the_engine_reads_as_a_deletion_is_left_to_docker(tmp_path: Path) -> None:
    folder = _agent(tmp_path / "a", "COPY lib /opt/agent/lib/\n")
    assert simple_dockerfile(folder / "Dockerfile", folder, AGENT) is not None  # control
    (folder / "lib" / ".wh.agent.py").write_text("")
    assert simple_dockerfile(folder / "Dockerfile", folder, AGENT) is None


def test_a_parent_folders_entry_keeps_the_layers_name_whatever_headers_the_engine_gave_it(tmp_path: Path) -> None:
    """The engine names an archived folder by its base name, in a PAX header when it is long or not ASCII."""
    folder = _agent(tmp_path / "a", "COPY agent.py /srv/\u00fc/\n", CASE_HEAD)
    lay = _layout(folder, CASE)
    assert isinstance(lay, Layout)

    def probe(path: PurePosixPath) -> tarfile.TarInfo | None:
        if str(path) in ("srv", "srv/\u00fc"):
            entry = _entry(path.name, tarfile.DIRTYPE, 0o700, 1234)
            entry.pax_headers = {"path": path.name}
            return entry
        return None

    parents = _parent_entries(lay, probe)
    assert isinstance(parents, dict)
    with tarfile.open(fileobj=io.BytesIO(layer_archive(lay, parents, CASE.mask))) as archive:
        members = {m.name: (m.mode, m.uid) for m in archive.getmembers()}
    assert members == {"srv": (0o700, 1234), "srv/\u00fc": (0o700, 1234), "srv/\u00fc/agent.py": (0o644, 0)}


def test_the_digest_of_an_assembled_layer_follows_the_code_that_assembles_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ssebench import image, simplelayer

    task = next(t for t in load_tasks(PROJECT_ROOT / "datasets" / "demo") if t.id == "c-demo")
    pilot = load_tasks(PROJECT_ROOT / "datasets" / "pilot")[0]
    built = _agent(tmp_path / "a", "COPY lib /src/lib\nRUN true\n", CASE_HEAD)
    before = image.assembled_how("case", task.dockerfile, task.path)
    assert before is not None and before.startswith("assembled ")
    assert (image.assembled_how("case", pilot.dockerfile, pilot.path) or "").startswith("tail assembled ")
    assert image.assembled_how("case", built / "Dockerfile", built) is None  # Docker's build: the digest as before
    monkeypatch.setattr(simplelayer, "VERSION", "other")
    assert image.assembled_how("case", task.dockerfile, task.path) != before
    monkeypatch.undo()
    image._assembler_code.cache_clear()
    changed = tmp_path / "_assembled.py"  # the assembling strategy's code, one line added
    changed.write_text(image.ASSEMBLER_SOURCES[1].read_text() + "\n# changed\n")
    monkeypatch.setattr(image, "ASSEMBLER_SOURCES", (image.ASSEMBLER_SOURCES[0], changed))
    assert image.assembled_how("case", task.dockerfile, task.path) != before
    monkeypatch.undo()
    image._assembler_code.cache_clear()
    assert image.assembled_how("case", task.dockerfile, task.path) == before


def test_every_pilot_task_is_built_by_docker_up_to_its_copies_which_are_assembled() -> None:
    from ssebench.simplelayer import split_dockerfile

    for task in load_tasks(PROJECT_ROOT / "datasets" / "pilot"):
        split = split_dockerfile(task.dockerfile, task.path, CASE)
        assert split is not None, task.id
        # The head ends in a RUN: its own line, or the last line of one continued.
        assert split.head.rstrip().splitlines()[-1].startswith((" ", "RUN ")), task.id
        assert all(i.split()[0] in ("COPY", "WORKDIR") for i in split.tail.instructions)
        assert len(split.tail.instructions) >= 8 and split.tail.workdirs[-1].startswith("/src/"), task.id
        assert split.head + "\n".join(split.tail.instructions) != task.dockerfile.read_text()  # comments kept


@pytest.mark.parametrize(
    "body, tail",
    [
        ("RUN true\nCOPY lib /src/lib\nWORKDIR /src/lib\n", 2),
        ("RUN true\nCOPY lib /src/lib\n# a comment\n\nWORKDIR /src/lib\n", 2),
        ("RUN true\nCOPY lib /src/lib\nENV A=b\nCOPY agent.py /src/\nWORKDIR /src\n", 2),  # the tail after the ENV
        ("RUN true\nWORKDIR /src\n", 0),  # one instruction: not worth the head's own label step
        ("RUN true\nCOPY lib /src/lib\nRUN true\n", 0),  # ends in a RUN
        ("RUN echo \\\nCOPY lib /src/lib\nWORKDIR /src/lib\n", 1),  # the COPY line is the RUN's, continued
        ("RUN true\nCOPY lib /src/lib\nWORKDIR src\n", 0),  # a relative WORKDIR
        ("RUN true\nCOPY --chown=1 lib /src/lib\nWORKDIR /src\nWORKDIR /src/lib\n", 2),
    ],
)
def test_the_tail_of_a_task_dockerfile_is_its_last_lines_that_only_copy(tmp_path: Path, body: str, tail: int) -> None:
    from ssebench.simplelayer import MIN_TAIL, split_dockerfile

    folder = _agent(tmp_path / "a", body, CASE_HEAD)
    split = split_dockerfile(folder / "Dockerfile", folder, CASE)
    if tail < MIN_TAIL:
        assert split is None
        return
    assert split is not None and len(split.tail.instructions) == tail
    assert split.head.startswith(CASE_HEAD) and (split.head + "\n".join(split.tail.instructions)).count("FROM") == 1
    lines = (folder / "Dockerfile").read_text().splitlines()
    assert split.head.splitlines() == lines[: len(split.head.splitlines())]  # the head is the file's own start


def test_a_dockerfile_with_a_parser_directive_is_not_split(tmp_path: Path) -> None:
    from ssebench.simplelayer import split_dockerfile

    folder = _agent(tmp_path / "a", "RUN true\nCOPY lib /src/lib\nWORKDIR /src/lib\n", CASE_HEAD)
    assert split_dockerfile(folder / "Dockerfile", folder, CASE) is not None  # control
    (folder / "Dockerfile").write_text("# escape=`\n" + (folder / "Dockerfile").read_text())
    assert split_dockerfile(folder / "Dockerfile", folder, CASE) is None


def test_lines_end_where_dockers_do(tmp_path: Path) -> None:
    """Docker ends a line at \\n only: a carriage return or a form feed inside a RUN does not start a COPY."""
    from ssebench.simplelayer import split_dockerfile

    folder = _agent(tmp_path / "a", "", CASE_HEAD)
    tail = "COPY lib /src/lib\r\nWORKDIR /src/lib\r\n"
    (folder / "Dockerfile").write_bytes((CASE_HEAD + "RUN echo a\rCOPY agent.py /x\x0cCOPY lib /y\n" + tail).encode())
    split = split_dockerfile(folder / "Dockerfile", folder, CASE)
    assert split is not None and split.tail.instructions == ("COPY lib /src/lib", "WORKDIR /src/lib")
    assert split.head.endswith("RUN echo a\rCOPY agent.py /x\x0cCOPY lib /y\n")  # the file's own bytes
    (folder / "Dockerfile").write_bytes(("\ufeff# escape=`\n" + CASE_HEAD + "RUN x\n" + tail).encode())
    assert split_dockerfile(folder / "Dockerfile", folder, CASE) is None  # Docker reads a directive after a BOM
    assert simple_dockerfile(folder / "Dockerfile", folder, CASE) is None


def test_a_from_on_a_continued_line_is_not_a_stage(tmp_path: Path) -> None:
    from ssebench.simplelayer import split_dockerfile

    folder = _agent(tmp_path / "a", "", "")
    (folder / "Dockerfile").write_text("RUN echo \\\nFROM x\nCOPY lib /src/lib\nWORKDIR /src/lib\n")
    assert split_dockerfile(folder / "Dockerfile", folder, CASE) is None
    (folder / "Dockerfile").write_text("FROM x\nRUN echo\nCOPY lib /src/lib\nWORKDIR /src/lib\n")  # control
    assert split_dockerfile(folder / "Dockerfile", folder, CASE) is not None
