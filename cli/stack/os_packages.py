"""The OS packages a local service needs (PostgreSQL, Maven, a JRE), installed with apt-get when missing."""

from __future__ import annotations

import os
import subprocess

from streamfill.errors import StackError

__all__ = ["install_os_packages"]


def install_os_packages(*packages: str) -> None:
    """apt-get install packages; needs root (the local stack installs what it runs)."""
    if os.geteuid() != 0:
        raise StackError(f"{', '.join(packages)} not installed and not running as root: "
                         f"install them with `sudo apt-get install -y {' '.join(packages)}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"`{' '.join(cmd)}` failed:\n{done.stderr[-2000:]}")
