"""Where runs execute: in this process (`local`), or as tasks of a Ray cluster (`ray`).

Either way a run is `ssebench.run.execute` on some machine's own Docker
engine, with the same labels, limits, network and checks. With Ray:

- each run is a Ray task asking for its containers' CPUs and memory, so a
  cluster holds as many runs at once as its resources allow;
- on its node it builds the images it lacks (same plan, same locks) or pulls
  them from `--registry`, runs into a scratch directory, and returns that
  directory as a tar stream, capped;
- the controller writes the stream under its results root by the rules it
  uses for a container's files (`ssebench.archive.extract`: regular files
  and directories only, names kept inside, per-file and total caps), then
  rewrites summary.json: a run is complete, or recorded as an error;
- a lost node (or worker) makes the run an infrastructure error, which the
  item's `--infra-retries` runs again wherever the cluster places it;
- containers on a node carry that node's worker as their controller, so the
  node's reaper (`ssebench.reaper`) removes them when the worker dies; the
  controller reaps every live node at the end;
- runs with a model reach it through a gateway on their own node
  (`NodeModels`): a per-run listener must sit on the run network's host
  address, which only that node has.

Ray is imported only when a Ray dispatch is made (`pip install 'ssebench[ray]'`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import ipaddress
import os
import re
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sse.result import grade

from ssebench.archive import MAX_DEPTH, MAX_ENTRIES, extract
from ssebench.errors import SSEBenchError
from ssebench.live import ModelLink
from ssebench.reaper import Session
from ssebench.record import RunRecord
from ssebench.result import SOURCE_CAP, make_run_dir, new_run_id, point_latest, read_result
from ssebench.run import execute
from ssebench.runspec import RESULTS_CAP, RESULTS_FILE_CAP, RunConfig
from ssebench.runtime.contract import ARCHIVE_CAP
from ssebench.settings import Settings
from ssebench.version import __version__

# What a run directory may bring home: its results, its archive, and its logs.
HOME_FILE_CAP = RESULTS_FILE_CAP
HOME_CAP = RESULTS_CAP + ARCHIVE_CAP + SOURCE_CAP + (64 << 20)
# The form of `ssebench.result.new_run_id`'s ids: a node sends nothing else as one.
RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}-d[0-4]-[a-z]+-[0-9a-f]{6}")
RAY_HINT = "start one with `ray start --head` (docs/scale-out.md), or give --ray-address HOST:PORT"
# The one node address at which Ray binds its servers (GCS, raylets, workers, agents) to loopback alone; at any
# other, 127.0.1.1 (its fallback where the hostname names it, as on Debian) among them, they listen on every
# interface (tests/raycluster.py starts both).
RAY_LOOPBACK = "127.0.0.1"


# -- on the node --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeModels:
    """What a node needs to start its own model gateway: the declarations and a run's budget."""

    models_dir: Path
    budget: dict[str, float] | None = None
    # The session's models: the node's gateway serves (and reads the files of) these only.
    names: tuple[str, ...] | None = None


@dataclass
class NodeOutcome:
    """What a node sends home for one run."""

    node: str
    # The run's record as summary.json has it (its config and directory are the controller's).
    summary: dict[str, Any]
    tar: bytes
    left_behind: list[dict[str, Any]] = field(default_factory=list)
    # The tar stream's sha256 as the node made it: what arrives must be the same.
    sha256: str = ""


def _walk(root: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """(directory, subdirectories, files) under `root`, parents first, sorted, links never followed;
    iterative, so no depth of tree a run leaves can exhaust the stack."""
    stack = [root]
    while stack:
        top = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        with os.scandir(top) as entries:
            for entry in entries:
                (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
        dirs.sort()
        files.sort()
        yield top, dirs, files
        stack.extend(top / name for name in reversed(dirs))


def pack(run_dir: Path, cap: int = HOME_CAP, file_cap: int = HOME_FILE_CAP) -> tuple[bytes, list[dict[str, Any]]]:
    """The run directory as a tar stream under a top directory `run`: directories and regular files only
    (never followed links), files over `file_cap` and past `cap` in all left out and listed. The
    harness's own files at the top go first, so caps fall on the agent's archive."""
    out = io.BytesIO()
    left: list[dict[str, Any]] = []
    total = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_dir_info("run"))
        for top, dirs, files in _walk(run_dir):
            for name in dirs:
                tar.addfile(_dir_info(f"run/{(top / name).relative_to(run_dir).as_posix()}"))
            for name in files:
                path = top / name
                relative = path.relative_to(run_dir).as_posix()
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode):
                    left.append({"path": relative, "reason": "not a regular file"})
                elif st.st_size > file_cap or total + st.st_size > cap:
                    left.append({"path": relative, "size": st.st_size, "reason": "over the cap"})
                else:
                    _add_file(tar, path, f"run/{relative}", st)
                    total += st.st_size
    return out.getvalue(), left


def pack_or_top(run_dir: Path) -> tuple[bytes, list[dict[str, Any]]]:
    """`pack`, or when the tree cannot be packed whole, the harness's files at its top alone (the grade is
    in result.json there): what a run left never turns its grade into an error."""
    try:
        return pack(run_dir)
    except (OSError, RecursionError, tarfile.TarError) as exc:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_dir_info("run"))
            for path in sorted(run_dir.iterdir()):
                st = path.lstat()
                if stat.S_ISREG(st.st_mode) and st.st_size <= HOME_FILE_CAP:
                    _add_file(tar, path, f"run/{path.name}", st)
        return out.getvalue(), [{"path": "archive", "reason": f"not packed: {type(exc).__name__}: {exc}"}]


def _add_file(tar: tarfile.TarFile, path: Path, name: str, st: os.stat_result) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = st.st_size, 0o644, int(st.st_mtime)
    with path.open("rb") as data:
        tar.addfile(info, data)


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info


_node_gateway: Any = None


def _node_link(models: NodeModels, settings: Settings) -> ModelLink:
    """This worker's gateway (started on first use; it stops when this process ends) as a run's link."""
    global _node_gateway
    from ssebench.gateway import Budget, GatewayLink, GatewayProcess

    if _node_gateway is None:
        state = Path(tempfile.mkdtemp(prefix="ssebench-gateway-"))
        gateway = GatewayProcess(models.models_dir, state, model_port=settings.gateway_port, serve=models.names)
        gateway.start()
        _node_gateway = gateway
    budget = Budget.model_validate(models.budget) if models.budget else None
    return GatewayLink(_node_gateway.client(), budget=budget)


def node_name() -> str:
    """`host/node-id` of the Ray node this runs on; the host alone outside a Ray worker."""
    import ray

    if not ray.is_initialized():
        return socket.gethostname()
    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"


def run_on_node(
    config: RunConfig, settings: Settings, session_id: str, models: NodeModels | None, version: str = __version__
) -> NodeOutcome:
    """One run on this node's engine, into a scratch directory sent home whole (a Ray task's body)."""
    from ssebench.engine import DockerBackend
    from ssebench.reaper import reap_orphans

    # This worker is the runs' controller here: when it dies, this node's reaper removes what it left.
    session = Session(id=session_id, controller=os.getpid())
    try:
        reap_orphans()
    except SSEBenchError as exc:
        print(f"ssebench: could not remove what dead runs left on this node: {exc}", file=sys.stderr)
    if version != __version__:
        raise SSEBenchError(
            f"this node runs ssebench {__version__}, the controller {version}: install the same checkout on every node"
        )
    started = time.time()
    link: Any = _node_link(models, settings) if models is not None and config.model != "none" else None
    scratch = Path(tempfile.mkdtemp(prefix="ssebench-run-"))
    try:
        record = execute(config, settings, DockerBackend(), session, scratch, models=link)
        record.timeline["node_started"] = started
        record.timeline["node_ended"] = time.time()
        data, left = pack_or_top(record.run_dir)
    finally:
        if link is not None:
            link.client.close()
        # rm, not shutil.rmtree: no depth of tree a run leaves can stop it.
        subprocess.run(["rm", "-rf", "--one-file-system", str(scratch)], check=False)
    return NodeOutcome(
        node=node_name(),
        summary=record.to_summary(),
        tar=data,
        left_behind=left,
        sha256=hashlib.sha256(data).hexdigest(),
    )


def reap_node(session_id: str) -> tuple[str, int]:
    """Remove what a session left on this node (a Ray task's body, one per node at the end)."""
    from ssebench.reaper import reap_session

    return node_name(), reap_session(session_id)


# -- at home ------------------------------------------------------------------------------------------


def _chunks(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(view), 1 << 20):
        yield bytes(view[start : start + (1 << 20)])


def bring_home(config: RunConfig, outcome: NodeOutcome, results: Path, submitted: float | None = None) -> RunRecord:
    """Write a node's run under `results` (a fresh run directory) and record it; never half-written.

    `submitted` (epoch seconds) is when the run was handed to the cluster: the timeline then has it and
    `home`, beside the node's `node_started` and `node_ended`, and durations `dispatched` (submission to
    home, queueing included).
    """
    run_id = str(outcome.summary.get("run_id"))
    if not (run_id == config.run_id if config.run_id else RUN_ID.fullmatch(run_id)):
        return lost_run(
            config,
            results,
            Session(str(outcome.summary.get("session") or ""), 0),
            f"{outcome.node} sent a run id that is not one: {run_id[:80]!r}",
        )
    run_dir = make_run_dir(results, config.task.id, config.model, config.agent.name, run_id)
    record = RunRecord.from_summary(config, run_dir, outcome.summary)
    if record is None:
        return lost_run(
            config,
            results,
            Session(str(outcome.summary.get("session") or ""), 0),
            f"{outcome.node} sent a record that is not a run's",
        )
    record.node = outcome.node
    if submitted is not None:
        record.timeline["submitted"] = submitted
        record.timeline["home"] = time.time()
        record.durations["dispatched"] = round(record.timeline["home"] - submitted, 3)
    try:
        if hashlib.sha256(outcome.tar).hexdigest() != outcome.sha256:
            raise SSEBenchError(
                f"the run directory from {outcome.node} did not arrive as it was sent "
                f"({len(outcome.tar)} bytes, checksum differs)"
            )
        # The node capped each part of the run directory (results, archive/) as a container's: room for both.
        collected = extract(
            _chunks(outcome.tar),
            run_dir,
            file_cap=HOME_FILE_CAP,
            total_cap=HOME_CAP,
            max_entries=2 * MAX_ENTRIES + 10_000,
            max_depth=MAX_DEPTH + 1,
        )
        record.files["home"] = collected.describe() | {"left_on_node": outcome.left_behind}
        # What the agent left (its archive) may not fit here as it did there (a longer path, another
        # filesystem): listed, as a container's drops are. Anything else missing is an error.
        harness = sum(count for top, count in collected.dropped_under.items() if top != "archive")
        if collected.truncated or harness:
            raise SSEBenchError(
                f"the run directory from {outcome.node} came home incomplete: "
                f"{harness} of the harness's entr(ies) dropped, truncated={collected.truncated}"
            )
        record.result = read_result(run_dir)
    except (SSEBenchError, OSError) as exc:
        record.judged(grade(infrastructure=f"bringing the run home failed: {exc}"))
    record.write()
    point_latest(run_dir)
    return record


def lost_run(
    config: RunConfig, results: Path, session: Session, error: str, *, submitted: float | None = None
) -> RunRecord:
    """The record of a run whose node (or worker) was lost: an infrastructure error, with a directory. It
    started when it was `submitted` to the cluster, if it was: a retry then always sorts after it."""
    run_id = config.run_id or new_run_id(config.difficulty, config.mode)
    started = datetime.fromtimestamp(submitted, UTC) if submitted is not None else datetime.now(UTC)
    record = RunRecord(
        config=config,
        run_id=run_id,
        run_dir=make_run_dir(results, config.task.id, config.model, config.agent.name, run_id),
        started_at=started.isoformat(timespec="seconds"),
        session=session.id,
    )
    record.judged(grade(infrastructure=error))
    record.write()
    point_latest(record.run_dir)
    return record


def token_configured() -> bool:
    """Whether this controller speaks Ray's token authentication (and so only to a cluster that has it)."""
    return os.environ.get("RAY_AUTH_MODE") == "token"


def check_cluster_access(address: str) -> None:
    """Refuse, before connecting, a cluster that a run's container could command: one beyond loopback
    without Ray's token authentication (a run's container reaches every address of its node, Ray's ports
    among them, and Ray's workers hold the node's Docker engine). A loopback address proves nothing yet:
    Ray connects to the machine's outward address in its place; `beyond_loopback` judges what it reached."""
    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    if not loopback and not token_configured():
        raise SSEBenchError(
            f"--ray-address {address}: start the cluster with token authentication and export "
            f"RAY_AUTH_MODE=token and its token here (docs/scale-out.md#security): a run's "
            f"container can reach its node's addresses, Ray's ports among them"
        )


def listening(net: Path = Path("/proc/net")) -> list[tuple[str, int]] | None:
    """The TCP sockets listening in this process's network namespace, as (address, port), from the kernel's
    tables; None when they cannot be read (then nothing is known about them)."""
    found: list[tuple[str, int]] = []
    for name in ("tcp", "tcp6"):
        try:
            rows = (net / name).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            if name == "tcp":
                return None
            continue  # a kernel without IPv6 has no IPv6 sockets
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != "0A":  # TCP_LISTEN
                continue
            address, _, port = fields[1].partition(":")
            # The kernel prints the address as 32-bit words in this machine's byte order.
            packed = b"".join(int(address[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(address), 8))
            found.append((str(ipaddress.ip_address(packed)), int(port, 16)))
    return found


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def beyond_loopback(
    gcs_address: str, nodes: list[dict[str, Any]], dashboard_url: str, listeners: list[tuple[str, int]] | None
) -> list[str]:
    """What of a connected cluster may answer beyond loopback, in words; empty only when nothing can.

    The GCS the driver reached (Ray's rewrite of a loopback address shows here) and every node must be at
    127.0.0.1, where Ray binds loopback alone. The whole cluster is then in this network namespace, so the
    kernel's table of its listeners must show none of the cluster's ports (the GCS's, every node's, the
    dashboard's, whose host is its own option) on another address.
    """
    found = []
    host, _, port = gcs_address.rpartition(":")
    if host.strip("[]") != RAY_LOOPBACK:
        found.append(f"its GCS answered at {gcs_address}")
    found += [
        f"node {str(node.get('NodeID'))[:8]} is at {node.get('NodeManagerAddress')}"
        for node in nodes
        if node.get("NodeManagerAddress") != RAY_LOOPBACK
    ]
    if found:
        return found
    ports = {
        value
        for node in nodes
        for key, value in node.items()
        if key.endswith("Port") and isinstance(value, int) and value > 0
    }
    ports.add(int(port))
    if dashboard_url:
        ports.add(urlsplit(dashboard_url if "//" in dashboard_url else f"//{dashboard_url}").port or 0)
    if listeners is None:
        return ["this machine's listening sockets (/proc/net/tcp) cannot be read to show otherwise"]
    return [
        f"port {number} listens on {address}"
        for address, number in sorted(set(listeners))
        if number in ports and not _loopback(address)
    ]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def resources(config: RunConfig) -> tuple[float, int]:
    """The CPUs and bytes of memory a run's containers may use (two containers in sidecar mode)."""
    containers = 2 if config.mode == "sidecar" else 1
    return config.limits.cpus * containers, config.limits.memory * containers


class RayDispatch:
    """The executor (`ssebench.executor.Executor`) over a Ray cluster: runs as Ray tasks, `submit` ahead,
    `ready` as they finish, `run` for one's record (at home). A node builds what its run lacks."""

    def __init__(
        self,
        settings: Settings,
        session: Session,
        results: Path,
        address: str | None,
        *,
        models: NodeModels | None = None,
        provider_env: dict[str, str] | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise SSEBenchError("--dispatch ray: Ray is not installed; pip install 'ssebench[ray]'") from None
        self.settings, self.session, self.results = settings, session, results
        self.address = address or "auto"
        check_cluster_access(self.address)
        self.models = models
        self.provider_env = provider_env or {}
        try:
            # Never a cluster of its own: ray.init without an address would start one on this machine's
            # addresses; connecting to a running one only.
            context = ray.init(address=self.address, namespace="ssebench", log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SSEBenchError(f"--ray-address {self.address}: no Ray cluster answers ({first}); {RAY_HINT}") from None
        if not token_configured():
            self._refuse_beyond_loopback(ray, context)
        self._ray = ray
        self._run: Any = ray.remote(run_on_node)
        self._reap = ray.remote(reap_node)
        # Submitted ahead and not yet asked for: id(config) -> (config, its Ray reference, when submitted).
        self.pending: dict[int, tuple[RunConfig, Any, float]] = {}
        # Runs cancelled because no live node can take them any more: id(config) -> why.
        self.misfits: dict[int, str] = {}
        self.in_flight: Any = None  # the reference `run` is waiting on
        self._checked = time.monotonic()

    def _refuse_beyond_loopback(self, ray: Any, context: Any) -> None:
        """Disconnect and raise unless the cluster just reached is wholly on loopback (`beyond_loopback`)."""
        try:
            found = beyond_loopback(
                ray.get_runtime_context().gcs_address,
                ray.nodes(),
                str(getattr(context, "dashboard_url", "") or ""),
                listening(),
            )
        except Exception as exc:
            found = [f"the cluster could not be read ({type(exc).__name__}: {_first_line(exc)})"]
        if found:
            ray.shutdown()
            raise SSEBenchError(
                f"--ray-address {self.address}: without token authentication only a cluster wholly on loopback "
                f"is taken, and this one is not ({'; '.join(found[:3])}): start it with token authentication and "
                f"export RAY_AUTH_MODE=token and its token here, or run it and ssebench in a loopback-only "
                f"network namespace with every node at {RAY_LOOPBACK} (docs/scale-out.md#security)"
            )

    def _fits(self, config: RunConfig) -> str | None:
        cpus, memory = resources(config)
        for node in self._ray.nodes():  # type: ignore[no-untyped-call]
            have = node.get("Resources") or {}
            if node.get("Alive") and have.get("CPU", 0) >= cpus and have.get("memory", 0) >= memory:
                return None
        return (
            f"no live node of the Ray cluster has {cpus:g} CPUs and {memory} bytes of memory for this run; "
            f"lower --run-limits or add larger nodes"
        )

    def _submit(self, config: RunConfig) -> Any:
        cpus, memory = resources(config)
        options: dict[str, Any] = {
            "num_cpus": cpus,
            "memory": memory,
            "max_retries": 0,
            "name": f"ssebench {config.task.id} {config.agent.name}",
        }
        if self.provider_env and config.model != "none":
            options["runtime_env"] = {"env_vars": self.provider_env}
        return self._run.options(**options).remote(config, self.settings, self.session.id, self.models, __version__)

    def submit(self, config: RunConfig) -> None:
        """Start `config`'s run on the cluster now; `run(config)` will give its record."""
        if id(config) not in self.pending and self._fits(config) is None:
            self.pending[id(config)] = (config, self._submit(config), time.time())

    def ready(self, timeout: float) -> list[RunConfig]:
        """The submitted runs that have finished (waiting up to `timeout` seconds for one), and those that
        no live node can take any more (cancelled: their record says why)."""
        refs = {ref: config for config, ref, _ in self.pending.values()}
        if not refs:
            return []
        done, _ = self._ray.wait(list(refs), num_returns=1, timeout=timeout)
        if done:
            done, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=0)
        finished = [refs[ref] for ref in done]
        if time.monotonic() - self._checked > 30:  # a queued run whose only large-enough node is gone
            self._checked = time.monotonic()
            for ref, config in refs.items():
                if ref not in done and (reason := self._fits(config)) is not None:
                    self._cancel(ref)
                    self.misfits[id(config)] = reason
                    finished.append(config)
        return finished

    def _cancel(self, ref: Any) -> None:
        with contextlib.suppress(Exception):
            self._ray.cancel(ref, force=True)

    def is_pending(self, config: RunConfig) -> bool:
        return id(config) in self.pending

    def run(self, config: RunConfig, *, build: bool = True) -> RunRecord:
        """`config`'s record, once its run (submitted now unless it was ahead) is done and home. Its node
        builds what it lacks whatever `build` says: only the node knows what its engine holds."""
        entry = self.pending.pop(id(config), None)
        if (reason := self.misfits.pop(id(config), None)) is not None:
            return lost_run(config, self.results, self.session, reason)
        if entry is None and (misfit := self._fits(config)) is not None:
            return lost_run(config, self.results, self.session, misfit)
        submitted = entry[2] if entry is not None else time.time()
        ref = entry[1] if entry is not None else self._submit(config)
        self.in_flight = ref
        try:
            outcome: NodeOutcome = self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return lost_run(
                config,
                self.results,
                self.session,
                f"the run raised on its node: {type(cause).__name__}: {_first_line(cause)}",
                submitted=submitted,
            )
        except self._ray.exceptions.RayError as exc:
            return lost_run(
                config,
                self.results,
                self.session,
                f"the run's Ray node or worker was lost ({type(exc).__name__}): {_first_line(exc)}",
                submitted=submitted,
            )
        finally:
            self.in_flight = None
        return bring_home(config, outcome, self.results, submitted)

    def close(self, *, reap: bool = True) -> None:
        """Cancel what is still queued or running (an interrupted sweep), remove what the session left on
        every live node (unless `reap` is False: --keep-containers), disconnect. Never raises."""
        cancelled = [ref for _, ref, _ in self.pending.values()] + ([self.in_flight] if self.in_flight else [])
        for ref in cancelled:
            self._cancel(ref)
        self.pending.clear()
        try:
            if reap:
                if cancelled:
                    time.sleep(2)  # a forced cancel ends its worker asynchronously; let it go first
                self._reap_nodes()
        except Exception as exc:
            print(f"ssebench: removing the session's containers on the Ray nodes: {exc}", file=sys.stderr)
        finally:
            self._ray.shutdown()

    def _reap_nodes(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [node for node in self._ray.nodes() if node.get("Alive")]  # type: ignore[no-untyped-call]
        reaps = [
            self._reap.options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote(self.session.id)
            for node in nodes
        ]
        self._ray.get(reaps, timeout=120)
