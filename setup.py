"""Package discovery (everything else is in pyproject.toml).

infoprobe/ installs as itself; the pillars hooks/, probes/ and tasks/, which sit at the
repository root, install under it (infoprobe.hooks, ...). Every package below them is
found by setuptools' find_packages, so a new subpackage can never be left out of a wheel.
"""

from setuptools import find_packages, setup

PILLARS = ("hooks", "probes", "tasks")


def found(folder: str, name: str) -> dict[str, str]:
    """``{installed package name: its folder}`` for ``folder`` and every package under it."""
    packages = {name: folder}
    for sub in find_packages(folder):
        packages[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages


PACKAGES = found("infoprobe", "infoprobe")
for pillar in PILLARS:
    PACKAGES |= found(pillar, f"infoprobe.{pillar}")

setup(packages=sorted(PACKAGES), package_dir=PACKAGES)
