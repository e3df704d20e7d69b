"""One task: its image source, its kind and problems, its instruction."""

from __future__ import annotations

from pathlib import Path

from _task_helpers import make_task, write

from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import TaskKind, strip_canary

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tasks"


def test_kinds_of_the_fixture_tasks():
    dataset = Dataset(FIXTURES)
    kinds = {task.id: task.kind for task in dataset}
    assert kinds["edit-file"] is TaskKind.RUNNABLE
    assert kinds["text-only"] is TaskKind.TEXT_ONLY
    assert kinds["broken/nested-invalid"] is TaskKind.INVALID
    assert "[environment].cpus" in dataset["broken/nested-invalid"].problems[0]


def test_image_sources_and_classification(tmp_path):
    make_task(tmp_path, "dockerfile")
    make_task(tmp_path, "prebuilt", '[environment]\ndocker_image = "x:1"', dockerfile=False)
    make_task(
        tmp_path,
        "registry",
        '[metadata.repo2env.reproducibility]\nmode = "registry"\nimage_ref = "r@sha256:ab"',
        dockerfile=False,
    )
    make_task(
        tmp_path,
        "local",
        '[environment]\ndocker_image = "y:1"\n'
        '[metadata.repo2env.reproducibility]\nmode = "local_only"\nimage_ref = "y:1"',
        dockerfile=False,
    )
    make_task(tmp_path, "no-env", dockerfile=False)
    make_task(tmp_path, "no-tests", tests=False)
    make_task(tmp_path, "text", dockerfile=False, tests=False)
    make_task(tmp_path, "steps", "[[steps]]\nname = 'one'")
    make_task(tmp_path, "windows", "[environment]\nos = 'Windows'")
    make_task(tmp_path, "gpu", "[environment]\ngpus = 1")
    make_task(tmp_path, "allowlist", "[environment]\nnetwork_mode = 'allowlist'")
    make_task(tmp_path, "separate", "[verifier]\nenvironment_mode = 'separate'")
    compose = make_task(tmp_path, "compose")
    write(compose / "environment" / "docker-compose.yaml", "services: {}\n")

    dataset = Dataset(tmp_path)
    image = {task.id: task.image for task in dataset}
    assert image["dockerfile"].kind == "dockerfile"
    assert (image["prebuilt"].kind, image["prebuilt"].ref, image["prebuilt"].pullable) == (
        "docker_image",
        "x:1",
        True,
    )
    assert (image["registry"].kind, image["registry"].ref) == ("registry", "r@sha256:ab")
    assert image["local"].pullable is False
    kinds = {task.id: task.kind.value for task in dataset}
    assert kinds == {
        "allowlist": "unsupported",
        "compose": "runnable",
        "dockerfile": "runnable",
        "gpu": "unsupported",
        "local": "runnable",
        "no-env": "invalid",
        "no-tests": "invalid",
        "prebuilt": "runnable",
        "registry": "runnable",
        "separate": "runnable",
        "steps": "invalid",
        "text": "text-only",
        "windows": "unsupported",
    }
    assert "tests/test.sh: missing" in dataset["no-tests"].problems[0]
    assert "[environment].os = 'windows'" in dataset["windows"].problems[0]
    assert "steps/one/instruction.md: missing" in dataset["steps"].problems[0]


def test_paths_and_refusals(tmp_path):
    make_task(tmp_path, "multi", "[[steps]]\nname = 'one'\n[[steps]]\nname = 'two'")
    write(tmp_path / "multi" / "steps" / "one" / "solution" / "solve.sh")
    make_task(tmp_path, "good")
    make_task(tmp_path, "text", dockerfile=False, tests=False)
    dataset = Dataset(tmp_path)
    task = dataset["multi"]
    one, two = task.config.steps or []
    steps = task.path / "steps"
    assert task.tests_dir() == task.path / "tests"
    assert task.tests_dir(one) == steps / "one" / "tests"
    assert task.oracle_dir(one) == steps / "one" / "solution"
    assert task.oracle_dir(two) == task.path / "solution"  # no solution/ of its own
    assert task.step_workdir(two) == steps / "two" / "workdir"
    assert task.where(task.instruction_file(one)) == "multi/steps/one/instruction.md"
    assert task.refusal is not None
    assert task.refusal.startswith("multi cannot run (invalid): multi/steps/one/instruction.md")
    assert dataset["good"].refusal is None
    assert "text is a text-only task" in (dataset["text"].refusal or "")


def test_strip_canary():
    text = "<!-- canary GUID 123 -->\n# harbor-canary xyz\n\nDo the thing.\n"
    assert strip_canary(text) == "Do the thing.\n"
    assert strip_canary("No canary here.\n") == "No canary here.\n"
