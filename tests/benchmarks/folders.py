"""The data folder a benchmark runs in."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infra.embedded_pg import release_embedded


@contextmanager
def bench_folder(data_dir: Path | None, keep: bool, prefix: str) -> Iterator[Path]:
    """``data_dir``, or a temporary folder removed at the end unless ``keep``; the embedded
    server this process joined (to read the figures) is left before the folder goes."""
    folder = data_dir or Path(tempfile.mkdtemp(prefix=prefix))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"data folder {folder}", flush=True)
    try:
        yield folder
    finally:
        release_embedded(folder / "data")
        if data_dir is None and not keep:
            shutil.rmtree(folder, ignore_errors=True)
