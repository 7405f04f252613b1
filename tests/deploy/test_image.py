"""The image build is reproducible and lean: every base image pinned by digest, every pip
install pinned, the pins cover every runtime dependency pyproject declares (so the two cannot
drift apart), and the embedded Postgres (the `embedded` extra) is not in the image."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILES = sorted(DEPLOY.rglob("Dockerfile"))
CONSTRAINTS = DEPLOY / "constraints.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def pins(path: Path) -> dict[str, Version]:
    """`name==version` lines of a requirements or constraints file; anything else fails."""
    found: dict[str, Version] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        (spec,) = req.specifier  # exactly one clause
        assert spec.operator == "==", f"{path.name}: {line!r} is not pinned with =="
        found[canonicalize_name(req.name)] = Version(spec.version)
    return found


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_there_are_dockerfiles() -> None:
    assert DEPLOY / "Dockerfile" in DOCKERFILES
    assert DEPLOY / "receiver" / "Dockerfile" in DOCKERFILES


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_base_image_is_pinned_by_digest(dockerfile: Path) -> None:
    stages: set[str] = set()
    for word, args in instructions(dockerfile):
        if word != "FROM":
            continue
        image, *alias = args.split()
        if image not in stages:  # a stage of this file (FROM base) is pinned where it is made
            assert DIGEST.search(image), f"{dockerfile}: FROM {image} is not pinned by digest"
            tag = image.split("@", 1)[0]
            assert ":" in tag, f"{dockerfile}: FROM {image} names no tag"
        if alias:
            assert alias[0].upper() == "AS"
            stages.add(alias[1])


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_pip_install_is_pinned(dockerfile: Path) -> None:
    """Each `pip install` installs only pinned versions: under a constraints file (the
    PIP_CONSTRAINT environment or `-c`), or from a requirements file of `==` pins only."""
    steps = instructions(dockerfile)
    env = " ".join(args for word, args in steps if word == "ENV")
    constrained = re.search(r"PIP_CONSTRAINT=(\S+)", env)
    runs = [args for word, args in steps if word == "RUN" and "pip install" in args]
    assert runs, f"{dockerfile} installs nothing with pip"
    for run in runs:
        for install in re.findall(r"pip install ([^&;]*)", run):
            args = install.split()
            if constrained or "-c" in args or "--constraint" in args:
                continue
            assert "-r" in args, f"{dockerfile}: `pip install {install}` is not pinned"
            # The file it names, next to the Dockerfile (COPY ... /app/requirements.txt).
            name = Path(args[args.index("-r") + 1]).name
            assert pins(dockerfile.parent / name), f"{name} pins nothing"


def test_the_image_installs_with_the_constraints_file() -> None:
    steps = instructions(DEPLOY / "Dockerfile")
    env = " ".join(args for word, args in steps if word == "ENV")
    constrained = re.search(r"PIP_CONSTRAINT=(\S+)", env)
    assert constrained, "deploy/Dockerfile sets no PIP_CONSTRAINT"
    copies = [args.split() for word, args in steps if word == "COPY"]
    workdir = next(args for word, args in steps if word == "WORKDIR")
    # The constraints file is copied to where PIP_CONSTRAINT points, before any pip install.
    assert ["deploy/constraints.txt", "./"] in copies
    assert constrained.group(1) == f"{workdir}/{CONSTRAINTS.name}"
    # ...and the build context lets it in (everything else is ignored).
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert "!deploy/constraints.txt" in ignore


def runtime_requirements() -> list[Requirement]:
    return [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]


def test_every_runtime_dependency_is_pinned_in_the_constraints() -> None:
    pinned = pins(CONSTRAINTS)
    for req in runtime_requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} (pyproject) is not pinned in {CONSTRAINTS.name}"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"{CONSTRAINTS.name} pins {req.name}=={pinned[name]}, outside pyproject's {req}"
        )


def test_the_wheel_build_is_pinned_too() -> None:
    """PIP_CONSTRAINT reaches the isolated build environment: its setuptools is pinned, and
    within what [build-system] asks for."""
    pinned = pins(CONSTRAINTS)
    for raw in PYPROJECT["build-system"]["requires"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} (build-system) is not pinned in {CONSTRAINTS.name}"
        assert req.specifier.contains(pinned[name])


def test_the_image_has_no_embedded_postgres() -> None:
    """pgserver is the `embedded` extra, not a runtime dependency, and the image's pins leave
    it out."""
    extra = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["embedded"]]
    embedded = {canonicalize_name(r.name) for r in extra}
    assert embedded == {"pgserver"}
    assert not embedded & {canonicalize_name(r.name) for r in runtime_requirements()}
    assert not embedded & set(pins(CONSTRAINTS))
