from tests.integration.conftest import admin_db, pg_settings, runtime_db  # noqa: F401
