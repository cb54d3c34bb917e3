"""``python -m services.entrypoints.cli``: the ``palimpsest`` command."""

from services.entrypoints.cli import main

if __name__ == "__main__":  # importing it (a walk of the package) runs nothing
    main()
