"""The override file a compose task's project starts with (sandbox/compose.py), built from the
project's resolved model alone: labels everywhere, the keeper as main's PID 1, the limits."""

from __future__ import annotations

from harbor_openenv.sandbox.compose import compose_override

LABELS = {"harbor-openenv": "1"}


def override(model, **options):
    settings = {
        "labels": LABELS,
        "user": "app",
        "entrypoint": ["/entry.sh"],
        "env": {"A": "1"},
        "pids_limit": 256,
        "workdir": "/work",
        "no_network": True,
        "build_network": "host",
        **options,
    }
    return compose_override(model, **settings)


MODEL = {
    "services": {
        "main": {"image": "task", "command": ["serve"]},
        "db": {"build": {"context": "."}},
    },
    "networks": {"default": {}, "shared": {"external": True}},
    "volumes": {"data": None},
}


def test_every_service_network_and_volume_is_labelled_and_main_runs_the_keeper():
    made = override(MODEL)
    assert made["services"]["db"] == {"labels": LABELS, "build": {"network": "host"}}
    main = made["services"]["main"]
    assert (main["user"], main["init"], main["stdin_open"]) == ("0", False, True)
    assert main["entrypoint"][0] != "/entry.sh"  # the keeper's, whatever the task's file says
    assert "app" in main["command"] and "serve" in main["command"]
    assert (main["environment"], main["working_dir"], main["pids_limit"]) == (
        {"A": "1"},
        "/work",
        256,
    )
    assert made["networks"] == {"default": {"labels": LABELS, "internal": True}}  # not external
    assert made["volumes"] == {"data": {"labels": LABELS}}


def test_the_pids_limit_goes_beside_the_tasks_own_deploy_limits():
    limited = {"services": {"main": {"deploy": {"resources": {"limits": {"cpus": "1"}}}}}}
    main = override(limited)["services"]["main"]
    assert main["deploy"] == {"resources": {"limits": {"pids": 256}}} and "pids_limit" not in main
    own = {"services": {"main": {"pids_limit": 10}}}
    assert "pids_limit" not in override(own)["services"]["main"]  # the task's own stands
    bare = override({"services": {"main": None}}, pids_limit=None, workdir=None, no_network=False)
    assert (
        "pids_limit" not in bare["services"]["main"]
        and "working_dir" not in bare["services"]["main"]
    )
