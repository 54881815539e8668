"""A session's life (ssebench.session): the option checks, the models, and what each command hands to Ray.

`ssebench run --dispatch ray` once sent no provider key and no budget to the
nodes, and checked no model, where the plugin did all three: two copies of a
session's start had drifted. Both now go through RunSession; these tests hold
both to what a node must be given, and to the same refusals.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ssebench import dispatch
from ssebench.cli import main
from ssebench.errors import SSEBenchError
from ssebench.session import OptionError, Plan, RunSession, check_models, provider_env
from ssebench.settings import Settings, get_settings
from tests.helpers import DEMO, closed_port

MODELS = Path(__file__).resolve().parents[2] / "models"

pytest_plugins = ["pytester"]


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two models with provider keys of their own (one exported), and one with none."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name, key in (("keyed", "SSEBENCH_TEST_KEY"), ("other", "SSEBENCH_OTHER_KEY"), ("keyless", None)):
        line = f"api_key_env: {key}\n" if key else ""
        (folder / f"{name}.yaml").write_text(f"name: {name}\nbase_url: http://127.0.0.1:9/v1\n{line}")
    monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(folder))
    monkeypatch.setenv("SSEBENCH_TEST_KEY", "sk-test")
    monkeypatch.setenv("SSEBENCH_OTHER_KEY", "sk-other")
    monkeypatch.setenv("SSEBENCH_UNRELATED_KEY", "sk-unrelated")
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()


class FakeDispatch:
    """Stands for RayDispatch: records what a session hands it, runs nothing."""

    made: ClassVar[list[dict[str, Any]]] = []
    pending: ClassVar[dict[int, Any]] = {}  # nothing waits: every item is reported at once, from run()

    def __init__(
        self,
        settings: Settings,
        session: Any,
        results: Path,
        address: str | None,
        *,
        models: dispatch.NodeModels | None = None,
        provider_env: dict[str, str] | None = None,
    ) -> None:
        FakeDispatch.made.append({"address": address, "models": models, "provider_env": provider_env})

    def submit(self, config: Any) -> None:
        pass

    def ready(self, timeout: float) -> list[Any]:
        return []

    def is_pending(self, config: Any) -> bool:
        return False

    def run(self, config: Any, *, build: bool = True) -> Any:
        raise SSEBenchError("not here: the fake dispatch runs nothing")

    def close(self, reap: bool = True) -> None:
        pass


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """RayDispatch, the clean-up and the gateway stood in for; what a session did is in the list returned."""
    import ssebench.gateway
    import ssebench.reaper

    FakeDispatch.made = []
    monkeypatch.setattr(dispatch, "RayDispatch", FakeDispatch)
    monkeypatch.setattr(ssebench.reaper, "reap_orphans", lambda: FakeDispatch.made.append({"reaped": "orphans"}))
    monkeypatch.setattr(ssebench.reaper, "reap_session", lambda session: FakeDispatch.made.append({"reaped": session}))

    class NoGateway:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            FakeDispatch.made.append({"gateway": "started"})

    monkeypatch.setattr(ssebench.gateway, "GatewayProcess", NoGateway)
    return FakeDispatch.made


def test_each_combination_that_cannot_run_is_one_line_naming_its_flags(tmp_path: Path) -> None:
    refusals = {
        "drop -n": Plan(results=tmp_path, dispatch="ray", workers=2),
        "--egress open with --dispatch ray": Plan(results=tmp_path, dispatch="ray", egress="open"),
        "--model: agent chat-agent needs a model": Plan(results=tmp_path, needs_model="chat-agent"),
    }
    for said, plan in refusals.items():
        with pytest.raises(OptionError) as caught:
            plan.check()
        assert said in str(caught.value) and "\n" not in str(caught.value)
    Plan(results=tmp_path, dispatch="ray", needs_model="chat-agent", models=("m",)).check()  # the control


def test_results_that_cannot_hold_runs_are_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a directory")
    for results, said in (
        (a_file, f"--results {a_file}: not a directory; give a directory for the run results"),
        (a_file / "runs", f"--results {a_file / 'runs'}: {a_file} is not a directory"),
    ):
        with pytest.raises(OptionError, match=re.escape(said)):
            Plan(results=results).check()
        status = main(["run", "--task", str(DEMO / "c-demo"), "--agent", "dummy", "--results", str(results)])
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1 and said in err, err  # one line, no traceback
    Plan(results=tmp_path / "not" / "yet" / "made").check()  # the control: made when the first run writes


def test_a_model_is_declared_and_its_key_exported(models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_models(get_settings(), ["keyed", "keyless"])
    with pytest.raises(OptionError, match=r"--model nope: no .*nope\.yaml \(models declared: keyed, keyless, other\)"):
        check_models(get_settings(), ["nope"])
    monkeypatch.delenv("SSEBENCH_TEST_KEY")
    with pytest.raises(OptionError, match="--model keyed: SSEBENCH_TEST_KEY is not set"):
        check_models(get_settings(), ["keyed"])


def test_a_node_is_sent_the_keys_of_the_session_s_models_and_no_other(models: Path) -> None:
    assert provider_env(get_settings(), ["keyed", "keyless"]) == {"SSEBENCH_TEST_KEY": "sk-test"}
    assert provider_env(get_settings(), ["keyed", "other"]) == {
        "SSEBENCH_TEST_KEY": "sk-test",
        "SSEBENCH_OTHER_KEY": "sk-other",
    }
    assert provider_env(get_settings(), ["keyless"]) == {}


def test_ssebench_run_over_ray_sends_the_nodes_the_provider_key_and_the_budget(
    models: Path, fake_ray: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(
        [
            "run",
            "--task",
            str(DEMO / "c-demo"),
            "--agent",
            "chat-agent",
            "--model",
            "keyed",
            "--dispatch",
            "ray",
            "--ray-address",
            "127.0.0.1:6379",
            "--model-budget",
            "tokens=1000,cost=2",
            "--results",
            str(tmp_path),
        ]
    )
    (made,) = [m for m in fake_ray if "address" in m]
    assert made["provider_env"] == {"SSEBENCH_TEST_KEY": "sk-test"}
    assert made["models"] == dispatch.NodeModels(models, {"tokens": 1000, "cost": 2.0}, ("keyed",))


def test_ssebench_run_checks_the_model_before_anything_starts(
    models: Path, fake_ray: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SSEBENCH_TEST_KEY")
    for dispatched in ("ray", "local"):
        status = main(
            [
                "run",
                "--task",
                str(DEMO / "c-demo"),
                "--agent",
                "chat-agent",
                "--model",
                "keyed",
                "--dispatch",
                dispatched,
                "--ray-address",
                "127.0.0.1:6379",
            ]
        )
        assert status == 2
        assert "--model keyed: SSEBENCH_TEST_KEY is not set" in capsys.readouterr().err
    assert fake_ray == []  # nothing started: no cluster reached, no gateway, no clean-up


def test_the_plugin_over_ray_sends_the_nodes_what_ssebench_run_does(
    models: Path, fake_ray: list[dict[str, Any]], pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The same session start as the command's: one code path, so the two cannot drift apart again."""
    import shutil

    shutil.copytree(DEMO / "c-demo", pytester.path / "c-demo")
    pytester.runpytest_inprocess(
        "c-demo",
        "--agent",
        "chat-agent",
        "--model",
        "keyed",
        "--dispatch",
        "ray",
        "--ray-address",
        "127.0.0.1:6379",
        "--model-budget",
        "tokens=1000,cost=2",
        "--results",
        str(tmp_path / "out"),
        "-p",
        "no:cacheprovider",
    )
    (made,) = [m for m in fake_ray if "address" in m]
    assert made["provider_env"] == {"SSEBENCH_TEST_KEY": "sk-test"}
    assert made["models"] == dispatch.NodeModels(models, {"tokens": 1000, "cost": 2.0}, ("keyed",))


def test_a_session_removes_what_it_started_once_however_often_it_is_closed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import ssebench.reaper

    reaped: list[str] = []
    monkeypatch.setattr(ssebench.reaper, "reap_orphans", lambda: 0)
    monkeypatch.setattr(ssebench.reaper, "reap_session", reaped.append)
    with RunSession(get_settings(), Plan(results=tmp_path)) as session:
        pass
    session.close()
    assert reaped == [session.session.id]
    kept = RunSession(get_settings(), Plan(results=tmp_path, keep=True))
    with kept:
        pass
    worker = RunSession(get_settings(), Plan(results=tmp_path), controller=False)
    with worker:
        pass
    assert reaped == [session.session.id]  # neither a kept session nor a worker removes anything


def test_a_session_whose_start_fails_is_removed_once(
    fake_ray: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise SSEBenchError("--ray-address 127.0.0.1:6379: no Ray cluster answers")

    monkeypatch.setattr(dispatch, "RayDispatch", unreachable)
    session = RunSession(get_settings(), Plan(results=tmp_path, dispatch="ray"))
    with pytest.raises(SSEBenchError, match="no Ray cluster answers"), session:
        pytest.fail("the session started")
    session.close()
    assert fake_ray == [{"reaped": "orphans"}, {"reaped": session.session.id}]


def test_every_step_of_the_end_runs_whatever_another_raises(fake_ray: list[dict[str, Any]], tmp_path: Path) -> None:
    class Broken:
        def stop(self) -> None:
            raise RuntimeError("the gateway would not stop")

    session = RunSession(get_settings(), Plan(results=tmp_path, dispatch="ray"))
    session.start()
    assert isinstance(session.executor, FakeDispatch)
    closed: list[bool] = []
    session.executor.close = lambda reap=True: closed.append(reap)  # type: ignore[method-assign]
    session.gateway = Broken()  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="would not stop"):
        session.close()
    assert closed == [True] and fake_ray[-1] == {"reaped": session.session.id}


def test_each_attempt_goes_through_the_session_s_executor_here_or_on_the_cluster(
    fake_ray: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssebench.executor
    from ssebench.executor import LocalExecutor

    seen: list[tuple[object, bool, object]] = []

    def execute(
        config: Any, settings: Any, backend: Any, session: Any, results: Any, *, build: bool, models: Any
    ) -> Any:
        seen.append((backend, build, models))
        return "its record"

    monkeypatch.setattr(ssebench.executor, "execute", execute)
    backend, link, config = object(), object(), object()
    local = RunSession(get_settings(), Plan(results=tmp_path), backend=lambda: backend, link=lambda run: link)  # type: ignore[arg-type,return-value]
    assert isinstance(local.executor, LocalExecutor)
    assert local.execute(config, build=False) == "its record"  # type: ignore[arg-type,comparison-overlap]
    assert seen == [(backend, False, link)]  # the session's backend and model link, and the caller's `build`
    over_ray = RunSession(get_settings(), Plan(results=tmp_path, dispatch="ray"))
    over_ray.start()
    assert isinstance(over_ray.executor, FakeDispatch)
    with pytest.raises(SSEBenchError, match="the fake dispatch runs nothing"):
        over_ray.execute(config)  # type: ignore[arg-type]
    over_ray.close()
    assert isinstance(over_ray.executor, LocalExecutor) and len(seen) == 1  # closed: back to this machine


def test_a_broken_model_file_does_not_block_the_models_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ssebench.session import OptionError, check_models, provider_env

    (tmp_path / "good.yaml").write_text("name: good\nbase_url: https://api.example.com/v1\napi_key_env: GOOD_KEY\n")
    (tmp_path / "broken.yaml").write_text("name: broken\nprice: cheap\n")
    monkeypatch.setenv("GOOD_KEY", "k")
    settings = get_settings().model_copy(update={"models_dir": tmp_path})
    check_models(settings, ["good"])
    assert provider_env(settings, ["good"]) == {"GOOD_KEY": "k"}
    with pytest.raises(OptionError, match=r"broken.yaml: price"):  # asked for, it is said
        check_models(settings, ["good", "broken"])


# -- the models' preflight: one call each, by the gateway, before the first run --------------------------------


@pytest.fixture
def broken_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A model whose server is down (a closed loopback port), and a scripted one."""
    folder = tmp_path / "models"
    (folder / "scripted").mkdir(parents=True)
    shutil.copy(MODELS / "scripted" / "fix.yaml", folder / "scripted" / "fix.yaml")
    (folder / "fixer.yaml").write_text("name: fixer\nscript: scripted/fix.yaml\n")
    (folder / "down.yaml").write_text(f"name: down\nbase_url: http://127.0.0.1:{closed_port()}/v1\n")
    monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(folder))
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()


def _down_line(folder: Path) -> str:
    port = (folder / "down.yaml").read_text().split(":")[-1].split("/")[0]
    return (
        rf"^--model down: http://127\.0\.0\.1:{port}/v1/models did not answer \(ConnectError[^\n]*\); check base_url "
        rf"in {re.escape(str(folder / 'down.yaml'))} and that the server is up, or pass --skip-model-check$"
    )


def test_a_model_whose_server_is_down_stops_the_session_before_any_run(broken_models: Path, tmp_path: Path) -> None:
    session = RunSession(get_settings(), Plan(results=tmp_path / "out", needs_model="chat-agent", models=("down",)))
    with pytest.raises(OptionError) as caught:
        session.start_models()
    assert re.match(_down_line(broken_models), str(caught.value)), str(caught.value)
    assert session.gateway is None and session.gateway_access is None  # its gateway stopped with it
    # Skipped, the session starts: each run's grade then says what became of the model's calls.
    skipped = Plan(results=tmp_path / "out", needs_model="chat-agent", models=("down",), model_check=False)
    unchecked = RunSession(get_settings(), skipped)
    try:
        unchecked.start_models()
        assert unchecked.gateway_access is not None
    finally:
        unchecked.close()


def test_a_scripted_model_passes_the_check_and_each_model_is_checked_once(broken_models: Path, tmp_path: Path) -> None:
    session = RunSession(get_settings(), Plan(results=tmp_path / "out", needs_model="chat-agent", models=("fixer",)))
    try:
        session.start_models()
        assert session.gateway is not None
        session.start_models()  # again: the gateway is running, nothing is started or checked twice
        log = session.gateway.log_path.read_text()
    finally:
        session.close()
    assert log.count("model fixer: scripted, nothing to check") == 1, log


def test_ssebench_run_stops_on_the_check_and_runs_past_it_when_told(
    broken_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def reached(self: RunSession, config: Any, *, build: bool = True) -> Any:
        raise SSEBenchError("the run was reached")

    monkeypatch.setattr(RunSession, "execute", reached)
    argv = ["run", "--task", str(DEMO / "c-demo"), "--agent", "chat-agent", "--model", "down"]
    argv += ["--results", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(_down_line(broken_models), err.removeprefix("error: ").strip()), err
    assert main([*argv, "--skip-model-check"]) == 1
    assert "grade: error (the run was reached)" in capsys.readouterr().out
