"""The Copier template: render matrix, byte-for-byte dataset copy, answer validation, update."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from _template_helpers import (
    REPO,
    RUNTIME_VERSION,
    fake_package_index,
    make_weird_dataset,
    run_copier,
    tree_digest,
    write_task,
)

from harbor_openenv.datasets.manifest import MANIFEST_NAME, verify_manifest

GIT_PIN = "harbor-openenv @ git+https://example.org/you/harbor-openenv@v0.1.0#subdirectory=runtime"


@pytest.fixture(autouse=True)
def published_runtime(tmp_path_factory, monkeypatch):
    """harbor-openenv 0.1.0 and 0.2.0 published on a local package index: the pins these tests
    give are checked against it (harbor_openenv.cli.pins), not against the real index."""
    index = tmp_path_factory.mktemp("package-index")
    from plumbum import local  # copier runs its tasks with plumbum's copy of the environment

    for key, value in fake_package_index(index, ["0.1.0", "0.2.0"]).items():
        monkeypatch.setenv(key, value)
        monkeypatch.setitem(local.env, key, value)


@pytest.fixture(scope="session")
def weird_dataset(tmp_path_factory) -> Path:
    return make_weird_dataset(tmp_path_factory.mktemp("weird") / "my_Weird.Tasks")


def render(copie, **answers):
    result = copie.copy(extra_answers=answers, template_dir=REPO)
    assert result.exit_code == 0, result.exception
    return result.project_dir


def front_matter(readme: str) -> dict:
    assert readme.startswith("---\n")
    return yaml.safe_load(readme.split("---\n", 2)[1])


# ---------------------------------------------------------------------------------------------
# Render matrix


PINS = {
    "release": ("", f"harbor-openenv[server]=={RUNTIME_VERSION}"),
    "specifier": ("harbor-openenv>=0.1,<0.2", "harbor-openenv[server]>=0.1,<0.2"),
    "exact": ("harbor_openenv==0.1.0", "harbor-openenv[server]==0.1.0"),
    "git": (GIT_PIN, GIT_PIN.replace("harbor-openenv @", "harbor-openenv[server] @")),
}


@pytest.mark.parametrize(
    "pin_case, extra",
    [
        ("release", {}),
        ("specifier", {"port": 9001, "env_name": "swe-mini", "max_concurrent_envs": 2}),
        ("exact", {"base_image": "python:3.11-slim", "description": 'Quotes " and \\ and ünï'}),
        ("git", {"port": 65535}),
    ],
)
def test_render_matrix(copie, weird_dataset, pin_case, extra):
    pin, install = PINS[pin_case]
    project = render(copie, dataset_path=str(weird_dataset), runtime_pin=pin, **extra)
    port = extra.get("port", 8000)
    name = extra.get("env_name", project.name)  # the destination folder's name (copie000...)

    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == name
    # the pin alone in its group; the user's dependencies list starts empty
    assert pyproject["project"]["dependencies"] == []
    assert pyproject["dependency-groups"] == {"runtime": [install]}
    assert pyproject["tool"]["uv"] == {
        "default-groups": ["runtime"],
        "find-links": ["wheels"],
        "package": False,
    }
    built = sorted(p.name for p in (project / "wheels").glob("harbor_openenv-*.whl"))
    if pin_case == "release":  # HEAD of this checkout is no published release: a built wheel
        assert built == [f"harbor_openenv-{RUNTIME_VERSION}+src.{built[0].split('+src.')[1]}"]
    else:
        assert built == []
    if "description" in extra:
        assert pyproject["project"]["description"] == extra["description"]

    manifest = yaml.safe_load((project / "openenv.yaml").read_text())
    validation = manifest.pop(
        "validation"
    )  # `openenv validate`'s block (tests/deploy/test_interop.py)
    assert validation["capabilities"]["verifier"] == {
        "kind": "script",
        "entry": "tasks/*/tests/test.sh",
    }
    # the runtime binding, its plan beside it (why it needs credentials: the rendered README)
    assert validation["execution"] == {
        "kind": "openenv_ws",
        "probe_path": "validation/runtime.json",
        "dockerfile": "Dockerfile",
        "context": ".",
        "agent_boundary": "api",
        "requires_credentials": True,
    }
    plan = json.loads((project / "validation" / "runtime.json").read_text())
    assert plan["reset"]["options"] == {"index": 0} and len(plan["actions"]) == 1
    assert manifest == {
        "spec_version": 1,
        "name": name,
        "version": pyproject["project"]["version"],  # the environment's, in both
        "description": extra.get(
            "description", f"OpenEnv environment serving the Harbor tasks of {name}"
        ),
        "type": "space",
        "runtime": "fastapi",
        "app": "server.app:app",
        "port": port,
    }

    app = (project / "server" / "app.py").read_text()
    assert app == "from harbor_openenv import build_app\napp = build_app()\n"
    compile(app, "app.py", "exec")
    assert (project / "server" / "__init__.py").exists()

    dockerfile = (project / "Dockerfile").read_text()
    assert "COPY pyproject.toml /opt/pyproject.toml" in dockerfile  # the pin lives there only
    assert "harbor-openenv[" not in dockerfile and RUNTIME_VERSION not in dockerfile
    assert (
        f"ARG BASE_IMAGE={extra.get('base_image', 'python:3.12-slim')}\nFROM ${{BASE_IMAGE}}"
        in dockerfile
    )
    assert f"EXPOSE {port}\n" in dockerfile
    assert "ENV HARBOR_OPENENV_TASKS=/app/tasks" in dockerfile
    assert f"HARBOR_OPENENV_MAX_SESSIONS={extra.get('max_concurrent_envs', 8)}" in dockerfile
    assert f'"--port", "{port}"]' in dockerfile and f"127.0.0.1:{port}/health" in dockerfile
    assert "-v /var/run/docker.sock:/var/run/docker.sock" in dockerfile
    assert "COPY wheels/ /opt/wheels/" in dockerfile and (project / "wheels").is_dir()

    readme = (project / "README.md").read_text()
    meta = front_matter(readme)
    assert meta["sdk"] == "docker" and meta["app_port"] == port and meta["pinned"] is False
    assert {"openenv", "harbor"} <= set(meta["tags"])
    assert "has no Docker engine of its own" in readme  # the Space case, and where it leads:
    assert "(#on-a-space-or-any-host-without-docker)" in readme
    assert "from harbor_openenv.client import HarborEnvClient" in readme

    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["runtime_pin"] == pin and answers["dataset_path"] == str(weird_dataset)
    assert answers["description"] == extra.get("description", "")
    for computed in (
        "runtime_version",
        "runtime_requirement",
        "runtime_install",
        "runtime_released",
        "dataset_abspath",
        "description_text",
    ):
        assert computed not in answers
    ci = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    assert "copier check-update -q" in str(ci["jobs"]["template"])

    compose = yaml.safe_load((project / "compose.yaml").read_text())["services"]["env"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in compose["volumes"]
    assert compose["ports"] == [f"{port}:{port}"]
    assert "${HARBOR_OPENENV_ORCHESTRATION_TOKEN:?" in str(compose["environment"])
    gitignore = (project / ".gitignore").read_text().splitlines()
    assert ".env" in gitignore and "!wheels/harbor_openenv-*.whl" in gitignore
    assert ".env" in (project / ".dockerignore").read_text().splitlines()

    dockerignore = [
        line.strip()
        for line in (project / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ".git" in dockerignore and not {"tasks", "tasks/", "wheels", "wheels/"} & set(
        dockerignore
    )
    assert "tasks/** -diff -text" in (project / ".gitattributes").read_text()
    # no ignore rule reaches into tasks/ (the last line re-includes it; test_e2e_image commits,
    # clones and builds a dataset holding every ignored pattern)
    assert gitignore[-1] == "!/tasks/**" and dockerignore[-1] == "!tasks/**"
    # the codex harness's builds are mounted at run time, never committed nor built in
    assert "/codex/" in gitignore and "codex" in dockerignore
    assert (project / "scripts" / "fetch-codex").stat().st_mode & 0o111
    assert answers["harness_rollouts"] is False and "does not carry it" in readme
    assert not list(project.rglob("__pycache__"))
    rendered = [p for p in project.rglob("*") if "tasks" not in p.relative_to(project).parts]
    assert not [p for p in rendered if p.name.endswith(".jinja")]


def test_wheel_pin_is_copied_into_wheels(copie, weird_dataset, runtime_wheel):
    project = render(copie, dataset_path=str(weird_dataset), runtime_pin=str(runtime_wheel))
    copied = project / "wheels" / runtime_wheel.name
    assert copied.read_bytes() == runtime_wheel.read_bytes()
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    # the wheel's exact version, which pip and uv find in wheels/ (searched first)
    assert pyproject["dependency-groups"]["runtime"] == [
        f"harbor-openenv[server]=={RUNTIME_VERSION}"
    ]
    assert pyproject["tool"]["uv"]["find-links"] == ["wheels"]
    assert sorted(p.name for p in (project / "wheels").glob("*.whl")) == [runtime_wheel.name]


# ---------------------------------------------------------------------------------------------
# The dataset copy


def test_rendered_smoke_test_passes_and_catches_two_versions(copie, weird_dataset):
    project = render(copie, dataset_path=str(weird_dataset))
    smoke = [sys.executable, "tests/test_smoke.py"]
    run = subprocess.run(smoke, cwd=project, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok   test_one_version" in run.stdout
    manifest = project / "openenv.yaml"
    manifest.write_text(manifest.read_text().replace('version: "0.1.0"', 'version: "0.2.0"'))
    run = subprocess.run(smoke, cwd=project, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert "openenv.yaml says version 0.2.0, pyproject.toml 0.1.0" in run.stdout


def test_tasks_are_byte_identical(copie, weird_dataset):
    project = render(copie, dataset_path=str(weird_dataset))
    assert tree_digest(project / "tasks") == tree_digest(weird_dataset / "tasks")
    # the Jinja-looking files went through untouched
    foo = project / "tasks" / "alpha" / "environment" / "foo.jinja"
    assert foo.read_text() == "{{ x }} {% if y %}z{% endif %}\n"
    assert (project / "tasks" / "alpha" / "environment" / "same.txt").is_symlink()
    assert verify_manifest(project / MANIFEST_NAME) == []
    lines = (project / MANIFEST_NAME).read_text().splitlines()
    sums = [line for line in lines if not line.startswith("#")]  # '# +x PATH': executable files
    assert "tasks/alpha/task.toml" in {line.split("  ", 1)[1] for line in sums}
    if shutil.which("sha256sum"):
        check = subprocess.run(
            ["sha256sum", "--strict", "-c", MANIFEST_NAME], cwd=project, capture_output=True
        )
        assert check.returncode == 0, check.stdout


def test_bundled_example_dataset_renders_with_counts(copie):
    project = render(copie)  # every default: the bundled example dataset
    example = REPO / "examples" / "dataset" / "tasks"
    assert tree_digest(project / "tasks") == tree_digest(example)
    readme = (project / "README.md").read_text()
    assert "This environment serves **5** tasks" in readme
    assert "| runnable (Docker container per episode) | 4 |" in readme
    assert "| text-only (scored client-side against `solution/patch.diff`) | 1 |" in readme
    assert "`text-only-pr-diff`" in readme
    assert (
        tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"] == project.name
    )
    # the bundled example by its stable name, never the path of copier's temporary clone
    answers = (project / ".copier-answers.yml").read_text()
    assert "dataset_path: bundled:example" in answers and "copier._vcs" not in answers


def test_counts_in_readme(copie, weird_dataset):
    readme = (render(copie, dataset_path=str(weird_dataset)) / "README.md").read_text()
    assert "This environment serves **3** tasks" in readme
    assert "| runnable (Docker container per episode) | 2 |" in readme
    assert "| text-only (scored client-side against `solution/patch.diff`) | 1 |" in readme
    assert "Text-only tasks: `gamma`." in readme
    assert "_The dataset summary is written here" not in readme


def test_tasks_at_dataset_root(copie, tmp_path):
    root = tmp_path / "flat"
    write_task(root / "one")
    write_task(root / "two")
    project = render(copie, dataset_path=str(root))
    assert sorted(p.name for p in (project / "tasks").iterdir()) == ["one", "two"]


def test_the_name_is_the_destination_folders_everywhere(tmp_path):
    """Two repos rendered from one dataset into two folders are named after their folders (the
    image, the Space, the project, compose and Kubernetes): following the second one's README
    cannot overwrite the first one's image. A folder name with no letter or digit falls back to
    the dataset's name."""
    for folder, name in (("example-env", "example-env"), ("Harness_Env", "harness-env")):
        assert run_copier(tmp_path / folder).returncode == 0
        project = tmp_path / folder
        assert tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"] == name
        assert yaml.safe_load((project / "openenv.yaml").read_text())["name"] == name
        assert f"docker build -t {name} ." in (project / "README.md").read_text()
        assert f"  {name}\n" in (project / "README.md").read_text()
        assert (
            f"- name: {name}\n"
            in (project / "deploy/kubernetes/base/kustomization.yaml").read_text()
        )
        other = {"example-env": "harness-env", "harness-env": "example-env"}[name]
        for path in project.rglob("*"):
            if path.is_file() and "tasks" not in path.relative_to(project).parts:
                assert other not in path.read_text(errors="replace"), path
    root = tmp_path / "flat"
    write_task(root / "one")
    assert run_copier(tmp_path / "__", f"dataset_path={root}").returncode == 0
    assert tomllib.loads((tmp_path / "__" / "pyproject.toml").read_text())["project"]["name"] == (
        "flat-env"
    )


# ---------------------------------------------------------------------------------------------
# The copier CLI: relative paths, bad answers (non-zero exit, a message, nothing left behind)


def test_relative_dataset_path_resolves_against_the_working_directory(tmp_path, weird_dataset):
    work = tmp_path / "work" / "sub"
    work.mkdir(parents=True)
    shutil.copytree(weird_dataset, tmp_path / "work" / "data", symlinks=True)
    out = tmp_path / "out"
    run = run_copier(out, "dataset_path=../data", cwd=work)
    assert run.returncode == 0, run.stderr
    assert tree_digest(out / "tasks") == tree_digest(weird_dataset / "tasks")
    # the answer is kept as typed; env_name is the destination folder's name
    answers = yaml.safe_load((out / ".copier-answers.yml").read_text())
    assert answers["dataset_path"] == "../data" and answers["env_name"] == "out"


def invalid_dataset(root: Path) -> Path:
    write_task(root / "tasks" / "good")
    write_task(root / "tasks" / "bad", '[environment]\ncpus = "lots"\n')
    return root


def no_task_dataset(root: Path) -> Path:
    (root / "tasks" / "not-a-task").mkdir(parents=True)
    (root / "tasks" / "not-a-task" / "instruction.md").write_text("hi")
    return root


def escaping_link_dataset(root: Path) -> Path:
    write_task(root / "tasks" / "t")
    (root / "secret.txt").write_text("outside")
    (root / "tasks" / "t" / "leak.txt").symlink_to("../../secret.txt")
    return root


@pytest.mark.parametrize("quiet", [False, True], ids=["validator", "copy-task"])
@pytest.mark.parametrize(
    "make, answer, expected",
    [
        (None, "dataset_path={missing}", "No task found in {missing}|dataset folder not found"),
        (no_task_dataset, "dataset_path={root}", "No task found in {root}|no task directory"),
        (invalid_dataset, "dataset_path={root}", "bad/task.toml: [environment].cpus"),
        (escaping_link_dataset, "dataset_path={root}", "t/leak.txt: symlink to '../../secret.txt'"),
        (None, "runtime_pin=harbor-openenv 0.1", "Not a pin this template understands"),
        (None, "runtime_pin=harbor-openenv", "Not a pin this template understands"),
        (None, "runtime_pin=numpy>=1", "Not a pin this template understands"),
        (
            None,
            "runtime_pin=harbor-openenv @ git+https://x.org/y#subdirectory=runtime",
            "Not a pin",
        ),
        (None, "runtime_pin=/nope/harbor_openenv-0.1.0-py3-none-any.whl", "wheel file not found"),
        (None, "port=0", "Use a port between 1 and 65535"),
        (None, "max_concurrent_envs=0", "Use at least 1"),
        (None, "env_name=Bad Name", "lower-case letters, digits and dashes"),
    ],
)
def test_bad_answers_fail_cleanly(tmp_path, make, answer, expected, quiet):
    root = tmp_path / "dataset"
    if make is not None:
        make(root)
    missing = tmp_path / "missing"
    answer = answer.format(root=root, missing=missing)
    out = tmp_path / "out"
    run = run_copier(out, answer, quiet=quiet)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    alternatives = [e.format(root=root, missing=missing) for e in expected.split("|")]
    assert any(text.lower() in output.lower() for text in alternatives), output
    assert not out.exists(), f"{out} was left behind"


def test_good_pins_pass_the_validator(tmp_path, runtime_wheel):
    for i, pin in enumerate(
        [
            "harbor-openenv==0.1.0",
            "harbor-openenv>=0.1,<0.2",
            "harbor-openenv~=0.1",
            GIT_PIN,
            str(runtime_wheel),
        ]
    ):
        run = run_copier(tmp_path / f"out{i}", f"runtime_pin={pin}", quiet=True)
        assert run.returncode == 0, (pin, run.stderr)


# ---------------------------------------------------------------------------------------------
# copier update: tasks/ untouched, and the dataset is not needed any more


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_update_needs_no_dataset_and_leaves_tasks_alone(tmp_path, weird_dataset):
    # A throwaway template repo: the working tree committed and tagged (copier updates by tag).
    template = tmp_path / "template"
    files = _git("ls-files", "-co", "--exclude-standard", "-z", cwd=REPO).split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (template / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, template / rel)
    _git("init", "-q", "-b", "main", cwd=template)
    _git("add", "-A", cwd=template)
    _git("commit", "-qm", "v0.1.0", cwd=template)
    _git("tag", "v0.1.0", cwd=template)

    dataset = tmp_path / "dataset"
    shutil.copytree(weird_dataset, dataset, symlinks=True)
    project = tmp_path / "env"
    run = run_copier(project, f"dataset_path={dataset}", ref="v0.1.0", src=template)
    assert run.returncode == 0, run.stderr
    _git("init", "-q", cwd=project)
    _git("add", "-A", cwd=project)
    _git("commit", "-qm", "init", cwd=project)
    before = tree_digest(project / "tasks")

    shutil.rmtree(dataset)  # the dataset is gone; the update must not need it
    version = template / "runtime/src/harbor_openenv/_version.py"
    version.write_text(version.read_text().replace(RUNTIME_VERSION, "0.2.0"))
    _git("commit", "-qam", "v0.2.0", cwd=template)
    _git("tag", "v0.2.0", cwd=template)

    update = subprocess.run(
        [
            str(REPO / ".venv/bin/copier") if (REPO / ".venv/bin/copier").exists() else "copier",
            "update",
            "--trust",
            "--defaults",
            "--vcs-ref",
            "v0.2.0",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert update.returncode == 0, update.stderr
    assert tree_digest(project / "tasks") == before
    assert '"harbor-openenv[server]==0.2.0",' in (project / "pyproject.toml").read_text()
    readme = (project / "README.md").read_text()
    assert "This environment serves **3** tasks" in readme and "<<<<<<<" not in readme
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["dataset_path"] == str(dataset) and answers["_commit"] == "v0.2.0"


def test_copy_task_shows_progress_for_big_datasets(tmp_path):
    task = write_task(tmp_path / "big" / "many")
    for i in range(600):
        (task / "environment" / f"f{i:03}.txt").write_text(str(i))
    dest = tmp_path / "env"
    dest.mkdir()
    (dest / "README.md").write_text(
        "<!-- harbor-openenv:dataset-summary:start -->\nx\n"
        "<!-- harbor-openenv:dataset-summary:end -->\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "hooks" / "copy_tasks.py"),
            "--dataset",
            str(tmp_path / "big"),
            "--dest",
            str(dest),
            "--wheel",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "copying tasks: 604/604 files (100%" in run.stderr
    assert run.stderr.count("copying tasks:") <= 25
    assert "serves **1** task:" in (dest / "README.md").read_text()
    assert verify_manifest(dest / MANIFEST_NAME) == []


def test_a_dataset_with_invalid_tasks_renders_only_when_asked(tmp_path):
    """Real datasets carry helper folders with a task.toml and no instruction.md (harbor run
    skips them): refused by default, naming them; with allow_invalid_tasks, copied byte for byte,
    listed, and refused at reset with their reasons."""
    from harbor_openenv.tasks.dataset import Dataset
    from harbor_openenv.tasks.task import TaskKind

    dataset = tmp_path / "dataset"
    write_task(dataset / "good")
    (dataset / "templates" / "base").mkdir(parents=True)
    (dataset / "templates" / "base" / "task.toml").write_text("[verifier]\ntimeout_sec = 60.0\n")

    refused = run_copier(tmp_path / "refused", f"dataset_path={dataset}")
    assert refused.returncode != 0
    assert "templates/base/instruction.md" in refused.stderr
    assert "allow_invalid_tasks=true" in refused.stderr
    assert not (tmp_path / "refused").exists()

    dst = tmp_path / "kept"
    kept = run_copier(dst, f"dataset_path={dataset}", "allow_invalid_tasks=true")
    assert kept.returncode == 0, kept.stderr
    assert "WARNING (invalid, copied as it is, refused at reset): templates/base" in kept.stderr
    assert tree_digest(dst / "tasks") == tree_digest(dataset)
    readme = (dst / "README.md").read_text()
    assert "| invalid (copied as they are; reset refuses them" in readme
    assert "- `templates/base`: instruction.md: missing" in readme  # the id once
    task = Dataset(dst / "tasks")["templates/base"]
    assert task.kind is TaskKind.INVALID and "instruction.md" in task.problems[0]


def test_rendered_readme_states_what_a_user_needs(copie):
    """What the newcomer asked after round two: each is in the rendered README."""
    project = render(copie)
    readme = (project / "README.md").read_text()
    for text in (
        "GET /harbor_openenv/splits",  # the Task API
        "HARBOR_OPENENV_RECORD_DIR",  # recording rollouts
        '-v "$PWD/records:/records"',  # ... to a mounted volume in Docker
        "pip install harbor",  # Harbor's viewer, not a CI venv
        "ENABLE_WEB_INTERFACE",  # the web page
        "--network host` instead",  # a build on an engine without a bridge network
        "uv.lock",  # what to do with the lock `uv run` writes
        ".sync()",  # OpenEnv's async client
        "Docker Compose v2",  # where `docker compose` comes from
        "session utilization",  # the HPA's metric
    ):
        assert text in readme, text
    assert "active sessions" not in readme
    assert ".venv/bin/harbor" not in readme and "harbor-venv" not in readme
    assert "uv.lock" in (project / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize(
    "picked, size",
    [
        ([], None),
        (["opencode"], 362),
        (["gemini-cli", "qwen-code"], 348),
        (["pi"], 248),
        (["claude-code"], 753),
        (["aider"], 711),
    ],
)
def test_the_picked_cached_harnesses_get_their_fill_command(copie, picked, size):
    """The answer ``cached_harnesses``: none gives the update that picks one; a pick gives the
    command that fills harnesses/ with those, its size (node once for the Node harnesses), and the
    run line that mounts it; harnesses/ is neither committed nor built in."""
    project = render(copie, cached_harnesses=picked)
    readme = (project / "README.md").read_text()
    assert "/harnesses/" in (project / ".gitignore").read_text().splitlines()
    assert "harnesses" in (project / ".dockerignore").read_text().splitlines()
    if not picked:
        assert "harbor-openenv:road:harness-cache" not in readme
        assert "update -d 'cached_harnesses=[opencode]'" in " ".join(readme.split())
        return
    block = readme.split("<!-- harbor-openenv:road:harness-cache -->\n```bash\n")[1]
    fill = block.splitlines()[0]
    uv_run = "uv run --with pip" if "aider" in picked else "uv run"  # aider's fill runs pip
    assert fill.startswith(f"{uv_run} harbor-openenv harnesses fill harnesses {' '.join(picked)} ")
    assert f"once (about {size} MB" in readme
    assert "-e HARBOR_OPENENV_HARNESS_CACHE=/opt/harnesses" in block.split("```")[0]
    assert f'# or "codex", "{picked[0]}"' in readme


def test_the_terminus_answer_carries_harbor_and_fills_tmux(copie):
    """The answer ``terminus_rollouts`` (asked with ``harness_rollouts``): the runtime's harbor
    extra in pyproject.toml, tmux in the fill command (its 5 MB counted), terminus-2 in the
    rollout call's comment; without harness rollouts it is not asked and Harbor stays out."""
    project = render(copie, harness_rollouts=True, terminus_rollouts=True)
    assert '"harbor-openenv[server,harness,harbor]==' in (project / "pyproject.toml").read_text()
    readme = (project / "README.md").read_text()
    block = readme.split("<!-- harbor-openenv:road:harness-cache -->\n```bash\n")[1]
    assert block.startswith("uv run harbor-openenv harnesses fill harnesses tmux ")
    assert "once (about 5 MB" in readme and "This image carries Harbor" in readme
    assert '# or "codex", "terminus-2"' in readme
    plain = render(copie, harness_rollouts=False, terminus_rollouts=True)
    assert '"harbor-openenv[server]==' in (plain / "pyproject.toml").read_text()
    assert "This image does not carry Harbor" in (plain / "README.md").read_text()


@pytest.mark.parametrize("image", ["python:3.11-slim", "python:3.9"])
def test_terminus_on_an_older_python_is_one_clear_error(tmp_path, image):
    out = tmp_path / "out"
    answers = ("harness_rollouts=true", "terminus_rollouts=true", f"base_image={image}")
    run = run_copier(out, *answers, quiet=True)
    assert run.returncode != 0, run.stdout + run.stderr
    expected = f"needs Python 3.12 or later in the image (Harbor does), and base_image is {image}"
    assert expected in " ".join((run.stdout + run.stderr).split())
    assert not out.exists()


def test_the_harness_choices_are_the_runtimes_cached_harnesses():
    """copier.yml's ``cached_harnesses`` choices and its size table name exactly the harnesses of
    the runtime's harness cache (its BUILDS but the runtimes they run on, node), and node's size
    is counted for the harnesses that run on it."""
    from harbor_openenv.harness.cache import BUILDS

    runtimes = {build.runtime for build in BUILDS.values()}
    harnesses = sorted(name for name in BUILDS if name not in runtimes)
    config = yaml.safe_load((REPO / "copier.yml").read_text())
    assert config["cached_harnesses"]["choices"] == harnesses
    sizes = config["harness_cache_mb"]["default"]
    assert sorted(re.findall(r'"([a-z-]+)": \d+', sizes)) == harnesses, sizes
    # node counted once beside exactly the harnesses that run on it
    on_node = sorted(name for name, build in BUILDS.items() if build.runtime == "node")
    assert f"for name in {on_node!r}".replace("'", '"') in sizes, sizes


def test_an_update_to_a_release_removes_the_unreleased_runtime_wheels(tmp_path):
    """The update's after-migration without --build-runtime (the new version is a published
    release): wheels an unreleased version built (their local label +src.) go, others stay."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    built = wheels / "harbor_openenv-0.2.0.dev0+src.abc123-py3-none-any.whl"
    filled = [wheels / "harbor_openenv-0.2.0-py3-none-any.whl", wheels / "numpy-2.0-cp311.whl"]
    for path in (built, *filled):
        path.write_bytes(b"wheel")
    hook = Path(__file__).resolve().parents[2] / "hooks" / "copy_tasks.py"
    result = subprocess.run(
        [sys.executable, str(hook), "--runtime-wheel-only", "--dest", str(tmp_path)]
        + ["--build-runtime", ""],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(wheels.iterdir()) == sorted(filled)
    assert f"removed {built.name}" in result.stderr
