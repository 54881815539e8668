"""The tool layer: a commit of a container of the case image after the tool layer's code ran in it."""

from __future__ import annotations

from ssebench.engine import DockerUnavailableError, containers, images
from ssebench.errors import BuildCancelled, SSEBenchError
from ssebench.image import TOOL_COMMIT_CHANGES, TOOL_LAYER_COMMAND
from ssebench.layers._strategy import Job, LayerFailed
from ssebench.runtimevolume import ensure_runtime_volume, runtime_binds

TOOL_LAYER_TIMEOUT = 1800


class ToolCommit:
    """Run the tool layer's code as root in a container of the case image, with the runtime volume mounted
    read-only (and no network), then commit that container; it is removed whatever happens, and a set
    `cancel` stops the code within a second, leaving nothing tagged.

    Nothing of the runtime enters the image: the commit leaves the volume out.
    """

    def make(self, job: Job) -> None:
        layer, out = job.layer, job.out
        case, runtime = layer.buildargs["SSEBENCH_CASE"], layer.buildargs["SSEBENCH_RUNTIME"]
        env = ((images().inspect(case) or {}).get("Config") or {}).get("Env") or []
        loader = sorted({str(v).split("=", 1)[0] for v in env if str(v).startswith("LD_")})
        if loader:  # root's processes inherit the image's environment: no variable may steer its dynamic loader
            raise job.fail(f"{case} sets {', '.join(loader)} in its environment; a task image may set no LD_ variable")
        volume = ensure_runtime_volume(job.settings, runtime)
        container: str | None = None
        try:
            container = containers().create(
                case,
                command=list(TOOL_LAYER_COMMAND),
                entrypoint=[],
                user="root",
                labels=layer.labels,
                binds=runtime_binds(volume),
            )
            out.write(f"# in container {container[:12]} of {case}, runtime volume {volume} read-only\n")
            try:
                status = containers().run_to_end(container, f"building {layer.image}", TOOL_LAYER_TIMEOUT, job.cancel)
            finally:
                out.write(containers().logs(container))
            if status != 0:
                raise job.fail(f"the tool layer's code exited with status {status}")
            images().commit(container, layer.image, TOOL_COMMIT_CHANGES)
        except BuildCancelled:
            out.write("ERROR: cancelled\n")
            raise
        except (LayerFailed, DockerUnavailableError):
            raise
        except SSEBenchError as exc:  # the engine's answer, or the code's time limit
            raise job.fail(str(exc)) from exc
        finally:
            if container is not None:
                containers().remove(container)
