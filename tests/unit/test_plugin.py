"""The pytest plugin without Docker: options, collection, ids, markers, selection."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import DEMO, unpin

pytest_plugins = ["pytester"]


@pytest.fixture
def demo(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def _ids(result: pytest.RunResult) -> list[str]:
    return sorted(line.strip() for line in result.outlines if "::" in line and "[" in line)


def test_collects_task_x_agent_x_difficulty(demo: pytest.Pytester) -> None:
    result = demo.runpytest(
        "datasets/demo", "--agent", "reference", "--agent", "dummy", "--difficulty", "0,2,4", "--collect-only", "-q"
    )
    ids = _ids(result)
    assert len(ids) == 18
    assert "datasets/demo/c-demo/sse/config.yaml::reference[none-d2-sandbox]" in ids
    assert "datasets/demo/rust-demo/sse/config.yaml::dummy[none-d4-sandbox]" in ids


def test_single_task_folder_and_folder_above(demo: pytest.Pytester) -> None:
    one = _ids(demo.runpytest("datasets/demo/go-demo", "--agent", "dummy", "--collect-only", "-q"))
    assert one == ["datasets/demo/go-demo/sse/config.yaml::dummy[none-d2-sandbox]"]
    above = _ids(demo.runpytest("datasets", "--agent", "dummy", "--collect-only", "-q"))
    assert len(above) == 3


def test_models_multiply_only_model_agents(demo: pytest.Pytester) -> None:
    ids = _ids(
        demo.runpytest(
            "datasets/demo/c-demo", "--agent", "dummy", "--model", "m1", "--model", "m2", "--collect-only", "-q"
        )
    )
    assert ids == ["datasets/demo/c-demo/sse/config.yaml::dummy[none-d2-sandbox]"]


def test_markers_and_keywords_select(demo: pytest.Pytester) -> None:
    go = _ids(demo.runpytest("datasets/demo", "--agent", "dummy", "-m", "go", "--collect-only", "-q"))
    assert go == ["datasets/demo/go-demo/sse/config.yaml::dummy[none-d2-sandbox]"]
    rust = _ids(demo.runpytest("datasets/demo", "--agent", "dummy", "-k", "rust", "--collect-only", "-q"))
    assert rust == ["datasets/demo/rust-demo/sse/config.yaml::dummy[none-d2-sandbox]"]
    dataset = _ids(demo.runpytest("datasets", "--agent", "dummy", "-m", "dataset_demo and c", "--collect-only", "-q"))
    assert dataset == ["datasets/demo/c-demo/sse/config.yaml::dummy[none-d2-sandbox]"]


@pytest.mark.parametrize(
    "where",
    [
        "datasets/demo",
        "datasets",
        "datasets/demo/c-demo",
        "datasets/demo/c-demo::x",
        "datasets/demo/c-demo/sse/config.yaml",
    ],
)
def test_tasks_without_an_agent_say_how_to_pick_one(demo: pytest.Pytester, where: str) -> None:
    result = demo.runpytest(where, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = "\n".join(result.errlines)
    assert (
        "holds tasks, but no agent is given: add --agent NAME (agents: chat-agent, claude-code, codex, dummy" in said
    ), said
    assert (
        "e.g. pytest datasets/demo/c-demo --agent reference" in said
        if "c-demo" in where
        else f"e.g. pytest {where} --agent reference" in said
    )


def test_without_agent_other_tests_run_as_ever(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest("-q")
    assert result.ret == pytest.ExitCode.OK and "1 passed" in result.stdout.str()


def test_agents_and_models_given_twice_or_comma_separated_make_each_item_once(demo: pytest.Pytester) -> None:
    once = _ids(
        demo.runpytest("datasets/demo/c-demo", "--agent", "dummy", "--agent", "reference", "--collect-only", "-q")
    )
    assert len(once) == 2
    for args in (["--agent", "dummy,reference"], ["--agent", "dummy", "--agent", "reference,dummy"]):
        assert _ids(demo.runpytest("datasets/demo/c-demo", *args, "--collect-only", "-q")) == once
    models = ["--agent", "chat-agent", "--model", "scripted-fix,scripted-budget", "--model", "scripted-fix"]
    ids = _ids(demo.runpytest("datasets/demo/c-demo", *models, "--collect-only", "-q"))
    assert ids == [
        "datasets/demo/c-demo/sse/config.yaml::chat-agent[scripted-budget-d2-sandbox]",
        "datasets/demo/c-demo/sse/config.yaml::chat-agent[scripted-fix-d2-sandbox]",
    ]


def test_a_run_is_taken_back_by_the_node_id_pytest_printed(demo: pytest.Pytester) -> None:
    printed = _ids(demo.runpytest("datasets/demo", "--agent", "dummy,reference", "--collect-only", "-q"))
    one = "datasets/demo/go-demo/sse/config.yaml::reference[none-d2-sandbox]"
    assert one in printed and len(printed) == 6
    again = demo.runpytest(one, "--agent", "dummy,reference", "--collect-only", "-q")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str() + "\n".join(again.errlines)
    assert _ids(again) == [one]
    # The task folder's own name with the run after `::` (pytest refuses `::` after a folder) means the same.
    short = demo.runpytest(
        "datasets/demo/go-demo::reference[none-d2-sandbox]", "--agent", "dummy,reference", "--collect-only", "-q"
    )
    assert _ids(short) == [one]
    # The task's file alone is its runs; anything else in the task's folder is not collected (a file planted
    # in a task of the pinned demo would be refused: this copy is a scratch one).
    unpin(demo.path / "datasets" / "demo")
    (demo.path / "datasets/demo/go-demo/sse/test_planted.py").write_text("def test_x():\n    pass\n")
    whole = _ids(
        demo.runpytest("datasets/demo/go-demo/sse/config.yaml", "--agent", "dummy,reference", "--collect-only", "-q")
    )
    assert whole == [one.replace("reference", "dummy"), one]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--difficulty", "5"], "argument --difficulty: '5': give levels 0-4"),
        (["--difficulty", "two"], "argument --difficulty: 'two': give levels 0-4"),
        (["--mode", "cloud"], "argument --mode: 'cloud': the accepted modes are sandbox, sidecar"),
        (["--mode", ","], "argument --mode: ',': give a mode, e.g. sandbox"),
        (["--agent-timeout", "0"], "argument --agent-timeout: '0': give a time in seconds above zero"),
        (["--agent-timeout", "inf"], "argument --agent-timeout: 'inf': give a time in seconds above zero"),
        (["--agent-timeout", "nan"], "argument --agent-timeout: 'nan': give a time in seconds above zero"),
        (["--model-budget", "cost=nan"], "argument --model-budget: 'cost=nan': give tokens=N"),
        (["--infra-retries", "-1"], "argument --infra-retries: '-1': give a whole number of at least 0"),
        (["--trials", "0"], "argument --trials: '0': give a whole number of at least 1"),
        (["--egress", "wide"], "argument --egress: 'wide': use restricted or open"),
        (["--model-budget", "tokens=1.5"], "argument --model-budget: 'tokens=1.5': give tokens=N"),
        (["--run-limits", "pids=10"], "argument --run-limits/--limits: pids=10 is too low for the runtime itself"),
        (["--run-limits", "memory=lots"], "argument --run-limits/--limits: memory: 'lots' is not a size"),
        (
            ["--run-limits", "disk=1g"],
            "argument --run-limits/--limits: unknown limit 'disk'; use pids, memory, cpus, file_size",
        ),
        (
            ["--run-limits", "cpus=999"],
            "argument --run-limits: cpus=999: give 0.01 to",
        ),  # this machine bounds runs here
        (["--dispatch", "k8s"], "argument --dispatch: 'k8s': use local or ray"),
        (["--registry", "http://x"], "argument --registry: 'http://x': give the registry as HOST:PORT"),
        (["--registry", "127.0.0.1:99999"], "argument --registry: '127.0.0.1:99999': give the registry as HOST:PORT"),
        (["--dispatch", "ray", "-n", "2"], "--dispatch ray: one pytest process submits every run to the cluster"),
        (["--dispatch", "ray", "--egress", "open"], "--egress open with --dispatch ray: an open run could reach"),
    ],
)
def test_bad_options_are_usage_errors(demo: pytest.Pytester, args: list[str], message: str) -> None:
    result = demo.runpytest("datasets/demo", "--agent", "dummy", *args, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


@pytest.mark.parametrize(
    "variable, value, message",
    [
        (
            "SSEBENCH_DIFFICULTY",
            "9",
            "SSEBENCH_DIFFICULTY: '9': give levels 0-4 separated by commas, e.g. 0,2,4 (or give --difficulty)",
        ),
        ("SSEBENCH_AGENT_TIMEOUT", "soon", "SSEBENCH_AGENT_TIMEOUT: 'soon': give a time in seconds above zero"),
        ("SSEBENCH_TIMEOUT", "soon", "SSEBENCH_TIMEOUT: 'soon': give a time in seconds above zero"),  # its old name
        ("SSEBENCH_INFRA_RETRIES", "-1", "SSEBENCH_INFRA_RETRIES: '-1': give a whole number of at least 0"),
        ("SSEBENCH_RETRIES", "-1", "SSEBENCH_RETRIES: '-1': give a whole number of at least 0"),
        ("SSEBENCH_EGRESS", "wide", "SSEBENCH_EGRESS: 'wide': use restricted or open"),
        ("SSEBENCH_TRIALS", "-2", "SSEBENCH_TRIALS: '-2': give a whole number of at least 1"),
    ],
)
def test_bad_environment_values_are_usage_errors_naming_the_variable(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = demo.runpytest("datasets/demo", "--agent", "dummy", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_bad_ini_values_are_usage_errors_naming_the_key(demo: pytest.Pytester) -> None:
    demo.makeini("[pytest]\nssebench_retries = many\n")
    result = demo.runpytest("datasets/demo", "--agent", "dummy", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ssebench_retries: 'many': give a whole number of at least 0 (or give --infra-retries)*"]
    )


def test_a_flag_wins_over_environment_and_ini(demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    demo.makeini("[pytest]\nssebench_difficulty = 1\n")
    monkeypatch.setenv("SSEBENCH_DIFFICULTY", "3")
    assert _ids(demo.runpytest("datasets/demo/c-demo", "--agent", "dummy", "--collect-only", "-q")) == [
        "datasets/demo/c-demo/sse/config.yaml::dummy[none-d3-sandbox]"
    ]
    assert _ids(
        demo.runpytest("datasets/demo/c-demo", "--agent", "dummy", "--difficulty", "4", "--collect-only", "-q")
    ) == ["datasets/demo/c-demo/sse/config.yaml::dummy[none-d4-sandbox]"]


def test_trials_make_one_item_each(demo: pytest.Pytester) -> None:
    ids = _ids(
        demo.runpytest(
            "datasets/demo/c-demo", "--agent", "dummy", "--agent", "reference", "--trials", "3", "--collect-only", "-q"
        )
    )
    assert ids == [
        f"datasets/demo/c-demo/sse/config.yaml::{agent}[none-d2-sandbox-t{n}]"
        for agent in ("dummy", "reference")
        for n in (1, 2, 3)
    ]


@pytest.mark.parametrize("model", [[], ["--agent", "chat-agent", "--model", "scripted-fix"]])
def test_results_that_cannot_hold_runs_are_one_usage_error(demo: pytest.Pytester, model: list[str]) -> None:
    (demo.path / "results.txt").write_text("a file")
    result = demo.runpytest("datasets/demo", "--agent", "dummy", *model, "--results", "results.txt", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.startswith("ERROR:")] == [
        f"ERROR: --results {demo.path / 'results.txt'}: not a directory; give a directory for the run results"
    ]
    assert "INTERNALERROR" not in result.stdout.str() + "\n".join(result.errlines)


def test_unknown_agent_is_a_usage_error(demo: pytest.Pytester) -> None:
    result = demo.runpytest("datasets/demo", "--agent", "nobody", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agent:*no agent 'nobody'*"])


def test_broken_task_is_a_collection_error_naming_the_field(demo: pytest.Pytester) -> None:
    config = demo.path / "datasets" / "demo" / "c-demo" / "sse" / "config.yaml"
    config.write_text(config.read_text() + "colour: blue\n")
    result = demo.runpytest("datasets/demo", "--agent", "dummy", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*c-demo/sse/config.yaml: colour: unknown key*"])


def test_duplicate_task_ids_are_a_collection_error_as_in_the_cli(demo: pytest.Pytester) -> None:
    """pytest loads a task with its dataset, by the same rules as `ssebench dataset validate`."""
    unpin(demo.path / "datasets" / "demo")  # a task added to the pinned demo would be refused for that alone
    copy = demo.path / "datasets" / "demo" / "C-Demo"
    shutil.copytree(demo.path / "datasets" / "demo" / "c-demo", copy)
    config = copy / "sse" / "config.yaml"
    config.write_text(config.read_text().replace("id: c-demo", "id: C-Demo"))
    # Folders are taken in name order, so the later one (c-demo) is the clash.
    result = demo.runpytest("datasets/demo/c-demo", "--agent", "dummy", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*c-demo/sse/config.yaml: id: 'c-demo' clashes with C-Demo*"])
    # The task it clashes with still collects, and so do the others.
    ok = demo.runpytest("datasets/demo/C-Demo", "datasets/demo/go-demo", "--agent", "dummy", "--collect-only", "-q")
    assert _ids(ok) == [
        "datasets/demo/C-Demo/sse/config.yaml::dummy[none-d2-sandbox]",
        "datasets/demo/go-demo/sse/config.yaml::dummy[none-d2-sandbox]",
    ]


def test_a_task_with_a_broken_dataset_yaml_is_a_collection_error(demo: pytest.Pytester) -> None:
    (demo.path / "datasets" / "demo" / "dataset.yaml").write_text("version: ''\n")
    result = demo.runpytest("datasets/demo/c-demo", "--agent", "dummy", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*dataset.yaml: version: must not be empty*"])


def test_a_task_edited_under_its_pinned_version_is_refused_with_one_line(demo: pytest.Pytester) -> None:
    """The demo is pinned (manifest.json): a task file changed without a new version is not collected, and
    the line says how to update the pin; once the version is bumped the edited dataset collects again."""
    dataset = demo.path / "datasets" / "demo"
    args = ("datasets/demo", "--agent", "dummy", "--collect-only", "-q")
    assert _ids(demo.runpytest(*args)) == [
        f"datasets/demo/{t}/sse/config.yaml::dummy[none-d2-sandbox]" for t in ("c-demo", "go-demo", "rust-demo")
    ]
    build = dataset / "c-demo" / "sse" / "build.sh"
    build.write_text(build.read_text() + "# an edit\n")
    refused = demo.runpytest(*args)
    assert refused.ret == pytest.ExitCode.INTERRUPTED
    lines = [line for line in refused.outlines if "differs from" in line]
    assert lines == [
        f"{dataset}/c-demo: differs from {dataset}/manifest.json (demo-v3): sse/build.sh changed; to change a "
        f"task, bump version in {dataset}/dataset.yaml and run `ssebench dataset pin {dataset}` (while authoring "
        f"a version not yet released: `ssebench dataset pin {dataset} --keep-version`)"
    ]
    # The tasks that match their pin still collect.
    assert _ids(refused) == [
        f"datasets/demo/{t}/sse/config.yaml::dummy[none-d2-sandbox]" for t in ("go-demo", "rust-demo")
    ]
    (dataset / "dataset.yaml").write_text("version: demo-v3-edited\n")
    assert len(_ids(demo.runpytest(*args))) == 3


def test_a_folder_with_an_sse_package_is_not_a_task(demo: pytest.Pytester) -> None:
    """`sdk/` holds the SDK's `sse` package: collecting the project must not take it for a task."""
    package = demo.path / "sdk" / "sse"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    result = demo.runpytest(".", "--agent", "dummy", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert len(_ids(result)) == 3 and "sdk" not in result.stdout.str()


def test_ini_keys_give_defaults(demo: pytest.Pytester) -> None:
    demo.makeini("[pytest]\nssebench_agents = dummy\nssebench_difficulty = 1,3\n")
    ids = _ids(demo.runpytest("datasets/demo/c-demo", "--collect-only", "-q"))
    assert ids == [
        "datasets/demo/c-demo/sse/config.yaml::dummy[none-d1-sandbox]",
        "datasets/demo/c-demo/sse/config.yaml::dummy[none-d3-sandbox]",
    ]


# Popular plugins the suite loads beside ours in subprocesses only: pytest-retry
# and pytest-randomly, autoloaded, change the suite's own in-process pytester
# runs, so `make install` puts them apart (pytest-timeout and
# pytest-rerunfailures are ordinary dev dependencies).
ISOLATED_PLUGINS = Path(sys.prefix) / "isolated-plugins"
POPULAR = {
    "pytest_timeout": "--timeout=",
    "pytest_retry": "--retries=",
    "pytest_rerunfailures": "--reruns=",
    "pytest_randomly": "--randomly-seed=",
    "pytest_cov": "--cov=",
    "xdist": "--numprocesses=",
    "pytest_html": "--html=",
}


def beside_popular_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make subprocess runs load pytest-retry, pytest-randomly and pytest-cov too."""
    for module in ("pytest_retry", "pytest_randomly", "pytest_cov"):
        assert (ISOLATED_PLUGINS / module).is_dir(), f"{module} is not in {ISOLATED_PLUGINS}: run make install"
    monkeypatch.setenv("PYTHONPATH", str(ISOLATED_PLUGINS))


def test_options_live_beside_popular_plugins(demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """One option namespace for every plugin: ours must not take a name that a popular one owns."""
    beside_popular_plugins(monkeypatch)
    helped = demo.runpytest_subprocess("--help")
    assert helped.ret == 0, helped.stderr.str()
    text = helped.stdout.str()
    for option in (
        *POPULAR.values(),
        "--agent-timeout=",
        "--infra-retries=",
        "--run-limits=",
        "--trials=",
        "--predictions=",
    ):
        assert option in text, option
    ran = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "dummy",
        "--timeout",
        "30",
        "--retries",
        "1",
        "--reruns",
        "1",
        "-p",
        "randomly",
        "--cov=ssebench",
        "--agent-timeout",
        "60",
        "--infra-retries",
        "1",
        "--collect-only",
        "-q",
    )
    assert ran.ret == 0, ran.stderr.str()
    assert "datasets/demo/c-demo/sse/config.yaml::dummy[none-d2-sandbox]" in ran.stdout.str()


@pytest.mark.parametrize(
    "name, message",
    [
        ("../../x", "--model ../../x: not a model name"),
        ("openai/gpt-4o", "--model openai/gpt-4o: not a model name"),
        ("gpt-4o", "--model gpt-4o: no */models/gpt-4o.yaml"),
    ],
)
def test_a_model_that_is_not_declared_is_a_usage_error(demo: pytest.Pytester, name: str, message: str) -> None:
    result = demo.runpytest("datasets/demo/c-demo", "--agent", "chat-agent", "--model", name, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
    assert not (demo.path / "results").exists()


def test_an_engine_that_does_not_answer_is_one_line_before_any_run(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = f"unix:///tmp/ssebench-no-engine-{os.getpid()}.sock"  # nothing listens there (and the path is short)
    monkeypatch.setenv("DOCKER_HOST", host)
    for workers in ([], ["-n", "2"]):
        result = demo.runpytest_subprocess(
            # -W error: as this repository's own settings (pyproject.toml) run it, where a socket left open is an error.
            "datasets/demo",
            "--agent",
            "dummy",
            "--results",
            "out",
            "-p",
            "no:cacheprovider",
            "-W",
            "error",
            *workers,
        )
        said = [line for line in result.outlines + result.errlines if line.strip()]
        assert result.ret == pytest.ExitCode.USAGE_ERROR, said
        assert len(said) == 1 and said[0].startswith("ERROR: ssebench: Docker failed while connecting: "), said
        assert said[0].endswith(
            f"no engine answers at DOCKER_HOST={host}: start the Docker engine (systemctl start docker) "
            "or point DOCKER_HOST at one, then run `ssebench doctor`"
        ), said
        assert not (demo.path / "out").exists() or not any((demo.path / "out").iterdir())


@pytest.fixture
def down_model(demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    """A model file whose server is down (a closed loopback port) in the project's models folder; its URL."""
    from tests.helpers import closed_port

    url = f"http://127.0.0.1:{closed_port()}/v1"
    (demo.path / "models").mkdir()
    (demo.path / "models" / "down.yaml").write_text(f"name: down\nbase_url: {url}\n")
    monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(demo.path / "models"))
    return url


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_model_whose_server_is_down_stops_the_session_before_any_run(
    demo: pytest.Pytester, down_model: str, workers: list[str]
) -> None:
    """One line naming the model, the URL, the cause and the fix; checked once, by the controller."""
    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo", "--agent", "chat-agent", "--model", "down", "--results", "out", *workers
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = [line for line in result.errlines if "--model down" in line]
    assert len(said) == 1, result.errlines
    assert said[0].startswith(f"ERROR: --model down: {down_model}/models did not answer (ConnectError"), said
    assert said[0].endswith("and that the server is up, or pass --skip-model-check"), said
    assert "chat-agent[down" not in result.stdout.str()  # no run started, none collected
    # Checked once: the gateway logs each check it makes (its folder is the session's, under the results).
    [log] = (demo.path / "out" / ".gateway").glob("*/gateway.log")
    assert log.read_text().count("model down: checked") == 1, log.read_text()
    assert [p.name for p in (demo.path / "out").iterdir()] == [".gateway"]  # and no run directory


def test_collecting_does_not_check_the_models(demo: pytest.Pytester, down_model: str) -> None:
    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo", "--agent", "chat-agent", "--model", "down", "--results", "out", "--collect-only", "-q"
    )
    assert result.ret == pytest.ExitCode.OK, result.errlines
    assert "datasets/demo/c-demo/sse/config.yaml::chat-agent[down-d2-sandbox]" in result.stdout.str()
    assert "model down: checked" not in "".join(p.read_text() for p in (demo.path / "out").rglob("gateway.log"))


def test_under_xdist_the_controller_checks_each_model_once_and_its_workers_never(demo: pytest.Pytester) -> None:
    # Nothing selected: the session starts (the controller's gateway, two workers) and runs nothing.
    result = demo.runpytest_subprocess(
        "datasets/demo", "--agent", "chat-agent", "--model", "scripted-fix", "--results", "out", "-n", "2", "-k", "x-y"
    )
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.errlines
    assert "2 workers" in result.stdout.str() or "created: 2/2 workers" in result.stdout.str(), result.stdout.str()
    [log] = (demo.path / "out" / ".gateway").glob("*/gateway.log")
    assert log.read_text().count("model scripted-fix: scripted, nothing to check") == 1, log.read_text()
