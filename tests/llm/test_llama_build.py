"""scripts/llama_build.cmake: the server-side C++ is compiled at -O1 (in unity batches), the kernels as shipped.

Configures (does not build) the pinned llama.cpp from the llama-cpp-python sdist through ``scripts/llama_setup.sh``'s
own ``source`` and ``configure`` steps, and reads the compile commands cmake generates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rerankeval.core.paths import ROOT

SETUP = ROOT / "scripts" / "llama_setup.sh"


@pytest.fixture(scope="module")
def compile_commands(tmp_path_factory) -> dict[str, str]:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (scripts/llama_setup.sh needs it too)")
    work = tmp_path_factory.mktemp("llama-src")
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(SETUP), "source", str(work)], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"could not download the llama-cpp-python sdist from the package registry: {r.stderr[-300:]}")
    src, build = Path(r.stdout.strip()), work / "build"
    r = subprocess.run(
        ["bash", str(SETUP), "configure", str(src), str(build), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "llama_build.cmake" not in r.stderr, r.stderr[-3000:]  # its warning: a target it names is missing

    def name(file: str) -> str:  # relative to the source tree, or "build/..." for generated (unity) files
        p = Path(file)
        return str(p.relative_to(src)) if p.is_relative_to(src) else f"build/{p.relative_to(build)}"

    return {name(e["file"]): e["command"] for e in json.loads((build / "compile_commands.json").read_text())}


def last_opt(command: str) -> str:
    return re.findall(r"(?<!\S)-O[0-3s]\b", command)[-1]  # gcc and clang take the last -O


def test_kernels_and_the_llama_library_keep_the_release_flags(compile_commands):
    kernels = [f for f in compile_commands if f.startswith("ggml/src/ggml-cpu/")]
    assert kernels and all(last_opt(compile_commands[f]) == "-O3" for f in kernels)
    library = [f for f in compile_commands if f.startswith(("src/", "build/src/CMakeFiles/llama.dir/"))]
    assert library and all(last_opt(compile_commands[f]) == "-O3" for f in library)


def test_server_side_code_is_built_at_o1_in_unity_batches(compile_commands):
    for f in ("vendor/cpp-httplib/httplib.cpp", "common/json.cpp", "tools/mtmd/clip.cpp"):
        assert last_opt(compile_commands[f]) == "-O1", f
    unity = [f for f in compile_commands if "/Unity/" in f and f.startswith(("build/common/", "build/tools/server/"))]
    assert len(unity) >= 3 and all(last_opt(compile_commands[f]) == "-O1" for f in unity)
    assert "tools/server/server-context.cpp" not in compile_commands  # compiled inside a unity batch


def test_the_kernels_are_built_without_amx(compile_commands):
    """-march=native would turn on ggml's AMX kernels on an AMX CPU, which segfault (llama.cpp issue 20824)."""
    kernels = [f for f in compile_commands if f.startswith("ggml/src/ggml-cpu/")]
    assert any(f.startswith("ggml/src/ggml-cpu/amx/") for f in kernels)  # compiled, but guarded by __AMX_INT8__
    for f in kernels:
        flags = compile_commands[f].split()
        assert {"-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"} <= set(flags), f
        # a later -mamx-* would switch them back on; -march=native does not (explicit -mno-* win in gcc and clang)
        assert not any(x.startswith("-mamx") for x in flags), f


def _server_path(tmp_path: Path, flags: str) -> Path:
    cpuinfo = tmp_path / f"cpuinfo-{abs(hash(flags))}"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    env = {**os.environ, "RERANKEVAL_CACHE": str(tmp_path / "cache"), "RERANKEVAL_CPUINFO": str(cpuinfo)}
    r = subprocess.run(["bash", str(SETUP), "server-path"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())


def test_a_build_for_another_cpu_is_not_reused(tmp_path):
    """The cached binary's folder is keyed by the CPU's instruction-set flags: a build made on an AVX-512/AMX
    CPU (a shared home, a CI cache volume) is not found, so not run, on an AVX2-only CPU, and the other way round."""
    amx = _server_path(tmp_path, "fpu sse sse2 ssse3 avx avx2 fma f16c avx512f avx512_vnni amx_tile amx_int8")
    avx2 = _server_path(tmp_path, "fpu sse sse2 ssse3 avx avx2 fma f16c hypervisor")
    assert amx != avx2 and amx.parent.parent.parent == avx2.parent.parent.parent  # .../llama.cpp/<ver>-<cpu>/bin
    amx.parent.mkdir(parents=True)
    amx.write_text("#!/bin/sh\nexit 0\n")
    assert _server_path(tmp_path, "fpu sse sse2 ssse3 avx avx2 fma f16c hypervisor") == avx2 and not avx2.exists()
    # flags that say nothing about the instruction set (a hypervisor bit, the order) do not force a rebuild
    assert _server_path(tmp_path, "avx2 fma hypervisor sse f16c fpu ssse3 avx sse2 constant_tsc") == avx2
