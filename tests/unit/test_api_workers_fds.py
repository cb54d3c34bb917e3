"""What an HTTP worker is handed is never numbered 0, 1 or 2: a ``serve`` started with a standard
stream closed gets those numbers for new files, and the child would take them for its own stream."""

from __future__ import annotations

import os

from services.entrypoints.api_workers import above_stdio


def test_a_descriptor_among_the_standard_ones_is_moved_above_them() -> None:
    saved = os.dup(0)
    try:
        os.close(0)
        read, write = os.pipe()  # the lowest free number: 0
        assert read == 0
        moved = above_stdio(read)
        assert moved > 2 and os.get_inheritable(moved) is False
        os.write(write, b"ready\n")
        assert os.read(moved, 6) == b"ready\n"
        os.close(moved)
        os.close(write)
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_a_descriptor_above_them_is_kept() -> None:
    read, write = os.pipe()
    try:
        assert above_stdio(write) == write
    finally:
        os.close(read)
        os.close(write)
