"""Builds hotpath._C with the project's CMake (pyproject.toml says why setuptools).

The extension is the CMake target hotpath_python, built in $HOTPATH_BUILD_DIR (default build-pip/) against the
torch of the python running this build: so pass --no-build-isolation, or pip builds in an environment without
the torch the module must link. $HOTPATH_JOBS sets the parallel compile jobs (default 2).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True)
        if probe.returncode != 0:
            sys.exit(
                f"hotpath: {sys.executable} cannot import torch, which hotpath._C links: install it first and "
                "build with `pip install --no-build-isolation .`"
            )
        # Beside build/, at the same depth: ccache (CCACHE_BASEDIR) then hashes the same relative paths and hits.
        build = Path(os.environ.get("HOTPATH_BUILD_DIR", ROOT / "build-pip"))
        python = sys.executable
        # The project venv through its stable link (…/hotpath/venv → venv-<hash>), as scripts/build configures it:
        # the compile commands then name the same torch headers, and ccache hits what `make test` compiled.
        link = Path(os.environ.get("HOTPATH_CACHE", Path.home() / ".cache" / "hotpath")) / "venv"
        if (link / "bin" / "python").exists() and link.resolve() == Path(sys.prefix).resolve():
            python = str(link / "bin" / "python")
        env = dict(os.environ)
        env.setdefault("CCACHE_DIR", str(Path.home() / ".cache" / "ccache"))
        env.setdefault("CCACHE_BASEDIR", str(ROOT))
        env.setdefault("CCACHE_NOHASHDIR", "true")
        subprocess.run(
            ["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             f"-DHOTPATH_PYTHON={python}", "-DHOTPATH_BUILD_TESTS=OFF", "-DHOTPATH_PYTHON_API=ON"],
            check=True, env=env)
        subprocess.run(["cmake", "--build", str(build), "--target", "hotpath_python", "--",
                        "-j", os.environ.get("HOTPATH_JOBS", "2")], check=True, env=env)
        package = build / "python" / "hotpath"
        built = next(package.glob("_C.*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)
        shutil.copyfile(package / "_build_info.py", target.parent / "_build_info.py")


# egg-info beside the CMake build (ignored), not in the checkout's root.
EGG_BASE = Path(os.environ.get("HOTPATH_BUILD_DIR", ROOT / "build-pip"))
EGG_BASE.mkdir(parents=True, exist_ok=True)
setup(
    ext_modules=[Extension("hotpath._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"egg_info": {"egg_base": os.path.relpath(EGG_BASE, ROOT)}},
)
