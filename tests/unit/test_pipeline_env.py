"""The pipeline's projector child is configured by environment: its ``Settings()`` must equal the
pipeline's own, nested, secret and unset fields included."""

from __future__ import annotations

import subprocess
import sys

from infra.settings import Settings
from services.entrypoints.children import settings_env


def test_a_child_process_reads_the_same_settings(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PALIMPSEST_KAFKA_BOOTSTRAP", "elsewhere:9092")  # unset in the settings below
    monkeypatch.setenv("PALIMPSEST_RETRIEVAL__TOP_N", "3")
    settings = Settings(data_dir="/tmp/somewhere", projector_batch=77, retrieval={"top_n": 9},
                        runtime_password="secret", kafka_bootstrap=None)
    child = subprocess.run(
        [sys.executable, "-c", "from infra.settings import Settings; import sys; "
         "s = Settings(); sys.stdout.write(s.model_dump_json()); "
         "sys.stderr.write(s.runtime_password.get_secret_value())"],
        env=settings_env(settings), capture_output=True, text=True, check=True, timeout=60)
    assert child.stdout == settings.model_dump_json()  # secrets masked here, checked below
    assert child.stderr == "secret"
