"""C packaging: `cmake --install` into a temporary prefix, then the README's C example built
against it through pkg-config (shared, static, and from a moved prefix: kiln.pc is relocatable)
and through the CMake package (kiln::kiln, kiln::kiln_static), each run on a model."""
import os
import re
import shutil
import subprocess

import pytest

import models
from conftest import BUILD, ROOT

pytestmark = pytest.mark.skipif(
    not (BUILD / "libkiln.a").is_file() or not all(shutil.which(t) for t in ("cmake", "cc", "pkg-config")),
    reason="needs the CMake build tree (KILN_BUILD_DIR) with the libraries, cmake, cc and pkg-config")


def sh(cmd, **kw):
    r = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix") / "kiln"
    sh(["cmake", "--install", str(BUILD), "--prefix", str(p), "--component", "c"])
    return p


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"```c\n(.*?)```", readme, re.S)
    assert m, "README.md has no C example"
    d = tmp_path_factory.mktemp("example")
    (d / "example.c").write_text(m.group(1))
    (d / "model.onnx").write_bytes(models.image_model())
    return d


def libdir(prefix):
    return next(p.parent for p in prefix.rglob("libkiln.a"))


def run_example(exe, example, env=None):
    out = sh([str(exe), str(example / "model.onnx")], env=dict(os.environ, **(env or {})))
    assert out.startswith("logits: 3 elements"), out


def test_installed_files(prefix):
    ld = libdir(prefix)
    assert (prefix / "include" / "kiln.h").is_file()
    assert (ld / "pkgconfig" / "kiln.pc").is_file()
    assert (ld / "cmake" / "kiln" / "kilnConfig.cmake").is_file()
    assert any(ld.glob("libkiln.so*"))
    pc = (ld / "pkgconfig" / "kiln.pc").read_text()
    assert "${pcfiledir}" in pc and str(prefix) not in pc


def test_pkg_config_shared(prefix, example, tmp_path):
    ld = libdir(prefix)
    env = dict(os.environ, PKG_CONFIG_PATH=str(ld / "pkgconfig"))
    flags = sh("pkg-config --cflags --libs kiln", env=env).split()
    assert f"-I{prefix}/include" in [os.path.normpath(f) if f.startswith("-I") else f for f in flags] or \
        any(os.path.samefile(f[2:], prefix / "include") for f in flags if f.startswith("-I"))
    exe = tmp_path / "example"
    sh(["cc", str(example / "example.c"), "-o", str(exe), *flags, f"-Wl,-rpath,{ld}"])
    run_example(exe, example)


def test_pkg_config_moved_prefix(prefix, example, tmp_path):
    moved = tmp_path / "elsewhere"
    shutil.copytree(prefix, moved, symlinks=True)
    ld = libdir(moved)
    env = dict(os.environ, PKG_CONFIG_PATH=str(ld / "pkgconfig"))
    flags = sh("pkg-config --cflags --libs kiln", env=env).split()
    assert str(prefix) not in " ".join(flags)
    exe = tmp_path / "example"
    sh(["cc", str(example / "example.c"), "-o", str(exe), *flags])
    run_example(exe, example, {"LD_LIBRARY_PATH": str(ld)})


def test_pkg_config_static(prefix, example, tmp_path):
    static = tmp_path / "static"
    shutil.copytree(prefix, static, symlinks=True)
    ld = libdir(static)
    for so in ld.glob("libkiln.so*"):
        so.unlink()  # -lkiln can only be the static library: Libs.private must be complete
    env = dict(os.environ, PKG_CONFIG_PATH=str(ld / "pkgconfig"))
    flags = sh("pkg-config --static --cflags --libs kiln", env=env).split()
    exe = tmp_path / "example"
    sh(["cc", str(example / "example.c"), "-o", str(exe), *flags])
    assert "libkiln" not in sh(["ldd", str(exe)])
    run_example(exe, example)


@pytest.mark.parametrize("target", ["kiln::kiln", "kiln::kiln_static"])
def test_cmake_package(prefix, example, tmp_path, target):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(example / "example.c", src / "example.c")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(example C)\n"
        "find_package(kiln 0.1 REQUIRED)\nadd_executable(example example.c)\n"
        f"target_link_libraries(example PRIVATE {target})\n")
    b = tmp_path / "b"
    sh(["cmake", "-S", str(src), "-B", str(b), f"-DCMAKE_PREFIX_PATH={prefix}"])
    sh(["cmake", "--build", str(b)])
    run_example(b / "example", example)
