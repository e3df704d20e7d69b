"""The harness cache's logic without an engine or npm: a Node harness's package kept from its npm
pack with the launcher that runs it on the cache's node (executed here, a stand-in node), one
installed with its dependencies for its platform (a stand-in npm) and no link kept, the
instruction and model put where Harbor's command had them, quoted as Harbor quotes them, and a
cache without the runtime a harness needs named in one line (the real runs:
tests/engine/test_harness_cached.py)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harbor_openenv.config import Settings
from harbor_openenv.harness import cached
from harbor_openenv.harness.base import HarnessError
from harbor_openenv.harness.cache import BUILDS, _install, _launcher, _unpack


def pack(path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def test_a_node_harness_keeps_its_package_and_runs_on_the_caches_node(tmp_path):
    build = BUILDS["gemini-cli"]
    tgz = tmp_path / "gemini.tgz"
    pack(tgz, {"package/package.json": b"{}", "package/bundle/gemini.js": b"// the bundle"})
    target = tmp_path / "cache" / "gemini-cli" / "linux-x64"
    _unpack(tgz, build.files, target)
    assert (target / "lib" / "package.json").read_bytes() == b"{}"
    _launcher(build, "linux-x64", target)
    node = tmp_path / "cache" / "node" / "linux-x64" / "bin" / "node"
    node.parent.mkdir(parents=True)
    node.write_text('#!/bin/sh\necho "node $*"\n')  # a stand-in: prints what it was given
    node.chmod(0o755)
    ran = subprocess.run(
        [str(target / "bin" / "gemini"), "--yolo", "a b"], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split(" ", 1)[1].strip() == f"{target}/bin/../lib/bundle/gemini.js --yolo a b"


def test_a_pack_without_the_folder_or_script_is_one_error(tmp_path):
    tgz = tmp_path / "other.tgz"
    pack(tgz, {"other/x.js": b""})
    with pytest.raises(HarnessError, match=r"other\.tgz has no file package/"):
        _unpack(tgz, BUILDS["qwen-code"].files, tmp_path / "out")
    with pytest.raises(HarnessError, match=r"no script lib/cli-entry\.js to run on node"):
        _launcher(BUILDS["qwen-code"], "linux-x64", tmp_path / "out")


NPM = """#!/bin/sh
# a stand-in npm: records its arguments, installs a package with npm's .bin link and one more
echo "$@" > "$ARGS"
while [ "$1" != --prefix ]; do shift; done
mkdir -p "$2/node_modules/.bin" "$2/node_modules/pkg/dist"
echo '// cli' > "$2/node_modules/pkg/dist/cli.js"
ln -s ../pkg/dist/cli.js "$2/node_modules/.bin/pkg"
ln -s /etc/passwd "$2/node_modules/pkg/outside"
"""


@pytest.mark.parametrize(
    ("platform", "flags"),
    [
        ("linux-x64", "--os=linux --cpu=x64 --libc=glibc"),
        ("linux-arm64-musl", "--os=linux --cpu=arm64 --libc=musl"),
    ],
)
def test_a_tree_build_is_installed_for_its_platform_no_script_run_no_link_kept(
    tmp_path, monkeypatch, platform, flags
):
    npm = tmp_path / "bin" / "npm"
    npm.parent.mkdir()
    npm.write_text(NPM)
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", f"{npm.parent}:/usr/bin:/bin")
    monkeypatch.setenv("ARGS", str(tmp_path / "args"))
    lib = tmp_path / "lib"
    _install(BUILDS["pi"], platform, lib)
    args = (tmp_path / "args").read_text().split()
    assert (
        args[:2] == ["install", "--silent"] and args[-1] == "@earendil-works/pi-coding-agent@1.6.0"
    )
    assert {"--ignore-scripts", "--omit=dev", "--no-save", *flags.split()} <= set(args)
    kept = sorted(str(p.relative_to(lib)) for p in lib.rglob("*"))
    assert kept == [
        "node_modules",
        "node_modules/pkg",
        "node_modules/pkg/dist",
        "node_modules/pkg/dist/cli.js",
    ]


def command_of(instruction: str, model: str = "scripted") -> str:
    harness = cached.CachedHarness(BUILDS["gemini-cli"], cached.GOOGLE, cached.exit_code_failure)
    endpoint = SimpleNamespace(model=model, base_url="http://127.0.0.1:1")
    run = SimpleNamespace(instruction=instruction, model=endpoint)
    recorded = "printf '%s\\n' --model=harbor-openenv-model --prompt=harbor-openenv-instruction"
    return harness.command(recorded, run)  # type: ignore[arg-type]


def run_as_harness(command: str, instruction: str) -> subprocess.CompletedProcess[bytes]:
    """``command`` with the environment a step gets: the instruction in its variable."""
    return subprocess.run(
        ["bash", "-c", command], env={cached.INSTRUCTION: instruction}, capture_output=True
    )


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1))
def test_the_instruction_reaches_the_harness_verbatim(instruction):
    ran = run_as_harness(command_of(instruction), instruction)
    assert ran.stdout == f"--model=scripted\n--prompt={instruction}\n".encode()


def test_a_placeholder_inside_a_value_is_not_replaced_again():
    command = command_of("say harbor-openenv-model", model="harbor-openenv-instruction")
    ran = run_as_harness(command, "say harbor-openenv-model")
    assert (
        ran.stdout.decode()
        == "--model=harbor-openenv-instruction\n--prompt=say harbor-openenv-model\n"
    )


def test_a_cache_without_node_names_it(tmp_path):
    (tmp_path / "gemini-cli").mkdir()
    (tmp_path / "gemini-cli" / "harness.json").write_text("{}")
    with pytest.raises(HarnessError, match=f"the harness cache {tmp_path} holds no node"):
        cached.from_settings("gemini-cli", Settings(harness_cache=tmp_path))


def test_aiders_wheels_are_the_ones_the_folders_glibc_loads():
    """aider's folder carries bookworm's glibc (2.36): pip takes a wheel built for it or older,
    never a newer one, whatever the filling host's own glibc."""
    from harbor_openenv.harness.wheels import GLIBC, manylinux_tags

    tags = manylinux_tags("x86_64")
    assert GLIBC == (2, 36) and tags[0] == "manylinux_2_36_x86_64"
    assert tags[-2:] == ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    assert len(tags) == len(set(tags)) == 21
