"""Conformance tests every run backend must pass (docker today), and every implementation of the engine's
seams (`ssebench.engine.Images`, `Containers`, `Cleanup`): each method does what its docstring says, and
raises the leaf of `EngineError` its Raises names."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ssebench.backend import Backend, ContainerSpec, Handle, Mount, RunTimeoutError, Volume
from ssebench.engine import (
    Cleanup,
    ConflictError,
    Containers,
    DockerBackend,
    EngineRefusedError,
    Images,
    NotFoundError,
    cleanup,
    client,
    engine_errors,
)
from ssebench.engine._docker import DockerCleanup, DockerContainers, DockerImages
from ssebench.errors import BuildCancelled, SSEBenchError
from ssebench.inflight import phase_text
from ssebench.limits import Limits
from ssebench.runspec import RESTRICTED_DNS_OPTIONS
from ssebench.runtime.contract import PHASE_FILE
from ssebench.settings import Settings, get_settings

pytestmark = [pytest.mark.docker]

BACKENDS = [DockerBackend]
# Each engine's seams, as (images, containers, cleanup).
ENGINES = {"docker": (DockerImages, DockerContainers, DockerCleanup)}


@pytest.fixture(params=BACKENDS, ids=lambda cls: cls.__name__)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param()  # type: ignore[no-any-return]


@pytest.fixture
def labels() -> Iterator[dict[str, str]]:
    session = {"ssebench.session": f"conformance-{uuid.uuid4().hex[:8]}"}
    yield session
    for c in cleanup().containers({"label": f"ssebench.session={session['ssebench.session']}"}):
        cleanup().remove_container(c["Id"])
    for n in client().networks.list(filters={"label": f"ssebench.session={session['ssebench.session']}"}):
        n.remove()


def _image() -> str:
    return get_settings().os_image


def test_runs_with_env_mounts_and_labels(backend: Backend, labels: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("from the host")
    spec = ContainerSpec(
        image=_image(),
        env={"GREETING": "hello"},
        labels=labels,
        mounts=[Mount(tmp_path, "/data")],
        command=["bash", "-c", "echo $GREETING; cat /data/in.txt > /data/out.txt; exit 3"],
    )
    handle = backend.start(spec)
    try:
        assert handle.wait(120) == 3
        assert "hello" in handle.logs()
        assert (tmp_path / "out.txt").read_text() == "from the host"
        container = client().containers.get(handle.id)
        assert container.labels["ssebench.session"] == labels["ssebench.session"]
    finally:
        handle.remove()
    handle.remove()  # removing twice is a no-op
    assert not cleanup().containers({"id": handle.id})


def test_a_command_runs_as_root_in_a_running_container_with_its_status_output_and_time_limit(
    backend: Backend, labels: dict[str, str]
) -> None:
    """How the host tells sidecar mode's task container that the agent phase is over (ssebench.runtime.phase)."""
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, command=["sleep", "600"]))
    try:
        status, output = handle.execute(["bash", "-c", "id -u; echo to-stderr >&2; exit 7"], 30)
        # Both streams; the engine reads the two pipes apart, so under load stderr's line can come first.
        assert status == 7 and sorted(output.split()) == ["0", "to-stderr"]
        status, output = handle.execute(["bash", "-c", "head -c 300000 /dev/zero | tr '\\0' x"], 30)
        assert status == 0 and output == "x" * (1 << 16)  # capped at 64 kB, the status all the same
        with pytest.raises(RunTimeoutError, match="still running after 2 s"):
            handle.execute(["sleep", "60"], 2)
    finally:
        handle.remove()
    with pytest.raises(SSEBenchError):  # the container is gone
        handle.execute(["true"], 10)


def _ticks(handle: Handle) -> int:
    """How many lines the ticking container has written (read through the engine: it works while paused)."""
    with tarfile.open(fileobj=io.BytesIO(b"".join(handle.export("/tmp/ticks")))) as archive:
        member = archive.extractfile("ticks")
        assert member is not None
        return len(member.read().split())


def test_a_paused_container_runs_nothing_until_unpaused_and_its_phase_file_is_read(
    backend: Backend, labels: dict[str, str]
) -> None:
    """How a kept run ends (its phase file) and how sidecar mode's kept agent container is held while the task
    container grades (ssebench.live)."""
    tick = "while :; do date +%s%N >> /tmp/ticks; sleep 0.05; done"
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, command=["bash", "-c", tick]))
    try:
        assert handle.phase_file() is None  # none yet
        said = json.dumps({"phase": "kept", "status": 0})
        handle.execute(["bash", "-c", f"mkdir -p -m 0700 /run/ssebench && echo '{said}' > {PHASE_FILE}"], 30)
        archive = handle.phase_file()
        assert archive is not None and phase_text(archive) == said.encode() + b"\n"
        time.sleep(0.5)
        handle.pause()
        frozen = _ticks(handle)
        time.sleep(1)
        assert _ticks(handle) == frozen > 0 and handle.poll() is None  # nothing ran; it is still up
        with pytest.raises(SSEBenchError):
            handle.execute(["true"], 10)  # not even a command of the host's
        handle.unpause()
        time.sleep(1)
        assert _ticks(handle) > frozen
    finally:
        handle.remove()
    with pytest.raises(SSEBenchError):  # the container is gone
        handle.phase_file()


def test_read_only_mount(backend: Backend, labels: dict[str, str], tmp_path: Path) -> None:
    spec = ContainerSpec(
        image=_image(),
        labels=labels,
        mounts=[Mount(tmp_path, "/ro", read_only=True)],
        command=["bash", "-c", "touch /ro/x"],
    )
    handle = backend.start(spec)
    try:
        assert handle.wait(120) != 0
    finally:
        handle.remove()
    assert not (tmp_path / "x").exists()


def test_wait_times_out(backend: Backend, labels: dict[str, str]) -> None:
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, command=["sleep", "60"]))
    try:
        with pytest.raises(RunTimeoutError):
            handle.wait(2)
    finally:
        handle.remove()


@pytest.mark.parametrize("broken", ["image", "network"])
def test_failed_start_raises_and_leaves_nothing(backend: Backend, labels: dict[str, str], broken: str) -> None:
    image = "ssebench-test/no-such-image:none" if broken == "image" else _image()
    network = "ssebench-no-such-network" if broken == "network" else None
    with pytest.raises(SSEBenchError):
        backend.start(ContainerSpec(image=image, labels=labels, network=network, command=["true"]))
    assert cleanup().containers({"label": f"ssebench.session={labels['ssebench.session']}"}) == []


PROBE = "timeout 5 bash -c 'exec 3<>/dev/tcp/deb.debian.org/80' && echo reached || echo unreachable"


def test_on_an_internal_network_a_name_outside_fails_at_once_and_a_name_inside_resolves(
    backend: Backend, labels: dict[str, str]
) -> None:
    """The engine's resolver never answers for a name outside an internal network: a task's lookup (c-ares's
    tests make some) waited out its resolver's timeouts, 20 s for getent, 75 s for one c-ares test."""
    name = f"ssebench-conformance-{uuid.uuid4().hex[:8]}"
    backend.create_network(name, internal=True, labels=labels)
    peer = backend.start(
        ContainerSpec(
            image=_image(), labels=labels, network=name, name=f"{name}-peer", capabilities=None, command=["sleep", "60"]
        )
    )
    probe = (
        "s=$(date +%s%N); getent hosts deb.debian.org; echo outside=$? ms=$(( ($(date +%s%N) - s) / 1000000 )); "
        f"getent hosts {name}-peer >/dev/null; echo inside=$?"
    )
    handle = backend.start(
        ContainerSpec(
            image=_image(),
            labels=labels,
            network=name,
            capabilities=None,
            dns_options=RESTRICTED_DNS_OPTIONS,
            command=["bash", "-c", probe],
        )
    )
    try:
        handle.wait(60)
        said = dict(word.split("=") for word in handle.logs().split() if "=" in word)
        assert said["outside"] != "0" and said["inside"] == "0", handle.logs()
        assert int(said["ms"]) < 3000, f"an outside name took {said['ms']} ms to fail"
    finally:
        handle.remove()
        peer.remove()
    backend.remove_network(name)


@pytest.mark.parametrize("internal", [True, False], ids=["internal", "open"])
def test_networks_of_a_run(backend: Backend, labels: dict[str, str], internal: bool) -> None:
    """Internal networks have no route out; the open one (positive control) reaches the mirror with the same probe."""
    name = f"ssebench-conformance-{uuid.uuid4().hex[:8]}"
    network = backend.create_network(name, internal=internal, labels=labels)
    assert network.name == name and network.gateway
    with pytest.raises(SSEBenchError):
        backend.create_network(name, internal=internal, labels=labels)  # a run's network is its own
    handle = backend.start(
        ContainerSpec(image=_image(), labels=labels, network=name, capabilities=None, command=["bash", "-c", PROBE])
    )
    try:
        handle.wait(60)
        assert handle.logs().split()[-1] == ("unreachable" if internal else "reached")
    finally:
        handle.remove()
    backend.remove_network(name)
    backend.remove_network(name)  # gone already: a no-op
    assert client().networks.list(names=[name]) == []


def test_limits_privileges_and_export(backend: Backend, labels: dict[str, str]) -> None:
    limits = Limits(pids=128, memory=256 << 20, cpus=0.5, file_size=1 << 20)
    script = (
        "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; mkdir -p /out/d; echo data > /out/d/f; ln -s /etc /out/l"
    )
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, limits=limits, command=["bash", "-c", script]))
    try:
        assert handle.wait(60) == 0
        status = handle.logs()
        assert "CapEff:\t00000000000000eb" in status and "NoNewPrivs:\t1" in status, status
        host = client().api.inspect_container(handle.id)["HostConfig"]
        assert (host["PidsLimit"], host["Memory"], host["NanoCpus"]) == (128, 256 << 20, 500_000_000)
        # The engine keeps at most two files of 32 MB of a run container's output, whatever it prints.
        assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "32m", "max-file": "2"}}
        with tarfile.open(fileobj=io.BytesIO(b"".join(handle.export("/out")))) as exported:
            names = {m.name: m for m in exported.getmembers()}
        assert names["out/d/f"].isfile() and names["out/l"].issym()
        assert handle.memory_exhausted() is False
        with pytest.raises(SSEBenchError):
            b"".join(handle.export("/no/such/path"))
    finally:
        handle.remove()


def test_a_container_that_floods_its_output_leaves_the_engine_its_cap(backend: Backend, labels: dict[str, str]) -> None:
    """Sidecar mode's agent writes to its container's output, which the host reads whole: the engine keeps its
    last 64 MB, however much the agent printed (here 200 MB)."""
    limits = Limits(pids=128, memory=256 << 20, cpus=1.0, file_size=1 << 20)
    flood = (
        "yes 0123456789012345678901234567890123456789012345678901234567890123456789 | head -c 200000000; echo THE-END"
    )
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, limits=limits, command=["bash", "-c", flood]))
    try:
        assert handle.wait(300) == 0
        kept = handle.logs("stdout")
        assert kept.endswith("THE-END\n") and len(kept) <= 64 << 20, len(kept)
        assert len(kept) > 8 << 20  # the control: it did print, and the last of it is there
    finally:
        handle.remove()


def test_memory_exhaustion_is_reported(backend: Backend, labels: dict[str, str]) -> None:
    limits = Limits(pids=128, memory=128 << 20, cpus=1.0, file_size=1 << 20)
    hog = "a=(); while true; do a+=($(head -c 1000000 /dev/zero | tr '\\0' x)); done"
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, limits=limits, command=["bash", "-c", hog]))
    try:
        handle.wait(120)
        assert handle.memory_exhausted() is True
    finally:
        handle.remove()


def test_volumes_poll_and_stop(backend: Backend, labels: dict[str, str]) -> None:
    """A filled volume takes the image's files at its path, a plain one nothing; a second container sees what
    the first wrote; poll() says running until stop() ends it; a removed volume is gone."""
    tag = labels["ssebench.session"]
    filled, plain = f"{tag}-filled", f"{tag}-plain"
    for name in (filled, plain):
        backend.create_volume(name, labels=labels)
    try:
        writer = backend.start(
            ContainerSpec(
                image=_image(),
                labels=labels,
                command=["bash", "-c", "echo shared > /plain/note; sleep 600"],
                volumes=[Volume(filled, "/etc/apt", fill=True), Volume(plain, "/plain")],
            )
        )
        reader = backend.start(
            ContainerSpec(
                image=_image(),
                labels=labels,
                volumes=[Volume(filled, "/seen"), Volume(plain, "/usr/share")],
                command=["bash", "-c", "sleep 2; ls /seen; echo ---; ls /usr/share; echo ---; cat /usr/share/note"],
            )
        )
        try:
            assert writer.poll() is None
            assert reader.wait(120) == 0
            seen, etc, note = reader.logs().split("---")
            assert "sources.list.d" in seen.split() or "apt.conf.d" in seen.split(), seen  # filled from the image
            assert etc.split() == ["note"], etc  # nocopy: nothing of the image's /usr/share entered the plain volume
            assert note.strip() == "shared"
            writer.stop(1)
            assert writer.poll() is not None
        finally:
            writer.remove()
            reader.remove()
    finally:
        for name in (filled, plain):
            backend.remove_volume(name)
            backend.remove_volume(name)  # removing twice is a no-op
    assert not cleanup().volumes({"name": tag})


def _runtime_image(labels: dict[str, str], script: str) -> tuple[str, str]:
    """A stand-in runtime image (its /opt/ssebench made by `script`) and its digest."""
    digest = uuid.uuid4().hex * 2
    runtime = f"ssebench-conformance/runtime:{digest[:12]}"
    maker = client().containers.run(_image(), ["bash", "-c", script], detach=True, labels=labels)
    maker.wait(timeout=120)
    maker.commit(*runtime.split(":"), changes=[f"LABEL ssebench.hash={digest}"])
    maker.remove()
    return runtime, digest


def test_the_runtime_volume_is_made_once_from_its_image_and_mounted_read_only(
    backend: Backend, labels: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    """A runtime image's /opt/ssebench becomes one volume, named by its digest, made on first use and found
    after; a run mounts it read-only (never filled from its own image) and cannot write to it, root or not.
    A volume of that name that is not known complete (left empty by the engine, or by a fill that was
    killed) is made again."""
    from ssebench.engine import cleanup

    settings = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    runtime, digest = _runtime_image(
        labels, "mkdir -p /opt/ssebench/lib && echo rt > /opt/ssebench/lib/marker && chmod -R go-w /opt/ssebench"
    )
    name = f"ssebench-runtime-{digest[:32]}"
    probe = (
        "cat /opt/ssebench/lib/marker; stat -c '%U %a' /opt/ssebench/lib/marker; "
        "touch /opt/ssebench/x 2>&1; ls /opt/ssebench"
    )

    def probed(user: str) -> str:
        as_user = [] if user == "root" else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        handle = backend.start(
            ContainerSpec(
                image=_image(),
                labels=labels,
                command=[*as_user, "bash", "-c", probe],
                volumes=[Volume(name, "/opt/ssebench", read_only=True)],
            )
        )
        try:
            assert handle.wait(120) == 0
            return handle.logs()
        finally:
            handle.remove()

    try:
        assert backend.runtime_volume(settings, runtime) == name
        [volume] = [v for v in cleanup().volumes({"name": name}) if v["Name"] == name]
        assert backend.runtime_volume(settings, runtime) == name  # found, not made again
        assert [v for v in cleanup().volumes({"name": name}) if v["Name"] == name] == [volume]
        for user in ("root", "1000"):
            out = probed(user)
            assert "rt\nroot 644\n" in out and "Read-only file system" in out, out
            assert out.split()[-1] == "lib", out  # nothing of the run's image (the OS's /opt/ssebench: none)

        # Another machine's cache (no record of the fill): the marker in the volume tells it is complete.
        other = settings.model_copy(update={"cache_dir": tmp_path / "other"})
        assert backend.runtime_volume(other, runtime) == name
        assert [v for v in cleanup().volumes({"name": name}) if v["Name"] == name] == [volume]

        # Removed under a run: the engine makes an empty volume of that name, with no fill label.
        cleanup().remove_volume(name)
        client().volumes.create(name)
        assert backend.runtime_volume(settings, runtime) == name
        assert "rt\n" in probed("1000")
        # A fill that was killed: labelled, but no marker, and no record of its fill on this machine.
        cleanup().remove_volume(name)
        client().volumes.create(name, labels={"ssebench.fill": "killed"})
        assert backend.runtime_volume(other, runtime) == name
        assert "rt\n" in probed("1000")
    finally:
        cleanup().remove_volume(name)
        client().images.remove(runtime, force=True)
    with pytest.raises(SSEBenchError, match="no runtime image"):
        backend.runtime_volume(settings, "ssebench-conformance/runtime:missing")


def test_a_runtime_that_is_not_roots_alone_makes_no_volume(
    backend: Backend, labels: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"cache_dir": tmp_path / "cache"})
    for script, bad in (
        ("chmod o+w /opt/ssebench/lib/mod.py", "mod.py"),
        ("chown 1000 /opt/ssebench/lib", "/fill/lib"),
        ("chmod u+s /opt/ssebench/lib/mod.py", "mod.py"),
    ):
        runtime, digest = _runtime_image(
            labels,
            "mkdir -p /opt/ssebench/lib && echo x > /opt/ssebench/lib/mod.py "
            f"&& chmod -R go-w /opt/ssebench && {script}",
        )
        try:
            with pytest.raises(SSEBenchError, match=f"not root's alone: .*{bad}"):
                backend.runtime_volume(settings, runtime)
            assert not cleanup().volumes({"name": f"ssebench-runtime-{digest[:32]}"})
        finally:
            client().images.remove(runtime, force=True)


def test_doctor_names_the_engines_storage_driver_and_what_fuse_overlayfs_costs() -> None:
    import subprocess

    from ssebench.doctor import run_checks

    driver = subprocess.run(
        ["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    [check] = [c for c in run_checks(get_settings()) if c.name == "storage driver"]
    assert check.ok and check.detail.startswith(driver)
    assert ("sse-runner" in check.detail) == (driver == "fuse-overlayfs")


@dataclass(frozen=True)
class Seams:
    images: Images
    containers: Containers
    cleanup: Cleanup


@pytest.fixture(params=sorted(ENGINES))
def seams(request: pytest.FixtureRequest) -> Seams:
    images, containers, cleanup = ENGINES[request.param]
    return Seams(images(), containers(), cleanup())


def _conformance_ref(name: str) -> str:
    return f"ssebench-conformance/{name}:{uuid.uuid4().hex[:12]}"


def test_images_inspect_name_commit_build_and_import(seams: Seams, labels: dict[str, str], tmp_path: Path) -> None:
    images, containers = seams.images, seams.containers
    missing = _conformance_ref("missing")
    assert images.inspect(missing) is None and images.id(missing) is None and images.labels(missing) is None
    with pytest.raises(NotFoundError):
        images.tag(missing, _conformance_ref("alias"))
    made: list[str] = []
    try:
        container = containers.create(_image(), command=["sh", "-c", "echo made > /made"], labels=labels)
        try:
            assert containers.run_to_end(container, "making /made", 60) == 0
            committed = _conformance_ref("committed")
            images.commit(container, committed, ["LABEL ssebench.conformance=committed"])
            made.append(committed)
        finally:
            containers.remove(container)
        attrs = images.inspect(committed)
        assert attrs is not None and images.id(committed) == attrs["Id"]
        assert (images.labels(committed) or {}).get("ssebench.conformance") == "committed"
        alias = _conformance_ref("alias")
        images.tag(committed, alias)
        made.append(alias)
        assert images.id(alias) == images.id(committed)
        assert len(images.history(committed)) > len(images.history(_image()))  # one step more: the commit

        (tmp_path / "Dockerfile").write_text(f"FROM {_image()}\nLABEL ssebench.conformance=built\n")
        built = _conformance_ref("built")
        chunks = list(images.build(tmp_path, tmp_path / "Dockerfile", built, {}, nocache=False))
        made.append(built)
        assert chunks and not [c for c in chunks if "error" in c]
        assert (images.labels(built) or {}).get("ssebench.conformance") == "built"
        (tmp_path / "Dockerfile").write_text(f"FROM {_image()}\nRUN exit 7\n")
        failed = _conformance_ref("failed")
        assert [c for c in images.build(tmp_path, tmp_path / "Dockerfile", failed, {}, nocache=False) if "error" in c]
        assert images.id(failed) is None

        root = tmp_path / "root"
        root.mkdir()
        (root / "hello").write_text("imported")
        tarball = tmp_path / "root.tar"
        with tarfile.open(tarball, "w") as archive:
            archive.add(root / "hello", "hello")
        imported = _conformance_ref("imported")
        images.import_tarball(tarball, imported, ['CMD ["/hello"]'])
        made.append(imported)
        assert ((images.inspect(imported) or {}).get("Config") or {}).get("Cmd") == ["/hello"]
    finally:
        for ref in made:
            client().images.remove(ref, force=True)


def test_images_from_a_registry_that_does_not_answer(seams: Seams) -> None:
    """A pull that finds nothing is None (what is pulled then is built); a refused push is an error."""
    nowhere = "127.0.0.1:9/ssebench-conformance/nothing:1"
    assert seams.images.pull(nowhere) is None
    seams.images.tag(_image(), nowhere)
    try:
        with pytest.raises(EngineRefusedError):
            seams.images.push(nowhere)
    finally:
        client().images.remove(nowhere)


def test_containers_run_read_and_remove(seams: Seams, labels: dict[str, str]) -> None:
    containers = seams.containers
    with pytest.raises(NotFoundError):
        containers.create("ssebench-conformance/missing:1", labels=labels)
    script = "echo to-out; echo to-err >&2; mkdir /d; echo hi > /d/f; exit 3"
    made = containers.create(_image(), command=["sh", "-c", script], labels=labels)
    try:
        assert containers.state(made).get("Running") is False
        assert containers.run_to_end(made, "the script", 60) == 3
        assert containers.state(made).get("ExitCode") == 3
        assert "to-out" in containers.logs(made) and "to-err" in containers.logs(made)
        assert containers.logs(made, "stderr").split() == ["to-err"]
        with tarfile.open(fileobj=io.BytesIO(containers.archive(made, "/d/f"))) as archive:
            assert archive.extractfile("f").read() == b"hi\n"  # type: ignore[union-attr]
        with pytest.raises(NotFoundError):
            containers.archive(made, "/no/such/path")
        # A small file's archive, read no further than its cap; a path that is not there is None, not an error.
        small = containers.archive_of_file(made, "/d/f", 16 * 1024)
        assert small is not None
        with tarfile.open(fileobj=io.BytesIO(small)) as archive:
            assert archive.extractfile("f").read() == b"hi\n"  # type: ignore[union-attr]
        assert containers.archive_of_file(made, "/no/such/path", 16 * 1024) is None
        entry = containers.first_entry(made, "/d")
        assert entry is not None and entry.isdir() and entry.name == "d"
        assert containers.first_entry(made, "/no/such/path") is None
    finally:
        assert containers.remove(made) is True
    assert containers.remove(made) is False  # already gone
    with pytest.raises(NotFoundError):
        containers.state(made)
    with pytest.raises(NotFoundError):
        containers.logs(made)
    with pytest.raises(NotFoundError):  # the container gone is not a file missing
        containers.archive_of_file(made, "/d/f", 16 * 1024)


def test_containers_that_outlast_their_time_or_are_cancelled(seams: Seams, labels: dict[str, str]) -> None:
    containers = seams.containers
    for cancel, error, says in (
        (None, SSEBenchError, "did not end within 1 s"),
        (threading.Event(), BuildCancelled, "cancelled"),
    ):
        if cancel is not None:
            cancel.set()
        made = containers.create(_image(), command=["sleep", "60"], labels=labels)
        try:
            with pytest.raises(error, match=says):
                containers.run_to_end(made, "sleeping", 1, cancel)
        finally:
            containers.remove(made)


def test_one_off_containers_run_to_their_output_as_who_they_are_told(seams: Seams, labels: dict[str, str]) -> None:
    containers = seams.containers
    assert containers.run(_image(), ["sh", "-c", "id -u; echo no >&2"], labels=labels) == b"0\n"
    assert containers.run(_image(), ["-c", "id -u"], entrypoint=["/bin/sh"], user="1000:1000") == b"1000\n"
    with pytest.raises(EngineRefusedError):
        containers.run(_image(), ["sh", "-c", "exit 4"], labels=labels)
    assert not cleanup().containers({"label": f"ssebench.session={labels['ssebench.session']}"})  # removed


def test_volumes_are_filled_through_binds_and_read_back_read_only(seams: Seams, labels: dict[str, str]) -> None:
    containers = seams.containers
    volume = f"ssebench-conformance-{uuid.uuid4().hex[:12]}"
    containers.create_volume(volume, labels)
    try:
        writer = containers.create(
            _image(),
            command=["sh", "-c", "echo kept > /v/f"],
            labels=labels,
            binds={volume: {"bind": "/v", "mode": "rw"}},
        )
        try:
            assert containers.run_to_end(writer, "writing", 60) == 0
        finally:
            containers.remove(writer)
        reader = containers.create(
            _image(),
            command=["sh", "-c", "cat /v/f; touch /v/g"],
            labels=labels,
            binds={volume: {"bind": "/v", "mode": "ro,nocopy"}},
        )
        try:
            assert containers.run_to_end(reader, "reading", 60) != 0  # the touch: a read-only file system
            assert "kept" in containers.logs(reader) and "Read-only" in containers.logs(reader)
        finally:
            containers.remove(reader)
    finally:
        seams.cleanup.remove_volume(volume)


def test_cleanup_finds_by_label_and_removes_once(seams: Seams, labels: dict[str, str]) -> None:
    """Each removal is True once and False after (gone); a volume still in use is False and stays (the
    next clean-up takes it), and an engine error of any other kind is raised."""
    cleanup, containers = seams.cleanup, seams.containers
    by_label = {"label": f"ssebench.session={labels['ssebench.session']}"}
    name = f"ssebench-conformance-{uuid.uuid4().hex[:12]}"
    containers.create_volume(name, labels)
    client().networks.create(name, driver="bridge", labels=labels)
    user = containers.create(
        _image(), command=["sleep", "60"], labels=labels, binds={name: {"bind": "/v", "mode": "rw"}}
    )
    try:
        client().api.connect_container_to_network(user, name)
        containers.start(user)
        assert [c["Id"] for c in cleanup.containers(by_label)] == [user]
        assert [n["Name"] for n in cleanup.networks(by_label)] == [name]
        assert [v["Name"] for v in cleanup.volumes(by_label)] == [name]
        assert cleanup.remove_network(name) is True  # its container disconnected first
        assert cleanup.remove_network(name) is False
        assert cleanup.remove_volume(name) is False  # in use: left for later
        assert [v["Name"] for v in cleanup.volumes(by_label)] == [name]
        # The engine's own answer (409), which the table maps to the leaf remove_volume reads as "later".
        with pytest.raises(ConflictError), engine_errors(f"removing volume {name}"):
            client().api.remove_volume(name)
    finally:
        assert cleanup.remove_container(user) is True
    assert cleanup.remove_container(user) is False
    assert cleanup.remove_volume(name) is True
    assert cleanup.remove_volume(name) is False
    assert cleanup.containers(by_label) == cleanup.networks(by_label) == cleanup.volumes(by_label) == []
