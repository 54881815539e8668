"""Runs dispatched elsewhere: what comes home, and how (no cluster needed here; tests/integration/
test_scale_out.py runs a real one)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
import types
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ssebench import dispatch
from ssebench.agent import load_agent
from ssebench.dispatch import (
    HOME_CAP,
    NodeOutcome,
    bring_home,
    check_cluster_access,
    lost_run,
    pack,
    pack_or_top,
    resources,
)
from ssebench.errors import SSEBenchError
from ssebench.limits import Limits
from ssebench.reaper import Session
from ssebench.record import RunRecord
from ssebench.registry import parse_registry
from ssebench.runspec import RunConfig
from ssebench.settings import Settings, get_settings
from ssebench.task import load_task
from tests.helpers import DEMO


def _config(**kw: object) -> RunConfig:
    return RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"), **kw)  # type: ignore[arg-type]


def _node_run(root: Path) -> Path:
    run = root / "scratch" / "run-1"
    (run / "archive" / "deep").mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"patch_result": {"status": "failed"}}))
    (run / "container.log").write_text("log\n")
    (run / "archive" / "deep" / "a.txt").write_text("a")
    return run


def _summary(run_id: str = "20260101T000000-d2-sandbox-abcdef") -> dict[str, Any]:
    """What a node sends of its run's record: summary.json's content, as the node's record writes it."""
    record = RunRecord(
        config=_config(),
        run_id=run_id,
        run_dir=Path("/tmp/ssebench-run-x/run-1"),
        started_at="2026-01-01T00:00:00+00:00",
        grade="failed",
        exit_code=0,
        network="n",
        durations={"total": 1.0},
        session="s1",
        images={"built": [], "pulled": []},
    )
    return record.to_summary()


def _outcome(data: bytes, node: str = "host/n") -> NodeOutcome:
    return NodeOutcome(node=node, summary=_summary(), tar=data, sha256=hashlib.sha256(data).hexdigest())


def test_pack_sends_regular_files_and_directories_only_and_lists_the_rest(tmp_path: Path) -> None:
    run = _node_run(tmp_path)
    os.symlink("/etc/passwd", run / "passwd")
    os.symlink("/etc", run / "archive" / "etc")
    os.mkfifo(run / "pipe")
    (run / "big.bin").write_bytes(b"x" * 2048)
    data, left = pack(run, file_cap=1024)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {
        "run",
        "run/archive",
        "run/archive/deep",
        "run/archive/deep/a.txt",
        "run/result.json",
        "run/container.log",
    }
    assert all(m.isdir() or m.isreg() for m in members.values())
    assert {entry["path"] for entry in left} == {"passwd", "archive/etc", "pipe", "big.bin"}


def test_a_run_comes_home_whole_with_its_node_and_a_fresh_summary(tmp_path: Path) -> None:
    data, _ = pack(_node_run(tmp_path))
    record = bring_home(_config(), _outcome(data, node="host/abcd1234"), tmp_path / "out")
    assert record.grade == "failed" and record.infra_error is None and record.node == "host/abcd1234"
    assert record.run_dir == tmp_path / "out" / "c-demo" / "none" / "dummy" / _summary()["run_id"]
    # Its result.json is read from the run directory that came home.
    assert record.result is not None and record.result.status == "failed"
    assert (record.run_dir / "archive" / "deep" / "a.txt").read_text() == "a"
    summary = json.loads((record.run_dir / "summary.json").read_text())
    assert summary["node"] == "host/abcd1234" and summary["grade"] == "failed"
    assert summary["files"]["home"]["files"] == 3
    assert os.readlink(record.run_dir.parent / "latest") == record.run_dir.name


@pytest.mark.parametrize("hostile", ["../escaped.txt", "/abs.txt", "link"])
def test_a_stream_that_is_not_a_plain_run_directory_is_an_error_and_writes_nothing_outside(
    hostile: str, tmp_path: Path
) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("run/result.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
        if hostile == "link":
            link = tarfile.TarInfo("run/latest")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc"
            tar.addfile(link)
        else:
            bad = tarfile.TarInfo(f"run/{hostile}" if hostile.startswith("..") else hostile)
            bad.size = 1
            tar.addfile(bad, io.BytesIO(b"x"))
    record = bring_home(_config(), _outcome(out.getvalue()), tmp_path / "out")
    assert record.grade == "error" and "came home incomplete" in (record.infra_error or "")
    assert json.loads((record.run_dir / "summary.json").read_text())["grade"] == "error"
    assert not (tmp_path / "out" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert not (record.run_dir / "latest").exists()


def test_a_truncated_stream_is_an_error_not_a_half_run(tmp_path: Path) -> None:
    data, _ = pack(_node_run(tmp_path))
    sent = _outcome(data)
    sent.tar = data[:700]
    record = bring_home(_config(), sent, tmp_path / "out")
    assert record.grade == "error" and "did not arrive as it was sent" in (record.infra_error or "")
    assert json.loads((record.run_dir / "summary.json").read_text())["grade"] == "error"


def test_a_lost_node_is_an_infrastructure_error_with_a_directory(tmp_path: Path) -> None:
    record = lost_run(_config(), tmp_path / "out", Session.new(), "the run's Ray node or worker was lost (X)")
    summary = json.loads((record.run_dir / "summary.json").read_text())
    assert summary["grade"] == "error" and "lost" in summary["error"]
    assert record.run_dir.parent.parent.parent.parent == tmp_path / "out"


def test_a_lost_run_started_when_it_was_submitted(tmp_path: Path) -> None:
    """Its retry then sorts after it, even within the same second of the loss."""
    record = lost_run(_config(), tmp_path / "out", Session.new(), "lost", submitted=1_700_000_000.0)
    summary = json.loads((record.run_dir / "summary.json").read_text())
    assert summary["started_at"] == "2023-11-14T22:13:20+00:00", summary


def test_a_run_asks_the_cluster_for_what_its_containers_may_use() -> None:
    limits = Limits(cpus=1.5, memory=2 << 30)
    assert resources(_config(limits=limits)) == (1.5, 2 << 30)
    assert resources(_config(limits=limits, mode="sidecar")) == (3.0, 4 << 30)
    assert HOME_CAP > (1 << 30)


@pytest.mark.parametrize(
    "text, parsed",
    [("127.0.0.1:5000", "127.0.0.1:5000"), ("Registry.Lan:443/", "registry.lan:443"), ("[::1]:5000", "[::1]:5000")],
)
def test_a_registry_is_host_and_port(text: str, parsed: str) -> None:
    assert parse_registry(text) == parsed


@pytest.mark.parametrize("text", ["127.0.0.1", "http://127.0.0.1:5000", "host:0", "host:70000", "a b:1", ""])
def test_anything_else_is_refused_saying_what_to_give(text: str) -> None:
    with pytest.raises(ValueError, match="give the registry as HOST:PORT"):
        parse_registry(text)


def test_a_bad_registry_setting_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSEBENCH_IMAGE_REGISTRY", "nowhere")
    get_settings.cache_clear()
    try:
        with pytest.raises(SSEBenchError, match="SSEBENCH_IMAGE_REGISTRY: 'nowhere': give the registry as HOST:PORT"):
            get_settings()
    finally:
        get_settings.cache_clear()
    assert Settings(image_registry="127.0.0.1:5000").image_registry == "127.0.0.1:5000"


@pytest.fixture
def deep_scratch(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory removed with rm at the end: pytest's own clean-up of old temporary directories
    recurses, and a tree this deep would stop every later pytest session of this user."""
    scratch = tmp_path / "deep"
    scratch.mkdir()
    try:
        yield scratch
    finally:
        subprocess.run(["rm", "-rf", str(scratch)], check=True)


def test_no_depth_of_tree_a_run_leaves_stops_it_from_coming_home(deep_scratch: Path) -> None:
    run = _node_run(deep_scratch)
    # 1500 levels: deeper than Python's recursion limit (made relative to a directory descriptor, as an
    # agent in its archive could).
    fd = os.open(run / "archive", os.O_RDONLY)
    try:
        for _ in range(1500):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as leaf:
            leaf.write("deep")
    finally:
        os.close(fd)
    data, left = pack_or_top(run)
    assert left == []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
    assert "run/result.json" in names and any(n.endswith("/leaf.txt") for n in names)


def test_a_tree_that_cannot_be_packed_still_sends_the_harness_s_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _node_run(tmp_path)

    def unpackable(*args: object, **kwargs: object) -> tuple[bytes, list[dict[str, object]]]:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(dispatch, "pack", unpackable)
    data, left = dispatch.pack_or_top(run)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert sorted(tar.getnames()) == ["run", "run/container.log", "run/result.json"]
    assert left == [{"path": "archive", "reason": "not packed: RecursionError: maximum recursion depth exceeded"}]
    record = bring_home(_config(), _outcome(data), tmp_path / "out")
    assert record.grade == "failed" and record.infra_error is None


def test_what_does_not_fit_at_home_in_the_archive_is_listed_not_fatal(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, body in (("run/result.json", b"{}"), ("run/archive/" + "n" * 300, b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    record = bring_home(_config(), _outcome(out.getvalue()), tmp_path / "out")
    assert record.grade == "failed" and record.infra_error is None
    assert record.files["home"]["dropped_count"] == 1


def test_a_node_sends_only_run_ids_of_the_harness_s_making(tmp_path: Path) -> None:
    data, _ = pack(_node_run(tmp_path))
    for bad in ("../../x", "latest", "20260101T000000-d2-sandbox-abcdef/x"):
        sent = _outcome(data)
        sent.summary["run_id"] = bad
        record = bring_home(_config(), sent, tmp_path / "out")
        assert record.grade == "error" and "sent a run id that is not one" in (record.infra_error or "")
        latest = tmp_path / "out" / "c-demo" / "none" / "dummy" / "latest"
        assert latest.is_symlink() and os.readlink(latest) == record.run_dir.name  # the error's own directory


@pytest.mark.parametrize("field, value", [("grade", "maybe"), ("durations", [1.0]), ("exit_code", "0")])
def test_a_node_record_that_is_not_a_runs_is_an_error_of_its_own(field: str, value: object, tmp_path: Path) -> None:
    """What a node sends is read as summary.json is: a field of the wrong type makes no record."""
    data, _ = pack(_node_run(tmp_path))
    sent = _outcome(data)
    sent.summary[field] = value
    record = bring_home(_config(), sent, tmp_path / "out")
    assert record.grade == "error" and "sent a record that is not a run's" in (record.infra_error or "")


@pytest.mark.parametrize(
    "address, refused",
    [
        ("127.0.0.1:6379", False),
        ("localhost:6379", False),
        ("[::1]:6379", False),
        ("10.0.0.5:6379", True),
        ("head.lan:6379", True),
        ("auto", True),
    ],
)
def test_a_cluster_beyond_loopback_needs_token_authentication(
    address: str, refused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    if refused:
        with pytest.raises(SSEBenchError, match="start the cluster with token authentication"):
            check_cluster_access(address)
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
    check_cluster_access(address)


# -- a cluster without Ray's token: accepted only where every part of it is provably on loopback ------------


class FakeRay(types.ModuleType):
    """What RayDispatch reads of Ray, for a cluster described here: the GCS address the driver reached, the
    nodes' addresses and ports, the dashboard's address. No cluster runs."""

    def __init__(self, gcs: str, nodes: list[str], dashboard: str = "") -> None:
        super().__init__("ray")
        self.gcs, self.dashboard, self.connected = gcs, dashboard, False
        self.node_table = [
            {
                "NodeID": f"{i:056x}",
                "Alive": True,
                "NodeManagerAddress": address,
                "NodeManagerPort": 40000 + i,
                "ObjectManagerPort": 41000 + i,
                "RuntimeEnvAgentPort": 42000 + i,
                "MetricsExportPort": -1,
            }
            for i, address in enumerate(nodes)
        ]

    def init(self, address: str, **options: object) -> SimpleNamespace:
        self.connected = True
        return SimpleNamespace(dashboard_url=self.dashboard)

    def nodes(self) -> list[dict[str, object]]:
        return self.node_table

    def get_runtime_context(self) -> SimpleNamespace:
        return SimpleNamespace(gcs_address=self.gcs)

    def shutdown(self) -> None:
        self.connected = False

    def remote(self, function: object) -> object:
        return function


LOOPBACK_LISTENERS = [
    ("127.0.0.1", 6379),
    ("::ffff:127.0.0.1", 40000),
    ("127.0.0.1", 41000),
    ("::1", 42000),
    ("0.0.0.0", 22),
]  # sshd's, not the cluster's
# (what --ray-address says, the GCS address the driver reached, the nodes' addresses, the dashboard, listeners)
EXPOSED = {
    # `ray start --head` takes the machine's outward address and listens on every interface; Ray turns
    # 127.0.0.1 given to the driver into that address, and the connection succeeds.
    "loopback given, outward reached": ("127.0.0.1:6379", "10.0.0.5:6379", ["10.0.0.5"], "", LOOPBACK_LISTENERS),
    # Debian's hostname resolves to 127.0.1.1, Ray's fallback node address: for any node address but
    # 127.0.0.1 Ray binds every interface (tests/raycluster.py shows it on a real cluster).
    "127.0.1.1": ("127.0.1.1:6379", "127.0.1.1:6379", ["127.0.1.1"], "", LOOPBACK_LISTENERS),
    "one node beyond loopback": ("127.0.0.1:6379", "127.0.0.1:6379", ["127.0.0.1", "10.0.0.7"], "", LOOPBACK_LISTENERS),
    # --dashboard-host 0.0.0.0 on a loopback head: the job API (code execution) on every interface, which
    # no node address shows; this namespace's listeners do.
    "dashboard on every interface": (
        "127.0.0.1:6379",
        "127.0.0.1:6379",
        ["127.0.0.1"],
        "127.0.0.1:8265",
        [*LOOPBACK_LISTENERS, ("0.0.0.0", 8265)],
    ),
    "a node's port on every interface": (
        "localhost:6379",
        "127.0.0.1:6379",
        ["127.0.0.1"],
        "",
        [("127.0.0.1", 6379), ("::", 40000)],
    ),
    # Listeners that cannot be read prove nothing.
    "listeners unknown": ("127.0.0.1:6379", "127.0.0.1:6379", ["127.0.0.1"], "", None),
}


def _dispatch_to(
    fake: FakeRay,
    address: str,
    listeners: list[tuple[str, int]] | None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> dispatch.RayDispatch:
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(dispatch, "listening", lambda: listeners, raising=False)
    return dispatch.RayDispatch(get_settings(), Session.new(), tmp_path, address)


@pytest.mark.parametrize("address, gcs, nodes, dashboard, listeners", EXPOSED.values(), ids=EXPOSED.keys())
def test_a_cluster_that_answers_beyond_loopback_is_refused_without_a_token_and_disconnected(
    address: str,
    gcs: str,
    nodes: list[str],
    dashboard: str,
    listeners: list[tuple[str, int]] | None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    fake = FakeRay(gcs, nodes, dashboard)
    with pytest.raises(SSEBenchError) as refused:
        _dispatch_to(fake, address, listeners, monkeypatch, tmp_path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"--ray-address {address}: ")
    assert "RAY_AUTH_MODE=token" in message and "loopback-only network namespace" in message
    assert not fake.connected
    # The token is what guards such a cluster: with it the same cluster is taken.
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert _dispatch_to(FakeRay(gcs, nodes, dashboard), address, listeners, monkeypatch, tmp_path)._ray.connected


def test_a_cluster_wholly_on_loopback_is_taken_without_a_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    fake = FakeRay("127.0.0.1:6379", ["127.0.0.1", "127.0.0.1"], "127.0.0.1:8265")
    taken = _dispatch_to(fake, "127.0.0.1:6379", [*LOOPBACK_LISTENERS, ("127.0.0.1", 8265)], monkeypatch, tmp_path)
    assert taken._ray is fake and fake.connected


def test_the_listening_sockets_are_read_from_the_kernel_s_tables(tmp_path: Path) -> None:
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (tmp_path / "tcp").write_text(
        head + "   0: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 00000000:20C9 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 0500000A:9C40 0100000A:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n"
    )
    (tmp_path / "tcp6").write_text(
        head + "   0: 0000000000000000FFFF00000100007F:9C40 00000000000000000000000000000000:0000 0A 0 0 0 0 0 4 1\n"
        "   1: 00000000000000000000000001000000:A410 00000000000000000000000000000000:0000 0A 0 0 0 0 0 5 1\n"
        "   2: 00000000000000000000000000000000:2328 00000000000000000000000000000000:0000 0A 0 0 0 0 0 6 1\n"
    )
    # Established connections (st 01) are not listeners.
    found = dispatch.listening(tmp_path)
    assert found is not None
    assert {(ipaddress.ip_address(a), port) for a, port in found} == {
        (ipaddress.ip_address(a), port)
        for a, port in [
            ("127.0.0.1", 6379),
            ("0.0.0.0", 8393),
            ("::ffff:127.0.0.1", 40000),
            ("::1", 42000),
            ("::", 9000),
        ]
    }
    # Tables that cannot be read show nothing, which is not "no listener".
    assert dispatch.listening(tmp_path / "absent") is None


def _ray_ready() -> str | None:
    """Why a real cluster cannot run here (it needs root for a network namespace, `ip`, and Ray), or None."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "a loopback-only network namespace needs root and `ip`"
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'ssebench[ray]')"
    return None


DRIVER = """
import sys
from pathlib import Path
from ssebench.dispatch import RayDispatch
from ssebench.errors import SSEBenchError
from ssebench.reaper import Session
from ssebench.settings import get_settings
try:
    RayDispatch(get_settings(), Session.new(), Path(sys.argv[2]), sys.argv[1]).close(reap=False)
    print("taken")
except SSEBenchError as exc:
    print(f"refused: {exc}")
"""


@pytest.mark.ray
@pytest.mark.skipif(_ray_ready() is not None, reason=str(_ray_ready()))
@pytest.mark.parametrize("node_ip, taken", [("127.0.0.1", True), ("127.0.1.1", False)])
def test_a_real_cluster_is_taken_without_a_token_only_with_every_node_at_127_0_0_1(
    node_ip: str, taken: bool, tmp_path: Path
) -> None:
    """A head and a worker node (tests/raycluster.py) in a network namespace holding only loopback, so
    nothing listens beyond this machine whatever Ray binds; the controller connects from inside it."""
    from tests.raycluster import delete_netns, in_loopback_netns

    root = Path(__file__).resolve().parents[2]
    name = f"ssebench-ray-check-{os.getpid()}"
    delete_netns(name)
    inside = in_loopback_netns(name)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    cluster = subprocess.Popen(
        [*inside, sys.executable, "-m", "tests.raycluster", "1", node_ip],
        cwd=root,
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert cluster.stdin is not None and cluster.stdout is not None
    try:
        address = json.loads(cluster.stdout.readline())["address"]
        cluster.stdin.write("listeners\n")
        cluster.stdin.flush()
        listeners = json.loads(cluster.stdout.readline())["listeners"]
        driver = subprocess.run(
            [*inside, sys.executable, "-c", DRIVER, address, str(tmp_path)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        cluster.stdin.write("quit\n")
        cluster.stdin.flush()
        try:
            cluster.wait(120)
        except subprocess.TimeoutExpired:
            cluster.kill()
            cluster.wait()
        cluster.stdin.close()
        cluster.stdout.close()
        delete_netns(name)
    said = driver.stdout.strip().splitlines()[-1:] or [driver.stderr[-2000:]]
    loopback = all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for a in listeners)
    if taken:
        assert loopback, listeners
        assert said == ["taken"], driver.stderr[-2000:]
    else:
        # What the check stands on: at 127.0.1.1, Ray's own listeners are on every interface.
        assert any(a.startswith(("*:", "0.0.0.0:", "[::]:")) for a in listeners), listeners
        assert said[0].startswith(f"refused: --ray-address {address}: "), said
